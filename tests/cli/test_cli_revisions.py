"""`history`, `downgrade`, the backup `upgrade` takes, `--csv` and money in `--json`, and
what `upgrade` says about search on PostgreSQL (issue 36). Run as the real console
script on real SQLite files (both drivers, both journal modes where the file is written)
and on the PostgreSQL test server."""

from __future__ import annotations

import csv
import io
import json
import os
import re
import sqlite3
import stat
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from helpers.databases import set_journal_mode

from hermes_store.migration.head import HEAD_REVISION, UPSTREAM_HEAD_REVISION

CLI = str(Path(sys.executable).with_name("hermes-store"))
DRIVERS = ("sqlite3", "pysqlite3")
REPO = Path(__file__).resolve().parents[2]


def run(*args: str, home: Path, driver: str = "sqlite3") -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "HERMES_HOME": str(home), "HERMES_STORE_SQLITE_DRIVER": driver}
    env.pop("HERMES_STORE_URL", None)
    return subprocess.run([CLI, *args], capture_output=True, text=True, env=env, timeout=180)


def ok(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode == 0, (result.stdout, result.stderr)
    return result.stdout


def refused(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode == 2, (result.returncode, result.stdout, result.stderr)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("hermes-store: error: "), result.stderr
    return lines[0]


def revision_of(url: str) -> str | None:
    from hermes_store import migrate

    return migrate.current(url).alembic_revision


def backups(path: Path) -> list[Path]:
    return sorted(path.parent.glob(f"{path.name}.backup-*"))


def files_of(directory: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(directory.iterdir()) if p.is_file()}


@pytest.fixture(params=DRIVERS)
def driver(request: pytest.FixtureRequest) -> str:
    if request.param == "pysqlite3":
        pytest.importorskip("pysqlite3")
    return str(request.param)


@pytest.fixture(params=("delete", "wal"))
def journal(request: pytest.FixtureRequest) -> str:
    return str(request.param)


# --------------------------------------------------------------------------- history


def _chain() -> list[str]:
    """The revisions oldest first, by following each file's down_revision."""
    from alembic.script import ScriptDirectory

    from hermes_store import migrate

    script = ScriptDirectory.from_config(migrate.make_config())
    order: list[str] = []
    previous = None
    while True:
        nxt = [
            s for s in script.walk_revisions() if s.down_revision == previous
        ]  # one child each: the chain is linear
        if not nxt:
            return order
        assert len(nxt) == 1
        previous = str(nxt[0].revision)
        order.append(previous)


@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
def test_history_lists_the_revisions_in_order_and_marks_the_current(
    backend: str, tmp_path: Path, hermes_home: Path, request: pytest.FixtureRequest
) -> None:
    url = str(tmp_path / "state.db") if backend == "sqlite" else request.getfixturevalue("pg_url")
    ok(run("upgrade", "--url", url, home=hermes_home))
    chain = _chain()
    assert chain[0] == "0001" and chain[-1] == HEAD_REVISION

    data = json.loads(ok(run("history", "--url", url, "--json", home=hermes_home)))
    assert [r["revision"] for r in data["revisions"]] == chain
    assert [r["revision"] for r in data["revisions"] if r["current"]] == [HEAD_REVISION]
    assert data["current"] == HEAD_REVISION and data["downgrade_floor"] == UPSTREAM_HEAD_REVISION

    ok(run("downgrade", "hs0002", "--url", url, home=hermes_home))
    text = ok(run("history", "--url", url, home=hermes_home))
    listed = [
        line.split()[1] if line.startswith("*") else line.split()[0]
        for line in text.splitlines()[2:]
    ]
    assert listed == chain
    marked = [line for line in text.splitlines() if line.startswith("*")]
    assert len(marked) == 1 and marked[0].split()[1] == "hs0002" and "[current]" in marked[0]
    assert f"{HEAD_REVISION}" in text and "[head]" in text


def test_history_of_a_legacy_file_marks_where_it_is_adopted(
    legacy_db: Callable[..., Path], hermes_home: Path
) -> None:
    path = legacy_db(20)
    before = files_of(path.parent)
    data = json.loads(ok(run("history", "--url", str(path), "--json", home=hermes_home)))
    assert files_of(path.parent) == before  # history only reads
    assert data["kind"] == "legacy" and data["current"] is None
    assert data["adopt_at"] == "0020"
    assert not any(r["current"] for r in data["revisions"])


# --------------------------------------------------------------------------- downgrade


def test_downgrade_and_back_up_on_a_database_hermes_store_created(
    tmp_path: Path, hermes_home: Path, driver: str, journal: str
) -> None:
    from hermes_store import MessageRepository, SessionRepository, Store

    path = tmp_path / "state.db"
    ok(run("upgrade", "--url", str(path), home=hermes_home, driver=driver))
    set_journal_mode(path, journal)
    with Store(str(path)) as store:
        SessionRepository(store).create_session("s1", "cli", model="hermes-4")
        MessageRepository(store).append_message("s1", "user", "flights to Kyoto")

    out = ok(
        run(
            "downgrade", UPSTREAM_HEAD_REVISION, "--url", str(path), home=hermes_home, driver=driver
        )
    )
    assert f"revision {HEAD_REVISION} -> {UPSTREAM_HEAD_REVISION}" in out
    assert revision_of(str(path)) == UPSTREAM_HEAD_REVISION
    con = sqlite3.connect(path)
    try:
        tables = {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        assert not {
            t for t in tables if t.startswith("hermes_store_") and t != "hermes_store_version"
        }
        assert con.execute("SELECT content FROM messages").fetchall() == [("flights to Kyoto",)]
        assert con.execute("SELECT version FROM schema_version").fetchall() == [(23,)]
    finally:
        con.close()
    # the downgrade backed the file up first, as it was at the head
    (made,) = backups(path)
    assert f"backup: {made} " in out and made.name.startswith("state.db.backup-hs")

    up = ok(run("upgrade", "--url", str(path), home=hermes_home, driver=driver))
    assert f"{UPSTREAM_HEAD_REVISION} -> {HEAD_REVISION}" in up
    assert revision_of(str(path)) == HEAD_REVISION
    ok(run("check", "--url", str(path), home=hermes_home, driver=driver))
    found = json.loads(ok(run("search", "kyoto", "--url", str(path), "--json", home=hermes_home)))
    assert [h["session_id"] for h in found] == ["s1"]


def test_downgrade_and_back_up_on_postgresql(pg_url: str, hermes_home: Path) -> None:
    ok(run("upgrade", "--url", pg_url, home=hermes_home))
    out = ok(run("downgrade", "hs0001", "--url", pg_url, home=hermes_home))
    assert "backup: none (PostgreSQL" in out
    assert revision_of(pg_url) == "hs0001"
    ok(run("upgrade", "--url", pg_url, home=hermes_home))
    assert revision_of(pg_url) == HEAD_REVISION
    below = refused(run("downgrade", "0022", "--url", pg_url, home=hermes_home))
    assert "refusing to downgrade to 0022" in below
    assert revision_of(pg_url) == HEAD_REVISION


@pytest.mark.parametrize(
    ("version", "target"), [(23, "0022"), (20, "0019"), (20, "0021"), (23, "base")]
)
def test_downgrade_below_the_adoption_point_is_refused_and_changes_nothing(
    legacy_db: Callable[..., Path], hermes_home: Path, version: int, target: str
) -> None:
    path = legacy_db(version)
    ok(run("upgrade", "--url", str(path), "--no-backup", home=hermes_home))
    before = files_of(path.parent)
    line = refused(run("downgrade", target, "--url", str(path), home=hermes_home))
    assert f"refusing to downgrade to {target}" in line
    assert f"{UPSTREAM_HEAD_REVISION} (the upstream head) is as far back" in line
    assert "the original needs" in line and "nothing was changed" in line
    assert files_of(path.parent) == before  # no byte changed, no backup made
    assert revision_of(str(path)) == HEAD_REVISION


def test_downgrade_refuses_what_it_cannot_do(
    legacy_db: Callable[..., Path], tmp_path: Path, hermes_home: Path
) -> None:
    path = legacy_db(23)
    before = files_of(path.parent)
    # a file the original wrote and hermes-store has not adopted: nothing of its own
    line = refused(run("downgrade", UPSTREAM_HEAD_REVISION, "--url", str(path), home=hermes_home))
    assert "has not adopted it" in line
    assert files_of(path.parent) == before
    ok(run("upgrade", "--url", str(path), "--no-backup", home=hermes_home))
    assert "unknown revision 'hs9999'" in refused(
        run("downgrade", "hs9999", "--url", str(path), home=hermes_home)
    )
    ok(run("downgrade", "hs0001", "--url", str(path), "--no-backup", home=hermes_home))
    assert "is not below the current revision hs0001" in refused(
        run("downgrade", "hs0002", "--url", str(path), home=hermes_home)
    )
    assert "nothing to do" in ok(run("downgrade", "hs0001", "--url", str(path), home=hermes_home))
    missing = refused(
        run("downgrade", "0023", "--url", str(tmp_path / "none.db"), home=hermes_home)
    )
    assert "no hermes-store database" in missing and not (tmp_path / "none.db").exists()


# --------------------------------------------------------------------------- backup


def _backup_from(out: str) -> Path:
    match = re.search(
        r"^backup: (/\S+) \(the database before this upgrade, mode 0600\)$", out, re.M
    )
    assert match, out
    return Path(match.group(1))


def test_upgrade_backs_up_an_existing_file_first(
    legacy_db: Callable[..., Path], db: Any, hermes_home: Path, driver: str, journal: str
) -> None:
    path = legacy_db(22)
    set_journal_mode(path, journal)
    # A committed write a plain file copy could miss: in WAL mode it is still in the -wal
    # file, held there by the connection that stays open during the upgrade.
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("PRAGMA wal_autocheckpoint=0")
    holder.execute("UPDATE sessions SET title = 'before the upgrade' WHERE rowid = 1")
    try:
        expected = db.dump(path)
        out = ok(run("upgrade", "--url", str(path), home=hermes_home, driver=driver))
    finally:
        holder.close()
    made = _backup_from(out)
    assert made.parent == path.parent and made.name.startswith(f"{path.name}.backup-v22-")
    assert out.splitlines()[0].startswith("upgraded ") and out.splitlines()[1].startswith(
        "backup: "
    )
    assert stat.S_IMODE(made.stat().st_mode) == 0o600
    con = sqlite3.connect(f"file:{made}?mode=ro", uri=True)
    try:
        assert con.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
    finally:
        con.close()
    assert db.dump(made) == expected  # the file as it was, the -wal's write included
    assert revision_of(str(path)) == HEAD_REVISION
    assert backups(path) == [made]


def test_no_backup_when_skipped_new_or_already_at_head(
    legacy_db: Callable[..., Path], tmp_path: Path, hermes_home: Path
) -> None:
    path = legacy_db(21)
    out = ok(run("upgrade", "--url", str(path), "--no-backup", home=hermes_home))
    assert "backup: none (--no-backup)" in out and backups(path) == []
    again = ok(run("upgrade", "--url", str(path), home=hermes_home))
    assert "backup: none (at the head already: nothing to change)" in again
    assert backups(path) == []
    new = tmp_path / "new" / "state.db"
    assert "backup: none (a new database)" in ok(
        run("upgrade", "--url", str(new), home=hermes_home)
    )
    assert backups(new) == []


def test_an_upgrade_whose_backup_fails_changes_nothing(
    legacy_db: Callable[..., Path], hermes_home: Path
) -> None:
    # a file name the file system takes, whose backup's longer name it does not
    limit = os.pathconf(legacy_db(22).parent, "PC_NAME_MAX")
    path = legacy_db(22, "s" * (limit - 13) + ".db")  # room for -journal, not .backup-...
    before = files_of(path.parent)
    line = refused(run("upgrade", "--url", str(path), home=hermes_home))
    assert "could not create the backup" in line and "nothing was changed" in line
    assert "--no-backup" in line
    assert files_of(path.parent) == before
    assert revision_of(str(path)) is None  # still the original's file, not adopted


def test_an_upgrade_refused_as_unwritable_makes_no_backup(
    legacy_db: Callable[..., Path], hermes_home: Path
) -> None:
    from helpers.filesystem import read_only_path

    path = legacy_db(22)
    with read_only_path(path.parent):
        result = run("upgrade", "--url", str(path), home=hermes_home)
    line = refused(result)
    assert "read-only" in line and str(path.parent) in line and "backup" not in line
    assert "backup" not in result.stdout and backups(path) == []


def test_a_backup_without_room_says_the_disk_is_full(tmp_path: Path, hermes_home: Path) -> None:
    import errno
    import shutil

    from helpers.databases import fixture_file
    from helpers.filesystem import tmpfs

    with tmpfs(tmp_path / "tiny", "1m") as disk:
        path = disk / "state.db"
        shutil.copyfile(fixture_file(22), path)
        set_journal_mode(path, "delete")  # looking at it needs no room for a -shm file
        filler = disk / "filler"
        fd = os.open(filler, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            while True:
                os.write(fd, b"\0" * 4096)
        except OSError as exc:
            assert exc.errno == errno.ENOSPC, exc
        finally:
            os.close(fd)
        before = path.read_bytes()
        line = refused(run("upgrade", "--url", str(path), home=hermes_home))
        assert line.startswith(f"hermes-store: error: could not back up {path} to "), line
        assert "is full: the backup needs about" in line and "--no-backup" in line
        assert path.read_bytes() == before
        assert backups(path) == []  # the partial copy is gone
        filler.unlink()
        out = ok(run("upgrade", "--url", str(path), home=hermes_home))
        assert _backup_from(out).parent == disk


def test_no_backup_on_postgresql_and_search_index_said_plainly(
    pg_url: str, hermes_home: Path
) -> None:
    out = ok(run("upgrade", "--url", pg_url, home=hermes_home))
    assert "backup: none (PostgreSQL: hermes-store backs up SQLite files only" in out
    # PostgreSQL has no FTS5 triggers: no "0/6 triggers", which reads as a fault
    for text in (out, ok(run("current", "--url", pg_url, home=hermes_home))):
        assert "triggers" not in text.replace("no FTS5 tables, triggers", "")
        assert "search index:" in text and "messages.search_vector" in text
        assert re.search(r"word index (gin|rum) ", text), text


# --------------------------------------------------------------------------- csv, money


@pytest.fixture(params=["sqlite", "postgresql"])
def v23_url(
    request: pytest.FixtureRequest, legacy_db: Callable[..., Path], hermes_home: Path
) -> str:
    path = legacy_db(23)
    ok(run("upgrade", "--url", str(path), "--no-backup", home=hermes_home))
    if request.param == "sqlite":
        return str(path)
    target: str = request.getfixturevalue("pg_url")
    ok(run("copy", "--from", str(path), "--to", target, home=hermes_home))
    return target


def _cells(record: dict[str, Any]) -> dict[str, str]:
    """A --json record as its --csv row holds it."""

    def cell(value: Any) -> str:
        if value is None:
            return ""
        if isinstance(value, bool):
            return "true" if value else "false"
        if isinstance(value, list | dict):
            return json.dumps(value, ensure_ascii=False, sort_keys=True)
        return str(value)

    return {k: cell(v) for k, v in record.items()}


def _csv(text: str) -> list[dict[str, str]]:
    return list(csv.DictReader(io.StringIO(text, newline="")))


@pytest.mark.parametrize(
    "command",
    [("sessions", "list"), ("search", "digest"), ("search", "kyoto OR notifications")],
)
def test_csv_parses_and_matches_json(
    v23_url: str, hermes_home: Path, command: tuple[str, ...]
) -> None:
    as_json = json.loads(ok(run(*command, "--url", v23_url, "--json", home=hermes_home)))
    rows = _csv(ok(run(*command, "--url", v23_url, "--csv", home=hermes_home)))
    assert as_json and len(rows) == len(as_json)
    for row, record in zip(rows, as_json, strict=True):
        assert row == _cells(record)


@pytest.mark.parametrize("view", [None, "model", "day", "model,day"])
def test_stats_csv_matches_json_and_money_is_rounded(
    v23_url: str, hermes_home: Path, view: str | None
) -> None:
    by = ("--by", view) if view else ()
    text = ok(run("stats", *by, "--url", v23_url, "--json", home=hermes_home))
    as_json = json.loads(text)
    rows = _csv(ok(run("stats", *by, "--url", v23_url, "--csv", home=hermes_home)))
    keys = {"model": "by_model", "day": "by_day", "model,day": "by_model_day"}
    expected = [{"view": v, **_cells(r)} for v, key in keys.items() for r in as_json.get(key, [])]
    assert expected and len(rows) == len(expected)
    for row, record in zip(rows, expected, strict=True):
        assert {k: v for k, v in row.items() if k in record} == record
        assert all(v == "" for k, v in row.items() if k not in record)  # another view's
    costs = [r[f] for key in as_json for r in as_json[key] for f in r if f.endswith("_cost_usd")]
    assert costs and all(c == round(c, 6) for c in costs)
    # the fixture's Claude session sums to 0.030399999999999996 in binary floating point
    assert "0.030399999999999996" not in text
    if view in (None, "model"):
        claude = [r for r in as_json["by_model"] if r["model"] == "anthropic/claude-sonnet-4"]
        assert claude[0]["estimated_cost_usd"] == 0.0304


def test_sessions_show_rounds_money(legacy_db: Callable[..., Path], hermes_home: Path) -> None:
    path = legacy_db(23)
    ok(run("upgrade", "--url", str(path), "--no-backup", home=hermes_home))
    con = sqlite3.connect(path)
    # 0.1 + 0.2, stored as SQLite computes it: 0.30000000000000004
    con.execute("UPDATE sessions SET estimated_cost_usd = 0.1 + 0.2 WHERE rowid = 1")
    session_id = con.execute("SELECT id FROM sessions WHERE rowid = 1").fetchone()[0]
    con.commit()
    con.close()
    text = ok(run("sessions", "show", session_id, "--url", str(path), "--json", home=hermes_home))
    assert json.loads(text)["session"]["estimated_cost_usd"] == 0.3
    assert "0.30000000000000004" not in text


def test_csv_and_json_are_one_or_the_other(v23_url: str, hermes_home: Path) -> None:
    line = refused(run("stats", "--url", v23_url, "--json", "--csv", home=hermes_home))
    assert "not allowed with argument" in line


# --------------------------------------------------------------------------- docs


def test_the_copy_listing_in_the_docs_is_what_copy_prints(
    legacy_db: Callable[..., Path], pg_url: str, hermes_home: Path
) -> None:
    path = legacy_db(23)
    ok(run("upgrade", "--url", str(path), "--no-backup", home=hermes_home))
    printed = ok(run("copy", "--from", str(path), "--to", pg_url, home=hermes_home))
    doc = (REPO / "docs" / "postgresql.md").read_text()
    block = doc.split("   ```text\n   copied 75 rows", 1)[1].split("```", 1)[0]
    documented = [" ".join(line.split()) for line in block.strip().splitlines()[1:]]
    assert documented == [" ".join(line.split()) for line in printed.strip().splitlines()[1:]]
