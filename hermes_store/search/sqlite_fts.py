"""Search on SQLite: the FTS5 word index, the trigram index, and a LIKE scan (the routes
of docs/reference/behaviour.md 6.4, ordered by planner.py), plus the id range a pending backfill
has not indexed yet (6.5).

Each route's statement is built whole by one function (`ranked_top_statement`,
`ranked_statement`, `retry_sample_statement`, `retry_window_statement`,
`scan_statement`), in Core, once per shape; user text only ever travels as bound
parameters. tests/search/route_sql/sqlite/ holds the SQL each renders.
"""

from __future__ import annotations

import logging
import sqlite3
import time
from collections.abc import Iterator
from contextlib import contextmanager
from functools import cached_property, lru_cache, reduce
from operator import add
from typing import Any

from sqlalchemy import (
    ColumnElement,
    Executable,
    Select,
    TableClause,
    UnaryExpression,
    and_,
    bindparam,
    column,
    func,
    literal_column,
    or_,
    select,
    table,
    union,
)
from sqlalchemy.exc import DatabaseError, DBAPIError, OperationalError
from sqlalchemy.sql.operators import custom_op

from ..runtime.engine import driver_run
from ..runtime.retry import is_retryable
from ..sqlite import driver as sqlite_driver
from . import limits
from . import query as q
from .backend import (
    ZERO,
    Edge,
    Filters,
    FilterShape,
    Hit,
    IdSelect,
    IndexDamaged,
    LikeShape,
    Params,
    RouteStatement,
    SearchBackend,
    Snippet,
    filter_conditions,
    has_lists,
    id_window,
    like_condition,
    m,
    oldest_first,
    reads_sessions,
    s,
    time_direction,
)
from .layout import HIGH_WATER, PROGRESS
from .query import TRIGRAM_CHARS, QuerySyntaxError, SearchQuery, Term, fold

log = logging.getLogger(__name__)

_COLUMNS = ("content", "tool_name", "tool_calls")
_SQLITE_CORRUPT = 11  # the primary code; SQLITE_CORRUPT_VTAB (267) is one of its extensions
#: How many virtual machine steps SQLite takes between two looks at a search's deadline
#: (FTS5's own statements, run inside a MATCH, count too): often enough that a scan of
#: long rows, where one step may test a whole message, stops soon after the deadline;
#: seldom enough that looking costs next to nothing.
_PROGRESS_STEPS = 1_000


def _interrupted(exc: DBAPIError) -> bool:
    """A statement SQLite stopped because the progress handler asked it to."""
    return getattr(exc.orig, "sqlite_errorcode", None) == sqlite3.SQLITE_INTERRUPT


#: constants of the literal tier's conditions, written into the SQL
_BLANK: ColumnElement[Any] = literal_column("''")
_TOOL: ColumnElement[Any] = literal_column("'tool'")


def _fts_damaged(exc: DatabaseError) -> bool:
    """Corruption reported by an FTS query. It is treated as damage of the index only if
    the LIKE scan that replaces it can read the messages; if that scan fails too, its
    error propagates (structural damage fails closed)."""
    code = getattr(exc.orig, "sqlite_errorcode", None)
    return code is not None and code & 0xFF == _SQLITE_CORRUPT


def _damaged(table: str, exc: DatabaseError) -> IndexDamaged:
    log.warning(
        "the full-text index %s is damaged (%s); searching with a LIKE scan instead. "
        "Repair it with: hermes-store fts rebuild",
        table,
        exc.orig,
    )
    return IndexDamaged(table)


_TRIGRAM_TABLE = "SELECT 1 FROM sqlite_master WHERE name = 'messages_fts_trigram'"


def _tuples(cursor: sqlite3.Cursor) -> list[Any]:
    return cursor.fetchall()


def _fts5_string(value: str) -> str:
    return '"' + value.replace('"', '""') + '"'


def _trigram_cover(literal: str) -> str:
    """An FTS5 query of the trigram index for candidates holding `literal`: its
    trigrams side by side (and the last), AND-ed, rather than the phrase of all of
    them. Every row holding the literal holds these, and the rows are checked for the
    literal itself anyway; FTS5 answers the AND by seeking from its rarest part, while
    a phrase reads the position lists of every trigram, the commonest ones included."""
    parts = [literal[i : i + TRIGRAM_CHARS] for i in range(0, len(literal), TRIGRAM_CHARS)]
    if len(parts[-1]) < TRIGRAM_CHARS:
        parts[-1] = literal[-TRIGRAM_CHARS:]
    return " AND ".join(_fts5_string(part) for part in dict.fromkeys(parts))


def trigram_probe(tokens: list[str]) -> str | None:
    """An FTS5 query of the trigram index for the rows the substring route's query
    reads there: for each OR-alternative, the AND of every trigram of its positive
    tokens (a phrase of a token is matched from these terms' lists, so their
    intersection is the work it takes). None when no alternative holds one."""
    alternatives: list[list[str]] = []
    for group in q.or_groups(tokens):
        strings: list[str] = []
        for token, negated in group:
            if not negated:
                text = token.lower()  # the trigram index folds case
                grams = (text[i : i + TRIGRAM_CHARS] for i in range(len(text) - 2))
                strings += [_fts5_string(g) for g in grams]
        alternatives.append(strings)
    kept = [list(dict.fromkeys(group)) for group in alternatives if group]
    if not kept:
        return None
    return " OR ".join("(" + " AND ".join(group) + ")" for group in kept)


# --- the routes' statements, one builder each (tests/search/route_sql/sqlite/) ------------

#: The FTS5 tables a route may read: the word index and the trigram index.
FTS_TABLES = ("messages_fts", "messages_fts_trigram")


def _fts(name: str) -> TableClause:
    if name not in FTS_TABLES:
        raise ValueError(f"not a search index: {name!r}")
    return table(name, column("rowid"), column("rank"))


def _matches(name: str, parameter: str = "match") -> ColumnElement[bool]:
    """`name MATCH :parameter`: FTS5 reads its table's own name as every column."""
    return column(name).op("MATCH")(bindparam(parameter))


def _rowid_window(rowid: ColumnElement[Any], edge: Edge | None) -> list[ColumnElement[bool]]:
    """With `edge`, the window of ids at that end of the table: above :floor (newest) or
    up to :ceiling (oldest), backend.id_window."""
    return [] if edge is None else [id_window(rowid, edge)]


@lru_cache(maxsize=256)
def _fts_ids(name: str, parameter: str, edge: Edge | None) -> Select[Any]:
    """The rowids, as `id`, of FTS5 table `name` matching :parameter; with `edge`, in the
    window of ids at that end of the table (FTS5 seeks to the rowid bounds)."""
    fts = _fts(name)
    return select(fts.c.rowid.label("id")).where(
        _matches(name, parameter), *_rowid_window(fts.c.rowid, edge)
    )


@lru_cache(maxsize=256)
def _literal_candidates(
    n: int, trigram: bool, words: bool, long: bool, edge: Edge | None
) -> tuple[IdSelect | None, ColumnElement[bool]]:
    """SqliteSearch.literal_candidates' statement parts for the n-th parameters
    (:lit<n>, :tri<n>, :fts<n>) of a literal (of 3 or more characters: `long`), built
    once per shape: Core builds an expression slower than SQLite answers a small one."""
    # FTS5 seeks to rowid bounds: a window of the newest or oldest rows costs what it holds
    sources: list[Select[Any]] = []
    if trigram:
        sources.append(_fts_ids("messages_fts_trigram", f"tri{n}", edge))
    if words:
        sources.append(_fts_ids("messages_fts", f"fts{n}", edge))
    # SQLite's lower() folds ASCII letters only: exactly query.fold
    exact = or_(
        *(
            func.instr(func.lower(func.coalesce(m.c[name], _BLANK)), bindparam(f"lit{n}")) > ZERO
            for name in _COLUMNS
        )
    )
    if sources:
        return (sources[0] if len(sources) == 1 else union(*sources)), exact
    scope = [m.c.role != _TOOL] if long else []
    scope += [id_window(m.c.id, edge)] if edge else []
    return None, and_(*scope, exact)


@lru_cache(maxsize=256)
def _literal_ids(n: int, trigram: bool, words: bool, long: bool, edge: Edge | None) -> IdSelect:
    """SqliteSearch.literal_ids' statement for the n-th parameters of a literal."""
    candidates, condition = _literal_candidates(n, trigram, words, long, edge)
    scope = [] if candidates is None else [m.c.id.in_(candidates)]
    return select(m.c.id).where(*scope, condition)


@lru_cache(maxsize=64)
def _literal_estimate(shapes: tuple[tuple[int, bool, bool, bool], ...]) -> Select[Any]:
    """SqliteSearch.literal_estimate's statement: for each literal (the n of its
    parameters, trigram, words, long: as `_literal_candidates`), the count of its
    candidates above :floor, summed."""
    counts: list[ColumnElement[Any]] = []
    for n, trigram, words, long in shapes:
        candidates, _ = _literal_candidates(n, trigram, words, long, "newest")
        if candidates is None:  # no index: every row of the scan is checked
            scope = [m.c.role != _TOOL] if long else []
            candidates = select(m.c.id).where(m.c.id > bindparam("floor"), *scope)
        found = candidates.subquery()
        counts.append(select(func.count()).select_from(found).scalar_subquery())
    return select(reduce(add, counts))


def _walk(rowid: ColumnElement[Any], oldest: bool, edge: Edge | None) -> UnaryExpression[Any]:
    """The index's rowid order (newest first, or oldest first). In a window (`edge`) the
    rowid is read forward and sorted here (`+rowid`): FTS5 reads a term's whole list to
    walk it backwards, so a bound below a backward walk saves nothing."""
    key: ColumnElement[Any] = UnaryExpression(rowid, operator=custom_op("+")) if edge else rowid
    return key.asc() if oldest else key.desc()


def _hit_columns(snippet: ColumnElement[Any]) -> list[ColumnElement[Any]]:
    return [
        m.c.id,
        m.c.session_id,
        m.c.role,
        snippet.label("snippet"),
        m.c.timestamp,
        m.c.tool_name,
        s.c.source,
        s.c.model,
        s.c.started_at.label("session_started"),
    ]


def _snippet(name: str, hit_id: ColumnElement[Any]) -> ColumnElement[Any]:
    """The snippet of the hit `hit_id`, computed for the page's rows only."""
    fts = _fts(name)
    marks: tuple[ColumnElement[Any], ...] = (
        literal_column("'>>>'"),
        literal_column("'<<<'"),
        literal_column("'...'"),
    )
    snippet = func.snippet(column(name), literal_column("-1"), *marks, literal_column("40"))
    return select(snippet).where(_matches(name), fts.c.rowid == hit_id).scalar_subquery()


def _by_time(timestamp: ColumnElement[Any], direction: str | None) -> list[Any]:
    """A time sort's first key (backend.time_direction), none for relevance."""
    if direction is None:
        return []
    return [timestamp.asc() if direction == "ASC" else timestamp.desc()]


def _written(n: int) -> Any:
    """A LIMIT written into the statement. SQLite (3.53) takes several times as long over
    a statement holding a bound LIMIT (about 55 us instead of 11 for a ranked route
    that finds nothing), so the ranked routes are built per page size, not per call."""
    return literal_column(str(int(n)))


@lru_cache(maxsize=128)
def ranked_top_statement(
    name: str, filters: FilterShape, edge: Edge | None, window: int, ranked: int | None
) -> RouteStatement:
    """A ranked route of FTS5 table `name` (the word or the trigram index), bounded
    (limits.RANK_WINDOW), for a relevance sort: the newest :window matches in rowid
    order, straight from the index (FTS5 walks it from the end: the cost is what the
    window holds), their first `ranked` by `rank` (bm25), and of those the rows that pass
    the filters, with snippets. When all of them pass, they are the page (after :offset)
    that filtering the window first gives; else `ranked_statement` answers. The
    messages' rows are read for the page only: reading a row costs more than ranking
    it. `window` and `ranked` are written into the SQL (`_written`); `ranked` None: bound
    as :top. Parameters: :match, :top where bound (and with `edge`, the window of ids at
    that end of the table: :floor or :ceiling, backend.id_window)."""
    fts = _fts(name)
    cand = (
        select(fts.c.rowid.label("id"), fts.c.rank.label("score"))
        .where(_matches(name), *_rowid_window(fts.c.rowid, edge))
        .order_by(_walk(fts.c.rowid, False, edge))
        .limit(_written(window))
        .offset(ZERO)
        .cte("cand")
        .prefix_with("MATERIALIZED")
    )
    top = (
        select(cand.c.id, cand.c.score)
        .order_by(cand.c.score, cand.c.id)
        .limit(bindparam("top") if ranked is None else _written(ranked))
        .offset(ZERO)
        .cte("top")
        .prefix_with("MATERIALIZED")
    )
    statement = (
        select(*_hit_columns(_snippet(name, top.c.id)))
        .select_from(top.join(m, m.c.id == top.c.id).join(s, s.c.id == m.c.session_id))
        .where(*filter_conditions(filters))
        .order_by(top.c.score, top.c.id)
    )
    return RouteStatement(statement, expanding=has_lists(filters))


@lru_cache(maxsize=128)
def ranked_statement(
    name: str,
    filters: FilterShape,
    direction: str | None,
    edge: Edge | None,
    window: int,
    limit: int,
) -> RouteStatement:
    """A ranked route of FTS5 table `name`, bounded (limits.RANK_WINDOW): the newest
    :window matches that pass the filters, in rowid order (oldest first for
    `direction` "ASC", sort="oldest"), then the page of them by `rank` (bm25; by
    timestamp first for a time sort, `direction` "ASC" or "DESC"), then the snippets of
    the page's rows. `window` and `limit` are written into the SQL (`_written`).
    Parameters: :match, :offset (and with `edge`, as ranked_top_statement)."""
    fts = _fts(name)
    rows = fts.join(m, m.c.id == fts.c.rowid)
    if reads_sessions(filters):
        rows = rows.join(s, s.c.id == m.c.session_id)
    cand = (
        select(fts.c.rowid.label("id"), fts.c.rank.label("score"))
        .select_from(rows)
        .where(_matches(name), *_rowid_window(fts.c.rowid, edge), *filter_conditions(filters))
        .order_by(_walk(fts.c.rowid, direction == "ASC", edge))
        .limit(_written(window))
        .offset(ZERO)
        .cte("cand")
        .prefix_with("MATERIALIZED")
    )
    page = (
        select(cand.c.id, cand.c.score, m.c.timestamp)
        .select_from(cand.join(m, m.c.id == cand.c.id))
        .order_by(*_by_time(m.c.timestamp, direction), cand.c.score, cand.c.id)
        .limit(_written(limit))
        .offset(bindparam("offset"))
        .cte("page")
        .prefix_with("MATERIALIZED")
    )
    # the page again in its order (the timestamp read once, in the page)
    statement = (
        select(*_hit_columns(_snippet(name, page.c.id)))
        .select_from(page.join(m, m.c.id == page.c.id).join(s, s.c.id == m.c.session_id))
        .order_by(*_by_time(page.c.timestamp, direction), page.c.score, page.c.id)
    )
    return RouteStatement(statement, expanding=has_lists(filters))


@lru_cache(maxsize=4)
def retry_sample_statement(name: str) -> RouteStatement:
    """The zero-hit retry's sample: how many rows above :floor the FTS5 query :probe
    matches in table `name`."""
    fts = _fts(name)
    statement = (
        select(func.count())
        .select_from(fts)
        .where(_matches(name, "probe"), fts.c.rowid > bindparam("floor"))
    )
    return RouteStatement(statement)


@lru_cache(maxsize=8)
def retry_window_statement(name: str, edge: Edge) -> RouteStatement:
    """How many of the :window matches of :match the window at `edge` holds (:floor or
    :ceiling), up to :window: whether a window read whole the retry's page."""
    fts = _fts(name)
    found = (
        select(fts.c.rowid)
        .where(_matches(name), *_rowid_window(fts.c.rowid, edge))
        .limit(bindparam("window"))
        .offset(ZERO)
        .subquery("found")
    )
    return RouteStatement(select(func.count()).select_from(found))


@lru_cache(maxsize=128)
def scan_statement(filters: FilterShape, like: LikeShape) -> RouteStatement:
    """A LIKE scan, bounded (limits.time_window): the newest :window rows matching the
    terms (backend.like_condition: :t0.., and :lo, :hi for a range) and the filters in id
    order (the primary key walked from the end, until the window is full), then the page
    of them by timestamp, newest first. Parameters: those of the terms, :window, :limit,
    :offset. The snippet is the content (the caller cuts it)."""
    rows = m.join(s, s.c.id == m.c.session_id) if reads_sessions(filters) else m
    cand = (
        select(m.c.id)
        .select_from(rows)
        .where(like_condition(like), *filter_conditions(filters))
        .order_by(m.c.id.desc())
        .limit(bindparam("window"))
        .offset(ZERO)
        .cte("cand")
        .prefix_with("MATERIALIZED")
    )
    statement = (
        select(*_hit_columns(m.c.content))
        .select_from(cand.join(m, m.c.id == cand.c.id).join(s, s.c.id == m.c.session_id))
        .order_by(m.c.timestamp.desc(), m.c.id.desc())
        .limit(bindparam("limit"))
        .offset(bindparam("offset"))
    )
    return RouteStatement(statement, expanding=has_lists(filters))


class SqliteSearch(SearchBackend):
    dialect = "sqlite"
    word_route = "fts5"

    def recoverable(self, exc: DBAPIError) -> bool:
        # a failed SELECT (an FTS5 syntax error, a missing table) leaves SQLite's read
        # transaction as it was; lock contention is the whole read's to wait out, and a
        # statement stopped at the deadline ends the search
        return not is_retryable(exc) and not _interrupted(exc)

    @contextmanager
    def time_limit(self, budget_ms: float | None) -> Iterator[None]:
        # A progress handler on the driver connection, for this search only: SQLite
        # calls it every _PROGRESS_STEPS steps of any statement, and a true answer stops
        # the statement running (SQLITE_INTERRUPT). The read transaction stays usable.
        if budget_ms is None:
            yield
            return
        driver = self.conn.connection.driver_connection
        # either SQLite library (sqlite_driver): the standard library's and pysqlite3's
        # connections are distinct classes with the same progress handler
        if not isinstance(driver, sqlite_driver.Connection):
            # another driver: its statements are not stopped, no statement starts late
            with super().time_limit(budget_ms):
                yield
            return
        deadline = time.monotonic() + budget_ms / 1000

        def past_deadline() -> bool:
            return time.monotonic() >= deadline

        driver.set_progress_handler(past_deadline, _PROGRESS_STEPS)
        try:
            with super().time_limit(budget_ms):
                yield
        except DBAPIError as exc:
            if not _interrupted(exc):
                raise
            raise self.timed_out() from exc
        finally:
            driver.set_progress_handler(None, 0)

    def _fts(
        self,
        table: str,
        match: str,
        filters: Filters,
        sort: str | None,
        limit: int,
        offset: int,
        bound: tuple[Edge, int] | None = None,
    ) -> list[Hit]:
        # No SAVEPOINT: on SQLite a failing SELECT (an FTS5 syntax error, a damaged index)
        # leaves the read transaction usable for the routes that follow.
        window = limits.rank_window(limit, offset)
        edge = None if bound is None else bound[0]
        ids = {} if bound is None else {"floor" if edge == "newest" else "ceiling": bound[1]}
        if time_direction(sort) is None:
            top = limit + offset
            # the first page's size written in; a later page's bound (:top), so that
            # paging does not build a statement per offset
            ranked = top if offset == 0 else None
            statement = ranked_top_statement(table, filters.shape, edge, window, ranked)
            rows = self.run(statement, filters, {"match": match, "top": top, **ids})
            if len(rows) == top:
                return rows[offset:]
        params = {"match": match, "offset": offset, **ids}
        direction = time_direction(sort)
        statement = ranked_statement(table, filters.shape, direction, edge, window, limit)
        return self.run(statement, filters, params)

    def _bounded_trigram(
        self,
        query: SearchQuery,
        match: str,
        filters: Filters,
        sort: str | None,
        limit: int,
        offset: int,
    ) -> list[Hit]:
        """The zero-hit retry (SearchBackend.substring_hits): the whole trigram index when
        the newest limits.RETRY_SAMPLE ids put the rows its phrase reads at
        limits.RETRY_CHECKS or fewer; else the newest ids that hold about that many
        (FTS5 seeks to the bound, so that costs what the window holds), with a warning
        unless they hold the whole window of matches the whole index would rank."""
        table = "messages_fts_trigram"
        probe = trigram_probe(list(query.tokens))
        found = self.id_range()
        if probe is None or found is None:
            return self._fts(table, match, filters, sort, limit, offset)
        lowest, highest = found
        ids = highest - lowest + 1
        sample = min(limits.RETRY_SAMPLE, ids)
        counted = self.count(
            retry_sample_statement(table), {"probe": probe, "floor": highest - sample}
        )
        estimate = self.retry_estimate(counted, sample, ids)
        if estimate <= limits.RETRY_CHECKS:
            return self._fts(table, match, filters, sort, limit, offset)
        span = max(limits.RETRY_SAMPLE, int(limits.RETRY_CHECKS * ids / estimate))
        oldest = oldest_first(sort)
        edge: Edge = "oldest" if oldest else "newest"
        bound = lowest - 1 + span if oldest else highest - span
        window = limits.rank_window(limit, offset)
        name = "ceiling" if oldest else "floor"
        matched = self.count(
            retry_window_statement(table, edge), {"match": match, name: bound, "window": window}
        )
        if matched < window:  # older matches may exist: the span is all that was read
            self.warnings.append(limits.retry_warning(query.text, span, estimate))
        return self._fts(table, match, filters, sort, limit, offset, (edge, bound))

    def word_hits(
        self, query: SearchQuery, filters: Filters, sort: str | None, limit: int, offset: int
    ) -> list[Hit]:
        try:
            return self._fts("messages_fts", query.sanitized, filters, sort, limit, offset)
        except OperationalError as exc:
            if not self.recoverable(exc):
                raise
            raise QuerySyntaxError(str(exc.orig)) from exc
        except DatabaseError as exc:
            if not _fts_damaged(exc):
                raise  # damage outside the index: fail closed
            raise _damaged("messages_fts", exc) from exc

    # A statement given as text runs at the driver (engine.driver_run): SQLAlchemy's
    # execution of a statement costs about as much as SQLite's answer to a small one.
    def fetch(self, sql: str, params: Params) -> list[Any]:
        self.check_time()
        return driver_run(self.conn, sql, params, _tuples)

    def count(self, statement: RouteStatement, params: Params) -> int:
        """The count a statement of one row and one column gives."""
        return int(self.tuples(statement, params)[0][0])

    @cached_property
    def _has_trigram_table(self) -> bool:
        # asked once per search: a search is one read transaction, whose schema holds
        return bool(self.fetch(_TRIGRAM_TABLE, {}))

    def _trigram_usable(self) -> bool:
        return self._has_trigram_table

    def substring_hits(
        self,
        query: SearchQuery,
        filters: Filters,
        sort: str | None,
        limit: int,
        offset: int,
        *,
        bounded: bool = False,
    ) -> list[Hit] | None:
        if filters.wants_tool_rows or not self._trigram_usable():
            return None
        match = q.quote_tokens(list(query.tokens))
        try:
            if bounded:
                return self._bounded_trigram(query, match, filters, sort, limit, offset)
            return self._fts("messages_fts_trigram", match, filters, sort, limit, offset)
        except OperationalError as exc:
            if not self.recoverable(exc):
                raise
            log.debug("trigram route failed: %s", exc)
            return None
        except DatabaseError as exc:
            if not _fts_damaged(exc):
                raise
            _damaged("messages_fts_trigram", exc)
            return None

    def scan(
        self, like: LikeShape, filters: Filters, params: Params, snippet: Snippet
    ) -> list[Hit]:
        rows = self.run(scan_statement(filters.shape, like), filters, params)
        for row in rows:
            row["snippet"] = snippet(row["snippet"])
        return rows

    def pending_range(self) -> tuple[int, int] | None:
        rows: dict[str, str] = dict(
            self.fetch(
                "SELECT key, value FROM state_meta WHERE key IN (:h, :p)",
                {"h": HIGH_WATER, "p": PROGRESS},
            )
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

    # --- id sets for the literal tier -------------------------------------------------------

    def word_ids(self, terms: list[Term], params: dict[str, Any], *, edge: Edge | None) -> IdSelect:
        name = f"w{len(params)}"
        params[name] = " AND ".join(_fts5_string(t.text) + "*" * t.prefix for t in terms)
        return _fts_ids("messages_fts", name, edge)

    def has_trigram_index(self) -> bool:
        return self._trigram_usable()

    def literal_ids(
        self, literal: str, params: Params, *, trigram: bool, words: bool, edge: Edge | None
    ) -> IdSelect:
        n = len(params)
        self.literal_candidates(literal, params, trigram=trigram, words=words, edge=edge)
        return _literal_ids(n, trigram, words, len(literal) >= TRIGRAM_CHARS, edge)

    def literal_candidates(
        self, literal: str, params: Params, *, trigram: bool, words: bool, edge: Edge | None
    ) -> tuple[IdSelect | None, ColumnElement[bool]]:
        n = len(params)
        params[f"lit{n}"] = fold(literal)
        if trigram:
            params[f"tri{n}"] = _trigram_cover(literal)
        if words:
            params[f"fts{n}"] = _fts5_string(literal)  # a phrase of the tokenizer's own words
        return _literal_candidates(n, trigram, words, len(literal) >= TRIGRAM_CHARS, edge)

    def literal_window_by_index(self, window: int) -> bool:
        # FTS5 seeks to the window's rowid bounds: every window is read through the
        # indexes and costs what it holds
        return False

    def literal_estimate(
        self, literals: list[tuple[str, bool, bool]], params: Params
    ) -> Select[Any]:
        shapes = []
        for literal, trigram, words in literals:
            shapes.append((len(params), trigram, words, len(literal) >= TRIGRAM_CHARS))
            self.literal_candidates(literal, params, trigram=trigram, words=words, edge="newest")
        return _literal_estimate(tuple(shapes))

    def literal_rows(
        self, statement: Executable, filters: Filters, params: dict[str, Any]
    ) -> list[Hit]:
        try:
            return super().literal_rows(statement, filters, params)
        except OperationalError:
            raise
        except DatabaseError as exc:
            if not _fts_damaged(exc):
                raise
            raise _damaged("messages_fts", exc) from exc
