"""The original's internals that Hermes's own modules use: `SessionDB._conn`, `_lock` and
`_execute_write` (issue 14, part 1), on real SQLite files; on PostgreSQL one clear error."""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from helpers.databases import sqlite_connect

from hermes_store.compat import SessionDB
from hermes_store.config import JOURNAL_ENV, JournalPolicy
from hermes_store.errors import SQLiteOnly
from hermes_store.runtime.engine import wal_reset_vulnerable
from hermes_store.sqlite import driver
from hermes_store.store import Store


@pytest.fixture
def db(tmp_path: Path) -> Iterator[SessionDB]:
    handle = SessionDB(tmp_path / "state.db")
    yield handle
    handle.close()


def test_conn_is_set_up_as_the_originals(db: SessionDB) -> None:
    conn = db._conn
    # a connection of the SQLite library this process drives (the standard library's or
    # pysqlite3's, whose classes share the names but not the types)
    assert isinstance(conn, driver.Connection)
    assert conn is db._conn  # one connection for the life of the handle
    assert conn.row_factory is driver.module_of(conn).Row
    assert conn.isolation_level is None  # autocommit: transactions are explicit
    # the original's choice for a new file: DELETE on SQLite builds with the WAL-reset bug
    expected = "delete" if wal_reset_vulnerable() else "wal"
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == expected
    assert conn.execute("PRAGMA foreign_keys").fetchone()[0] == 1
    assert conn.execute("PRAGMA busy_timeout").fetchone()[0] == 1000
    # check_same_thread=False: usable from another thread, as the gateway does
    seen: list[object] = []
    worker = threading.Thread(target=lambda: seen.append(conn.execute("SELECT 1").fetchone()[0]))
    worker.start()
    worker.join()
    assert seen == [1]


@pytest.mark.parametrize("mode", ["wal", "delete"])
def test_conn_keeps_the_files_journal_mode(
    tmp_path: Path, mode: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(JOURNAL_ENV, mode)  # kept: a fixed SQLite would make DELETE WAL
    path = tmp_path / "state.db"
    Store(path, journal=JournalPolicy(mode=mode), check_schema=False).close()  # type: ignore[arg-type]
    handle = SessionDB(path)
    try:
        assert handle._conn is not None
        assert handle._conn.execute("PRAGMA journal_mode").fetchone()[0] == mode
    finally:
        handle.close()


def test_sql_on_conn_and_the_repositories_see_each_other(db: SessionDB) -> None:
    db.create_session("s1", "cli")
    db.append_message("s1", "user", "hello")
    conn = db._conn
    assert conn is not None
    row = conn.execute("SELECT id, message_count FROM sessions WHERE id = ?", ("s1",)).fetchone()
    assert dict(row) == {"id": "s1", "message_count": 1}
    # a raw UPDATE, as the CLI's resume does, with the original's habitual commit()
    conn.execute("UPDATE sessions SET ended_at = 5.0, end_reason = 'x' WHERE id = 's1'")
    conn.commit()
    session = db.get_session("s1")
    assert session is not None and session["end_reason"] == "x"
    db.reopen_session("s1")
    assert conn.execute("SELECT end_reason FROM sessions WHERE id = 's1'").fetchone()[0] is None


def test_execute_write_commits_returns_and_rolls_back(db: SessionDB) -> None:
    def create(conn: sqlite3.Connection) -> int:
        assert conn is db._conn and conn.in_transaction
        conn.execute("INSERT INTO sessions (id, source, started_at) VALUES ('w', 'api', 1.0)")
        return 7

    assert db._execute_write(create) == 7
    assert db.get_session("w") is not None

    def fail(conn: sqlite3.Connection) -> None:
        conn.execute("INSERT INTO sessions (id, source, started_at) VALUES ('gone', 'api', 1)")
        raise RuntimeError("boom")

    with pytest.raises(RuntimeError, match="boom"):
        db._execute_write(fail)
    assert db.get_session("gone") is None
    assert db._conn is not None and not db._conn.in_transaction
    # an SQL error reaches the caller as the driver's own error, as in the original
    with pytest.raises(driver.OperationalError, match="no such table"):
        db._execute_write(lambda conn: conn.execute("SELECT * FROM nowhere"))


def test_execute_write_waits_out_another_processes_write_lock(db: SessionDB) -> None:
    assert db.db_path is not None
    holder = sqlite_connect(db.db_path, isolation_level=None, check_same_thread=False)
    holder.execute("BEGIN IMMEDIATE")
    locked = threading.Event()

    def release_later() -> None:
        locked.set()
        # longer than one 1 s busy timeout: only the retry policy gets the write through
        threading.Event().wait(1.5)
        holder.execute("COMMIT")

    releaser = threading.Thread(target=release_later)
    releaser.start()
    locked.wait()
    try:
        db._execute_write(
            lambda conn: conn.execute(
                "INSERT INTO sessions (id, source, started_at) VALUES ('late', 'api', 1)"
            )
        )
    finally:
        releaser.join()
        holder.close()
    assert db.get_session("late") is not None


def test_lock_is_the_one_the_facades_writes_hold(db: SessionDB) -> None:
    done = threading.Event()

    def write() -> None:
        db.set_meta("k", "v")
        done.set()

    with db._lock:
        writer = threading.Thread(target=write)
        writer.start()
        assert not done.wait(0.3)  # the write waits for the lock
    writer.join()
    assert done.is_set() and db.get_meta("k") == "v"


def test_conn_is_none_after_close(tmp_path: Path) -> None:
    handle = SessionDB(tmp_path / "state.db")
    conn = handle._conn
    handle.close()
    assert handle._conn is None
    with pytest.raises(driver.ProgrammingError):
        assert conn is not None
        conn.execute("SELECT 1")


def test_read_only_handle_has_a_read_only_conn(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    writer = SessionDB(path)
    writer.create_session("s1", "cli")
    writer.close()
    reader = SessionDB(path, read_only=True)
    try:
        assert reader._conn is not None
        assert reader._conn.execute("SELECT COUNT(*) FROM sessions").fetchone()[0] == 1
        with pytest.raises(driver.OperationalError, match="readonly"):
            reader._conn.execute("DELETE FROM sessions")
    finally:
        reader.close()


def test_on_postgresql_the_internals_raise_one_clear_error(pg_fresh_db: str) -> None:
    handle = SessionDB(url=pg_fresh_db)
    try:
        for name, instead in (
            ("_conn", "db.store.read()"),
            ("_lock", "db.store.write(fn)"),
            ("_execute_write", "db.store.write(fn)"),
        ):
            with pytest.raises(SQLiteOnly) as caught:
                attribute = getattr(handle, name)
                attribute(lambda conn: None)  # only the method gets this far
            message = str(caught.value)
            assert f"SessionDB.{name}" in message and "PostgreSQL" in message
            assert instead in message
        # an AttributeError, so probing code falls back instead of failing
        assert getattr(handle, "_conn", None) is None
        handle.create_session("s1", "cli")  # the public API is unaffected
        assert handle.get_session("s1") is not None
    finally:
        handle.close()


def test_a_repointed_default_path_is_honoured(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, hermes_home: Path
) -> None:
    import hermes_store.compat as compat

    elsewhere = tmp_path / "elsewhere" / "state.db"
    monkeypatch.setattr(compat, "DEFAULT_DB_PATH", elsewhere)
    handle = SessionDB()
    try:
        assert handle.db_path == elsewhere and elsewhere.exists()
    finally:
        handle.close()
    assert not (hermes_home / "state.db").exists()


def test_module_state_hermes_tests_reset(tmp_path: Path) -> None:
    import hermes_store.compat as compat

    compat._last_init_error = "cause"  # the module state Hermes's tests set
    assert compat.get_last_init_error() == "cause"
    compat._last_init_error = None
    assert compat.format_session_db_unavailable() == "Session database not available."
    compat._repair_attempted_paths.clear()  # what Hermes's repair tests do between cases
    assert compat.load_fts5_cjk_extension(sqlite3.connect(":memory:")) is False
    assert compat.fts5_cjk_so_path().name == "libfts5_cjk.so"
