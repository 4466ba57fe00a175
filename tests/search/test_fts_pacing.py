"""How the chunked backfill shares the write lock (maintenance.Pacing): back to back while
no other connection commits, a pause after every step once one does, and a writer of the
original's kind (1 s busy timeout, 15 attempts) never fails beside the default pacing.
Nothing here is timed: the regimes are chosen so that what happens does not depend on
how fast the machine is, and speed is measured in benchmarks/upgrade.py."""

from __future__ import annotations

import json
import math
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from helpers.databases import EXTRA, grow_legacy

from hermes_store import migrate
from hermes_store.runtime.engine import make_engine
from hermes_store.search import maintenance
from hermes_store.search.maintenance import BackfillStats, Pacing, Progress, Regime

pytestmark = pytest.mark.sqlite_only

SESSION = "20260301_091500_a1b2c3"

#: Never pauses while alone; pauses (1 ms) after every step once another connection has
#: committed, and stays so (quiet = inf), whatever the steps cost on this machine.
OBSERVING = Pacing(
    alone=Regime(hold=math.inf, gap=0.0),
    shared=Regime(hold=0.0, gap=0.001),
    quiet=math.inf,
)


@pytest.fixture
def pending(legacy_db, db) -> tuple[Path, str]:  # type: ignore[no-untyped-def]
    """The v22 fixture plus EXTRA messages, migrated, with the backfill still to run."""
    path = legacy_db(22)
    grow_legacy(path, db, 22)
    url = db.url_for(path)
    assert migrate.upgrade(url, defer_fts_backfill=True).fts.backfill_pending  # type: ignore[union-attr]
    return path, url


def _run(url: str, pacing: Pacing, on_progress=None) -> BackfillStats:  # type: ignore[no-untyped-def]
    stats = BackfillStats()
    engine = make_engine(url)
    try:
        done = maintenance.run_backfill(engine, pacing=pacing, stats=stats, on_progress=on_progress)
    finally:
        engine.dispose()
    assert done.phase == "done"
    return stats


def test_regime_holds_until_the_next_step_would_pass_the_budget() -> None:
    regime = Regime(hold=0.1, gap=0.02)
    assert regime.pause(0.03, 0.03) is None  # 0.06 held after the next: go on
    assert regime.pause(0.09, 0.03) == 0.02  # the next would pass 0.1: pause
    shared = Regime(hold=0.0, gap=0.05, factor=1.0)
    assert shared.pause(0.01, 0.01) == 0.05  # after every step, at least the gap
    assert shared.pause(0.2, 0.2) == 0.2  # as long as the step held the lock
    assert Pacing.unpaced().alone.pause(1e9, 1e9) is None
    original = Pacing.fixed(0.2)
    assert original.alone == original.shared and original.alone.pause(0.1, 0.1) == 0.4


def test_alone_the_steps_run_back_to_back(pending) -> None:  # type: ignore[no-untyped-def]
    path, url = pending
    stats = _run(url, OBSERVING)
    assert stats.backfill_steps == math.ceil((64 + EXTRA) / maintenance.CHUNK_IDS)
    assert stats.rows_indexed == 64 + EXTRA
    assert stats.teardown_steps > 10 and stats.tables_removed == 10
    assert stats.foreign_commits == 0
    assert stats.pauses == 0 and stats.paused_s == 0


def test_a_commit_by_another_connection_switches_to_a_pause_after_every_step(pending, db) -> None:  # type: ignore[no-untyped-def]
    path, url = pending
    other = db.raw(path)
    wrote: list[int] = []

    def another_writer(progress: Progress) -> None:
        # after the second step, as a running Hermes would between two of them
        if progress.phase == "backfill" and progress.indexed == 2 * maintenance.CHUNK_IDS:
            cur = other.execute(
                "INSERT INTO messages (session_id, role, content, timestamp) "
                "VALUES (?, 'user', 'written between two steps', 3e9)",
                (SESSION,),
            )
            wrote.append(int(cur.lastrowid or 0))

    try:
        stats = _run(url, OBSERVING, on_progress=another_writer)
    finally:
        other.close()
    assert len(wrote) == 1 and stats.foreign_commits == 1
    steps = stats.backfill_steps + stats.teardown_steps
    # paused after every step from the one that saw the commit on (the last step of each
    # loop ends it instead of pausing)
    assert stats.pauses == stats.shared_pauses
    assert steps - 4 <= stats.pauses <= steps
    con = sqlite3.connect(path)
    try:
        hits = con.execute(
            "SELECT rowid FROM messages_fts WHERE messages_fts MATCH 'between'"
        ).fetchall()
    finally:
        con.close()
    assert hits == [(wrote[0],)]


WRITER = """
import json, os, random, sqlite3, sys, time
con = sqlite3.connect(sys.argv[1], timeout=1.0, isolation_level=None)
failed, ids, i = 0, [], 0
while not os.path.exists(sys.argv[3]):
    for attempt in range(15):
        try:
            con.execute("BEGIN IMMEDIATE")
            cur = con.execute(
                "INSERT INTO messages (session_id, role, content, timestamp) "
                "VALUES (?, 'user', ?, ?)", (sys.argv[2], f"writer{i} beside", 4e9 + i))
            con.execute("COMMIT")
            ids.append(cur.lastrowid)
            break
        except sqlite3.OperationalError as exc:
            if con.in_transaction:
                con.execute("ROLLBACK")
            if "locked" not in str(exc) and "busy" not in str(exc):
                raise
            time.sleep(random.uniform(0.02, 0.15))
    else:
        failed += 1
    if i == 0:
        print("ready", flush=True)
    i += 1
    time.sleep(0.005)
print(json.dumps({"failed": failed, "ids": ids}))
"""


def test_a_writer_of_the_originals_kind_never_fails_beside_the_default_pacing(
    pending, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    """The original's write path (1 s busy timeout, 15 attempts with 20-150 ms sleeps)
    writing from before the backfill starts until after it ends, with the default pacing:
    every write lands, and each is indexed once (the FTS integrity check compares index
    and content)."""
    path, url = pending
    stop = tmp_path / "stop-writing"
    writer = subprocess.Popen(
        [sys.executable, "-c", WRITER, str(path), SESSION, str(stop)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert writer.stdout is not None
        assert writer.stdout.readline().strip() == "ready", writer.stderr
        stats = _run(url, maintenance.DEFAULT_PACING)
        stop.touch()
        out, err = writer.communicate(timeout=120)
    finally:
        stop.touch()
        if writer.poll() is None:
            writer.kill()
            writer.wait()
    assert writer.returncode == 0, err
    result = json.loads(out)
    assert result["failed"] == 0
    writes = len(result["ids"])
    assert writes >= 2
    assert stats.rows_indexed == 64 + EXTRA
    engine = make_engine(url)
    try:
        with engine.connect() as conn:
            assert maintenance.integrity_errors(conn) == []
    finally:
        engine.dispose()
    con = sqlite3.connect(path)
    try:
        found = con.execute(
            "SELECT COUNT(*) FROM messages_fts WHERE messages_fts MATCH 'beside'"
        ).fetchone()[0]
    finally:
        con.close()
    assert found == writes
    assert migrate.check(url).ok
