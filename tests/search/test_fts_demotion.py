"""The legacy FTS index is demoted in O(1) inside the migration transaction
(docs/reference/schema.md 5.5 step 2; upstream #65798: a `DROP TABLE` of a 4.4 GB FTS
table held the write lock for 95 s and more): its `sqlite_master` rows go, its shadow
tables become `fts_v22_trash_*` with every row still in them and no page freed, and the
chunked teardown empties and drops them afterwards, leaving exactly the objects of a
fresh database; a teardown killed half-way leaves a sound file and resumes."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest
from helpers.databases import EXTRA, grow_legacy

from hermes_store import migrate
from hermes_store.runtime.engine import make_engine
from hermes_store.search import maintenance

pytestmark = pytest.mark.sqlite_only

SUFFIXES = ("data", "idx", "content", "docsize", "config")


def _rows(path: Path, tables: list[str]) -> dict[str, int]:
    con = sqlite3.connect(str(path))
    try:
        return {t: con.execute(f'SELECT COUNT(*) FROM "{t}"').fetchone()[0] for t in tables}  # noqa: S608
    finally:
        con.close()


def _master(path: Path) -> dict[str, tuple[str, str | None]]:
    con = sqlite3.connect(str(path))
    try:
        return {n: (t, s) for t, n, s in con.execute("SELECT type, name, sql FROM sqlite_master")}
    finally:
        con.close()


def _pragma(path: Path, name: str) -> list[object]:
    con = sqlite3.connect(str(path))
    try:
        return [r[0] for r in con.execute(f"PRAGMA {name}")]
    finally:
        con.close()


def _legacy_shadows(path: Path) -> list[str]:
    master = _master(path)
    return [
        f"{vtab}_{suffix}"
        for vtab in ("messages_fts", "messages_fts_trigram")
        for suffix in SUFFIXES
        if f"{vtab}_{suffix}" in master
    ]


def _objects(path: Path) -> set[tuple[str, str]]:
    return {(t, n) for n, (t, _) in _master(path).items() if not n.startswith("sqlite_autoindex")}


@pytest.mark.parametrize(
    ("version", "expected_shadows"),
    [
        # L3 (v11..v22): both inline tables, with their _content copies
        (22, [f"{v}_{s}" for v in ("messages_fts", "messages_fts_trigram") for s in SUFFIXES]),
        # L1 (v1..v9): external content, no trigram index; demoted by 0011 in the same run
        (9, [f"messages_fts_{s}" for s in ("data", "idx", "docsize", "config")]),
    ],
)
def test_migration_demotes_the_legacy_index_to_trash_in_o1(
    legacy_db, db, tmp_path: Path, version: int, expected_shadows: list[str]
) -> None:  # type: ignore[no-untyped-def]
    path = legacy_db(version)
    grow_legacy(path, db, version)
    shadows = _legacy_shadows(path)
    assert shadows == expected_shadows
    before = _rows(path, shadows)
    assert before[f"messages_fts_{'docsize'}"] == 64 + EXTRA
    freelist_before = _pragma(path, "freelist_count")[0]

    report = migrate.upgrade(db.url_for(path), defer_fts_backfill=True)
    assert report.after == migrate.HEAD

    # the migration transaction only renamed: every legacy row is in the trash, nothing
    # was freed (a DROP would have put every page of the old index on the freelist)
    trash = {f"fts_v22_trash_{s}": s for s in shadows}
    assert report.fts is not None and sorted(report.fts.trash_tables) == sorted(trash)
    assert _rows(path, list(trash)) == {t: before[s] for t, s in trash.items()}
    assert _pragma(path, "freelist_count")[0] <= freelist_before + 8
    master = _master(path)
    for vtab in ("messages_fts", "messages_fts_trigram"):
        kind, sql = master[vtab]
        assert kind == "table" and sql is not None and "tool_name" in sql, vtab
    assert not [n for n, (t, s) in master.items() if s and "USING fts5(\n    content\n" in s]
    assert all(
        t == "table" and "VIRTUAL" not in (s or "")
        for n, (t, s) in master.items()
        if n.startswith("fts_v22_trash_")
    )
    assert _pragma(path, "integrity_check") == ["ok"]
    assert migrate.current(db.url_for(path)).fts.layout == "v23"  # type: ignore[union-attr]

    # the chunked teardown empties the trash, at most CHUNK_IDS rows per transaction
    seen: list[maintenance.Progress] = []
    engine = make_engine(db.url_for(path))
    try:
        done = maintenance.run_backfill(
            engine, min_pause=0, pause_factor=0, on_progress=seen.append
        )
    finally:
        engine.dispose()
    assert done.phase == "done"
    teardown = [p for p in seen if p.phase == "teardown"]
    biggest = max(before.values())
    assert len(teardown) >= len(trash) + biggest // maintenance.CHUNK_IDS
    assert not [n for n in _master(path) if n.startswith("fts_v22_trash_")]
    assert _pragma(path, "freelist_count")[0] > freelist_before
    assert _pragma(path, "integrity_check") == ["ok"]
    check = migrate.check(db.url_for(path))
    assert check.ok, check

    fresh = tmp_path / "fresh.db"
    migrate.upgrade(db.url_for(fresh))
    assert _objects(path) == _objects(fresh)
    con = sqlite3.connect(str(path))
    try:
        hits = con.execute(
            "SELECT COUNT(*) FROM messages_fts WHERE messages_fts MATCH 'demotion2999'"
        ).fetchone()
        meta = dict(con.execute("SELECT key, value FROM state_meta"))
    finally:
        con.close()
    assert hits == (1,)
    assert meta.get("fts_storage_version") == "1"


def test_second_demotion_does_not_collide_with_leftover_trash(legacy_db, db) -> None:  # type: ignore[no-untyped-def]
    """Trash left by an unfinished teardown, then a downgrade to v22 and an upgrade again:
    the new trash gets a free name and both are torn down."""
    path = legacy_db(22)
    url = db.url_for(path)
    migrate.upgrade(url, defer_fts_backfill=True)
    first = set(migrate.current(url).fts.trash_tables)  # type: ignore[union-attr]
    assert "fts_v22_trash_messages_fts_content" in first
    migrate.downgrade(url, "0022")
    assert "fts_v22_trash_messages_fts_content" in _master(path)
    migrate.upgrade(url, defer_fts_backfill=True)
    second = set(migrate.current(url).fts.trash_tables)  # type: ignore[union-attr]
    assert first < second
    assert "fts_v22_trash_messages_fts_content_2" in second
    assert _pragma(path, "integrity_check") == ["ok"]
    assert migrate.finish_fts(url, min_pause=0).phase == "done"
    assert migrate.current(url).fts.trash_tables == ()  # type: ignore[union-attr]
    assert migrate.check(url).ok


def test_pending_fts_writes_of_the_same_transaction_stay_with_the_old_index(legacy_db, db) -> None:  # type: ignore[no-untyped-def]
    """Rows written through the legacy triggers earlier in the migration transaction
    (FTS5 buffers their terms until a savepoint or COMMIT) must not land in the new
    tables, which take over the old shadow tables' names."""
    from alembic.migration import MigrationContext
    from alembic.operations import Operations

    from hermes_store._migrations import _fts_layouts as fts
    from hermes_store._migrations import _ops

    path = legacy_db(22)
    engine = db.plain_engine(path)
    try:
        with engine.connect() as conn:
            driver = conn.connection.driver_connection
            assert driver is not None
            driver.isolation_level = None
            conn.exec_driver_sql("BEGIN IMMEDIATE")
            with Operations.context(MigrationContext.configure(conn)):
                _ops.drop_triggers(fts.ALL_TRIGGERS)
                # writes after the last DDL statement (which would flush FTS5 by itself)
                for table in ("messages_fts", "messages_fts_trigram"):
                    conn.exec_driver_sql(
                        f"INSERT INTO {table}(rowid, content) "  # noqa: S608
                        "SELECT id + 100000, 'pendingterm ' || id FROM messages"
                    )
                _ops.demote_fts_tables(("messages_fts", "messages_fts_trigram"))
                _ops.run_all(fts.V23)
            conn.exec_driver_sql("COMMIT")
    finally:
        engine.dispose()
    assert _pragma(path, "integrity_check") == ["ok"]
    con = db.raw(path)
    try:
        # the new index is empty and consistent until it is filled
        assert con.execute("SELECT COUNT(*) FROM messages_fts_docsize").fetchone() == (0,)
        con.execute("INSERT INTO messages_fts(messages_fts) VALUES ('rebuild')")
        con.execute("INSERT INTO messages_fts(messages_fts, rank) VALUES ('integrity-check', 1)")
        hits = con.execute(
            "SELECT COUNT(*) FROM messages_fts WHERE messages_fts MATCH 'pendingterm'"
        ).fetchone()[0]
        # ... and the pending rows went to the old index, now trash
        trash = con.execute(
            "SELECT COUNT(*) FROM fts_v22_trash_messages_fts_content WHERE id > 100000"
        ).fetchone()[0]
        n = con.execute("SELECT COUNT(*) FROM messages").fetchone()[0]
    finally:
        con.close()
    assert hits == 0
    assert trash == n


KILLABLE_TEARDOWN = """
import sys
from hermes_store.runtime.engine import make_engine
from hermes_store.search import maintenance
engine = make_engine(sys.argv[1])
maintenance.run_backfill(engine, min_pause=0.05, pause_factor=0)
"""


def test_teardown_killed_mid_way_leaves_a_sound_file_and_resumes(
    legacy_db, db, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    path = legacy_db(22)
    grow_legacy(path, db, 22)
    url = db.url_for(path)
    migrate.upgrade(url, defer_fts_backfill=True)
    engine = make_engine(url)
    try:  # the backfill first, so the subprocess below is in its teardown phase
        while maintenance.run_backfill(engine, min_pause=0, max_steps=1).phase == "backfill":
            pass
    finally:
        engine.dispose()
    trash = set(migrate.current(url).fts.trash_tables)  # type: ignore[union-attr]
    assert len(trash) == 10
    rows_before = sum(_rows(path, sorted(trash)).values())

    proc = subprocess.Popen(
        [sys.executable, "-c", KILLABLE_TEARDOWN, url],
        env=dict(os.environ),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and proc.poll() is None:
            left = set(migrate.current(url).fts.trash_tables)  # type: ignore[union-attr]
            if len(left) <= len(trash) - 2:  # a few tables emptied and dropped
                break
            time.sleep(0.01)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == -signal.SIGKILL, "the teardown finished before it was killed"
    left = set(migrate.current(url).fts.trash_tables)  # type: ignore[union-attr]
    assert left and left < trash
    assert sum(_rows(path, sorted(left)).values()) < rows_before
    assert _pragma(path, "integrity_check") == ["ok"]

    assert migrate.finish_fts(url, min_pause=0).phase == "done"
    assert _pragma(path, "integrity_check") == ["ok"]
    assert migrate.check(url).ok
    fresh = tmp_path / "fresh.db"
    migrate.upgrade(db.url_for(fresh))
    assert _objects(path) == _objects(fresh)
