"""`check`, `check --json` and `current` tell one truth about where a file stands
(issue 35 item 17): a v23 file the original wrote and hermes-store has not adopted is not
at head (revision none) in all three, and an adopted one is at head in all three. Run per
SQLite driver (chosen once per process) and journal mode."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from helpers.databases import set_journal_mode

from hermes_store import migrate
from hermes_store.migration.head import HEAD_REVISION


def _cli(driver: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "hermes_store.cli", *args],
        capture_output=True,
        text=True,
        env={**os.environ, "HERMES_STORE_SQLITE_DRIVER": driver},
        timeout=120,
        check=False,
    )


def _three_answers(driver: str, path: Path) -> tuple[str, bool, str]:
    """(check's `at head:` line, check --json's at_head, current's `revision:` line)."""
    text = _cli(driver, "check", "--url", str(path)).stdout
    (line,) = [x for x in text.splitlines() if x.startswith("at head:")]
    status = json.loads(_cli(driver, "check", "--json", "--url", str(path)).stdout)["status"]
    current = _cli(driver, "current", "--url", str(path)).stdout
    (revision,) = [x for x in current.splitlines() if x.startswith("revision:")]
    return line, bool(status["at_head"]), revision


@pytest.mark.parametrize("journal", ["wal", "delete"])
@pytest.mark.parametrize("driver", ["sqlite3", "pysqlite3"])
def test_check_json_and_current_agree_on_an_unadopted_v23_file(
    legacy_db: Callable[..., Path], driver: str, journal: str
) -> None:
    path = legacy_db(23, "state.db")
    set_journal_mode(path, journal)
    line, at_head, revision = _three_answers(driver, path)
    assert revision.split()[1] == "none", revision
    assert at_head is False
    assert line.split()[2].startswith("no"), line
    assert "revision none" in line and "not adopted" in line, line

    migrate.upgrade(str(path), fts_min_pause=0)
    line, at_head, revision = _three_answers(driver, path)
    assert revision.split()[1] == HEAD_REVISION, revision
    assert at_head is True
    assert line.split()[2] == "yes", line
