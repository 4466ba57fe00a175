"""Reading never requires a write (issue 24): a `state.db` the original v23 code wrote,
which hermes-store has not adopted, is read as it is by the CLI's read commands, by
`Store(url, read_only=True)` and by `hermes_store.read_only_engine`, and is left with
the same bytes, the same mode and no -wal/-shm it did not have; a file whose shape is
older is refused with what it lacks and the command that adds it."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import stat
from pathlib import Path
from typing import Any

import pytest
from helpers.databases import fixture_file, set_journal_mode
from helpers.processes import run_cli_here as run_cli  # the commands' main, in-process
from sqlalchemy import text

import hermes_store
from hermes_store import migrate
from hermes_store.errors import NotAtHead, SchemaBehind
from hermes_store.repositories.search import SearchRepository
from hermes_store.repositories.sessions import SessionRepository
from hermes_store.repositories.usage import UsageRepository
from hermes_store.store import Store

#: A mode nothing of hermes-store would give a file: reading must keep it.
MODE = 0o640
SIDECARS = ("-wal", "-shm", "-journal")


def _copy(version: int, target: Path, journal: str | None = None) -> Path:
    """The fixture database alone (no -wal/-shm: nothing has it open), mode MODE."""
    shutil.copyfile(fixture_file(version), target)
    if journal is not None:
        set_journal_mode(target, journal)
    os.chmod(target, MODE)
    return target


def _state(path: Path) -> tuple[str, int, list[str]]:
    """The file's SHA-256, its mode and the companions next to it."""
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    mode = stat.S_IMODE(path.stat().st_mode)
    return digest, mode, sorted(s for s in SIDECARS if Path(f"{path}{s}").exists())


READ_COMMANDS: list[list[str]] = [
    ["stats"],
    ["stats", "--by", "model,day", "--json"],
    ["search", "kyoto"],
    ["search", "迁移", "--json"],
    ["sessions", "list"],
    ["sessions", "list", "--json"],
    ["sessions", "show", "20260302"],
    ["sessions", "export"],
    ["sessions", "prune", "--older-than", "0", "--dry-run"],
    ["current"],
    ["check"],
]


@pytest.mark.parametrize("journal", ["wal", "delete"])
def test_read_commands_read_a_live_v23_file_as_it_is(tmp_path: Path, journal: str) -> None:
    path = _copy(23, tmp_path / "state.db", journal)
    before = _state(path)
    assert before[2] == []
    for command in READ_COMMANDS:
        done = run_cli(*command, "--url", str(path))
        assert done.returncode == 0, (command, done.stderr)
        assert _state(path) == before, command
    listed = json.loads(run_cli("sessions", "list", "--json", "--url", str(path)).stdout)
    assert len(listed) == 4
    assert "Kyoto" in run_cli("search", "kyoto", "--url", str(path)).stdout
    current = run_cli("current", "--url", str(path)).stdout
    assert "(legacy)" in current and "readable:        yes" in current
    assert _state(path) == before


def test_a_read_only_store_reads_an_unadopted_v23_file(tmp_path: Path) -> None:
    path = _copy(23, tmp_path / "state.db")
    before = _state(path)
    with Store(str(path), read_only=True) as store:
        assert len(SessionRepository(store).list_sessions_rich()) == 4
        hits = SearchRepository(store).search_messages("kyoto")
        assert {hit["session_id"] for hit in hits} == {"20260302_140000_7e1e9a"}
        assert UsageRepository(store).usage_by_model()
    assert _state(path) == before


def test_read_only_engine_reads_it_and_leaves_it_as_it_was(tmp_path: Path) -> None:
    path = _copy(23, tmp_path / "state.db")
    before = _state(path)
    engine = hermes_store.read_only_engine(str(path))
    try:
        with engine.connect() as conn:
            assert conn.execute(text("SELECT COUNT(*) FROM messages")).scalar() == 64
    finally:
        engine.dispose()
    assert _state(path) == before


def test_a_writable_store_asks_for_the_adoption_first(tmp_path: Path) -> None:
    path = _copy(23, tmp_path / "state.db")
    before = _state(path)
    with pytest.raises(NotAtHead, match="not adopted.*hermes-store upgrade.*read_only=True"):
        Store(str(path))
    assert _state(path) == before


def _assert_names_what_v9_lacks(message: str, path: Path) -> None:
    assert "older than this hermes-store" in message
    assert "session_key" in message and "compression_locks" in message
    assert f"hermes-store upgrade --url '{path}'" in message


def test_a_v9_file_is_refused_with_what_it_lacks(tmp_path: Path) -> None:
    path = _copy(9, tmp_path / "state.db")
    before = _state(path)
    for command in (["stats"], ["sessions", "list"], ["search", "kyoto"], ["sessions", "export"]):
        done = run_cli(*command, "--url", str(path))
        assert done.returncode == 2, (command, done.stdout)
        (line,) = done.stderr.splitlines()
        assert line.startswith("hermes-store: error: ")
        _assert_names_what_v9_lacks(line, path)
    assert _state(path) == before


@pytest.mark.parametrize("read_only", [True, False])
def test_a_store_on_a_never_upgraded_v9_file_is_refused_typed(
    tmp_path: Path, read_only: bool
) -> None:
    path = _copy(9, tmp_path / "state.db")
    before = _state(path)
    with pytest.raises(SchemaBehind) as refused:
        Store(str(path), read_only=read_only)
    _assert_names_what_v9_lacks(str(refused.value), path)
    assert "column sessions.session_key" in refused.value.missing
    assert _state(path) == before


def test_the_facade_read_only_on_a_v9_file_is_refused_typed(tmp_path: Path) -> None:
    from hermes_store.compat import SessionDB

    path = _copy(9, tmp_path / "state.db")
    before = _state(path)
    with pytest.raises(SchemaBehind, match="session_key"):
        SessionDB(path, read_only=True)
    assert _state(path) == before


def test_postgresql_behind_head_is_refused_with_what_it_lacks(pg_url: str) -> None:
    migrate.upgrade(pg_url, revision="0022")
    done = run_cli("stats", "--url", pg_url)
    assert done.returncode == 2
    assert "older than this hermes-store" in done.stderr
    assert "pinned" in done.stderr and "display_kind" in done.stderr
    assert "hermes-store upgrade --url" in done.stderr
    with pytest.raises(SchemaBehind) as refused:
        Store(pg_url, read_only=True)
    assert "column sessions.pinned" in refused.value.missing
    migrate.upgrade(pg_url)
    with Store(pg_url, read_only=True) as store:
        assert SessionRepository(store).list_sessions_rich() == []


def _dump(value: Any) -> str:
    return json.dumps(value, sort_keys=True, default=str)


def test_what_a_read_only_store_reads_is_what_an_upgraded_copy_reads(tmp_path: Path) -> None:
    """Reading the file as it is gives the same answers as after adopting a copy."""
    path = _copy(23, tmp_path / "state.db")
    adopted = _copy(23, tmp_path / "adopted.db")
    os.chmod(adopted, 0o600)
    migrate.upgrade(str(adopted), fts_min_pause=0)
    answers = []
    for target in (path, adopted):
        with Store(str(target), read_only=True) as store:
            answers.append(
                (
                    _dump(SessionRepository(store).list_sessions_rich(limit=None)),
                    _dump(SearchRepository(store).search_messages("patch")),
                    _dump(UsageRepository(store).usage_by_model_and_day()),
                )
            )
    assert answers[0] == answers[1]


def test_read_commands_leave_an_adopted_wal_file_without_companions(tmp_path: Path) -> None:
    """A file hermes-store manages, in WAL mode and closed (no -wal/-shm): read-only
    connections create them, and the commands remove them again."""
    path = _copy(23, tmp_path / "state.db")
    migrate.upgrade(str(path), fts_min_pause=0)
    os.chmod(path, MODE)
    before = _state(path)
    assert before[2] == [] and path.read_bytes()[18] == 2  # WAL, closed cleanly
    for command in READ_COMMANDS:
        done = run_cli(*command, "--url", str(path))
        assert done.returncode == 0, (command, done.stderr)
        assert _state(path) == before, command
