"""Which sessions a prune, an archive or an empty-session sweep selects, and the
archiving itself (docs/reference/behaviour.md section 9). The deleting is `deletion.py`'s.

Deliberate difference from v23: the `*_like` prune filters take `%` and `_` literally
(v23 passes them to LIKE unescaped, so `_` matched any character). Later upstream builds
made the same change.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypedDict

from sqlalchemy import (
    ColumnElement,
    Connection,
    Select,
    bindparam,
    func,
    or_,
    select,
    update,
)

from ._sql import chunks, path_prefix_values, path_under, rowcount
from ._tables import SESSIONS, S
from .encoding import now
from .lineage import COMPRESSION, last_active, lineage_members

DAY = 86400.0

_ACTIVITY = last_active(S.id, S.started_at)
_TOKENS = func.coalesce(S.input_tokens, 0) + func.coalesce(S.output_tokens, 0)
_COST = func.coalesce(S.actual_cost_usd, S.estimated_cost_usd, 0.0)
_MESSAGES = func.coalesce(S.message_count, 0)
_TOOL_CALLS = func.coalesce(S.tool_call_count, 0)


def _cwd_under(prefix: Any) -> ColumnElement[bool]:
    return path_under(S.cwd, *path_prefix_values(str(prefix)))


#: Each prune filter as the condition it adds, given the filter's value.
FILTERS: dict[str, Callable[[Any], ColumnElement[bool]]] = {
    "last_active_before": lambda v: _ACTIVITY < float(v),
    "last_active_after": lambda v: _ACTIVITY > float(v),
    "started_before": lambda v: S.started_at < float(v),
    "started_after": lambda v: S.started_at > float(v),
    "title_like": lambda v: S.title.icontains(str(v), autoescape=True),
    "end_reason": lambda v: S.end_reason == v,
    "cwd_prefix": _cwd_under,
    "min_messages": lambda v: _MESSAGES >= int(v),
    "max_messages": lambda v: _MESSAGES <= int(v),
    "archived": lambda v: S.archived == (1 if v else 0),
    "model_like": lambda v: S.model.icontains(str(v), autoescape=True),
    "provider": lambda v: func.lower(S.billing_provider) == str(v).lower(),
    "user_id": lambda v: S.user_id == v,
    "chat_id": lambda v: S.chat_id == v,
    "chat_type": lambda v: S.chat_type == v,
    "branch_like": lambda v: S.git_branch.icontains(str(v), autoescape=True),
    "min_tokens": lambda v: _TOKENS >= int(v),
    "max_tokens": lambda v: _TOKENS <= int(v),
    "min_cost": lambda v: _COST >= float(v),
    "max_cost": lambda v: _COST <= float(v),
    "min_tool_calls": lambda v: _TOOL_CALLS >= int(v),
    "max_tool_calls": lambda v: _TOOL_CALLS <= int(v),
}
PRUNE_FILTERS = frozenset(FILTERS)


class PruneFilters(TypedDict, total=False):
    """The keyword filters of prune_sessions, list_prune_candidates and archive_sessions
    (docs/reference/behaviour.md 9), as type checkers see them; None means "not filtered"."""

    last_active_before: float | None
    last_active_after: float | None
    started_before: float | None
    started_after: float | None
    title_like: str | None
    end_reason: str | None
    cwd_prefix: str | None
    min_messages: int | None
    max_messages: int | None
    archived: bool | None
    model_like: str | None
    provider: str | None
    user_id: str | None
    chat_id: str | None
    chat_type: str | None
    branch_like: str | None
    min_tokens: int | None
    max_tokens: int | None
    min_cost: float | None
    max_cost: float | None
    min_tool_calls: int | None
    max_tool_calls: int | None


def prune_conditions(
    caller: str,
    older_than_days: float | None,
    source: str | None,
    filters: Mapping[str, Any],
) -> list[ColumnElement[bool]]:
    """What a prune with these arguments selects: ended sessions matching every filter.
    `older_than_days` sets `last_active_before` unless a before-filter is given; an
    unknown filter raises TypeError naming `caller`, as a bad keyword argument would."""
    unknown = sorted(set(filters) - PRUNE_FILTERS)
    if unknown:
        raise TypeError(f"{caller}() got an unexpected keyword argument '{unknown[0]}'")
    given = {k: v for k, v in filters.items() if v is not None}
    if (
        older_than_days is not None
        and "last_active_before" not in given
        and "started_before" not in given
    ):
        given["last_active_before"] = now() - float(older_than_days) * DAY
    conditions: list[ColumnElement[bool]] = [S.ended_at.is_not(None)]
    if source is not None:
        conditions.append(S.source == source)
    conditions.extend(FILTERS[name](value) for name, value in given.items())
    return conditions


def empty_conditions() -> list[ColumnElement[bool]]:
    """Ended, unarchived sessions whose message count is 0."""
    return [_MESSAGES == 0, S.ended_at.is_not(None), S.archived == 0]


def candidates_statement(conditions: Sequence[ColumnElement[bool]]) -> Select[Any]:
    """The dry run's rows, least recently active first."""
    activity = _ACTIVITY.label("last_active")
    return (
        select(
            S.id,
            S.source,
            S.title,
            S.model,
            S.started_at,
            activity,
            S.ended_at,
            S.message_count,
            S.archived,
        )
        .where(*conditions)
        .order_by(activity, S.started_at, S.id)
    )


def archive_lineages(conn: Connection, conditions: Sequence[ColumnElement[bool]]) -> int:
    """Archive every selected session's compression lineage; how many were selected."""
    ids = [str(i) for i in conn.execute(select(S.id).where(*conditions).order_by(S.id)).scalars()]
    members: set[str] = set()
    for sid in ids:  # every one: lineages need not be closed under membership
        members.update(lineage_members(conn, sid))
    stmt = update(SESSIONS).where(S.id.in_(bindparam("ids", expanding=True))).values(archived=1)
    for chunk in chunks(sorted(members)):
        conn.execute(stmt, {"ids": chunk})
    return len(ids)


def archive_idle(conn: Connection, cutoff: float, exclude_pinned: bool) -> int:
    """Archive unarchived sessions last active before `cutoff`, open ones too, except
    compression-ended segments (their live tip carries the lineage) and, with
    `exclude_pinned`, pinned ones; how many."""
    conditions: list[ColumnElement[bool]] = [
        S.archived == 0,
        or_(S.end_reason.is_(None), S.end_reason != COMPRESSION),
        _ACTIVITY < cutoff,
    ]
    if exclude_pinned:
        conditions.append(S.pinned == 0)
    return rowcount(conn.execute(update(SESSIONS).where(*conditions).values(archived=1)))


def prune_bounds(candidates: Sequence[Mapping[str, Any]], cutoff: float, step: int) -> list[float]:
    """Growing `last_active_before` bounds, about `step` candidates apart (they come
    least recently active first) and ending at `cutoff`: pruning up to each bound in turn
    deletes exactly what one prune up to `cutoff` would, in steps a bar can count."""
    bounds: list[float] = []
    for index in range(step, len(candidates), step):
        bound = float(candidates[index]["last_active"])
        if not bounds or bound > bounds[-1]:
            bounds.append(bound)
    return [*bounds, cutoff]
