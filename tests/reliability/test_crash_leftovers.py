"""What a writer killed mid-transaction leaves behind, met by the commands that only read.

In DELETE mode the writer's changes that no longer fitted in its cache are already in the
database file, and the pages they replaced are in the rollback journal: a *hot* journal,
which SQLite must roll back before the file can be read, and which a read-only connection
cannot roll back. In WAL mode the uncommitted frames stay in the -wal file, which readers
ignore. Either way the read commands work and see the last committed state.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers.databases import journal_mode, set_journal_mode, sqlite_connect
from helpers.filesystem import read_only_path
from helpers.processes import run_cli, start_hanging_writer

from hermes_store.compat import SessionDB
from hermes_store.config import JOURNAL_ENV

pytestmark = pytest.mark.sqlite_only


def _crash_a_writer(url: str) -> Path:
    path = Path(url.removeprefix("sqlite:///"))
    db = SessionDB(path)
    db.create_session("kept", "cli")
    db.append_message("kept", "user", "committed before the crash")
    db.close()
    writer = start_hanging_writer(url, spill=True)
    writer.kill()
    writer.wait()
    return path


def _committed_only(path: Path) -> None:
    con = sqlite_connect(path)
    try:
        assert con.execute("PRAGMA integrity_check").fetchone() == ("ok",)
        rows = con.execute("SELECT session_id, content FROM messages ORDER BY id").fetchall()
        assert rows == [("kept", "committed before the crash")]
        title = con.execute("SELECT title FROM sessions WHERE id = 'kept'").fetchone()
        assert title == (None,)
    finally:
        con.close()


READ_COMMANDS = {
    "sessions list": ["sessions", "list"],
    "check": ["check"],
    "search": ["search", "crash"],
    "prune --dry-run": ["sessions", "prune", "--older-than", "0", "--dry-run"],
    "stats": ["stats"],
    "current": ["current"],
}


@pytest.mark.parametrize("command", list(READ_COMMANDS))
def test_read_commands_after_a_killed_writer(
    journal_db: str, journal: str, command: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(JOURNAL_ENV, journal)  # kept: a fixed SQLite would make it WAL
    path = _crash_a_writer(journal_db)
    if journal == "delete":
        assert Path(f"{path}-journal").stat().st_size > 0, "the writer left no journal"
    done = run_cli(*READ_COMMANDS[command], "--url", str(path))
    assert done.returncode == 0, done.stdout + done.stderr
    assert "readonly" not in done.stderr
    if command == "search":
        assert "committed before the crash" in done.stdout.replace(">>>", "").replace("<<<", "")
    if journal == "delete":
        assert "rolled back the unfinished transaction" in done.stderr
        assert not Path(f"{path}-journal").exists()
    assert journal_mode(path) == journal
    _committed_only(path)


def test_copy_from_a_file_a_killed_writer_left(journal_db: str, tmp_path: Path) -> None:
    path = _crash_a_writer(journal_db)
    target = tmp_path / "copy.db"
    done = run_cli("copy", "--from", str(path), "--to", str(target))
    assert done.returncode == 0, done.stdout + done.stderr
    _committed_only(target)


def test_a_reader_that_cannot_write_is_told_what_to_run(
    fresh_db: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # a rollback journal is DELETE mode's, whatever mode a fresh file gets here
    set_journal_mode(fresh_db.removeprefix("sqlite:///"), "delete")
    monkeypatch.setenv(JOURNAL_ENV, "delete")
    path = _crash_a_writer(fresh_db)
    journal = Path(f"{path}-journal")
    before = journal.read_bytes()
    with read_only_path(path.parent):
        done = run_cli("sessions", "list", "--url", str(path))
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1, done.stderr  # one line, no traceback
    assert f"left its rollback journal {journal}" in done.stderr
    assert f"hermes-store check --url '{path}'" in done.stderr
    assert journal.read_bytes() == before  # untouched, still there to be rolled back
    # the command it names does it, for a user who may write
    assert run_cli("check", "--url", str(path)).returncode == 0
    assert not journal.exists()
    _committed_only(path)
