"""The `hermes-store` command as users meet it (issue 15): read commands that change
nothing, errors that name their cause, one convention for times in `--json` output, the
per-model-per-day statistics and `check` on a file that is not at head. Run as the real
console script on real files, copied from the legacy fixtures."""

from __future__ import annotations

import argparse
import json
import os
import sqlite3
import stat
import subprocess
from collections.abc import Callable, Iterator
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from helpers.processes import run_cli_here

from hermes_store import migrate
from hermes_store.cli import TIME_FIELDS, build_parser
from hermes_store.errors import InvalidURL, NotADatabaseFile
from hermes_store.migration.copy import copy_database
from hermes_store.store import Store

ROOT_ID = "20260303_080000_c0ffee"  # compressed; its continuation is TIP_ID
TIP_ID = "20260303_083012_c0ffe2"
KYOTO_ID = "20260302_140000_7e1e9a"


def run(
    *args: str, home: Path, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    # the command's main in this process (tests/cli/test_cli.py runs the installed script)
    unset = [] if env is not None and "HERMES_STORE_URL" in env else ["HERMES_STORE_URL"]
    return run_cli_here(*args, env={"HERMES_HOME": str(home), **(env or {})}, unset=unset)


def one_line_error(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode == 2, (result.returncode, result.stdout, result.stderr)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("hermes-store: error: "), result.stderr
    return lines[0]


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@pytest.fixture
def v23(legacy_db: Callable[..., Path]) -> Path:
    """A copy of the v23 fixture brought to head (5 sessions, 64 messages)."""
    path = legacy_db(23)
    migrate.upgrade(str(path), fts_min_pause=0)
    return path


# --------------------------------------------------------------------------- file modes

#: Every command that only reads, with the exit status it has on the v23 fixture
#: (`sessions delete` without --yes refuses and deletes nothing, `downgrade` below 0023 is
#: refused).
READ_COMMANDS: list[tuple[tuple[str, ...], int]] = [
    (("current",), 0),
    (("current", "--json"), 0),
    (("check",), 0),
    (("check", "--json"), 0),
    (("sessions", "list"), 0),
    (("sessions", "list", "--json"), 0),
    (("sessions", "show", "20260301"), 0),
    (("sessions", "export"), 0),
    (("sessions", "export", KYOTO_ID, "--format", "json"), 0),
    (("sessions", "prune", "--older-than", "0", "--dry-run"), 0),
    (("sessions", "prune", "--older-than", "0"), 2),
    (("sessions", "delete", KYOTO_ID), 2),
    (("search", "Kyoto"), 0),
    (("search", "Kyoto", "--json"), 0),
    (("stats",), 0),
    (("stats", "--by", "model,day", "--json"), 0),
    (("stats", "--csv"), 0),
    (("sessions", "list", "--csv"), 0),
    (("search", "Kyoto", "--csv"), 0),
    (("history",), 0),
    (("history", "--json"), 0),
    (("downgrade", "0022"), 2),  # below 0023: refused before anything is opened to write
]


@pytest.mark.parametrize("file_mode", [0o644, 0o444], ids=["0644", "0444"])
def test_read_commands_leave_the_file_as_they_found_it(
    file_mode: int, v23: Path, hermes_home: Path, db: Any
) -> None:
    v23.chmod(file_mode)
    content = db.sha256_file(v23)
    root = os.geteuid() == 0
    changed = []
    for command, status in READ_COMMANDS:
        result = run(*command, "--url", str(v23), home=hermes_home)
        expected = status
        if command[0] == "check" and file_mode == 0o444 and not root:
            # the FTS5 integrity-check is an INSERT: it needs a writable file
            expected = 2
        assert result.returncode == expected, (command, result.stdout, result.stderr)
        if (mode(v23), db.sha256_file(v23)) != (file_mode, content):
            changed.append((command, oct(mode(v23))))
            v23.chmod(file_mode)
    assert changed == []
    # What a reader's SQLite creates next to a WAL file takes the file's own mode.
    for sidecar in v23.parent.glob(f"{v23.name}-*"):
        assert mode(sidecar) == file_mode, sidecar


def test_commands_that_write_make_the_file_private(
    legacy_db: Callable[..., Path], v23: Path, hermes_home: Path, tmp_path: Path, db: Any
) -> None:
    legacy = legacy_db(22)
    legacy.chmod(0o644)
    assert run("upgrade", "--url", str(legacy), home=hermes_home).returncode == 0
    assert mode(legacy) == 0o600

    # at head the upgrade writes nothing, and still sets the mode: it sets a file up
    v23.chmod(0o644)
    content = db.sha256_file(v23)
    assert run("upgrade", "--url", str(v23), home=hermes_home).returncode == 0
    assert (mode(v23), db.sha256_file(v23)) == (0o600, content)

    v23.chmod(0o644)
    dump = tmp_path / "one.jsonl"
    dump.write_text(json.dumps({"id": "new", "source": "cli", "messages": []}) + "\n")
    imported = run("sessions", "import", str(dump), "--url", str(v23), home=hermes_home)
    assert imported.returncode == 0, imported.stderr
    assert mode(v23) == 0o600


def test_a_store_only_reading_leaves_the_mode_and_a_write_sets_it(v23: Path) -> None:
    v23.chmod(0o644)
    from sqlalchemy import text

    with Store(str(v23)) as store:
        with store.read() as conn:
            assert conn.execute(text("SELECT count(*) FROM sessions")).scalar() == 5
        assert mode(v23) == 0o644
        store.write(lambda conn: conn.execute(text("UPDATE sessions SET title = title")))
        assert mode(v23) == 0o600


# --------------------------------------------------------------------------- URLs


def leaf_commands(parser: argparse.ArgumentParser, prefix: tuple[str, ...] = ()) -> set[str]:
    found: set[str] = set()
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                found |= leaf_commands(sub, (*prefix, name)) or {" ".join((*prefix, name))}
    return found


#: Every subcommand, with `{url}` where the bad URL goes and `{file}` for an import file.
COMMAND_LINES = {
    "upgrade": "upgrade --url {url}",
    "current": "current --url {url}",
    "check": "check --url {url}",
    "history": "history --url {url}",
    "downgrade": "downgrade 0023 --url {url}",
    "search": "search kyoto --url {url}",
    "sessions list": "sessions list --url {url}",
    "sessions show": "sessions show abc --url {url}",
    "sessions export": "sessions export --url {url}",
    "sessions import": "sessions import {file} --url {url}",
    "sessions prune": "sessions prune --older-than 30 --yes --url {url}",
    "sessions delete": "sessions delete abc --yes --url {url}",
    "sessions restore": "sessions restore abc --url {url}",
    "sessions trash": "sessions trash --url {url}",
    "sessions tag": "sessions tag abc add work --url {url}",
    "stats": "stats --by model,day --url {url}",
    "redact": "redact --apply --url {url}",
    "copy": "copy --from {url} --to {target}",
    "fts backfill": "fts backfill --url {url}",
    "fts rebuild": "fts rebuild --url {url}",
    "encrypt": "encrypt --url {url}",
    "decrypt": "decrypt --url {url}",
}

#: (URL, what the one error line must say): an unsupported database, an unsupported
#: driver, a URL that cannot be parsed. None of them may show its password.
BAD_URLS = [
    ("mysql://me:s3cret@localhost/db", "unsupported database 'mysql'"),
    ("postgresql+asyncpg://me:s3cret@localhost/db", "unsupported driver 'asyncpg'"),
    ("postgresql://me:s3cret@localhost:port/db", "cannot read the database URL"),
]


def test_every_subcommand_has_a_bad_url_case() -> None:
    assert leaf_commands(build_parser()) == set(COMMAND_LINES)


@pytest.mark.parametrize("command", sorted(COMMAND_LINES))
def test_unsupported_and_malformed_urls_are_one_error_line(
    command: str, hermes_home: Path, tmp_path: Path
) -> None:
    dump = tmp_path / "in.jsonl"
    dump.write_text("")
    target = tmp_path / "target.db"
    for url, says in BAD_URLS:
        line = COMMAND_LINES[command].format(url=url, file=dump, target=target)
        error = one_line_error(run(*line.split(), home=hermes_home))
        assert says in error and "s3cret" not in error, (url, error)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["hermes_home", "in.jsonl"]


def test_copy_names_a_bad_target_url(v23: Path, hermes_home: Path) -> None:
    error = one_line_error(
        run("copy", "--from", str(v23), "--to", "mysql://me@localhost/db", home=hermes_home)
    )
    assert "unsupported database 'mysql'" in error


def test_a_bad_url_in_the_environment_is_one_error_line(hermes_home: Path) -> None:
    env = {"HERMES_STORE_URL": "oracle://me@localhost/db"}
    error = one_line_error(run("current", home=hermes_home, env=env))
    assert "unsupported database 'oracle'" in error


def test_python_callers_get_invalid_url() -> None:
    for url, says in BAD_URLS:
        with pytest.raises(InvalidURL, match=says):
            Store(url)
    with pytest.raises(ValueError):  # InvalidURL is a ValueError too
        migrate.current("mssql://me@localhost/db")


# --------------------------------------------------------------------------- what is at --url


@pytest.fixture
def not_databases(tmp_path: Path) -> Iterator[dict[str, Path]]:
    directory = tmp_path / "a-directory"
    directory.mkdir()
    text_file = tmp_path / "notes.txt"
    text_file.write_text("these are my notes, not a database\n" * 20)
    yield {"directory": directory, "text": text_file}


@pytest.mark.parametrize(
    "command", ["upgrade", "current", "check", "sessions list", "search x", "stats"]
)
def test_a_directory_or_a_text_file_is_named_as_such(
    command: str, not_databases: dict[str, Path], hermes_home: Path
) -> None:
    text_file = not_databases["text"]
    before = text_file.read_bytes()
    error = one_line_error(
        run(*command.split(), "--url", str(not_databases["directory"]), home=hermes_home)
    )
    assert f"{not_databases['directory']} is a directory" in error
    error = one_line_error(run(*command.split(), "--url", str(text_file), home=hermes_home))
    assert f"{text_file} is not an SQLite database file" in error
    assert "damaged" not in error and "backup" not in error
    assert text_file.read_bytes() == before
    assert sorted(p.name for p in text_file.parent.iterdir()) == [
        "a-directory",
        "hermes_home",
        "notes.txt",
    ]
    assert list(not_databases["directory"].iterdir()) == []


def test_python_callers_get_not_a_database_file(not_databases: dict[str, Path]) -> None:
    from sqlalchemy import text

    with pytest.raises(NotADatabaseFile, match="is a directory"):
        Store(str(not_databases["directory"]))
    with pytest.raises(NotADatabaseFile, match="is not an SQLite database file"):
        Store(str(not_databases["text"]), read_only=True)
    store = Store(str(not_databases["text"]), read_only=True, check_schema=False)
    try:
        with pytest.raises(NotADatabaseFile, match="is not an SQLite database file"):
            with store.read() as conn:
                conn.execute(text("SELECT 1"))
    finally:
        store.dispose()
    with pytest.raises(NotADatabaseFile, match="is not an SQLite database file"):
        migrate.upgrade(str(not_databases["text"]))


def test_a_destroyed_header_is_still_damage(v23: Path, hermes_home: Path) -> None:
    """An SQLite file whose magic string is overwritten is damage to restore from a backup,
    not "not an SQLite database file"."""
    with v23.open("r+b") as fp:
        fp.write(b"\x00" * 16)
    error = one_line_error(run("current", "--url", str(v23), home=hermes_home))
    assert f"the database {v23} is damaged" in error
    assert "not an SQLite database file" not in error


# --------------------------------------------------------------------------- prefixes


def test_a_prefix_of_two_sessions_names_both(v23: Path, hermes_home: Path) -> None:
    for command in ("show", "export"):
        error = one_line_error(
            run("sessions", command, "20260303", "--url", str(v23), home=hermes_home)
        )
        assert f"prefix '20260303' matches 2 sessions: {ROOT_ID}, {TIP_ID}" in error
    error = one_line_error(run("sessions", "show", "2026", "--url", str(v23), home=hermes_home))
    assert "prefix '2026' matches 5 sessions: 20260301_091500_a1b2c3, " in error
    shown = run("sessions", "show", "20260303_08", "--url", str(v23), "--json", home=hermes_home)
    assert shown.returncode == 2  # still two
    unique = run("sessions", "show", "20260303_0830", "--url", str(v23), "--json", home=hermes_home)
    assert json.loads(unique.stdout)["session"]["id"] == TIP_ID
    missing = one_line_error(run("sessions", "show", "1999", "--url", str(v23), home=hermes_home))
    assert "session '1999' does not exist" in missing


# --------------------------------------------------------------------------- check


def test_check_before_the_upgrade_does_not_call_drift_none(
    legacy_db: Callable[..., Path], hermes_home: Path, db: Any
) -> None:
    legacy = legacy_db(22)
    before = db.sha256_file(legacy)
    result = run("check", "--url", str(legacy), home=hermes_home)
    assert result.returncode == 1, result.stderr
    assert "schema drift:  none" not in result.stdout
    assert "schema drift:  not judged before the upgrade" in result.stdout
    current = json.loads(run("current", "--url", str(legacy), "--json", home=hermes_home).stdout)
    missing = [name for names in current["missing"].values() for name in names]
    assert "column sessions.pinned" in missing
    assert f"missing:       {len(missing)} (the upgrade adds them)" in result.stdout
    for name in missing:
        assert f"\n  {name}\n" in result.stdout
    report = json.loads(run("check", "--url", str(legacy), "--json", home=hermes_home).stdout)
    assert report["ok"] is False and report["schema_drift"] is None
    assert db.sha256_file(legacy) == before

    assert run("upgrade", "--url", str(legacy), home=hermes_home).returncode == 0
    after = run("check", "--url", str(legacy), home=hermes_home)
    assert after.returncode == 0 and "schema drift:  none" in after.stdout
    assert (
        json.loads(run("check", "--url", str(legacy), "--json", home=hermes_home).stdout)[
            "schema_drift"
        ]
        == []
    )


# --------------------------------------------------------------------------- --json times


def time_values(value: Any) -> Iterator[tuple[str, Any]]:
    """Every (key, value) of a TIME_FIELDS key anywhere in a JSON document."""
    if isinstance(value, dict):
        for key, item in value.items():
            if key in TIME_FIELDS:
                yield key, item
            yield from time_values(item)
    elif isinstance(value, list):
        for item in value:
            yield from time_values(item)


@pytest.mark.parametrize(
    "command",
    [
        "sessions list",
        f"sessions show {KYOTO_ID}",
        "sessions prune --older-than 0 --dry-run",
        "search Kyoto",
    ],
)
def test_every_json_output_gives_times_as_iso_8601_utc(
    command: str, v23: Path, hermes_home: Path
) -> None:
    result = run(*command.split(), "--url", str(v23), "--json", home=hermes_home)
    assert result.returncode == 0, result.stderr
    times = list(time_values(json.loads(result.stdout)))
    assert times, "no times in the output"
    for key, value in times:
        if value is None:
            continue
        assert isinstance(value, str), (key, value)
        assert datetime.fromisoformat(value).utcoffset() == timedelta(0), (key, value)


def test_an_export_keeps_epoch_seconds_for_import(v23: Path, hermes_home: Path) -> None:
    result = run("sessions", "export", KYOTO_ID, "--url", str(v23), home=hermes_home)
    exported = json.loads(result.stdout)
    assert isinstance(exported["started_at"], float)
    assert all(isinstance(m["timestamp"], float) for m in exported["messages"])


# --------------------------------------------------------------------------- stats


@pytest.fixture(params=["sqlite", "postgresql"])
def v23_url(request: pytest.FixtureRequest, v23: Path) -> str:
    if request.param == "sqlite":
        return str(v23)
    target: str = request.getfixturevalue("pg_url")
    assert copy_database(str(v23), target).ok
    return target


def test_stats_by_model_and_day(v23_url: str, v23: Path, hermes_home: Path) -> None:
    out = run("stats", "--by", "model,day", "--url", v23_url, "--json", home=hermes_home)
    assert out.returncode == 0, out.stderr
    rows = json.loads(out.stdout)["by_model_day"]
    con = sqlite3.connect(f"file:{v23}?mode=ro", uri=True)
    truth = con.execute(
        "SELECT date(s.started_at, 'unixepoch'), u.model, count(DISTINCT u.session_id),"
        " sum(u.input_tokens), sum(u.output_tokens), sum(u.estimated_cost_usd)"
        " FROM session_model_usage u JOIN sessions s ON s.id = u.session_id"
        " GROUP BY 1, 2"
    ).fetchall()
    con.close()
    got = [
        (r["day"], r["model"], r["sessions"], r["input_tokens"], r["output_tokens"]) for r in rows
    ]
    assert sorted(got) == sorted(t[:5] for t in truth)
    costs = {(r["day"], r["model"]): r["estimated_cost_usd"] for r in rows}
    assert costs == pytest.approx({(t[0], t[1]): t[5] for t in truth})
    # the days are in order, and within a day the most expensive model comes first
    assert rows == sorted(rows, key=lambda r: (r["day"], -r["estimated_cost_usd"], r["model"]))

    # the view adds up to the per-model and per-day views of the same command
    both = json.loads(run("stats", "--url", v23_url, "--json", home=hermes_home).stdout)
    for model_row in both["by_model"]:
        mine = [r for r in rows if r["model"] == model_row["model"]]
        assert sum(r["input_tokens"] for r in mine) == model_row["input_tokens"]
    assert {r["day"] for r in rows} == {d["day"] for d in both["by_day"]}

    table = run("stats", "--by", "day,model", "--url", v23_url, home=hermes_home)
    assert table.returncode == 0, table.stderr
    header, *lines, total = table.stdout.strip().splitlines()[1:]
    assert header.split()[:3] == ["DAY", "MODEL", "SESSIONS"]
    assert len(lines) == len(rows) and total.startswith("total")
    assert f"{sum(r['input_tokens'] for r in rows):,}" in total

    bad = run("stats", "--by", "model,week", "--url", v23_url, home=hermes_home)
    assert bad.returncode == 2 and "expected one of model, day, model,day" in bad.stderr
