"""Opening a database waits out another process's lock instead of failing after one busy
timeout (a gateway restarting while eight agents write must not crash on open)."""

from __future__ import annotations

import sqlite3
import threading
import time
from pathlib import Path

import pytest
from helpers.databases import set_journal_mode

from hermes_store import migrate
from hermes_store.compat import SessionDB

pytestmark = pytest.mark.sqlite_only


def _hold_exclusive(path: Path, seconds: float, held: threading.Event) -> None:
    # EXCLUSIVE keeps other writers out in both modes, and in DELETE mode readers too,
    # which is what a committing writer does to an opening process for a moment
    con = sqlite3.connect(str(path), isolation_level=None)
    try:
        con.execute("BEGIN EXCLUSIVE")
        con.execute("INSERT INTO state_meta (key, value) VALUES ('held', '1')")
        held.set()
        time.sleep(seconds)
        con.execute("COMMIT")
    finally:
        con.close()


def test_open_waits_for_an_exclusive_lock_longer_than_the_busy_timeout(
    tmp_path: Path, journal: str
) -> None:
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
