"""`session_model_usage`: token and cost deltas per session x model x route x task."""

from __future__ import annotations

from typing import TYPE_CHECKING

from sqlalchemy import ForeignKey, Index, text
from sqlalchemy.orm import Mapped, mapped_column, relationship

from .base import Base, Integer_, Real_, Text_

if TYPE_CHECKING:
    from .sessions import Session

EMPTY = text("''")
ZERO = text("0")


class SessionModelUsage(Base):
    __tablename__ = "session_model_usage"

    session_id: Mapped[str] = mapped_column(
        Text_, ForeignKey("sessions.id", ondelete="CASCADE"), primary_key=True
    )
    model: Mapped[str] = mapped_column(Text_, primary_key=True)
    billing_provider: Mapped[str] = mapped_column(Text_, primary_key=True, server_default=EMPTY)
    billing_base_url: Mapped[str] = mapped_column(Text_, primary_key=True, server_default=EMPTY)
    billing_mode: Mapped[str] = mapped_column(Text_, primary_key=True, server_default=EMPTY)
    task: Mapped[str] = mapped_column(Text_, primary_key=True, server_default=EMPTY)
    api_call_count: Mapped[int] = mapped_column(Integer_, nullable=False, server_default=ZERO)
    input_tokens: Mapped[int] = mapped_column(Integer_, nullable=False, server_default=ZERO)
    output_tokens: Mapped[int] = mapped_column(Integer_, nullable=False, server_default=ZERO)
    cache_read_tokens: Mapped[int] = mapped_column(Integer_, nullable=False, server_default=ZERO)
    cache_write_tokens: Mapped[int] = mapped_column(Integer_, nullable=False, server_default=ZERO)
    reasoning_tokens: Mapped[int] = mapped_column(Integer_, nullable=False, server_default=ZERO)
    estimated_cost_usd: Mapped[float] = mapped_column(Real_, nullable=False, server_default=ZERO)
    actual_cost_usd: Mapped[float] = mapped_column(Real_, nullable=False, server_default=ZERO)
    cost_status: Mapped[str | None] = mapped_column(Text_)
    cost_source: Mapped[str | None] = mapped_column(Text_)
    first_seen: Mapped[float | None] = mapped_column(Real_)
    last_seen: Mapped[float | None] = mapped_column(Real_)

    session: Mapped[Session] = relationship(back_populates="usage", lazy="raise")

    __table_args__ = (
        Index("idx_session_model_usage_session", "session_id"),
        Index("idx_session_model_usage_model", "model"),
    )
