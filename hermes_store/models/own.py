"""hermes-store's own tables (`hermes_store_*`): what the project adds beyond the upstream
v23 schema, created by its own revisions (hs0001, ...). The original ignores them; the
reference-schema comparison leaves them out; `check` compares them with these models."""

from __future__ import annotations

from sqlalchemy import ForeignKey
from sqlalchemy.orm import Mapped, mapped_column

from ..contract import IDEMPOTENCY_TABLE
from .base import Base, Real_, Text_


class IdempotencyKey(Base):
    """A row of `hermes_store_idempotency_keys`: an append made with an idempotency key
    and the ids it stored, so that a retry with the same key returns them instead of
    storing the messages again. The row goes with its session."""

    __tablename__ = IDEMPOTENCY_TABLE

    session_id: Mapped[str] = mapped_column(
        Text_,
        ForeignKey("sessions.id", ondelete="CASCADE"),
        primary_key=True,
        doc="The session appended to (sessions.id); its keys go when it is deleted.",
    )
    key: Mapped[str] = mapped_column(
        Text_, primary_key=True, doc="The caller's idempotency key, unique per session."
    )
    message_ids: Mapped[str] = mapped_column(
        Text_,
        nullable=False,
        doc="The ids the first call stored, in order, as a JSON array of integers.",
    )
    created_at: Mapped[float] = mapped_column(
        Real_, nullable=False, doc="When the first call stored them, epoch seconds (UTC)."
    )
