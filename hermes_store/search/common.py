"""Search pieces both backends share: filters, LIKE snippets, the context of a hit."""

from __future__ import annotations

import json
from collections.abc import Callable
from functools import lru_cache
from typing import Any, Literal

from sqlalchemy import Connection, TextClause, bindparam, text
from sqlalchemy.exc import DBAPIError

from ..contract import TAGS_TABLE
from .query import like_pattern

JSON_PREFIX = "\x00json:"
#: The end of the table a window of ids is taken from (the literal tier's windows).
Edge = Literal["newest", "oldest"]
CONTEXT_CHARS = 200


class Filters:
    def __init__(
        self,
        source_filter: list[str] | None,
        exclude_sources: list[str] | None,
        role_filter: list[str] | None,
        include_inactive: bool,
        tags: list[str] | None = None,
    ) -> None:
        clauses: list[str] = []
        params: dict[str, Any] = {}
        expanding: list[str] = []
        if source_filter is not None:
            if not source_filter:
                clauses.append("1 = 0")
            else:
                clauses.append("s.source IN :sources")
                params["sources"] = list(source_filter)
                expanding.append("sources")
        if exclude_sources:
            clauses.append("s.source NOT IN :excluded")
            params["excluded"] = list(exclude_sources)
            expanding.append("excluded")
        if role_filter:
            clauses.append("m.role IN :roles")
            params["roles"] = list(role_filter)
            expanding.append("roles")
        if not include_inactive:
            clauses.append("(m.active = 1 OR m.compacted = 1)")
        for i, tag in enumerate(tags or ()):
            # one EXISTS per tag: a hit's session carries every tag asked for
            clauses.append(
                f"EXISTS (SELECT 1 FROM {TAGS_TABLE} AS st{i} WHERE st{i}.session_id = "  # noqa: S608
                f"m.session_id AND st{i}.tag = :tag_{i})"
            )
            params[f"tag_{i}"] = tag
        self.sql = "".join(f" AND {c}" for c in clauses)
        self.params = params
        self.expanding = expanding
        # a filter on the session's columns: a page cannot be cut from messages alone
        self.reads_sessions = source_filter is not None or bool(exclude_sources)
        self.excludes_tool_rows = bool(role_filter) and "tool" not in (role_filter or [])
        self.wants_tool_rows = bool(role_filter) and "tool" in (role_filter or [])

    def statement(self, sql: str) -> Any:
        return _statement(sql, tuple(self.expanding))


@lru_cache(maxsize=256)
def _statement(sql: str, expanding: tuple[str, ...]) -> TextClause:
    # cached: text() parses its bind names with a regex each time it is built, which cost
    # a search more than SQLAlchemy's execution of the statement
    stmt = text(sql)
    if expanding:
        stmt = stmt.bindparams(*(bindparam(n, expanding=True) for n in expanding))
    return stmt


def row_dicts(result: Any) -> list[dict[str, Any]]:
    """A result's rows as dicts: plain tuples zipped with the keys once, several times
    cheaper than a RowMapping per row."""
    keys = list(result.keys())
    return [dict(zip(keys, values, strict=True)) for values in result.all()]


def id_window(column: str, edge: Edge) -> str:
    """The condition keeping `column` in a window of ids at `edge` of the table: above
    the parameter :floor, or up to :ceiling. One bound each, as no id lies past the
    table's end: a second, always-true one can change the plan (PostgreSQL then hands
    it to the word index as a condition instead of intersecting the primary key's
    range with the other indexes)."""
    return f"{column} > :floor" if edge == "newest" else f"{column} <= :ceiling"


def time_direction(sort: str | None) -> str | None:
    """`DESC` for sort="newest", `ASC` for "oldest" (any case, trimmed), None for any
    other sort, which asks for relevance (docs/reference/behaviour.md 6.1)."""
    return {"newest": "DESC", "oldest": "ASC"}.get((sort or "").strip().lower())


def oldest_first(sort: str | None) -> bool:
    return time_direction(sort) == "ASC"


def ranked_order(sort: str | None, rank: str) -> str:
    """ORDER BY of a ranked route: by message timestamp and then `rank` for a time sort,
    else by `rank`."""
    direction = time_direction(sort)
    return rank if direction is None else f"m.timestamp {direction}, {rank}"


def like_clauses(
    terms: list[str], params: dict[str, Any], operator: Callable[[str], str], *, all_terms: bool
) -> str:
    """One clause per term (`%term%`, wildcards escaped) over content, tool name and tool
    calls, joined with OR (AND with `all_terms`); the patterns go into `params`."""
    clauses = []
    for n, term in enumerate(terms):
        params[f"t{n}"] = like_pattern(term)
        op = operator(term)
        clauses.append(
            f"(m.content {op} :t{n} ESCAPE '\\' OR m.tool_name {op} :t{n} ESCAPE '\\' "
            f"OR m.tool_calls {op} :t{n} ESCAPE '\\')"
        )
    joined = (" AND " if all_terms else " OR ").join(clauses)
    return joined or "1 = 0"


def like_snippet(content: Any, term: str) -> str:
    body = content if isinstance(content, str) else ("" if content is None else str(content))
    at = body.lower().find(term.lower()) if term else -1
    start = max(0, at - 40) if at >= 0 else 0
    return body[start : start + 120]


def decode_preview(content: Any) -> str:
    """Text of a stored message for context lines: structured content is decoded (its text
    parts joined), NULL is ''."""
    if content is None:
        return ""
    if not isinstance(content, str):
        return str(content)
    if not content.startswith(JSON_PREFIX):
        return content
    try:
        value = json.loads(content[len(JSON_PREFIX) :])
    except ValueError:
        return content
    parts = value if isinstance(value, list) else [value]
    texts = [
        str(p.get("text"))
        for p in parts
        if isinstance(p, dict) and p.get("type") == "text" and p.get("text")
    ]
    return " ".join(texts) if texts else "[multimodal content]"


# The context of every hit in one round trip: for each hit, the ids of the previous and the
# next message of its session (ordered by timestamp, then id, as the original orders
# context), found with a row-value seek on idx_messages_session; then the three rows.
# `near` is referenced three times, so both SQLite and PostgreSQL materialise it once.
_NEIGHBOUR_ID = (
    "(SELECT id FROM messages WHERE session_id = hits.sid "
    "AND (timestamp, id) {cmp} (hits.ts, hits.hit_id) "
    "ORDER BY timestamp {direction}, id {direction} LIMIT 1)"
)
# fixed fragments only; every value is a bound parameter
_CONTEXT = (
    "WITH hits(hit_id, sid, ts) AS (VALUES {values}), "  # noqa: S608
    "near AS (SELECT hit_id, "
    + _NEIGHBOUR_ID.format(cmp="<", direction="DESC")
    + " AS before_id, "
    + _NEIGHBOUR_ID.format(cmp=">", direction="ASC")
    + " AS after_id FROM hits) "
    "SELECT near.hit_id, 0 AS pos, m.role, m.content FROM near "
    "JOIN messages AS m ON m.id = near.before_id "
    "UNION ALL SELECT near.hit_id, 1, m.role, m.content FROM near "
    "JOIN messages AS m ON m.id = near.hit_id "
    "UNION ALL SELECT near.hit_id, 2, m.role, m.content FROM near "
    "JOIN messages AS m ON m.id = near.after_id"
)
# three parameters per hit: stay under SQLite's historic limit of 999 host parameters
CONTEXT_CHUNK = 300


@lru_cache(maxsize=64)
def context_sql(hits: int) -> str:
    values = ", ".join(f"(:id{i}, :sid{i}, :ts{i})" for i in range(hits))
    return _CONTEXT.format(values=values)


def fetch_rows(conn: Connection, sql: str, params: dict[str, Any]) -> list[Any]:
    """The rows of `sql` (named parameters) through SQLAlchemy, as tuples."""
    return list(conn.execute(_statement(sql, ()), params).all())


Fetch = Callable[[str, dict[str, Any]], list[Any]]


def attach_context(
    fetch: Fetch,
    hits: list[dict[str, Any]],
    recoverable: Callable[[DBAPIError], bool] | None = None,
) -> None:
    """Set `context` on every hit: up to three {"role", "content"} dicts (the previous
    message of the session, the hit, the next one), content decoded and cut to 200
    characters; `[]` for a hit whose context cannot be read, where `recoverable(error)`
    says the search may go on after the error (else, and without `recoverable`, the error
    is raised). `fetch(sql, params)` runs the one statement (the backend's way of running
    SQL)."""
    for start in range(0, len(hits), CONTEXT_CHUNK):
        chunk = hits[start : start + CONTEXT_CHUNK]
        params: dict[str, Any] = {}
        for i, hit in enumerate(chunk):
            params[f"id{i}"] = hit["id"]
            params[f"sid{i}"] = hit["session_id"]
            params[f"ts{i}"] = hit["timestamp"]
        found: dict[Any, list[tuple[int, dict[str, str]]]] = {}
        try:
            rows = fetch(context_sql(len(chunk)), params)
        except DBAPIError as exc:
            if recoverable is None or not recoverable(exc):
                raise
            rows = []
        for hit_id, pos, role, content in rows:
            line = {"role": str(role), "content": decode_preview(content)[:CONTEXT_CHARS]}
            found.setdefault(hit_id, []).append((pos, line))
        for hit in chunk:
            lines = sorted(found.get(hit["id"], []), key=lambda pos_line: pos_line[0])
            hit["context"] = [line for _, line in lines]
