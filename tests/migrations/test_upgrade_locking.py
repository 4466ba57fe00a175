"""Waiting for another process's lock, out loud (issue 24), through the real command with
a real lock holder: `upgrade` and `sessions prune --yes` say that another process holds
the lock (and which), print a line every few seconds while they wait, and end with what
to do; several PostgreSQL upgrades at once each report what they themselves did."""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from helpers.databases import fixture_file, set_journal_mode
from helpers.processes import start_hanging_writer
from sqlalchemy import make_url, text

from hermes_store.contract import PG_MIGRATION_LOCK
from hermes_store.migration.head import HEAD_REVISION, known_revisions
from hermes_store.repositories.maintenance import MaintenanceRepository
from hermes_store.repositories.messages import MessageRepository
from hermes_store.repositories.sessions import SessionRepository
from hermes_store.store import Store

#: A process in BEGIN IMMEDIATE (the write lock) on the file argv[1], until killed.
LOCK_HOLDER = """
import sqlite3, sys, time
con = sqlite3.connect(sys.argv[1], isolation_level=None, timeout=5)
con.execute("BEGIN IMMEDIATE")
print("inside", flush=True)
time.sleep(3600)
"""


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    """`hermes-store ARGS` without a terminal, a wait line every second."""
    env = {**os.environ, "HERMES_STORE_PROGRESS_EVERY": "1"}
    return subprocess.run(
        [sys.executable, "-m", "hermes_store.cli", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
        check=False,
    )


@pytest.fixture
def holder() -> Iterator[list[subprocess.Popen[str]]]:
    """Lock-holding processes a test starts, killed at its end."""
    started: list[subprocess.Popen[str]] = []
    yield started
    for proc in started:
        proc.kill()
        proc.communicate(timeout=30)


def _hold_write_lock(path: Path, started: list[subprocess.Popen[str]]) -> int:
    proc = subprocess.Popen(
        [sys.executable, "-c", LOCK_HOLDER, str(path)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    started.append(proc)
    assert proc.stdout is not None and proc.stdout.readline().strip() == "inside"
    return proc.pid


def _assert_waited_out_loud(stderr: str, what: str, holder: str) -> None:
    lines = stderr.splitlines()
    assert lines[0].startswith(f"hermes-store: another process holds {what} on "), lines
    assert holder in lines[0] and "--wait SECONDS" in lines[0], lines[0]
    assert any(line.startswith(f"hermes-store: still waiting for {what}") for line in lines[1:])
    assert lines[-1].startswith(f"hermes-store: error: another process held {what} "), lines
    assert holder in lines[-1]
    assert "run the same command again, or wait longer with --wait SECONDS" in lines[-1]


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.mark.parametrize("journal", ["wal", "delete"])
def test_upgrade_says_who_holds_the_write_lock_and_what_to_do(
    tmp_path: Path, journal: str, holder: list[subprocess.Popen[str]]
) -> None:
    path = tmp_path / "state.db"
    shutil.copyfile(fixture_file(9), path)
    set_journal_mode(path, journal)
    pid = _hold_write_lock(path, holder)
    before = _sha(path)

    waited = _cli("upgrade", "--url", str(path), "--wait", "3")

    assert waited.returncode == 2, waited.stdout
    _assert_waited_out_loud(waited.stderr, "the write lock", f"held by pid {pid}: ")
    # only the line naming the backup taken before the wait (a reader, not held up)
    (line,) = waited.stdout.splitlines()
    assert line.startswith(f"backup: {path}.backup-v9-"), waited.stdout
    assert _sha(path) == before
    holder.pop().kill()
    done = _cli("upgrade", "--url", str(path))
    assert done.returncode == 0, done.stderr
    assert "adopted a Hermes database at schema_version 9" in done.stdout
    assert "waiting" not in done.stderr


def _old_ended_sessions(url: str, count: int = 3) -> list[str]:
    """`count` sessions that ended ten days ago, each with a message."""
    ids = [f"old-{i}" for i in range(count)]
    with Store(url) as store:
        sessions, messages = SessionRepository(store), MessageRepository(store)
        for session_id in ids:
            sessions.create_session(session_id, "cli")
            messages.append_message(session_id, "user", "hello")
            sessions.end_session(session_id, "user_exit")
        then = time.time() - 10 * 86400
        store.write(
            lambda conn: (
                conn.execute(
                    text("UPDATE sessions SET started_at = :t, ended_at = :t"), {"t": then}
                ),
                conn.execute(text("UPDATE messages SET timestamp = :t"), {"t": then}),
            )
        )
    return ids


def _session_count(url: str) -> int:
    with Store(url, read_only=True) as store:
        return SessionRepository(store).session_count(include_archived=True)


def test_prune_says_who_holds_the_write_lock_and_what_to_do(journal_db: str) -> None:
    _old_ended_sessions(journal_db)
    writer = start_hanging_writer(journal_db)
    try:
        waited = _cli(
            "sessions", "prune", "--older-than", "1", "--yes", "--wait", "3", "--url", journal_db
        )
        assert waited.returncode == 2, waited.stdout
        _assert_waited_out_loud(waited.stderr, "the write lock", f"held by pid {writer.pid}: ")
    finally:
        writer.kill()
        writer.communicate(timeout=30)
    assert _session_count(journal_db) == 3
    done = _cli("sessions", "prune", "--older-than", "1", "--yes", "--url", journal_db)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "deleted 3 session(s)"


def _conninfo(url: str) -> str:
    return make_url(url).set(drivername="postgresql").render_as_string(hide_password=False)


def test_upgrade_on_postgresql_says_who_holds_the_migration_lock(pg_url: str) -> None:
    with psycopg.connect(_conninfo(pg_url), autocommit=True) as other:
        other.execute("SET application_name = 'another-deploy'")
        other.execute("SELECT pg_advisory_lock(%s)", (PG_MIGRATION_LOCK,))
        pid = other.info.backend_pid
        waited = _cli("upgrade", "--url", pg_url, "--wait", "3")
        assert waited.returncode == 2, waited.stdout
        _assert_waited_out_loud(
            waited.stderr, "the migration lock", f"PostgreSQL backend {pid} (another-deploy"
        )
        tables = other.execute(
            "SELECT count(*) FROM information_schema.tables WHERE table_schema = 'public'"
        ).fetchone()
        assert tables == (0,)
    done = _cli("upgrade", "--url", pg_url)
    assert done.returncode == 0, done.stderr
    assert "created the schema" in done.stdout


def test_prune_on_postgresql_says_who_holds_the_row_lock(pg_fresh_db: str) -> None:
    ids = _old_ended_sessions(pg_fresh_db)
    with psycopg.connect(_conninfo(pg_fresh_db)) as other:
        other.execute("SET application_name = 'a-gateway'")
        other.commit()
        other.execute("SELECT 1 FROM sessions WHERE id = %s FOR UPDATE", (ids[0],))
        pid = other.info.backend_pid
        waited = _cli(
            "sessions", "prune", "--older-than", "1", "--yes", "--wait", "3", "--url", pg_fresh_db
        )
        assert waited.returncode == 2, waited.stdout
        _assert_waited_out_loud(waited.stderr, "the write lock", f"PostgreSQL backend {pid}")
        assert "a-gateway" in waited.stderr
        other.rollback()
    assert _session_count(pg_fresh_db) == 3
    with Store(pg_fresh_db) as store:
        assert MaintenanceRepository(store).prune_sessions(1) == 3


def test_concurrent_postgresql_upgrades_each_report_what_they_did(pg_url: str) -> None:
    procs = [
        subprocess.Popen(
            [sys.executable, "-m", "hermes_store.cli", "upgrade", "--url", pg_url, "--wait", "300"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(3)
    ]
    outputs = []
    for proc in procs:
        out, err = proc.communicate(timeout=600)
        assert proc.returncode == 0, err
        outputs.append(out)
    created = [out for out in outputs if "created the schema" in out]
    assert len(created) == 1, outputs
    applied = f"{len(known_revisions())} revisions applied (0001..{HEAD_REVISION})"
    assert f"summary: {applied}" in created[0]
    for out in outputs:
        if out is created[0]:
            continue
        first = out.splitlines()[0]
        assert "was upgraded by another process" in first or "is at head already" in first, out
        assert "summary: 0 revisions applied" in out, out
