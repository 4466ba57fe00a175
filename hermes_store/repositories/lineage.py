"""Lineage: how sessions link to each other through `parent_session_id`, and the walks
along those links (docs/reference/schema.md 8, docs/reference/behaviour.md 5.3 and 9).

A child is a compression continuation (its parent ended with `compression`), a `/branch`
child (marker `_branched_from` in `model_config`, or the legacy heuristic) or a delegate
sub-agent run (marker `_delegate_from`). Walks are bounded (100 hops; 32 for the resume
walk) and remember what they have visited, because `parent_session_id` is written by many
processes and a cycle in it must not hang a listing.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from functools import lru_cache
from typing import Any

from sqlalchemy import (
    INTEGER,
    TEXT,
    ColumnElement,
    Connection,
    Table,
    and_,
    bindparam,
    case,
    cast,
    exists,
    func,
    literal,
    literal_column,
    null,
    or_,
    select,
    update,
)
from sqlalchemy.sql.selectable import CTE, NamedFromClause, Select

from ..runtime.engine import Prepared
from ._dialect import json_member
from ._paging import NO_OFFSET
from ._sql import alias, chunks
from ._tables import MESSAGES, SESSIONS, M, S
from .encoding import flag

COMPRESSION = "compression"
BRANCHED = "branched"
BRANCH_MARKER = "_branched_from"
DELEGATE_MARKER = "_delegate_from"
#: End reasons an automatic close leaves behind (the agent, the websocket reaper): such a
#: session may still be resumed by its gateway peer, or reset.
RECOVERABLE_END_REASONS = ("agent_close", "ws_orphan_reap")
#: What a child takes from its parent where it has no value of its own: the workspace,
#: and across a compression (the same conversation) the gateway origin too.
INHERITED_FROM_PARENT = ("cwd", "git_repo_root", "git_branch", "profile_name")
INHERITED_ACROSS_COMPRESSION = (
    "user_id",
    "session_key",
    "chat_id",
    "chat_type",
    "thread_id",
    "display_name",
    "origin_json",
)
MAX_LINEAGE_HOPS = 100
MAX_RESUME_HOPS = 32


# --------------------------------------------------------------------------- conditions


def marker(config: ColumnElement[Any], key: str) -> ColumnElement[Any]:
    """A lineage marker from `model_config`, NULL when absent or malformed."""
    return json_member(config, literal(key, TEXT()))


def is_branch_child(a: NamedFromClause) -> ColumnElement[bool]:
    """docs/reference/schema.md section 8: the `/branch` marker, or the legacy heuristic (the parent
    ended `branched` and the child started after it)."""
    parent = alias(SESSIONS, "branch_parent")
    return or_(
        marker(a.c.model_config, BRANCH_MARKER).is_not(None),
        exists().where(
            parent.c.id == a.c.parent_session_id,
            parent.c.end_reason == BRANCHED,
            a.c.started_at >= parent.c.ended_at,
        ),
    )


def is_listable(a: NamedFromClause) -> ColumnElement[bool]:
    """A row listings show: a root or a branch child, never a delegate run."""
    return and_(
        or_(a.c.parent_session_id.is_(None), is_branch_child(a)),
        marker(a.c.model_config, DELEGATE_MARKER).is_(None),
    )


def is_continuation(a: NamedFromClause) -> ColumnElement[bool]:
    """A child that can carry a conversation on: not a branch, delegate or tool run."""
    return and_(
        marker(a.c.model_config, BRANCH_MARKER).is_(None),
        marker(a.c.model_config, DELEGATE_MARKER).is_(None),
        func.coalesce(a.c.source, "") != "tool",
    )


def is_recoverable(a: NamedFromClause | Table) -> ColumnElement[bool]:
    """Open, or closed only by an automatic close."""
    return or_(a.c.ended_at.is_(None), a.c.end_reason.in_(RECOVERABLE_END_REASONS))


def last_active(
    session_id: ColumnElement[Any], started_at: ColumnElement[Any]
) -> ColumnElement[Any]:
    """A session's last activity: its newest message's timestamp, else when it started."""
    m = alias(MESSAGES, "newest_m")
    newest = select(func.max(m.c.timestamp)).where(m.c.session_id == session_id)
    return func.coalesce(newest.scalar_subquery(), started_at)


def has_marker(model_config: Any, key: str) -> bool:
    config = json_object(model_config)
    return config is not None and config.get(key) is not None


def json_object(model_config: Any) -> dict[str, Any] | None:
    """`model_config` parsed, or None when it is not a JSON object."""
    if not isinstance(model_config, str):
        return None
    try:
        parsed = json.loads(model_config)
    except ValueError:
        return None
    return parsed if isinstance(parsed, dict) else None


# --------------------------------------------------------------------------- single rows

_END_REASON = Prepared(select(S.end_reason).where(S.id == bindparam("id")))
_EXISTS = Prepared(select(S.id).where(S.id == bindparam("id")))
_PARENT = Prepared(select(S.parent_session_id, S.model_config).where(S.id == bindparam("id")))
_HAS_MESSAGES = Prepared(
    select(M.id).where(M.session_id == bindparam("id")).limit(literal_column("1"))
)


def end_reason(conn: Connection, session_id: str) -> str | None:
    value = _END_REASON.scalar(conn, {"id": session_id})
    return None if value is None else str(value)


def session_exists(conn: Connection, session_id: str) -> bool:
    return _EXISTS.first(conn, {"id": session_id}) is not None


def has_messages(conn: Connection, session_id: str) -> bool:
    return _HAS_MESSAGES.first(conn, {"id": session_id}) is not None


def parent_of(conn: Connection, session_id: str) -> str | None:
    row = _PARENT.first(conn, {"id": session_id})
    return None if row is None or not row[0] else str(row[0])


# --------------------------------------------------------------------------- walks


_CHILD = SESSIONS.alias("c")
_TIP_PARENT = SESSIONS.alias("p")


def _first_unseen(rows: list[tuple[Any, ...]], seen: set[str]) -> str | None:
    """The first id of `rows` not in `seen`. The statements below read up to
    len(seen) + 1 rows in their order instead of excluding `seen` in SQL (a NOT IN list
    would be a statement rendered per call): at most len(seen) of them can be seen, so
    the first unseen one is the one the exclusion would have put first."""
    for (found,) in rows:
        if found not in seen:
            return str(found)
    return None


def _tip_step(parent: ColumnElement[Any]) -> Select[Any]:
    """A compression tip step: the continuations of `parent` if it ended by compression
    (one statement: the parent's end reason is joined, not read first), preferring a
    child that was itself compressed (the chain goes on), then a live one, then the
    newest activity, then the newest start."""
    return (
        select(_CHILD.c.id)
        .select_from(_CHILD.join(_TIP_PARENT, _TIP_PARENT.c.id == _CHILD.c.parent_session_id))
        .where(
            _TIP_PARENT.c.id == parent,
            _TIP_PARENT.c.end_reason == COMPRESSION,
            _CHILD.c.id.is_not(None),
            is_continuation(_CHILD),
        )
        .order_by(
            case(
                (_CHILD.c.end_reason == COMPRESSION, 0), (_CHILD.c.ended_at.is_(None), 1), else_=2
            ),
            last_active(_CHILD.c.id, _CHILD.c.started_at).desc(),
            _CHILD.c.started_at.desc(),
            _CHILD.c.id.desc(),
        )
    )


def _next_continuation(parent: ColumnElement[Any]) -> Select[Any]:
    """The continuations of `parent`, newest start first (the resume walk past the tip)."""
    return (
        select(_CHILD.c.id)
        .where(
            _CHILD.c.parent_session_id == parent,
            _CHILD.c.id.is_not(None),
            is_continuation(_CHILD),
        )
        .order_by(_CHILD.c.started_at.desc(), _CHILD.c.id.desc())
    )


_TIP_STEP = _tip_step(bindparam("parent"))
_NEXT_CONTINUATION = _next_continuation(bindparam("parent"))
# The next link of a compression chain: :parent's non-branch children if :parent ended
# by compression, the earliest start first.
_CHAIN_STEP = (
    select(_CHILD.c.id)
    .select_from(_CHILD.join(_TIP_PARENT, _TIP_PARENT.c.id == _CHILD.c.parent_session_id))
    .where(
        _TIP_PARENT.c.id == bindparam("parent"),
        _TIP_PARENT.c.end_reason == COMPRESSION,
        _CHILD.c.id.is_not(None),
        marker(_CHILD.c.model_config, BRANCH_MARKER).is_(None),
    )
    .order_by(_CHILD.c.started_at, _CHILD.c.id)
)


@lru_cache(maxsize=256)
def _first(statement: Select[Any], n: int) -> Prepared:
    """`statement`'s first `n` rows, prepared. The LIMIT is written into the SQL: a bound
    LIMIT makes SQLite (3.53) take several times as long over such a small read. Room for
    the three walks' statements at every length up to about a hundred hops each."""
    return Prepared(statement.limit(literal_column(str(int(n)))))


def _step(conn: Connection, statement: Select[Any], parent: str, seen: set[str]) -> str | None:
    """The first child of `parent` that `statement` orders, not yet `seen`."""
    return _first_unseen(_first(statement, len(seen) + 1).rows(conn, {"parent": parent}), seen)


def compression_tip(conn: Connection, session_id: str) -> str:
    """The live end of a compression chain (docs/reference/behaviour.md 5.3); the input
    when there is no continuation, also for unknown ids."""
    current = session_id
    seen = {session_id}
    for _ in range(MAX_LINEAGE_HOPS):
        nxt = _step(conn, _TIP_STEP, current, seen)
        if nxt is None:
            break
        seen.add(nxt)
        current = nxt
    return current


def compression_ancestors(conn: Connection, session_id: str) -> list[str]:
    """Ancestors reached through parents ended by compression, nearest first. A branch
    child starts a conversation of its own, so the walk stops there."""
    chain: list[str] = []
    seen = {session_id}
    current = session_id
    for _ in range(MAX_LINEAGE_HOPS):
        row = _PARENT.first(conn, {"id": current})
        if row is None or not row[0] or row[0] in seen:
            break
        parent, model_config = str(row[0]), row[1]
        if has_marker(model_config, BRANCH_MARKER):
            break
        if end_reason(conn, parent) != COMPRESSION:
            break
        current = parent
        seen.add(current)
        chain.append(current)
    return chain


def compression_lineage(conn: Connection, session_id: str) -> list[str]:
    """The compression chain `session_id` belongs to, root first; `[session_id]` when it
    is in none, [] for an unknown id."""
    if not session_exists(conn, session_id):
        return []
    ancestors = compression_ancestors(conn, session_id)
    root = ancestors[-1] if ancestors else session_id
    chain = [root]
    current = root
    for _ in range(MAX_LINEAGE_HOPS):
        nxt = _step(conn, _CHAIN_STEP, current, set(chain))
        if nxt is None:
            break
        chain.append(nxt)
        current = nxt
    return chain if session_id in chain else [session_id]


def ancestor_ids(conn: Connection, session_id: str) -> list[str]:
    """Every ancestor through `parent_session_id`, nearest first."""
    chain: list[str] = []
    seen = {session_id}
    current = session_id
    for _ in range(MAX_LINEAGE_HOPS):
        parent = parent_of(conn, current)
        if not parent or parent in seen:
            break
        seen.add(parent)
        chain.append(parent)
        current = parent
    return chain


def descendant_ids(conn: Connection, session_id: str) -> list[str]:
    """Every descendant through `parent_session_id`, level by level (at most 100)."""
    found: list[str] = []
    seen = {session_id}
    frontier = [session_id]
    for _ in range(MAX_LINEAGE_HOPS):
        level: list[str] = []
        for chunk in chunks(frontier):
            rows = conn.execute(
                select(S.id).where(S.parent_session_id.in_(chunk)).order_by(S.started_at, S.id)
            ).scalars()
            for child_id in rows:
                if child_id not in seen:
                    seen.add(child_id)
                    level.append(child_id)
        if not level:
            break
        found.extend(level)
        frontier = level
    return found


_DELEGATE_OF = marker(S.model_config, DELEGATE_MARKER)
_DELEGATE_ROWS = Prepared(
    select(S.id, S.parent_session_id, _DELEGATE_OF).where(
        # a cheap substring test first, so the JSON is parsed only where it can match
        S.model_config.contains(DELEGATE_MARKER, autoescape=True),
        _DELEGATE_OF.is_not(None),
    )
)


def _delegate_rows(conn: Connection) -> list[tuple[str, str | None, str]]:
    """(id, parent, `_delegate_from` as text) of every row carrying the marker: the
    same `marker` test listings use, so a malformed model_config carries none."""
    return [(str(sid), parent, str(of)) for sid, parent, of in _DELEGATE_ROWS.rows(conn)]


def with_delegates(conn: Connection, roots: Iterable[str]) -> set[str]:
    """`roots` plus their delegate descendants (docs/reference/behaviour.md section 9): rows whose
    `_delegate_from` names a collected id, and children of a collected id that carry any
    `_delegate_from`, walked to a fixed point. One read of the marked rows, however deep
    the tree: a walk level by level would parse every model_config once per level."""
    return delegates_among(_delegate_rows(conn), roots)


def delegates_among(marked: list[tuple[str, str | None, str]], roots: Iterable[str]) -> set[str]:
    """`with_delegates` over the marked rows already read: (id, parent, `_delegate_from`)."""
    collected = set(roots)
    pending = marked
    grew = True
    while grew:
        grew = False
        rest = []
        for sid, parent, delegate_of in pending:
            if sid in collected:
                continue
            if delegate_of in collected or parent in collected:
                collected.add(sid)
                grew = True
            else:
                rest.append((sid, parent, delegate_of))
        pending = rest
    return collected


#: What deleting :id removes, in one read: a row (0, :id, NULL, NULL) if the session
#: exists, then every row carrying the delegate marker as (1, id, parent, marker).
DELETE_TARGET_ROWS = Prepared(
    select(literal_column("0", INTEGER()), S.id, null(), null())
    .where(S.id == bindparam("id"))
    .union_all(
        select(literal_column("1", INTEGER()), S.id, S.parent_session_id, _DELEGATE_OF).where(
            S.model_config.contains(DELEGATE_MARKER, autoescape=True),
            _DELEGATE_OF.is_not(None),
        )
    )
)


def _live_continuations(*columns: Any) -> Select[Any]:
    """`columns` of the open continuations of :parent if :parent ended by compression, two
    at most (enough to tell one from several)."""
    return (
        select(*columns)
        .select_from(_CHILD.join(_TIP_PARENT, _TIP_PARENT.c.id == _CHILD.c.parent_session_id))
        .where(
            _TIP_PARENT.c.id == bindparam("parent"),
            _TIP_PARENT.c.end_reason == COMPRESSION,
            _CHILD.c.ended_at.is_(None),
            is_continuation(_CHILD),
        )
        .limit(literal_column("2"))
    )


#: The ids of the live continuations.
LIVE_CONTINUATIONS = Prepared(_live_continuations(_CHILD.c.id))
#: Their whole rows (`SELECT *`): one of them is the unique open continuation, two are
#: too many.
LIVE_CONTINUATION_ROWS = Prepared(_live_continuations(literal_column("c.*")).offset(NO_OFFSET))


def resume_target(conn: Connection, session_id: str) -> str:
    """Where a resume should land: the compression tip, then the deepest newest
    continuation that actually has messages (a child created but never written to would
    resume into an empty transcript)."""
    current = compression_tip(conn, session_id)
    best = current if has_messages(conn, current) else None
    seen = {current}
    for _ in range(MAX_RESUME_HOPS):
        nxt = _step(conn, _NEXT_CONTINUATION, current, seen)
        if nxt is None:
            break
        seen.add(nxt)
        current = nxt
        if has_messages(conn, current):
            best = current
    return best or session_id


# --------------------------------------------------------------------------- walks in one statement
#
# The repository's own walks are each one statement (a recursive CTE), read on its own
# (`Store.read_one`). A CTE cannot remember what its walk has seen, so each statement
# walks naively, always to the first child its order gives, and returns every step:
# while no id comes back, that is the walk above (which takes the first child not yet
# seen), and the answer follows from the rows; where one comes back (a cycle in
# `parent_session_id`), `walked` says so and the caller runs the walk above instead.


#: Constants written into the walks' SQL (SQLite plans a bound LIMIT or OFFSET as an
#: expression to evaluate, where these cost nothing).
_ONE = literal_column("1", INTEGER())


def _naive_walk(
    name: str,
    start: ColumnElement[Any],
    step: Callable[[ColumnElement[Any]], Select[Any]],
    hops: int,
) -> CTE:
    """(id, n): `start` at n = 0, then at each n the first id `step` orders from the id
    before it, up to `hops` steps; a walk with nowhere to go ends with a NULL id."""
    walk = select(start.label("id"), literal_column("0", INTEGER()).label("n")).cte(
        name, recursive=True
    )
    nxt = step(walk.c.id).limit(_ONE).offset(NO_OFFSET).scalar_subquery()
    return walk.union_all(
        select(nxt, walk.c.n + literal_column("1", INTEGER())).where(
            walk.c.id.is_not(None), walk.c.n < literal_column(str(int(hops)), INTEGER())
        )
    )


def walked(ids: Iterable[Any]) -> list[Any] | None:
    """A naive walk's ids in order (its closing NULL, if any, left out); None when an id
    comes back, for the caller to run the walk that skips seen ids."""
    steps = [found for found in ids if found is not None]
    return steps if len(set(steps)) == len(steps) else None


_SID = bindparam("sid", type_=TEXT())
_TIP_WALK = _naive_walk("tip", _SID, _tip_step, MAX_LINEAGE_HOPS)
#: The compression tip walk from :sid, one id a row (`compression_tip`: the last of
#: `walked` of them).
TIP_WALK = Prepared(select(_TIP_WALK.c.id).order_by(_TIP_WALK.c.n))


def _resume_walk() -> CTE:
    """(walk, id, last, n): the tip walk from :sid as `_naive_walk` makes it (walk 0),
    then from its end (walk 1, n = 0: the tip) the continuation walk, newest start first,
    up to MAX_RESUME_HOPS steps. One recursion, so that the tip walk runs once where a
    second walk starting from its result would run it again."""
    zero, one = literal_column("0", INTEGER()), _ONE
    walk = select(
        zero.label("walk"), _SID.label("id"), cast(null(), TEXT()).label("last"), zero.label("n")
    ).cte("resume", recursive=True)
    tip_done = and_(
        walk.c.walk == zero,
        or_(walk.c.id.is_(None), walk.c.n >= literal_column(str(MAX_LINEAGE_HOPS), INTEGER())),
    )

    def first(step: Callable[[ColumnElement[Any]], Select[Any]]) -> Any:
        return step(walk.c.id).limit(_ONE).offset(NO_OFFSET).scalar_subquery()

    return walk.union_all(
        select(
            case((tip_done, one), else_=walk.c.walk),
            case(
                (tip_done, func.coalesce(walk.c.id, walk.c.last)),
                (walk.c.walk == zero, first(_tip_step)),
                else_=first(_next_continuation),
            ),
            walk.c.id,
            case((tip_done, zero), else_=walk.c.n + one),
        ).where(
            or_(
                walk.c.walk == zero,
                and_(
                    walk.c.id.is_not(None),
                    walk.c.n < literal_column(str(MAX_RESUME_HOPS), INTEGER()),
                ),
            )
        )
    )


_RESUME_WALK = _resume_walk()
_RESUMED = alias(MESSAGES, "resumed_m")
#: The resume walk from :sid (`resume_target`): the tip walk's rows (0, id, n, NULL),
#: then the continuation walk's from its end (1, id, n, whether the id has messages).
RESUME_WALK = Prepared(
    select(
        _RESUME_WALK.c.walk,
        _RESUME_WALK.c.id,
        _RESUME_WALK.c.n,
        case(
            (
                _RESUME_WALK.c.walk == _ONE,
                exists().where(_RESUMED.c.session_id == _RESUME_WALK.c.id),
            )
        ),
    ).order_by(_RESUME_WALK.c.walk, _RESUME_WALK.c.n)
)


def resume_answer(session_id: str, rows: list[tuple[Any, ...]]) -> str | None:
    """`resume_target`'s answer from RESUME_WALK's rows; None when a walk came back to an
    id (the caller then runs `resume_target`)."""
    tip = walked(row[1] for row in rows if row[0] == 0)
    resumed = [row for row in rows if row[0] == 1 and row[1] is not None]
    if tip is None or walked(row[1] for row in resumed) is None:
        return None
    best = None
    for found, _n, messages in (row[1:] for row in resumed):
        if messages:
            best = found
    return best or session_id


_UP = alias(SESSIONS, "up_s")
_ANCESTRY = select(_SID.label("id"), literal_column("0", INTEGER()).label("n")).cte(
    "ancestry", recursive=True
)
_ANCESTRY = _ANCESTRY.union_all(
    select(_UP.c.parent_session_id, _ANCESTRY.c.n + literal_column("1", INTEGER()))
    .select_from(_ANCESTRY.join(_UP, _UP.c.id == _ANCESTRY.c.id))
    .where(
        func.length(_UP.c.parent_session_id) > literal_column("0", INTEGER()),
        _ANCESTRY.c.n < literal_column(str(MAX_LINEAGE_HOPS), INTEGER()),
    )
)
#: :sid then its parents, nearest first, as far as `ancestor_ids` walks and on through a
#: cycle (`ancestors_from` stops at the first id seen again).
ANCESTRY = Prepared(select(_ANCESTRY.c.id).where(_ANCESTRY.c.n > NO_OFFSET).order_by(_ANCESTRY.c.n))


def ancestors_from(session_id: str, parents: Iterable[Any]) -> list[str]:
    """`ancestor_ids` from ANCESTRY's ids: up to the first one seen again (a parent
    walk is a line, so the walk that skips seen ids stops there too)."""
    chain: list[str] = []
    seen = {session_id}
    for parent in parents:
        if parent in seen:
            break
        seen.add(parent)
        chain.append(str(parent))
    return chain


def _walk(name: str, *, up: bool) -> Any:
    """The ids reached from :sid through parents ended by compression: `up` from a child
    (c) to its parent (p), else from a parent (p) to its children (c). UNION (not UNION
    ALL) makes the walk stop at a cycle."""
    found = select(bindparam("sid", type_=TEXT).label("id")).cte(name, recursive=True, nesting=True)
    child, parent = SESSIONS.alias("c"), SESSIONS.alias("p")
    if up:
        step = select(parent.c.id).select_from(
            found.join(child, child.c.id == found.c.id).join(
                parent, parent.c.id == child.c.parent_session_id
            )
        )
    else:
        step = select(child.c.id).select_from(
            found.join(parent, parent.c.id == found.c.id).join(
                child, child.c.parent_session_id == parent.c.id
            )
        )
    return found.union(step.where(parent.c.end_reason == COMPRESSION))


# The CTEs nest inside the IN (...) so the UPDATE starts with UPDATE: Python's sqlite3
# only reports a rowcount for statements it recognises as DML by their first keyword.
_UP, _DOWN = _walk("up", up=True), _walk("down", up=False)
_LINEAGE_MEMBERS = select(_UP.c.id).union(select(_DOWN.c.id))
_LINEAGE_SELECT = select(S.id).where(S.id.in_(_LINEAGE_MEMBERS)).order_by(S.id)
#: Setting a flag (`archived` or `pinned`) on the whole compression lineage of session
#: `:sid`, to `:value`, by column: one statement, sent as a write of its own
#: (`lineage_flag_params`, `Store.write_one`).
LINEAGE_FLAG_UPDATES = {
    column: Prepared(
        update(SESSIONS).where(S.id.in_(_LINEAGE_MEMBERS)).values({column: bindparam("value")})
    )
    for column in ("archived", "pinned")
}


def lineage_members(conn: Connection, session_id: str) -> list[str]:
    """The existing ids `set_session_archived` / `set_session_pinned` would touch for
    `session_id`: ancestors and descendants linked through parents ended by compression."""
    return [str(r) for r in conn.execute(_LINEAGE_SELECT, {"sid": session_id}).scalars()]


def lineage_flag_params(session_id: str, value: Any) -> dict[str, Any]:
    """The parameters of `LINEAGE_FLAG_UPDATES`: the flag stored as 0/1."""
    return {"sid": session_id, "value": flag(value)}
