"""`messages`: the transcript, one row per message; `id` is the insertion order
(docs/reference/schema.md 2.3)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from sqlalchemy import ForeignKey, Index, text
from sqlalchemy.orm import Mapped, mapped_column, relationship

from .base import Base, Integer_, Real_, Text_

if TYPE_CHECKING:
    from .sessions import HermesSession


class Message(Base):
    """A row of `messages`: one message of a transcript. Live rows have `active = 1`;
    rewound ones `active = 0, compacted = 0` (hidden); rows archived by compaction
    `active = 0, compacted = 1` (still searchable)."""

    __tablename__ = "messages"

    # INTEGER PRIMARY KEY AUTOINCREMENT: a rowid alias whose ids are never reused, which
    # the FTS markers and "transcript order = id order" rely on.
    id: Mapped[int] = mapped_column(
        Integer_,
        primary_key=True,
        autoincrement=True,
        doc="Insertion order, never reused; every transcript read orders by it.",
    )
    session_id: Mapped[str] = mapped_column(
        Text_,
        ForeignKey("sessions.id"),
        nullable=False,
        doc="The session (sessions.id) the message belongs to.",
    )
    role: Mapped[str] = mapped_column(
        Text_,
        nullable=False,
        doc="`user`, `assistant`, `tool` or `system` (`unknown` when an import lacked one).",
    )
    content: Mapped[str | None] = mapped_column(
        Text_, doc="Text, or `\\x00json:` followed by JSON for list/dict (multimodal) content."
    )
    tool_call_id: Mapped[str | None] = mapped_column(
        Text_, doc="Id of the tool call a `tool` row answers."
    )
    tool_calls: Mapped[str | None] = mapped_column(
        Text_, doc="JSON list of the calls an assistant message made (OpenAI shape); NULL if none."
    )
    tool_name: Mapped[str | None] = mapped_column(
        Text_, doc="Name of the tool a `tool` row holds the result of."
    )
    effect_disposition: Mapped[str | None] = mapped_column(
        Text_, doc="What became of the tool call's side effects."
    )
    timestamp: Mapped[float] = mapped_column(
        Real_,
        nullable=False,
        doc="Wall-clock time, epoch seconds (UTC); not monotonic, never order by it.",
    )
    token_count: Mapped[int | None] = mapped_column(
        Integer_, doc="Tokens of this message, when the writer knew them."
    )
    finish_reason: Mapped[str | None] = mapped_column(
        Text_, doc="The provider's finish reason (`stop`, `tool_calls`, ...)."
    )
    reasoning: Mapped[str | None] = mapped_column(
        Text_, doc="Reasoning text shown with the message."
    )
    reasoning_content: Mapped[str | None] = mapped_column(
        Text_, doc="Provider reasoning content; an empty string is meaningful and kept."
    )
    reasoning_details: Mapped[str | None] = mapped_column(
        Text_, doc="JSON: provider reasoning details."
    )
    codex_reasoning_items: Mapped[str | None] = mapped_column(
        Text_, doc="JSON: Codex reasoning items."
    )
    codex_message_items: Mapped[str | None] = mapped_column(Text_, doc="JSON: Codex message items.")
    platform_message_id: Mapped[str | None] = mapped_column(
        Text_, doc="The message's id on the external platform (Telegram, Discord, ...)."
    )
    observed: Mapped[int | None] = mapped_column(
        Integer_,
        server_default=text("0"),
        doc="0/1: the message was observed rather than exchanged.",
    )
    active: Mapped[int] = mapped_column(
        Integer_,
        nullable=False,
        server_default=text("1"),
        doc="1 = in the live transcript; 0 = rewound (compacted 0) or archived (compacted 1).",
    )
    compacted: Mapped[int] = mapped_column(
        Integer_,
        nullable=False,
        server_default=text("0"),
        doc="1 = archived by in-place compaction (still searchable).",
    )
    api_content: Mapped[str | None] = mapped_column(
        Text_, doc="The exact string sent to the provider, when it differed from content."
    )
    display_kind: Mapped[str | None] = mapped_column(
        Text_, doc="Presentation tag (`hidden`, `model_switch`, ...)."
    )
    display_metadata: Mapped[str | None] = mapped_column(
        Text_, doc="JSON object for the presentation."
    )

    session: Mapped[HermesSession] = relationship(
        back_populates="messages", lazy="raise", doc="The session row."
    )

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
