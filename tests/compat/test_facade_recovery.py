"""The original's module-level helpers for damaged files (issue 14, part 1): the health
probe `_db_opens_cleanly`, `repair_state_db_schema`, the zeroed-file check and quarantine,
and what a facade open does with such files. Real SQLite files, damaged by hand."""

from __future__ import annotations

import shutil
import sqlite3
from pathlib import Path

import pytest
from helpers.databases import sqlite_connect

import hermes_store.sqlite.recovery as recovery
from hermes_store.compat import (
    SessionDB,
    _db_opens_cleanly,
    get_last_init_error,
    is_zeroed_state_db,
    quarantine_zeroed_state_db,
    repair_state_db_schema,
)
from hermes_store.errors import DatabaseCorrupt
from hermes_store.sqlite import driver


def make_db(path: Path) -> Path:
    db = SessionDB(path)
    db.create_session("s1", "cli")
    db.append_message("s1", "user", "hello world")
    db.close()
    return path


def duplicate_schema_row(path: Path) -> None:
    """The "table messages_fts already exists" damage: a second sqlite_master row."""
    con = sqlite_connect(path, isolation_level=None)
    con.execute("PRAGMA writable_schema=ON")
    con.execute("INSERT INTO sqlite_master SELECT * FROM sqlite_master WHERE name='messages_fts'")
    con.close()


def break_fts_structure(path: Path) -> None:
    """An FTS index whose structure record is garbage: the base tables read, the index
    refuses searches or writes, and a rebuild repairs it. SQLite 3.40 refuses writes once
    the record is 4 bytes of garbage (a longer one makes it fail to construct the table,
    which no rebuild repairs); newer SQLite (pysqlite3's) reads a record of those 4 bytes
    (its cookie) alone as an empty index, and is given a longer one, which it refuses as
    corrupt."""
    con = sqlite_connect(path, isolation_level=None)
    try:
        for garbage in ("FFFFFFFF", "FFFFFFFFFFFFFFFFFFFF"):
            con.execute(f"UPDATE messages_fts_data SET block = X'{garbage}' WHERE id = 10")
            if _index_refused(con):
                return
        raise AssertionError("no garbage structure record made this SQLite refuse the index")
    finally:
        con.close()


def _index_refused(con: sqlite3.Connection) -> bool:
    try:
        con.execute("SELECT rowid FROM messages_fts WHERE messages_fts MATCH 'hello'").fetchall()
    except driver.DatabaseError:
        return True
    con.execute("BEGIN")
    try:
        con.execute(
            "INSERT INTO messages (session_id, role, content, timestamp) "
            "VALUES ('s1', 'user', 'probe', 1.0)"
        )
        return False
    except driver.DatabaseError:
        return True
    finally:
        if con.in_transaction:  # an error may have ended it already
            con.execute("ROLLBACK")


def backups(path: Path) -> list[Path]:
    return sorted(path.parent.glob(f"{path.name}.malformed-backup-*"))


def session_ids(path: Path) -> list[str]:
    con = sqlite_connect(f"file:{path}?mode=ro", uri=True)
    try:
        return [r[0] for r in con.execute("SELECT id FROM sessions ORDER BY id")]
    finally:
        con.close()


# --------------------------------------------------------------------------- probe


def test_probe_passes_a_healthy_file_and_names_each_kind_of_damage(tmp_path: Path) -> None:
    healthy = make_db(tmp_path / "state.db")
    assert _db_opens_cleanly(healthy) is None

    schema = shutil.copy(healthy, tmp_path / "schema.db")
    duplicate_schema_row(Path(schema))
    assert "malformed database schema (messages_fts)" in str(_db_opens_cleanly(schema))

    fts = shutil.copy(healthy, tmp_path / "fts.db")
    break_fts_structure(Path(fts))
    # base tables read fine; only the rolled-back write through the triggers fails
    assert session_ids(Path(fts)) == ["s1"]
    reason = _db_opens_cleanly(fts)
    assert reason is not None and reason != ""
    assert session_ids(Path(fts)) == ["s1"]  # the probe's write was rolled back


def test_probe_of_a_file_without_tables_is_not_damage(tmp_path: Path) -> None:
    path = tmp_path / "empty.db"
    sqlite3.connect(path).close()
    assert _db_opens_cleanly(path) is None


# --------------------------------------------------------------------------- repair


def test_repair_of_a_healthy_file_changes_nothing(tmp_path: Path) -> None:
    path = make_db(tmp_path / "state.db")
    before = path.read_bytes()
    report = repair_state_db_schema(path)
    assert report == {
        "repaired": True,
        "strategy": "already_healthy",
        "backup_path": None,
        "error": None,
    }
    assert path.read_bytes() == before and backups(path) == []


@pytest.mark.parametrize(
    ("damage", "strategy"),
    [(duplicate_schema_row, "dedup_schema"), (break_fts_structure, "rebuild_fts")],
)
def test_repair_backs_up_then_uses_the_least_destructive_fix(
    tmp_path: Path, damage: object, strategy: str
) -> None:
    path = make_db(tmp_path / "state.db")
    damage(path)  # type: ignore[operator]
    damaged = path.read_bytes()
    report = repair_state_db_schema(path)
    assert report["repaired"] is True and report["strategy"] == strategy
    assert report["error"] is None
    (backup,) = backups(path)
    assert report["backup_path"] == str(backup)
    assert backup.read_bytes() == damaged  # the bytes as they were, for a manual restore
    assert _db_opens_cleanly(path) is None
    assert session_ids(path) == ["s1"]
    db = SessionDB(path)
    try:
        assert db.search_messages("hello")[0]["session_id"] == "s1"
        db.append_message("s1", "user", "after the repair")  # writes go through again
    finally:
        db.close()


def test_repair_refuses_to_copy_a_file_this_process_holds_open(tmp_path: Path) -> None:
    path = make_db(tmp_path / "state.db")
    duplicate_schema_row(path)
    holder = open(path, "rb")  # noqa: SIM115 (held open across the call on purpose)
    try:
        report = repair_state_db_schema(path)
    finally:
        holder.close()
    assert report["repaired"] is False and report["backup_path"] is None
    assert "this process has it open" in report["error"]
    assert backups(path) == []
    assert "malformed database schema" in str(_db_opens_cleanly(path))  # left as it was


def test_repair_of_a_missing_file_says_so(tmp_path: Path) -> None:
    report = repair_state_db_schema(tmp_path / "nope.db")
    assert report["repaired"] is False and "does not exist" in report["error"]


def test_a_facade_open_repairs_a_malformed_schema_once(tmp_path: Path) -> None:
    path = make_db(tmp_path / "state.db")
    duplicate_schema_row(path)
    db = SessionDB(path)
    try:
        assert db.get_session("s1") is not None
        assert len(backups(path)) == 1
    finally:
        db.close()
    # the one attempt per file and process is spent: the next damage is reported
    duplicate_schema_row(path)
    with pytest.raises(DatabaseCorrupt, match="malformed database schema"):
        SessionDB(path)
    assert len(backups(path)) == 1


# --------------------------------------------------------------------------- zeroed files


def test_zeroed_check(tmp_path: Path) -> None:
    zeroed = tmp_path / "zeroed.db"
    zeroed.write_bytes(b"\0" * 4096)
    assert is_zeroed_state_db(zeroed) is True
    empty = tmp_path / "empty.db"
    empty.write_bytes(b"")
    assert is_zeroed_state_db(empty) is False
    assert is_zeroed_state_db(tmp_path / "missing.db") is False
    assert is_zeroed_state_db(make_db(tmp_path / "state.db")) is False
    partly = tmp_path / "partly.db"
    partly.write_bytes(b"\0" * 150 + b"x" + b"\0" * 4000)
    assert is_zeroed_state_db(partly) is True  # only the first 100 bytes count
    assert is_zeroed_state_db(partly, probe_bytes=151) is False


def test_zeroed_check_never_reads_a_file_this_process_holds(tmp_path: Path) -> None:
    zeroed = tmp_path / "zeroed.db"
    zeroed.write_bytes(b"\0" * 4096)
    holder = open(zeroed, "rb")  # noqa: SIM115 (held open across the calls on purpose)
    try:
        assert is_zeroed_state_db(zeroed) is False
        assert is_zeroed_state_db(zeroed, force=True) is True
    finally:
        holder.close()
    recovery.hold(zeroed)  # the facade's own mark, for systems without /proc
    try:
        assert is_zeroed_state_db(zeroed) is False
    finally:
        recovery.release(zeroed)
    assert is_zeroed_state_db(zeroed) is True


def test_quarantine_moves_the_file_and_its_sidecars(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    path.write_bytes(b"\0" * 8192)
    wal = tmp_path / "state.db-wal"
    wal.write_bytes(b"wal bytes")
    moved = quarantine_zeroed_state_db(path)
    assert moved is not None and moved.name.startswith("state.db.zeroed-")
    assert moved.name.endswith(".bak") and moved.read_bytes() == b"\0" * 8192
    assert Path(f"{moved}-wal").read_bytes() == b"wal bytes"
    assert not path.exists() and not wal.exists()
    assert quarantine_zeroed_state_db(path) is None  # already gone: nothing to do


def test_quarantine_fails_closed_while_another_holds_its_lock(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import fcntl

    monkeypatch.setattr(recovery, "QUARANTINE_LOCK_TIMEOUT_S", 0.2)
    path = tmp_path / "state.db"
    path.write_bytes(b"\0" * 4096)
    with open(tmp_path / "state.db.quarantine.lock", "w") as lock:
        fcntl.flock(lock.fileno(), fcntl.LOCK_EX)  # another open file: it conflicts
        with pytest.raises(DatabaseCorrupt, match="quarantine.lock"):
            quarantine_zeroed_state_db(path)
    assert path.read_bytes() == b"\0" * 4096


def test_a_facade_open_quarantines_a_zeroed_file_and_starts_fresh(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    path.write_bytes(b"\0" * 8192)
    db = SessionDB(path)
    try:
        db.create_session("new", "cli")
        assert db.get_session("new") is not None
    finally:
        db.close()
    (moved,) = tmp_path.glob("state.db.zeroed-*.bak")
    assert moved.read_bytes() == b"\0" * 8192
    cause = get_last_init_error()
    assert cause is not None and "zeroed" in cause and str(moved) in cause
