"""Export, import, deletion, pruning and archiving (docs/reference/behaviour.md 8 and 9), on real
database files."""

from __future__ import annotations

import io
import json
import sqlite3
import time
import types
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from helpers.databases import sqlite_connect
from helpers.statements import variables_held_to
from sqlalchemy import event
from sqlalchemy.exc import IntegrityError

from hermes_store import migrate
from hermes_store.repositories._sql import IN_CHUNK
from hermes_store.repositories.maintenance import MaintenanceRepository
from hermes_store.repositories.sessions import SessionRepository
from hermes_store.sqlite import driver
from hermes_store.store import Store

DAY = 86400.0
OLD = time.time() - 200 * DAY  # well past the default 90-day retention


def _path(url: str) -> Path:
    return Path(url.removeprefix("sqlite:///"))


@pytest.fixture
def repo(store: Store) -> MaintenanceRepository:
    return MaintenanceRepository(store)


@pytest.fixture
def con(raw_con: Any) -> Any:
    """Plain SQL on the store's own database (SQLite file or PostgreSQL)."""
    return raw_con


@pytest.fixture
def other_db(tmp_path: Path) -> Iterator[tuple[Store, sqlite3.Connection]]:
    """A second fresh database (the import target of round trips)."""
    (tmp_path / "other").mkdir()
    url = f"sqlite:///{tmp_path / 'other' / 'state.db'}"
    migrate.upgrade(url, fts_min_pause=0)
    s = Store(url)
    # through the SQLite library the store drives: a second copy of SQLite in the process
    # would not see the store's locks (helpers.databases.sqlite_connect)
    c = sqlite_connect(_path(url), isolation_level=None)
    c.row_factory = driver.current().module.Row
    yield s, c
    c.close()
    s.close()


def add_session(con: sqlite3.Connection, sid: str, **cols: Any) -> None:
    values = {"id": sid, "source": "cli", "started_at": time.time(), **cols}
    names = ", ".join(values)
    marks = ", ".join("?" for _ in values)
    con.execute(f"INSERT INTO sessions ({names}) VALUES ({marks})", list(values.values()))


def add_message(con: sqlite3.Connection, sid: str, **cols: Any) -> int:
    values = {
        "session_id": sid,
        "role": "user",
        "content": "hello",
        "timestamp": time.time(),
        **cols,
    }
    names = ", ".join(values)
    marks = ", ".join("?" for _ in values)
    cur = con.execute(f"INSERT INTO messages ({names}) VALUES ({marks})", list(values.values()))
    con.execute("UPDATE sessions SET message_count = message_count + 1 WHERE id = ?", (sid,))
    assert cur.lastrowid is not None
    return cur.lastrowid


def ids(con: sqlite3.Connection) -> set[str]:
    return {r[0] for r in con.execute("SELECT id FROM sessions")}


def row(con: sqlite3.Connection, sid: str) -> dict[str, Any]:
    found = con.execute("SELECT * FROM sessions WHERE id = ?", (sid,)).fetchone()
    assert found is not None, sid
    return dict(found)


def count(con: sqlite3.Connection, table: str) -> int:
    return int(con.execute(f"SELECT COUNT(*) FROM {table}").fetchone()[0])


def fts_consistent(con: Any) -> None:
    if getattr(con, "dialect", "sqlite") != "sqlite":
        return  # PostgreSQL's tsvector is a generated column: consistent by construction
    for table in ("messages_fts", "messages_fts_trigram"):
        con.execute(f"INSERT INTO {table}({table}, rank) VALUES ('integrity-check', 1)")


# --------------------------------------------------------------------------- export


def test_export_session_unknown_id(repo: MaintenanceRepository) -> None:
    assert repo.export_session("missing") is None


def test_export_session_full_row_and_active_decoded_messages(
    repo: MaintenanceRepository, con: sqlite3.Connection
) -> None:
    con.execute("ALTER TABLE sessions ADD COLUMN fork_extra TEXT")  # unknown columns survive
    add_session(con, "s1", title="T", model="m", fork_extra="x")
    add_message(con, "s1", content="\x00json:" + json.dumps([{"type": "text", "text": "hi"}]))
    add_message(
        con,
        "s1",
        role="assistant",
        content="ok",
        tool_calls=json.dumps([{"id": "c1"}]),
        display_metadata=json.dumps({"k": 1}),
    )
    add_message(con, "s1", content="rewound", active=0)
    add_message(con, "s1", role="assistant", content="bad", tool_calls="{not json")
    exported = repo.export_session("s1")
    assert exported is not None
    assert exported["fork_extra"] == "x" and exported["title"] == "T" and "pinned" in exported
    messages = exported["messages"]
    assert [m["content"] for m in messages] == [[{"type": "text", "text": "hi"}], "ok", "bad"]
    assert messages[1]["tool_calls"] == [{"id": "c1"}]
    assert messages[1]["display_metadata"] == {"k": 1}
    assert messages[0]["tool_calls"] is None
    assert messages[2]["tool_calls"] == []  # corrupt JSON reads as []
    assert messages[0]["id"] < messages[1]["id"] < messages[2]["id"]


def test_export_all_streams_newest_first(con: sqlite3.Connection, store: Store) -> None:
    repo = MaintenanceRepository(store, export_page=2)  # force several keyset pages
    t = time.time()
    add_session(con, "a", started_at=t - 30)
    add_session(con, "b", started_at=t - 10)
    add_session(con, "c", started_at=t - 10)  # same start as b: id breaks the tie
    add_session(con, "d", started_at=t, source="cron")
    add_session(con, "e", started_at=t - 20)
    add_message(con, "a")
    stream = repo.export_all()
    assert isinstance(stream, types.GeneratorType)
    exported = list(stream)
    assert [s["id"] for s in exported] == ["d", "c", "b", "e", "a"]
    assert [len(s["messages"]) for s in exported] == [0, 0, 0, 0, 1]
    assert [s["id"] for s in repo.export_all(source="cron")] == ["d"]
    assert list(repo.export_all(source="nothing")) == []


def test_jsonl_round_trip(repo: MaintenanceRepository, con: sqlite3.Connection) -> None:
    add_session(con, "s1", title="Ünïcode ✓")
    add_message(con, "s1", content="line\nbreak")
    buffer = io.StringIO()
    assert repo.write_jsonl(buffer, repo.export_all()) == 1
    text = buffer.getvalue()
    assert text.count("\n") == 1 and "✓" in text
    (back,) = list(repo.read_jsonl(io.StringIO(text + "\n   \n")))
    assert back["title"] == "Ünïcode ✓" and back["messages"][0]["content"] == "line\nbreak"


def test_read_jsonl_names_the_bad_line(repo: MaintenanceRepository) -> None:
    with pytest.raises(ValueError, match="line 2"):
        list(repo.read_jsonl(io.StringIO('{"id": "a"}\n{broken\n')))
    with pytest.raises(ValueError, match="line 1: expected a JSON object"):
        list(repo.read_jsonl(io.StringIO("[1, 2]\n")))


def test_export_import_round_trip_into_fresh_database(
    repo: MaintenanceRepository,
    con: sqlite3.Connection,
    other_db: tuple[Store, sqlite3.Connection],
) -> None:
    t = time.time() - 1000
    add_session(
        con,
        "root",
        source="telegram",
        started_at=t,
        ended_at=t + 50,
        end_reason="compression",
        model="claude",
        model_config=json.dumps({"temperature": 0.5}),
        system_prompt="You are Hermes",
        user_id="u1",
        title="Round trip",
        input_tokens=120,
        output_tokens=30,
        cache_read_tokens=5,
        api_call_count=3,
        estimated_cost_usd=0.12,
        billing_provider="anthropic",
        cwd="/work",
        git_branch="main",
        git_repo_root="/work",
        archived=1,
    )
    add_session(con, "child", started_at=t + 60, parent_session_id="root", model="claude")
    add_message(con, "root", content="plain", timestamp=t + 1, token_count=3)
    add_message(
        con,
        "root",
        role="assistant",
        content="\x00json:" + json.dumps([{"type": "text", "text": "multi"}]),
        timestamp=t + 2,
        tool_calls=json.dumps([{"id": "c1", "function": {"name": "ls"}}, {"id": "c2"}]),
        finish_reason="tool_calls",
        reasoning="thinking",
        reasoning_content="",
        reasoning_details=json.dumps([{"type": "summary"}]),
        codex_reasoning_items=json.dumps([{"id": "r"}]),
        platform_message_id="42",
        display_kind="model_switch",
        display_metadata=json.dumps({"from": "a"}),
        observed=1,
        api_content="api text",
    )
    add_message(
        con,
        "root",
        role="tool",
        content="file list",
        timestamp=t + 3,
        tool_call_id="c1",
        tool_name="ls",
        effect_disposition="applied",
    )
    add_message(con, "child", content="continued", timestamp=t + 61)

    buffer = io.StringIO()
    repo.write_jsonl(buffer, repo.export_all())
    payload = list(repo.read_jsonl(io.StringIO(buffer.getvalue())))
    target_store, target = other_db
    result = MaintenanceRepository(target_store).import_sessions(payload)
    assert result == {
        "ok": True,
        "imported": 2,
        "skipped": 0,
        "detached": 0,
        "imported_ids": ["child", "root"],
        "skipped_ids": [],
        "errors": [],
    }

    taken = (
        "source started_at ended_at end_reason model model_config system_prompt user_id title"
        " input_tokens output_tokens cache_read_tokens cache_write_tokens reasoning_tokens"
        " api_call_count estimated_cost_usd actual_cost_usd billing_provider billing_base_url"
        " billing_mode cwd git_branch git_repo_root archived parent_session_id"
    ).split()
    for sid in ("root", "child"):
        a, b = row(con, sid), row(target, sid)
        assert {k: a[k] for k in taken} == {k: b[k] for k in taken}, sid
    assert row(target, "root")["message_count"] == 3
    assert row(target, "root")["tool_call_count"] == 2

    columns = (
        "role content tool_call_id tool_calls tool_name effect_disposition timestamp"
        " token_count finish_reason reasoning reasoning_content reasoning_details"
        " codex_reasoning_items codex_message_items platform_message_id observed active"
        " compacted api_content display_kind display_metadata"
    )
    query = f"SELECT {', '.join(columns.split())} FROM messages ORDER BY session_id, id"
    assert [tuple(r) for r in con.execute(query)] == [tuple(r) for r in target.execute(query)]
    fts_consistent(target)


# --------------------------------------------------------------------------- import


def _snapshot(db: Any, url: str) -> dict[str, Any]:
    return dict(db.dump(_path(url)))


def test_import_requires_a_list(repo: MaintenanceRepository) -> None:
    with pytest.raises(ValueError, match="^sessions must be a list$"):
        repo.import_sessions({"id": "a"})


def test_import_rejects_more_than_500_entries(
    repo: MaintenanceRepository, con: sqlite3.Connection
) -> None:
    with pytest.raises(ValueError, match="^sessions must contain at most 500 entries$"):
        repo.import_sessions([{"id": f"s{i}"} for i in range(501)])
    assert ids(con) == set()
    assert repo.import_sessions([{"id": f"s{i}"} for i in range(500)])["imported"] == 500


@pytest.mark.parametrize(
    ("entry", "error"),
    [
        ("not an object", "session must be an object"),
        ({"title": "no id"}, "session id is required"),
        ({"id": ""}, "session id is required"),
        ({"id": 5}, "session id is required"),
        ({"id": "x", "messages": "hi"}, "messages must be a list"),
        ({"id": "x", "messages": [{"role": "user"}, "hi"]}, "messages must contain only objects"),
        ({"id": "x", "extra": {1, 2}}, "session must be JSON serializable"),
        ({"id": "x", "title": 5}, "title must be a string"),
        ({"id": "x", "source": ["cli"]}, "source must be a string"),
        ({"id": "x", "model_config": "{oops"}, "model_config must be valid JSON"),
        ({"id": "x", "model_config": "[1]"}, "model_config must be a JSON object"),
        ({"id": "x", "model_config": [1]}, "model_config must be a JSON object"),
        ({"id": "x", "model_config": {"a": {1}}}, "model_config must be JSON serializable"),
        (
            {"id": "x", "messages": [{"content": "hi"}]},
            "messages[0].role must be a non-empty string",
        ),
        (
            {"id": "x", "messages": [{"role": "user"}, {"role": " "}]},
            "messages[1].role must be a non-empty string",
        ),
        ({"id": "x", "messages": [{"role": 3}]}, "messages[0].role must be a non-empty string"),
        (
            {"id": "x", "messages": [{"role": "user", "token_count": "3"}]},
            "messages[0].token_count must be an integer",
        ),
        (
            {"id": "x", "messages": [{"role": "tool", "tool_name": 1}]},
            "messages[0].tool_name must be a string",
        ),
        ({"id": "x", "input_tokens": "12"}, "input_tokens must be an integer"),
        ({"id": "x", "started_at": "yesterday"}, "started_at must be a number"),
    ],
)
def test_import_entry_errors_write_nothing(
    repo: MaintenanceRepository, fresh_db: str, db: Any, entry: Any, error: str
) -> None:
    before = _snapshot(db, fresh_db)
    valid = {"id": "fine", "messages": [{"role": "user", "content": "ok"}]}
    result = repo.import_sessions([valid, entry])
    assert result["ok"] is False
    assert (result["imported"], result["skipped"], result["detached"]) == (0, 0, 0)
    assert [e["error"] for e in result["errors"]] == [error]
    assert result["errors"][0]["index"] == 1
    if isinstance(entry, dict) and isinstance(entry.get("id"), str) and entry["id"]:
        assert result["errors"][0]["session_id"] == entry["id"]
    else:
        assert "session_id" not in result["errors"][0]
    assert _snapshot(db, fresh_db) == before


def test_import_duplicate_ids_write_nothing(
    repo: MaintenanceRepository, fresh_db: str, db: Any
) -> None:
    before = _snapshot(db, fresh_db)
    result = repo.import_sessions([{"id": "a"}, {"id": "b"}, {"id": "a"}])
    assert result["errors"] == [{"index": 2, "error": "duplicate session id", "session_id": "a"}]
    assert _snapshot(db, fresh_db) == before


def test_import_collects_errors_of_every_entry(repo: MaintenanceRepository) -> None:
    result = repo.import_sessions([{"id": "a", "title": 1}, {"id": "ok"}, 7])
    assert result["errors"] == [
        {"index": 0, "error": "title must be a string", "session_id": "a"},
        {"index": 2, "error": "session must be an object"},
    ]


def test_import_per_session_message_limit(repo: MaintenanceRepository) -> None:
    result = repo.import_sessions([{"id": "a", "messages": [{"role": "u"}] * 10_001}])
    assert result["errors"][0]["error"] == "messages exceeds the per-session import limit"
    ok = repo.import_sessions([{"id": "a", "messages": [{"role": "u"}] * 10_000}])
    assert ok["ok"] is True


def test_import_total_message_limit(repo: MaintenanceRepository, con: sqlite3.Connection) -> None:
    entries = [{"id": f"s{i}", "messages": [{"role": "user"}] * 9_000} for i in range(6)]
    result = repo.import_sessions(entries)
    assert result["ok"] is False
    assert result["errors"] == [
        {"index": 5, "error": "messages exceeds the total import limit", "session_id": "s5"}
    ]
    assert count(con, "messages") == 0


def test_import_session_size_limit(repo: MaintenanceRepository) -> None:
    big = {"id": "a", "system_prompt": "x" * (5 * 1024 * 1024)}
    result = repo.import_sessions([big])
    assert result["errors"][0]["error"] == "session exceeds the import size limit"


def test_import_total_size_limit(repo: MaintenanceRepository) -> None:
    entries = [{"id": f"s{i}", "system_prompt": "é" * (2 * 1024 * 1024)} for i in range(7)]
    result = repo.import_sessions(entries)  # 4 MiB of UTF-8 each, 28 MiB in all
    assert [e["error"] for e in result["errors"]] == ["import exceeds the total size limit"]
    assert result["errors"][0]["index"] == 6


def test_import_skips_existing_ids(repo: MaintenanceRepository, con: sqlite3.Connection) -> None:
    add_session(con, "old", title="keep me", source="cli")
    result = repo.import_sessions(
        [{"id": "old", "title": "replaced?", "messages": [{"role": "user"}]}, {"id": "new"}]
    )
    assert (result["imported"], result["skipped"]) == (1, 1)
    assert (result["imported_ids"], result["skipped_ids"]) == (["new"], ["old"])
    assert row(con, "old")["title"] == "keep me"
    assert count(con, "messages") == 0


def test_import_defaults_and_untaken_fields(
    repo: MaintenanceRepository, con: sqlite3.Connection
) -> None:
    before = time.time()
    repo.import_sessions(
        [
            {
                "id": "a",
                "session_key": "agent:main:telegram:dm:1",
                "chat_id": "c",
                "handoff_state": "pending",
                "rewind_count": 4,
                "pinned": 1,
                "profile_name": "work",
                "compression_fallback_streak": 3,
                "message_count": 99,
                "model_config": {"_branched_from": "x"},
            },
            {"id": "b", "source": "", "model_config": {}},
        ]
    )
    a = row(con, "a")
    assert a["source"] == "import" and a["started_at"] >= before - 1
    assert (a["session_key"], a["chat_id"], a["handoff_state"], a["profile_name"]) == (None,) * 4
    assert (a["rewind_count"], a["pinned"], a["compression_fallback_streak"]) == (0, 0, 0)
    assert a["message_count"] == 0  # recomputed, not taken
    assert json.loads(a["model_config"]) == {"_branched_from": "x"}
    b = row(con, "b")
    assert b["source"] == "import" and b["model_config"] is None


def test_import_bulk_message_encoding(repo: MaintenanceRepository, con: sqlite3.Connection) -> None:
    start = time.time()
    repo.import_sessions(
        [
            {
                "id": "a",
                "messages": [
                    {"role": "user", "content": "q", "reasoning": "dropped", "message_id": 77},
                    {
                        "role": "assistant",
                        "content": [{"type": "text", "text": "a"}],
                        "reasoning": "kept",
                        "reasoning_details": json.dumps([{"x": 1}]),  # JSON text: not re-encoded
                        "codex_message_items": [{"y": 2}],
                        "tool_calls": [{"id": "1"}, {"id": "2"}],
                        "timestamp": 1000.0,
                    },
                    {"role": "tool", "content": "r", "tool_calls": {}},
                    {"role": "user", "content": "later", "platform_message_id": "p9"},
                ],
            }
        ]
    )
    rows = [dict(r) for r in con.execute("SELECT * FROM messages ORDER BY id")]
    assert rows[0]["reasoning"] is None and rows[0]["platform_message_id"] == "77"
    assert rows[1]["reasoning"] == "kept"
    assert rows[1]["reasoning_details"] == json.dumps([{"x": 1}])
    assert rows[1]["codex_message_items"] == json.dumps([{"y": 2}])
    assert rows[1]["content"] == "\x00json:" + json.dumps([{"type": "text", "text": "a"}])
    assert rows[3]["platform_message_id"] == "p9"
    assert all(r["active"] == 1 and r["compacted"] == 0 for r in rows)
    # Explicit timestamps are kept; the others follow a running clock from now that
    # always moves past the previous row.
    assert rows[0]["timestamp"] >= start - 1
    assert rows[1]["timestamp"] == 1000.0
    assert rows[2]["timestamp"] > rows[0]["timestamp"]
    assert rows[3]["timestamp"] > rows[2]["timestamp"]
    session = row(con, "a")
    assert (session["message_count"], session["tool_call_count"]) == (4, 3)  # 2 + 1 for {}
    fts_consistent(con)


def test_import_restores_parent_links(repo: MaintenanceRepository, con: sqlite3.Connection) -> None:
    add_session(con, "in-db")
    result = repo.import_sessions(
        [
            {"id": "child", "parent_session_id": "parent"},  # parent listed later
            {"id": "parent", "parent_session_id": "in-db"},
            {"id": "lost", "parent_session_id": "nowhere"},
        ]
    )
    assert result["detached"] == 1
    assert row(con, "child")["parent_session_id"] == "parent"
    assert row(con, "parent")["parent_session_id"] == "in-db"
    assert row(con, "lost")["parent_session_id"] is None


def test_import_detaches_cycles(repo: MaintenanceRepository, con: sqlite3.Connection) -> None:
    result = repo.import_sessions(
        [
            {"id": "a", "parent_session_id": "b"},
            {"id": "b", "parent_session_id": "c"},
            {"id": "c", "parent_session_id": "a"},
            {"id": "self", "parent_session_id": "self"},
        ]
    )
    assert result["ok"] and result["detached"] == 2
    links = {r["id"]: r["parent_session_id"] for r in con.execute("SELECT * FROM sessions")}
    # the first member of the loop in payload order is detached, as the original does
    assert links == {"a": None, "b": "c", "c": "a", "self": None}


def test_import_parent_may_be_a_skipped_existing_session(
    repo: MaintenanceRepository, con: sqlite3.Connection
) -> None:
    add_session(con, "p")
    result = repo.import_sessions([{"id": "p"}, {"id": "c", "parent_session_id": "p"}])
    assert (result["skipped"], result["detached"]) == (1, 0)
    assert row(con, "c")["parent_session_id"] == "p"


def test_import_title_conflict_raises_and_writes_nothing(
    repo: MaintenanceRepository, con: sqlite3.Connection, fresh_db: str, db: Any
) -> None:
    add_session(con, "holder", title="Taken")
    before = _snapshot(db, fresh_db)
    unique = "UNIQUE constraint failed: sessions.title|idx_sessions_title_unique"
    with pytest.raises(IntegrityError, match=unique):
        repo.import_sessions(
            [{"id": "a", "messages": [{"role": "user"}]}, {"id": "b", "title": "Taken"}]
        )
    assert _snapshot(db, fresh_db) == before


# --------------------------------------------------------------------------- delete


def _delegate(parent: str | None) -> str:
    return json.dumps({"_delegate_from": parent or "__orphaned__"})


def test_delete_session_unknown_id(repo: MaintenanceRepository) -> None:
    assert repo.delete_session("missing") is False
    assert repo.delete_session("") is False


def test_delete_session_removes_delegates_and_orphans_other_children(
    repo: MaintenanceRepository, con: sqlite3.Connection
) -> None:
    add_session(con, "root")
    add_session(con, "delegate", parent_session_id="root", model_config=_delegate("root"))
    add_session(con, "grand", parent_session_id="delegate", model_config=_delegate("delegate"))
    add_session(con, "named", model_config=_delegate("root"))  # marker only, no parent link
    add_session(con, "branch", parent_session_id="root", model_config='{"_branched_from": "r"}')
    add_session(con, "continuation", parent_session_id="root")
    add_session(con, "branch-kid", parent_session_id="delegate")  # child of a deleted delegate
    add_session(con, "broken", parent_session_id="root", model_config="{_delegate_from")
    for sid in ("root", "delegate", "grand", "named", "branch"):
        add_message(con, sid)
    con.execute(
        "INSERT INTO session_model_usage (session_id, model) VALUES ('root', 'm'), ('grand', 'm')"
    )
    assert repo.delete_session("root") is True
    assert ids(con) == {"branch", "continuation", "branch-kid", "broken"}
    for sid in ("branch", "continuation", "branch-kid", "broken"):
        assert row(con, sid)["parent_session_id"] is None
    assert count(con, "messages") == 1  # only the branch's
    assert count(con, "session_model_usage") == 0  # ON DELETE CASCADE
    fts_consistent(con)


def test_delete_session_and_delete_targets_share_one_delegate_rule(
    store: Store, con: sqlite3.Connection
) -> None:
    """What `get_session_delete_targets` shows a user is exactly what `delete_session`
    with those ids deletes: a row carries the marker when its `_delegate_from` is present
    and not null (an empty string counts, as it hides the row from listings); malformed
    or non-object model_config never carries one, and never breaks the delete."""
    add_session(con, "root")
    add_session(con, "d1", parent_session_id="root", model_config=_delegate("root"))
    add_session(con, "d-empty", parent_session_id="root", model_config='{"_delegate_from": ""}')
    add_session(con, "d-named", model_config=_delegate("d1"))  # names a delegate, no link
    add_session(con, "d-deep", parent_session_id="d-named", model_config='{"_delegate_from": 7}')
    add_session(con, "d-null", parent_session_id="root", model_config='{"_delegate_from": null}')
    add_session(con, "broken", parent_session_id="root", model_config="{_delegate_from")
    add_session(con, "listish", parent_session_id="root", model_config='["_delegate_from"]')
    add_session(con, "loop-a", model_config=_delegate("root"))
    add_session(con, "loop-b", parent_session_id="loop-a", model_config=_delegate("loop-a"))
    con.execute("UPDATE sessions SET parent_session_id = 'loop-b' WHERE id = 'loop-a'")
    delegates = {"d1", "d-empty", "d-named", "d-deep", "loop-a", "loop-b"}

    targets = SessionRepository(store).get_session_delete_targets("root")
    assert targets == ["root", *sorted(delegates)]
    repo = MaintenanceRepository(store)
    assert repo.delete_session("root", expected_delete_ids=targets) is True
    assert ids(con) == {"d-null", "broken", "listish"}
    for sid in ("d-null", "broken", "listish"):
        assert row(con, sid)["parent_session_id"] is None


def test_delete_session_expected_ids_must_match(
    repo: MaintenanceRepository, con: sqlite3.Connection, fresh_db: str, db: Any
) -> None:
    add_session(con, "root")
    add_session(con, "d1", parent_session_id="root", model_config=_delegate("root"))
    before = _snapshot(db, fresh_db)
    assert repo.delete_session("root", expected_delete_ids=["root"]) is False
    assert repo.delete_session("root", expected_delete_ids=["root", "d1", "x"]) is False
    assert _snapshot(db, fresh_db) == before
    assert repo.delete_session("root", expected_delete_ids={"d1", "root"}) is True
    assert ids(con) == set()


def test_delete_session_removes_transcript_files(
    repo: MaintenanceRepository, con: sqlite3.Connection, tmp_path: Path
) -> None:
    sessions_dir = tmp_path / "sessions"
    sessions_dir.mkdir()
    add_session(con, "s[1]")
    add_session(con, "d", parent_session_id="s[1]", model_config=_delegate("s[1]"))
    names = [
        "s[1].json",
        "s[1].jsonl",
        "request_dump_s[1]_001.json",
        "d.json",
        "s1.json",
        "request_dump_s1_001.json",
        "other.jsonl",
    ]
    for name in names:
        (sessions_dir / name).write_text("{}")
    assert repo.delete_session("s[1]", sessions_dir=sessions_dir)
    left = sorted(p.name for p in sessions_dir.iterdir())
    assert left == ["other.jsonl", "request_dump_s1_001.json", "s1.json"]


def test_request_dumps_matched_by_whole_id(
    repo: MaintenanceRepository, con: sqlite3.Connection, tmp_path: Path
) -> None:
    sessions_dir = tmp_path / "sessions"
    sessions_dir.mkdir()
    add_session(con, "cron_job_1", ended_at=time.time())
    add_session(con, "cron_job_10", ended_at=time.time())
    for name in ("request_dump_cron_job_1_20260101.json", "request_dump_cron_job_10_x.json"):
        (sessions_dir / name).write_text("{}")
    assert repo.delete_sessions(["cron_job_1"], sessions_dir=sessions_dir) == 1
    assert [p.name for p in sessions_dir.iterdir()] == ["request_dump_cron_job_10_x.json"]


def test_delete_session_never_touches_paths_outside_the_directory(
    repo: MaintenanceRepository, con: sqlite3.Connection, tmp_path: Path
) -> None:
    sessions_dir = tmp_path / "sessions"
    sessions_dir.mkdir()
    outside = tmp_path / "victim.json"
    outside.write_text("{}")
    add_session(con, "../victim")
    assert repo.delete_session("../victim", sessions_dir=sessions_dir)
    assert outside.exists()


def test_delete_sessions_bulk(repo: MaintenanceRepository, con: sqlite3.Connection) -> None:
    for sid in ("a", "b", "c"):
        add_session(con, sid)
        add_message(con, sid)
    add_session(con, "kid", parent_session_id="a")
    add_session(con, "deleg", parent_session_id="b", model_config=_delegate("b"))
    deleted = repo.delete_sessions(["a", "b", "a", "missing", "", None, 5])
    assert deleted == 2
    assert ids(con) == {"c", "kid"}
    assert row(con, "kid")["parent_session_id"] is None
    assert repo.delete_sessions([]) == 0
    assert repo.delete_sessions(["missing"]) == 0


@pytest.mark.sqlite_only  # SQLite variable limit
@pytest.mark.usefixtures("sqlite_driver")  # the limit is held differently per driver
def test_delete_sessions_beyond_the_variable_limit(store: Store, con: sqlite3.Connection) -> None:
    bound = variables_held_to(store)
    con.executemany(
        "INSERT INTO sessions (id, source, started_at) VALUES (?, 'cli', 1)",
        [(f"s{i:05d}",) for i in range(3000)],
    )
    assert MaintenanceRepository(store).delete_sessions([f"s{i:05d}" for i in range(3000)]) == 3000
    assert count(con, "sessions") == 0
    assert bound and max(bound) <= 999


# --------------------------------------------------------------------------- prune


@pytest.mark.sqlite_only  # SQLite variable limit
@pytest.mark.slow
def test_prune_50000_sessions_never_hits_the_variable_limit(
    store: Store, con: sqlite3.Connection, tmp_path: Path
) -> None:
    bound = variables_held_to(store)
    n = 50_000
    con.execute("BEGIN")
    con.executemany(
        "INSERT INTO sessions (id, source, started_at, ended_at, end_reason, message_count)"
        " VALUES (?, 'cron', ?, ?, 'cron_complete', ?)",
        [(f"cron_{i:06d}", OLD + i, OLD + i + 1, 1 if i % 5 == 0 else 0) for i in range(n)],
    )
    con.executemany(
        "INSERT INTO messages (session_id, role, content, timestamp) VALUES (?, 'user', ?, ?)",
        [(f"cron_{i:06d}", f"run {i}", OLD + i) for i in range(0, n, 5)],
    )
    # Open children whose parents are spread over every chunk: they must be orphaned.
    con.executemany(
        "INSERT INTO sessions (id, source, started_at, parent_session_id) VALUES (?, 'cli', ?, ?)",
        [(f"kid_{i:06d}", time.time(), f"cron_{i:06d}") for i in range(0, n, 50)],
    )
    con.execute("COMMIT")

    # Sanity check of the premise: one IN-list of every id fails under this limit (through
    # the store's own driver: a second SQLite library in this process would break the
    # store's locks on the file).
    module = driver.current().module
    if hasattr(module.Connection, "setlimit"):
        limited = module.connect(_path(str(store.url)))
        limited.setlimit(module.SQLITE_LIMIT_VARIABLE_NUMBER, 999)
        with pytest.raises(module.OperationalError, match="too many SQL variables"):
            marks = ", ".join("?" * n)
            limited.execute(f"SELECT COUNT(*) FROM sessions WHERE id IN ({marks})", [""] * n)
        limited.close()

    assert MaintenanceRepository(store).prune_sessions(sessions_dir=tmp_path) == n
    assert bound and max(bound) <= 999
    assert count(con, "sessions") == n // 50
    assert count(con, "messages") == 0
    assert (
        con.execute("SELECT COUNT(*) FROM sessions WHERE parent_session_id IS NOT NULL").fetchone()[
            0
        ]
        == 0
    )
    fts_consistent(con)


def test_prune_only_ended_sessions_older_than_90_days_by_activity(
    repo: MaintenanceRepository, con: sqlite3.Connection
) -> None:
    now = time.time()
    add_session(con, "old-ended", started_at=OLD, ended_at=OLD + 1)
    add_session(con, "old-open", started_at=OLD)
    add_session(con, "recent-ended", started_at=now - 10 * DAY, ended_at=now - 10 * DAY)
    add_session(con, "old-but-active", started_at=OLD, ended_at=now - DAY)
    add_message(con, "old-but-active", timestamp=now - 2 * DAY)
    add_session(con, "edge", started_at=now - 89 * DAY, ended_at=now - 89 * DAY)
    assert repo.prune_sessions() == 1
    assert "old-ended" not in ids(con)
    assert {"old-open", "recent-ended", "old-but-active", "edge"} <= ids(con)


def test_prune_orphans_children(repo: MaintenanceRepository, con: sqlite3.Connection) -> None:
    add_session(con, "parent", started_at=OLD, ended_at=OLD + 1)
    add_session(con, "kid", started_at=time.time(), parent_session_id="parent")
    add_session(
        con,
        "delegate",
        started_at=time.time(),
        parent_session_id="parent",
        model_config=_delegate("parent"),
    )
    assert repo.prune_sessions() == 1
    assert row(con, "kid")["parent_session_id"] is None
    assert row(con, "delegate")["parent_session_id"] is None  # not cascaded


def test_prune_older_than_days_none_and_explicit_bounds(
    repo: MaintenanceRepository, con: sqlite3.Connection
) -> None:
    now = time.time()
    add_session(con, "recent", started_at=now - DAY, ended_at=now - DAY)
    add_session(con, "old", started_at=OLD, ended_at=OLD)
    # started_before replaces the implicit 90-day activity bound.
    assert [c["id"] for c in repo.list_prune_candidates(90, started_before=now)] == [
        "old",
        "recent",
    ]
    assert [c["id"] for c in repo.list_prune_candidates(90, last_active_before=now)] == [
        "old",
        "recent",
    ]
    assert [c["id"] for c in repo.list_prune_candidates(90)] == ["old"]
    assert repo.prune_sessions(older_than_days=None) == 2


def test_prune_source_and_sessions_dir(
    repo: MaintenanceRepository, con: sqlite3.Connection, tmp_path: Path
) -> None:
    add_session(con, "cron1", source="cron", started_at=OLD, ended_at=OLD)
    add_session(con, "cli1", source="cli", started_at=OLD, ended_at=OLD)
    (tmp_path / "cron1.jsonl").write_text("")
    (tmp_path / "cli1.jsonl").write_text("")
    assert repo.prune_sessions(source="cron", sessions_dir=tmp_path) == 1
    assert ids(con) == {"cli1"}
    assert sorted(p.name for p in tmp_path.glob("*.jsonl")) == ["cli1.jsonl"]


def test_prune_unknown_filter_raises_type_error(repo: MaintenanceRepository) -> None:
    with pytest.raises(TypeError, match="unexpected keyword argument 'colour'"):
        repo.prune_sessions(colour="red")
    with pytest.raises(TypeError, match="list_prune_candidates"):
        repo.list_prune_candidates(pinned=True)


@pytest.fixture
def filter_sessions(
    repo: MaintenanceRepository, con: sqlite3.Connection
) -> Callable[..., list[str]]:
    """Ended sessions with distinct attributes; returns a candidates-by-filter helper."""
    e = OLD + 10
    rows: list[dict[str, Any]] = [
        dict(id="a", source="cli", started_at=OLD, title="Fix auth_module", end_reason="user_exit",
             cwd="/work/proj", model="claude-sonnet", billing_provider="OpenRouter",
             user_id="u1", chat_id="c1", chat_type="dm", git_branch="feature/LOGIN",
             input_tokens=100, output_tokens=50, estimated_cost_usd=0.5, actual_cost_usd=None,
             tool_call_count=1, archived=0),
        dict(id="b", source="cron", started_at=OLD + 100, title="100% done",
             end_reason="cron_complete", cwd="/work/project", model="gpt-4o",
             billing_provider="openai", user_id="u2", chat_id="c2", chat_type="group",
             git_branch="main", input_tokens=10, output_tokens=0, estimated_cost_usd=2.0,
             actual_cost_usd=0.1, tool_call_count=5, archived=1),
        dict(id="c", source="cli", started_at=OLD + 200, title="authXmodule",
             end_reason="user_exit", cwd="C:\\work\\proj\\sub", model="claude-opus",
             billing_provider=None, git_branch="fix_1", input_tokens=0, output_tokens=0,
             estimated_cost_usd=None, tool_call_count=0, archived=0),
        dict(id="d", source="cli", started_at=OLD + 300, title=None, end_reason="user_exit",
             cwd="/work/proj/deep", model=None, input_tokens=5000, output_tokens=5000,
             estimated_cost_usd=10.0, tool_call_count=20, archived=0),
    ]  # fmt: skip
    for r in rows:
        sid = r.pop("id")
        add_session(con, sid, ended_at=e + r["started_at"] - OLD, **r)
    for _ in range(3):
        add_message(con, "b", timestamp=OLD + 5000)
    add_message(con, "d", timestamp=OLD + 150)

    def candidates(**filters: Any) -> list[str]:
        return sorted(c["id"] for c in repo.list_prune_candidates(**filters))

    return candidates


@pytest.mark.parametrize(
    ("filters", "expected"),
    [
        ({}, ["a", "b", "c", "d"]),
        ({"last_active_before": OLD + 250}, ["a", "c", "d"]),  # d's activity: its message
        ({"last_active_after": OLD + 250}, ["b"]),
        ({"started_before": OLD + 150}, ["a", "b"]),
        ({"started_after": OLD + 150}, ["c", "d"]),
        ({"source": "cli"}, ["a", "c", "d"]),
        ({"title_like": "AUTH"}, ["a", "c"]),
        ({"title_like": "auth_module"}, ["a"]),  # `_` is literal (v23: a wildcard)
        ({"title_like": "100%"}, ["b"]),
        ({"title_like": "%"}, ["b"]),
        ({"end_reason": "cron_complete"}, ["b"]),
        ({"cwd_prefix": "/work/proj"}, ["a", "d"]),
        ({"cwd_prefix": "/work/proj/"}, ["a", "d"]),
        ({"cwd_prefix": "C:\\work\\proj"}, ["c"]),
        ({"min_messages": 1}, ["b", "d"]),
        ({"max_messages": 1}, ["a", "c", "d"]),
        ({"archived": True}, ["b"]),
        ({"archived": False}, ["a", "c", "d"]),
        ({"archived": None}, ["a", "b", "c", "d"]),
        ({"model_like": "CLAUDE"}, ["a", "c"]),
        ({"model_like": "gpt_4o"}, []),
        ({"provider": "openrouter"}, ["a"]),
        ({"user_id": "u1"}, ["a"]),
        ({"chat_id": "c2"}, ["b"]),
        ({"chat_type": "dm"}, ["a"]),
        ({"branch_like": "login"}, ["a"]),
        ({"branch_like": "fix_"}, ["c"]),
        ({"min_tokens": 150}, ["a", "d"]),
        ({"max_tokens": 10}, ["b", "c"]),
        ({"min_cost": 0.5}, ["a", "d"]),  # b's actual cost (0.1) wins over its estimate
        ({"max_cost": 0.1}, ["b", "c"]),
        ({"min_tool_calls": 5}, ["b", "d"]),
        ({"max_tool_calls": 1}, ["a", "c"]),
        ({"source": "cli", "min_tokens": 1, "title_like": "fix"}, ["a"]),  # AND-ed
    ],
)
def test_prune_filters(
    filter_sessions: Callable[..., list[str]], filters: dict[str, Any], expected: list[str]
) -> None:
    assert filter_sessions(**filters) == expected


def test_list_prune_candidates_shape_and_order(
    repo: MaintenanceRepository, con: sqlite3.Connection
) -> None:
    add_session(con, "late", started_at=OLD, ended_at=OLD + 5, title="t", model="m")
    add_message(con, "late", timestamp=OLD + 500)
    add_session(con, "early", started_at=OLD + 100, ended_at=OLD + 105)
    add_session(con, "open", started_at=OLD)
    candidates = repo.list_prune_candidates(older_than_days=30)
    assert [c["id"] for c in candidates] == ["early", "late"]  # least recently active first
    assert set(candidates[1]) == {
        "id",
        "source",
        "title",
        "model",
        "started_at",
        "last_active",
        "ended_at",
        "message_count",
        "archived",
    }
    assert candidates[1]["last_active"] == OLD + 500
    assert ids(con) == {"late", "early", "open"}  # a dry run


def test_prune_in_small_chunks(store: Store, con: sqlite3.Connection) -> None:
    for i in range(5):
        add_session(con, f"s{i}", started_at=OLD, ended_at=OLD)
    repo = MaintenanceRepository(store, chunk_size=2)
    assert repo.prune_sessions() == 5
    assert count(con, "sessions") == 0


def test_prune_writes_at_most_in_chunk_sessions_per_transaction(
    store: Store, con: sqlite3.Connection
) -> None:
    """One chunk size for every IN-list and chunked write (`_sql.IN_CHUNK`); a larger
    `chunk_size` is capped to it, so a prune never holds the write lock for more."""
    con.executemany(
        "INSERT INTO sessions (id, source, started_at, ended_at) VALUES (?, 'cli', ?, ?)",
        [(f"s{i:04d}", OLD, OLD) for i in range(IN_CHUNK + 3)],
    )
    commits: list[int] = []
    event.listen(store.engine, "commit", lambda conn: commits.append(1))
    repo = MaintenanceRepository(store, chunk_size=10 * IN_CHUNK)
    assert repo.chunk_size == IN_CHUNK
    assert repo.prune_sessions() == IN_CHUNK + 3
    # a full chunk, the rest, and the empty chunk that ends the series
    assert len(commits) == 3
    assert count(con, "sessions") == 0


# --------------------------------------------------------------------------- empty / stale


def test_count_and_delete_empty_sessions(
    repo: MaintenanceRepository, con: sqlite3.Connection, tmp_path: Path
) -> None:
    add_session(con, "empty", ended_at=time.time())
    add_session(con, "empty-open")
    add_session(con, "empty-archived", ended_at=time.time(), archived=1)
    add_session(con, "full", ended_at=time.time())
    add_message(con, "full")
    add_session(con, "kid", parent_session_id="empty", ended_at=time.time())
    add_message(con, "kid")
    (tmp_path / "empty.json").write_text("{}")
    assert repo.count_empty_sessions() == 1
    assert repo.delete_empty_sessions(sessions_dir=tmp_path) == 1
    assert ids(con) == {"empty-open", "empty-archived", "full", "kid"}
    assert row(con, "kid")["parent_session_id"] is None
    assert not (tmp_path / "empty.json").exists()
    assert repo.count_empty_sessions() == 0


def test_archive_stale_sessions(repo: MaintenanceRepository, con: sqlite3.Connection) -> None:
    now = time.time()
    add_session(con, "stale-open", started_at=now - 10 * DAY)
    add_session(con, "stale-ended", started_at=now - 10 * DAY, ended_at=now - 9 * DAY)
    add_session(
        con,
        "compressed",
        started_at=now - 10 * DAY,
        end_reason="compression",
        ended_at=now - 9 * DAY,
    )
    add_session(con, "pinned", started_at=now - 10 * DAY, pinned=1)
    add_session(con, "fresh", started_at=now - DAY)
    add_session(con, "old-but-active", started_at=now - 10 * DAY)
    add_message(con, "old-but-active", timestamp=now - DAY)
    add_session(con, "already", started_at=now - 10 * DAY, archived=1)
    assert repo.archive_stale_sessions(None) == 0
    assert repo.archive_stale_sessions(-1) == 0
    assert repo.archive_stale_sessions(3) == 2
    archived = {r[0] for r in con.execute("SELECT id FROM sessions WHERE archived = 1")}
    assert archived == {"stale-open", "stale-ended", "already"}
    assert repo.archive_stale_sessions(3, exclude_pinned=False) == 1
    assert row(con, "pinned")["archived"] == 1
    assert row(con, "compressed")["archived"] == 0
