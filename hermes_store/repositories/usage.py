"""Token and cost accounting (spec/behaviour.md 10.1 and 10.3) and usage statistics.

`sessions` carries the running totals of the main agent loop; `session_model_usage`
carries the same deltas split by model x route x task, plus auxiliary tasks (vision,
compression, titles, ...) that never touch the session totals.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from sqlalchemy import ColumnElement, Connection, func, select, update

from ..models import Message, SessionModelUsage
from ..models import Session as SessionRow
from ..store import Store
from ._dialect import upsert_insert
from ._encoding import now, scrub

log = logging.getLogger(__name__)

_USAGE_KEY = (
    SessionModelUsage.session_id,
    SessionModelUsage.model,
    SessionModelUsage.billing_provider,
    SessionModelUsage.billing_base_url,
    SessionModelUsage.billing_mode,
    SessionModelUsage.task,
)
_TOKEN_FIELDS = (
    "input_tokens",
    "output_tokens",
    "cache_read_tokens",
    "cache_write_tokens",
    "reasoning_tokens",
)
_COUNTER_FIELDS = (*_TOKEN_FIELDS, "api_call_count")


def _ensure_session(session: Connection, session_id: str, model: str | None) -> None:
    """The create/ensure upsert reduced to what accounting knows: a missing row is created
    with source 'unknown'; an existing row only has a NULL model filled in."""
    stmt = upsert_insert(session, SessionRow).values(
        id=session_id, source="unknown", model=scrub(model), started_at=now()
    )
    stmt = stmt.on_conflict_do_update(
        index_elements=[SessionRow.id],
        set_={"model": func.coalesce(SessionRow.model, stmt.excluded.model)},
    )
    session.execute(stmt)


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


class UsageRepository:
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
        costs_meta = {
            "cost_status": scrub(cost_status),
            "cost_source": scrub(cost_source),
            "pricing_version": scrub(pricing_version),
        }

        # Its own unit of work, so the row exists even when the accounting below (or an
        # earlier create_session) fails.
        self.store.write(lambda s: _ensure_session(s, session_id, model))

        def work(s: Connection) -> None:
            conn = s
            stored = conn.execute(
                select(
                    SessionRow.api_call_count, SessionRow.model, SessionRow.billing_provider
                ).where(SessionRow.id == session_id)
            ).first()
            if stored is None:  # deleted between the two units of work
                _ensure_session(s, session_id, model)
                stored = conn.execute(
                    select(
                        SessionRow.api_call_count, SessionRow.model, SessionRow.billing_provider
                    ).where(SessionRow.id == session_id)
                ).one()

            values: dict[Any, Any] = {}
            # The first call that actually costs something decides the session's route:
            # rows created by ensure_session or a route-less create_session carry a
            # placeholder model/provider that must not win over the real one.
            first_route = (
                not stored.api_call_count
                and delta.has_usage
                and bool(model)
                and bool(route["billing_provider"])
                and (model != stored.model or route["billing_provider"] != stored.billing_provider)
            )
            if first_route:
                values[SessionRow.model] = model
                for name, value in route.items():
                    values[getattr(SessionRow, name)] = value
            elif delta.has_usage:
                for name, value in (("model", model), *route.items()):
                    if value is not None:
                        column = getattr(SessionRow, name)
                        values[column] = func.coalesce(column, value)

            for name, amount in delta.counters.items():
                column = getattr(SessionRow, name)
                values[column] = amount if absolute else func.coalesce(column, 0) + amount
            est, act = delta.estimated_cost_usd, delta.actual_cost_usd
            if absolute:
                values[SessionRow.estimated_cost_usd] = est or 0.0
                if act is not None:
                    values[SessionRow.actual_cost_usd] = act
            else:
                values[SessionRow.estimated_cost_usd] = func.coalesce(
                    SessionRow.estimated_cost_usd, 0.0
                ) + (est or 0.0)
                if act is not None:
                    values[SessionRow.actual_cost_usd] = (
                        func.coalesce(SessionRow.actual_cost_usd, 0.0) + act
                    )
            for name, value in costs_meta.items():
                if value is not None:
                    values[getattr(SessionRow, name)] = value

            conn.execute(update(SessionRow).where(SessionRow.id == session_id).values(values))

            if absolute or not delta.has_row_usage:
                return  # absolute snapshots would double count if split per model
            current = conn.execute(
                select(
                    SessionRow.model,
                    SessionRow.billing_provider,
                    SessionRow.billing_base_url,
                    SessionRow.billing_mode,
                ).where(SessionRow.id == session_id)
            ).one()
            _upsert_usage(
                s,
                session_id=session_id,
                model=model or current.model or "unknown",
                billing_provider=route["billing_provider"] or current.billing_provider or "",
                billing_base_url=route["billing_base_url"] or current.billing_base_url or "",
                billing_mode=route["billing_mode"] or current.billing_mode or "",
                task="",
                counters=delta.counters,
                estimated_cost_usd=est or 0.0,
                actual_cost_usd=act or 0.0,
                cost_status=costs_meta["cost_status"],
                cost_source=costs_meta["cost_source"],
            )

        self.store.write(work)

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
        session's route: the auxiliary client may use a different provider entirely."""
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

        def work(s: Connection) -> None:
            _ensure_session(s, session_id, None)
            _upsert_usage(
                s,
                session_id=session_id,
                model=scrub(model) or "unknown",
                billing_provider=scrub(billing_provider) or "",
                billing_base_url=scrub(billing_base_url) or "",
                billing_mode="",
                task=scrub(task) or "",
                counters=counters,
                estimated_cost_usd=_cost(estimated_cost_usd) or 0.0,
                actual_cost_usd=0.0,
                cost_status=None,
                cost_source=None,
            )

        self.store.write(work)

    # ------------------------------------------------------------------ statistics

    def usage_by_model(
        self, session_id: str | None = None, *, task: str | None = None
    ) -> list[dict[str, Any]]:
        """Per-model sums over session_model_usage (main loop and auxiliary tasks unless
        `task` picks one; '' is the main loop), most expensive first. Absolute-only
        accounting writes no usage rows, so it is not visible here (use usage_by_day)."""
        u = SessionModelUsage
        cost = func.sum(u.estimated_cost_usd)
        stmt = (
            select(
                u.model.label("model"),
                func.count(func.distinct(u.session_id)).label("sessions"),
                func.sum(u.api_call_count).label("api_call_count"),
                *(func.sum(getattr(u, f)).label(f) for f in _TOKEN_FIELDS),
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
        with self.store.read() as s:
            return [_numbers(dict(r)) for r in s.execute(stmt).mappings()]

    def usage_by_day(
        self,
        *,
        since: float | None = None,
        until: float | None = None,
        source: str | None = None,
        utc_offset_seconds: float = 0.0,
    ) -> list[dict[str, Any]]:
        """Per-day sums of the session totals, bucketed by the day a session started
        (`utc_offset_seconds` shifts the day boundary to local time), oldest day first.
        `since` is inclusive and `until` exclusive, both on `started_at`."""
        day = _day_expr(self.store.dialect, SessionRow.started_at + utc_offset_seconds)
        stmt = (
            select(
                day.label("day"),
                func.count(SessionRow.id).label("sessions"),
                func.sum(func.coalesce(SessionRow.message_count, 0)).label("message_count"),
                func.sum(func.coalesce(SessionRow.api_call_count, 0)).label("api_call_count"),
                *(
                    func.sum(func.coalesce(getattr(SessionRow, f), 0)).label(f)
                    for f in _TOKEN_FIELDS
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
        with self.store.read() as s:
            return [_numbers(dict(r)) for r in s.execute(stmt).mappings()]

    def usage_by_model_and_day(self, *, utc_offset_seconds: float = 0.0) -> list[dict[str, Any]]:
        """usage_by_model split by the day each session started (the day usage_by_day
        uses, so the two agree per day): one row per day and model, oldest day first,
        then the most expensive model first."""
        u = SessionModelUsage
        day = _day_expr(self.store.dialect, SessionRow.started_at + utc_offset_seconds)
        cost = func.sum(u.estimated_cost_usd)
        stmt = (
            select(
                day.label("day"),
                u.model.label("model"),
                func.count(func.distinct(u.session_id)).label("sessions"),
                func.sum(u.api_call_count).label("api_call_count"),
                *(func.sum(getattr(u, f)).label(f) for f in _TOKEN_FIELDS),
                cost.label("estimated_cost_usd"),
                func.sum(u.actual_cost_usd).label("actual_cost_usd"),
            )
            .join(SessionRow, SessionRow.id == u.session_id)
            .group_by(day, u.model)
            .order_by(day, cost.desc(), u.model)
        )
        with self.store.read() as s:
            return [_numbers(dict(r)) for r in s.execute(stmt).mappings()]

    def message_activity_by_day(self, *, utc_offset_seconds: float = 0.0) -> list[dict[str, Any]]:
        """Messages per day by message timestamp (activity, not session start)."""
        day = _day_expr(self.store.dialect, Message.timestamp + utc_offset_seconds)
        stmt = (
            select(
                day.label("day"),
                func.count(Message.id).label("messages"),
                func.count(func.distinct(Message.session_id)).label("sessions"),
            )
            .group_by(day)
            .order_by(day)
        )
        with self.store.read() as s:
            return [dict(r) for r in s.execute(stmt).mappings()]


def _upsert_usage(
    session: Connection,
    *,
    session_id: str,
    model: str,
    billing_provider: str,
    billing_base_url: str,
    billing_mode: str,
    task: str,
    counters: dict[str, int],
    estimated_cost_usd: float,
    actual_cost_usd: float,
    cost_status: str | None,
    cost_source: str | None,
) -> None:
    ts = now()
    stmt = upsert_insert(session, SessionModelUsage).values(
        session_id=session_id,
        model=model,
        billing_provider=billing_provider,
        billing_base_url=billing_base_url,
        billing_mode=billing_mode,
        task=task,
        estimated_cost_usd=estimated_cost_usd,
        actual_cost_usd=actual_cost_usd,
        cost_status=cost_status,
        cost_source=cost_source,
        first_seen=ts,
        last_seen=ts,
        **counters,
    )
    excluded = stmt.excluded
    set_: dict[str, Any] = {
        name: getattr(SessionModelUsage, name) + getattr(excluded, name)
        for name in (*_COUNTER_FIELDS, "estimated_cost_usd", "actual_cost_usd")
    }
    set_["cost_status"] = func.coalesce(excluded.cost_status, SessionModelUsage.cost_status)
    set_["cost_source"] = func.coalesce(excluded.cost_source, SessionModelUsage.cost_source)
    set_["last_seen"] = excluded.last_seen  # first_seen keeps the insert's value
    session.execute(stmt.on_conflict_do_update(index_elements=_USAGE_KEY, set_=set_))


def _day_expr(dialect: str, epoch: ColumnElement[float]) -> ColumnElement[str]:
    """'YYYY-MM-DD' (UTC) of an epoch-seconds expression; the one dialect-specific bit."""
    if dialect == "postgresql":
        return func.to_char(func.timezone("UTC", func.to_timestamp(epoch)), "YYYY-MM-DD")
    return func.date(epoch, "unixepoch")


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
