"""What a search backend offers the planner, and how one is picked per dialect: a backend
class names its `dialect` and, as it subclasses SearchBackend, becomes the `search` part
of that dialect (runtime/backends.py); `backend_for` reads it through `dialect_for`.

A backend knows its dialect's indexes and how to ask them; the planner (planner.py)
decides which route runs, in which order, what falls back to what, and how pages are
assembled. Every method takes the filters and bound parameters; no user text is ever
spelled into SQL.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from functools import lru_cache
from typing import Any, ClassVar, Literal

from sqlalchemy import (
    ColumnElement,
    CompoundSelect,
    Connection,
    Executable,
    FromClause,
    Select,
    bindparam,
    select,
)
from sqlalchemy.exc import DBAPIError

from ..errors import SearchTimedOut
from ..runtime.backends import dialect_for, dialect_named
from . import limits
from .common import (
    ZERO,
    Edge,
    Filters,
    LikeShape,
    RouteStatement,
    attach_context,
    fetch_rows,
    like_snippet,
    m,
)
from .query import SearchQuery, Term, like_pattern

Hit = dict[str, Any]
#: the access method of the word index (index_method.py)
IndexMethod = Literal["rum", "gin", "fts5"]
Params = dict[str, Any]
#: a snippet from a row's content
Snippet = Callable[[Any], str]
#: A SELECT of one column of message ids, `id` (the literal tier's id sets)
IdSelect = Select[Any] | CompoundSelect[Any]

#: An execution option on the connection, true when its transaction ends with the
#: search (a repository's read unit): what the search set for itself then needs no
#: putting back, which on a server is one round trip less.
TRANSACTION_ENDS_WITH_SEARCH = "hermes_store_transaction_ends_with_search"


class IndexDamaged(Exception):
    """A full-text index answered with corruption; the planner falls back to a scan."""


class SearchBackend:
    #: the SQLAlchemy dialect name this backend serves (None: abstract)
    dialect: ClassVar[str | None] = None
    #: the route name the word index's answers are logged under
    word_route: ClassVar[str] = "fts5"
    #: How many of the newest message ids the literal tier looks among first (literal.py);
    #: a window that falls short costs about this many rows' worth on top.
    literal_window: ClassVar[int] = 8_192
    #: The most ids a second window sized by the first's density may hold
    #: (`wider_window`; 0: no such window).
    literal_widest_window: ClassVar[int] = 0
    #: Wider windows read through the indexes before the whole table (`wider_window`).
    literal_index_windows: ClassVar[tuple[int, ...]] = ()
    #: The hits the first window must show for a second one to be sized by its density.
    literal_sizing_hits: ClassVar[int] = 8

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if cls.dialect is not None:
            dialect_named(cls.dialect).search = cls

    def __init__(self, conn: Connection) -> None:
        self.conn = conn
        #: time.monotonic() past which no statement of the search starts (time_limit)
        self.deadline: float | None = None
        self.budget_ms = 0.0
        #: why the answer may leave out matches (limits.SearchHits.warnings)
        self.warnings: list[str] = []

    @contextmanager
    def time_limit(self, budget_ms: float | None) -> Iterator[None]:
        """The search inside runs for at most about `budget_ms` milliseconds (None: no
        limit), then ends with SearchTimedOut. Here: no statement starts past the
        deadline (`check_time`); a backend also stops the statement running then."""
        if budget_ms is None:
            yield
            return
        self.budget_ms = budget_ms
        self.deadline = time.monotonic() + budget_ms / 1000
        try:
            yield
        finally:
            self.deadline = None

    def check_time(self) -> None:
        """SearchTimedOut once the deadline of `time_limit` has passed."""
        if self.deadline is not None and time.monotonic() >= self.deadline:
            raise self.timed_out()

    def timed_out(self) -> SearchTimedOut:
        return limits.timed_out(self.budget_ms)

    def index_method(self, *, cached: bool = True) -> IndexMethod:
        """The access method of the word index (index_method.py): "fts5" here; with
        `cached`, as read once per pooled connection."""
        return "fts5"

    def recoverable(self, exc: DBAPIError) -> bool:
        """Whether the search may go on in the same transaction after `exc` (a route that
        failed falls back to the next). Never after a fault the whole read must be retried
        for (a lost connection, lock contention), nor where any error ends the
        transaction (PostgreSQL): the error then leaves the search, and `Store.read`
        runs the search again on a fresh connection where the fault is transient."""
        return False

    # --- the original's routes: each returns hits with their snippet ----------------------

    def word_hits(
        self, query: SearchQuery, filters: Filters, sort: str | None, limit: int, offset: int
    ) -> list[Hit]:
        """The word index, ranked among the newest `limits.RANK_WINDOW` matches
        (limits.py). QuerySyntaxError for what FTS5 rejects, IndexDamaged when the index
        is damaged."""
        raise NotImplementedError

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
        """The trigram index (non-tool rows), or None when it cannot answer. `bounded`
        (the zero-hit retry): about limits.RETRY_CHECKS candidate rows checked at most,
        estimated from the newest limits.RETRY_SAMPLE ids; past that only the newest
        rows the budget allows are read, and `warnings` says so."""
        raise NotImplementedError

    def retry_estimate(self, candidates: int, sampled: int, rows: float) -> float:
        """The candidates of the whole table, from `candidates` among `sampled` rows."""
        return 0.0 if sampled <= 0 else candidates / sampled * rows

    def like_hits(
        self,
        terms: list[str],
        filters: Filters,
        limit: int,
        offset: int,
        *,
        all_terms: bool = False,
        id_range: tuple[int, int] | None = None,
    ) -> list[Hit]:
        """A scan: each term a case-insensitive substring of content, tool name or tool
        calls (OR, or AND with `all_terms`), newest first; the snippet starts 40
        characters before the first term in content (docs/reference/behaviour.md 6.1)."""
        params: dict[str, Any] = {f"t{n}": like_pattern(term) for n, term in enumerate(terms)}
        like = LikeShape(
            tuple(self.like_operator(t) for t in terms), all_terms, id_range is not None
        )
        if id_range is not None:
            params["lo"], params["hi"] = id_range
        first = terms[0] if terms else ""
        params.update(limit=limit, offset=offset, window=limits.time_window(limit, offset))
        return self.scan(like, filters, params, lambda content: like_snippet(content, first))

    def like_operator(self, term: str) -> str:
        """LIKE or a case-insensitive equivalent for `term` (ASCII letters at least)."""
        return "LIKE"

    def scan(
        self, like: LikeShape, filters: Filters, params: Params, snippet: Snippet
    ) -> list[Hit]:
        """The page (:limit, :offset) of rows matching `like` (common.like_condition),
        newest first, each with `snippet(content)`: among the newest :window matches in id
        order (limits.py)."""
        raise NotImplementedError

    def pending_range(self) -> tuple[int, int] | None:
        """The id range (P, H] a pending backfill has not indexed yet, if any."""
        return None

    # --- id sets for the literal reading (literal.py assembles them) -----------------------

    def word_ids(self, terms: list[Term], params: dict[str, Any], *, edge: Edge | None) -> IdSelect:
        """SELECT of the ids of rows holding every term (words, phrases, prefixes); with
        `edge`, only ids in the window at that end of the table (common.id_window; read
        from the index itself, so that a window costs what it holds)."""
        raise NotImplementedError

    def has_trigram_index(self) -> bool:
        return True

    def literal_ids(
        self, literal: str, params: Params, *, trigram: bool, words: bool, edge: Edge | None
    ) -> IdSelect:
        """SELECT of the ids of the rows whose content, tool name or tool calls contain
        `literal` by `query.fold`, among: with `trigram`, the non-tool rows (the trigram
        index); with `words`, the rows holding its words as a phrase (the word index;
        only its tool rows are needed when `trigram` is set too); with neither, every
        row, or every non-tool row for a literal of 3 or more characters (a scan). With
        `edge`, only ids in the window, as `word_ids`."""
        raise NotImplementedError

    def literal_candidates(
        self, literal: str, params: Params, *, trigram: bool, words: bool, edge: Edge | None
    ) -> tuple[IdSelect | None, ColumnElement[bool] | None]:
        """The rows `literal_ids` gives, in two parts: a SELECT of candidate ids (None:
        every row) and a condition on the row `m` that decides among them (None: every
        candidate holds the literal). A page cut in id order with the condition applied
        row by row checks candidates only until the page is full. By default: the exact
        id set, nothing left to decide."""
        ids = self.literal_ids(literal, params, trigram=trigram, words=words, edge=edge)
        return ids, None

    def literal_estimate(
        self, literals: list[tuple[str, bool, bool]], params: Params
    ) -> Select[Any]:
        """A statement of one value: the candidates the indexes hand over for each of
        `literals` (literal, trigram, words: as `literal_ids` takes them) among the ids
        above :floor, summed (literal.py's budget)."""
        raise NotImplementedError

    @staticmethod
    def literal_page(
        rows: FromClause, where: list[ColumnElement[bool]], *, oldest: bool
    ) -> Select[Any]:
        """The literal tier's page: the ids of the `rows` (`messages AS m`, maybe joined
        to `sessions AS s`) matching every condition of `where`, in id order (newest
        first, or oldest first), the first :limit of them."""
        return (
            select(m.c.id)
            .select_from(rows)
            .where(*where)
            .order_by(m.c.id.asc() if oldest else m.c.id.desc())
            .limit(bindparam("limit"))
            .offset(ZERO)  # SQLite's compiler writes an OFFSET with any LIMIT: a constant one
        )

    def wider_window(self, window: int, found: int, limit: int) -> int | None:
        """The ids the next window should hold after one of `window` ids held `found`
        hits, fewer than the `limit` of a page; None to go to the whole table.

        After the first window, where it showed the literal often enough to say how far
        back a page reaches (`sizes_by_density`): three times as many ids as that
        density needs, at most `literal_widest_window` (read like the first).
        Otherwise, and after that one, the next of `literal_index_windows` wider than
        `window`, read through the indexes (docs/search-at-scale.md). Each window is one
        statement, started only within the search's time limit (check_time), so the
        series ends at the deadline as any search does."""
        widest = self.literal_widest_window
        if window == self.literal_window and widest > window and self.sizes_by_density(found):
            return min(window * math.ceil(3 * limit / found), widest)
        return next((w for w in self.literal_index_windows if w > window), None)

    def sizes_by_density(self, found: int) -> bool:
        """Whether `found` hits in the first window are enough for `wider_window` to size
        a second one by their density."""
        return found >= self.literal_sizing_hits

    def literal_window_by_index(self, window: int) -> bool:
        """Whether a window of `window` ids is read through the indexes (their
        candidates in the window) rather than row by row."""
        return window > max(self.literal_window, self.literal_widest_window)

    def id_range(self) -> tuple[int, int] | None:
        """The lowest and highest message ids, None when there are no messages."""
        found = self.fetch(ID_RANGE_SQL, {})
        if not found or found[0][0] is None:
            return None
        return int(found[0][0]), int(found[0][1])

    def attach_context(self, hits: list[Hit]) -> None:
        """Set `context` on hits that have none (common.attach_context)."""
        attach_context(self.tuples, hits, self.recoverable)

    def literal_rows(
        self, statement: Executable, filters: Filters, params: dict[str, Any]
    ) -> list[Hit]:
        """Run the literal tier's statement; IndexDamaged when an index is damaged."""
        return self.rows(statement, filters, params)

    # --- running SQL -------------------------------------------------------------------------

    def run(self, statement: RouteStatement, filters: Filters, params: Params) -> list[Hit]:
        """The rows of a route's statement carrying `filters`, as dicts."""
        self.check_time()
        return statement.dicts(self.conn, {**filters.params, **params})

    def run_tuples(self, statement: RouteStatement, filters: Filters, params: Params) -> list[Any]:
        """`run`'s rows as tuples."""
        self.check_time()
        return statement.tuples(self.conn, {**filters.params, **params})

    def rows(self, statement: Executable, filters: Filters, params: Params) -> list[Hit]:
        """The rows of the literal tier's statement carrying `filters`, as dicts."""
        self.check_time()
        route = _route(statement, bool(filters.expanding))
        return route.dicts(self.conn, {**filters.params, **params})

    def values(self, statement: Executable, params: Params) -> list[Any]:
        """`rows`' rows of a statement without filters, as tuples."""
        self.check_time()
        return _route(statement, False).tuples(self.conn, params)

    def tuples(self, statement: RouteStatement, params: Params) -> list[Any]:
        """The rows of a route's statement without filters, as tuples."""
        self.check_time()
        return statement.tuples(self.conn, params)

    def fetch(self, sql: str, params: Params) -> list[Any]:
        """The rows of a statement without filters, as tuples."""
        self.check_time()
        return fetch_rows(self.conn, sql, params)


#: The lowest and highest message ids, in two subqueries: SQLite seeks the primary key
#: for a lone min() or max() only, and scans the whole table for both in one SELECT.
ID_RANGE_SQL = "SELECT (SELECT min(id) FROM messages), (SELECT max(id) FROM messages)"


@lru_cache(maxsize=256)
def _route(statement: Executable, expanding: bool) -> RouteStatement:
    """The literal tier's statement (built once per shape, literal.py) as a route's: run
    at the driver, compiled once per dialect, where no filter holds a list."""
    return RouteStatement(statement, expanding=expanding)


def backend_for(conn: Connection) -> SearchBackend:
    """The search backend of `conn`'s dialect: its `search` part, on `conn`."""
    return dialect_for(conn).search(conn)
