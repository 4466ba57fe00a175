"""Token and cost accounting (docs/reference/behaviour.md 10.1 and 10.3) and usage statistics.

`sessions` carries the running totals of the main agent loop; `session_model_usage`
carries the same deltas split by model x route x task, plus auxiliary tasks (vision,
compression, titles, ...) that never touch the session totals.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal
from functools import cache
from typing import TYPE_CHECKING, Any

from sqlalchemy import (
    BindParameter,
    Connection,
    bindparam,
    func,
    select,
    update,
)

from ..errors import InvalidInput
from ..models import Message, SessionModelUsage
from ..models import Session as SessionRow
from ..runtime.engine import Prepared
from ._dialect import PreparedUpsert, utc_day
from ._tables import SESSIONS, USAGE, S, U
from .analytics import local_day
from .encoding import now, scrub

if TYPE_CHECKING:
    from ..store import Store

log = logging.getLogger(__name__)


#: The key of a usage row: one per session x model x route x task.
_USAGE_KEY_NAMES = (
    "session_id",
    "model",
    "billing_provider",
    "billing_base_url",
    "billing_mode",
    "task",
)
#: The token counters of a usage row, in the order reports show them.
TOKEN_FIELDS = (
    "input_tokens",
    "output_tokens",
    "cache_read_tokens",
    "cache_write_tokens",
    "reasoning_tokens",
)
_COUNTER_FIELDS = (*TOKEN_FIELDS, "api_call_count")
_USAGE_VALUE_NAMES = (
    *_COUNTER_FIELDS,
    "estimated_cost_usd",
    "actual_cost_usd",
    "cost_status",
    "cost_source",
    "first_seen",
    "last_seen",
)


def _int(value: Any) -> int:
    return int(value or 0)


def _cost(value: Any) -> float | None:
    return None if value is None else float(value)


@dataclass(frozen=True)
class _Delta:
    counters: dict[str, int]
    estimated_cost_usd: float | None
    actual_cost_usd: float | None

    @property
    def has_usage(self) -> bool:
        # Truthiness, as in the original: a cost of 0.0 alone is not usage.
        return (
            any(self.counters.values())
            or bool(self.estimated_cost_usd)
            or bool(self.actual_cost_usd)
        )

    @property
    def has_row_usage(self) -> bool:
        """Whether the delta earns a session_model_usage row: tokens, calls or an
        estimated cost (an actual cost alone only moves the session total)."""
        return any(self.counters.values()) or bool(self.estimated_cost_usd)


#: Route columns of a session and of a usage row.
_ROUTE_FIELDS = ("billing_provider", "billing_base_url", "billing_mode")
#: Cost bookkeeping a call may set on the session (only when given).
_COST_META_FIELDS = ("cost_status", "cost_source", "pricing_version")

# Token accounting runs on every model call, so its statements are prepared once (per
# dialect for the upserts) instead of being built and compiled per call.


def _ensure_statement(insert: Callable[[Any], Any]) -> Any:
    stmt = insert(SESSIONS).values(
        id=bindparam("id"),
        source="unknown",
        model=bindparam("model"),
        started_at=bindparam("started_at"),
    )
    model = func.coalesce(S.model, stmt.excluded.model)
    return stmt.on_conflict_do_update(index_elements=[S.id], set_={"model": model})


_ENSURE_SESSION = PreparedUpsert(_ensure_statement)
_STORED_ROUTE = Prepared(
    select(S.api_call_count, S.model, S.billing_provider).where(S.id == bindparam("id"))
)
_CURRENT_ROUTE = Prepared(
    select(S.model, *(S[f] for f in _ROUTE_FIELDS)).where(S.id == bindparam("id"))
)


def _upsert_usage_statement(insert: Callable[[Any], Any]) -> Any:
    stmt = insert(USAGE).values(
        {name: bindparam(name) for name in (*_USAGE_KEY_NAMES, *_USAGE_VALUE_NAMES)}
    )
    excluded = stmt.excluded
    set_: dict[str, Any] = {
        name: U[name] + excluded[name]
        for name in (*_COUNTER_FIELDS, "estimated_cost_usd", "actual_cost_usd")
    }
    set_["cost_status"] = func.coalesce(excluded.cost_status, U.cost_status)
    set_["cost_source"] = func.coalesce(excluded.cost_source, U.cost_source)
    set_["last_seen"] = excluded.last_seen  # first_seen keeps the insert's value
    return stmt.on_conflict_do_update(index_elements=[U[n] for n in _USAGE_KEY_NAMES], set_=set_)


_UPSERT_USAGE = PreparedUpsert(_upsert_usage_statement)


def _ensure_session(conn: Connection, session_id: str, model: str | None) -> None:
    """The create/ensure upsert reduced to what accounting knows: a missing row is created
    with source 'unknown'; an existing row only has a NULL model filled in."""
    _ENSURE_SESSION.run(conn, {"id": session_id, "model": model, "started_at": now()})


@dataclass(frozen=True)
class _TotalsShape:
    """What one accounting call changes on the session row, as far as the statement's
    text depends on it (the values themselves are bound)."""

    first_route: bool  # the call sets model and route outright
    filled: tuple[str, ...]  # route columns filled in where NULL
    absolute: bool  # counters are a snapshot, not a delta
    actual_cost: bool
    cost_meta: tuple[str, ...]


@cache
def _totals_update(shape: _TotalsShape) -> Prepared:
    values: dict[Any, Any] = {}
    if shape.first_route:
        for name in ("model", *_ROUTE_FIELDS):
            values[S[name]] = bindparam(f"set_{name}")
    for name in shape.filled:
        values[S[name]] = func.coalesce(S[name], bindparam(f"set_{name}"))
    costs = ["estimated_cost_usd", *(["actual_cost_usd"] if shape.actual_cost else [])]
    for name in (*_COUNTER_FIELDS, *costs):
        amount: BindParameter[Any] = bindparam(f"add_{name}")
        zero = 0 if name in _COUNTER_FIELDS else 0.0
        values[S[name]] = amount if shape.absolute else func.coalesce(S[name], zero) + amount
    for name in shape.cost_meta:
        values[S[name]] = bindparam(f"set_{name}")
    return Prepared(update(SESSIONS).where(S.id == bindparam("id")).values(values))


def _account(
    conn: Connection,
    session_id: str,
    delta: _Delta,
    model: str | None,
    route: Mapping[str, str | None],
    cost_meta: Mapping[str, str | None],
    absolute: bool,
) -> None:
    """Add (or, `absolute`, set) one call's usage on the session's totals and, for a
    delta, on its model x route row."""
    stored = _STORED_ROUTE.first(conn, {"id": session_id})
    if stored is None:  # deleted between the two units of work
        _ensure_session(conn, session_id, model)
        stored = _STORED_ROUTE.first(conn, {"id": session_id})
        assert stored is not None
    stored_calls, stored_model, stored_provider = stored
    # The first call that actually costs something decides the session's route: rows
    # created by ensure_session or a route-less create_session carry a placeholder
    # model/provider that must not win over the real one.
    first_route = (
        not stored_calls
        and delta.has_usage
        and bool(model)
        and bool(route["billing_provider"])
        and (model != stored_model or route["billing_provider"] != stored_provider)
    )
    given = {"model": model, **route, **cost_meta}
    filled: tuple[str, ...] = ()
    if not first_route and delta.has_usage:
        filled = tuple(n for n in ("model", *_ROUTE_FIELDS) if given[n] is not None)
    est, act = delta.estimated_cost_usd, delta.actual_cost_usd
    shape = _TotalsShape(
        first_route=first_route,
        filled=filled,
        absolute=absolute,
        actual_cost=act is not None,
        cost_meta=tuple(n for n in _COST_META_FIELDS if given[n] is not None),
    )
    params: dict[str, Any] = {"id": session_id, "add_estimated_cost_usd": est or 0.0}
    params.update({f"set_{name}": value for name, value in given.items()})
    params.update({f"add_{name}": amount for name, amount in delta.counters.items()})
    if act is not None:
        params["add_actual_cost_usd"] = act
    _totals_update(shape).run(conn, params)

    if absolute or not delta.has_row_usage:
        return  # absolute snapshots would double count if split per model
    current = _CURRENT_ROUTE.first(conn, {"id": session_id})
    assert current is not None
    current_model, *current_route = current
    _upsert_usage(
        conn,
        session_id=session_id,
        model=model or current_model or "unknown",
        route=[
            given[name] or stored or ""
            for name, stored in zip(_ROUTE_FIELDS, current_route, strict=True)
        ],
        task="",
        counters=delta.counters,
        estimated_cost_usd=est or 0.0,
        actual_cost_usd=act or 0.0,
        cost_status=cost_meta["cost_status"],
        cost_source=cost_meta["cost_source"],
    )


def _record_auxiliary(
    conn: Connection, session_id: str, usage: Mapping[str, Any], counters: dict[str, int]
) -> None:
    _ensure_session(conn, session_id, None)
    _upsert_usage(conn, session_id=session_id, counters=counters, **usage)


class UsageRepository:
    """Token and cost accounting per session and per model, route and task, and the usage
    statistics read from them.

    Args:
        store: the Store the repository works on.
    """

    def __init__(self, store: Store) -> None:
        self.store = store

    # ------------------------------------------------------------------ writers

    def update_token_counts(
        self,
        session_id: str,
        input_tokens: int = 0,
        output_tokens: int = 0,
        model: str | None = None,
        cache_read_tokens: int = 0,
        cache_write_tokens: int = 0,
        reasoning_tokens: int = 0,
        estimated_cost_usd: float | None = None,
        actual_cost_usd: float | None = None,
        cost_status: str | None = None,
        cost_source: str | None = None,
        pricing_version: str | None = None,
        billing_provider: str | None = None,
        billing_base_url: str | None = None,
        billing_mode: str | None = None,
        api_call_count: int = 0,
        absolute: bool = False,
    ) -> None:
        """Add one model call's usage to the session's totals and its model x route row
        (with `absolute`, set the totals to a snapshot instead, and write no row); a
        missing session row is created first (docs/reference/behaviour.md 10.1).

        Args:
            session_id: the session's id.
            input_tokens: prompt tokens.
            output_tokens: completion tokens.
            model: the model's name.
            cache_read_tokens: prompt tokens read from the provider's cache.
            cache_write_tokens: prompt tokens written to the provider's cache.
            reasoning_tokens: reasoning tokens.
            estimated_cost_usd: the estimated cost, in US dollars.
            actual_cost_usd: the cost the provider billed, in US dollars, when known.
            cost_status: whether the cost is final, estimated or unknown.
            cost_source: where the cost figures come from (provider, estimate, ...).
            pricing_version: the version of the price table the cost was computed with.
            billing_provider: the provider that bills the usage, when it differs from the
                model's.
            billing_base_url: the API base URL the usage is billed through.
            billing_mode: how the provider bills (subscription, metered, ...), when known.
            api_call_count: API calls this update accounts for.
            absolute: True: the counts replace the stored totals; False: they are added to
                them.
        """
        if not session_id:
            return
        delta = _Delta(
            counters={
                "input_tokens": _int(input_tokens),
                "output_tokens": _int(output_tokens),
                "cache_read_tokens": _int(cache_read_tokens),
                "cache_write_tokens": _int(cache_write_tokens),
                "reasoning_tokens": _int(reasoning_tokens),
                "api_call_count": _int(api_call_count),
            },
            estimated_cost_usd=_cost(estimated_cost_usd),
            actual_cost_usd=_cost(actual_cost_usd),
        )
        model = scrub(model)
        route = {
            "billing_provider": scrub(billing_provider),
            "billing_base_url": scrub(billing_base_url),
            "billing_mode": scrub(billing_mode),
        }
        cost_meta = {
            "cost_status": scrub(cost_status),
            "cost_source": scrub(cost_source),
            "pricing_version": scrub(pricing_version),
        }
        # Its own unit of work, so the row exists even when the accounting below (or an
        # earlier create_session) fails.
        self.store.write(lambda conn: _ensure_session(conn, session_id, model))
        self.store.write(
            lambda conn: _account(conn, session_id, delta, model, route, cost_meta, absolute)
        )

    def record_auxiliary_usage(
        self,
        session_id: str,
        task: str,
        *,
        model: str | None = None,
        billing_provider: str | None = None,
        billing_base_url: str | None = None,
        input_tokens: int = 0,
        output_tokens: int = 0,
        cache_read_tokens: int = 0,
        cache_write_tokens: int = 0,
        reasoning_tokens: int = 0,
        estimated_cost_usd: float | None = None,
    ) -> None:
        """Usage of a side task. Never touches the session totals and never borrows the
        session's route: the auxiliary client may use a different provider entirely.

        Args:
            session_id: the session's id.
            task: the auxiliary task (title, compression, ...).
            model: the model's name.
            billing_provider: the provider that bills the usage, when it differs from the
                model's.
            billing_base_url: the API base URL the usage is billed through.
            input_tokens: prompt tokens.
            output_tokens: completion tokens.
            cache_read_tokens: prompt tokens read from the provider's cache.
            cache_write_tokens: prompt tokens written to the provider's cache.
            reasoning_tokens: reasoning tokens.
            estimated_cost_usd: the estimated cost, in US dollars.
        """
        if not session_id or not task:
            return
        counters = {
            "input_tokens": _int(input_tokens),
            "output_tokens": _int(output_tokens),
            "cache_read_tokens": _int(cache_read_tokens),
            "cache_write_tokens": _int(cache_write_tokens),
            "reasoning_tokens": _int(reasoning_tokens),
            "api_call_count": 1,
        }

        usage = {
            "model": scrub(model) or "unknown",
            "route": (scrub(billing_provider) or "", scrub(billing_base_url) or "", ""),
            "task": scrub(task) or "",
            "estimated_cost_usd": _cost(estimated_cost_usd) or 0.0,
            "actual_cost_usd": 0.0,
            "cost_status": None,
            "cost_source": None,
        }
        self.store.write(lambda conn: _record_auxiliary(conn, session_id, usage, counters))

    # ------------------------------------------------------------------ statistics

    def usage_by_model(
        self, session_id: str | None = None, *, task: str | None = None
    ) -> list[dict[str, Any]]:
        """Per-model sums over session_model_usage (main loop and auxiliary tasks unless
        `task` picks one; '' is the main loop), most expensive first. Absolute-only
        accounting writes no usage rows, so it is not visible here (use usage_by_day).

        Args:
            session_id: the session's id.
            task: the auxiliary task (title, compression, ...).
        """
        u = SessionModelUsage
        cost = func.sum(u.estimated_cost_usd)
        stmt = (
            select(
                u.model.label("model"),
                func.count(func.distinct(u.session_id)).label("sessions"),
                func.sum(u.api_call_count).label("api_call_count"),
                *(func.sum(getattr(u, f)).label(f) for f in TOKEN_FIELDS),
                cost.label("estimated_cost_usd"),
                func.sum(u.actual_cost_usd).label("actual_cost_usd"),
            )
            .group_by(u.model)
            .order_by(cost.desc(), func.sum(u.input_tokens + u.output_tokens).desc(), u.model)
        )
        if session_id is not None:
            stmt = stmt.where(u.session_id == session_id)
        if task is not None:
            stmt = stmt.where(u.task == task)
        return self.store.read(lambda s: [_numbers(dict(r)) for r in s.execute(stmt).mappings()])

    def usage_by_day(
        self,
        *,
        since: float | None = None,
        until: float | None = None,
        source: str | None = None,
        utc_offset_seconds: float = 0.0,
        time_zone: str | None = None,
    ) -> list[dict[str, Any]]:
        """Per-day sums of the session totals, bucketed by the day a session started in
        the time zone `time_zone` (an IANA name such as "Europe/Berlin", daylight saving
        time included; default UTC), oldest day first. `utc_offset_seconds`, a fixed shift
        of the day boundary, is kept for compatibility (give one or the other). `since` is
        inclusive and `until` exclusive, both on `started_at`.

        Args:
            since: only from this epoch second on.
            until: only up to this epoch second.
            source: the source (cli, telegram, discord, cron, ...).
            utc_offset_seconds: the fixed offset from UTC whose days are counted, when no
                `time_zone` is given.
            time_zone: the IANA time zone whose days are counted (None: UTC plus
                `utc_offset_seconds`).
        """
        day = _day(SessionRow.started_at, utc_offset_seconds, time_zone)
        stmt = (
            select(
                day.label("day"),
                func.count(SessionRow.id).label("sessions"),
                func.sum(func.coalesce(SessionRow.message_count, 0)).label("message_count"),
                func.sum(func.coalesce(SessionRow.api_call_count, 0)).label("api_call_count"),
                *(
                    func.sum(func.coalesce(getattr(SessionRow, f), 0)).label(f)
                    for f in TOKEN_FIELDS
                ),
                func.sum(func.coalesce(SessionRow.estimated_cost_usd, 0.0)).label(
                    "estimated_cost_usd"
                ),
                func.sum(func.coalesce(SessionRow.actual_cost_usd, 0.0)).label("actual_cost_usd"),
            )
            .group_by(day)
            .order_by(day)
        )
        if since is not None:
            stmt = stmt.where(SessionRow.started_at >= since)
        if until is not None:
            stmt = stmt.where(SessionRow.started_at < until)
        if source is not None:
            stmt = stmt.where(SessionRow.source == source)
        return self.store.read(lambda s: [_numbers(dict(r)) for r in s.execute(stmt).mappings()])

    def usage_by_model_and_day(
        self, *, utc_offset_seconds: float = 0.0, time_zone: str | None = None
    ) -> list[dict[str, Any]]:
        """usage_by_model split by the day each session started (the day usage_by_day
        uses, in the same `time_zone` or by the same `utc_offset_seconds`, so the two agree
        per day): one row per day and model, oldest day first, then the most expensive
        model first.

        Args:
            utc_offset_seconds: the fixed offset from UTC whose days are counted, when no
                `time_zone` is given.
            time_zone: the IANA time zone whose days are counted (None: UTC plus
                `utc_offset_seconds`).
        """
        u = SessionModelUsage
        day = _day(SessionRow.started_at, utc_offset_seconds, time_zone)
        cost = func.sum(u.estimated_cost_usd)
        stmt = (
            select(
                day.label("day"),
                u.model.label("model"),
                func.count(func.distinct(u.session_id)).label("sessions"),
                func.sum(u.api_call_count).label("api_call_count"),
                *(func.sum(getattr(u, f)).label(f) for f in TOKEN_FIELDS),
                cost.label("estimated_cost_usd"),
                func.sum(u.actual_cost_usd).label("actual_cost_usd"),
            )
            .join(SessionRow, SessionRow.id == u.session_id)
            .group_by(day, u.model)
            .order_by(day, cost.desc(), u.model)
        )
        return self.store.read(lambda s: [_numbers(dict(r)) for r in s.execute(stmt).mappings()])

    def message_activity_by_day(
        self, *, utc_offset_seconds: float = 0.0, time_zone: str | None = None
    ) -> list[dict[str, Any]]:
        """Messages per day by message timestamp (activity, not session start), in the
        time zone `time_zone` (or shifted by `utc_offset_seconds`, as usage_by_day).

        Args:
            utc_offset_seconds: the fixed offset from UTC whose days are counted, when no
                `time_zone` is given.
            time_zone: the IANA time zone whose days are counted (None: UTC plus
                `utc_offset_seconds`).
        """
        day = _day(Message.timestamp, utc_offset_seconds, time_zone)
        stmt = (
            select(
                day.label("day"),
                func.count(Message.id).label("messages"),
                func.count(func.distinct(Message.session_id)).label("sessions"),
            )
            .group_by(day)
            .order_by(day)
        )
        return self.store.read(lambda s: [dict(r) for r in s.execute(stmt).mappings()])


def _day(epoch: Any, utc_offset_seconds: float, time_zone: str | None) -> Any:
    """The `YYYY-MM-DD` of `epoch` in `time_zone`, or (the older parameter, a fixed
    shift) in UTC after adding `utc_offset_seconds`."""
    if time_zone is None:
        return utc_day(epoch + utc_offset_seconds)
    if utc_offset_seconds:
        raise InvalidInput(
            "give time_zone or utc_offset_seconds, not both: time_zone follows daylight "
            "saving time, utc_offset_seconds is a fixed shift kept for compatibility"
        )
    return local_day(epoch, time_zone)


def _upsert_usage(
    conn: Connection,
    *,
    session_id: str,
    model: str,
    route: Sequence[str],
    task: str,
    counters: Mapping[str, int],
    estimated_cost_usd: float,
    actual_cost_usd: float,
    cost_status: str | None,
    cost_source: str | None,
) -> None:
    """Add to the usage row of (session, model, route, task), created at first use."""
    ts = now()
    params: dict[str, Any] = {
        "session_id": session_id,
        "model": model,
        **dict(zip(_ROUTE_FIELDS, route, strict=True)),
        "task": task,
        "estimated_cost_usd": estimated_cost_usd,
        "actual_cost_usd": actual_cost_usd,
        "cost_status": cost_status,
        "cost_source": cost_source,
        "first_seen": ts,
        "last_seen": ts,
        **counters,
    }
    _UPSERT_USAGE.run(conn, params)


def _numbers(row: dict[str, Any]) -> dict[str, Any]:
    # SUM over no non-NULL values is NULL; a statistics row reads better with zeros.
    # PostgreSQL's SUM of a BIGINT is NUMERIC, which psycopg reads as Decimal: the counts
    # are whole numbers, and the same row types on both backends.
    return {
        k: (0 if v is None and k != "model" and k != "day" else _plain(v)) for k, v in row.items()
    }


def _plain(value: Any) -> Any:
    if isinstance(value, Decimal):
        return int(value) if value == value.to_integral_value() else float(value)
    return value
