"""Search on PostgreSQL: the generated tsvector with its GIN index for words, pg_trgm for
substrings and CJK, and an ILIKE scan, routed as the SQLite backend routes FTS5, trigram
and LIKE (spec/behaviour.md 6.4).

The user's query goes through the same sanitiser as on SQLite, and the FTS5 query it
yields is then read by FTS5's own rules (barewords, "phrases", prefix `*`, AND / OR /
NOT in capitals, implicit AND, NOT > AND > OR) and rebuilt as a tsquery from bound
parameters; what FTS5 would reject as a syntax error answers nothing here too. The text
normalisation (ASCII punctuation separates words) and the trigram expression are those
of migrations/_pg_search.py, so the indexes serve these queries.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Connection

from . import query as q
from .common import CONTEXT_CHARS, Filters, decode_preview, like_snippet

log = logging.getLogger(__name__)

#: The expressions of migrations/_pg_search.py (frozen there; spelled again here).
PUNCTUATION = "[!-/:-@\\[-`{-~]+"
TRIGRAM_TEXT = (
    "(COALESCE(m.content, '') || ' ' || COALESCE(m.tool_name, '') || ' ' "
    "|| COALESCE(m.tool_calls, ''))"
)
_PUNCT_RE = re.compile(r"[!-/:-@\[-`{-~]+")
# FTS5 barewords: letters, digits, "_", the substitute character and anything non-ASCII
_BAREWORD = re.compile(r"^[A-Za-z0-9_\x1a\u0080-\U0010ffff]+$")
_ITEM = re.compile(r'"[^"]*"\*?|[^\s"]+')
_STAR_SPLIT = re.compile(r"[^*]*\*|[^*]+")


def caseless(term: str) -> bool:
    """True when no character of `term` has a case mapping (CJK, digits, punctuation):
    then `x ILIKE p` and `x LIKE p` match the same rows (lower-casing the text cannot
    produce a character that has no case, nor change one), and LIKE compares bytes where
    ILIKE lower-cases every row first, several times slower on a scan."""
    return all(c.lower() == c == c.upper() for c in term)


def _like_op(term: str) -> str:
    return "LIKE" if caseless(term) else "ILIKE"


class QuerySyntaxError(ValueError):
    """The sanitised query is not valid FTS5 syntax (SQLite would raise on it too)."""


@dataclass(frozen=True)
class Term:
    text: str
    prefix: bool
    phrase: bool


# A parsed query: OR of AND-groups; each group a list of (negated, term).
Parsed = list[list[tuple[bool, Term]]]


def _tokens(sanitized: str) -> list[str]:
    """FTS5's tokens: a `*` ends the bareword before it, so `chat*send` is `chat*` then
    `send` (implicit AND), as FTS5's lexer reads it; phrases stay whole."""
    tokens: list[str] = []
    for item in _ITEM.findall(sanitized):
        if item.startswith('"'):
            tokens.append(item)
        else:
            tokens.extend(_STAR_SPLIT.findall(item))
    return tokens


def parse_fts5(sanitized: str) -> Parsed:
    """Read a sanitised query as FTS5 reads it; QuerySyntaxError where FTS5 would fail."""
    groups: Parsed = [[]]
    pending: str | None = None  # "AND" / "NOT" waiting for its right operand
    for item in _tokens(sanitized):
        if item in ("AND", "OR", "NOT"):
            if not groups[-1] or pending is not None:
                raise QuerySyntaxError(f"operator {item} without a left operand")
            if item == "OR":
                groups.append([])
            else:
                pending = item
            continue
        if item.startswith('"'):
            prefix = item.endswith("*")
            body = item[1:-2] if prefix else item[1:-1]
            term = Term(body, prefix, phrase=True)
        else:
            prefix = item.endswith("*")
            body = item[:-1] if prefix else item
            if not body or not _BAREWORD.match(body):
                raise QuerySyntaxError(f"{item!r} is not an FTS5 bareword")
            term = Term(body, prefix, phrase=False)
        groups[-1].append((pending == "NOT", term))
        pending = None
    if pending is not None or not groups[-1]:
        raise QuerySyntaxError("operator without a right operand")
    return groups


def _words(text: str) -> list[str]:
    return [w for w in _PUNCT_RE.sub(" ", text).split() if w]


def _tsquery_sql(parsed: Parsed, params: dict[str, Any]) -> str:
    """SQL building the tsquery from bound parameters (never from query text)."""

    def term_sql(term: Term) -> str:
        name = f"w{len(params)}"
        if term.prefix:
            words = _words(term.text)
            if not words:
                params[name] = ""
                return "to_tsquery('simple', :" + name + ")"
            quoted = ["'" + w.replace("\\", "\\\\").replace("'", "''") + "'" for w in words]
            params[name] = " <-> ".join(quoted) + ":*"
            return f"to_tsquery('simple', :{name})"
        params[name] = term.text
        return f"phraseto_tsquery('simple', regexp_replace(:{name}, '{PUNCTUATION}', ' ', 'g'))"

    alternatives = []
    for group in parsed:
        parts = []
        for negated, term in group:
            sql = term_sql(term)
            parts.append(f"!!({sql})" if negated else f"({sql})")
        alternatives.append("(" + " && ".join(parts) + ")")
    return "(" + " || ".join(alternatives) + ")"


_SELECT = (
    "SELECT m.id, m.session_id, m.role, m.content, m.timestamp, m.tool_name, "
    "s.source, s.model, s.started_at AS session_started"
)
_MESSAGE_COLUMNS = "m.id, m.session_id, m.role, m.content, m.timestamp, m.tool_name"


def _select(
    filters: Filters, where: str, order: str, *, rank: str | None = None, source: str = ""
) -> str:
    """The page of hits: messages matching `where` (and the filters), in `order`, with
    their session's columns and their context. Every message has its session (foreign
    key), so unless a filter reads the session, the page is cut from messages alone and
    only its rows are joined to sessions (a common word matches thousands of rows)."""
    rank_col = f", {rank} AS rank" if rank else ""
    if "s.source" in filters.sql:
        page = (
            f"{_SELECT}{rank_col} FROM {source}messages AS m"
            f" JOIN sessions AS s ON s.id = m.session_id WHERE {where}{filters.sql}"
            f" ORDER BY {order} LIMIT :limit OFFSET :offset"
        )
    else:
        inner = (
            f"SELECT {_MESSAGE_COLUMNS}{rank_col} FROM {source}messages AS m"  # noqa: S608
            f" WHERE {where}{filters.sql} ORDER BY {order} LIMIT :limit OFFSET :offset"
        )
        page = (
            f"{_SELECT}{', m.rank' if rank else ''} FROM ({inner}) AS m"
            f" JOIN sessions AS s ON s.id = m.session_id"
        )
    return f"SELECT m.*, ctx.* FROM ({page}) AS m{_CONTEXT} ORDER BY {order}"  # noqa: S608


# The context of each hit of the page, in the search statement itself (the SQLite backend
# asks once more for all hits, which costs nothing in-process but a round trip here): the
# previous message of the session, the hit, the next one, ordered by (timestamp, id) as
# common.attach_context orders them.
_CONTEXT = (
    " CROSS JOIN LATERAL (SELECT array_agg(c.role ORDER BY c.pos) AS context_roles,"
    " array_agg(c.content ORDER BY c.pos) AS context_contents FROM ("
    "(SELECT 0 AS pos, n.role, n.content FROM messages AS n"
    " WHERE n.session_id = m.session_id AND (n.timestamp, n.id) < (m.timestamp, m.id)"
    " ORDER BY n.timestamp DESC, n.id DESC LIMIT 1)"
    " UNION ALL SELECT 1, m.role, m.content"
    " UNION ALL (SELECT 2, n.role, n.content FROM messages AS n"
    " WHERE n.session_id = m.session_id AND (n.timestamp, n.id) > (m.timestamp, m.id)"
    " ORDER BY n.timestamp ASC, n.id ASC LIMIT 1)) AS c) AS ctx"
)


def _order(sort: str | None) -> str:
    key = (sort or "").strip().lower()
    if key == "newest":
        return "m.timestamp DESC, rank DESC, m.id"
    if key == "oldest":
        return "m.timestamp ASC, rank DESC, m.id"
    return "rank DESC, m.id"


def _highlight(content: Any, needles: list[str], *, words: bool) -> str:
    """An FTS5-like snippet: a window of about 40 words around the first match, matches
    between `>>>` and `<<<`, `...` where the text was cut."""
    body = decode_preview(content)
    if not needles:
        return body[:240]
    alternatives = "|".join(re.escape(n) for n in sorted(needles, key=len, reverse=True))
    pattern = rf"(?<![^\W_])(?:{alternatives})[^\W_]*" if words else f"(?:{alternatives})"
    found = list(re.finditer(pattern, body, flags=re.IGNORECASE))
    if not found:
        return body[:240]
    start = max(0, found[0].start() - 100)
    end = min(len(body), found[0].end() + 140)
    if start > 0:
        start = body.find(" ", start) + 1 or start
    out = []
    cursor = start
    for match in found:
        if match.start() < cursor or match.end() > end:
            continue
        out.append(body[cursor : match.start()])
        out.append(f">>>{match.group(0)}<<<")
        cursor = match.end()
    out.append(body[cursor:end])
    return ("..." if start > 0 else "") + "".join(out) + ("..." if end < len(body) else "")


def _run(conn: Connection, sql: str, filters: Filters, params: dict[str, Any]) -> list[Any]:
    # No savepoint: the SQLite routes need one because they catch FTS5 errors and fall
    # back to another route in the same transaction; nothing here catches (the query is
    # validated first and every value is bound), and a SAVEPOINT/RELEASE pair is two more
    # round trips per search on a server.
    return list(conn.execute(filters.statement(sql), {**filters.params, **params}).mappings())


def _word_route(
    conn: Connection, parsed: Parsed, filters: Filters, sort: str | None, limit: int, offset: int
) -> list[dict[str, Any]]:
    params: dict[str, Any] = {}
    query_sql = _tsquery_sql(parsed, params)
    sql = _select(
        filters,
        "m.search_vector @@ hq.query",
        _order(sort),
        rank="ts_rank_cd(m.search_vector, hq.query)",
        source=f"(SELECT {query_sql} AS query) AS hq, ",
    )
    rows = _run(conn, sql, filters, {**params, "limit": limit, "offset": offset})
    needles = [w for group in parsed for neg, t in group if not neg for w in _words(t.text)]
    return [_hit(r, _highlight(r["content"], needles, words=True)) for r in rows]


def _substring_route(
    conn: Connection,
    tokens: list[str],
    filters: Filters,
    sort: str | None,
    limit: int,
    offset: int,
) -> list[dict[str, Any]] | None:
    """The trigram index: every token a case-insensitive substring of the row's three
    columns (operators as FTS5 reads them), non-tool rows only, as the v23 trigram index."""
    if filters.wants_tool_rows:
        return None
    params: dict[str, Any] = {}
    alternatives: list[list[str]] = [[]]
    negate = False
    for token in tokens:
        if token in ("AND", "OR", "NOT"):
            if token == "OR":
                alternatives.append([])
            negate = token == "NOT"
            continue
        name = f"p{len(params)}"
        params[name] = q.like_pattern(token.strip('"'))
        clause = f"{TRIGRAM_TEXT} {_like_op(token)} :{name} ESCAPE '\\'"
        alternatives[-1].append(f"NOT ({clause})" if negate else clause)
        negate = False
    groups = [" AND ".join(g) for g in alternatives if g]
    if not groups:
        return None
    where = " OR ".join(f"({g})" for g in groups)
    order = "m.timestamp ASC" if (sort or "").lower() == "oldest" else "m.timestamp DESC"
    sql = _select(filters, f"m.role <> 'tool' AND ({where})", f"{order}, m.id DESC")
    rows = _run(conn, sql, filters, {**params, "limit": limit, "offset": offset})
    needles = [t.strip('"') for t in q.terms(tokens)]
    return [_hit(r, _highlight(r["content"], needles, words=False)) for r in rows]


def _like_route(
    conn: Connection, terms: list[str], filters: Filters, limit: int, offset: int
) -> list[dict[str, Any]]:
    params: dict[str, Any] = {}
    clauses = []
    for n, term in enumerate(terms):
        params[f"t{n}"] = q.like_pattern(term)
        op = _like_op(term)
        clauses.append(
            f"(m.content {op} :t{n} ESCAPE '\\' OR m.tool_name {op} :t{n} ESCAPE '\\' "
            f"OR m.tool_calls {op} :t{n} ESCAPE '\\')"
        )
    where = " OR ".join(clauses) or "FALSE"
    sql = _select(filters, f"({where})", "m.timestamp DESC, m.id DESC")
    rows = _run(conn, sql, filters, {**params, "limit": limit, "offset": offset})
    first = terms[0] if terms else ""
    return [_hit(r, like_snippet(r["content"], first)) for r in rows]


_NOT_HIT_KEYS = ("content", "rank", "context_roles", "context_contents")


def _hit(row: Any, snippet: str) -> dict[str, Any]:
    hit = {k: v for k, v in row.items() if k not in _NOT_HIT_KEYS}
    hit["snippet"] = snippet
    hit["context"] = [
        {"role": str(role), "content": decode_preview(content)[:CONTEXT_CHARS]}
        for role, content in zip(row["context_roles"], row["context_contents"], strict=True)
    ]
    return hit


def search_messages(
    conn: Connection,
    query: str,
    *,
    source_filter: list[str] | None = None,
    exclude_sources: list[str] | None = None,
    role_filter: list[str] | None = None,
    limit: int = 20,
    offset: int = 0,
    sort: str | None = None,
    include_inactive: bool = False,
) -> list[dict[str, Any]]:
    if not query or not query.strip():
        return []
    sanitized = q.sanitize_fts5_query(query)
    if not sanitized:
        return []
    raw, tokens = q.route_tokens(sanitized)
    words = q.terms(tokens)
    filters = Filters(source_filter, exclude_sources, role_filter, include_inactive)
    hits: list[dict[str, Any]] | None = None
    route = "empty"
    if q.contains_cjk(sanitized):
        cjk_tokens = [t for t in words if q.contains_cjk(t)]
        if q.cjk_count(raw) >= 3 and all(q.cjk_count(t) >= 3 for t in cjk_tokens):
            hits, route = _substring_route(conn, tokens, filters, sort, limit, offset), "trigram"
        if hits is None:
            hits, route = _like_route(conn, words or [raw], filters, limit, offset), "like_scan"
    else:
        try:
            parsed = parse_fts5(sanitized)
        except QuerySyntaxError as exc:
            log.info("search query %r is not valid FTS5 syntax (%s): no results", query, exc)
            return []
        hits, route = _word_route(conn, parsed, filters, sort, limit, offset), "tsvector"
        if not hits and words and all(len(t) >= 3 for t in words):
            hits = _substring_route(conn, tokens, filters, sort, limit, offset) or []
            route = "trigram"
    log.debug("search %r: route %s, %d hit(s)", query, route, len(hits))
    return hits
