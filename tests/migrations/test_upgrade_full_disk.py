"""A full disk during `upgrade` (issue 24): the typed StorageFull message naming the
command that continues, the file left intact, and afterwards `check` reports the FTS work
the upgrade left (a pending backfill, legacy tables to tear down) as not ok, with the
command that finishes it. The disk is a small tmpfs (mounting one needs root)."""

from __future__ import annotations

import errno
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from helpers.databases import fixture_file, set_journal_mode
from helpers.filesystem import tmpfs

from hermes_store import migrate
from hermes_store.errors import StorageFull
from hermes_store.search.maintenance import Progress

pytestmark = pytest.mark.sqlite_only


@pytest.fixture
def tiny_fs(tmp_path: Path) -> Iterator[Path]:
    with tmpfs(tmp_path / "tiny", "1m") as mount_point:
        yield mount_point


def _fill(directory: Path) -> Path:
    """A file that takes every free byte of `directory`'s file system."""
    filler = directory / "filler"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        while True:
            os.write(fd, b"\0" * 4096)
    except OSError as exc:
        assert exc.errno == errno.ENOSPC, exc
    finally:
        os.close(fd)
    return filler


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "hermes_store.cli", *args],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def _quick_check(path: Path) -> str:
    done = _cli("check", "--url", str(path))
    return next(line for line in done.stdout.splitlines() if line.startswith("quick_check:"))


def test_upgrade_on_a_full_disk_says_so_and_check_names_what_is_left(tiny_fs: Path) -> None:
    path = tiny_fs / "state.db"
    shutil.copyfile(fixture_file(22), path)
    # --no-backup: this is about the upgrade's own writes, and the 1 MB disk has no room
    # for a copy beside the file (a backup on a full disk: tests/cli/test_cli_revisions.py)
    deferred = _cli("upgrade", "--url", str(path), "--defer-fts-backfill", "--no-backup")
    assert deferred.returncode == 0, deferred.stderr
    filler = _fill(tiny_fs)

    full = _cli("upgrade", "--url", str(path), "--no-backup")

    assert full.returncode == 2, full.stdout
    (line,) = full.stderr.splitlines()
    assert line.startswith(f"hermes-store: error: the disk holding the database {path} is full")
    assert "the database is intact" in line
    assert f"Free some space, then run: hermes-store upgrade --url '{path}'" in line
    filler.unlink()

    left = _cli("check", "--url", str(path))
    assert left.returncode == 1, left.stdout
    assert "FTS backfill pending" in left.stdout
    assert f"hermes-store fts backfill --url '{path}'" in left.stdout
    assert _quick_check(path) == "quick_check:   ok"
    done = _cli("upgrade", "--url", str(path), "--no-backup")
    assert done.returncode == 0, done.stderr
    assert _cli("check", "--url", str(path)).returncode == 0


def test_a_disk_full_mid_teardown_leaves_work_check_reports(tiny_fs: Path) -> None:
    path = tiny_fs / "state.db"
    shutil.copyfile(fixture_file(22), path)
    # rollback-journal mode: every step needs room for its journal
    set_journal_mode(path, "delete")
    fillers: list[Path] = []

    def fill_during_teardown(progress: Progress) -> None:
        if progress.phase == "teardown" and not fillers:
            fillers.append(_fill(tiny_fs))

    with pytest.raises(StorageFull, match="is full.*hermes-store upgrade --url"):
        migrate.upgrade(str(path), fts_min_pause=0, on_progress=fill_during_teardown)
    assert fillers, "the upgrade never reached the teardown"
    fillers[0].unlink()

    status = migrate.current(str(path))
    assert status.at_head and status.fts is not None
    assert not status.fts.backfill_pending and status.fts.trash_tables
    left = _cli("check", "--url", str(path))
    assert left.returncode == 1, left.stdout
    assert "legacy FTS table(s)" in left.stdout and "left to tear down" in left.stdout
    assert f"hermes-store fts backfill --url '{path}'" in left.stdout
    finished = _cli("fts", "backfill", "--url", str(path))
    assert finished.returncode == 0, finished.stderr
    assert _cli("check", "--url", str(path)).returncode == 0


def test_check_reports_legacy_tables_left_to_tear_down(tmp_path: Path) -> None:
    """The state a stopped teardown leaves (here: stopped after the backfill's step), on
    any disk: `check` is not ok and names the command that finishes it."""
    from hermes_store.runtime.engine import make_engine
    from hermes_store.search import maintenance

    path = tmp_path / "state.db"
    shutil.copyfile(fixture_file(22), path)
    migrate.upgrade(str(path), defer_fts_backfill=True)
    engine = make_engine(str(path))
    try:
        maintenance.run_backfill(engine, min_pause=0, max_steps=2)
    finally:
        engine.dispose()
    state = migrate.current(str(path)).fts
    assert state is not None and not state.backfill_pending and state.trash_tables
    left = _cli("check", "--url", str(path))
    assert left.returncode == 1, left.stdout
    assert f"left to tear down: run `hermes-store fts backfill --url '{path}'`" in left.stdout
    assert _cli("fts", "backfill", "--url", str(path)).returncode == 0
    assert _cli("check", "--url", str(path)).returncode == 0
