"""`sessions`: one row per conversation segment."""

from __future__ import annotations

from typing import TYPE_CHECKING

from sqlalchemy import ForeignKey, Index, text
from sqlalchemy.orm import Mapped, mapped_column, relationship

from .base import Base, Integer_, Real_, Text_

if TYPE_CHECKING:
    from .messages import Message
    from .usage import SessionModelUsage

ZERO = text("0")


class Session(Base):
    __tablename__ = "sessions"

    id: Mapped[str] = mapped_column(Text_, primary_key=True)
    source: Mapped[str] = mapped_column(Text_, nullable=False)
    user_id: Mapped[str | None] = mapped_column(Text_)
    session_key: Mapped[str | None] = mapped_column(Text_)
    chat_id: Mapped[str | None] = mapped_column(Text_)
    chat_type: Mapped[str | None] = mapped_column(Text_)
    thread_id: Mapped[str | None] = mapped_column(Text_)
    display_name: Mapped[str | None] = mapped_column(Text_)
    origin_json: Mapped[str | None] = mapped_column(Text_)
    expiry_finalized: Mapped[int | None] = mapped_column(Integer_, server_default=ZERO)
    model: Mapped[str | None] = mapped_column(Text_)
    model_config: Mapped[str | None] = mapped_column(Text_)
    system_prompt: Mapped[str | None] = mapped_column(Text_)
    parent_session_id: Mapped[str | None] = mapped_column(Text_, ForeignKey("sessions.id"))
    started_at: Mapped[float] = mapped_column(Real_, nullable=False)
    ended_at: Mapped[float | None] = mapped_column(Real_)
    end_reason: Mapped[str | None] = mapped_column(Text_)
    message_count: Mapped[int | None] = mapped_column(Integer_, server_default=ZERO)
    tool_call_count: Mapped[int | None] = mapped_column(Integer_, server_default=ZERO)
    input_tokens: Mapped[int | None] = mapped_column(Integer_, server_default=ZERO)
    output_tokens: Mapped[int | None] = mapped_column(Integer_, server_default=ZERO)
    cache_read_tokens: Mapped[int | None] = mapped_column(Integer_, server_default=ZERO)
    cache_write_tokens: Mapped[int | None] = mapped_column(Integer_, server_default=ZERO)
    reasoning_tokens: Mapped[int | None] = mapped_column(Integer_, server_default=ZERO)
    cwd: Mapped[str | None] = mapped_column(Text_)
    git_branch: Mapped[str | None] = mapped_column(Text_)
    git_repo_root: Mapped[str | None] = mapped_column(Text_)
    billing_provider: Mapped[str | None] = mapped_column(Text_)
    billing_base_url: Mapped[str | None] = mapped_column(Text_)
    billing_mode: Mapped[str | None] = mapped_column(Text_)
    estimated_cost_usd: Mapped[float | None] = mapped_column(Real_)
    actual_cost_usd: Mapped[float | None] = mapped_column(Real_)
    cost_status: Mapped[str | None] = mapped_column(Text_)
    cost_source: Mapped[str | None] = mapped_column(Text_)
    pricing_version: Mapped[str | None] = mapped_column(Text_)
    title: Mapped[str | None] = mapped_column(Text_)
    api_call_count: Mapped[int | None] = mapped_column(Integer_, server_default=ZERO)
    handoff_state: Mapped[str | None] = mapped_column(Text_)
    handoff_platform: Mapped[str | None] = mapped_column(Text_)
    handoff_error: Mapped[str | None] = mapped_column(Text_)
    compression_failure_cooldown_until: Mapped[float | None] = mapped_column(Real_)
    compression_failure_error: Mapped[str | None] = mapped_column(Text_)
    compression_fallback_streak: Mapped[int] = mapped_column(
        Integer_, nullable=False, server_default=ZERO
    )
    compression_ineffective_count: Mapped[int] = mapped_column(
        Integer_, nullable=False, server_default=ZERO
    )
    profile_name: Mapped[str | None] = mapped_column(Text_)
    rewind_count: Mapped[int] = mapped_column(Integer_, nullable=False, server_default=ZERO)
    archived: Mapped[int] = mapped_column(Integer_, nullable=False, server_default=ZERO)
    pinned: Mapped[int] = mapped_column(Integer_, nullable=False, server_default=ZERO)

    # lazy="raise": loading a transcript or a lineage is always an explicit decision
    # (selectinload / a repository query), never an accidental N+1.
    messages: Mapped[list[Message]] = relationship(
        back_populates="session", lazy="raise", order_by="Message.id"
    )
    parent: Mapped[Session | None] = relationship(
        remote_side=[id], back_populates="children", lazy="raise"
    )
    children: Mapped[list[Session]] = relationship(back_populates="parent", lazy="raise")
    usage: Mapped[list[SessionModelUsage]] = relationship(
        back_populates="session", lazy="raise", passive_deletes=True
    )

    __table_args__ = (
        Index("idx_sessions_source", "source"),
        Index("idx_sessions_source_id", "source", "id"),
        Index("idx_sessions_parent", "parent_session_id"),
        Index("idx_sessions_handoff_state", "handoff_state", "started_at"),
        Index(
            "idx_sessions_title_unique",
            "title",
            unique=True,
            sqlite_where=text("title IS NOT NULL"),
            postgresql_where=text("title IS NOT NULL"),
        ),
    )


# Indexes with a DESC column need the Column object, so they follow the class.
Index("idx_sessions_started", Session.started_at.desc())
Index("idx_sessions_session_key", Session.session_key, Session.started_at.desc())
Index(
    "idx_sessions_gateway_peer",
    Session.source,
    Session.user_id,
    Session.chat_id,
    Session.chat_type,
    Session.thread_id,
    Session.started_at.desc(),
)
