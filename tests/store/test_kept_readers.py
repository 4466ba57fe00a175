"""SQLite reads keep their connection for the next read (store.py, `Store._reader`): one
pool checkout for a run of reads on one thread, an idle kept connection holding no lock,
a failed read's connection given back to the pool, and every kept connection closed by
`Store.dispose` and `Store.close`. On both SQLite drivers and in both journal modes.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import event, text
from sqlalchemy.exc import OperationalError
from sqlalchemy.pool import QueuePool

from hermes_store.repositories.messages import MessageRepository
from hermes_store.repositories.sessions import SessionRepository
from hermes_store.runtime.engine import make_engine
from hermes_store.sqlite import driver as sqlite_driver
from hermes_store.store import KEPT_READERS, Store

pytestmark = pytest.mark.usefixtures("sqlite_driver")


def _pool_events(store: Store) -> dict[str, int]:
    counts = {"checkout": 0, "checkin": 0}

    def count(name: str) -> Any:
        def listener(*_args: Any) -> None:
            counts[name] += 1

        return listener

    for name in counts:
        event.listen(store.engine, name, count(name))
    return counts


def _open_descriptors(path: Path) -> int:
    """How many of this process's file descriptors are open on `path`."""
    target = path.resolve()
    found = 0
    for fd in os.listdir("/proc/self/fd"):
        try:
            if Path(os.readlink(f"/proc/self/fd/{fd}")) == target:
                found += 1
        except OSError:
            continue
    return found


def _lock_free(path: Path) -> bool:
    """Whether another connection takes the EXCLUSIVE lock at once: no connection of the
    store holds a read lock (in DELETE mode a shared lock; in WAL an EXCLUSIVE
    transaction is refused only by another writer, so this checks the write lock)."""
    other = sqlite_driver.current().module.connect(str(path), timeout=0, isolation_level=None)
    try:
        other.execute("BEGIN EXCLUSIVE")
        other.execute("ROLLBACK")
        return True
    except sqlite_driver.OperationalError:
        return False
    finally:
        other.close()


def test_reads_on_one_thread_check_out_once_and_hold_no_lock(journal_db: str) -> None:
    path = Path(journal_db.removeprefix("sqlite:///"))
    with Store(journal_db) as store:
        SessionRepository(store).create_session("s1", "cli")
        MessageRepository(store).append_message("s1", "user", "hello")
        store.read(lambda conn: None)  # a connection is kept from here on
        events = _pool_events(store)
        messages = MessageRepository(store)
        for _ in range(5):
            assert [m["content"] for m in messages.get_newest_messages("s1", 20)] == ["hello"]
            assert len(messages.get_messages_as_conversation("s1")) == 1
            with store.read() as conn:
                assert conn.execute(text("SELECT count(*) FROM messages")).scalar() == 1
            assert _lock_free(path)
        assert events == {"checkout": 0, "checkin": 0}

        # a failed read gives its connection back to the pool, which resets it; the
        # next read checks one out and works
        def failing(conn: Any) -> None:
            conn.execute(text("SELECT * FROM no_such_table"))

        with pytest.raises(OperationalError):
            store.read(failing)
        assert events == {"checkout": 0, "checkin": 1}
        assert _lock_free(path)
        with pytest.raises(ZeroDivisionError), store.read() as conn:
            conn.execute(text("SELECT 1"))
            1 / 0  # noqa: B018 (the block fails outside the database)
        assert events == {"checkout": 1, "checkin": 2}
        assert messages.get_newest_messages("s1", 20)[0]["content"] == "hello"
        assert events == {"checkout": 2, "checkin": 2}
        assert _lock_free(path)


def test_concurrent_readers_keep_at_most_kept_readers(journal_db: str) -> None:
    """Threads that read at once each have a connection of their own; afterwards at most
    KEPT_READERS stay out of the pool, and writes still find one."""
    with Store(journal_db) as store:
        SessionRepository(store).create_session("s1", "cli")
        store.dispose()  # the read that opened the store kept a connection: none now
        events = _pool_events(store)
        threads = KEPT_READERS + 3
        inside = threading.Barrier(threads)
        seen: list[int] = []

        def read(conn: Any) -> None:
            seen.append(id(conn.connection.driver_connection))
            inside.wait(timeout=30)  # every thread holds its connection at once
            conn.execute(text("SELECT count(*) FROM sessions")).scalar()

        workers = [threading.Thread(target=store.read, args=(read,)) for _ in range(threads)]
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join(timeout=60)
        assert len(set(seen)) == threads
        assert events["checkout"] - events["checkin"] == KEPT_READERS
        MessageRepository(store).append_message("s1", "user", "after")


def test_dispose_and_close_close_the_kept_connections(journal_db: str) -> None:
    path = Path(journal_db.removeprefix("sqlite:///"))
    store = Store(journal_db)
    try:
        assert store.read(lambda conn: conn.execute(text("SELECT 1")).scalar()) == 1
        assert _open_descriptors(path) >= 1
        store.dispose()
        assert _open_descriptors(path) == 0
        # the store stays open: its next read connects again
        assert store.read(lambda conn: conn.execute(text("SELECT 2")).scalar()) == 2
        assert _open_descriptors(path) >= 1
    finally:
        store.close()
    assert _open_descriptors(path) == 0


def test_a_store_on_a_callers_engine_checks_out_per_read(journal_db: str) -> None:
    """The caller's pool may be too small to spare a connection (or bound to threads):
    its connections go back after every read."""
    engine = make_engine(journal_db, poolclass=QueuePool, pool_size=1, max_overflow=0)
    try:
        store = Store(journal_db, engine=engine)
        events = _pool_events(store)
        for _ in range(3):
            store.read(lambda conn: conn.execute(text("SELECT 1")).scalar())
        assert events == {"checkout": 3, "checkin": 3}
        SessionRepository(store).create_session("s1", "cli")  # the one connection is free
        store.close()
    finally:
        engine.dispose()


def test_options_a_read_sets_do_not_reach_the_next_read(journal_db: str) -> None:
    """A Connection's execution options change in place: a connection a read set options
    on goes back to the pool instead of being kept for the next read."""
    with Store(journal_db) as store:
        with store.read() as conn:
            conn.execution_options(hermes_test_option=True)
        with store.read() as conn:
            assert "hermes_test_option" not in conn.get_execution_options()


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_a_forked_child_opens_its_own_connections(journal_db: str) -> None:
    """SQLite forbids using a handle across fork: the child reads and writes through
    connections of its own, not the parent's kept reader or writer, and the parent's go
    on working."""
    with Store(journal_db) as store:
        sessions, messages = SessionRepository(store), MessageRepository(store)
        sessions.create_session("s1", "cli")
        messages.append_message("s1", "user", "parent")  # keeps the writer connection

        def handle(conn: Any) -> int:
            return id(conn.connection.driver_connection)

        parent_reader = store.read(handle)  # keeps this reader
        assert store.read(handle) == parent_reader
        read_end, write_end = os.pipe()
        pid = os.fork()
        if pid == 0:  # the child: report, never return into pytest
            code = 1
            try:
                os.close(read_end)
                child_reader = store.read(handle)
                messages.append_message("s1", "user", "child")
                count = len(messages.get_messages("s1"))
                os.write(write_end, f"{child_reader != parent_reader} {count}".encode())
                code = 0
            finally:
                os._exit(code)
        os.close(write_end)
        with os.fdopen(read_end) as answer:
            reported = answer.read()
        _, status = os.waitpid(pid, 0)
        assert os.WEXITSTATUS(status) == 0
        assert reported == "True 2"
        assert store.read(handle) == parent_reader
        messages.append_message("s1", "user", "parent again")
        assert [m["content"] for m in messages.get_messages("s1")] == [
            "parent",
            "child",
            "parent again",
        ]
