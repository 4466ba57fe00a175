"""What the store holds, its own export brings back (issue 35 item 14): a session of more
than 10,000 messages, and one of more than 5 MB, both of which the store accepts, are
exported by `hermes-store sessions export` and imported whole by `sessions import`
(the entry-by-entry import leaves out `import_sessions`' limits on one session; that
all-or-nothing call keeps the original's). SQLite per driver and journal mode, and
PostgreSQL."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from helpers.databases import set_journal_mode
from helpers.postgres import pg_database

from hermes_store import migrate
from hermes_store.repositories.maintenance import MaintenanceRepository
from hermes_store.repositories.messages import MessageRepository
from hermes_store.repositories.sessions import SessionRepository
from hermes_store.store import Store

MANY = 10_001  # one more than import_sessions takes in one session
HEAVY = 6  # messages of 1 MiB: 6 MiB, over import_sessions' 5 MB per session


def _cli(*args: str, driver: str = "sqlite3") -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "hermes_store.cli", *args],
        capture_output=True,
        text=True,
        env={**os.environ, "HERMES_STORE_SQLITE_DRIVER": driver},
        timeout=600,
        check=False,
    )


def _transcripts(url: str) -> dict[str, tuple[int, str]]:
    """session id -> (messages, a digest of their roles and contents in order)."""
    found = {}
    with Store(url, read_only=True) as store:
        messages = MessageRepository(store)
        for session in SessionRepository(store).list_sessions_rich(limit=None):
            rows = messages.get_messages(session["id"])
            digest = hashlib.sha256(
                json.dumps([[m["role"], m["content"]] for m in rows]).encode()
            ).hexdigest()
            found[session["id"]] = (len(rows), digest)
    return found


@pytest.fixture(scope="module")
def export(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, dict[str, Any]]]:
    """An export (JSONL) of a store holding both sessions, and their transcripts."""
    directory = tmp_path_factory.mktemp("source")
    url = str(directory / "state.db")
    migrate.upgrade(url, fts_min_pause=0)
    with Store(url) as store:
        sessions, messages = SessionRepository(store), MessageRepository(store)
        sessions.create_session("many", "cli")
        messages.append_messages(
            "many", [{"role": "user", "content": f"message {i}"} for i in range(MANY)]
        )
        sessions.create_session("heavy", "cli")
        for i in range(HEAVY):
            messages.append_message("heavy", "tool", f"{i}" + "x" * (1024 * 1024))
        assert (
            len(
                MaintenanceRepository(store).import_sessions(
                    [MaintenanceRepository(store).export_session("many")]
                )["errors"]
            )
            == 1
        )  # the all-or-nothing call keeps the original's limit
    output = directory / "export.jsonl"
    done = _cli("sessions", "export", "--url", url, "--output", str(output))
    assert done.returncode == 0, done.stderr
    yield output, _transcripts(url)


def _import_and_compare(export: tuple[Path, dict[str, Any]], url: str, driver: str) -> None:
    output, expected = export
    assert expected["many"][0] == MANY and expected["heavy"][0] == HEAVY
    done = _cli("sessions", "import", str(output), "--json", "--url", url, driver=driver)
    assert done.returncode == 0, (done.stdout[-2000:], done.stderr)
    report = json.loads(done.stdout)
    assert (report["imported"], report["errors"]) == (2, []), report
    assert _transcripts(url) == expected


@pytest.mark.parametrize("journal", ["wal", "delete"])
@pytest.mark.parametrize("driver", ["sqlite3", "pysqlite3"])
def test_export_then_import_brings_back_large_sessions_on_sqlite(
    export: tuple[Path, dict[str, Any]], tmp_path: Path, driver: str, journal: str
) -> None:
    target = tmp_path / "target.db"
    migrate.upgrade(str(target), fts_min_pause=0)
    set_journal_mode(target, journal)
    _import_and_compare(export, str(target), driver)


def test_export_then_import_brings_back_large_sessions_on_postgresql(
    export: tuple[Path, dict[str, Any]],
) -> None:
    with pg_database(at_head=True) as url:
        _import_and_compare(export, url, "sqlite3")
