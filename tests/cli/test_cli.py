"""The `hermes-store` console script, run as a real subprocess on real files."""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from hermes_store.migration.head import HEAD_REVISION
from hermes_store.search.maintenance import integrity_errors

CLI = str(Path(sys.executable).with_name("hermes-store"))


def run(*args: str, env_home: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "HERMES_HOME": str(env_home)}
    env.pop("HERMES_STORE_URL", None)
    return subprocess.run([CLI, *args], capture_output=True, text=True, env=env, timeout=120)


def test_upgrade_creates_the_default_database_and_is_idempotent(hermes_home: Path) -> None:
    first = run("upgrade", env_home=hermes_home)
    assert first.returncode == 0, first.stderr
    db = hermes_home / "state.db"
    assert db.exists()
    assert f"none -> {HEAD_REVISION}" in first.stdout
    before = db.read_bytes()
    second = run("upgrade", env_home=hermes_home)
    assert second.returncode == 0, second.stderr
    assert f"{HEAD_REVISION} -> {HEAD_REVISION}" in second.stdout
    assert db.read_bytes() == before
    assert oct(db.stat().st_mode & 0o777) == "0o600"


def test_current_and_check_json(hermes_home: Path, tmp_path: Path) -> None:
    db = tmp_path / "x.db"
    assert run("upgrade", "--url", str(db), env_home=hermes_home).returncode == 0
    current = run("current", "--url", str(db), "--json", env_home=hermes_home)
    data = json.loads(current.stdout)
    assert data["alembic_revision"] == HEAD_REVISION and data["schema_version"] == 23
    assert data["fts"]["layout"] == "v23" and not data["fts"]["backfill_pending"]
    check = run("check", "--url", f"sqlite:///{db}", "--json", env_home=hermes_home)
    assert check.returncode == 0, check.stdout
    assert json.loads(check.stdout)["ok"] is True


def test_deferred_backfill_then_fts_backfill(
    hermes_home: Path,
    legacy_db,
    tmp_path: Path,  # type: ignore[no-untyped-def]
) -> None:
    db = legacy_db(15)
    up = run("upgrade", "--url", str(db), "--defer-fts-backfill", env_home=hermes_home)
    assert up.returncode == 0, up.stderr
    assert "backfill pending" in up.stdout and "adopted" in up.stdout
    pending = run("check", "--url", str(db), env_home=hermes_home)
    assert pending.returncode == 1
    assert "hermes-store fts backfill" in pending.stdout
    done = run("fts", "backfill", "--url", str(db), env_home=hermes_home)
    assert done.returncode == 0, done.stderr
    assert run("check", "--url", str(db), env_home=hermes_home).returncode == 0


def test_fts_rebuild_repairs_a_damaged_index(hermes_home: Path, legacy_db) -> None:  # type: ignore[no-untyped-def]
    db = legacy_db(23)
    assert run("upgrade", "--url", str(db), env_home=hermes_home).returncode == 0
    con = sqlite3.connect(db)
    # drop one document from the index behind the triggers' back
    con.execute(
        "INSERT INTO messages_fts(messages_fts, rowid, content, tool_name, tool_calls) "
        "SELECT 'delete', id, content, tool_name, tool_calls FROM messages WHERE id = 5"
    )
    con.commit()
    con.close()
    assert run("check", "--url", str(db), env_home=hermes_home).returncode == 1
    rebuilt = run("fts", "rebuild", "--url", str(db), env_home=hermes_home)
    assert rebuilt.returncode == 0, rebuilt.stderr
    assert run("check", "--url", str(db), env_home=hermes_home).returncode == 0
    from sqlalchemy import create_engine

    engine = create_engine(f"sqlite:///{db}")
    with engine.connect() as conn:
        assert integrity_errors(conn) == []
    engine.dispose()


def test_newer_database_is_refused_with_one_line(hermes_home: Path, legacy_db) -> None:  # type: ignore[no-untyped-def]
    db = legacy_db(23)
    con = sqlite3.connect(db)
    con.execute("UPDATE schema_version SET version = 27")
    con.commit()
    con.close()
    before = db.read_bytes()
    result = run("upgrade", "--url", str(db), env_home=hermes_home)
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("hermes-store: error:")
    assert "27" in lines[0] and "23" in lines[0]
    assert db.read_bytes() == before


@pytest.mark.parametrize("command", ["current", "check", "fts backfill"])
def test_missing_database_is_a_clear_error(hermes_home: Path, tmp_path: Path, command: str) -> None:
    missing = tmp_path / "nope" / "state.db"
    result = run(*command.split(), "--url", str(missing), env_home=hermes_home)
    assert result.returncode == 2
    assert "hermes-store: error:" in result.stderr
    assert str(missing) in result.stderr or "no database" in result.stderr


def test_not_a_hermes_database(hermes_home: Path, tmp_path: Path) -> None:
    other = tmp_path / "other.db"
    con = sqlite3.connect(other)
    con.execute("CREATE TABLE notes (body TEXT)")
    con.execute("INSERT INTO notes VALUES ('keep me')")
    con.commit()
    con.close()
    result = run("upgrade", "--url", str(other), env_home=hermes_home)
    assert result.returncode == 2 and "no hermes sessions" in result.stderr.lower()
    con = sqlite3.connect(other)
    assert con.execute("SELECT body FROM notes").fetchall() == [("keep me",)]
    names = {r[0] for r in con.execute("SELECT name FROM sqlite_master")}
    con.close()
    assert names == {"notes"}


def test_alembic_from_the_repository_root(hermes_home: Path, tmp_path: Path) -> None:
    db = tmp_path / "via-alembic.db"
    alembic = shutil.which("alembic", path=str(Path(sys.executable).parent))
    assert alembic is not None
    repo = Path(__file__).resolve().parents[2]
    env = {**os.environ, "HERMES_HOME": str(hermes_home)}
    result = subprocess.run(
        [alembic, "-x", f"url=sqlite:///{db}", "upgrade", "head"],
        cwd=repo,
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    con = sqlite3.connect(db)
    assert con.execute("SELECT version FROM schema_version").fetchall() == [(23,)]
    version = con.execute("SELECT version_num FROM hermes_store_version").fetchall()
    assert version == [(HEAD_REVISION,)]
    con.close()


def test_search_command(hermes_home: Path, legacy_db) -> None:  # type: ignore[no-untyped-def]
    db = legacy_db(22)
    refused = run("search", "Kyoto", "--url", str(db), env_home=hermes_home)
    assert refused.returncode == 2 and "hermes-store upgrade" in refused.stderr
    assert run("upgrade", "--url", str(db), env_home=hermes_home).returncode == 0
    found = run("search", "Kyoto", "--url", str(db), "--json", env_home=hermes_home)
    assert found.returncode == 0, found.stderr
    sessions = {hit["session_id"] for hit in json.loads(found.stdout)}
    assert sessions == {"20260302_140000_7e1e9a"}
    none = run("search", "don't", "--url", str(db), env_home=hermes_home)
    assert none.returncode == 0 and "no matches" in none.stdout
