"""A plain SQLite append sent at the driver of the store's kept writer
(runtime/engine.py's `commit_at_driver`): the statements SQLite receives, no SQLAlchemy
transaction, and the same outcomes as through a Connection (refusals, lock contention,
the checkpoint, a forked child). On both SQLite drivers and both journal modes.

What reaches SQLite is read from SQLite itself (the driver's trace callback, set on each
connection as it opens); whether SQLAlchemy built a transaction, from `Connection.begin`
(a listener on the engine's begin event would itself send the append through a
Connection, as listeners on statements do)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from helpers.statements import counted_begins
from sqlalchemy import Connection, event, insert, text

from hermes_store.errors import (
    CompressionSessionBusyError,
    CompressionSessionClosedError,
    DatabaseLocked,
    InvalidInput,
    SessionNotFound,
)
from hermes_store.repositories._tables import LOCKS
from hermes_store.repositories.messages import MessageRepository
from hermes_store.repositories.sessions import SessionRepository
from hermes_store.runtime.retry import RetryPolicy
from hermes_store.store import Store

pytestmark = pytest.mark.usefixtures("sqlite_driver")


class Traced:
    """Every statement SQLite starts on the store's connections opened from now on (the
    driver's trace callback; the triggers a statement fires left out), per connection."""

    def __init__(self, store: Store) -> None:
        self.by_connection: dict[int, list[str]] = {}
        event.listen(store.engine, "connect", self._trace)
        # the connections opened so far (the schema check's) close: every later one is
        # opened, and traced, from here on
        store.dispose()

    def _trace(self, dbapi_conn: Any, _record: Any) -> None:
        statements = self.by_connection.setdefault(id(dbapi_conn), [])

        def record(statement: str) -> None:
            statements.append(" ".join(statement.split()))

        dbapi_conn.set_trace_callback(record)

    def all(self) -> list[str]:
        """Each statement once: every trigger a statement fires reports the statement
        again (or a comment naming the trigger)."""
        found = []
        for statements in self.by_connection.values():
            previous = None
            for statement in statements:
                if not statement.startswith("--") and statement != previous:
                    found.append(statement)
                    previous = statement
        return found

    def count(self, statement: str) -> int:
        """How many times SQLite started `statement` (one without triggers)."""
        return sum(sent.count(statement) for sent in self.by_connection.values())

    def clear(self) -> None:
        for statements in self.by_connection.values():
            statements.clear()


@pytest.fixture
def store(journal_db: str) -> Iterator[Store]:
    with Store(journal_db) as opened:
        yield opened


@pytest.fixture
def begins(monkeypatch: pytest.MonkeyPatch, store: Store) -> list[Connection]:
    return counted_begins(monkeypatch, store)


@pytest.fixture
def traced(store: Store) -> Traced:
    """The store's statements, from before its first write on, which creates session s1."""
    found = Traced(store)
    SessionRepository(store).create_session("s1", "cli")
    return found


def path_of(store: Store) -> Path:
    database = store.engine.url.database
    assert database is not None
    return Path(database)


def test_an_append_sends_begin_insert_counters_and_commit_at_the_driver(
    store: Store, traced: Traced, begins: list[Connection]
) -> None:
    messages = MessageRepository(store)
    messages.append_message("s1", "user", "warm")  # opens the writer connection
    traced.clear()
    begins.clear()
    first = messages.append_message("s1", "user", "hello")
    second = messages.append_message("s1", "assistant", "hi", tool_calls=[{"id": "c1"}])
    statements = traced.all()
    assert len(statements) == 8, statements
    for sent in (statements[:4], statements[4:]):
        assert sent[0] == "BEGIN IMMEDIATE"
        assert sent[1].startswith("INSERT INTO messages") and "FROM sessions" in sent[1]
        assert sent[2].startswith("UPDATE sessions SET message_count")
        assert sent[3] == "COMMIT"
    assert begins == []  # no SQLAlchemy transaction
    assert second == first + 1
    got = messages.get_messages("s1")
    assert [m["content"] for m in got] == ["warm", "hello", "hi"]
    with store.read() as conn:
        counts = conn.execute(
            text("SELECT message_count, tool_call_count FROM sessions WHERE id = 's1'")
        ).one()
    assert tuple(counts) == (3, 1)


def test_a_listener_on_statements_sees_the_append_through_a_connection(
    store: Store, traced: Traced, begins: list[Connection]
) -> None:
    seen: list[str] = []

    def record(_conn: Any, _cursor: Any, statement: str, *_rest: Any) -> None:
        seen.append(statement.split()[0])

    event.listen(store.engine, "before_cursor_execute", record)
    try:
        MessageRepository(store).append_message("s1", "user", "watched")
    finally:
        event.remove(store.engine, "before_cursor_execute", record)
    assert seen == ["BEGIN", "INSERT", "UPDATE"]
    assert len(begins) == 1
    begins.clear()
    MessageRepository(store).append_message("s1", "user", "unwatched again")
    assert begins == []


def add_lock(store: Store, sid: str, holder: str) -> None:
    at = time.time()
    store.write(
        lambda conn: conn.execute(
            insert(LOCKS).values(session_id=sid, holder=holder, acquired_at=at, expires_at=at + 300)
        )
    )


def close_by_compression(store: Store, sid: str) -> None:
    store.write(
        lambda conn: conn.execute(
            text("UPDATE sessions SET ended_at = :t, end_reason = 'compression' WHERE id = :i"),
            {"t": time.time(), "i": sid},
        )
    )


def test_refusals_raise_the_same_errors_in_the_same_order(store: Store, traced: Traced) -> None:
    messages = MessageRepository(store)
    sessions = SessionRepository(store)
    with pytest.raises(SessionNotFound):
        messages.append_message("nope", "user", "x")
    with pytest.raises(SessionNotFound):  # the checks before the value's refusal
        messages.append_message("nope", "user", object())
    sessions.create_session("closed", "cli")
    close_by_compression(store, "closed")
    with pytest.raises(CompressionSessionClosedError):
        messages.append_message("closed", "user", "x")
    add_lock(store, "closed", "other")
    with pytest.raises(CompressionSessionBusyError):  # the lease before the closed state
        messages.append_message("closed", "user", "x")
    add_lock(store, "s1", "other")
    with pytest.raises(CompressionSessionBusyError):
        messages.append_message("s1", "user", "x")
    with pytest.raises(CompressionSessionBusyError):
        messages.append_message("s1", "user", object())
    with pytest.raises(InvalidInput):
        messages.append_message("s1", "user", object(), compression_lock_holder="other")
    assert messages.append_message("s1", "user", "mine", compression_lock_holder="other") > 0
    with store.read() as conn:
        stored = conn.execute(text("SELECT session_id, content FROM messages")).all()
        counts = conn.execute(text("SELECT id, message_count FROM sessions ORDER BY id")).all()
    assert [tuple(row) for row in stored] == [("s1", "mine")]
    assert [tuple(row) for row in counts] == [("closed", 0), ("s1", 1)]
    # the writer is left usable after every refusal
    assert messages.append_message("s1", "user", "more", compression_lock_holder="other") > 0


@contextmanager
def write_lock_held(path: Path, seconds: float) -> Iterator[None]:
    """Another process holding the file's write lock for `seconds` from when the block
    starts (SQLite's locks are the process's own: a connection of this process, on a
    second SQLite library, would not see them)."""
    holder = subprocess.Popen(
        [sys.executable, "-c", _HOLD, str(path), str(seconds)],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None
        assert holder.stdout.readline().strip() == "held"
        yield
    finally:
        assert holder.wait(timeout=30) == 0


_HOLD = """
import sqlite3, sys, time
conn = sqlite3.connect(sys.argv[1], isolation_level=None)
conn.execute("BEGIN IMMEDIATE")
print("held", flush=True)
time.sleep(float(sys.argv[2]))
conn.execute("COMMIT")
"""


def test_lock_contention_is_waited_out_at_the_driver(
    store: Store, traced: Traced, begins: list[Connection]
) -> None:
    messages = MessageRepository(store)
    messages.append_message("s1", "user", "warm")
    begins.clear()
    # past one busy timeout (1 s): the append's first attempt fails on the lock
    with write_lock_held(path_of(store), 1.5):
        started = time.monotonic()
        messages.append_message("s1", "user", "after the lock")
        assert time.monotonic() - started >= 1.0
    assert begins == []
    assert [m["content"] for m in messages.get_messages("s1")] == ["warm", "after the lock"]


_HOLD_AND_TELL = """
import sqlite3, sys, time
conn = sqlite3.connect(sys.argv[1], isolation_level=None)
conn.execute("BEGIN IMMEDIATE")
print("held", flush=True)
time.sleep(float(sys.argv[2]))
print(repr(time.time()), flush=True)
conn.execute("COMMIT")
"""


def test_an_append_that_waited_for_the_lock_takes_its_time_after_it(store: Store) -> None:
    # ids and times rise together across processes: the time is taken under the write
    # lock, as a unit of work takes it, not before waiting for it
    SessionRepository(store).create_session("s1", "cli")
    messages = MessageRepository(store)
    messages.append_message("s1", "user", "warm")
    holder = subprocess.Popen(
        [sys.executable, "-c", _HOLD_AND_TELL, str(path_of(store)), "0.5"],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert holder.stdout is not None
    assert holder.stdout.readline().strip() == "held"
    messages.append_message("s1", "user", "after the lock")
    released = float(holder.stdout.readline())
    assert holder.wait(timeout=30) == 0
    assert messages.get_messages("s1")[-1]["timestamp"] >= released


def test_lock_contention_past_the_retry_is_database_locked(journal_db: str) -> None:
    quick = RetryPolicy(attempts=2, min_sleep=0.01, max_sleep=0.02)
    with Store(journal_db, retry=quick) as store:
        SessionRepository(store).create_session("s1", "cli")
        messages = MessageRepository(store)
        with write_lock_held(path_of(store), 4.0):
            with pytest.raises(DatabaseLocked):
                messages.append_message("s1", "user", "refused")
        messages.append_message("s1", "user", "after")  # the writer is usable
        assert [m["content"] for m in messages.get_messages("s1")] == ["after"]


def test_the_checkpoint_runs_every_nth_write(journal_db: str) -> None:
    with Store(journal_db, checkpoint_every=5) as store:
        traced = Traced(store)
        SessionRepository(store).create_session("s1", "cli")  # write 1
        messages = MessageRepository(store)
        for n in range(13):  # writes 2 to 14
            messages.append_message("s1", "user", f"m{n}")
            assert traced.count("PRAGMA wal_checkpoint(PASSIVE)") == (n + 2) // 5, n
        assert store.writes == 14


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_a_forked_child_appends_on_a_connection_of_its_own(store: Store, traced: Traced) -> None:
    messages = MessageRepository(store)
    messages.append_message("s1", "user", "parent")  # the parent's writer connection
    parents = set(traced.by_connection)
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: report, never return into pytest
        code = 1
        try:
            os.close(read_end)
            traced.clear()
            messages.append_message("s1", "user", "child")
            on = [key for key, sent in traced.by_connection.items() if "COMMIT" in sent]
            own = bool(on) and not set(on) & parents
            os.write(write_end, f"{own}".encode())
            code = 0
        finally:
            os._exit(code)
    os.close(write_end)
    with os.fdopen(read_end) as answer:
        reported = answer.read()
    _, status = os.waitpid(pid, 0)
    assert os.WEXITSTATUS(status) == 0
    assert reported == "True"
    messages.append_message("s1", "user", "parent again")
    contents = [m["content"] for m in messages.get_messages("s1")]
    assert contents == ["parent", "child", "parent again"]
