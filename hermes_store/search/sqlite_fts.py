"""Search on SQLite: the FTS5 word index, the trigram index, and a LIKE scan, routed as
the original routes them (spec/behaviour.md 6.4), plus the top-up of the id range a
pending backfill has not indexed yet (6.5).

All SQL here is assembled from fixed fragments; user text only ever travels as bound
parameters.
"""

from __future__ import annotations

import logging
from typing import Any

from sqlalchemy import Connection, text
from sqlalchemy.exc import DatabaseError, DBAPIError, OperationalError

from . import query as q
from .common import Filters, attach_context, like_snippet, row_dicts
from .layout import HIGH_WATER, PROGRESS

log = logging.getLogger(__name__)



def _order(sort: str | None, route: str) -> str:
    key = (sort or "").strip().lower()
    if route == "like":
        return "m.timestamp DESC"
    if key == "newest":
        return "m.timestamp DESC, rank"
    if key == "oldest":
        return "m.timestamp ASC, rank"
    return "rank"


_SELECT = (
    "SELECT m.id, m.session_id, m.role, {snippet} AS snippet, m.timestamp, m.tool_name, "
    "s.source, s.model, s.started_at AS session_started"
)


def _fts_route(
    conn: Connection,
    table: str,
    match: str,
    filters: Filters,
    order: str,
    limit: int,
    offset: int,
) -> list[dict[str, Any]]:
    snippet = f"snippet({table}, -1, '>>>', '<<<', '...', 40)"
    sql = (
        _SELECT.format(snippet=snippet)
        + f" FROM {table} JOIN messages AS m ON m.id = {table}.rowid"
        " JOIN sessions AS s ON s.id = m.session_id"
        f" WHERE {table} MATCH :match{filters.sql} ORDER BY {order} LIMIT :limit OFFSET :offset"
    )
    params = {**filters.params, "match": match, "limit": limit, "offset": offset}
    # No SAVEPOINT: on SQLite a failing SELECT (an FTS5 syntax error, a damaged index)
    # leaves the read transaction usable for the routes that follow.
    return row_dicts(conn.execute(filters.statement(sql), params))


def _like_route(
    conn: Connection,
    terms: list[str],
    filters: Filters,
    limit: int,
    offset: int,
    *,
    all_terms: bool = False,
    id_range: tuple[int, int] | None = None,
) -> list[dict[str, Any]]:
    params: dict[str, Any] = dict(filters.params)
    clauses = []
    for n, term in enumerate(terms):
        params[f"t{n}"] = q.like_pattern(term)
        clauses.append(
            f"(m.content LIKE :t{n} ESCAPE '\\' OR m.tool_name LIKE :t{n} ESCAPE '\\' "
            f"OR m.tool_calls LIKE :t{n} ESCAPE '\\')"
        )
    where = (" AND " if all_terms else " OR ").join(clauses) or "0"
    extra = ""
    if id_range is not None:
        extra = " AND m.id > :lo AND m.id <= :hi"
        params["lo"], params["hi"] = id_range
    sql = (
        _SELECT.format(snippet="m.content")
        + " FROM messages AS m JOIN sessions AS s ON s.id = m.session_id"
        f" WHERE ({where}){extra}{filters.sql}"
        " ORDER BY m.timestamp DESC LIMIT :limit OFFSET :offset"
    )
    params.update(limit=limit, offset=offset)
    rows = row_dicts(conn.execute(filters.statement(sql), params))
    first = terms[0] if terms else ""
    for row in rows:
        row["snippet"] = like_snippet(row["snippet"], first)
    return rows


def _markers(conn: Connection) -> tuple[int, int] | None:
    rows: dict[str, str] = dict(
        conn.execute(
            text("SELECT key, value FROM state_meta WHERE key IN (:h, :p)"),
            {"h": HIGH_WATER, "p": PROGRESS},
        ).all()
    )
    try:
        high = int(rows[HIGH_WATER])
    except (KeyError, ValueError):
        return None
    try:
        progress = int(rows.get(PROGRESS, high))
    except ValueError:
        progress = high
    return progress, high


def _trigram_usable(conn: Connection) -> bool:
    return (
        conn.execute(
            text("SELECT 1 FROM sqlite_master WHERE name = 'messages_fts_trigram'")
        ).scalar()
        is not None
    )


_SQLITE_CORRUPT = 11  # the primary code; SQLITE_CORRUPT_VTAB (267) is one of its extensions


def _fts_damaged(exc: DatabaseError) -> bool:
    """Corruption reported by an FTS query. It is treated as damage of the index only if
    the LIKE scan that replaces it can read the messages; if that scan fails too, its
    error propagates (structural damage fails closed)."""
    code = getattr(exc.orig, "sqlite_errorcode", None)
    return code is not None and code & 0xFF == _SQLITE_CORRUPT


def _warn_damaged(table: str, exc: DatabaseError) -> None:
    log.warning(
        "the full-text index %s is damaged (%s); searching with a LIKE scan instead. "
        "Repair it with: hermes-store fts rebuild",
        table,
        exc.orig,
    )


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

    def trigram() -> list[dict[str, Any]] | None:
        """The substring index, or None when it cannot answer (then the next route runs)."""
        if filters.wants_tool_rows or not _trigram_usable(conn):
            return None
        try:
            return _fts_route(
                conn,
                "messages_fts_trigram",
                q.quote_tokens(tokens),
                filters,
                _order(sort, "fts"),
                limit,
                offset,
            )
        except OperationalError as exc:
            log.debug("trigram route failed: %s", exc)
            return None
        except DatabaseError as exc:
            if not _fts_damaged(exc):
                raise
            _warn_damaged("messages_fts_trigram", exc)
            return None

    if q.contains_cjk(sanitized):
        # trigrams need three characters: shorter CJK terms can only be found by LIKE
        cjk_tokens = [t for t in words if q.contains_cjk(t)]
        if q.cjk_count(raw) >= 3 and all(q.cjk_count(t) >= 3 for t in cjk_tokens):
            hits, route = trigram(), "trigram"
        if hits is None:
            hits, route = _like_route(conn, words or [raw], filters, limit, offset), "like_scan"
    else:
        syntax_error = False
        try:
            hits = _fts_route(
                conn, "messages_fts", sanitized, filters, _order(sort, "fts"), limit, offset
            )
            route = "fts5"
        except OperationalError as exc:
            # v23 answers such queries (`don't`, `a,b`) with nothing; logged, never raised
            log.info("search query %r is not valid FTS5 syntax (%s): no results", query, exc)
            hits, syntax_error = [], True
        except DatabaseError as exc:
            if not _fts_damaged(exc):
                raise  # damage outside the index: fail closed
            _warn_damaged("messages_fts", exc)
            hits, route = _like_route(conn, words or [raw], filters, limit, offset), "like_scan"
            syntax_error = True  # the LIKE scan already answered
        # a zero-hit word query gets substring semantics (Latin text glued to CJK, #54242)
        if not hits and not syntax_error and words and all(len(t) >= 3 for t in words):
            hits, route = (trigram() or []), "trigram"

    pending = _markers(conn)
    if pending is not None and len(hits) < limit:
        progress, high = pending
        seen = {h["id"] for h in hits}
        extra_terms = q.topup_terms(sanitized)
        if extra_terms:
            try:
                extra = _like_route(
                    conn,
                    extra_terms,
                    filters,
                    limit - len(hits) + len(seen),
                    0,
                    all_terms=True,
                    id_range=(progress, high),
                )
            except (OperationalError, DBAPIError) as exc:
                log.debug("pending-range top-up failed: %s", exc)
                extra = []
            for row in extra:
                if row["id"] not in seen and len(hits) < limit:
                    hits.append(row)
                    seen.add(row["id"])
    log.debug("search %r: route %s, %d hit(s)", query, route, len(hits))
    attach_context(conn, hits)
    return hits
