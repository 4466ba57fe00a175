"""The search planner: which route answers a query, in which order, what falls back to
what, and the top-up of a pending backfill (docs/reference/behaviour.md 6.4, 6.5), the same for
every backend (backend.py picks the one for the connection's dialect).

1. A query holding CJK: the trigram index when every CJK term has 3 or more CJK
   characters, else (or when it cannot answer) a LIKE scan, as the original routes it.
2. A query holding a literal (`query.read_query`: `don't`, `src/main.py`, `rm -rf`):
   the literal tier first (literal.py), then the original's reading of the query (3)
   for the rest of the page, without the rows already shown. So a message holding the
   literal ranks above one holding only its words, and whatever the original finds is
   still found (more hits, never fewer). A literal whose windows fall short keeps to
   the zero-hit retry's budget of candidates checked (3; literal.py), saying so in
   `warnings` when that leaves its page short.
3. Any other query: the word index; a zero-hit query whose terms all have 3 or more
   characters is retried on the trigram index (Latin text glued to CJK, #54242),
   checking about limits.RETRY_CHECKS rows at most (past that the newest rows only,
   and the hits' `warnings` say so); a damaged index falls back to a LIKE scan.
4. While a backfill is pending, fewer than `limit` hits are topped up by a LIKE scan of
   the id range not indexed yet.

A search slower than HERMES_SEARCH_SLOW_MS (default 1000; 0 logs every search) logs one
INFO line on logger `hermes_state`, as the original does: the route and the row count.
Every search is bounded (limits.py): repeated terms merged, at most `limits.MAX_TERMS`
terms, HERMES_SEARCH_TIMEOUT_MS (default 10 s) of time, and the matches a route reads:
a ranked route ranks the newest `limits.RANK_WINDOW` matches in id order, a scan keeps
the newest `limits.TIME_WINDOW` (docs/search-at-scale.md).

The query is read once (query.SearchQuery) and that value is what the planner
and the backends take.
"""

from __future__ import annotations

import logging
import os
import time
from typing import Any

from sqlalchemy import Connection
from sqlalchemy.exc import DBAPIError, OperationalError

from ..repositories._paging import MAX_ROWS
from ..repositories._tag_names import check_tags, require_tags_table
from . import limits
from .backend import Filters, Hit, IndexDamaged, SearchBackend, backend_for
from .literal import literal_hits
from .query import QuerySyntaxError, SearchQuery

log = logging.getLogger(__name__)
slow_log = logging.getLogger("hermes_state")

SLOW_MS_ENV = "HERMES_SEARCH_SLOW_MS"
DEFAULT_SLOW_MS = 1000.0


def slow_threshold_ms() -> float:
    try:
        return float(os.environ.get(SLOW_MS_ENV, DEFAULT_SLOW_MS))
    except ValueError:
        return DEFAULT_SLOW_MS


class _Plan:
    def __init__(
        self, backend: SearchBackend, query: SearchQuery, filters: Filters, sort: str | None
    ) -> None:
        self.backend = backend
        self.query = query
        self.filters = filters
        self.sort = sort
        self.route = "empty"

    def like(self, limit: int, offset: int) -> list[Hit]:
        self.route = "like_scan"
        terms = list(self.query.words) or [self.query.raw]
        return self.backend.like_hits(terms, self.filters, limit, offset)

    def substring(self, limit: int, offset: int, *, bounded: bool = False) -> list[Hit] | None:
        hits = self.backend.substring_hits(
            self.query, self.filters, self.sort, limit, offset, bounded=bounded
        )
        if hits is not None:
            self.route = "trigram"
        return hits

    def cjk(self, limit: int, offset: int) -> list[Hit]:
        hits = self.substring(limit, offset) if self.query.trigram_answers_cjk else None
        return hits if hits is not None else self.like(limit, offset)

    def words_route(self, limit: int, offset: int) -> list[Hit]:
        try:
            hits = self.backend.word_hits(self.query, self.filters, self.sort, limit, offset)
        except QuerySyntaxError as exc:
            # v23 answers such queries (`don't`, `a,b`) with nothing; logged, never raised
            log.info(
                "search query %r is not valid FTS5 syntax (%s): no results", self.query.text, exc
            )
            return []
        except IndexDamaged:
            return self.like(limit, offset)
        self.route = self.backend.word_route
        if not hits and self.query.retries_on_trigrams:
            # bounded: a misspelling of a frequent word has millions of candidates
            hits = self.substring(limit, offset, bounded=True) or []
        return hits

    def literal_first(self, limit: int, offset: int) -> list[Hit]:
        wanted = offset + limit
        try:
            first = literal_hits(self.backend, self.query.literal, self.filters, self.sort, wanted)
        except IndexDamaged:
            return self.like(limit, offset)
        except OperationalError as exc:
            if not self.backend.recoverable(exc):
                raise  # the connection may be gone: Store.read runs the search again
            log.debug("literal tier failed: %s", exc)
            first = []
        self.route = "literal"
        if len(first) >= wanted:
            return first[offset:wanted]
        if not self.query.sanitized:
            return first[offset:wanted]
        # every literal hit is known: the original's reading fills the rest of the page
        route = self.route
        shown = {h["id"] for h in first}
        rest = [h for h in self.words_route(wanted, 0) if h["id"] not in shown]
        self.route = route if not rest else f"{route}+{self.route}"
        return (first + rest)[offset:wanted]

    def top_up(self, hits: list[Hit], limit: int) -> None:
        # a full page needs no top-up: the pending range is not even read
        if len(hits) >= limit or not self.query.topup_terms:
            return
        pending = self.backend.pending_range()
        if pending is None:
            return
        seen = {h["id"] for h in hits}
        try:
            extra = self.backend.like_hits(
                list(self.query.topup_terms),
                self.filters,
                limit - len(hits) + len(seen),
                0,
                all_terms=True,
                id_range=pending,
            )
        except DBAPIError as exc:
            if not self.backend.recoverable(exc):
                raise
            log.debug("pending-range top-up failed: %s", exc)
            return
        for row in extra:
            if row["id"] not in seen and len(hits) < limit:
                hits.append(row)
                seen.add(row["id"])


def _page(limit: Any, offset: Any) -> tuple[int, int]:
    """The page's limit and offset as the original binds them into SQLite's LIMIT and
    OFFSET: a negative limit (or None) is no limit, a negative offset none; the same on
    PostgreSQL, and never past 64 bits on either, the two together included (the rule
    of repositories/_paging.py's `bound_limit` and `row_offset`)."""
    start = 0 if not offset else min(max(0, int(offset)), MAX_ROWS)
    count = -1 if limit is None else int(limit)
    return min(MAX_ROWS if count < 0 else count, MAX_ROWS - start), start


def _answer(plan: _Plan, limit: int, offset: int) -> list[Hit]:
    if plan.query.has_cjk:
        return plan.cjk(limit, offset)
    if plan.query.has_literals:
        return plan.literal_first(limit, offset)
    return plan.words_route(limit, offset)


def search_messages(
    conn: Connection,
    query: str,
    source_filter: list[str] | None = None,
    exclude_sources: list[str] | None = None,
    role_filter: list[str] | None = None,
    limit: int = 20,
    offset: int = 0,
    sort: str | None = None,
    include_inactive: bool = False,
    tags: list[str] | None = None,
    *,
    backend: type[SearchBackend] | None = None,
) -> limits.SearchHits:
    """Messages matching `query` (docs/reference/behaviour.md 6.1), best first (or
    `sort="newest"/"oldest"`). Each hit has `id, session_id, role, snippet` (the match
    marked `>>>`/`<<<`), `timestamp, tool_name, source, model, session_started` and
    `context` (the neighbouring messages). A query that cannot be read finds nothing.
    The parameters are the original's, in its order. Raises QueryTooComplex for a query
    of more than `limits.MAX_TERMS` terms, SearchTimedOut for a search that runs past
    HERMES_SEARCH_TIMEOUT_MS (limits.py). The result is a list of hits whose `warnings`
    say why it may leave out matches that exist (a zero-hit retry stopped at its budget,
    limits.RETRY_CHECKS); empty when it cannot. `backend`: the search part of `conn`'s
    dialect where the caller holds it already (a Store's `store.dialect.search`); by
    default it is looked up from `conn`."""
    started = time.perf_counter()
    limit, offset = _page(limit, offset)
    hits: list[Hit] = []
    warnings: list[str] = []
    route = "empty"
    # read once: the planner and the backend take every reading from this value
    read = SearchQuery.read(query)
    wanted_tags = None if tags is None else check_tags(tags)
    if wanted_tags is not None:
        require_tags_table(conn)
    if read.searchable:
        filters = Filters(
            source_filter,
            exclude_sources,
            role_filter,
            include_inactive,
            wanted_tags,
        )
        searcher = backend_for(conn) if backend is None else backend(conn)
        plan = _Plan(searcher, read, filters, sort)
        limits.check_terms(read.tokens, read.fts5, read.literal)
        with plan.backend.time_limit(limits.timeout_ms()):
            hits = _answer(plan, limit, offset)
            plan.top_up(hits, limit)
            plan.backend.attach_context([h for h in hits if "context" not in h])
        route = plan.route
        warnings = plan.backend.warnings
    elapsed_ms = (time.perf_counter() - started) * 1000
    log.debug("search %r: route %s, %d hit(s)", query, route, len(hits))
    if elapsed_ms >= slow_threshold_ms():
        slow_log.info(
            "slow session search: path=%s rows=%d elapsed_ms=%.1f query_chars=%d",
            route,
            len(hits),
            elapsed_ms,
            len(query or ""),
        )
    return limits.SearchHits(hits, warnings)
