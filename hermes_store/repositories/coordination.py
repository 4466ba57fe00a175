"""Tables processes coordinate through: compression leases, the gateway's routing index
and peer identity on sessions, session handoffs, and (read-only) async delegations.

spec/behaviour.md 12 (locks), 13 (gateway), 14 (async delegations).
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from sqlalchemy import (
    Connection,
    RowMapping,
    Select,
    bindparam,
    delete,
    func,
    insert,
    literal_column,
    select,
    text,
    update,
)
from sqlalchemy.exc import DBAPIError

from ..models import AsyncDelegation, CompressionLock, GatewayRouting
from ..models import Session as SessionRow
from ..store import Store
from ._dialect import lock_session, upsert_insert
from ._encoding import now, scrub

log = logging.getLogger(__name__)

DEFAULT_LOCK_TTL = 300.0
HANDOFF_ERROR_MAX = 500
#: Ids per IN-list: below SQLite's historic 999-variable limit with room to spare.
CHUNK = 900

_PID = re.compile(r"(?<![A-Za-z0-9_])pid=(\d+)(?![A-Za-z0-9_])")


def _chunks(items: Sequence[str], size: int = CHUNK) -> Iterable[Sequence[str]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]


def holder_pid(holder: str) -> int | None:
    """The `pid=<n>` of a structured holder string, else None."""
    match = _PID.search(holder or "")
    return int(match.group(1)) if match else None


def holder_is_dead(holder: str) -> bool:
    """True only when the holder names a local process that provably no longer exists.

    Any doubt keeps the lease: no pid, pid 0 or negative (kill would signal a process
    group), this very process, a process owned by someone else (EPERM), any other error,
    and Windows, where os.kill(pid, 0) would terminate the process instead of probing it.
    """
    pid = holder_pid(holder)
    if pid is None or pid <= 0 or pid == os.getpid() or os.name == "nt":
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except OSError:
        return False
    return False


def _row_dict(row: RowMapping) -> dict[str, Any]:
    return {str(k): v for k, v in row.items()}


def _row_dicts(rows: Iterable[RowMapping]) -> list[dict[str, Any]]:
    return [_row_dict(r) for r in rows]


# --------------------------------------------------------------------------- locks


class CompressionLockRepository:
    """Per-session compression leases. A lease is a row with an expiry, not an OS lock:
    a crashed holder blocks others only until its expiry, or until its pid is gone."""

    def __init__(self, store: Store) -> None:
        self.store = store

    def try_acquire(
        self, session_id: str, holder: str, ttl_seconds: float = DEFAULT_LOCK_TTL
    ) -> bool:
        """True iff `holder` owns the lease afterwards (re-acquiring one's own live lease
        is True and does not extend it; use refresh for that)."""
        if not session_id:
            return False

        def work(s: Connection) -> tuple[bool, str | None]:
            # The session's row lock, as appends take it: a lease is not granted while an
            # append to the session is in flight, and an append that starts after this
            # commits sees the lease (PostgreSQL; SQLite's BEGIN IMMEDIATE gives both).
            lock_session(s, session_id)
            conn = s
            ts = now()
            current = conn.execute(
                select(CompressionLock.holder, CompressionLock.expires_at).where(
                    CompressionLock.session_id == session_id
                )
            ).first()
            reclaimed = None
            if current is not None and (current.expires_at < ts or holder_is_dead(current.holder)):
                conn.execute(
                    delete(CompressionLock).where(
                        CompressionLock.session_id == session_id,
                        CompressionLock.holder == current.holder,
                    )
                )
                reclaimed = current.holder
            conn.execute(
                upsert_insert(s, CompressionLock)
                .values(
                    session_id=session_id,
                    holder=holder,
                    acquired_at=ts,
                    expires_at=ts + float(ttl_seconds),
                )
                .on_conflict_do_nothing(index_elements=[CompressionLock.session_id])
            )
            stored = conn.execute(
                select(CompressionLock.holder).where(CompressionLock.session_id == session_id)
            ).scalar_one_or_none()
            return stored == holder, reclaimed

        try:
            acquired, reclaimed = self.store.write(work)
        except DBAPIError as exc:
            log.warning("compression lock for %s not acquired: %s", session_id, exc)
            return False
        if reclaimed is not None:  # logged after commit: the unit of work may be retried
            log.info("Reclaimed stale compression lock on %s from %s", session_id, reclaimed)
        return acquired

    def refresh(self, session_id: str, holder: str, ttl_seconds: float = DEFAULT_LOCK_TTL) -> bool:
        """Extend the holder's lease, even one that already expired, as long as nobody
        else took it meanwhile."""
        if not session_id or not holder:
            return False

        def work(s: Connection) -> bool:
            result = s.execute(
                update(CompressionLock)
                .where(CompressionLock.session_id == session_id, CompressionLock.holder == holder)
                .values(expires_at=now() + float(ttl_seconds))
            )
            return result.rowcount > 0

        try:
            return self.store.write(work)
        except DBAPIError as exc:
            log.warning("compression lock for %s not refreshed: %s", session_id, exc)
            return False

    def release(self, session_id: str, holder: str) -> None:
        """Drop the lease if `holder` still owns it; idempotent, never raises for SQL."""
        if not session_id:
            return
        try:
            self.store.write(
                lambda s: s.execute(
                    delete(CompressionLock).where(
                        CompressionLock.session_id == session_id,
                        CompressionLock.holder == holder,
                    )
                )
            )
        except DBAPIError as exc:
            log.warning("compression lock for %s not released: %s", session_id, exc)

    def get_holder(self, session_id: str) -> str | None:
        """The holder of a live (unexpired) lease."""
        with self.store.read() as s:
            return s.execute(
                select(CompressionLock.holder).where(
                    CompressionLock.session_id == session_id,
                    CompressionLock.expires_at >= now(),
                )
            ).scalar_one_or_none()


# --------------------------------------------------------------------------- gateway

_LIST_GATEWAY_SESSIONS = text(
    """
    SELECT * FROM (
        SELECT s.*,
               COALESCE(
                   (SELECT MAX(m.timestamp) FROM messages m WHERE m.session_id = s.id),
                   s.started_at
               ) AS last_active,
               ROW_NUMBER() OVER (
                   PARTITION BY s.session_key ORDER BY s.started_at DESC, s.id DESC
               ) AS hermes_rank
        FROM sessions s
        WHERE s.session_key IS NOT NULL AND s.session_key <> ''
          AND (:platform = '' OR LOWER(s.source) = LOWER(:platform))
    ) newest
    WHERE hermes_rank = 1 AND (:active_only = 0 OR ended_at IS NULL)
    ORDER BY last_active DESC, started_at DESC, id DESC
    """
)

# Rows a gateway may resume: open, or closed only by the agent/websocket reaper (not by
# the user or a reset), and with a transcript worth resuming.
_PEER_BY_KEY = text(
    """
    SELECT * FROM sessions
    WHERE session_key = :session_key AND source = :source
      AND (ended_at IS NULL OR end_reason IN ('agent_close', 'ws_orphan_reap'))
      AND EXISTS (SELECT 1 FROM messages m WHERE m.session_id = sessions.id)
    ORDER BY started_at DESC, id DESC
    LIMIT 1
    """
)
_PEER_BY_TUPLE = text(
    """
    SELECT * FROM sessions
    WHERE source = :source
      AND COALESCE(user_id, '') = :user_id
      AND COALESCE(chat_id, '') = :chat_id
      AND COALESCE(chat_type, '') = :chat_type
      AND COALESCE(thread_id, '') = :thread_id
      AND (ended_at IS NULL OR end_reason IN ('agent_close', 'ws_orphan_reap'))
      AND EXISTS (SELECT 1 FROM messages m WHERE m.session_id = sessions.id)
    ORDER BY started_at DESC, id DESC
    LIMIT 1
    """
)
_PENDING_HANDOFFS = text(
    "SELECT * FROM sessions WHERE handoff_state = 'pending' ORDER BY started_at ASC, id ASC"
)


class GatewayRoutingRepository:
    """The gateway's routing index (`gateway_routing`, namespaced by `scope`), the peer
    identity it stamps on sessions, and cross-platform session handoffs."""

    def __init__(self, store: Store) -> None:
        self.store = store

    # -- routing entries

    def save_entry(self, session_key: str, entry_json: str, *, scope: str = "") -> None:
        if not session_key or not entry_json:
            return

        def work(s: Connection) -> None:
            stmt = upsert_insert(s, GatewayRouting).values(
                scope=scope or "",
                session_key=scrub(session_key),
                entry_json=scrub(entry_json),
                updated_at=now(),
            )
            s.execute(
                stmt.on_conflict_do_update(
                    index_elements=[GatewayRouting.scope, GatewayRouting.session_key],
                    set_={
                        "entry_json": stmt.excluded.entry_json,
                        "updated_at": stmt.excluded.updated_at,
                    },
                )
            )

        self.store.write(work)

    def replace_entries(self, entries: Mapping[str, str], *, scope: str = "") -> None:
        """The scope's whole index in one transaction; other scopes are untouched."""
        scope = scope or ""
        rows = [
            {"scope": scope, "session_key": scrub(k), "entry_json": scrub(v)}
            for k, v in entries.items()
            if k and v
        ]

        def work(s: Connection) -> None:
            conn = s
            conn.execute(delete(GatewayRouting).where(GatewayRouting.scope == scope))
            if rows:
                ts = now()
                conn.execute(insert(GatewayRouting), [{**row, "updated_at": ts} for row in rows])

        self.store.write(work)

    def load_entries(self, *, scope: str = "") -> dict[str, str]:
        with self.store.read() as s:
            rows = s.execute(
                select(GatewayRouting.session_key, GatewayRouting.entry_json).where(
                    GatewayRouting.scope == (scope or "")
                )
            ).all()
        return {key: entry for key, entry in rows}

    def delete_entries(self, session_keys: Iterable[str], *, scope: str = "") -> int:
        keys = sorted({k for k in session_keys if isinstance(k, str) and k})
        if not keys:
            return 0
        stmt = delete(GatewayRouting).where(
            GatewayRouting.scope == (scope or ""),
            GatewayRouting.session_key.in_(bindparam("keys", expanding=True)),
        )

        def work(s: Connection) -> int:
            conn = s
            return sum(conn.execute(stmt, {"keys": list(c)}).rowcount for c in _chunks(keys))

        return self.store.write(work)

    # -- peer identity on sessions

    def record_gateway_session_peer(
        self,
        session_id: str,
        *,
        source: str,
        user_id: str | None = None,
        session_key: str | None = None,
        chat_id: str | None = None,
        chat_type: str | None = None,
        thread_id: str | None = None,
        display_name: str | None = None,
        origin_json: str | None = None,
    ) -> None:
        """Stamp the gateway identity on an existing session (unknown ids: no-op). The
        routing fields are set as given, None included, because a peer tuple is only
        meaningful as a whole; presentation fields only when supplied."""
        if not session_id or not session_key:
            return
        values: dict[str, Any] = {
            "session_key": scrub(session_key),
            "source": scrub(source),
            "user_id": scrub(user_id),
            "chat_id": scrub(chat_id),
            "chat_type": scrub(chat_type),
            "thread_id": scrub(thread_id),
        }
        if display_name is not None:
            values["display_name"] = scrub(display_name)
        if origin_json is not None:
            values["origin_json"] = scrub(origin_json)
        self.store.write(
            lambda s: s.execute(
                update(SessionRow).where(SessionRow.id == session_id).values(values)
            )
        )

    def list_gateway_sessions(
        self, *, platform: str | None = None, active_only: bool = True
    ) -> list[dict[str, Any]]:
        """The current (newest-started) session of every session key, full rows plus
        `last_active`, newest activity first. `active_only` asks whether a key's current
        session is open; an older open session behind a newer ended one is not current."""
        params = {"platform": platform or "", "active_only": 1 if active_only else 0}
        with self.store.read() as s:
            rows = _row_dicts(s.execute(_LIST_GATEWAY_SESSIONS, params).mappings())
        for row in rows:
            row.pop("hermes_rank", None)
        return rows

    def find_session_by_origin(
        self,
        *,
        platform: str,
        chat_id: str,
        thread_id: str | None = None,
        user_id: str | None = None,
    ) -> str | None:
        """The newest open keyed session of a chat, or None when the chat is shared and
        the sender cannot be told apart (routing a message to the wrong person's session
        is worse than starting a new one)."""
        if not platform or not chat_id:
            return None
        stmt = (
            select(SessionRow.id, SessionRow.user_id)
            .where(
                SessionRow.session_key.is_not(None),
                SessionRow.ended_at.is_(None),
                func.lower(SessionRow.source) == platform.lower(),
                SessionRow.chat_id == chat_id,
            )
            .order_by(SessionRow.started_at.desc(), SessionRow.id.desc())
        )
        if thread_id is not None:
            stmt = stmt.where(func.coalesce(SessionRow.thread_id, "") == thread_id)
        with self.store.read() as s:
            rows = s.execute(stmt).all()
        if not rows:
            return None
        if user_id is not None:
            for row in rows:
                if row.user_id == user_id:
                    return str(row.id)
            return str(rows[0].id) if len(rows) == 1 else None
        senders = {row.user_id for row in rows if row.user_id}
        return str(rows[0].id) if len(senders) <= 1 else None

    def find_latest_gateway_session_for_peer(
        self,
        *,
        source: str,
        user_id: str | None = None,
        session_key: str | None = None,
        chat_id: str | None = None,
        chat_type: str | None = None,
        thread_id: str | None = None,
    ) -> dict[str, Any] | None:
        """A resumable session for a peer: first by routing key, then (only with a chat
        id and type) by the whole peer tuple, NULLs compared as ''."""
        if not session_key:
            return None
        with self.store.read() as s:
            row = (
                s.execute(_PEER_BY_KEY, {"session_key": session_key, "source": source})
                .mappings()
                .first()
            )
            if row is None and chat_id and chat_type:
                row = (
                    s.execute(
                        _PEER_BY_TUPLE,
                        {
                            "source": source,
                            "user_id": user_id or "",
                            "chat_id": chat_id,
                            "chat_type": chat_type,
                            "thread_id": thread_id or "",
                        },
                    )
                    .mappings()
                    .first()
                )
        return _row_dict(row) if row is not None else None

    # -- handoffs

    def _set_handoff(self, session_id: str, where: Any, values: dict[str, Any]) -> bool:
        def work(s: Connection) -> bool:
            stmt = update(SessionRow).where(SessionRow.id == session_id)
            if where is not None:
                stmt = stmt.where(where)
            return s.execute(stmt.values(values)).rowcount > 0

        return self.store.write(work)

    def request_handoff(self, session_id: str, platform: str) -> bool:
        """Queue a handoff unless one is already pending or running."""
        state = SessionRow.handoff_state
        return self._set_handoff(
            session_id,
            state.is_(None) | state.in_(("completed", "failed")),
            {
                "handoff_state": "pending",
                "handoff_platform": scrub(platform),
                "handoff_error": None,
            },
        )

    def claim_handoff(self, session_id: str) -> bool:
        """pending -> running; False if someone else claimed it first."""
        return self._set_handoff(
            session_id, SessionRow.handoff_state == "pending", {"handoff_state": "running"}
        )

    def complete_handoff(self, session_id: str) -> None:
        self._set_handoff(session_id, None, {"handoff_state": "completed", "handoff_error": None})

    def fail_handoff(self, session_id: str, error: str | None) -> None:
        message = None if error is None else scrub(str(error)[:HANDOFF_ERROR_MAX])
        self._set_handoff(session_id, None, {"handoff_state": "failed", "handoff_error": message})

    def get_handoff_state(self, session_id: str) -> dict[str, Any] | None:
        try:
            with self.store.read() as s:
                row = s.execute(
                    select(
                        SessionRow.handoff_state,
                        SessionRow.handoff_platform,
                        SessionRow.handoff_error,
                    ).where(SessionRow.id == session_id)
                ).first()
        except DBAPIError as exc:
            log.warning("handoff state of %s unreadable: %s", session_id, exc)
            return None
        if row is None:
            return None
        return {"state": row[0], "platform": row[1], "error": row[2]}

    def list_pending_handoffs(self) -> list[dict[str, Any]]:
        try:
            with self.store.read() as s:
                return _row_dicts(s.execute(_PENDING_HANDOFFS).mappings())
        except DBAPIError as exc:
            log.warning("pending handoffs unreadable: %s", exc)
            return []


# --------------------------------------------------------------------------- async


class AsyncDelegationRepository:
    """Read-only view of `async_delegations`. Another Hermes module owns these rows and
    writes them through its own connection; hermes-store must never modify them."""

    def __init__(self, store: Store) -> None:
        self.store = store

    def get(self, delegation_id: str) -> dict[str, Any] | None:
        stmt: Select[Any] = (
            select(literal_column("*"))
            .select_from(AsyncDelegation)
            .where(AsyncDelegation.delegation_id == delegation_id)
        )
        with self.store.read() as s:
            row = s.execute(stmt).mappings().first()
        return _row_dict(row) if row is not None else None

    def list_by_state(
        self,
        states: str | Sequence[str] | None = None,
        *,
        origin_session: str | None = None,
        limit: int | None = None,
    ) -> list[dict[str, Any]]:
        """Full rows (including columns added lazily by newer writers), oldest dispatch
        first; `states` is one state, several, or None for all."""
        stmt: Select[Any] = select(literal_column("*")).select_from(AsyncDelegation)
        params: dict[str, Any] = {}
        if states is not None:
            wanted = [states] if isinstance(states, str) else list(states)
            if not wanted:
                return []
            stmt = stmt.where(AsyncDelegation.state.in_(bindparam("states", expanding=True)))
            params["states"] = wanted
        if origin_session is not None:
            stmt = stmt.where(AsyncDelegation.origin_session == origin_session)
        stmt = stmt.order_by(AsyncDelegation.dispatched_at, AsyncDelegation.delegation_id)
        if limit is not None:
            stmt = stmt.limit(max(0, int(limit)))
        with self.store.read() as s:
            return _row_dicts(s.execute(stmt, params).mappings())

    def count_by_state(self) -> dict[str, int]:
        with self.store.read() as s:
            rows = s.execute(
                select(AsyncDelegation.state, func.count()).group_by(AsyncDelegation.state)
            ).all()
        return {state: int(n) for state, n in rows}
