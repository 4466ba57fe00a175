"""Session listings: the filters, the rich row (the full row plus preview and last
activity), the order by activity over a compression chain, the id/title search, and the
projection of a compressed conversation onto its live tip (docs/reference/behaviour.md 4.2).

A listing is the view people look at most, so its statement is prepared once per
*shape* (which filters are present, how many sources, compact or full rows, the order)
with every value a bound parameter: building and compiling this statement per call cost
more than SQLite spends running it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import cache, lru_cache
from typing import Any

from sqlalchemy import (
    TEXT,
    BigInteger,
    ColumnElement,
    Connection,
    Integer,
    Select,
    bindparam,
    case,
    exists,
    func,
    literal_column,
    or_,
    select,
)
from sqlalchemy.sql.selectable import NamedFromClause

from ..runtime.engine import Prepared
from ._dialect import usually
from ._paging import limit_of, row_limit, row_offset
from ._preview import first_user_excerpt, shape_session_preview
from ._sql import alias, contains_caseless, path_prefix_values, path_under
from ._tables import ACTIVITY, SESSIONS, TG
from ._tag_names import require_tags_table
from .lineage import (
    COMPRESSION,
    DELEGATE_MARKER,
    compression_tip,
    is_continuation,
    is_listable,
    last_active,
    marker,
)

Row = dict[str, Any]

#: Columns `compact_rows` returns: every declared column but the prompt snapshot.
COMPACT_COLUMNS = tuple(name for name in SESSIONS.c.keys() if name != "system_prompt")
#: Fields a listed compression root takes from its live tip; the rest stay the root's.
PROJECTED_FIELDS = (
    "id",
    "ended_at",
    "end_reason",
    "message_count",
    "tool_call_count",
    "title",
    "last_active",
    "preview",
    "model",
    "system_prompt",
    "cwd",
    "git_branch",
    "git_repo_root",
)
#: Separators `search_query` ignores in its second pass, so `an94` finds `AN-94`. Kept
#: short: each one is a nested replace() in SQL, and SQLite's parser depth is limited.
SEARCH_PUNCTUATION = " -_./:#'"


def _text_param(name: str) -> Any:
    return bindparam(name, type_=TEXT())


def _int_param(name: str) -> Any:
    return bindparam(name, type_=Integer())


# --------------------------------------------------------------------------- filters


@dataclass(frozen=True, kw_only=True)
class ListingFilters:
    """Which sessions a listing or a count includes. `shape()` says which statement
    serves them (what is present, how many sources), `params()` gives its values."""

    source: str | None = None
    sources: Sequence[str] | None = None
    exclude_sources: Sequence[str] | None = None
    cwd_prefix: str | None = None
    min_message_count: int = 0
    include_archived: bool = False
    archived_only: bool = False
    listable_only: bool = True
    #: with listable_only: also rows tagged as delegate runs (`_delegate_from`), among them
    #: untitled roots that migration 0016 (as the original) tagged as orphaned delegates
    include_delegates: bool = False
    #: only sessions carrying every one of these tags (hermes_store_session_tags)
    tags: Sequence[str] | None = None
    wanted: tuple[str, ...] = field(init=False)
    excluded: tuple[str, ...] = field(init=False)

    def __post_init__(self) -> None:
        wanted = ([self.source] if self.source else []) + list(self.sources or [])
        object.__setattr__(self, "wanted", tuple(wanted))
        object.__setattr__(self, "excluded", tuple(self.exclude_sources or ()))

    def shape(self) -> tuple[Any, ...]:
        archived = "only" if self.archived_only else "all" if self.include_archived else "live"
        return (
            len(self.wanted),
            len(self.excluded),
            bool(self.cwd_prefix),
            bool(self.min_message_count and self.min_message_count > 0),
            archived,
            self.listable_only,
            self.include_delegates,
            len(self.tags or ()),
        )

    def params(self) -> dict[str, Any]:
        values: dict[str, Any] = {}
        values.update({f"f_source_{i}": v for i, v in enumerate(self.wanted)})
        values.update({f"f_exclude_{i}": v for i, v in enumerate(self.excluded)})
        if self.cwd_prefix:
            base, length, (slash, backslash) = path_prefix_values(self.cwd_prefix)
            values.update(f_cwd=base, f_cwd_len=length, f_cwd_slash=slash, f_cwd_bs=backslash)
        if self.min_message_count and self.min_message_count > 0:
            values["f_min_count"] = self.min_message_count
        values.update({f"f_tag_{i}": v for i, v in enumerate(self.tags or ())})
        return values


def filter_conditions(a: NamedFromClause, shape: tuple[Any, ...]) -> list[ColumnElement[bool]]:
    """The WHERE conditions of a `ListingFilters.shape()`, over the alias `a`, with the
    values as bound parameters named as `ListingFilters.params()` names them."""
    n_wanted, n_excluded, has_cwd, has_min, archived, listable_only, delegates, n_tags = shape
    conds: list[ColumnElement[bool]] = []
    if listable_only and delegates:
        conds.append(or_(is_listable(a), marker(a.c.model_config, DELEGATE_MARKER).is_not(None)))
    elif listable_only:
        conds.append(is_listable(a))
    if n_wanted:
        conds.append(a.c.source.in_([_text_param(f"f_source_{i}") for i in range(n_wanted)]))
    if n_excluded:
        excluded = [_text_param(f"f_exclude_{i}") for i in range(n_excluded)]
        conds.append(a.c.source.not_in(excluded))
    if has_cwd:
        heads = [_text_param("f_cwd_slash"), _text_param("f_cwd_bs")]
        conds.append(path_under(a.c.cwd, _text_param("f_cwd"), _int_param("f_cwd_len"), heads))
    if has_min:
        conds.append(a.c.message_count >= _int_param("f_min_count"))
    if archived == "only":
        conds.append(a.c.archived != 0)
    elif archived == "live":
        conds.append(usually(a.c.archived == 0))
    for i in range(n_tags):
        conds.append(exists().where(TG.session_id == a.c.id, TG.tag == _text_param(f"f_tag_{i}")))
    return conds


# --------------------------------------------------------------------------- rich rows


@cache
def rich_select(a: NamedFromClause, compact: bool) -> Select[Any]:
    """A listing row: the full row (or the compact columns), preview and last_active.
    Built once per alias: callers add their own WHERE/ORDER BY to the immutable Select."""
    columns: list[Any] = (
        [a.c[name] for name in COMPACT_COLUMNS] if compact else [literal_column(f"{a.name}.*")]
    )
    return select(
        *columns,
        first_user_excerpt(a.c.id).label("_preview_raw"),
        last_active(a.c.id, a.c.started_at).label("last_active"),
    ).select_from(a)


def rich_rows(conn: Connection, statement: Prepared, params: dict[str, Any]) -> list[Row]:
    return with_previews(statement.dicts(conn, params))


def with_previews(rows: list[Row]) -> list[Row]:
    """Rich rows as read (dicts) with their preview shaped from its raw text, in place."""
    for row in rows:
        row["preview"] = shape_session_preview(row.pop("_preview_raw", ""))
    return rows


@cache
def rich_row_by_id(compact: bool) -> Prepared:
    s = alias(SESSIONS, "s")
    return Prepared(rich_select(s, compact).where(s.c.id == _text_param("id")))


def project_tip(conn: Connection, row: Row, compact: bool) -> Row:
    """Show a compressed conversation as its live tip, keeping the root's start time and
    totals, and say where the lineage began."""
    if row.get("end_reason") != COMPRESSION:
        return row
    root_id = row["id"]
    tip_id = compression_tip(conn, root_id)
    if tip_id == root_id:
        return row
    tips = rich_rows(conn, rich_row_by_id(compact), {"id": tip_id})
    if not tips:
        return row
    projected = dict(row)
    for name in PROJECTED_FIELDS:
        if name in tips[0]:
            projected[name] = tips[0][name]
    projected["_lineage_root_id"] = root_id
    return projected


# --------------------------------------------------------------------------- the page


@dataclass(frozen=True)
class PageShape:
    """Everything that changes the listing statement's text (values are parameters)."""

    filters: tuple[Any, ...]
    compact: bool
    by_chain_activity: bool
    id_query: bool
    search_query: bool
    squashed_query: bool
    limited: bool
    pinned_only: bool


def page_params(
    filters: ListingFilters,
    limit: int | None,
    offset: int,
    id_query: str,
    search_query: str,
) -> dict[str, Any]:
    params = filters.params()
    params["page_limit"] = limit
    params["page_offset"] = offset or 0
    if id_query:
        params["q_id"] = id_query
    if search_query:
        params["q_search"] = search_query
        params["q_squashed"] = squashed(search_query)
    return params


def squashed(needle: str) -> str:
    return "".join(ch for ch in needle if ch not in SEARCH_PUNCTUATION)


@cache
def page_statement(shape: PageShape) -> Prepared:
    s = alias(SESSIONS, "s")
    if shape.by_chain_activity:
        query, order = _by_chain_activity(s, shape)
    else:
        query = rich_select(s, shape.compact).where(*filter_conditions(s, shape.filters))
        order = [s.c.started_at.desc(), s.c.id.desc()]
    if shape.pinned_only:
        return Prepared(query.where(s.c.pinned != 0).order_by(s.c.started_at.desc(), s.c.id.desc()))
    # 64-bit: an Integer parameter is cast to PostgreSQL's 32-bit integer
    query = query.order_by(*order).offset(bindparam("page_offset", type_=BigInteger()))
    if shape.limited:
        query = query.limit(bindparam("page_limit", type_=BigInteger()))
    return Prepared(query)


def _by_chain_activity(s: NamedFromClause, shape: PageShape) -> tuple[Select[Any], list[Any]]:
    """The listing ordered by the newest activity anywhere in each row's forward
    compression chain, with the id/title search applied over that chain in SQL."""
    seed = SESSIONS.alias("seed")
    chain = (
        select(seed.c.id.label("root_id"), seed.c.id.label("member_id"))
        .where(*filter_conditions(seed, shape.filters))
        .cte("chain", recursive=True)
    )
    parent = SESSIONS.alias("cp")
    child = SESSIONS.alias("cc")
    chain = chain.union(
        select(chain.c.root_id, child.c.id)
        .select_from(
            chain.join(parent, parent.c.id == chain.c.member_id).join(
                child, child.c.parent_session_id == parent.c.id
            )
        )
        .where(parent.c.end_reason == COMPRESSION, is_continuation(child))
    )
    member = SESSIONS.alias("cm")
    stats_columns: list[Any] = [
        chain.c.root_id,
        func.max(last_active(member.c.id, member.c.started_at)).label("activity"),
    ]
    if shape.id_query:
        hit = contains_caseless(member.c.id, _text_param("q_id"))
        stats_columns.append(_any(hit).label("id_hit"))
    if shape.search_query:
        stats_columns.append(_any(_search_hit(member, shape.squashed_query)).label("search_hit"))
    stats = (
        select(*stats_columns)
        .select_from(chain.join(member, member.c.id == chain.c.member_id))
        .group_by(chain.c.root_id)
        .subquery("stats")
    )
    query = rich_select(s, shape.compact).join(stats, stats.c.root_id == s.c.id)
    if shape.id_query:
        query = query.where(stats.c.id_hit == 1)
    if shape.search_query:
        query = query.where(stats.c.search_hit == 1)
    return query, [stats.c.activity.desc(), s.c.started_at.desc(), s.c.id.desc()]


# --------------------------------------------------------------------------- by recent activity

#: Sessions read from the activity index first, per listed row wanted (at least
#: RECENT_WALK_MIN); a walk that cannot tell the page yet reads RECENT_WALK_GROWTH times more.
RECENT_WALK_PER_ROW = 2
RECENT_WALK_MIN = 64
RECENT_WALK_GROWTH = 4


@cache
def _recent_roots(filters: tuple[Any, ...]) -> Prepared:
    """The listed rows (by `filters`) whose compression chain holds one of the `walk`
    most recently active sessions, each with its chain's newest activity among them, in
    the listing's order; with how many sessions the walk read and the oldest activity it
    reached. A row whose activity is newer than that is exact: every session more
    recently active than the walk's end was read."""
    activity = ACTIVITY
    top = (
        select(activity.c.session_id.label("member_id"), activity.c.last_active.label("at"))
        .order_by(activity.c.last_active.desc())
        .limit(bindparam("walk", type_=BigInteger()))
        .cte("top")
    )
    up = select(top.c.member_id.label("root_id"), top.c.at).cte("up", recursive=True)
    child, parent = SESSIONS.alias("up_child"), SESSIONS.alias("up_parent")
    up = up.union(
        select(parent.c.id, up.c.at)
        .select_from(
            up.join(child, child.c.id == up.c.root_id).join(
                parent, parent.c.id == child.c.parent_session_id
            )
        )
        .where(parent.c.end_reason == COMPRESSION, is_continuation(child))
    )
    s = alias(SESSIONS, "s")
    newest = func.max(up.c.at).label("activity")
    walked = select(func.count()).select_from(top).scalar_subquery().label("walked")
    oldest = select(func.min(top.c.at)).scalar_subquery().label("oldest")
    return Prepared(
        select(s.c.id, newest, walked, oldest)
        .select_from(up.join(s, s.c.id == up.c.root_id))
        .where(*filter_conditions(s, filters))
        .group_by(s.c.id, s.c.started_at)
        .order_by(newest.desc(), s.c.started_at.desc(), s.c.id.desc())
    )


_WALK_END = Prepared(
    select(func.count(), func.min(literal_column("at"))).select_from(
        select(ACTIVITY.c.last_active.label("at"))
        .order_by(ACTIVITY.c.last_active.desc())
        .limit(bindparam("walk", type_=BigInteger()))
        .subquery("walk")
    )
)


def recent_page_ids(conn: Connection, filters: ListingFilters, wanted: int) -> list[str]:
    """The ids of the first `wanted` rows of the listing by chain activity, in order, read
    from the activity index (hermes_store_session_activity) from the most recent session
    on, as far as it takes to know them, rather than from every session."""
    walk = max(RECENT_WALK_MIN, RECENT_WALK_PER_ROW * wanted)
    statement = _recent_roots(filters.shape())
    params = filters.params()
    while True:
        rows = statement.rows(conn, {**params, "walk": walk})
        if rows:
            walked, oldest = rows[0][2], rows[0][3]
        else:
            end = _WALK_END.first(conn, {"walk": walk})
            walked, oldest = (0, None) if end is None else end
        if walked < walk:  # every session was read: every row is exact
            return [row[0] for row in rows[:wanted]]
        exact = [row[0] for row in rows if row[1] > oldest]
        if len(exact) >= wanted:
            return exact[:wanted]
        walk *= RECENT_WALK_GROWTH


@lru_cache(maxsize=32)
def _rows_by_id(count: int, compact: bool) -> Prepared:
    s = alias(SESSIONS, "s")
    ids = [_text_param(f"id_{i}") for i in range(count)]
    return Prepared(rich_select(s, compact).where(s.c.id.in_(ids)))


def rich_rows_in_order(conn: Connection, ids: list[str], compact: bool) -> list[Row]:
    """The rich rows of `ids`, in that order."""
    if not ids:
        return []
    params = {f"id_{i}": value for i, value in enumerate(ids)}
    found = rich_rows(conn, _rows_by_id(len(ids), compact), params)
    by_id = {row["id"]: row for row in found}
    return [by_id[i] for i in ids if i in by_id]


def _any(condition: ColumnElement[bool]) -> ColumnElement[Any]:
    return func.max(case((condition, 1), else_=0))


def _strip_punctuation(expr: ColumnElement[Any]) -> ColumnElement[Any]:
    for char in SEARCH_PUNCTUATION:
        expr = func.replace(expr, char, "", type_=TEXT())
    return expr


def _search_hit(member: NamedFromClause, with_squashed: bool) -> ColumnElement[bool]:
    title = func.coalesce(member.c.title, "")
    needle = _text_param("q_search")
    hits = [contains_caseless(member.c.id, needle), contains_caseless(title, needle)]
    # Only titles get the squashed pass: ids are mostly digits and separators, so a
    # squashed short query ("#2" -> "2") would match nearly every id.
    if with_squashed:
        hits.append(contains_caseless(_strip_punctuation(title), _text_param("q_squashed")))
    return or_(*hits)


def list_page(
    conn: Connection,
    filters: ListingFilters,
    *,
    limit: int | None,
    offset: int,
    compact: bool,
    by_chain_activity: bool,
    id_query: str | None,
    search_query: str | None,
    include_pinned: bool,
    project_tips: bool,
) -> list[Row]:
    """One page of a listing (`SessionRepository.list_sessions_rich`)."""
    if filters.tags:
        require_tags_table(conn)
    limit, offset = row_limit(limit), row_offset(offset)
    id_needle = (id_query or "").strip() if by_chain_activity else ""
    search_needle = (search_query or "").strip() if by_chain_activity else ""
    shape = PageShape(
        filters=filters.shape(),
        compact=compact,
        by_chain_activity=by_chain_activity,
        id_query=bool(id_needle),
        search_query=bool(search_needle),
        squashed_query=bool(search_needle and squashed(search_needle)),
        limited=limit is not None,
        pinned_only=False,
    )
    params = page_params(filters, limit, offset, id_needle, search_needle)
    if by_chain_activity and limit is not None and not (id_needle or search_needle):
        ids = recent_page_ids(conn, filters, offset + limit)[offset:]
        rows = rich_rows_in_order(conn, ids, compact)
    else:
        rows = rich_rows(conn, page_statement(shape), params)
    if include_pinned:
        on_page = {row["id"] for row in rows}
        pinned_shape = PageShape(**{**shape.__dict__, "pinned_only": True})
        pinned = rich_rows(conn, page_statement(pinned_shape), params)
        rows += [row for row in pinned if row["id"] not in on_page]
    if project_tips and filters.listable_only:
        rows = [project_tip(conn, row, compact) for row in rows]
    return rows


@cache
def count_statement(shape: tuple[Any, ...]) -> Prepared:
    """How many sessions a filter shape selects (built and compiled once per shape; the
    values are bound)."""
    s = alias(SESSIONS, "s")
    return Prepared(select(func.count()).select_from(s).where(*filter_conditions(s, shape)))


@cache
def source_counts_statement(shape: tuple[Any, ...]) -> Prepared:
    """Sessions per source for a filter shape (built and compiled once per shape; values
    are bound)."""
    s = alias(SESSIONS, "s")
    # Rows written before sources existed carry '' or NULL; they came from the CLI.
    key = func.coalesce(func.nullif(s.c.source, ""), "cli").label("source_key")
    count = func.count().label("n")
    return Prepared(
        select(key, count)
        .select_from(s)
        .where(*filter_conditions(s, shape))
        .group_by(key)
        .order_by(count.desc(), key)
    )


@lru_cache(maxsize=64)
def activity_page(
    by_source: bool, by_workspace: bool, limited: bool, limit: int | None
) -> Prepared:
    """`search_sessions`' statement for one shape: every session's full row with its
    `last_active`, most recently active first; `:source` and the workspace's values
    (`activity_page_params`) bound where their filter is present, the offset bound, a
    `limited` page's limit written in (`_paging.limit_of`; None: bound as :limit)."""
    s = alias(SESSIONS, "s")
    activity = last_active(s.c.id, s.c.started_at).label("last_active")
    query = select(literal_column("s.*"), activity).select_from(s)
    if by_source:
        query = query.where(s.c.source == _text_param("source"))
    if by_workspace:
        no_root = or_(s.c.git_repo_root.is_(None), s.c.git_repo_root == "")
        heads = [_text_param("ws_slash"), _text_param("ws_bs")]
        under = path_under(s.c.cwd, _text_param("ws_base"), _int_param("ws_len"), heads)
        query = query.where(or_(s.c.git_repo_root == _text_param("workspace"), no_root & under))
    query = query.order_by(activity.desc(), s.c.started_at.desc(), s.c.id.desc())
    query = query.offset(bindparam("offset", type_=BigInteger))
    if limited:
        query = query.limit(limit_of(limit))
    return Prepared(query)


def activity_page_params(
    source: str | None, workspace_key: str | None, limit: int | None, offset: int
) -> dict[str, Any]:
    """The parameters of `activity_page` for a shape its arguments pick."""
    params: dict[str, Any] = {"source": source, "offset": offset, "limit": limit}
    if workspace_key:
        base, length, (slash, backslash) = path_prefix_values(workspace_key)
        params.update(
            workspace=workspace_key, ws_base=base, ws_len=length, ws_slash=slash, ws_bs=backslash
        )
    return params
