"""Messages that tell operators the truth (issue 24): one message for a database newer
than this hermes-store, whichever command or entry point meets it; a missing PostgreSQL
database names `createdb`; sessions migration 0016 tagged as orphaned delegate runs can
be listed; `--version`; `--help` without SQLAlchemy; no progress lines for phases that end
within the interval; one time convention in `--json`; days in a named time zone."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import uuid
from datetime import datetime
from pathlib import Path

import pytest
from helpers.databases import fixture_file, raw
from helpers.processes import run_cli_here as run_cli  # the commands' main, in-process
from sqlalchemy import create_engine, make_url, text
from sqlalchemy.pool import NullPool

from hermes_store import migrate
from hermes_store.errors import DatabaseMissing, InvalidInput, SchemaTooNew
from hermes_store.migration.copy import copy_database
from hermes_store.migration.head import HEAD_REVISION
from hermes_store.repositories.sessions import SessionRepository
from hermes_store.repositories.usage import UsageRepository
from hermes_store.store import Store

CRON_SESSION = "20260304_020000_c7a01d"  # untitled, tool calls: tagged by revision 0016


def _copy(version: int, target: Path) -> Path:
    shutil.copyfile(fixture_file(version), target)
    os.chmod(target, 0o600)
    return target


def _execute(url: str, *statements: str) -> None:
    engine = create_engine(url, poolclass=NullPool)
    try:
        with engine.begin() as conn:
            for statement in statements:
                conn.execute(text(statement))
    finally:
        engine.dispose()


# --------------------------------------------------------------------------- newer files

COMMANDS = [
    ["current"],
    ["check"],
    ["upgrade"],
    ["stats"],
    ["sessions", "list"],
    ["sessions", "export"],
    ["search", "kyoto"],
    ["fts", "backfill"],
]


def _one_message_everywhere(url: str) -> str:
    """The error line every command gives for `url`, checked to be the same for all of
    them and for Store, read-only or not; returned."""
    lines = set()
    for command in COMMANDS:
        done = run_cli(*command, "--url", url)
        assert done.returncode == 2, (command, done.stdout)
        (line,) = done.stderr.splitlines()
        lines.add(line)
    for read_only in (True, False):
        with pytest.raises(SchemaTooNew) as refused:
            Store(url, read_only=read_only)
        lines.add(f"hermes-store: error: {refused.value}")
    assert len(lines) == 1, sorted(lines)
    (line,) = lines
    assert "is newer than this hermes-store" in line
    assert "Upgrade hermes-store" in line and "nothing was changed" in line
    return line


def test_a_newer_schema_version_gets_one_message(tmp_path: Path) -> None:
    path = _copy(23, tmp_path / "state.db")
    con = raw(path)
    try:
        con.execute("UPDATE schema_version SET version = 24")
        con.commit()
    finally:
        con.close()
    before = path.read_bytes()
    line = _one_message_everywhere(str(path))
    assert "schema_version 24" in line and str(path) in line
    assert path.read_bytes() == before


def test_a_newer_hermes_store_revision_gets_one_message(tmp_path: Path) -> None:
    path = _copy(23, tmp_path / "state.db")
    migrate.upgrade(str(path), fts_min_pause=0)
    con = raw(path)
    try:
        con.execute("UPDATE hermes_store_version SET version_num = '0025'")
        con.commit()
    finally:
        con.close()
    line = _one_message_everywhere(str(path))
    assert "revision 0025" in line


def test_a_newer_postgresql_database_gets_one_message(pg_fresh_db: str) -> None:
    _execute(pg_fresh_db, "UPDATE hermes_store_version SET version_num = '0025'")
    assert "revision 0025" in _one_message_everywhere(pg_fresh_db)
    _execute(
        pg_fresh_db,
        "UPDATE hermes_store_version SET version_num = '0023'",
        "UPDATE schema_version SET version = 24",
    )
    assert "schema_version 24" in _one_message_everywhere(pg_fresh_db)


# --------------------------------------------------------------------------- a missing database


def test_a_missing_postgresql_database_names_createdb(pg_url: str) -> None:
    name = f"hs_missing_{uuid.uuid4().hex[:12]}"
    url = make_url(pg_url).set(database=name).render_as_string(hide_password=False)
    for command in (["upgrade"], ["current"], ["check"], ["stats"], ["sessions", "list"]):
        done = run_cli(*command, "--url", url)
        assert done.returncode == 2, command
        (line,) = done.stderr.splitlines()
        assert f"has no database '{name}'" in line, line
        assert f"createdb -E UTF8 -T template0 {name}" in line, line
    with pytest.raises(DatabaseMissing, match=f"createdb -E UTF8 -T template0 {name}"):
        Store(url)


# --------------------------------------------------------------------------- delegate runs


def _listed(url: str, *flags: str) -> list[str]:
    done = run_cli("sessions", "list", "--json", "--url", url, *flags)
    assert done.returncode == 0, done.stderr
    return [row["id"] for row in json.loads(done.stdout)]


@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
def test_sessions_tagged_as_orphaned_delegates_can_be_listed(
    tmp_path: Path, backend: str, request: pytest.FixtureRequest
) -> None:
    path = _copy(9, tmp_path / "state.db")
    migrate.upgrade(str(path), fts_min_pause=0)
    url = str(path)
    if backend == "postgresql":
        url = request.getfixturevalue("pg_url")
        assert copy_database(str(path), url).ok
    assert CRON_SESSION not in _listed(url)
    assert CRON_SESSION in _listed(url, "--include-delegates")
    with Store(url, read_only=True) as store:
        sessions = SessionRepository(store)
        assert CRON_SESSION not in {r["id"] for r in sessions.list_sessions_rich()}
        rows = sessions.list_sessions_rich(include_delegates=True)
        assert CRON_SESSION in {r["id"] for r in rows}
        # the compressed conversation still shows as its tip, once
        ids = [r["id"] for r in rows]
        assert ids.count("20260303_083012_c0ffe2") == 1 and "20260303_080000_c0ffee" not in ids


# --------------------------------------------------------------------------- the command itself


def test_version() -> None:
    done = run_cli("--version")
    assert done.returncode == 0, done.stderr
    assert re.fullmatch(
        rf"hermes-store \d+\.\d+\.\d+ \(head revision {HEAD_REVISION}, upstream"
        r" schema_version 23\)\n",
        done.stdout,
    )


HEAVY = ("sqlalchemy", "alembic", "hermes_store.models", "hermes_store.migrate", "tqdm")


@pytest.mark.parametrize("argv", [["--help"], ["sessions", "--help"], ["no-such-command"]])
def test_help_and_a_bad_command_line_import_nothing_heavy(argv: list[str]) -> None:
    done = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "hermes_store.cli", *argv],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode in (0, 2)
    imported = {
        line.rsplit("|", 1)[-1].strip()
        for line in done.stderr.splitlines()
        if line.startswith("import time:")
    }
    assert "hermes_store" in imported  # (the command itself runs as __main__)
    heavy = sorted(m for m in imported if m.split(".")[0] in HEAVY or m in HEAVY)
    assert heavy == [], heavy


def test_phases_shorter_than_the_interval_print_no_progress_line(tmp_path: Path) -> None:
    path = _copy(9, tmp_path / "state.db")
    env = {**os.environ, "HERMES_STORE_PROGRESS_EVERY": "60"}
    done = subprocess.run(
        [sys.executable, "-m", "hermes_store.cli", "upgrade", "--url", str(path)],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert "4 legacy FTS tables removed" in done.stdout
    assert not [line for line in done.stderr.splitlines() if line.startswith("fts ")]


# --------------------------------------------------------------------------- times


def test_json_times_keep_the_stored_precision(tmp_path: Path) -> None:
    path = _copy(23, tmp_path / "state.db")
    con = raw(path)
    try:
        stored = dict(con.execute("SELECT id, started_at FROM sessions"))
        message_times = dict(con.execute("SELECT id, timestamp FROM messages"))
    finally:
        con.close()
    shown = []
    for session_id in stored:
        done = run_cli("sessions", "show", session_id, "--json", "--url", str(path))
        session = json.loads(done.stdout)
        shown.append((session["session"]["started_at"], stored[session_id]))
        shown += [(m["timestamp"], message_times[m["id"]]) for m in session["messages"]]
    hits = json.loads(run_cli("search", "kyoto", "--json", "--url", str(path)).stdout)
    shown += [(hit["timestamp"], message_times[hit["id"]]) for hit in hits]
    assert len(shown) > 64
    for text_value, epoch in shown:
        assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}\+00:00", text_value)
        assert datetime.fromisoformat(text_value).timestamp() == pytest.approx(epoch, abs=1e-6)


def test_stats_counts_days_in_a_named_time_zone(tmp_path: Path) -> None:
    path = _copy(23, tmp_path / "state.db")  # every session started 2026-12-02 13:43 UTC
    days = {}
    for zone in ("UTC", "Pacific/Kiritimati", "America/Los_Angeles"):
        done = run_cli("stats", "--by", "day", "--tz", zone, "--json", "--url", str(path))
        assert done.returncode == 0, done.stderr
        days[zone] = [row["day"] for row in json.loads(done.stdout)["by_day"]]
    assert days == {
        "UTC": ["2026-12-02"],
        "Pacific/Kiritimati": ["2026-12-03"],  # UTC+14
        "America/Los_Angeles": ["2026-12-02"],
    }
    bad = run_cli("stats", "--tz", "Mars/Olympus", "--url", str(path))
    assert bad.returncode == 2 and "time zone" in bad.stderr


#: Around the end of daylight saving time in Berlin (2026-10-25 01:00 UTC): a fixed
#: offset gets one of each pair of days wrong.
DST_SESSIONS = {
    "before-dst-end": (1792881000.0, "2026-10-25"),  # 2026-10-24 22:30 UTC, 00:30 CEST
    "after-dst-end": (1792971000.0, "2026-10-26"),  # 2026-10-25 23:30 UTC, 00:30 CET
    "winter-evening": (1792965600.0, "2026-10-25"),  # 2026-10-25 22:00 UTC, 23:00 CET
}


def test_days_in_a_time_zone_follow_daylight_saving_time(backend_url: str) -> None:
    with Store(backend_url) as store:
        sessions = SessionRepository(store)
        usage = UsageRepository(store)
        for session_id in DST_SESSIONS:
            sessions.create_session(session_id, "cli", model="m")
            usage.update_token_counts(session_id, input_tokens=10, model="m")
        store.write(
            lambda conn: [
                conn.execute(
                    text("UPDATE sessions SET started_at = :t WHERE id = :i"),
                    {"t": started, "i": session_id},
                )
                for session_id, (started, _) in DST_SESSIONS.items()
            ]
        )
        expected: dict[str, int] = {}
        for _, day in DST_SESSIONS.values():
            expected[day] = expected.get(day, 0) + 1
        by_day = usage.usage_by_day(time_zone="Europe/Berlin")
        assert {row["day"]: row["sessions"] for row in by_day} == expected
        by_model_day = usage.usage_by_model_and_day(time_zone="Europe/Berlin")
        assert {row["day"]: row["sessions"] for row in by_model_day} == expected
        # the older parameter, a fixed shift, still works as it did
        fixed = usage.usage_by_day(utc_offset_seconds=3600.0)
        assert {row["day"]: row["sessions"] for row in fixed} == {
            "2026-10-24": 1,
            "2026-10-25": 1,
            "2026-10-26": 1,
        }
        with pytest.raises(InvalidInput, match="not both"):
            usage.usage_by_day(time_zone="Europe/Berlin", utc_offset_seconds=3600.0)
        with pytest.raises(InvalidInput, match="unknown time zone"):
            usage.usage_by_day(time_zone="Europe/Atlantis")
