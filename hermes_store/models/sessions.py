"""`sessions`: one row per conversation segment (docs/reference/schema.md 2.2)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from sqlalchemy import ForeignKey, Index, text
from sqlalchemy.orm import Mapped, mapped_column, relationship

from .base import Base, Integer_, Real_, Text_

if TYPE_CHECKING:
    from .messages import Message
    from .usage import SessionModelUsage

ZERO = text("0")


class HermesSession(Base):
    """A row of `sessions`: one conversation segment (a compressed conversation is a chain
    of them, root to live tip, linked by `parent_session_id`), with its running token and
    cost totals. Named HermesSession so that it never shadows `sqlalchemy.orm.Session`;
    `hermes_store.models.Session` is the same class."""

    __tablename__ = "sessions"

    id: Mapped[str] = mapped_column(
        Text_,
        primary_key=True,
        doc="Id chosen by the application (`20260301_091500_a1b2c3`, `cron_<job>_<ts>`).",
    )
    source: Mapped[str] = mapped_column(
        Text_,
        nullable=False,
        doc="Platform: `cli`, `telegram`, `cron`, `subagent`, ...; `unknown` if accounting made it",
    )
    user_id: Mapped[str | None] = mapped_column(Text_, doc="Gateway sender / principal.")
    session_key: Mapped[str | None] = mapped_column(
        Text_, doc="Deterministic gateway routing key (`agent:main:telegram:dm:<id>`)."
    )
    chat_id: Mapped[str | None] = mapped_column(Text_, doc="Gateway origin chat.")
    chat_type: Mapped[str | None] = mapped_column(Text_, doc="Gateway chat type, e.g. `dm`.")
    thread_id: Mapped[str | None] = mapped_column(Text_, doc="Gateway thread.")
    display_name: Mapped[str | None] = mapped_column(Text_, doc="Gateway presentation name.")
    origin_json: Mapped[str | None] = mapped_column(Text_, doc="JSON object: the gateway origin.")
    expiry_finalized: Mapped[int | None] = mapped_column(
        Integer_, server_default=ZERO, doc="0/1: the gateway has finalised this session's expiry."
    )
    model: Mapped[str | None] = mapped_column(Text_, doc="Model slug of the main agent loop.")
    model_config: Mapped[str | None] = mapped_column(
        Text_, doc="JSON object; may carry lineage markers (`_delegate_from`, `_branched_from`)."
    )
    system_prompt: Mapped[str | None] = mapped_column(
        Text_, doc="Snapshot of the assembled system prompt; NULL after a model or route switch."
    )
    parent_session_id: Mapped[str | None] = mapped_column(
        Text_,
        ForeignKey("sessions.id"),
        doc="The session this continues: after a compression, a `/branch` or a delegation.",
    )
    started_at: Mapped[float] = mapped_column(
        Real_, nullable=False, doc="Start, epoch seconds (UTC)."
    )
    ended_at: Mapped[float | None] = mapped_column(
        Real_, doc="End, epoch seconds (UTC); NULL while the session is open."
    )
    end_reason: Mapped[str | None] = mapped_column(
        Text_, doc="Why it ended (first reason wins): `user_exit`, `compression`, `branched`, ..."
    )
    message_count: Mapped[int | None] = mapped_column(
        Integer_,
        server_default=ZERO,
        doc="Messages appended, counted by the application (no trigger).",
    )
    tool_call_count: Mapped[int | None] = mapped_column(
        Integer_, server_default=ZERO, doc="Tool calls made, counted by the application."
    )
    input_tokens: Mapped[int | None] = mapped_column(
        Integer_, server_default=ZERO, doc="Input tokens of the main loop, summed over models."
    )
    output_tokens: Mapped[int | None] = mapped_column(
        Integer_, server_default=ZERO, doc="Output tokens of the main loop, summed over models."
    )
    cache_read_tokens: Mapped[int | None] = mapped_column(
        Integer_, server_default=ZERO, doc="Prompt-cache read tokens of the main loop."
    )
    cache_write_tokens: Mapped[int | None] = mapped_column(
        Integer_, server_default=ZERO, doc="Prompt-cache write tokens of the main loop."
    )
    reasoning_tokens: Mapped[int | None] = mapped_column(
        Integer_, server_default=ZERO, doc="Reasoning tokens of the main loop."
    )
    cwd: Mapped[str | None] = mapped_column(Text_, doc="Working directory the session ran in.")
    git_branch: Mapped[str | None] = mapped_column(
        Text_, doc="Git branch of the working directory."
    )
    git_repo_root: Mapped[str | None] = mapped_column(
        Text_, doc="Git repository root of the working directory."
    )
    billing_provider: Mapped[str | None] = mapped_column(
        Text_, doc="Billing provider of the latest usage."
    )
    billing_base_url: Mapped[str | None] = mapped_column(
        Text_, doc="API base URL of the latest usage."
    )
    billing_mode: Mapped[str | None] = mapped_column(Text_, doc="Billing mode of the latest usage.")
    estimated_cost_usd: Mapped[float | None] = mapped_column(
        Real_, doc="Estimated cost in USD of the main loop."
    )
    actual_cost_usd: Mapped[float | None] = mapped_column(
        Real_, doc="Cost in USD as the provider reported it, when it did."
    )
    cost_status: Mapped[str | None] = mapped_column(
        Text_, doc="How the cost is known, e.g. `estimated`."
    )
    cost_source: Mapped[str | None] = mapped_column(
        Text_, doc="Where the cost came from, e.g. `pricing_table`."
    )
    pricing_version: Mapped[str | None] = mapped_column(
        Text_, doc="Version of the pricing table behind the estimate."
    )
    title: Mapped[str | None] = mapped_column(
        Text_, doc="Title; unique among non-NULL titles, at most 100 characters."
    )
    api_call_count: Mapped[int | None] = mapped_column(
        Integer_, server_default=ZERO, doc="API calls of the main loop."
    )
    handoff_state: Mapped[str | None] = mapped_column(
        Text_, doc="Gateway handoff: NULL, `pending`, `running`, `completed` or `failed`."
    )
    handoff_platform: Mapped[str | None] = mapped_column(
        Text_, doc="Platform the session is handed off to."
    )
    handoff_error: Mapped[str | None] = mapped_column(
        Text_, doc="Why the handoff failed (at most 500 characters)."
    )
    compression_failure_cooldown_until: Mapped[float | None] = mapped_column(
        Real_, doc="No compression is tried before this time, epoch seconds."
    )
    compression_failure_error: Mapped[str | None] = mapped_column(
        Text_, doc="Error of the last failed compression."
    )
    compression_fallback_streak: Mapped[int] = mapped_column(
        Integer_, nullable=False, server_default=ZERO, doc="Compressions in a row that fell back."
    )
    compression_ineffective_count: Mapped[int] = mapped_column(
        Integer_,
        nullable=False,
        server_default=ZERO,
        doc="Compressions that did not shrink the context enough.",
    )
    profile_name: Mapped[str | None] = mapped_column(Text_, doc="Hermes profile that owns the row.")
    rewind_count: Mapped[int] = mapped_column(
        Integer_,
        nullable=False,
        server_default=ZERO,
        doc="Rewinds so far (each hides messages: `active = 0, compacted = 0`).",
    )
    archived: Mapped[int] = mapped_column(
        Integer_, nullable=False, server_default=ZERO, doc="0/1: hidden from listings (soft hide)."
    )
    pinned: Mapped[int] = mapped_column(
        Integer_,
        nullable=False,
        server_default=ZERO,
        doc="0/1 keep flag (listings can add pinned rows beyond their page).",
    )

    # lazy="raise": loading a transcript or a lineage is always an explicit decision
    # (selectinload / a repository query), never an accidental N+1.
    messages: Mapped[list[Message]] = relationship(
        back_populates="session",
        lazy="raise",
        order_by="Message.id",
        doc="The transcript, every row (rewound and archived ones too), in id order.",
    )
    parent: Mapped[HermesSession | None] = relationship(
        remote_side=[id], back_populates="children", lazy="raise", doc="The parent_session_id row."
    )
    children: Mapped[list[HermesSession]] = relationship(
        back_populates="parent", lazy="raise", doc="Sessions whose parent this is."
    )
    usage: Mapped[list[SessionModelUsage]] = relationship(
        back_populates="session",
        lazy="raise",
        passive_deletes=True,
        doc="Per model x route x task usage rows of this session.",
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


#: The name the repositories and existing code use; HermesSession in new code.
Session = HermesSession

# Indexes with a DESC column need the Column object, so they follow the class.
Index("idx_sessions_started", HermesSession.started_at.desc())
Index("idx_sessions_session_key", HermesSession.session_key, HermesSession.started_at.desc())
Index(
    "idx_sessions_gateway_peer",
    HermesSession.source,
    HermesSession.user_id,
    HermesSession.chat_id,
    HermesSession.chat_type,
    HermesSession.thread_id,
    HermesSession.started_at.desc(),
)
