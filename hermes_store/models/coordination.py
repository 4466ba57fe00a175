"""Tables processes use to coordinate: routing index, compression leases, async jobs."""

from __future__ import annotations

from sqlalchemy import Index, text
from sqlalchemy.orm import Mapped, mapped_column

from .base import Base, Integer_, Real_, Text_


class GatewayRouting(Base):
    __tablename__ = "gateway_routing"

    # The primary key must be exactly (scope, session_key), in that order.
    scope: Mapped[str] = mapped_column(Text_, primary_key=True, server_default=text("''"))
    session_key: Mapped[str] = mapped_column(Text_, primary_key=True)
    entry_json: Mapped[str] = mapped_column(Text_, nullable=False)
    updated_at: Mapped[float] = mapped_column(Real_, nullable=False)


class CompressionLock(Base):
    __tablename__ = "compression_locks"

    session_id: Mapped[str] = mapped_column(Text_, primary_key=True)
    holder: Mapped[str] = mapped_column(Text_, nullable=False)
    acquired_at: Mapped[float] = mapped_column(Real_, nullable=False)
    expires_at: Mapped[float] = mapped_column(Real_, nullable=False)

    __table_args__ = (Index("idx_compression_locks_expires", "expires_at"),)


class AsyncDelegation(Base):
    """Written by another Hermes module; hermes-store only owns the table's shape."""

    __tablename__ = "async_delegations"

    delegation_id: Mapped[str] = mapped_column(Text_, primary_key=True)
    origin_session: Mapped[str] = mapped_column(Text_, nullable=False)
    origin_ui_session_id: Mapped[str] = mapped_column(
        Text_, nullable=False, server_default=text("''")
    )
    parent_session_id: Mapped[str | None] = mapped_column(Text_)  # deliberately no FK
    state: Mapped[str] = mapped_column(Text_, nullable=False)
    dispatched_at: Mapped[float] = mapped_column(Real_, nullable=False)
    completed_at: Mapped[float | None] = mapped_column(Real_)
    updated_at: Mapped[float] = mapped_column(Real_, nullable=False)
    event_json: Mapped[str | None] = mapped_column(Text_)
    result_json: Mapped[str | None] = mapped_column(Text_)
    delivery_state: Mapped[str] = mapped_column(
        Text_, nullable=False, server_default=text("'pending'")
    )
    delivery_attempts: Mapped[int] = mapped_column(
        Integer_, nullable=False, server_default=text("0")
    )
    delivered_at: Mapped[float | None] = mapped_column(Real_)
    owner_pid: Mapped[int | None] = mapped_column(Integer_)
    owner_started_at: Mapped[int | None] = mapped_column(Integer_)
    task_json: Mapped[str | None] = mapped_column(Text_)
    delivery_claim: Mapped[str | None] = mapped_column(Text_)
    delivery_claimed_at: Mapped[float | None] = mapped_column(Real_)

    __table_args__ = (Index("idx_async_delegations_delivery", "delivery_state", "completed_at"),)
