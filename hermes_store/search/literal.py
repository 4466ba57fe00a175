"""The literal tier: one statement answering `reading.read_query`'s reading of a query
on either backend, from the id sets the backend's indexes give.

A literal L matches a row when the row's content, tool name or tool calls contain L,
ASCII letters folded (`reading.fold`), and an index can vouch for the place:

- L of 3 or more characters: anywhere in a non-tool row (the trigram index, which
  covers non-tool rows only, as the v23 layout does on both backends);
- L holding letters or digits: in any row where its words stand as a phrase (the word
  index, which covers tool rows too), so in tool output a literal is found where it
  starts and ends on word boundaries;
- L shorter than 3 characters and made of punctuation only (`%`, `->`): a scan of every
  row, since no index holds it.

Each id set is a CTE, materialised once and used twice: the union of one id set per
AND-group drives the statement (rowid lookups, never a scan of `messages` unless a
group holds nothing but a short punctuation literal) and the groups' conditions decide.
"""

from __future__ import annotations

from typing import Any

from .backend import Hit, SearchBackend
from .common import Filters, oldest_first
from .query import like_pattern
from .reading import TRIGRAM_CHARS, Parsed, Term, fold, words_of
from .snippets import terms_snippet

_COLUMNS = tuple(f"COALESCE(m.{c}, '')" for c in ("content", "tool_name", "tool_calls"))
_SELECT = (
    "SELECT m.id, m.session_id, m.role, m.content AS body, m.tool_name, m.tool_calls AS calls,"
    " m.timestamp, s.source, s.model, s.started_at AS session_started"
    " FROM messages AS m JOIN sessions AS s ON s.id = m.session_id"
)


class _Statement:
    def __init__(self, backend: SearchBackend, filters: Filters) -> None:
        self.backend = backend
        self.filters = filters
        self.params: dict[str, Any] = {}
        self.ctes: list[str] = []

    def ids(self, select: str) -> str:
        name = f"ids{len(self.ctes)}"
        self.ctes.append(f"{name}(id) AS ({select})")
        return name

    def words(self, terms: list[Term]) -> tuple[str, str]:
        name = self.ids(self.backend.word_ids(terms, self.params))
        return f"m.id IN (SELECT id FROM {name})", name  # noqa: S608

    def literal(self, literal: str) -> tuple[str, str | None]:
        """The condition for `literal` and the id set that can drive it (None: a scan)."""
        needle, pattern = f"lit{len(self.params)}", f"pat{len(self.params)}"
        self.params[needle] = fold(literal)
        self.params[pattern] = like_pattern(literal)
        exact = " OR ".join(self.backend.contains(column, needle, pattern) for column in _COLUMNS)
        sources = []
        long_enough = len(literal) >= TRIGRAM_CHARS
        if long_enough:
            substring = self.backend.substring_ids(literal, self.params)
            if substring is not None:
                sources.append(substring)
        # tool rows are in the word index only; the trigram set holds every other row
        if words_of(literal) and not (sources and self.filters.excludes_tool_rows):
            aligned = self.backend.aligned_ids(literal, self.params, tool_rows=bool(sources))
            sources.append(aligned)
        if not sources:
            scope = "m.role <> 'tool' AND " if long_enough else ""
            return f"({scope}({exact}))", None
        name = self.ids(" UNION ".join(sources))
        return f"(m.id IN (SELECT id FROM {name}) AND ({exact}))", name  # noqa: S608

    def group(self, group: list[tuple[bool, Term]]) -> tuple[str, str | None]:
        conditions: list[str] = []
        driver: str | None = None
        words = [term for negated, term in group if not negated and not term.literal]
        if words:
            condition, driver = self.words(words)
            conditions.append(condition)
        for negated, term in group:
            if term.literal:
                condition, ids = self.literal(term.text)
                if driver is None and not negated:
                    driver = ids
            elif negated:
                condition, _ = self.words([term])
            else:
                continue
            conditions.append(f"NOT ({condition})" if negated else condition)
        return "(" + " AND ".join(conditions) + ")", driver

    def sql(self, parsed: Parsed, order: str) -> str:
        groups = [self.group(group) for group in parsed]
        where = " OR ".join(condition for condition, _ in groups)
        drivers = [driver for _, driver in groups]
        if all(drivers):
            union = " UNION ".join(f"SELECT id FROM {d}" for d in drivers)  # noqa: S608
            where = f"m.id IN ({union}) AND ({where})"
        with_clause = f"WITH {', '.join(self.ctes)} " if self.ctes else ""
        return (
            f"{with_clause}{_SELECT} WHERE ({where}){self.filters.sql}"
            f" ORDER BY {order} LIMIT :limit"
        )


def literal_hits(
    backend: SearchBackend, parsed: Parsed, filters: Filters, sort: str | None, limit: int
) -> list[Hit]:
    """The first `limit` rows matching the literal reading, newest first (oldest first
    for sort="oldest"): every literal hit is as relevant as the next."""
    statement = _Statement(backend, filters)
    order = "m.timestamp ASC, m.id ASC" if oldest_first(sort) else "m.timestamp DESC, m.id DESC"
    sql = statement.sql(parsed, order)
    rows = backend.literal_rows(sql, filters, {**statement.params, "limit": limit})
    positive = [term for group in parsed for negated, term in group if not negated]
    literals = [t.text for t in positive if t.literal]
    words = [t for t in positive if not t.literal]
    return [_hit(row, literals, words) for row in rows]


def _hit(row: Hit, literals: list[str], words: list[Term]) -> Hit:
    body = str(row["body"] or "")
    for candidate in (row["body"], row["calls"], row["tool_name"]):
        text = str(candidate or "")
        if any(fold(literal) in fold(text) for literal in literals):
            body = text
            break
    hit = {k: v for k, v in row.items() if k not in ("body", "calls")}
    hit["snippet"] = terms_snippet(body, words, literals)
    return hit
