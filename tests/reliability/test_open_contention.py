"""Opening a database waits out another process's lock instead of failing after one busy
timeout (a gateway restarting while eight agents write must not crash on open)."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from helpers.databases import journal_mode, set_journal_mode, sqlite_connect

from hermes_store import MessageRepository, SessionRepository, Store, migrate
from hermes_store.compat import SessionDB
from hermes_store.config import JOURNAL_ENV, JournalPolicy
from hermes_store.errors import DatabaseLocked
from hermes_store.runtime.retry import RetryPolicy
from hermes_store.sqlite import driver

pytestmark = pytest.mark.sqlite_only


def _hold_exclusive(path: Path, seconds: float, held: threading.Event) -> None:
    # EXCLUSIVE keeps other writers out in both modes, and in DELETE mode readers too,
    # which is what a committing writer does to an opening process for a moment
    # through the driver under test: another SQLite library in this process would not
    # see the store's locks, nor the store its
    con = sqlite_connect(path, isolation_level=None)
    try:
        con.execute("BEGIN EXCLUSIVE")
        con.execute("INSERT INTO state_meta (key, value) VALUES ('held', '1')")
        held.set()
        time.sleep(seconds)
        con.execute("COMMIT")
    finally:
        con.close()


def test_open_waits_for_an_exclusive_lock_longer_than_the_busy_timeout(
    tmp_path: Path, journal: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(JOURNAL_ENV, journal)  # kept: a fixed SQLite would make it WAL
    path = tmp_path / "state.db"
    migrate.upgrade(str(path), fts_min_pause=0)
    set_journal_mode(path, journal)
    db = SessionDB(path)
    db.create_session("s1", "cli")
    db.close()
    held = threading.Event()
    holder = threading.Thread(target=_hold_exclusive, args=(path, 6.5, held))
    holder.start()
    try:
        assert held.wait(10)
        started = time.monotonic()
        # longer than the engine's 1 s busy timeout and the driver's default 5 s: the
        # open (DELETE mode) or its first write (WAL mode, where reads go on) waits
        db = SessionDB(path)
        try:
            db.append_message("s1", "user", "after the wait")
            waited = time.monotonic() - started
            assert [m["content"] for m in db.get_messages("s1")] == ["after the wait"]
            assert db.get_meta("held") == "1"  # the holder's transaction committed first
        finally:
            db.close()
    finally:
        holder.join()
    assert waited > 5.0, "the open did not meet the lock; the test proves nothing"


#: A process that holds the write lock (BEGIN IMMEDIATE, through the driver under test)
#: with a row of its own written, prints "held", and commits when a line arrives on its
#: standard input.
_LOCK_HOLDER = """
import sys
from hermes_store.sqlite import driver

con = driver.current().connect(sys.argv[1], isolation_level=None)
con.execute("BEGIN IMMEDIATE")
con.execute("INSERT INTO state_meta (key, value) VALUES ('held', '1')")
print("held", flush=True)
sys.stdin.readline()
con.execute("COMMIT")
con.close()
"""


def _hold_write_lock(path: Path) -> subprocess.Popen[str]:
    holder = subprocess.Popen(
        [sys.executable, "-c", _LOCK_HOLDER, str(path)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert holder.stdout is not None
    assert holder.stdout.readline().strip() == "held"
    return holder


def _release(holder: subprocess.Popen[str]) -> None:
    if holder.poll() is None:
        assert holder.stdin is not None
        holder.stdin.write("release\n")
        holder.stdin.flush()
    assert holder.wait(30) == 0


@pytest.fixture
def delete_mode_db(tmp_path: Path) -> Path:
    path = tmp_path / "state.db"
    migrate.upgrade(str(path), fts_min_pause=0)
    set_journal_mode(path, "delete")
    store = Store(str(path), journal=JournalPolicy(mode="delete"))
    try:
        SessionRepository(store).create_session("s1", "cli")
    finally:
        store.close()
    return path


def test_the_switch_to_wal_waits_out_another_process_write_lock(
    delete_mode_db: Path, sqlite_driver: str
) -> None:
    # WAL asked for explicitly, so that both drivers switch (the automatic choice does on
    # pysqlite3). SQLite refuses the switch at once while another process holds the write
    # lock, whatever the busy timeout: the store opens, reads and writes in DELETE mode
    # meanwhile, waiting as any write there does, and switches once the lock is gone.
    path = delete_mode_db
    holder = _hold_write_lock(path)
    try:
        store = Store(str(path), journal=JournalPolicy(mode="wal"))
        try:
            messages = MessageRepository(store)
            assert messages.get_messages("s1") == []  # reading goes on beside the lock
            # released well inside the write's retry (15 attempts of a 1 s busy timeout)
            release = threading.Timer(3.0, _release, args=(holder,))
            release.start()
            try:
                messages.append_message("s1", "user", "after the lock")
            finally:
                release.join()
            messages.append_message("s1", "user", "in WAL mode")
            assert [m["content"] for m in messages.get_messages("s1")] == [
                "after the lock",
                "in WAL mode",
            ]
        finally:
            store.close()
    finally:
        _release(holder)
    assert journal_mode(path) == "wal"
    con = driver.current().connect(str(path))
    try:
        held = con.execute("SELECT value FROM state_meta WHERE key = 'held'").fetchall()
        assert held == [("1",)]  # the holder's transaction committed too
    finally:
        con.close()


def test_a_write_lock_never_released_is_a_typed_error(
    delete_mode_db: Path, sqlite_driver: str
) -> None:
    path = delete_mode_db
    holder = _hold_write_lock(path)
    try:
        store = Store(str(path), journal=JournalPolicy(mode="wal"), retry=RetryPolicy(attempts=2))
        try:
            with pytest.raises(DatabaseLocked, match="database is locked"):
                MessageRepository(store).append_message("s1", "user", "never written")
        finally:
            store.close()
    finally:
        _release(holder)
    assert journal_mode(path) == "delete"  # the store never had the file to itself
    store = Store(str(path), read_only=True)
    try:
        assert MessageRepository(store).get_messages("s1") == []
    finally:
        store.close()
