"""Reliability on PostgreSQL: a unit of work that reads a session's state and then
writes must not act on a state another transaction is changing (READ COMMITTED reads the
last committed state; SQLite's BEGIN IMMEDIATE gives this for free). Real server, real
concurrent transactions, no mocks."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from helpers.processes import start_hanging_writer


def _psycopg(url: str) -> Any:
    import psycopg
    from sqlalchemy.engine import make_url

    u = make_url(url)
    return psycopg.connect(
        host=u.host, port=u.port or 5432, user=u.username, dbname=u.database, autocommit=False
    )


@pytest.fixture
def pg_store(pg_fresh_db: str) -> Iterator[Any]:
    from hermes_store.store import Store

    store = Store(pg_fresh_db)
    try:
        yield store
    finally:
        store.close()


def _wait_until_blocked(watcher: Any, dbname: str, thread: threading.Thread) -> bool:
    """True once a hermes-store backend of `dbname` waits on a lock; False if the thread
    ended first. (A failsafe deadline only; nothing here is timed.)"""
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and thread.is_alive():
        row = watcher.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = %s"
            " AND application_name = 'hermes-store' AND wait_event_type = 'Lock'",
            (dbname,),
        ).fetchone()
        if row[0]:
            return True
        time.sleep(0.01)
    return False


def _behind_uncommitted(url: str, statements: list[str], operation: Any) -> dict[str, Any]:
    """Run `statements` in another connection's transaction and, before it commits, start
    `operation` in a thread; once the operation waits on a lock, commit. Returns
    {"result": ...} or {"error": exc}; fails if the operation never waited (then the
    lock it should have taken was not taken)."""
    from sqlalchemy.engine import make_url

    dbname = str(make_url(url).database)
    holder = _psycopg(url)
    watcher = _psycopg(url)
    watcher.autocommit = True
    outcome: dict[str, Any] = {}

    def run() -> None:
        try:
            outcome["result"] = operation()
        except BaseException as exc:  # noqa: BLE001 (inspected by the test)
            outcome["error"] = exc

    try:
        for statement in statements:
            holder.execute(statement)
        thread = threading.Thread(target=run)
        thread.start()
        blocked = _wait_until_blocked(watcher, dbname, thread)
        holder.commit()
        thread.join(timeout=60)
        assert not thread.is_alive()
        assert blocked, f"the operation did not wait for the other transaction: {outcome}"
    finally:
        holder.close()
        watcher.close()
    return outcome


@pytest.mark.parametrize("batch", [False, True], ids=["append_message", "append_messages"])
def test_append_waits_for_a_concurrent_compression_close(pg_store: Any, batch: bool) -> None:
    """Another transaction ends the session by compression and has not committed yet
    when an append starts. The append must wait for it and then refuse (the original's
    CompressionSessionClosedError), not add a row to the closed session."""

    from hermes_store.errors import CompressionSessionClosedError
    from hermes_store.repositories.messages import MessageRepository
    from hermes_store.repositories.sessions import SessionRepository

    url = pg_store.url.render_as_string(hide_password=False)
    SessionRepository(pg_store).create_session("s", "cli")
    messages = MessageRepository(pg_store)
    messages.append_message("s", "user", "before")

    def append() -> Any:
        if batch:
            return messages.append_messages("s", [{"role": "user", "content": "after the close"}])
        return messages.append_message("s", "user", "after the close")

    outcome = _behind_uncommitted(
        url,
        ["UPDATE sessions SET ended_at = 2e9, end_reason = 'compression' WHERE id = 's'"],
        append,
    )
    assert "result" not in outcome, f"appended {outcome.get('result')} to a closed session"
    assert isinstance(outcome.get("error"), CompressionSessionClosedError), outcome
    assert [m["content"] for m in messages.get_messages("s")] == ["before"]
    session = SessionRepository(pg_store).get_session("s")
    assert session is not None and session["message_count"] == 1


_GATE_KEY = 4_242_424  # the literal in hermes_test_gate()


def _gate_message_inserts(admin: Any) -> None:
    """Every INSERT into messages waits, inside its own transaction, for the advisory lock
    `admin` holds: a real append is paused after its checks and its insert has begun."""
    admin.execute(
        """
        CREATE FUNCTION hermes_test_gate() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN PERFORM pg_advisory_xact_lock(4242424); RETURN NEW; END $$
        """
    )
    admin.execute(
        "CREATE TRIGGER hermes_test_gate BEFORE INSERT ON messages"
        " FOR EACH ROW EXECUTE FUNCTION hermes_test_gate()"
    )
    admin.execute("SELECT pg_advisory_lock(%s)", (_GATE_KEY,))


def _waiting(watcher: Any, dbname: str) -> list[str]:
    """The wait events of hermes-store backends of `dbname` waiting on a lock."""
    rows = watcher.execute(
        "SELECT wait_event FROM pg_stat_activity WHERE datname = %s"
        " AND application_name = 'hermes-store' AND wait_event_type = 'Lock'",
        (dbname,),
    ).fetchall()
    return sorted(str(r[0]) for r in rows)


def _wait_for(predicate: Any, thread: threading.Thread | None = None) -> bool:
    """True once `predicate()` holds; False if `thread` ended first (failsafe deadline)."""
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if predicate():
            return True
        if thread is not None and not thread.is_alive():
            return bool(predicate())
        time.sleep(0.01)
    return False


def test_lease_waits_for_an_in_flight_append(pg_store: Any) -> None:
    """A real append has passed its checks (no lease) and is inserting, uncommitted, when
    a compressor asks for the session's lease. The lease must not be granted until the
    append commits: otherwise the compressor reads a transcript without that message and
    the message lands in a session under another holder's lease
    (docs/reference/behaviour.md 3.1, 12). With the lease taken under the session's row
    lock the compressor waits, and then the transcript it reads holds the message; later
    appends by others are refused."""
    from sqlalchemy.engine import make_url

    from hermes_store.errors import CompressionSessionBusyError
    from hermes_store.repositories.coordination import CompressionLockRepository
    from hermes_store.repositories.messages import MessageRepository
    from hermes_store.repositories.sessions import SessionRepository
    from hermes_store.store import Store

    url = pg_store.url.render_as_string(hide_password=False)
    dbname = str(make_url(url).database)
    SessionRepository(pg_store).create_session("s", "cli")
    messages = MessageRepository(pg_store)
    messages.append_message("s", "user", "before")
    # The compressor is another process: a Store of its own (one Store serialises its
    # own writes in-process, which would hide the database's behaviour).
    compressor_store = Store(url)
    locks = CompressionLockRepository(compressor_store)
    compressor_messages = MessageRepository(compressor_store)

    admin = _psycopg(url)
    admin.autocommit = True
    watcher = _psycopg(url)
    watcher.autocommit = True
    outcome: dict[str, Any] = {}

    def append() -> None:
        try:
            outcome["append"] = messages.append_message("s", "user", "in flight")
        except BaseException as exc:  # noqa: BLE001 (inspected by the test)
            outcome["append_error"] = exc

    def acquire() -> None:
        try:
            outcome["acquired"] = locks.try_acquire("s", "compressor pid=1")
            # What the compressor summarises, read right after it holds the lease.
            outcome["seen"] = [m["content"] for m in compressor_messages.get_messages("s")]
        except BaseException as exc:  # noqa: BLE001
            outcome["acquire_error"] = exc

    appender = threading.Thread(target=append)
    compressor = threading.Thread(target=acquire)
    try:
        _gate_message_inserts(admin)
        appender.start()
        assert _wait_for(lambda: _waiting(watcher, dbname) == ["advisory"], appender), (
            f"the append did not reach its insert: {outcome}"
        )
        compressor.start()
        # Fixed: the compressor waits on the appender's row lock (a second waiter).
        # Unfixed: it commits its lease while the append is still in flight.
        waited = _wait_for(lambda: len(_waiting(watcher, dbname)) == 2, compressor)
        granted_early = "acquired" in outcome
        admin.execute("SELECT pg_advisory_unlock(%s)", (_GATE_KEY,))
        appender.join(timeout=60)
        compressor.join(timeout=60)
        assert not appender.is_alive() and not compressor.is_alive()
    finally:
        admin.close()
        watcher.close()
        compressor_store.close()

    assert not granted_early, f"lease granted while an append was in flight: {outcome}"
    assert waited, f"the lease did not wait for the in-flight append: {outcome}"
    assert isinstance(outcome.get("append"), int), outcome
    assert outcome.get("acquired") is True, outcome
    assert outcome["seen"] == ["before", "in flight"]
    with pytest.raises(CompressionSessionBusyError):
        messages.append_message("s", "user", "during compression")
    assert [m["content"] for m in messages.get_messages("s")] == ["before", "in flight"]


def test_append_waits_for_a_lease_being_taken(pg_store: Any) -> None:
    """The other order: a compressor's lease transaction (the session's row lock, then the
    lease row, as try_acquire does) has not committed when an append starts. The append
    waits and then refuses with the compressor's live lease."""

    from hermes_store.errors import CompressionSessionBusyError
    from hermes_store.repositories.messages import MessageRepository
    from hermes_store.repositories.sessions import SessionRepository

    url = pg_store.url.render_as_string(hide_password=False)
    SessionRepository(pg_store).create_session("s", "cli")
    messages = MessageRepository(pg_store)

    outcome = _behind_uncommitted(
        url,
        [
            "SELECT 1 FROM sessions WHERE id = 's' FOR UPDATE",
            "INSERT INTO compression_locks (session_id, holder, acquired_at, expires_at)"
            " VALUES ('s', 'compressor pid=1', extract(epoch from now()),"
            " extract(epoch from now()) + 300)",
        ],
        lambda: messages.append_message("s", "user", "racing the lease"),
    )
    assert isinstance(outcome.get("error"), CompressionSessionBusyError), outcome
    assert messages.get_messages("s") == []


def test_kill_writer_inside_a_transaction_postgresql(pg_store: Any) -> None:
    """kill -9 of a process in the middle of a write transaction: the server rolls it back
    when the connection drops; nothing of it is visible, its row locks are released (a
    later append to the session it had locked goes through) and ids are not reused."""
    import os
    import signal

    from hermes_store.repositories.messages import MessageRepository
    from hermes_store.repositories.sessions import SessionRepository

    url = pg_store.url.render_as_string(hide_password=False)
    sessions = SessionRepository(pg_store)
    messages = MessageRepository(pg_store)
    sessions.create_session("kept", "cli")
    first = messages.append_message("kept", "user", "before the crash")

    proc = start_hanging_writer(url)
    os.kill(proc.pid, signal.SIGKILL)  # inside its transaction, uncommitted
    proc.wait(timeout=10)
    assert proc.returncode == -signal.SIGKILL

    assert sessions.get_session("doomed") is None
    assert messages.get_messages("doomed") == []
    kept = sessions.get_session("kept")
    assert kept is not None and kept["title"] is None and kept["message_count"] == 1
    # the killed backend's row lock on 'kept' is gone once the server notices the drop
    # (at most the 10 s lock timeout, retried by the write path)
    later = messages.append_message("kept", "user", "after the crash")
    assert later > first
    assert [m["content"] for m in messages.get_messages("kept")] == [
        "before the crash",
        "after the crash",
    ]
    assert messages.message_count() == 2


def test_publication_waits_for_a_concurrent_change_of_the_parent(pg_store: Any) -> None:
    """The gateway re-keys the parent session (uncommitted) while the compressor publishes
    the continuation. Publication takes the parent's row lock before it reads the parent,
    so the child inherits the routing fields the parent ends up with; otherwise it copied
    the old ones and only its final UPDATE of the parent waited."""

    from hermes_store.repositories.coordination import CompressionLockRepository
    from hermes_store.repositories.messages import MessageRepository
    from hermes_store.repositories.sessions import SessionRepository

    url = pg_store.url.render_as_string(hide_password=False)
    sessions = SessionRepository(pg_store)
    sessions.create_session("p", "telegram", session_key="old-key", chat_id="old-chat")
    messages = MessageRepository(pg_store)
    messages.append_message("p", "user", "long conversation")
    assert CompressionLockRepository(pg_store).try_acquire("p", "compressor pid=1")

    outcome = _behind_uncommitted(
        url,
        ["UPDATE sessions SET session_key = 'new-key', chat_id = 'new-chat' WHERE id = 'p'"],
        lambda: messages.publish_compression_child(
            parent_session_id="p",
            child_session_id="c",
            source="telegram",
            messages=[{"role": "user", "content": "summary"}],
            compression_lock_holder="compressor pid=1",
        ),
    )

    assert "error" not in outcome, outcome
    parent = sessions.get_session("p")
    child = sessions.get_session("c")
    assert parent is not None and child is not None
    assert parent["end_reason"] == "compression"
    assert (child["session_key"], child["chat_id"]) == ("new-key", "new-chat")


def _blocked_by(watcher: Any, dbname: str, other: Any) -> bool:
    """Whether a hermes-store backend of `dbname` waits on a lock `other` (a connection)
    holds."""
    row = watcher.execute(
        "SELECT count(*) FROM pg_stat_activity WHERE datname = %s"
        " AND application_name = 'hermes-store' AND %s = ANY(pg_blocking_pids(pid))",
        (dbname, other.info.backend_pid),
    ).fetchone()
    return bool(row[0])


@pytest.mark.parametrize("batch", [False, True], ids=["append_message", "append_messages"])
def test_append_to_a_session_created_after_its_lock_never_runs_beside_the_lock_holder(
    pg_store: Any, batch: bool
) -> None:
    """An append's row lock finds no session (its creator has not committed), then the
    creator commits and another writer takes the session's row lock and starts its own
    append. The first append must not write beside it: it read the session as missing
    when it locked, and under READ COMMITTED its next statement would see the session,
    unlocked, and insert ids between the lock holder's. The append is paused between its
    lock and its checks by its turn check, which waits on the turn row another
    transaction holds."""
    from sqlalchemy.engine import make_url

    from hermes_store.errors import SessionNotFound
    from hermes_store.repositories.messages import MessageRepository
    from hermes_store.repositories.turns import TurnRepository

    url = pg_store.url.render_as_string(hide_password=False)
    dbname = str(make_url(url).database)
    token = TurnRepository(pg_store).acquire_turn("x", "worker", 300)
    messages = MessageRepository(pg_store)

    creator = _psycopg(url)
    turn_holder = _psycopg(url)
    appender = _psycopg(url)  # another writer, holding the row lock as an append does
    watcher = _psycopg(url)
    watcher.autocommit = True
    outcome: dict[str, Any] = {}

    def append() -> None:
        try:
            if batch:
                outcome["ids"] = messages.append_messages(
                    "x", [{"role": "user", "content": "racing"}] * 2, turn_token=token
                )
            else:
                outcome["ids"] = [messages.append_message("x", "user", "racing", turn_token=token)]
        except BaseException as exc:  # noqa: BLE001 (inspected by the test)
            outcome["error"] = exc

    thread = threading.Thread(target=append)
    try:
        turn_holder.execute("SELECT 1 FROM hermes_store_turns WHERE session_id = 'x' FOR UPDATE")
        creator.execute(
            "INSERT INTO sessions (id, source, started_at)"
            " VALUES ('x', 'cli', extract(epoch from now()))"
        )
        thread.start()
        # past its row lock (which found nothing to lock), waiting at its turn check
        assert _wait_for(lambda: _blocked_by(watcher, dbname, turn_holder), thread), outcome
        creator.commit()
        appender.execute("SELECT 1 FROM sessions WHERE id = 'x' FOR UPDATE")
        first = appender.execute(
            "INSERT INTO messages (session_id, role, content, timestamp)"
            " VALUES ('x', 'user', 'holder 1', 0) RETURNING id"
        ).fetchone()[0]
        turn_holder.commit()
        # Unfixed, the append inserts and then waits on the lock holder's row lock to
        # update the counters; fixed, it has refused by now.
        _wait_for(lambda: _blocked_by(watcher, dbname, appender), thread)
        last = appender.execute(
            "INSERT INTO messages (session_id, role, content, timestamp)"
            " VALUES ('x', 'user', 'holder 2', 0) RETURNING id"
        ).fetchone()[0]
        appender.commit()
        thread.join(timeout=60)
        assert not thread.is_alive()
    finally:
        for conn in (creator, turn_holder, appender, watcher):
            conn.close()

    between = [i for i in outcome.get("ids", []) if first < i < last]
    assert not between, f"appended {between} between the lock holder's {first} and {last}"
    assert isinstance(outcome.get("error"), SessionNotFound), outcome
    assert [m["content"] for m in messages.get_messages("x")] == ["holder 1", "holder 2"]


def test_a_lease_taken_as_its_session_is_created_holds_the_session_row(pg_store: Any) -> None:
    """A compression lease's row lock finds no session (its creator has not committed),
    then the creator commits before the lease's next statement: the lease must lock the
    session it now sees, so that an append cannot run beside the lease's transaction
    and miss the lease. The creator commits right after the first lock statement; the
    session row must be locked when the lease is written."""
    import psycopg
    from sqlalchemy import event

    from hermes_store.repositories.coordination import CompressionLockRepository

    url = pg_store.url.render_as_string(hide_password=False)
    creator = _psycopg(url)
    watcher = _psycopg(url)
    watcher.autocommit = True
    seen: dict[str, Any] = {"locks": 0, "held_at_insert": None}

    def after(*args: Any) -> None:
        statement = args[2]
        if "FROM sessions" in statement and "FOR UPDATE" in statement:
            seen["locks"] += 1
            if seen["locks"] == 1:
                creator.commit()  # the session appears between the lock and the check

    def before(*args: Any) -> None:
        if args[2].lstrip().upper().startswith("INSERT INTO COMPRESSION_LOCKS"):
            try:
                watcher.execute("SELECT 1 FROM sessions WHERE id = 'x' FOR UPDATE NOWAIT")
                seen["held_at_insert"] = False
            except psycopg.errors.LockNotAvailable:
                seen["held_at_insert"] = True

    creator.execute(
        "INSERT INTO sessions (id, source, started_at)"
        " VALUES ('x', 'cli', extract(epoch from now()))"
    )
    event.listen(pg_store.engine, "after_cursor_execute", after)
    event.listen(pg_store.engine, "before_cursor_execute", before)
    try:
        assert CompressionLockRepository(pg_store).try_acquire("x", "worker")
    finally:
        event.remove(pg_store.engine, "after_cursor_execute", after)
        event.remove(pg_store.engine, "before_cursor_execute", before)
        creator.close()
        watcher.close()
    assert seen == {"locks": 2, "held_at_insert": True}
