"""What upgrades say, through the real commands (issue 15, "silent long work"):
`hermes-store upgrade` without a terminal prints progress lines and a summary and says
when it created a database rather than upgraded one; `alembic upgrade head` logs the
revisions it applies and what is left to do; migrations run from Python leave the
caller's logging alone."""

from __future__ import annotations

import logging
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from helpers.databases import EXTRA, grow_legacy

from hermes_store import migrate
from hermes_store.migration.head import known_revisions

pytestmark = pytest.mark.sqlite_only

REPO_ROOT = Path(__file__).resolve().parents[2]
CLI = str(Path(sys.executable).with_name("hermes-store"))
FIXTURE_MESSAGES = 64
#: the project's own revisions after 0023 (hs0001, ...), which every upgrade to head runs
OWN_REVISIONS = sum(1 for r in known_revisions() if r.startswith("hs"))


def _cli(*args: str, cwd: Path, **env: str) -> subprocess.CompletedProcess[str]:
    # stdout and stderr are pipes, as in a deploy log: not a terminal, so no tqdm bar
    environ = {**os.environ, **env}
    environ.pop("HERMES_STORE_URL", None)
    return subprocess.run(
        [CLI, *args], capture_output=True, text=True, cwd=cwd, env=environ, timeout=300
    )


@pytest.fixture
def grown_v22(legacy_db, db) -> Path:  # type: ignore[no-untyped-def]
    """The v22 fixture plus EXTRA messages: seven 500-id backfill steps."""
    path = legacy_db(22, "state.db")
    grow_legacy(path, db, 22)
    return path


def test_upgrade_without_a_terminal_prints_progress_lines_and_a_summary(
    grown_v22: Path, tmp_path: Path
) -> None:
    result = _cli("upgrade", "--url", str(grown_v22), cwd=tmp_path, HERMES_STORE_PROGRESS_EVERY="0")
    assert result.returncode == 0, result.stderr
    total = FIXTURE_MESSAGES + EXTRA
    progress = re.findall(
        r"^fts backfill: (\d+)/(\d+) ids \((\d+)%\) after [\d.]+ s$", result.stderr, re.M
    )
    # every step but the last (which ends the backfill) reports, in order
    assert [int(done) for done, _, _ in progress] == list(range(500, total, 500))
    assert {int(of) for _, of, _ in progress} == {total}
    teardown = re.findall(
        r"^fts teardown: (\d+)/10 legacy FTS tables removed after [\d.]+ s$",
        result.stderr,
        re.M,
    )
    assert teardown and [int(n) for n in teardown] == sorted(int(n) for n in teardown)
    assert teardown[-1] == "10"
    out = result.stdout.splitlines()
    assert out[0] == (
        f"upgraded {grown_v22}: revision none -> {migrate.HEAD} "
        "(adopted a Hermes database at schema_version 22)"
    )
    assert not any(line.startswith("created") for line in out)
    assert re.fullmatch(
        rf"summary: {1 + OWN_REVISIONS} revisions applied \(0023\.\.{migrate.HEAD}\), "
        rf"{total} messages indexed, "
        r"10 legacy FTS tables removed, [\d.]+ s",
        out[-1],
    ), out[-1]


def test_progress_lines_are_periodic_not_per_step(grown_v22: Path, tmp_path: Path) -> None:
    """A phase that ends within the period prints no progress line at all (a tiny file's
    `fts teardown: 0/4` was noise); a generous period keeps this run's phases within it."""
    result = _cli(
        "upgrade", "--url", str(grown_v22), cwd=tmp_path, HERMES_STORE_PROGRESS_EVERY="600"
    )
    assert result.returncode == 0, result.stderr
    lines = [line for line in result.stderr.splitlines() if line.startswith("fts ")]
    assert lines == []
    assert "10 legacy FTS tables removed" in result.stdout


def test_a_typo_creates_a_database_and_says_so(tmp_path: Path) -> None:
    created = _cli("upgrade", "--url", "nope/typo.db", cwd=tmp_path)
    assert created.returncode == 0, created.stderr
    target = tmp_path / "nope" / "typo.db"
    assert target.exists()
    first = created.stdout.splitlines()[0]
    assert first == (
        f"created a new database at {target} (and its directory {target.parent}): "
        f"revision none -> {migrate.HEAD}"
    )
    assert "upgraded" not in created.stdout
    summary = rf"^summary: {23 + OWN_REVISIONS} revisions applied \(0001\.\.{migrate.HEAD}\), "
    assert re.search(summary, created.stdout, re.M)

    again = _cli("upgrade", "--url", "nope/typo.db", cwd=tmp_path)
    assert again.returncode == 0, again.stderr
    assert again.stdout.splitlines()[0] == (
        f"{target} is at head already: revision {migrate.HEAD} -> {migrate.HEAD}"
    )
    assert "created" not in again.stdout
    assert re.search(r"^summary: 0 revisions applied, 0 messages indexed, ", again.stdout, re.M)


def test_created_in_an_existing_directory_names_no_directory(tmp_path: Path) -> None:
    result = _cli("upgrade", "--url", str(tmp_path / "fresh.db"), cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines()[0] == (
        f"created a new database at {tmp_path / 'fresh.db'}: revision none -> {migrate.HEAD}"
    )


def test_deferred_backfill_says_how_to_finish_it(grown_v22: Path, tmp_path: Path) -> None:
    result = _cli("upgrade", "--url", str(grown_v22), "--defer-fts-backfill", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    finish = f"finish the FTS backfill later with: hermes-store fts backfill --url '{grown_v22}'"
    assert finish in result.stdout.splitlines()
    assert re.search(
        rf"^summary: {1 + OWN_REVISIONS} revisions applied \(0023\.\.{migrate.HEAD}\), "
        r"FTS backfill deferred, [\d.]+ s$",
        result.stdout,
        re.M,
    )
    assert "fts backfill:" not in result.stderr

    done = _cli("fts", "backfill", "--url", str(grown_v22), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert re.search(
        rf"^summary: {FIXTURE_MESSAGES + EXTRA} messages indexed, 10 legacy FTS tables "
        r"removed, [\d.]+ s$",
        done.stdout,
        re.M,
    )
    assert migrate.check(str(grown_v22)).ok


def _alembic(*args: str, home: Path) -> subprocess.CompletedProcess[str]:
    alembic = shutil.which("alembic", path=str(Path(sys.executable).parent))
    assert alembic is not None
    env = {**os.environ, "HERMES_HOME": str(home)}
    env.pop("HERMES_STORE_URL", None)
    return subprocess.run(
        [alembic, *args], cwd=REPO_ROOT, capture_output=True, text=True, env=env, timeout=300
    )


def test_alembic_upgrade_logs_its_revisions_and_what_is_left(
    grown_v22: Path, hermes_home: Path
) -> None:
    result = _alembic("-x", f"url={grown_v22}", "upgrade", "head", home=hermes_home)
    assert result.returncode == 0, result.stderr
    log = result.stderr
    assert "Running upgrade 0022 -> 0023" in log
    assert "adopting a database written by Hermes (schema_version 22) at revision 0022" in log
    command = f"hermes-store fts backfill --url '{grown_v22}'"
    left = [line for line in log.splitlines() if command in line]
    assert len(left) == 1 and left[0].startswith("WARN")
    assert f"{FIXTURE_MESSAGES + EXTRA} message ids to index" in left[0]
    assert "10 legacy FTS tables to remove" in left[0]
    assert not migrate.check(str(grown_v22)).ok

    # the command it names finishes the work, after which alembic has nothing to add
    finished = subprocess.run(
        [CLI, *command.split()[1:3], "--url", str(grown_v22)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert finished.returncode == 0, finished.stderr
    assert migrate.check(str(grown_v22)).ok
    again = _alembic("-x", f"url={grown_v22}", "upgrade", "head", home=hermes_home)
    assert again.returncode == 0, again.stderr
    assert "Running upgrade" not in again.stderr
    assert "not finished" not in again.stderr


def test_alembic_upgrade_of_a_new_database_lists_every_revision(
    tmp_path: Path, hermes_home: Path
) -> None:
    db = tmp_path / "new.db"
    result = _alembic("-x", f"url={db}", "upgrade", "head", home=hermes_home)
    assert result.returncode == 0, result.stderr
    applied = re.findall(r"Running upgrade (\S*) -> (\d{4})", result.stderr)
    assert [to for _, to in applied] == [f"{n:04d}" for n in range(1, 24)]


def test_migrations_run_from_python_leave_logging_alone(legacy_db) -> None:  # type: ignore[no-untyped-def]
    """hermes-store builds its Alembic configuration in code: no alembic.ini is loaded,
    so no handler or level of the caller's is replaced."""
    root = logging.getLogger()
    watched = [root, logging.getLogger("alembic"), logging.getLogger("hermes_store")]
    before = [(lg.level, list(lg.handlers), lg.disabled) for lg in watched]
    sqlalchemy_level = logging.getLogger("sqlalchemy.engine").level
    report = migrate.upgrade(str(legacy_db(22)))
    assert report.after == migrate.HEAD
    assert [(lg.level, list(lg.handlers), lg.disabled) for lg in watched] == before
    assert logging.getLogger("sqlalchemy.engine").level == sqlalchemy_level
