"""`session_model_usage`: token and cost deltas per session x model x route x task
(docs/reference/schema.md 2.4)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from sqlalchemy import ForeignKey, Index, text
from sqlalchemy.orm import Mapped, mapped_column, relationship

from .base import Base, Integer_, Real_, Text_

if TYPE_CHECKING:
    from .sessions import HermesSession

EMPTY = text("''")
ZERO = text("0")


class SessionModelUsage(Base):
    """A row of `session_model_usage`: the tokens and cost one session spent on one model
    through one billing route for one task, summed over the deltas the writers upserted.
    Auxiliary tasks are counted here only, not in the session's totals."""

    __tablename__ = "session_model_usage"

    session_id: Mapped[str] = mapped_column(
        Text_,
        ForeignKey("sessions.id", ondelete="CASCADE"),
        primary_key=True,
        doc="The session (sessions.id); its usage rows go when it is deleted.",
    )
    model: Mapped[str] = mapped_column(
        Text_, primary_key=True, doc="Model slug; `unknown` when not known."
    )
    billing_provider: Mapped[str] = mapped_column(
        Text_, primary_key=True, server_default=EMPTY, doc="Billing provider ('' when none)."
    )
    billing_base_url: Mapped[str] = mapped_column(
        Text_, primary_key=True, server_default=EMPTY, doc="API base URL ('' when none)."
    )
    billing_mode: Mapped[str] = mapped_column(
        Text_, primary_key=True, server_default=EMPTY, doc="Billing mode ('' when none)."
    )
    task: Mapped[str] = mapped_column(
        Text_,
        primary_key=True,
        server_default=EMPTY,
        doc="'' = the main agent loop; else an auxiliary task (`compression`, `vision`, ...).",
    )
    api_call_count: Mapped[int] = mapped_column(
        Integer_, nullable=False, server_default=ZERO, doc="API calls."
    )
    input_tokens: Mapped[int] = mapped_column(
        Integer_, nullable=False, server_default=ZERO, doc="Input tokens."
    )
    output_tokens: Mapped[int] = mapped_column(
        Integer_, nullable=False, server_default=ZERO, doc="Output tokens."
    )
    cache_read_tokens: Mapped[int] = mapped_column(
        Integer_, nullable=False, server_default=ZERO, doc="Prompt-cache read tokens."
    )
    cache_write_tokens: Mapped[int] = mapped_column(
        Integer_, nullable=False, server_default=ZERO, doc="Prompt-cache write tokens."
    )
    reasoning_tokens: Mapped[int] = mapped_column(
        Integer_, nullable=False, server_default=ZERO, doc="Reasoning tokens."
    )
    estimated_cost_usd: Mapped[float] = mapped_column(
        Real_, nullable=False, server_default=ZERO, doc="Estimated cost in USD (0 when unknown)."
    )
    actual_cost_usd: Mapped[float] = mapped_column(
        Real_,
        nullable=False,
        server_default=ZERO,
        doc="Cost in USD as the provider reported it (0 when it did not).",
    )
    cost_status: Mapped[str | None] = mapped_column(
        Text_, doc="How the cost is known, from the latest delta that said."
    )
    cost_source: Mapped[str | None] = mapped_column(
        Text_, doc="Where the cost came from, from the latest delta that said."
    )
    first_seen: Mapped[float | None] = mapped_column(
        Real_, doc="Time of the first delta, epoch seconds (UTC)."
    )
    last_seen: Mapped[float | None] = mapped_column(
        Real_, doc="Time of the latest delta, epoch seconds (UTC)."
    )

    session: Mapped[HermesSession] = relationship(
        back_populates="usage", lazy="raise", doc="The session row."
    )

    __table_args__ = (
        Index("idx_session_model_usage_session", "session_id"),
        Index("idx_session_model_usage_model", "model"),
    )
