"""`hermes-store sessions ...` and `hermes-store stats`, run as the real console script on
real files. Databases are filled through the repositories or copied from the legacy
fixtures and brought to head with `migrate.upgrade`."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import time
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from helpers.processes import run_cli_here
from helpers.raw_sql import RawConnection

from hermes_store import migrate
from hermes_store.repositories.maintenance import MaintenanceRepository
from hermes_store.repositories.messages import MessageRepository
from hermes_store.repositories.sessions import SessionRepository
from hermes_store.store import Store

DAY = 86400.0
V23_MODELS = {
    "openai/gpt-5-codex",
    "anthropic/claude-sonnet-4",
    "nousresearch/hermes-4-405b",
    "google/gemini-2.5-flash",
}


def run(*args: str, home: Path) -> subprocess.CompletedProcess[str]:
    # the command's main in this process (tests/cli/test_cli.py runs the installed script)
    return run_cli_here(*args, env={"HERMES_HOME": str(home)}, unset=["HERMES_STORE_URL"])


def ok(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode == 0, result.stderr
    return result.stdout


def one_line_error(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode == 2, (result.stdout, result.stderr)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("hermes-store: error: "), lines
    return lines[0]


def sqlite_file(url: str) -> Path:
    return Path(url.removeprefix("sqlite:///"))


@pytest.fixture
def v23(legacy_db: Callable[..., Path]) -> Path:
    """A copy of the v23 fixture at head (5 sessions, 64 messages, one child)."""
    db = legacy_db(23)
    migrate.upgrade(str(db), fts_min_pause=0)
    return db


def transcripts(db: Any, path: Path) -> dict[str, tuple[Any, ...]]:
    """Per session: parent, title, stored message_count, rows, role/content digest."""
    con = sqlite3.connect(path)
    try:
        rows = con.execute(
            "SELECT id, parent_session_id, title, message_count,"
            " (SELECT count(*) FROM messages m WHERE m.session_id = s.id) FROM sessions s"
        ).fetchall()
        return {r[0]: (*r[1:], db.role_content_sha256(con, r[0])) for r in rows}
    finally:
        con.close()


# --------------------------------------------------------------------------- export / import


@pytest.mark.parametrize("fmt", ["jsonl", "json"])
def test_export_import_round_trip(
    fmt: str, v23: Path, fresh_db: str, tmp_path: Path, hermes_home: Path, db: Any
) -> None:
    dump_file = tmp_path / f"all.{fmt}"
    if fmt == "jsonl":  # the default for all sessions, to a file
        out = ok(
            run("sessions", "export", "--url", str(v23), "-o", str(dump_file), home=hermes_home)
        )
        assert "exported 5 session(s)" in out
        assert len(dump_file.read_text(encoding="utf-8").splitlines()) == 5
    else:  # a JSON list on stdout
        out = ok(run("sessions", "export", "--url", str(v23), "--format", "json", home=hermes_home))
        assert len(json.loads(out)) == 5
        dump_file.write_text(out, encoding="utf-8")

    imported = ok(run("sessions", "import", str(dump_file), "--url", fresh_db, home=hermes_home))
    assert "imported 5 session(s), skipped 0" in imported
    source, target = transcripts(db, v23), transcripts(db, sqlite_file(fresh_db))
    assert target == source
    assert target["20260303_083012_c0ffe2"][0] == "20260303_080000_c0ffee"

    if fmt == "jsonl":  # importing again changes nothing
        again = run(
            "sessions", "import", str(dump_file), "--url", fresh_db, "--json", home=hermes_home
        )
        report = json.loads(ok(again))
        assert (report["ok"], report["imported"], report["skipped"]) == (True, 0, 5)
        assert transcripts(db, sqlite_file(fresh_db)) == source


def test_single_session_export_is_pretty_json_and_imports(
    v23: Path, fresh_db: str, tmp_path: Path, hermes_home: Path, db: Any
) -> None:
    one = tmp_path / "one.json"
    # a unique prefix is enough for read-only commands
    ok(run("sessions", "export", "20260301", "--url", str(v23), "-o", str(one), home=hermes_home))
    text = one.read_text(encoding="utf-8")
    assert text.startswith("{\n") and json.loads(text)["id"] == "20260301_091500_a1b2c3"
    ok(run("sessions", "import", str(one), "--url", fresh_db, home=hermes_home))
    sid = "20260301_091500_a1b2c3"
    assert transcripts(db, sqlite_file(fresh_db)) == {sid: transcripts(db, v23)[sid]}


def jsonl(path: Path, entries: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(e) + "\n" for e in entries), encoding="utf-8")
    return path


def entry(sid: str, parent: str | None = None, **extra: Any) -> dict[str, Any]:
    return {
        "id": sid,
        "source": "cli",
        "parent_session_id": parent,
        "messages": [{"role": "user", "content": f"hello from {sid}"}],
        **extra,
    }


def test_import_keeps_parent_links_across_batches(
    fresh_db: str, tmp_path: Path, hermes_home: Path
) -> None:
    """Exports list children before their parents; with more than one batch of 500 the
    links must still survive (the children are imported after their parents)."""
    children = [entry(f"c{i:04d}", f"p{i:04d}") for i in range(600)]
    grandchild = entry("g", "c0599")
    parents = [entry(f"p{i:04d}") for i in range(600)]
    path = jsonl(tmp_path / "many.jsonl", [grandchild, *children, *parents])
    report = json.loads(
        ok(run("sessions", "import", str(path), "--url", fresh_db, "--json", home=hermes_home))
    )
    assert (report["imported"], report["detached"], report["errors"]) == (1201, 0, [])
    con = sqlite3.connect(sqlite_file(fresh_db))
    links = dict(con.execute("SELECT id, parent_session_id FROM sessions").fetchall())
    con.close()
    assert all(links[f"c{i:04d}"] == f"p{i:04d}" for i in range(600))
    assert links["g"] == "c0599"


def test_import_validation_errors_are_listed_and_exit_1(
    fresh_db: str, tmp_path: Path, hermes_home: Path
) -> None:
    bad = entry("b")
    bad["messages"] = [{"content": "no role"}]
    path = jsonl(tmp_path / "mixed.jsonl", [entry("a"), bad, entry("c", "b"), entry("d")])
    result = run("sessions", "import", str(path), "--url", fresh_db, home=hermes_home)
    assert result.returncode == 1, result.stderr
    assert "imported 2 session(s)" in result.stdout
    assert "line 2 (session b): messages[0].role must be a non-empty string" in result.stdout
    assert "line 3 (session c): held back: its parent b has errors" in result.stdout
    con = sqlite3.connect(sqlite_file(fresh_db))
    assert {r[0] for r in con.execute("SELECT id FROM sessions")} == {"a", "d"}

    # fixed and run again: the held-back child comes in linked, the rest is skipped
    bad["messages"] = [{"role": "user", "content": "now with a role"}]
    jsonl(path, [entry("a"), bad, entry("c", "b"), entry("d")])
    again = ok(run("sessions", "import", str(path), "--url", fresh_db, home=hermes_home))
    assert "imported 2 session(s), skipped 2" in again
    assert con.execute("SELECT parent_session_id FROM sessions WHERE id = 'c'").fetchone() == ("b",)
    con.close()


def test_import_of_broken_json_is_a_one_line_error_and_imports_nothing(
    fresh_db: str, tmp_path: Path, hermes_home: Path
) -> None:
    path = tmp_path / "broken.jsonl"
    path.write_text(json.dumps(entry("a")) + "\n{not json\n", encoding="utf-8")
    line = one_line_error(run("sessions", "import", str(path), "--url", fresh_db, home=hermes_home))
    assert "line 2: invalid JSON" in line
    con = sqlite3.connect(sqlite_file(fresh_db))
    assert con.execute("SELECT count(*) FROM sessions").fetchone() == (0,)
    con.close()


# --------------------------------------------------------------------------- prune / delete


@pytest.fixture
def aged(backend_url: str, store: Store) -> str:
    """Sessions of known age, written through import_sessions (which keeps timestamps)."""
    now = time.time()
    old = now - 200 * DAY

    def session(sid: str, started: float, ended: float | None, **kw: Any) -> dict[str, Any]:
        last = kw.pop("last_message", started)
        return {
            "id": sid,
            "source": kw.pop("source", "cli"),
            "started_at": started,
            "ended_at": ended,
            "messages": [{"role": "user", "content": f"in {sid}", "timestamp": last}],
            **kw,
        }

    result = MaintenanceRepository(store).import_sessions(
        [
            session("old-ended", old, old + 60),
            session("old-ended-cron", old, old + 60, source="cron"),
            session("old-open", old, None),
            session("recent-ended", now - 5 * DAY, now - 5 * DAY + 60),
            session("old-but-active", old, old + 60, last_message=now - 2 * DAY),
            session("child-of-old", now - DAY, None, parent_session_id="old-ended"),
        ]
    )
    assert result["ok"], result
    return backend_url


def ids(url: str) -> set[str]:
    con = RawConnection(url)
    try:
        return {r[0] for r in con.execute("SELECT id FROM sessions")}
    finally:
        con.close()


def rows(url: str, sql: str) -> list[tuple[Any, ...]]:
    con = RawConnection(url)
    try:
        return [tuple(r.values()) for r in con.execute(sql)]
    finally:
        con.close()


def test_prune_dry_run_refusal_and_yes(aged: str, hermes_home: Path, db: Any) -> None:
    before = rows(aged, "SELECT * FROM sessions ORDER BY id"), rows(
        aged, "SELECT id, session_id, content FROM messages ORDER BY id"
    )
    prune = ("sessions", "prune", "--older-than", "30", "--url", aged)

    listed = json.loads(ok(run(*prune, "--dry-run", "--json", home=hermes_home)))
    assert {c["id"] for c in listed} == {"old-ended", "old-ended-cron"}
    assert datetime.fromisoformat(listed[0]["last_active"]).tzinfo is not None
    text = ok(run(*prune, "--dry-run", "--source", "cli", home=hermes_home))
    assert "old-ended " in text and "cron" not in text and "1 session(s) would be deleted" in text
    assert "--yes" in one_line_error(run(*prune, home=hermes_home))
    assert (
        rows(aged, "SELECT * FROM sessions ORDER BY id"),
        rows(aged, "SELECT id, session_id, content FROM messages ORDER BY id"),
    ) == before

    assert "deleted 1 session(s)" in ok(run(*prune, "--source", "cli", "--yes", home=hermes_home))
    assert json.loads(ok(run(*prune, "--yes", "--json", home=hermes_home))) == {
        "deleted": 1,
        "trash_emptied": 0,
    }
    assert ids(aged) == {"old-open", "recent-ended", "old-but-active", "child-of-old"}
    assert rows(aged, "SELECT parent_session_id FROM sessions WHERE id = 'child-of-old'") == [
        (None,)
    ]
    orphans = "SELECT count(*) FROM messages WHERE session_id NOT IN (SELECT id FROM sessions)"
    assert rows(aged, orphans) == [(0,)]


def test_prune_in_steps_deletes_exactly_what_one_prune_would(
    backend_url: str, store: Store, hermes_home: Path
) -> None:
    """More candidates than one prune step, with ties of activity at the step bounds."""
    now = time.time()
    sessions = [
        {
            "id": f"s{i:04d}",
            "started_at": now - 300 * DAY,
            "ended_at": now - 300 * DAY + 60,
            "messages": [
                {"role": "user", "content": "x", "timestamp": now - (200 + i // 700) * DAY}
            ],
        }
        for i in range(2100)
    ] + [{"id": "recent", "started_at": now, "ended_at": now}]
    repo = MaintenanceRepository(store)
    for start in range(0, len(sessions), 500):
        assert repo.import_sessions(sessions[start : start + 500])["ok"]
    result = run(
        "sessions",
        "prune",
        "--older-than",
        "30",
        "--yes",
        "--json",
        "--url",
        backend_url,
        home=hermes_home,
    )
    assert json.loads(ok(result)) == {"deleted": 2100, "trash_emptied": 0}
    assert ids(backend_url) == {"recent"}


def test_delete(backend_url: str, store: Store, hermes_home: Path) -> None:
    sessions, messages = SessionRepository(store), MessageRepository(store)
    sessions.create_session("parent", "cli")
    sessions.create_session(
        "delegate", "cli", parent_session_id="parent", model_config={"_delegate_from": "parent"}
    )
    sessions.create_session("other-child", "cli", parent_session_id="parent")
    for sid in ("parent", "delegate", "other-child"):
        messages.append_message(sid, "user", f"hi from {sid}")
    url = backend_url

    line = one_line_error(
        run("sessions", "delete", "no-such-id", "--yes", "--url", url, home=hermes_home)
    )
    assert "session 'no-such-id' does not exist" in line
    permanent = ("sessions", "delete", "parent", "--permanent", "--url", url)
    line = one_line_error(run(*permanent, home=hermes_home))
    assert "1 delegate run(s)" in line and "add --yes" in line
    assert ids(url) == {"parent", "delegate", "other-child"}

    out = ok(run(*permanent, "--yes", home=hermes_home))
    assert "deleted session parent and 1 delegate run(s)" in out
    assert ids(url) == {"other-child"}
    assert rows(url, "SELECT DISTINCT session_id FROM messages") == [("other-child",)]


# --------------------------------------------------------------------------- reading


def test_list_and_show(v23: Path, hermes_home: Path) -> None:
    url = str(v23)
    rows = json.loads(ok(run("sessions", "list", "--url", url, "--json", home=hermes_home)))
    # the compression root lists as its live tip: five sessions, four rows
    assert len(rows) == 4
    assert set(rows[0]) == {"id", "source", "title", "started_at", "message_count", "preview"}
    assert all(datetime.fromisoformat(r["started_at"]).tzinfo is not None for r in rows)
    by_id = {r["id"]: r for r in rows}
    assert by_id["20260301_091500_a1b2c3"]["message_count"] == 14
    assert by_id["20260301_091500_a1b2c3"]["title"] == "数据库迁移 plan"
    telegram = json.loads(
        ok(
            run(
                "sessions", "list", "--source", "telegram", "--url", url, "--json", home=hermes_home
            )
        )
    )
    assert [r["id"] for r in telegram] == ["20260302_140000_7e1e9a"]
    table = ok(run("sessions", "list", "--limit", "2", "--url", url, home=hermes_home))
    assert len(table.splitlines()) == 3 and table.startswith("ID ")

    shown = json.loads(
        ok(
            run(
                "sessions",
                "show",
                "20260302_140000_7e1e9a",
                "--url",
                url,
                "--json",
                home=hermes_home,
            )
        )
    )
    assert shown["session"]["title"] == "Weekend trip — Kyoto 🍁"
    assert len(shown["messages"]) == 12
    assert shown["messages"][0]["role"] == "user" and "Kyoto" in shown["messages"][0]["content"]
    assert any(m["tool_calls"] for m in shown["messages"])
    text = ok(run("sessions", "show", "20260302_140000_7e1e9a", "--url", url, home=hermes_home))
    assert "-> tool call: web_search" in text and "session_reset" in text
    assert "does not exist" in one_line_error(
        run("sessions", "show", "nope", "--url", url, home=hermes_home)
    )


def test_stats_on_the_v23_fixture(v23: Path, hermes_home: Path) -> None:
    data = json.loads(ok(run("stats", "--url", str(v23), "--json", home=hermes_home)))
    assert {r["model"] for r in data["by_model"]} == V23_MODELS
    assert sum(r["input_tokens"] for r in data["by_model"]) == 66470
    assert [(d["sessions"], d["message_count"]) for d in data["by_day"]] == [(5, 64)]
    text = ok(run("stats", "--url", str(v23), home=hermes_home))
    assert all(model in text for model in V23_MODELS) and "66,470" in text
    only_day = json.loads(
        ok(run("stats", "--by", "day", "--url", str(v23), "--json", home=hermes_home))
    )
    assert set(only_day) == {"by_day"}


@pytest.mark.parametrize("command", ["sessions list", "stats"])
def test_a_database_not_at_head_is_refused(
    command: str, legacy_db: Callable[..., Path], hermes_home: Path
) -> None:
    path = legacy_db(22)
    before = path.read_bytes()
    line = one_line_error(run(*command.split(), "--url", str(path), home=hermes_home))
    assert "hermes-store upgrade" in line
    assert path.read_bytes() == before
