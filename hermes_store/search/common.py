"""Search pieces both backends share: filters, the Core names every route's statement is
built from and how such a statement runs (RouteStatement), the LIKE scan's condition and
snippet, the context of a hit."""

from __future__ import annotations

import json
from collections.abc import Callable
from functools import lru_cache
from typing import Any, Literal, NamedTuple

from sqlalchemy import (
    BindParameter,
    ColumnElement,
    Connection,
    Executable,
    FromClause,
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
from ..runtime.prepared import Prepared

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


@lru_cache(maxsize=256)
def _statement(sql: str) -> TextClause:
    # cached: text() parses its bind names with a regex each time it is built, which cost
    # a search more than SQLAlchemy's execution of the statement
    return text(sql)


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
    driver (prepared.Prepared), or through SQLAlchemy where a filter holds a list (an
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


def fetch_rows(conn: Connection, sql: str, params: dict[str, Any]) -> list[Any]:
    """The rows of `sql` (named parameters) through SQLAlchemy, as tuples."""
    return list(conn.execute(_statement(sql), params).all())


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
