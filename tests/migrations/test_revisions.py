"""Each revision on its own: upgrade, downgrade and upgrade again give the same schema;
downgrades refuse to lose data; a failing run changes nothing; concurrent upgrades."""

from __future__ import annotations

import multiprocessing
import sqlite3
from pathlib import Path

import pytest

from hermes_store import migrate
from hermes_store.errors import MigrationError

REVISIONS = [f"{i:04d}" for i in range(1, 24)]


def _version(path: Path) -> list[tuple[int]] | None:
    con = sqlite3.connect(str(path))
    try:
        if (
            con.execute("SELECT 1 FROM sqlite_master WHERE name = 'schema_version'").fetchone()
            is None
        ):
            return None
        return con.execute("SELECT version FROM schema_version").fetchall()
    finally:
        con.close()


@pytest.mark.parametrize("revision", REVISIONS)
def test_revision_round_trip(revision, tmp_path, db):
    path = tmp_path / "state.db"
    url = db.url_for(path)
    index = REVISIONS.index(revision)
    previous = REVISIONS[index - 1] if index else None
    if previous is not None:
        migrate.upgrade(url, revision=previous)
        assert migrate.current(url).alembic_revision == previous
    else:
        sqlite3.connect(str(path)).close()  # an empty file: the base state
    before = db.snapshot(path)

    migrate.upgrade(url, revision=revision)
    after = db.snapshot(path)
    assert migrate.current(url).alembic_revision == revision
    assert _version(path) == [(int(revision),)]
    assert after != before, f"revision {revision} changed nothing"

    migrate.downgrade(url, previous or "base")
    down = db.snapshot(path)
    from hermes_store.migration import schema_snapshot

    assert down == before, schema_snapshot.diff(before, down)
    assert migrate.current(url).alembic_revision == previous
    assert _version(path) == ([(int(previous),)] if previous else None)

    migrate.upgrade(url, revision=revision)
    again = db.snapshot(path)
    assert again == after, schema_snapshot.diff(after, again)
    assert migrate.current(url).alembic_revision == revision
    assert _version(path) == [(int(revision),)]


def test_full_walk_down_to_base_and_up_again(tmp_path, legacy_db, db):
    path = tmp_path / "state.db"
    url = db.url_for(path)
    migrate.upgrade(url, fts_min_pause=0)
    head = db.snapshot(path)
    migrate.downgrade(url, "base")
    assert db.snapshot(path) == {
        "tables": {},
        "virtual_tables": {},
        "indexes": {},
        "views": {},
        "triggers": {},
    }
    migrate.upgrade(url, fts_min_pause=0)
    assert db.snapshot(path) == head
    assert db.snapshot(path) == db.snapshot(legacy_db(23))


def _head_with_session(tmp_path, db, **columns) -> Path:
    path = tmp_path / "state.db"
    migrate.upgrade(db.url_for(path), fts_min_pause=0)
    con = db.raw(path)
    try:
        names = ", ".join(["id", "source", "started_at", *columns])
        marks = ", ".join("?" * (3 + len(columns)))
        con.execute(
            f"INSERT INTO sessions ({names}) VALUES ({marks})",  # noqa: S608
            ("s1", "cli", 1.0, *columns.values()),
        )
        con.execute(
            "INSERT INTO messages (session_id, role, content, timestamp) "
            "VALUES ('s1', 'user', 'hello downgrade', 1.0)"
        )
    finally:
        con.close()
    return path


def _assert_refused_unchanged(path: Path, target: str, db, needle: str) -> None:
    url = db.url_for(path)
    schema, rows = db.snapshot(path), db.dump(path)
    with pytest.raises(MigrationError) as info:
        migrate.downgrade(url, target)
    message = str(info.value)
    assert "downgrade would lose data" in message
    assert needle in message
    assert migrate.current(url).alembic_revision == migrate.HEAD
    assert db.snapshot(path) == schema
    assert db.dump(path) == rows
    assert migrate.check(url).ok


def test_downgrade_refuses_to_drop_pinned(tmp_path, db):
    path = _head_with_session(tmp_path, db, pinned=1)
    _assert_refused_unchanged(path, "0022", db, "sessions.pinned")


def test_downgrade_refuses_to_drop_tags(tmp_path, db):
    """Tags are typed by people and held nowhere else: a downgrade below hs0007 refuses
    while a session has one."""
    path = _head_with_session(tmp_path, db)
    con = db.raw(path)
    try:
        con.execute("INSERT INTO hermes_store_session_tags (session_id, tag) VALUES ('s1', 'x')")
    finally:
        con.close()
    _assert_refused_unchanged(path, "hs0006", db, "hermes_store_session_tags")


def test_downgrade_refuses_to_drop_task_rows(tmp_path, db):
    path = _head_with_session(tmp_path, db)
    con = db.raw(path)
    try:
        con.execute(
            "INSERT INTO session_model_usage (session_id, model, task, input_tokens) "
            "VALUES ('s1', 'm', 'vision', 5)"
        )
    finally:
        con.close()
    # 0023 would downgrade fine; 0022 refuses, and 0023's work must be rolled back too
    _assert_refused_unchanged(path, "0021", db, "auxiliary tasks")


def test_downgrade_keeps_default_values(tmp_path, db):
    """The refusal is about data: default values may be dropped."""
    path = _head_with_session(tmp_path, db, pinned=0)
    migrate.downgrade(db.url_for(path), "0022")
    assert migrate.current(db.url_for(path)).alembic_revision == "0022"
    con = db.raw(path)
    try:
        cols = {r[1] for r in con.execute("PRAGMA table_info(sessions)")}
        assert "pinned" not in cols
        assert con.execute("SELECT content FROM messages").fetchall() == [("hello downgrade",)]
        hits = con.execute(
            "SELECT rowid FROM messages_fts WHERE messages_fts MATCH 'downgrade'"
        ).fetchall()
        assert len(hits) == 1
    finally:
        con.close()


def test_failing_migration_rolls_back_entirely(tmp_path, db):
    path = tmp_path / "state.db"
    url = db.url_for(path)
    migrate.upgrade(url, revision="0013")
    con = db.raw(path)
    try:
        # 0014 creates compression_locks IF NOT EXISTS, then indexes it: a view of that
        # name makes the run fail half-way through the chain.
        con.execute("CREATE VIEW compression_locks AS SELECT 1 AS session_id, 2 AS expires_at")
        con.execute("INSERT INTO sessions (id, source, started_at) VALUES ('s1', 'cli', 1.0)")
    finally:
        con.close()
    schema, rows = db.snapshot(path), db.dump(path)
    with pytest.raises(Exception) as info:  # noqa: B017 (SQLite's own error)
        migrate.upgrade(url, fts_min_pause=0)
    assert "compression_locks" in str(info.value) or "view" in str(info.value).lower()
    assert migrate.current(url).alembic_revision == "0013"
    assert _version(path) == [(13,)]
    assert db.snapshot(path) == schema
    assert db.dump(path) == rows


def _upgrade_worker(url: str, home: str, barrier, results) -> None:  # type: ignore[no-untyped-def]
    import os

    os.environ["HERMES_HOME"] = home
    os.environ.pop("HERMES_STORE_URL", None)
    from hermes_store import migrate as m

    try:
        barrier.wait(timeout=30)
        report = m.upgrade(url, fts_min_pause=0)
        results.put(("ok", report.after))
    except Exception as exc:  # noqa: BLE001 (reported to the parent)
        results.put(("error", repr(exc)))


def test_two_processes_upgrade_the_same_fresh_file(tmp_path, hermes_home, db):
    path = tmp_path / "state.db"
    url = db.url_for(path)
    ctx = multiprocessing.get_context("spawn")
    barrier = ctx.Barrier(2)
    results = ctx.Queue()
    procs = [
        ctx.Process(target=_upgrade_worker, args=(url, str(hermes_home), barrier, results))
        for _ in range(2)
    ]
    for p in procs:
        p.start()
    outcomes = [results.get(timeout=90) for _ in procs]
    for p in procs:
        p.join(timeout=30)
        assert p.exitcode == 0
    assert outcomes == [("ok", migrate.HEAD), ("ok", migrate.HEAD)], outcomes
    assert migrate.current(url).at_head
    assert _version(path) == [(23,)]
    assert migrate.check(url).ok
    con = db.raw(path)
    try:
        version = con.execute("SELECT version_num FROM hermes_store_version").fetchall()
        assert version == [(migrate.HEAD,)]
    finally:
        con.close()
