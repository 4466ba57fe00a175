"""Search on SQLite: the FTS5 word index, the trigram index, and a LIKE scan (the routes
of docs/reference/behaviour.md 6.4, ordered by planner.py), plus the id range a pending backfill
has not indexed yet (6.5).

All SQL here is assembled from fixed fragments; user text only ever travels as bound
parameters.
"""

from __future__ import annotations

import logging
import sqlite3
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from sqlalchemy.exc import DatabaseError, DBAPIError, OperationalError

from .. import sqlite_driver
from ..engine import driver_run
from ..retry import is_retryable
from . import limits
from . import query as q
from .backend import Hit, IndexDamaged, Params, SearchBackend, Snippet
from .common import Edge, Filters, id_window, oldest_first, ranked_order, time_direction
from .layout import HIGH_WATER, PROGRESS
from .query import TRIGRAM_CHARS, QuerySyntaxError, SearchQuery, Term, fold

log = logging.getLogger(__name__)

_SELECT = (
    "SELECT m.id, m.session_id, m.role, {snippet} AS snippet, m.timestamp, m.tool_name, "
    "s.source, s.model, s.started_at AS session_started"
)
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


def _in_window(edge: Edge | None) -> str:
    return f" AND {id_window('rowid', edge)}" if edge else ""


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


def _dicts(cursor: sqlite3.Cursor) -> list[Hit]:
    keys = [column[0] for column in cursor.description]
    return [dict(zip(keys, values, strict=True)) for values in cursor.fetchall()]


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


def _snippet(table: str, row: str) -> str:
    """The snippet of the hit `row`.id, computed for the page's rows only."""
    return (
        f"(SELECT snippet({table}, -1, '>>>', '<<<', '...', 40) FROM {table}"  # noqa: S608
        f" WHERE {table} MATCH :match AND {table}.rowid = {row}.id)"
    )


def _window(
    table: str, join: str = "", where: str = "", walk: str = "DESC", edge: Edge | None = None
) -> str:
    """The first :window matches of `table` in rowid order (`walk`), with their bm25.
    With `edge`, among the ids in the window at that end of the table (:floor or
    :ceiling), read forward and sorted here: FTS5 reads a term's whole list to walk it
    backwards, so a bound below a backward walk saves nothing."""
    order = f"+{table}.rowid" if edge else f"{table}.rowid"
    return (
        f"SELECT {table}.rowid AS id, {table}.rank AS score FROM {table}{join}"  # noqa: S608
        f" WHERE {table} MATCH :match{_rowids_in(table, edge)}{where}"
        f" ORDER BY {order} {walk} LIMIT :window"
    )


def _rowids_in(table: str, edge: Edge | None) -> str:
    return f" AND {id_window(f'{table}.rowid', edge)}" if edge else ""


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


def ranked_top_sql(table: str, filters: Filters, edge: Edge | None = None) -> str:
    """A ranked route of FTS5 table `table` (the word or the trigram index), bounded
    (limits.RANK_WINDOW), for a relevance sort: the newest :window matches in rowid
    order, straight from the index (FTS5 walks it from the end: the cost is what the
    window holds), their first :top by `rank` (bm25), and of those the rows that pass
    the filters, with snippets. When all :top pass, they are the page (after :offset)
    that filtering the window first gives; else `ranked_sql` answers. The messages'
    rows are read for the page only: reading a row costs more than ranking it.
    Parameters: :match, :window, :top (and with `edge`, the window of ids at that end
    of the table: :floor or :ceiling, common.id_window)."""
    sessions = " JOIN sessions AS s ON s.id = m.session_id"
    return (
        f"WITH cand AS MATERIALIZED ({_window(table, edge=edge)}),"  # noqa: S608
        " top AS MATERIALIZED (SELECT id, score FROM cand ORDER BY score, id LIMIT :top) "
        + _SELECT.format(snippet=_snippet(table, "top"))
        + f" FROM top JOIN messages AS m ON m.id = top.id{sessions}"
        f" WHERE 1 = 1{filters.sql} ORDER BY top.score, top.id"
    )


def ranked_sql(table: str, filters: Filters, sort: str | None, edge: Edge | None = None) -> str:
    """A ranked route of FTS5 table `table`, bounded (limits.RANK_WINDOW): the newest
    :window matches that pass the filters, in rowid order (oldest first for
    sort="oldest"), then the page of them by `rank` (bm25; by timestamp first for a time
    sort), then the snippets of the page's rows. Parameters: :match, :window, :limit,
    :offset (and with `edge`, as ranked_top_sql)."""
    walk = "ASC" if oldest_first(sort) else "DESC"
    sessions = " JOIN sessions AS s ON s.id = m.session_id" if filters.reads_sessions else ""
    join = f" JOIN messages AS m ON m.id = {table}.rowid{sessions}"
    candidates = _window(table, join, filters.sql, walk, edge)
    page = (
        "SELECT cand.id, cand.score, m.timestamp FROM cand"  # noqa: S608
        " JOIN messages AS m ON m.id = cand.id"
        f" ORDER BY {ranked_order(sort, 'cand.score, cand.id')}"
        " LIMIT :limit OFFSET :offset"
    )
    # the page again in its order (the timestamp read once, in the page)
    order = ranked_order(sort, "page.score, page.id").replace("m.timestamp", "page.timestamp")
    return (
        f"WITH cand AS MATERIALIZED ({candidates}), page AS MATERIALIZED ({page}) "
        + _SELECT.format(snippet=_snippet(table, "page"))
        + " FROM page JOIN messages AS m ON m.id = page.id"
        " JOIN sessions AS s ON s.id = m.session_id"
        f" ORDER BY {order}"
    )


def scan_sql(where: str, filters: Filters) -> str:
    """A LIKE scan, bounded (limits.time_window): the newest :window rows matching
    `where` and the filters in id order (the primary key walked from the end, until
    the window is full), then the page of them by timestamp, newest first. Parameters:
    those of `where`, :window, :limit, :offset."""
    sessions = " JOIN sessions AS s ON s.id = m.session_id" if filters.reads_sessions else ""
    candidates = (
        f"SELECT m.id FROM messages AS m{sessions} WHERE ({where}){filters.sql}"  # noqa: S608
        " ORDER BY m.id DESC LIMIT :window"
    )
    return (
        f"WITH cand AS MATERIALIZED ({candidates}) "
        + _SELECT.format(snippet="m.content")
        + " FROM cand JOIN messages AS m ON m.id = cand.id"
        " JOIN sessions AS s ON s.id = m.session_id"
        " ORDER BY m.timestamp DESC, m.id DESC LIMIT :limit OFFSET :offset"
    )


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
            params = {"match": match, "window": window, "top": top, **ids}
            rows = self.rows(ranked_top_sql(table, filters, edge), filters, params)
            if len(rows) == top:
                return rows[offset:]
        params = {"match": match, "window": window, "limit": limit, "offset": offset, **ids}
        return self.rows(ranked_sql(table, filters, sort, edge), filters, params)

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
        counted = self.fetch(
            f"SELECT count(*) FROM {table} WHERE {table} MATCH :probe AND rowid > :floor",  # noqa: S608
            {"probe": probe, "floor": highest - sample},
        )
        estimate = self.retry_estimate(int(counted[0][0]), sample, ids)
        if estimate <= limits.RETRY_CHECKS:
            return self._fts(table, match, filters, sort, limit, offset)
        span = max(limits.RETRY_SAMPLE, int(limits.RETRY_CHECKS * ids / estimate))
        oldest = oldest_first(sort)
        edge: Edge = "oldest" if oldest else "newest"
        bound = lowest - 1 + span if oldest else highest - span
        window = limits.rank_window(limit, offset)
        name = "ceiling" if oldest else "floor"
        matched = self.fetch(
            f"SELECT count(*) FROM (SELECT rowid FROM {table} WHERE {table} MATCH :match"  # noqa: S608
            f"{_rowids_in(table, edge)} LIMIT :window)",
            {"match": match, name: bound, "window": window},
        )
        if int(matched[0][0]) < window:  # older matches may exist: the span is all that was read
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

    # A search's statements run at the driver (engine.driver_run): SQLAlchemy's execution
    # of a statement costs about as much as SQLite's answer to a small one. A filter with
    # a list (sources, roles) needs SQLAlchemy's expanding parameters, so goes through it.
    def rows(self, sql: str, filters: Filters, params: Params) -> list[Hit]:
        if filters.expanding:
            return super().rows(sql, filters, params)
        self.check_time()
        return driver_run(self.conn, sql, {**filters.params, **params}, _dicts)

    def fetch(self, sql: str, params: Params) -> list[Any]:
        self.check_time()
        return driver_run(self.conn, sql, params, _tuples)

    def _trigram_usable(self) -> bool:
        return bool(self.fetch(_TRIGRAM_TABLE, {}))

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

    def scan(self, where: str, filters: Filters, params: Params, snippet: Snippet) -> list[Hit]:
        rows = self.rows(scan_sql(where, filters), filters, params)
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

    def word_ids(self, terms: list[Term], params: dict[str, Any], *, edge: Edge | None) -> str:
        name = f"w{len(params)}"
        params[name] = " AND ".join(_fts5_string(t.text) + "*" * t.prefix for t in terms)
        window = _in_window(edge)
        return f"SELECT rowid FROM messages_fts WHERE messages_fts MATCH :{name}{window}"  # noqa: S608

    def has_trigram_index(self) -> bool:
        return self._trigram_usable()

    def literal_ids(
        self, literal: str, params: Params, *, trigram: bool, words: bool, edge: Edge | None
    ) -> str:
        candidates, condition = self.literal_candidates(
            literal, params, trigram=trigram, words=words, edge=edge
        )
        scope = f"m.id IN ({candidates}) AND " if candidates else ""
        return f"SELECT m.id FROM messages AS m WHERE {scope}{condition}"  # noqa: S608

    def literal_candidates(
        self, literal: str, params: Params, *, trigram: bool, words: bool, edge: Edge | None
    ) -> tuple[str | None, str]:
        n = len(params)
        params[f"lit{n}"] = fold(literal)
        sources = []
        # FTS5 seeks to rowid bounds: a window of the newest or oldest rows costs what it holds
        window = _in_window(edge)
        if trigram:
            params[f"tri{n}"] = _trigram_cover(literal)
            table = "messages_fts_trigram"
            sources.append(f"SELECT rowid FROM {table} WHERE {table} MATCH :tri{n}{window}")  # noqa: S608
        if words:
            params[f"fts{n}"] = _fts5_string(literal)  # a phrase of the tokenizer's own words
            table = "messages_fts"
            sources.append(f"SELECT rowid FROM {table} WHERE {table} MATCH :fts{n}{window}")  # noqa: S608
        # SQLite's lower() folds ASCII letters only: exactly query.fold
        exact = " OR ".join(
            f"instr(lower(COALESCE(m.{column}, '')), :lit{n}) > 0" for column in _COLUMNS
        )
        if sources:
            return " UNION ".join(sources), f"({exact})"
        scope = "m.role <> 'tool' AND " if len(literal) >= TRIGRAM_CHARS else ""
        scope += f"{id_window('m.id', edge)} AND " if edge else ""
        return None, f"{scope}({exact})"

    def literal_rows(self, sql: str, filters: Filters, params: dict[str, Any]) -> list[Hit]:
        try:
            return super().literal_rows(sql, filters, params)
        except OperationalError:
            raise
        except DatabaseError as exc:
            if not _fts_damaged(exc):
                raise
            raise _damaged("messages_fts", exc) from exc
