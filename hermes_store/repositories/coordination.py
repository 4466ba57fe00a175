"""Tables processes coordinate through: compression leases, the gateway's routing index
and peer identity on sessions, session handoffs, and (read-only) async delegations.

docs/reference/behaviour.md 12 (locks), 13 (gateway), 14 (async delegations).
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from functools import cache
from typing import TYPE_CHECKING, Any

from sqlalchemy import (
    BindParameter,
    ColumnElement,
    Connection,
    Select,
    Text,
    bindparam,
    delete,
    exists,
    func,
    insert,
    literal_column,
    or_,
    select,
    update,
)

from ..models import AsyncDelegation, CompressionLock, GatewayRouting
from ..runtime.engine import (
    DriverWrite,
    Prepared,
    all_dicts,
    all_tuples,
    first_tuple,
    first_value,
)
from ._dialect import data_columns, data_dicts, data_rows, lock_session, upsert_insert
from ._paging import limit_clause
from ._sql import ADVISORY_FAILURES, all_columns, chunks, rowcount
from ._tables import DELEGATIONS, SESSIONS, M, S
from .encoding import now, scrub
from .lineage import is_recoverable, last_active

if TYPE_CHECKING:
    from ..store import Store

log = logging.getLogger(__name__)

DEFAULT_LOCK_TTL = 300.0
HANDOFF_ERROR_MAX = 500

_PID = re.compile(r"(?<![A-Za-z0-9_])pid=(\d+)(?![A-Za-z0-9_])")


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


# --------------------------------------------------------------------------- locks

#: The holder of a session's lease that has not expired at :at.
_LIVE_HOLDER = Prepared(
    select(CompressionLock.holder).where(
        CompressionLock.session_id == bindparam("session_id"),
        CompressionLock.expires_at >= bindparam("at"),
    )
)


#: A lease dropped by its holder (`release`), one statement.
_RELEASE = Prepared(
    delete(CompressionLock).where(
        CompressionLock.session_id == bindparam("session_id"),
        CompressionLock.holder == bindparam("holder"),
    )
)


@cache
def _lease_insert(insert: Callable[[Any], Any]) -> Prepared:
    """A new lease written unless the session has one, RETURNING its holder: a row back
    means the lease was granted with nothing to reclaim (SQLite's `try_acquire` at the
    driver); `insert`: the dialect's INSERT constructor."""
    return Prepared(
        insert(CompressionLock)
        .values(
            session_id=bindparam("session_id"),
            holder=bindparam("holder"),
            acquired_at=bindparam("at"),
            expires_at=bindparam("expires_at"),
        )
        .on_conflict_do_nothing(index_elements=[CompressionLock.session_id])
        .returning(CompressionLock.holder)
    )


def _session_exists(conn: Connection, session_id: str) -> bool:
    return conn.execute(select(S.id).where(S.id == session_id)).first() is not None


def _acquire(
    conn: Connection, session_id: str, holder: str, ttl_seconds: float
) -> tuple[bool, str | None]:
    """(whether `holder` owns the lease afterwards, the stale holder it replaced)."""
    # The session's row lock, as appends take it: a lease is not granted while an append
    # to the session is in flight, and an append that starts after this commits sees the
    # lease (PostgreSQL; SQLite's BEGIN IMMEDIATE gives both). A session created after
    # the lock's statement found no row is locked once it is there: otherwise an append
    # could lock it and miss this lease until both had committed. A lease on a session
    # that does not exist is granted as the original grants it.
    if not lock_session(conn, session_id) and _session_exists(conn, session_id):
        lock_session(conn, session_id)
    ts = now()
    current = conn.execute(
        select(CompressionLock.holder, CompressionLock.expires_at).where(
            CompressionLock.session_id == session_id
        )
    ).first()
    reclaimed = None
    if current is not None and (current.expires_at < ts or holder_is_dead(current.holder)):
        _drop_lease(conn, session_id, current.holder)
        reclaimed = current.holder
    conn.execute(
        upsert_insert(conn, CompressionLock)
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


def _refresh(conn: Connection, session_id: str, holder: str, ttl_seconds: float) -> bool:
    result = conn.execute(
        update(CompressionLock)
        .where(CompressionLock.session_id == session_id, CompressionLock.holder == holder)
        .values(expires_at=now() + float(ttl_seconds))
    )
    return rowcount(result) > 0


def _drop_lease(conn: Connection, session_id: str, holder: str) -> None:
    conn.execute(
        delete(CompressionLock).where(
            CompressionLock.session_id == session_id, CompressionLock.holder == holder
        )
    )


class CompressionLockRepository:
    """Per-session compression leases. A lease is a row with an expiry, not an OS lock:
    a crashed holder blocks others only until its expiry, or until its pid is gone.

    Args:
        store: the Store the repository works on.
    """

    def __init__(self, store: Store) -> None:
        self.store = store

    def try_acquire(
        self, session_id: str, holder: str, ttl_seconds: float = DEFAULT_LOCK_TTL
    ) -> bool:
        """True iff `holder` owns the lease afterwards (re-acquiring one's own live lease
        is True and does not extend it; use refresh for that).

        Args:
            session_id: the session's id.
            holder: who holds (or asks for) the lock: an opaque token of the caller's.
            ttl_seconds: the lock expires this many seconds after it was taken or last
                refreshed.
        """
        if not session_id:
            return False

        def work(conn: Connection) -> tuple[bool, str | None] | str:
            return _acquire(conn, session_id, holder, ttl_seconds)

        try:
            outcome = self.store.write(
                work, call=self._granted_at_driver(session_id, holder, ttl_seconds)
            )
        except ADVISORY_FAILURES as exc:  # refused: logged, as the original
            log.warning("compression lock for %s not acquired: %s", session_id, exc)
            return False
        if isinstance(outcome, str):  # the driver's INSERT granted it: nothing reclaimed
            return True
        acquired, reclaimed = outcome
        if reclaimed is not None:  # logged after commit: the unit of work may be retried
            log.info("Reclaimed stale compression lock on %s from %s", session_id, reclaimed)
        return acquired

    def _granted_at_driver(
        self, session_id: str, holder: str, ttl_seconds: float
    ) -> Callable[[], DriverWrite | None] | None:
        """SQLite: the lease as one INSERT at the writer's driver (`_lease_insert`), its
        time taken once the write lock is held, as `_acquire` takes it. The session
        having a lease already (no row back) has the write run `_acquire`, which decides
        whether that lease is stale; on SQLite the session's row lock `_acquire` takes is
        the write lock the INSERT holds anyway. None elsewhere."""
        store = self.store
        dialect = store.engine.dialect
        if not (store.dialect.in_process and dialect.insert_returning):
            return None
        statement = _lease_insert(store.dialect.sql.insert)

        def statements() -> tuple[tuple[str, Any], ...]:
            at = now()
            params = {
                "session_id": session_id,
                "holder": holder,
                "at": at,
                "expires_at": at + float(ttl_seconds),
            }
            return (statement.bound(dialect, params),)

        write = DriverWrite(statements)
        return lambda: write

    def refresh(self, session_id: str, holder: str, ttl_seconds: float = DEFAULT_LOCK_TTL) -> bool:
        """Extend the holder's lease, even one that already expired, as long as nobody
        else took it meanwhile.

        Args:
            session_id: the session's id.
            holder: who holds (or asks for) the lock: an opaque token of the caller's.
            ttl_seconds: the lock expires this many seconds after it was taken or last
                refreshed.
        """
        if not session_id or not holder:
            return False

        try:
            return self.store.write(lambda conn: _refresh(conn, session_id, holder, ttl_seconds))
        except ADVISORY_FAILURES as exc:  # refused: logged, as the original
            log.warning("compression lock for %s not refreshed: %s", session_id, exc)
            return False

    def release(self, session_id: str, holder: str) -> None:
        """Drop the lease if `holder` still owns it; idempotent, never raises for SQL.

        Args:
            session_id: the session's id.
            holder: who holds (or asks for) the lock: an opaque token of the caller's.
        """
        if not session_id:
            return
        try:
            self.store.write_one(_RELEASE, {"session_id": session_id, "holder": holder})
        except ADVISORY_FAILURES as exc:  # refused: logged, as the original
            log.warning("compression lock for %s not released: %s", session_id, exc)

    def get_holder(self, session_id: str) -> str | None:
        """The holder of a live (unexpired) lease.

        Args:
            session_id: the session's id.
        """
        holder = self.store.read_one(
            _LIVE_HOLDER, {"session_id": session_id, "at": now()}, first_value
        )
        return None if holder is None else str(holder)


# --------------------------------------------------------------------------- gateway


def _gateway_sessions() -> Select[Any]:
    """The newest-started session of every session key, with `last_active` (and the
    rank used to pick it, `hermes_rank`); `:platform` '' means every platform,
    `:active_only` 1 keeps only keys whose current session is open."""
    rank = func.row_number().over(
        partition_by=S.session_key, order_by=(S.started_at.desc(), S.id.desc())
    )
    platform: BindParameter[str] = bindparam("platform", type_=Text())
    newest = (
        select(
            literal_column("sessions.*"),
            last_active(S.id, S.started_at).label("last_active"),
            rank.label("hermes_rank"),
        )
        .select_from(SESSIONS)
        .where(
            S.session_key.is_not(None),
            S.session_key != "",
            or_(platform == "", func.lower(S.source) == func.lower(platform)),
        )
        .subquery("newest")
    )
    column = literal_column
    return (
        select(column("*"))
        .select_from(newest)
        .where(
            column("hermes_rank") == 1,
            or_(bindparam("active_only") == 0, column("ended_at").is_(None)),
        )
        .order_by(column("last_active").desc(), column("started_at").desc(), column("id").desc())
    )


_LIST_GATEWAY_SESSIONS = Prepared(_gateway_sessions())


def _resumable_peer(*conditions: ColumnElement[bool]) -> Select[Any]:
    """The newest session matching `conditions` that a gateway may resume: open, or
    closed only by an automatic close, and with a transcript worth resuming."""
    return (
        all_columns(SESSIONS)
        .where(*conditions, is_recoverable(SESSIONS), exists().where(M.session_id == S.id))
        .order_by(S.started_at.desc(), S.id.desc())
        .limit(1)
    )


def _blank(column: ColumnElement[Any]) -> ColumnElement[Any]:
    return func.coalesce(column, "")


_PEER_BY_KEY = _resumable_peer(
    S.session_key == bindparam("session_key"), S.source == bindparam("source")
)
_PEER_BY_TUPLE = _resumable_peer(
    S.source == bindparam("source"),
    *(_blank(S[name]) == bindparam(name) for name in ("user_id", "chat_id", "chat_type")),
    _blank(S.thread_id) == bindparam("thread_id"),
)


@cache
def _entry_upsert(insert: Callable[[Any], Any]) -> Prepared:
    """One routing entry inserted or replaced; `insert`: the dialect's INSERT
    constructor."""
    stmt = insert(GatewayRouting).values(
        scope=bindparam("scope"),
        session_key=bindparam("session_key"),
        entry_json=bindparam("entry_json"),
        updated_at=bindparam("updated_at"),
    )
    return Prepared(
        stmt.on_conflict_do_update(
            index_elements=[GatewayRouting.scope, GatewayRouting.session_key],
            set_={"entry_json": stmt.excluded.entry_json, "updated_at": stmt.excluded.updated_at},
        )
    )


_ENTRIES = Prepared(
    select(GatewayRouting.session_key, GatewayRouting.entry_json).where(
        GatewayRouting.scope == bindparam("scope")
    )
)


def _open_keyed_sessions(in_thread: bool) -> Prepared:
    """`find_session_by_origin`'s read: (id, user_id) of a chat's open keyed sessions,
    newest first; `:platform` is compared lowercased; `in_thread`: only those of the
    thread `:thread_id` ('' for none)."""
    stmt = (
        select(S.id, S.user_id)
        .where(
            S.session_key.is_not(None),
            S.ended_at.is_(None),
            func.lower(S.source) == bindparam("platform"),
            S.chat_id == bindparam("chat_id"),
        )
        .order_by(S.started_at.desc(), S.id.desc())
    )
    if in_thread:
        stmt = stmt.where(_blank(S.thread_id) == bindparam("thread_id"))
    return Prepared(stmt)


_OPEN_KEYED = {in_thread: _open_keyed_sessions(in_thread) for in_thread in (False, True)}
_PENDING_HANDOFFS = Prepared(
    all_columns(SESSIONS).where(S.handoff_state == "pending").order_by(S.started_at, S.id)
)
_HANDOFF_STATE = Prepared(
    select(S.handoff_state, S.handoff_platform, S.handoff_error).where(S.id == bindparam("id"))
)


def _latest_for_peer(
    conn: Connection, session_key: str, source: str, peer: dict[str, Any] | None
) -> dict[str, Any] | None:
    """By routing key first, then (given a peer tuple) by the whole peer tuple."""
    row = conn.execute(_PEER_BY_KEY, {"session_key": session_key, "source": source})
    found = row.mappings().first()
    if found is None and peer is not None:
        found = conn.execute(_PEER_BY_TUPLE, peer).mappings().first()
    return data_columns(found) if found is not None else None


def _replace_entries(conn: Connection, scope: str, rows: list[dict[str, Any]]) -> None:
    conn.execute(delete(GatewayRouting).where(GatewayRouting.scope == scope))
    if rows:
        ts = now()
        conn.execute(insert(GatewayRouting), [{**row, "updated_at": ts} for row in rows])


def _delete_entries(conn: Connection, scope: str, keys: Sequence[str]) -> int:
    stmt = delete(GatewayRouting).where(
        GatewayRouting.scope == scope,
        GatewayRouting.session_key.in_(bindparam("keys", expanding=True)),
    )
    return sum(rowcount(conn.execute(stmt, {"keys": chunk})) for chunk in chunks(keys))


def _set_handoff(
    conn: Connection, session_id: str, where: ColumnElement[bool] | None, values: dict[str, Any]
) -> bool:
    stmt = update(SESSIONS).where(S.id == session_id)
    if where is not None:
        stmt = stmt.where(where)
    return rowcount(conn.execute(stmt.values(values))) > 0


class GatewayRoutingRepository:
    """The gateway's routing index (`gateway_routing`, namespaced by `scope`), the peer
    identity it stamps on sessions, and cross-platform session handoffs.

    Args:
        store: the Store the repository works on.
    """

    def __init__(self, store: Store) -> None:
        self.store = store

    # -- routing entries

    def save_entry(self, session_key: str, entry_json: str, *, scope: str = "") -> None:
        """Insert or replace one routing entry; empty keys or entries are ignored.

        Args:
            session_key: the gateway's key for the conversation.
            entry_json: the entry, as JSON text.
            scope: the namespace of the entries ('' for the default one); other scopes are
                untouched.
        """
        if not session_key or not entry_json:
            return
        params = {
            "scope": scope or "",
            "session_key": scrub(session_key) or "",
            "entry_json": scrub(entry_json) or "",
            "updated_at": now(),
        }
        self.store.write_one(_entry_upsert(self.store.dialect.sql.insert), params)

    def replace_entries(self, entries: Mapping[str, str], *, scope: str = "") -> None:
        """The scope's whole index in one transaction; other scopes are untouched.

        Args:
            entries: the entries that replace the scope's current ones.
            scope: the namespace of the entries ('' for the default one); other scopes are
                untouched.
        """
        scope = scope or ""
        rows = [
            {"scope": scope, "session_key": scrub(k), "entry_json": scrub(v)}
            for k, v in entries.items()
            if k and v
        ]
        self.store.write(lambda conn: _replace_entries(conn, scope, rows))

    def load_entries(self, *, scope: str = "") -> dict[str, str]:
        """The scope's index: session key -> entry JSON.

        Args:
            scope: the namespace of the entries ('' for the default one); other scopes are
                untouched.
        """
        rows = self.store.read_one(_ENTRIES, {"scope": scope or ""}, all_tuples)
        return {key: entry for key, entry in rows}

    def delete_entries(self, session_keys: Iterable[str], *, scope: str = "") -> int:
        """Delete the scope's entries for these keys; how many existed.

        Args:
            session_keys: the gateway keys of the entries.
            scope: the namespace of the entries ('' for the default one); other scopes are
                untouched.
        """
        keys = sorted({k for k in session_keys if isinstance(k, str) and k})
        if not keys:
            return 0
        return self.store.write(lambda conn: _delete_entries(conn, scope or "", keys))

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
        meaningful as a whole; presentation fields only when supplied.

        Args:
            session_id: the session's id.
            source: the source (cli, telegram, discord, cron, ...).
            user_id: the user's id on the platform.
            session_key: the gateway's key for the conversation.
            chat_id: the gateway chat's id.
            chat_type: the kind of chat (dm, group, channel, ...).
            thread_id: the gateway thread's id (a Telegram topic).
            display_name: the peer's display name.
            origin_json: where the peer was met (platform, chat, thread), as JSON text.
        """
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
        statement = update(SESSIONS).where(S.id == session_id).values(values)
        self.store.write(lambda conn: conn.execute(statement))

    def list_gateway_sessions(
        self, *, platform: str | None = None, active_only: bool = True
    ) -> list[dict[str, Any]]:
        """The current (newest-started) session of every session key, full rows plus
        `last_active`, newest activity first. `active_only` asks whether a key's current
        session is open; an older open session behind a newer ended one is not current.

        Args:
            platform: the gateway platform (telegram, discord, ...).
            active_only: only rows not marked inactive (rewound or compacted away).
        """
        params = {"platform": platform or "", "active_only": 1 if active_only else 0}
        rows = data_dicts(self.store.read_one(_LIST_GATEWAY_SESSIONS, params, all_dicts))
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
        is worse than starting a new one).

        Args:
            platform: the gateway platform (telegram, discord, ...).
            chat_id: the gateway chat's id.
            thread_id: the gateway thread's id (a Telegram topic).
            user_id: the user's id on the platform.
        """
        if not platform or not chat_id:
            return None
        params = {"platform": platform.lower(), "chat_id": chat_id}
        if thread_id is not None:
            params["thread_id"] = thread_id
        rows = self.store.read_one(_OPEN_KEYED[thread_id is not None], params, all_tuples)
        if not rows:
            return None
        if user_id is not None:
            for sid, sender in rows:
                if sender == user_id:
                    return str(sid)
            return str(rows[0][0]) if len(rows) == 1 else None
        senders = {sender for _sid, sender in rows if sender}
        return str(rows[0][0]) if len(senders) <= 1 else None

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
        id and type) by the whole peer tuple, NULLs compared as ''.

        Args:
            source: the source (cli, telegram, discord, cron, ...).
            user_id: the user's id on the platform.
            session_key: the gateway's key for the conversation.
            chat_id: the gateway chat's id.
            chat_type: the kind of chat (dm, group, channel, ...).
            thread_id: the gateway thread's id (a Telegram topic).
        """
        if not session_key:
            return None
        peer = None
        if chat_id and chat_type:
            peer = {
                "source": source,
                "user_id": user_id or "",
                "chat_id": chat_id,
                "chat_type": chat_type,
                "thread_id": thread_id or "",
            }
        return self.store.read(lambda conn: _latest_for_peer(conn, session_key, source, peer))

    # -- handoffs

    def _set_handoff(
        self, session_id: str, where: ColumnElement[bool] | None, values: dict[str, Any]
    ) -> bool:
        return self.store.write(lambda conn: _set_handoff(conn, session_id, where, values))

    def request_handoff(self, session_id: str, platform: str) -> bool:
        """Queue a handoff unless one is already pending or running.

        Args:
            session_id: the session's id.
            platform: the gateway platform (telegram, discord, ...).
        """
        state = S.handoff_state
        return self._set_handoff(
            session_id,
            or_(state.is_(None), state.in_(("completed", "failed"))),
            {
                "handoff_state": "pending",
                "handoff_platform": scrub(platform),
                "handoff_error": None,
            },
        )

    def claim_handoff(self, session_id: str) -> bool:
        """pending -> running; False if someone else claimed it first.

        Args:
            session_id: the session's id.
        """
        return self._set_handoff(
            session_id, S.handoff_state == "pending", {"handoff_state": "running"}
        )

    def complete_handoff(self, session_id: str) -> None:
        """Mark the handoff completed (whatever state it was in) and clear its error.

        Args:
            session_id: the session's id.
        """
        self._set_handoff(session_id, None, {"handoff_state": "completed", "handoff_error": None})

    def fail_handoff(self, session_id: str, error: str | None) -> None:
        """Mark the handoff failed with `error`, cut to HANDOFF_ERROR_MAX characters.

        Args:
            session_id: the session's id.
            error: why the handoff failed, as text.
        """
        message = None if error is None else scrub(str(error)[:HANDOFF_ERROR_MAX])
        self._set_handoff(session_id, None, {"handoff_state": "failed", "handoff_error": message})

    def get_handoff_state(self, session_id: str) -> dict[str, Any] | None:
        """`{state, platform, error}` of the session's handoff; None for an unknown id or
        when the columns cannot be read.

        Args:
            session_id: the session's id.
        """
        try:
            row = self.store.read_one(_HANDOFF_STATE, {"id": session_id}, first_tuple)
        except ADVISORY_FAILURES as exc:
            log.warning("handoff state of %s unreadable: %s", session_id, exc)
            return None
        if row is None:
            return None
        return {"state": row[0], "platform": row[1], "error": row[2]}

    def list_pending_handoffs(self) -> list[dict[str, Any]]:
        """Full rows of the sessions waiting for a handoff, oldest first; [] when
        unreadable."""
        try:
            return data_dicts(self.store.read_one(_PENDING_HANDOFFS, {}, all_dicts))
        except ADVISORY_FAILURES as exc:
            log.warning("pending handoffs unreadable: %s", exc)
            return []


# --------------------------------------------------------------------------- async


class AsyncDelegationRepository:
    """Read-only view of `async_delegations`. Another Hermes module owns these rows and
    writes them through its own connection; hermes-store must never modify them.

    Args:
        store: the Store the repository works on.
    """

    def __init__(self, store: Store) -> None:
        self.store = store

    def get(self, delegation_id: str) -> dict[str, Any] | None:
        """The full row of one delegation, None if unknown.

        Args:
            delegation_id: the delegation's id.
        """
        stmt: Select[Any] = all_columns(DELEGATIONS).where(
            AsyncDelegation.delegation_id == delegation_id
        )
        row = self.store.read(lambda s: s.execute(stmt).mappings().first())
        return data_columns(row) if row is not None else None

    def list_by_state(
        self,
        states: str | Sequence[str] | None = None,
        *,
        origin_session: str | None = None,
        limit: int | None = None,
    ) -> list[dict[str, Any]]:
        """Full rows (including columns added lazily by newer writers), oldest dispatch
        first; `states` is one state, several, or None for all.

        Args:
            states: only delegations in these states.
            origin_session: only delegations started from this session.
            limit: at most this many rows.
        """
        stmt: Select[Any] = all_columns(DELEGATIONS)
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
        stmt = stmt.limit(limit_clause(limit))
        return self.store.read(lambda s: data_rows(s.execute(stmt, params)))

    def count_by_state(self) -> dict[str, int]:
        """How many delegations are in each state."""
        rows = self.store.read(
            lambda s: s.execute(
                select(AsyncDelegation.state, func.count()).group_by(AsyncDelegation.state)
            ).all()
        )
        return {state: int(n) for state, n in rows}
