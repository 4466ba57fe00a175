"""Imports entry by entry (issue 28 item 9): every bad entry is listed with its reason and
the rest is imported, nothing of a bad entry is written, and SQLite and PostgreSQL give
the same report for the same input. The CLI runs as a real process on real files; the
repository API on real databases of both backends."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from helpers.raw_sql import RawConnection

from hermes_store.compat import SessionDB
from hermes_store.repositories.maintenance import MaintenanceRepository
from hermes_store.store import Store

#: Deeper than any JSON parser's recursion allows (the C scanner stops near 1,000).
VERY_DEEP = 100_000


def run_import(path: Path, url: str, home: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "HERMES_HOME": str(home)}
    env.pop("HERMES_STORE_URL", None)
    return subprocess.run(
        [sys.executable, "-m", "hermes_store.cli", "sessions", "import", str(path)]
        + ["--url", url, "--json"],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )


def report_of(result: subprocess.CompletedProcess[str], code: int = 1) -> dict[str, Any]:
    assert "Traceback" not in result.stderr, result.stderr
    assert result.returncode == code, (result.stdout, result.stderr)
    report: dict[str, Any] = json.loads(result.stdout)
    return report


def entry(sid: str, parent: str | None = None, **extra: Any) -> dict[str, Any]:
    """A session with two messages, so a partial import would show."""
    return {
        "id": sid,
        "source": "cli",
        "parent_session_id": parent,
        "started_at": 1_700_000_000.0,
        "messages": [
            {"role": "user", "content": f"hello from {sid}", "timestamp": 1_700_000_001.0},
            {"role": "assistant", "content": f"hi {sid}", "timestamp": 1_700_000_002.0},
        ],
        **extra,
    }


def write_jsonl(path: Path, lines: list[str]) -> Path:
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return path


def nested(depth: int) -> str:
    """JSON text of `depth` lists, one inside the other."""
    return "[" * depth + "]" * depth


@pytest.fixture
def raw(backend_url: str) -> Iterator[RawConnection]:
    con = RawConnection(backend_url)
    yield con
    con.close()


@pytest.fixture
def repo(backend_url: str) -> Iterator[MaintenanceRepository]:
    store = Store(backend_url)
    yield MaintenanceRepository(store)
    store.close()


def session_ids(raw: RawConnection) -> set[str]:
    return {r[0] for r in raw.execute("SELECT id FROM sessions").fetchall()}


def message_count(raw: RawConnection, sid: str | None = None) -> int:
    if sid is None:
        row = raw.execute("SELECT count(*) FROM messages").fetchone()
    else:
        row = raw.execute("SELECT count(*) FROM messages WHERE session_id = ?", (sid,)).fetchone()
    assert row is not None
    return int(row[0])


def parent_of(raw: RawConnection, sid: str) -> str | None:
    row = raw.execute("SELECT parent_session_id FROM sessions WHERE id = ?", (sid,)).fetchone()
    assert row is not None
    return row[0]  # type: ignore[no-any-return]


# --------------------------------------------------------------------------- titles (CLI)


def test_cli_title_collision_rejects_only_that_entry(
    backend_url: str, raw: RawConnection, tmp_path: Path, hermes_home: Path
) -> None:
    """A title already taken (in the database, or earlier in the file) rejects that entry
    and holds back its children; the other 1,197 of 1,200 are imported, across batches."""
    raw.execute(
        "INSERT INTO sessions (id, source, started_at, title) VALUES (?, ?, ?, ?)",
        ("holder", "cli", 1.0, "Taken"),
    )
    entries = [entry(f"e{i:04d}") for i in range(1200)]
    entries[699]["title"] = "Taken"
    entries[800]["title"] = "Twice"
    entries[900]["title"] = "Twice"
    entries[950]["parent_session_id"] = "e0699"
    path = write_jsonl(tmp_path / "titles.jsonl", [json.dumps(e) for e in entries])

    report = report_of(run_import(path, backend_url, hermes_home))
    assert (report["ok"], report["imported"], report["skipped"]) == (False, 1197, 0)
    assert report["errors"] == [
        {
            "entry": "line 700",
            "index": 699,
            "session_id": "e0699",
            "error": "title 'Taken' is already used by session holder",
        },
        {
            "entry": "line 901",
            "index": 900,
            "session_id": "e0900",
            "error": "title 'Twice' is already used by session e0800",
        },
        {
            "entry": "line 951",
            "index": 950,
            "session_id": "e0950",
            "error": "held back: its parent e0699 has errors",
        },
    ]
    assert session_ids(raw) == {"holder"} | {e["id"] for e in entries} - {
        "e0699",
        "e0900",
        "e0950",
    }
    assert message_count(raw) == 2 * 1197
    assert message_count(raw, "e0699") == message_count(raw, "e0900") == 0

    # fixed and run again: the three come in, the child linked to its parent
    entries[699]["title"] = "Taken too"
    entries[900]["title"] = "Twice too"
    write_jsonl(path, [json.dumps(e) for e in entries])
    again = report_of(run_import(path, backend_url, hermes_home), code=0)
    assert (again["imported"], again["skipped"], again["errors"]) == (3, 1197, [])
    assert parent_of(raw, "e0950") == "e0699"
    assert message_count(raw) == 2 * 1200


# --------------------------------------------------------------------------- nesting (CLI)


def deep_entries() -> list[tuple[str, str | None, str]]:
    """(JSON text, expected error or None, session id) in file order: entries too deep to
    parse, deep but parsable, JSON text fields nesting deeply, and a child of a deep one."""
    deep_content = json.dumps(entry("deep")).replace('"hello from deep"', nested(VERY_DEEP))
    deep_300 = json.dumps(entry("deep300")).replace('"hi deep300"', nested(300))
    config = entry("config", model_config=nested(VERY_DEEP))
    calls = entry("calls")
    calls["messages"][1]["tool_calls"] = nested(VERY_DEEP)
    reasoning = entry("reasoning")
    reasoning["messages"][1]["reasoning_details"] = nested(VERY_DEEP)
    return [
        (json.dumps(entry("first")), None, "first"),
        (deep_content, "session nests deeper than 200 levels", "deep"),
        (deep_300, "session nests deeper than 200 levels", "deep300"),
        (json.dumps(config), "model_config nests deeper than 200 levels", "config"),
        (json.dumps(calls), "messages[1].tool_calls nests deeper than 200 levels", "calls"),
        (
            json.dumps(reasoning),
            "messages[1].reasoning_details nests deeper than 200 levels",
            "reasoning",
        ),
        (json.dumps(entry("child", "deep")), "held back: its parent deep has errors", "child"),
        # the deepest list of `at200` is at level 200 (the entry is level 1), of `at201` at 201
        (json.dumps(entry("at200", model_config={"k": json.loads(nested(198))})), None, "at200"),
        (
            json.dumps(entry("at201", model_config={"k": json.loads(nested(199))})),
            "session nests deeper than 200 levels",
            "at201",
        ),
        (json.dumps(entry("last")), None, "last"),
    ]


@pytest.mark.parametrize("fmt", ["jsonl", "json"])
def test_cli_deep_nesting_is_listed_per_entry(
    fmt: str, backend_url: str, raw: RawConnection, tmp_path: Path, hermes_home: Path
) -> None:
    cases = deep_entries()
    path = tmp_path / f"deep.{fmt}"
    if fmt == "jsonl":
        write_jsonl(path, [text for text, _, _ in cases])
    else:  # a JSON list too deep for the parser as a whole
        path.write_text("[\n" + ",\n".join(text for text, _, _ in cases) + "\n]", "utf-8")

    report = report_of(run_import(path, backend_url, hermes_home))
    labels = [f"line {i + 1}" if fmt == "jsonl" else f"[{i}]" for i in range(len(cases))]
    expected = [
        {"entry": labels[i], "index": i, "session_id": sid, "error": error}
        for i, (_, error, sid) in enumerate(cases)
        if error is not None
    ]
    assert report["errors"] == expected
    assert report["imported"] == 3
    assert session_ids(raw) == {"first", "at200", "last"}
    assert message_count(raw) == 6


def test_cli_single_exported_session_too_deep_is_listed(
    backend_url: str, raw: RawConnection, tmp_path: Path, hermes_home: Path
) -> None:
    """`sessions export ID` writes one pretty-printed object; too deep, it is entry [0]."""
    text = json.dumps(entry("one"), indent=2).replace('"hi one"', nested(VERY_DEEP))
    path = tmp_path / "one.json"
    path.write_text(text, encoding="utf-8")
    report = report_of(run_import(path, backend_url, hermes_home))
    assert report["errors"] == [
        {
            "entry": "[0]",
            "index": 0,
            "session_id": "one",
            "error": "session nests deeper than 200 levels",
        }
    ]
    assert session_ids(raw) == set()


# ------------------------------------------------------------- a batch the database refuses


def poison(raw: RawConnection) -> None:
    """Make the database itself refuse a message whose content is 'poison': an entry
    that passes every check before the write and fails inside it."""
    if raw.dialect == "sqlite":
        raw.execute(
            "CREATE TRIGGER poison BEFORE INSERT ON messages WHEN NEW.content = 'poison'"
            " BEGIN SELECT RAISE(ABORT, 'poisoned message'); END"
        )
    else:
        raw.execute(
            "ALTER TABLE messages ADD CONSTRAINT poison CHECK (content IS DISTINCT FROM 'poison')"
        )


def test_cli_batch_refused_by_the_database_loses_only_the_refused_entry(
    backend_url: str, raw: RawConnection, tmp_path: Path, hermes_home: Path
) -> None:
    poison(raw)
    entries = [entry(f"e{i:04d}") for i in range(700)]
    for bad in (250, 600):  # one in each batch of 500
        entries[bad]["messages"].append({"role": "user", "content": "poison"})
    entries[650]["parent_session_id"] = "e0600"
    path = write_jsonl(tmp_path / "poisoned.jsonl", [json.dumps(e) for e in entries])

    report = report_of(run_import(path, backend_url, hermes_home))
    assert report["imported"] == 697
    errors = report["errors"]
    assert [(e["entry"], e["session_id"]) for e in errors] == [
        ("line 251", "e0250"),
        ("line 601", "e0600"),
        ("line 651", "e0650"),
    ]
    assert all(e["error"].startswith("refused by the database: ") for e in errors[:2])
    assert "poison" in errors[0]["error"]
    assert errors[2]["error"] == "held back: its parent e0600 has errors"
    assert session_ids(raw) == {e["id"] for e in entries} - {"e0250", "e0600", "e0650"}
    # nothing of a refused entry: not its session row, not its first messages
    assert message_count(raw, "e0250") == message_count(raw, "e0600") == 0
    assert message_count(raw) == 2 * 697


# ------------------------------------------------------------------- values (repository API)

#: (what, the bad entry's fields, the message it gets if any, the reason)
BAD_VALUES: list[tuple[str, dict[str, Any], dict[str, Any], str]] = [
    ("int above 64 bits", {"input_tokens": 2**63}, {}, "input_tokens must fit in a 64-bit integer"),
    (
        "int below 64 bits",
        {"output_tokens": -(2**63) - 1},
        {},
        "output_tokens must fit in a 64-bit integer",
    ),
    ("1e30 for an int", {"input_tokens": 1e30}, {}, "input_tokens must be an integer"),
    ("bool for an int", {"api_call_count": True}, {}, "api_call_count must be an integer"),
    ("text for an int", {"cache_read_tokens": "12"}, {}, "cache_read_tokens must be an integer"),
    ("NaN start", {"started_at": float("nan")}, {}, "started_at must be a finite number"),
    ("Infinity start", {"started_at": float("inf")}, {}, "started_at must be a finite number"),
    ("-Infinity end", {"ended_at": float("-inf")}, {}, "ended_at must be a finite number"),
    (
        "NaN cost",
        {"estimated_cost_usd": float("nan")},
        {},
        "estimated_cost_usd must be a finite number",
    ),
    (
        "int beyond a float",
        {"actual_cost_usd": 10**400},
        {},
        "actual_cost_usd must be a finite number",
    ),
    ("text for a time", {"started_at": "yesterday"}, {}, "started_at must be a number"),
    ("bool for a time", {"started_at": False}, {}, "started_at must be a number"),
    (
        "message token count above 64 bits",
        {},
        {"token_count": 2**63},
        "messages[2].token_count must fit in a 64-bit integer",
    ),
    (
        "float token count",
        {},
        {"token_count": 1.5},
        "messages[2].token_count must be an integer",
    ),
    (
        "NaN message time",
        {},
        {"timestamp": float("nan")},
        "messages[2].timestamp must be a finite number",
    ),
    (
        "Infinity message time",
        {},
        {"timestamp": float("inf")},
        "messages[2].timestamp must be a finite number",
    ),
    (
        "parent with a lone surrogate",
        {"parent_session_id": "p\udc00"},
        {},
        "parent_session_id must be valid Unicode text (it holds a lone surrogate)",
    ),
    (
        "deep model_config",
        {"model_config": {"k": json.loads(nested(250))}},
        {},
        "session nests deeper than 200 levels",
    ),
    (
        "very deep model_config text",
        {"model_config": nested(VERY_DEEP)},
        {},
        "model_config nests deeper than 200 levels",
    ),
]
BAD_IDS = [case[0] for case in BAD_VALUES]


def bad_entry(fields: dict[str, Any], message: dict[str, Any]) -> dict[str, Any]:
    bad = entry("bad", **fields)
    if message:
        bad["messages"].append({"role": "user", "content": "third", **message})
    return bad


@pytest.mark.parametrize(("what", "fields", "message", "reason"), BAD_VALUES, ids=BAD_IDS)
def test_import_each_lists_a_bad_value_and_imports_the_rest(
    what: str,
    fields: dict[str, Any],
    message: dict[str, Any],
    reason: str,
    repo: MaintenanceRepository,
    raw: RawConnection,
) -> None:
    report = repo.import_each([entry("g1"), bad_entry(fields, message), entry("g2")])
    assert report.errors == [{"entry": "[1]", "index": 1, "session_id": "bad", "error": reason}]
    assert (report.ok, report.imported, report.skipped) == (False, 2, 0)
    assert session_ids(raw) == {"g1", "g2"}
    assert message_count(raw, "bad") == 0


@pytest.mark.parametrize(("what", "fields", "message", "reason"), BAD_VALUES, ids=BAD_IDS)
def test_import_sessions_refuses_a_bad_value_with_its_reason(
    what: str,
    fields: dict[str, Any],
    message: dict[str, Any],
    reason: str,
    repo: MaintenanceRepository,
    raw: RawConnection,
) -> None:
    """`import_sessions` keeps the original's contract (docs/reference/behaviour.md 8:
    nothing is written when any entry is invalid) and reports the same reasons, never a
    driver error."""
    result = repo.import_sessions([entry("g1"), bad_entry(fields, message)])
    assert result == {
        "ok": False,
        "imported": 0,
        "skipped": 0,
        "detached": 0,
        "errors": [{"index": 1, "error": reason, "session_id": "bad"}],
    }
    assert session_ids(raw) == set()


def test_session_id_with_a_lone_surrogate_is_listed_without_it(
    repo: MaintenanceRepository, raw: RawConnection
) -> None:
    report = repo.import_each([entry("g1"), entry("bad\ud800"), entry("g2")])
    assert report.errors == [
        {
            "entry": "[1]",
            "index": 1,
            "error": "session id must be valid Unicode text (it holds a lone surrogate)",
        }
    ]
    assert session_ids(raw) == {"g1", "g2"}


def test_numeric_platform_ids_beyond_64_bits_are_stored_as_text(
    repo: MaintenanceRepository, raw: RawConnection
) -> None:
    """Platform ids are text columns; a large numeric one is its decimal text on both
    backends (SQLite's driver could not bind it as an integer)."""
    big = entry("big")
    big["messages"][0]["platform_message_id"] = 10**30
    big["messages"][1]["message_id"] = 7
    report = repo.import_each([big])
    assert (report.ok, report.imported) == (True, 1)
    rows = raw.execute(
        "SELECT platform_message_id FROM messages WHERE session_id = 'big' ORDER BY id"
    ).fetchall()
    assert [r[0] for r in rows] == [str(10**30), "7"]


def test_import_each_holds_back_children_of_a_title_collision(
    repo: MaintenanceRepository, raw: RawConnection
) -> None:
    raw.execute(
        "INSERT INTO sessions (id, source, started_at, title) VALUES (?, ?, ?, ?)",
        ("holder", "cli", 1.0, "Taken"),
    )
    # children first, as an export lists them
    report = repo.import_each(
        [entry("grandchild", "child"), entry("child", "p"), entry("p", title="Taken")]
    )
    assert report.errors == [  # in input order
        {
            "entry": "[0]",
            "index": 0,
            "session_id": "grandchild",
            "error": "held back: its parent child has errors",
        },
        {
            "entry": "[1]",
            "index": 1,
            "session_id": "child",
            "error": "held back: its parent p has errors",
        },
        {
            "entry": "[2]",
            "index": 2,
            "session_id": "p",
            "error": "title 'Taken' is already used by session holder",
        },
    ]
    assert session_ids(raw) == {"holder"}


def test_a_second_entry_with_an_id_is_refused_in_any_batch(
    repo: MaintenanceRepository, raw: RawConnection
) -> None:
    """Also when the first is in an earlier batch; its children stay linked to the first."""
    entries = [entry(f"e{i:04d}") for i in range(600)]
    entries[550] = entry("e0010", source="other")
    entries[560] = entry("kid", "e0010")
    handled: list[int] = []
    report = repo.import_each(entries, progress=handled.append)
    assert report.errors == [
        {"entry": "[550]", "index": 550, "session_id": "e0010", "error": "duplicate session id"}
    ]
    assert (report.imported, sum(handled)) == (599, 600)
    assert parent_of(raw, "kid") == "e0010"
    row = raw.execute("SELECT source FROM sessions WHERE id = 'e0010'").fetchone()
    assert row is not None and row[0] == "cli"


def test_facade_reports_bad_values_instead_of_raising(backend_url: str) -> None:
    db = SessionDB(url=backend_url)
    try:
        result = db.import_sessions(
            [
                entry("nan", started_at=float("nan")),
                entry("big", input_tokens=2**64),
                entry("deep", model_config=nested(VERY_DEEP)),
            ]
        )
        assert result["ok"] is False
        assert [(e["session_id"], e["error"]) for e in result["errors"]] == [
            ("nan", "started_at must be a finite number"),
            ("big", "input_tokens must fit in a 64-bit integer"),
            ("deep", "model_config nests deeper than 200 levels"),
        ]
        assert db.get_session("nan") is None
    finally:
        db.close()


# --------------------------------------------------------------------------- both backends alike


def test_the_same_file_gives_the_same_report_and_rows_on_both_backends(
    fresh_db: str, pg_fresh_db: str, tmp_path: Path
) -> None:
    lines = [text for text, _, _ in deep_entries()]
    lines += [
        json.dumps(bad_entry(f, m) | {"id": f"bad{i}"}) for i, (_, f, m, _) in enumerate(BAD_VALUES)
    ]
    lines += [json.dumps(entry("titled", title="Same")), json.dumps(entry("again", title="Same"))]
    path = write_jsonl(tmp_path / "mixed.jsonl", lines)

    from hermes_store.repositories.importing import ImportSource

    def outcome(url: str) -> tuple[dict[str, Any], list[Any], list[Any]]:
        store = Store(url)
        try:
            with path.open("rb") as fp:
                report = MaintenanceRepository(store).import_each(
                    ImportSource.from_file(fp, str(path))
                )
        finally:
            store.close()
        con = RawConnection(url)
        try:
            sessions = con.execute(
                "SELECT id, parent_session_id, title, started_at, input_tokens, message_count"
                " FROM sessions ORDER BY id"
            ).fetchall()
            messages = con.execute(
                "SELECT session_id, role, content, timestamp, token_count FROM messages"
                " ORDER BY session_id, timestamp"
            ).fetchall()
        finally:
            con.close()
        return report.as_dict(), [tuple(r) for r in sessions], [tuple(r) for r in messages]

    on_sqlite, on_postgres = outcome(fresh_db), outcome(pg_fresh_db)
    assert on_sqlite == on_postgres
    report = on_sqlite[0]
    assert report["imported"] == 4  # first, at200, last, titled
    assert len(report["errors"]) == 7 + len(BAD_VALUES) + 1
