"""hermes-store's own tables (`hermes_store_*`): what the project adds beyond the upstream
v23 schema, created by its own revisions (hs0001, ...). The original ignores them; the
reference-schema comparison leaves them out; `check` compares them with these models."""

from __future__ import annotations

from sqlalchemy import ForeignKey, Index
from sqlalchemy.orm import Mapped, mapped_column

from ..contract import (
    ACTIVITY_INDEX,
    ACTIVITY_TABLE,
    ADK_APP_STATES_TABLE,
    ADK_SESSIONS_TABLE,
    ADK_USER_STATES_TABLE,
    CHANGES_TABLE,
    FEED_STATE_TABLE,
    IDEMPOTENCY_TABLE,
    TAGS_TABLE,
    TAGS_TAG_INDEX,
    TRASH_EXPIRES_INDEX,
    TRASH_ROWS_TABLE,
    TRASH_SESSION_INDEX,
    TRASH_TABLE,
    TURNS_TABLE,
    TURNS_TTL_COLUMN,
)
from .base import Base, Integer_, Real_, Text_


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


class ChangeRecord(Base):
    """A row of `hermes_store_changes`: one change to a session, a message or a session's
    usage, written by triggers (also for the original Hermes code's writes) at the
    position that orders it among all changes by commit."""

    __tablename__ = CHANGES_TABLE

    position: Mapped[int] = mapped_column(
        Integer_,
        primary_key=True,
        autoincrement=False,
        doc="The change's place in commit order; a reader's cursor is the last one it saw.",
    )
    kind: Mapped[str] = mapped_column(
        Text_,
        nullable=False,
        doc="What happened: session.created/updated/deleted, message.appended/updated/"
        "deleted, usage.updated.",
    )
    session_id: Mapped[str] = mapped_column(
        Text_, nullable=False, doc="The session changed, or the one the message belongs to."
    )
    message_id: Mapped[int | None] = mapped_column(
        Integer_, doc="messages.id for the message.* kinds, NULL otherwise."
    )
    at: Mapped[float] = mapped_column(
        Real_, nullable=False, doc="When the change was made, epoch seconds (UTC)."
    )


class FeedState(Base):
    """A row of `hermes_store_feed_state`: one of the feed's counters (the last position
    handed out, the position through which changes were trimmed, how many to keep)."""

    __tablename__ = FEED_STATE_TABLE

    name: Mapped[str] = mapped_column(Text_, primary_key=True, doc="The counter's name.")
    value: Mapped[int] = mapped_column(Integer_, nullable=False, doc="Its value.")


class TurnLease(Base):
    """A row of `hermes_store_turns`: who holds a session's turn, until when, and the
    fencing token of the last grant; writes made with an older token are refused."""

    __tablename__ = TURNS_TABLE

    session_id: Mapped[str] = mapped_column(
        Text_, primary_key=True, doc="The session the turn is for (no foreign key)."
    )
    holder: Mapped[str | None] = mapped_column(Text_, doc="Who holds the turn; NULL once released.")
    token: Mapped[int] = mapped_column(
        Integer_, nullable=False, doc="The fencing token of the last grant; grows by one per grant."
    )
    expires_at: Mapped[float] = mapped_column(
        Real_, nullable=False, doc="When the lease lapses, epoch seconds (UTC)."
    )
    ttl: Mapped[float | None] = mapped_column(
        Real_,
        name=TURNS_TTL_COLUMN,
        doc="The seconds the last grant or renewal asked for: the lease is never judged to "
        "last longer than that from when it is read (NULL: leases from before hs0006).",
    )


class SessionActivity(Base):
    """A row of `hermes_store_session_activity`: a session's last activity, kept by
    triggers on sessions and messages (also for the original Hermes code's writes), so a
    listing by last activity walks the most recent sessions first."""

    __tablename__ = ACTIVITY_TABLE
    __table_args__ = (Index(ACTIVITY_INDEX, "last_active"),)

    session_id: Mapped[str] = mapped_column(
        Text_, primary_key=True, doc="The session (sessions.id; no foreign key)."
    )
    last_active: Mapped[float] = mapped_column(
        Real_,
        nullable=False,
        doc="Its newest message's timestamp, else when it started, epoch seconds (UTC).",
    )


class SessionTag(Base):
    """A row of `hermes_store_session_tags`: one tag of one session. The row goes with
    its session (ON DELETE CASCADE); a trashed session keeps its tags in the trash."""

    __tablename__ = TAGS_TABLE
    __table_args__ = (Index(TAGS_TAG_INDEX, "tag", "session_id"),)

    session_id: Mapped[str] = mapped_column(
        Text_,
        ForeignKey("sessions.id", ondelete="CASCADE"),
        primary_key=True,
        doc="The tagged session (sessions.id); its tags go when it is deleted.",
    )
    tag: Mapped[str] = mapped_column(
        Text_, primary_key=True, doc="The tag, as given (trimmed), unique per session."
    )


class TrashedTree(Base):
    """A row of `hermes_store_trash`: a session moved out of the live tables with its
    descendants, until it is restored or its time in the trash is over."""

    __tablename__ = TRASH_TABLE
    __table_args__ = (
        Index(TRASH_EXPIRES_INDEX, "expires_at"),
        Index(TRASH_SESSION_INDEX, "session_id"),
    )

    id: Mapped[str] = mapped_column(
        Text_, primary_key=True, doc="The entry's id (a random hex string)."
    )
    session_id: Mapped[str] = mapped_column(
        Text_, nullable=False, doc="The trashed session (the root of the trashed tree)."
    )
    title: Mapped[str | None] = mapped_column(Text_, doc="Its title when it was trashed.")
    source: Mapped[str | None] = mapped_column(Text_, doc="Its source when it was trashed.")
    sessions: Mapped[int] = mapped_column(
        Integer_, nullable=False, doc="How many sessions the entry holds (it and its descendants)."
    )
    messages: Mapped[int] = mapped_column(
        Integer_, nullable=False, doc="How many message rows the entry holds."
    )
    trashed_at: Mapped[float] = mapped_column(
        Real_, nullable=False, doc="When it was trashed, epoch seconds (UTC)."
    )
    expires_at: Mapped[float] = mapped_column(
        Real_, nullable=False, doc="When a prune may empty it, epoch seconds (UTC)."
    )


class TrashedRow(Base):
    """A row of `hermes_store_trash_rows`: one trashed row of a v23 or own table, as a
    JSON object of its columns, in the order a restore inserts it."""

    __tablename__ = TRASH_ROWS_TABLE

    trash_id: Mapped[str] = mapped_column(
        Text_,
        ForeignKey(f"{TRASH_TABLE}.id", ondelete="CASCADE"),
        primary_key=True,
        doc="The trash entry (hermes_store_trash.id) the row belongs to.",
    )
    seq: Mapped[int] = mapped_column(
        Integer_, primary_key=True, autoincrement=False, doc="Its place in the restore order."
    )
    table_name: Mapped[str] = mapped_column(Text_, nullable=False, doc="The table it came from.")
    data: Mapped[str] = mapped_column(
        Text_, nullable=False, doc="The row's columns as a JSON object (bytes tagged)."
    )


class AdkSession(Base):
    """A row of `hermes_store_adk_sessions`: a Google ADK session (hermes_store.integrations.adk),
    keyed as ADK keys it, whose events are the messages of one hermes-store session."""

    __tablename__ = ADK_SESSIONS_TABLE

    app_name: Mapped[str] = mapped_column(
        Text_, primary_key=True, doc="The ADK app the session belongs to."
    )
    user_id: Mapped[str] = mapped_column(
        Text_, primary_key=True, doc="The ADK user the session belongs to."
    )
    id: Mapped[str] = mapped_column(
        Text_, primary_key=True, doc="The ADK session id, unique per app and user."
    )
    session_id: Mapped[str] = mapped_column(
        Text_,
        ForeignKey("sessions.id", ondelete="CASCADE"),
        nullable=False,
        unique=True,
        doc="The hermes-store session (sessions.id) whose messages are the events; the "
        "row goes with it.",
    )
    state: Mapped[str] = mapped_column(
        Text_,
        nullable=False,
        doc="The session-scoped state (keys without a prefix), a JSON object.",
    )
    created_at: Mapped[float] = mapped_column(
        Real_, nullable=False, doc="When the session was created, epoch seconds (UTC)."
    )
    updated_at: Mapped[float] = mapped_column(
        Real_,
        nullable=False,
        doc="ADK's last_update_time: the timestamp of the last event appended, else "
        "created_at, epoch seconds.",
    )
    revision: Mapped[int] = mapped_column(
        Integer_,
        nullable=False,
        doc="Grows by one with every event appended; a Session object read at an older "
        "revision is stale.",
    )


class AdkAppState(Base):
    """A row of `hermes_store_adk_app_states`: the state every session of an ADK app
    shares (its `app:` keys, stored without the prefix)."""

    __tablename__ = ADK_APP_STATES_TABLE

    app_name: Mapped[str] = mapped_column(Text_, primary_key=True, doc="The ADK app.")
    state: Mapped[str] = mapped_column(
        Text_, nullable=False, doc="The app-scoped state, a JSON object."
    )
    updated_at: Mapped[float] = mapped_column(
        Real_, nullable=False, doc="When it last changed, epoch seconds (UTC)."
    )


class AdkUserState(Base):
    """A row of `hermes_store_adk_user_states`: the state a user's sessions of an ADK
    app share (its `user:` keys, stored without the prefix)."""

    __tablename__ = ADK_USER_STATES_TABLE

    app_name: Mapped[str] = mapped_column(Text_, primary_key=True, doc="The ADK app.")
    user_id: Mapped[str] = mapped_column(Text_, primary_key=True, doc="The ADK user.")
    state: Mapped[str] = mapped_column(
        Text_, nullable=False, doc="The user-scoped state, a JSON object."
    )
    updated_at: Mapped[float] = mapped_column(
        Real_, nullable=False, doc="When it last changed, epoch seconds (UTC)."
    )
