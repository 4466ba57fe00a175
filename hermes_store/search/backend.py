"""What every search backend shares, and how one is picked per dialect.

- The backend interface (`SearchBackend`). A backend class names its `dialect` and, as
  it subclasses SearchBackend, becomes the `search` part of that dialect
  (runtime/backends.py): a Store's search takes it from `store.dialect.search`,
  `backend_for(conn)` looks it up through `dialect_for`. A backend knows its dialect's
  indexes and how to ask them; the planner (planner.py) decides which route runs, in
  which order, what falls back to what, and how pages are assembled. Every method
  takes the filters and bound parameters; no user text is ever spelled into SQL.
- What both backends build their routes' statements from: the filters (`Filters`), the
  Core names every statement uses, how a statement of one shape runs
  (`RouteStatement`: compiled once, run at the driver), the LIKE scan's condition.
- What a hit shows: its snippet and its context. Snippets built in Python serve the
  hits no FTS5 `snippet()` describes (PostgreSQL's routes and the literal tier on both
  backends): a window of about 40 words around the first match, every match in it
  between `>>>` and `<<<`, `...` where the text was cut. As FTS5 marks them: a bareword
  is one run per word, a phrase (and a hyphenated or dotted term, which the sanitiser
  quotes) one run from its first word to its last with the text's own punctuation
  between, a prefix term the whole word it starts; a literal is marked exactly where it
  stands, case folded by `query.fold`. A hit's context is the message before it and
  the one after it in its session, read for a page of hits in one statement.
"""

from __future__ import annotations

import json
import math
import re
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from functools import lru_cache
from typing import Any, ClassVar, Literal, NamedTuple

from sqlalchemy import (
    BindParameter,
    ColumnElement,
    CompoundSelect,
    Connection,
    Executable,
    FromClause,
    Select,
    TextClause,
    and_,
    bindparam,
    column,
    exists,
    false,
    literal_column,
    or_,
    select,
    table,
    text,
    tuple_,
    union_all,
    values,
)
from sqlalchemy.engine import Dialect
from sqlalchemy.exc import DBAPIError

from ..contract import PG_SEARCH_VECTOR_COLUMN, TAGS_TABLE
from ..errors import SearchTimedOut
from ..runtime.backends import dialect_for, dialect_named
from ..runtime.engine import Prepared
from . import limits
from .query import SearchQuery, Term, fold, like_pattern, words_of

Hit = dict[str, Any]
#: the access method of the word index (`SearchBackend.index_method`, index_method.py)
IndexMethod = Literal["rum", "gin", "fts5"]
Params = dict[str, Any]
#: a snippet from a row's content
Snippet = Callable[[Any], str]
#: A SELECT of one column of message ids, `id` (the literal tier's id sets)
IdSelect = Select[Any] | CompoundSelect[Any]
#: The end of the table a window of ids is taken from (the literal tier's windows).
Edge = Literal["newest", "oldest"]

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
    #: The most literal-rows (a reading's literals times the table's ids) for which
    #: windows, and a budget's span, are read through the indexes (`index_windows_pay`;
    #: 0: no limit).
    literal_index_rows: ClassVar[int] = 0

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
        """The page (:limit, :offset) of rows matching `like` (`like_condition`),
        newest first, each with `snippet(content)`: among the newest :window matches in id
        order (limits.py)."""
        raise NotImplementedError

    def pending_range(self) -> tuple[int, int] | None:
        """The id range (P, H] a pending backfill has not indexed yet, if any."""
        return None

    # --- id sets for the literal reading (literal.py assembles them) -----------------------

    def word_ids(self, terms: list[Term], params: dict[str, Any], *, edge: Edge | None) -> IdSelect:
        """SELECT of the ids of rows holding every term (words, phrases, prefixes); with
        `edge`, only ids in the window at that end of the table (`id_window`; read
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

    def index_windows_pay(self, literals: int, table: int) -> bool:
        """Whether a reading of `literals` literals in a table spanning `table` ids may
        read windows through the indexes (`literal_window_by_index`): where an index
        hands over a literal's candidates from the whole table whatever the window,
        each such read costs every literal's whole posting lists, and past
        `literal_index_rows` literal-rows the search's time would go to them."""
        return not self.literal_index_rows or literals * table <= self.literal_index_rows

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
        """Set `context` on hits that have none (`attach_context`)."""
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
    """The search backend of `conn`'s dialect: its `search` part, on `conn` (a Store's
    search takes the part its dialect already holds, `store.dialect.search`)."""
    return dialect_for(conn).search(conn)


# --- the filters a search carries ------------------------------------------------------------


class Filters:
    def __init__(
        self,
        source_filter: list[str] | None,
        exclude_sources: list[str] | None,
        role_filter: list[str] | None,
        include_inactive: bool,
        tags: list[str] | None = None,
    ) -> None:
        # the values of filter_conditions' parameters, by their names
        params: dict[str, Any] = {}
        expanding: list[str] = []
        if source_filter:
            params["sources"] = list(source_filter)
            expanding.append("sources")
        if exclude_sources:
            params["excluded"] = list(exclude_sources)
            expanding.append("excluded")
        if role_filter:
            params["roles"] = list(role_filter)
            expanding.append("roles")
        for i, tag in enumerate(tags or ()):
            params[f"tag_{i}"] = tag
        self.shape: FilterShape = (
            "none" if source_filter is None else "list" if source_filter else "empty",
            bool(exclude_sources),
            bool(role_filter),
            bool(include_inactive),
            len(tags or ()),
        )
        self.params = params
        self.expanding = expanding
        # a filter on the session's columns: a page cannot be cut from messages alone
        self.reads_sessions = source_filter is not None or bool(exclude_sources)
        self.excludes_tool_rows = bool(role_filter) and "tool" not in (role_filter or [])
        self.wants_tool_rows = bool(role_filter) and "tool" in (role_filter or [])


# --- the routes' statements: Core names and how a statement runs -----------------------------
#
# Every route builds its whole statement in one function of its backend (sqlite_fts.py,
# postgres_fts.py) from these names, once per shape (the filters given, the sort, the
# number of terms): what varies between two searches of one shape is bound parameters
# only. tests/search/test_route_sql.py pins the SQL each route renders on each backend.

#: The tables a search reads. No column has a type: every value is bound as the driver
#: sends it, without the casts SQLAlchemy would add for a typed one.
MESSAGES = table(
    "messages",
    *(
        column(name)
        for name in (
            "id",
            "session_id",
            "role",
            "content",
            "timestamp",
            "tool_name",
            "tool_calls",
            "active",
            "compacted",
            PG_SEARCH_VECTOR_COLUMN,
        )
    ),
)
SESSIONS = table("sessions", column("id"), column("source"), column("model"), column("started_at"))
SESSION_TAGS = table(TAGS_TABLE, column("session_id"), column("tag"))
#: the message row and its session, as every route names them
m = MESSAGES.alias("m")
s = SESSIONS.alias("s")
#: constants written into the SQL (a bound value would be a parameter the plan cannot see)
ZERO: ColumnElement[Any] = literal_column("0")
ONE: ColumnElement[Any] = literal_column("1")

#: The filters a statement carries: (source_filter "none" / "empty" / "list", whether
#: sources are excluded, whether roles are given, include_inactive, the number of tags).
FilterShape = tuple[str, bool, bool, bool, int]


def filter_conditions(shape: FilterShape, row: FromClause = m) -> list[ColumnElement[bool]]:
    """The conditions of `Filters` of this shape on the message `row` (`m`) and its
    session `s`, with Filters.params' names."""
    sources, excluded, roles, include_inactive, tags = shape
    conditions: list[ColumnElement[bool]] = []
    if sources == "empty":
        conditions.append(false())
    elif sources == "list":
        conditions.append(s.c.source.in_(bindparam("sources", expanding=True)))
    if excluded:
        conditions.append(s.c.source.not_in(bindparam("excluded", expanding=True)))
    if roles:
        conditions.append(row.c.role.in_(bindparam("roles", expanding=True)))
    if not include_inactive:
        conditions.append(or_(row.c.active == ONE, row.c.compacted == ONE))
    for i in range(tags):
        # one EXISTS per tag: a hit's session carries every tag asked for
        tagged = SESSION_TAGS.alias(f"st{i}")
        conditions.append(
            exists(
                select(ONE).where(
                    tagged.c.session_id == row.c.session_id, tagged.c.tag == bindparam(f"tag_{i}")
                )
            )
        )
    return conditions


def reads_sessions(shape: FilterShape) -> bool:
    """Whether filters of this shape read the session's columns (a page cannot then be
    cut from messages alone)."""
    return shape[0] != "none" or shape[1]


class RouteStatement:
    """One route's statement of one shape: compiled once per dialect and run at the
    driver (engine.Prepared), or through SQLAlchemy where a filter holds a list (an
    expanding IN, rendered per call)."""

    __slots__ = ("statement", "expanding", "_prepared")

    def __init__(self, statement: Executable, *, expanding: bool = False) -> None:
        self.statement = statement
        self.expanding = expanding
        self._prepared = Prepared(statement)

    def sql(self, dialect: Dialect) -> str:
        """The statement as `dialect` renders it."""
        return str(self.statement.compile(dialect=dialect))  # type: ignore[attr-defined]

    def dicts(self, conn: Connection, params: dict[str, Any]) -> list[dict[str, Any]]:
        if self.expanding:
            return row_dicts(conn.execute(self.statement, params))
        return self._prepared.dicts(conn, params)

    def tuples(self, conn: Connection, params: dict[str, Any]) -> list[Any]:
        if self.expanding:
            return list(conn.execute(self.statement, params).all())
        return self._prepared.rows(conn, params)


def has_lists(shape: FilterShape) -> bool:
    """Whether filters of this shape bind a list (an expanding IN)."""
    return shape[0] == "list" or shape[1] or shape[2]


def row_dicts(result: Any) -> list[dict[str, Any]]:
    """A result's rows as dicts: plain tuples zipped with the keys once, several times
    cheaper than a RowMapping per row."""
    keys = list(result.keys())
    return [dict(zip(keys, values, strict=True)) for values in result.all()]


def id_window(column: ColumnElement[Any], edge: Edge) -> ColumnElement[bool]:
    """The condition keeping `column` in a window of ids at `edge` of the table: above
    the parameter :floor, or up to :ceiling. One bound each, as no id lies past the
    table's end: a second, always-true one can change the plan (PostgreSQL then hands
    it to the word index as a condition instead of intersecting the primary key's
    range with the other indexes)."""
    return column > bindparam("floor") if edge == "newest" else column <= bindparam("ceiling")


def time_direction(sort: str | None) -> str | None:
    """`DESC` for sort="newest", `ASC` for "oldest" (any case, trimmed), None for any
    other sort, which asks for relevance (docs/reference/behaviour.md 6.1)."""
    return {"newest": "DESC", "oldest": "ASC"}.get((sort or "").strip().lower())


def oldest_first(sort: str | None) -> bool:
    return time_direction(sort) == "ASC"


class LikeShape(NamedTuple):
    """The shape of a LIKE scan's condition: the operator of each term (LIKE, or ILIKE
    where the backend folds case so), whether every term must match (else any), and
    whether the ids are kept in a range (:lo, :hi]."""

    operators: tuple[str, ...]
    all_terms: bool
    ranged: bool


def like_condition(like: LikeShape, row: FromClause = m) -> ColumnElement[bool]:
    """One clause per term (:t0, :t1.., `%term%` with its wildcards escaped) over the
    row's content, tool name and tool calls, joined with OR (AND with `all_terms`); with
    `ranged`, only ids in (:lo, :hi]."""
    clauses: list[ColumnElement[bool]] = []
    for n, operator in enumerate(like.operators):
        pattern: BindParameter[Any] = bindparam(f"t{n}")
        columns = (row.c.content, row.c.tool_name, row.c.tool_calls)
        if operator == "ILIKE":
            clauses.append(or_(*(c.ilike(pattern, escape="\\") for c in columns)))
        else:
            clauses.append(or_(*(c.like(pattern, escape="\\") for c in columns)))
    condition = (and_ if like.all_terms else or_)(*clauses) if clauses else false()
    if like.ranged:
        return and_(condition, row.c.id > bindparam("lo"), row.c.id <= bindparam("hi"))
    return condition


@lru_cache(maxsize=256)
def _statement(sql: str) -> TextClause:
    # cached: text() parses its bind names with a regex each time it is built, which cost
    # a search more than SQLAlchemy's execution of the statement
    return text(sql)


def fetch_rows(conn: Connection, sql: str, params: dict[str, Any]) -> list[Any]:
    """The rows of `sql` (named parameters) through SQLAlchemy, as tuples."""
    return list(conn.execute(_statement(sql), params).all())


# --- what a hit shows: its snippet and its context -----------------------------------------

#: the prefix of structured content as stored (its JSON follows)
JSON_PREFIX = "\x00json:"
#: a context line holds at most this many characters of its message
CONTEXT_CHARS = 200
# a snippet built in Python: this many characters before its first match and after it,
# or the first _PLAIN characters where nothing matched
_BEFORE = 100
_AFTER = 140
_PLAIN = 240


@lru_cache(maxsize=256)
def _term_pattern(text: str, prefix: bool) -> re.Pattern[str] | None:
    words = words_of(text)
    if not words:
        return None
    body = r"[\W_]+".join(re.escape(w) for w in words)
    tail = r"[^\W_]*" if prefix else r"(?![^\W_])"
    return re.compile(rf"(?<![^\W_]){body}{tail}", re.IGNORECASE)


def term_spans(body: str, terms: Iterable[Term]) -> list[tuple[int, int]]:
    spans: list[tuple[int, int]] = []
    for term in terms:
        pattern = _term_pattern(term.text, term.prefix)
        if pattern is not None:
            spans.extend(found.span() for found in pattern.finditer(body))
    return spans


def literal_spans(body: str, literals: Iterable[str]) -> list[tuple[int, int]]:
    folded = fold(body)
    spans: list[tuple[int, int]] = []
    for literal in literals:
        needle = fold(literal)
        at = folded.find(needle)
        while needle and at != -1:
            spans.append((at, at + len(needle)))
            at = folded.find(needle, at + len(needle))
    return spans


def mark(body: str, spans: list[tuple[int, int]]) -> str:
    """The window around the first span (earliest; the longest of those starting there),
    spans inside it marked, overlapping ones dropped."""
    if not spans:
        return body[:_PLAIN]
    ordered = sorted(spans, key=lambda span: (span[0], -span[1]))
    first_start, first_end = ordered[0]
    start = max(0, first_start - _BEFORE)
    end = min(len(body), first_end + _AFTER)
    if start > 0:
        start = body.find(" ", start, first_start) + 1 or start
    out = []
    cursor = start
    for span_start, span_end in ordered:
        if span_start < cursor or span_end > end:
            continue
        out.append(body[cursor:span_start])
        out.append(f">>>{body[span_start:span_end]}<<<")
        cursor = span_end
    out.append(body[cursor:end])
    return ("..." if start > 0 else "") + "".join(out) + ("..." if end < len(body) else "")


def terms_snippet(body: str, terms: Iterable[Term], literals: Iterable[str] = ()) -> str:
    return mark(body, term_spans(body, terms) + literal_spans(body, literals))


def substring_snippet(body: str, needles: Iterable[str]) -> str:
    """Trigram hits: every needle wherever it stands, ignoring case as the index does."""
    alternatives = "|".join(re.escape(n) for n in sorted(set(needles), key=len, reverse=True))
    if not alternatives:
        return body[:_PLAIN]
    pattern = re.compile(alternatives, re.IGNORECASE)
    return mark(body, [found.span() for found in pattern.finditer(body)])


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


# three parameters per hit: stay under SQLite's historic limit of 999 host parameters
CONTEXT_CHUNK = 300


#: a context line's place: the previous message, the hit, the next one
_POSITIONS: tuple[ColumnElement[Any], ...] = (ZERO, ONE, literal_column("2"))


@lru_cache(maxsize=64)
def context_statement(hits: int) -> RouteStatement:
    """The context of `hits` hits in one round trip: for each hit (:id<i>, :sid<i>,
    :ts<i>), the ids of the previous and the next message of its session (ordered by
    timestamp, then id, as the original orders context), found with a row-value seek on
    idx_messages_session; then the three rows. `near` is referenced three times, so
    SQLite materialises it once."""
    given: list[tuple[BindParameter[Any], ...]] = [
        (bindparam(f"id{i}"), bindparam(f"sid{i}"), bindparam(f"ts{i}")) for i in range(hits)
    ]
    found = values(column("hit_id"), column("sid"), column("ts"), name="hits").data(given)
    found_hits = found.cte("hits")
    other = MESSAGES.alias("other")

    def neighbour(before: bool) -> ColumnElement[Any]:
        here = tuple_(other.c.timestamp, other.c.id)
        hit = tuple_(found_hits.c.ts, found_hits.c.hit_id)
        order = (
            (other.c.timestamp.desc(), other.c.id.desc())
            if before
            else (
                other.c.timestamp.asc(),
                other.c.id.asc(),
            )
        )
        return (
            select(other.c.id)
            .where(other.c.session_id == found_hits.c.sid, here < hit if before else here > hit)
            .order_by(*order)
            .limit(ONE)
            .offset(ZERO)
            .scalar_subquery()
        )

    near = select(
        found_hits.c.hit_id,
        neighbour(True).label("before_id"),
        neighbour(False).label("after_id"),
    ).cte("near")
    statement = union_all(
        *(
            select(near.c.hit_id, pos.label("pos"), m.c.role, m.c.content).select_from(
                near.join(m, m.c.id == at)
            )
            for pos, at in zip(
                _POSITIONS, (near.c.before_id, near.c.hit_id, near.c.after_id), strict=True
            )
        )
    )
    return RouteStatement(statement)


def attach_context(
    fetch: Callable[[RouteStatement, dict[str, Any]], list[Any]],
    hits: list[dict[str, Any]],
    recoverable: Callable[[DBAPIError], bool] | None = None,
) -> None:
    """Set `context` on every hit: up to three {"role", "content"} dicts (the previous
    message of the session, the hit, the next one), content decoded and cut to 200
    characters; `[]` for a hit whose context cannot be read, where `recoverable(error)`
    says the search may go on after the error (else, and without `recoverable`, the error
    is raised). `fetch(statement, params)` runs the one statement (the backend's way of
    running SQL)."""
    for start in range(0, len(hits), CONTEXT_CHUNK):
        chunk = hits[start : start + CONTEXT_CHUNK]
        params: dict[str, Any] = {}
        for i, hit in enumerate(chunk):
            params[f"id{i}"] = hit["id"]
            params[f"sid{i}"] = hit["session_id"]
            params[f"ts{i}"] = hit["timestamp"]
        found: dict[Any, list[tuple[int, dict[str, str]]]] = {}
        try:
            rows = fetch(context_statement(len(chunk)), params)
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
