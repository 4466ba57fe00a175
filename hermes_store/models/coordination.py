"""Tables processes use to coordinate: routing index, compression leases, async jobs."""

from __future__ import annotations

from sqlalchemy import Index, text
from sqlalchemy.orm import Mapped, mapped_column

from .base import Base, Integer_, Real_, Text_


class GatewayRouting(Base):
    """A row of `gateway_routing`: the gateway's index from routing key to session entry."""

    __tablename__ = "gateway_routing"

    # The primary key must be exactly (scope, session_key), in that order.
    scope: Mapped[str] = mapped_column(
        Text_,
        primary_key=True,
        server_default=text("''"),
        doc="Namespace: the gateway's sessions directory ('' by default).",
    )
    session_key: Mapped[str] = mapped_column(Text_, primary_key=True, doc="Routing key.")
    entry_json: Mapped[str] = mapped_column(
        Text_, nullable=False, doc="The gateway's serialized session entry (JSON)."
    )
    updated_at: Mapped[float] = mapped_column(
        Real_, nullable=False, doc="Last change, epoch seconds (UTC)."
    )


class CompressionLock(Base):
    """A row of `compression_locks`: a lease that lets one process compress a session."""

    __tablename__ = "compression_locks"

    session_id: Mapped[str] = mapped_column(
        Text_, primary_key=True, doc="The session the lease is on (one lease per session)."
    )
    holder: Mapped[str] = mapped_column(
        Text_,
        nullable=False,
        doc="Who holds the lease (`pid=<pid>:tid=<thread>:agent=<hex>:nonce=<hex>`).",
    )
    acquired_at: Mapped[float] = mapped_column(
        Real_, nullable=False, doc="When the lease was taken, epoch seconds (UTC)."
    )
    expires_at: Mapped[float] = mapped_column(
        Real_, nullable=False, doc="When the lease runs out, epoch seconds (UTC)."
    )

    __table_args__ = (Index("idx_compression_locks_expires", "expires_at"),)


class AsyncDelegation(Base):
    """A row of `async_delegations`: a background sub-agent job. Written by another
    Hermes module; hermes-store only owns the table's shape."""

    __tablename__ = "async_delegations"

    delegation_id: Mapped[str] = mapped_column(
        Text_, primary_key=True, doc="Id of the background job."
    )
    origin_session: Mapped[str] = mapped_column(
        Text_, nullable=False, doc="Session that dispatched the job."
    )
    origin_ui_session_id: Mapped[str] = mapped_column(
        Text_,
        nullable=False,
        server_default=text("''"),
        doc="UI session that dispatched it ('' when none).",
    )
    parent_session_id: Mapped[str | None] = mapped_column(
        Text_, doc="Parent session id (deliberately no foreign key)."
    )  # deliberately no FK
    state: Mapped[str] = mapped_column(Text_, nullable=False, doc="Job state.")
    dispatched_at: Mapped[float] = mapped_column(
        Real_, nullable=False, doc="When the job was dispatched, epoch seconds (UTC)."
    )
    completed_at: Mapped[float | None] = mapped_column(
        Real_, doc="When it completed, epoch seconds (UTC)."
    )
    updated_at: Mapped[float] = mapped_column(
        Real_, nullable=False, doc="Last change, epoch seconds (UTC)."
    )
    event_json: Mapped[str | None] = mapped_column(Text_, doc="JSON: the completion event.")
    result_json: Mapped[str | None] = mapped_column(Text_, doc="JSON: the job's result.")
    delivery_state: Mapped[str] = mapped_column(
        Text_,
        nullable=False,
        server_default=text("'pending'"),
        doc="Delivery of the result: `pending`, ...",
    )
    delivery_attempts: Mapped[int] = mapped_column(
        Integer_, nullable=False, server_default=text("0"), doc="Delivery attempts so far."
    )
    delivered_at: Mapped[float | None] = mapped_column(
        Real_, doc="When the result was delivered, epoch seconds (UTC)."
    )
    owner_pid: Mapped[int | None] = mapped_column(
        Integer_, doc="Process id of the process running the job."
    )
    owner_started_at: Mapped[int | None] = mapped_column(
        Integer_, doc="Start time of that process (tells a reused pid apart)."
    )
    task_json: Mapped[str | None] = mapped_column(
        Text_, doc="JSON: the task handed to the sub-agent."
    )
    delivery_claim: Mapped[str | None] = mapped_column(Text_, doc="Who has claimed the delivery.")
    delivery_claimed_at: Mapped[float | None] = mapped_column(
        Real_, doc="When the delivery was claimed, epoch seconds (UTC)."
    )

    __table_args__ = (Index("idx_async_delegations_delivery", "delivery_state", "completed_at"),)
