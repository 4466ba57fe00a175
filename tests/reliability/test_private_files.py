"""A database holds people's conversations: every file hermes-store creates for one is
readable by its owner only, from its first byte (a process of another user that opened a
0644 file in the moment before a chmod would keep reading through its descriptor)."""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest
from helpers.processes import run_cli_here as run_cli  # the commands' main, in-process

from hermes_store.config import JournalPolicy
from hermes_store.runtime.engine import make_engine, write_connection

pytestmark = pytest.mark.sqlite_only


@pytest.fixture(autouse=True)
def permissive_umask() -> Iterator[None]:
    """The usual umask, under which a plain create gives 0644."""
    old = os.umask(0o022)
    yield
    os.umask(old)


def _modes(directory: Path) -> dict[str, str]:
    return {p.name: oct(stat.S_IMODE(p.stat().st_mode)) for p in directory.iterdir()}


@pytest.mark.parametrize("journal", ["delete", "wal"])
def test_a_new_database_is_private_before_anything_is_written(
    tmp_path: Path, journal: str
) -> None:
    tmp_path = tmp_path / "db"
    path = tmp_path / "state.db"
    engine = make_engine(path, journal=JournalPolicy(journal))
    try:
        with engine.connect():
            # connected, nothing written yet: SQLite has created the file
            assert path.exists()
            assert _modes(tmp_path) == {"state.db": "0o600"}
        with write_connection(engine) as conn, conn.begin():
            conn.exec_driver_sql("CREATE TABLE t (x)")
            conn.exec_driver_sql("INSERT INTO t VALUES (1)")
            # mid-transaction: the journal (or -wal/-shm) exists too
            sidecars = {"delete": {"state.db-journal"}, "wal": {"state.db-wal", "state.db-shm"}}
            assert sidecars[journal] <= set(_modes(tmp_path))
            assert set(_modes(tmp_path).values()) == {"0o600"}, _modes(tmp_path)
    finally:
        engine.dispose()


def test_upgrade_and_copy_create_private_files(tmp_path: Path) -> None:
    source = tmp_path / "a" / "state.db"
    done = run_cli("upgrade", "--url", str(source))
    assert done.returncode == 0, done.stderr
    target = tmp_path / "b" / "copy.db"
    target.parent.mkdir()
    done = run_cli("copy", "--from", str(source), "--to", str(target))
    assert done.returncode == 0, done.stdout + done.stderr
    for directory in (source.parent, target.parent):
        assert set(_modes(directory).values()) == {"0o600"}, _modes(directory)


def test_an_existing_file_keeps_its_mode_until_written(tmp_path: Path) -> None:
    """Reading leaves a file as found (0644 from the original, say); the first write makes
    it private."""
    tmp_path = tmp_path / "db"
    path = tmp_path / "state.db"
    assert run_cli("upgrade", "--url", str(path)).returncode == 0
    path.chmod(0o644)
    assert run_cli("sessions", "list", "--url", str(path)).returncode == 0
    assert _modes(tmp_path) == {"state.db": "0o644"}
    engine = make_engine(path)
    try:
        with write_connection(engine) as conn, conn.begin():
            conn.exec_driver_sql("SELECT 1")
    finally:
        engine.dispose()
    assert _modes(tmp_path) == {"state.db": "0o600"}
