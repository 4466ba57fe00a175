"""The chunked, resumable FTS backfill after adopting a legacy database: the marker
protocol (docs/reference/schema.md 5.3), live indexing of new rows, completion, and a run killed
half-way."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from hermes_store import migrate
from hermes_store.runtime.engine import make_engine
from hermes_store.search import maintenance
from hermes_store.sqlite import driver as sqlite_driver

REPO_ROOT = Path(__file__).resolve().parents[2]
SESSION = "20260301_091500_a1b2c3"
EXTRA = 3000
FIXTURE_MESSAGES = 64
HIGH = FIXTURE_MESSAGES + EXTRA


def word(i: int) -> str:
    return f"zebra{i}"


def id_of(i: int) -> int:
    return FIXTURE_MESSAGES + 1 + i


def _meta(path: Path) -> dict[str, str]:
    con = sqlite3.connect(str(path), timeout=5)
    try:
        return dict(con.execute("SELECT key, value FROM state_meta"))
    finally:
        con.close()


def _match(path: Path, table: str, query: str) -> list[int]:
    con = sqlite3.connect(str(path), timeout=5)
    try:
        return [
            r
            for (r,) in con.execute(
                f"SELECT rowid FROM {table} WHERE {table} MATCH ?",
                (query,),  # noqa: S608
            )
        ]
    finally:
        con.close()


@pytest.fixture
def large_legacy(legacy_db, db) -> Path:
    """The v22 fixture plus 3000 messages, each with one distinct word."""
    path = legacy_db(22)
    con = db.raw(path)
    try:
        assert con.execute("SELECT MAX(id) FROM messages").fetchone() == (FIXTURE_MESSAGES,)
        con.execute("BEGIN")
        con.executemany(
            "INSERT INTO messages (session_id, role, content, timestamp) VALUES (?, ?, ?, ?)",
            (
                (SESSION, "user" if i % 2 else "assistant", f"note {word(i)} entry", 2e9 + i)
                for i in range(EXTRA)
            ),
        )
        con.execute("COMMIT")
    finally:
        con.close()
    return path


def _deferred(path: Path, db) -> str:
    url = db.url_for(path)
    report = migrate.upgrade(url, defer_fts_backfill=True)
    assert report.after == migrate.HEAD
    assert report.fts is not None and report.fts.backfill_pending
    return url


def test_deferred_backfill_sets_markers(large_legacy, db):
    url = _deferred(large_legacy, db)
    meta = _meta(large_legacy)
    assert meta["fts_rebuild_high_water"] == str(HIGH)
    assert meta["fts_rebuild_progress"] == "0"
    assert "fts_storage_version" not in meta
    status = migrate.current(url)
    assert status.at_head
    assert status.fts.layout == "v23"
    assert status.fts.backfill_pending and status.fts.percent == 0
    report = migrate.check(url)
    assert not report.ok and report.fts_errors, "check must report the pending backfill"
    # nothing indexed yet
    assert _match(large_legacy, "messages_fts", word(10)) == []


def test_search_tops_up_the_pending_range(large_legacy, db):
    search = pytest.importorskip("hermes_store.search")
    if not hasattr(search, "search_messages"):
        pytest.skip("hermes_store.search.search_messages is not written yet")
    url = _deferred(large_legacy, db)
    engine = db.plain_engine(url)
    try:
        with engine.connect() as conn:
            hits = search.search_messages(conn, word(2500), limit=50)
            assert [h["id"] for h in hits] == [id_of(2500)]
            assert {h["session_id"] for h in hits} == {SESSION}
            # the fixture's own rows are pending too and still found
            kyoto = search.search_messages(conn, "Kyoto", limit=50)
            assert {h["session_id"] for h in kyoto} == {"20260302_140000_7e1e9a"}
    finally:
        engine.dispose()


def test_backfill_in_chunks_then_finish(large_legacy, db):
    url = _deferred(large_legacy, db)
    seen: list[maintenance.Progress] = []
    engine = make_engine(url)
    try:
        last = maintenance.run_backfill(
            engine, min_pause=0, pause_factor=0, max_steps=2, on_progress=seen.append
        )
    finally:
        engine.dispose()
    assert [p.indexed for p in seen] == [500, 1000]
    assert all(p.phase == "backfill" and p.total == HIGH for p in seen)
    assert last.phase == "backfill"
    meta = _meta(large_legacy)
    assert meta["fts_rebuild_high_water"] == str(HIGH)
    assert meta["fts_rebuild_progress"] == "1000"
    status = migrate.current(url)
    assert status.fts.progress == 1000 and 0 < status.fts.percent < 100

    # ids <= P are indexed, ids in (P, H] are not yet
    below = next(i for i in range(EXTRA) if id_of(i) <= 1000 and id_of(i + 1) > 1000)
    assert _match(large_legacy, "messages_fts", word(below)) == [id_of(below)]
    assert _match(large_legacy, "messages_fts", word(below + 1)) == []
    assert _match(large_legacy, "messages_fts", word(EXTRA - 1)) == []

    # a row written meanwhile (id > H) is indexed live by the gated triggers
    con = db.raw(large_legacy, foreign_keys=True)
    try:
        cur = con.execute(
            "INSERT INTO messages (session_id, role, content, timestamp) "
            "VALUES (?, 'user', 'a live hummingbird arrives', 3e9)",
            (SESSION,),
        )
        live_id = cur.lastrowid
        # db.raw's connection is the driver under test's
        with pytest.raises(sqlite_driver.IntegrityError):
            con.execute(
                "INSERT INTO messages (session_id, role, content, timestamp) "
                "VALUES ('no-such-session', 'user', 'x', 1.0)"
            )
    finally:
        con.close()
    assert live_id == HIGH + 1
    assert _match(large_legacy, "messages_fts", "hummingbird") == [live_id]
    assert _match(large_legacy, "messages_fts_trigram", '"hummingbird"') == [live_id]

    progress = migrate.finish_fts(url, min_pause=0)
    assert progress.phase == "done"
    _assert_complete(large_legacy, url, extra_words={"hummingbird": live_id})


def _assert_complete(path: Path, url: str, extra_words: dict[str, int] | None = None) -> None:
    meta = _meta(path)
    assert "fts_rebuild_high_water" not in meta
    assert "fts_rebuild_progress" not in meta
    assert meta.get("fts_storage_version") == "1"
    engine = make_engine(url)
    try:
        with engine.connect() as conn:
            assert maintenance.integrity_errors(conn) == []
            conn.rollback()
    finally:
        engine.dispose()
    assert migrate.check(url).ok
    con = sqlite3.connect(str(path))
    try:
        for i in range(EXTRA):
            got = [
                r
                for (r,) in con.execute(
                    "SELECT rowid FROM messages_fts WHERE messages_fts MATCH ?", (word(i),)
                )
            ]
            assert got == [id_of(i)], word(i)
        assert con.execute(
            "SELECT COUNT(*) FROM messages_fts WHERE messages_fts MATCH 'zebra*'"
        ).fetchone() == (EXTRA,)
        trigram = con.execute(
            "SELECT COUNT(*) FROM messages_fts_trigram WHERE messages_fts_trigram MATCH '\"zebra\"'"
        ).fetchone()[0]
        assert trigram == EXTRA
        for text, rowid in (extra_words or {}).items():
            assert [
                r
                for (r,) in con.execute(
                    "SELECT rowid FROM messages_fts WHERE messages_fts MATCH ?", (text,)
                )
            ] == [rowid]
        # the fixture's own rows are indexed as well
        assert (
            con.execute(
                "SELECT COUNT(*) FROM messages_fts WHERE messages_fts MATCH 'Kyoto'"
            ).fetchone()[0]
            >= 1
        )
    finally:
        con.close()


def test_integrity_check_notices_a_missing_row(large_legacy, db):
    """Guard: the rank=1 integrity-check really compares index and content."""
    url = _deferred(large_legacy, db)
    migrate.finish_fts(url, min_pause=0)
    con = db.raw(large_legacy)
    try:
        con.execute(
            "INSERT INTO messages_fts(messages_fts, rowid, content, tool_name, tool_calls) "
            "SELECT 'delete', id, content, tool_name, tool_calls FROM messages WHERE id = 100"
        )
    finally:
        con.close()
    engine = make_engine(url)
    try:
        with engine.connect() as conn:
            errors = maintenance.integrity_errors(conn)
    finally:
        engine.dispose()
    assert errors and errors[0].startswith("messages_fts:")


KILLABLE = """
import sys
from hermes_store import migrate
migrate.finish_fts(sys.argv[1], min_pause=0.2)
"""


def test_killed_backfill_resumes(large_legacy, db):
    url = _deferred(large_legacy, db)
    proc = subprocess.Popen(
        [sys.executable, "-c", KILLABLE, url],
        cwd=REPO_ROOT,
        env=dict(os.environ),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        deadline = time.monotonic() + 60
        moved = None
        while time.monotonic() < deadline:
            progress = _meta(large_legacy).get("fts_rebuild_progress")
            if progress not in (None, "0"):
                moved = progress
                break
            if proc.poll() is not None:
                break
            time.sleep(0.005)
        if moved is None:
            stderr = proc.stderr.read().decode() if proc.poll() is not None else ""
            pytest.fail(f"the backfill never moved (exit {proc.poll()}): {stderr}")
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == -signal.SIGKILL
    meta = _meta(large_legacy)
    assert "fts_rebuild_high_water" in meta, "the run finished before it could be killed"
    stopped_at = int(meta["fts_rebuild_progress"])
    assert 0 < stopped_at < HIGH
    assert stopped_at % 500 == 0
    status = migrate.current(url)
    assert status.fts.backfill_pending

    progress = migrate.finish_fts(url, min_pause=0)
    assert progress.phase == "done"
    _assert_complete(large_legacy, url)
