"""`messages`: the transcript, one row per message; `id` is the insertion order."""

from __future__ import annotations

from typing import TYPE_CHECKING

from sqlalchemy import ForeignKey, Index, text
from sqlalchemy.orm import Mapped, mapped_column, relationship

from .base import Base, Integer_, Real_, Text_

if TYPE_CHECKING:
    from .sessions import Session


class Message(Base):
    __tablename__ = "messages"

    # INTEGER PRIMARY KEY AUTOINCREMENT: a rowid alias whose ids are never reused, which
    # the FTS markers and "transcript order = id order" rely on.
    id: Mapped[int] = mapped_column(Integer_, primary_key=True, autoincrement=True)
    session_id: Mapped[str] = mapped_column(Text_, ForeignKey("sessions.id"), nullable=False)
    role: Mapped[str] = mapped_column(Text_, nullable=False)
    content: Mapped[str | None] = mapped_column(Text_)
    tool_call_id: Mapped[str | None] = mapped_column(Text_)
    tool_calls: Mapped[str | None] = mapped_column(Text_)
    tool_name: Mapped[str | None] = mapped_column(Text_)
    effect_disposition: Mapped[str | None] = mapped_column(Text_)
    timestamp: Mapped[float] = mapped_column(Real_, nullable=False)
    token_count: Mapped[int | None] = mapped_column(Integer_)
    finish_reason: Mapped[str | None] = mapped_column(Text_)
    reasoning: Mapped[str | None] = mapped_column(Text_)
    reasoning_content: Mapped[str | None] = mapped_column(Text_)
    reasoning_details: Mapped[str | None] = mapped_column(Text_)
    codex_reasoning_items: Mapped[str | None] = mapped_column(Text_)
    codex_message_items: Mapped[str | None] = mapped_column(Text_)
    platform_message_id: Mapped[str | None] = mapped_column(Text_)
    observed: Mapped[int | None] = mapped_column(Integer_, server_default=text("0"))
    active: Mapped[int] = mapped_column(Integer_, nullable=False, server_default=text("1"))
    compacted: Mapped[int] = mapped_column(Integer_, nullable=False, server_default=text("0"))
    api_content: Mapped[str | None] = mapped_column(Text_)
    display_kind: Mapped[str | None] = mapped_column(Text_)
    display_metadata: Mapped[str | None] = mapped_column(Text_)

    session: Mapped[Session] = relationship(back_populates="messages", lazy="raise")

    __table_args__ = (
        Index("idx_messages_session", "session_id", "timestamp"),
        Index(
            "idx_messages_platform_msg_id",
            "session_id",
            "platform_message_id",
            sqlite_where=text("platform_message_id IS NOT NULL"),
            postgresql_where=text("platform_message_id IS NOT NULL"),
        ),
        Index("idx_messages_session_active", "session_id", "active", "timestamp"),
        Index(
            "idx_messages_active_null",
            "active",
            sqlite_where=text("active IS NULL"),
            postgresql_where=text("active IS NULL"),
        ),
        {"sqlite_autoincrement": True},
    )
