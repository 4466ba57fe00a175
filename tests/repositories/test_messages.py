"""MessageRepository on real SQLite files: docs/reference/behaviour.md 3.1 (append_message, its
encodings and the tool_calls edge cases), 3.2 (bulk writers, rewind), 3.3 (readers),
4.1 (conversation format), the publication half of 12 and the robustness rules of 17."""

from __future__ import annotations

import json
import multiprocessing
import sqlite3
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from helpers.databases import JOURNAL_MODES, journal_mode, set_journal_mode
from sqlalchemy import event, insert, text

from hermes_store import migrate
from hermes_store.config import JOURNAL_ENV
from hermes_store.contract import APPEND_FUNCTION
from hermes_store.errors import (
    CompressionSessionBusyError,
    CompressionSessionClosedError,
    InvalidInput,
    SessionNotFound,
)
from hermes_store.repositories._tables import LOCKS, SESSIONS
from hermes_store.repositories.messages import (
    MessageRepository,
    repair_message_alternation,
    strip_memory_context,
)
from hermes_store.store import Store

FIX_S1 = "20260301_091500_a1b2c3"
FIX_PARENT = "20260303_080000_c0ffee"
FIX_CHILD = "20260303_083012_c0ffe2"

# --------------------------------------------------------------------------- helpers


@pytest.fixture
def repo(store: Store) -> MessageRepository:
    return MessageRepository(store)


def make_session(store: Store, sid: str = "s1", source: str = "cli", **cols: Any) -> str:
    values = {"id": sid, "source": source, "started_at": time.time(), **cols}
    store.write(lambda s: s.execute(insert(SESSIONS).values(**values)))
    return sid


def end_session(store: Store, sid: str, reason: str) -> None:
    store.write(
        lambda s: s.execute(
            text("UPDATE sessions SET ended_at = :t, end_reason = :r WHERE id = :id"),
            {"t": time.time(), "r": reason, "id": sid},
        )
    )


def add_lock(store: Store, sid: str, holder: str, expires_in: float = 300.0) -> None:
    at = time.time()
    store.write(
        lambda s: s.execute(
            insert(LOCKS).values(
                session_id=sid, holder=holder, acquired_at=at, expires_at=at + expires_in
            )
        )
    )


def sql(store: Store, statement: str, **params: Any) -> list[Any]:
    with store.read() as s:
        return list(s.execute(text(statement), params).all())


def execute(store: Store, statement: str, **params: Any) -> None:
    store.write(lambda s: s.execute(text(statement), params))


def stored(store: Store, message_id: int) -> dict[str, Any]:
    with store.read() as s:
        row = s.execute(text("SELECT * FROM messages WHERE id = :id"), {"id": message_id})
        return dict(row.mappings().one())


def counters(store: Store, sid: str = "s1") -> tuple[int, int]:
    ((m, t),) = sql(
        store, "SELECT message_count, tool_call_count FROM sessions WHERE id = :i", i=sid
    )
    return m, t


# --------------------------------------------------------------------------- append_message


def test_append_returns_growing_ids_and_writes_defaults(store, repo):
    make_session(store)
    first = repo.append_message("s1", "user", "hello")
    second = repo.append_message("s1", "assistant", "hi")
    assert second > first
    row = stored(store, first)
    assert (row["active"], row["compacted"], row["observed"]) == (1, 0, 0)
    assert row["session_id"] == "s1" and row["role"] == "user" and row["content"] == "hello"
    for col in ("tool_calls", "tool_name", "reasoning", "api_content", "display_kind"):
        assert row[col] is None


def test_inserts_name_active_explicitly(store, repo):
    # Older reconcilers added `active` without DEFAULT 1, so every INSERT must name it.
    make_session(store)
    statements: list[str] = []

    def capture(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        if statement.lstrip().upper().startswith("INSERT INTO MESSAGES"):
            statements.append(statement)
        elif APPEND_FUNCTION in statement:  # PostgreSQL's one-call append
            calls.append(statement)

    calls: list[str] = []
    event.listen(store.engine, "before_cursor_execute", capture)
    try:
        repo.append_message("s1", "user", "x")
        repo.append_messages("s1", [{"role": "user", "content": "y"}])
    finally:
        event.remove(store.engine, "before_cursor_execute", capture)
    assert len(statements) + len(calls) == 2
    for statement in statements:
        columns = statement.split("(", 1)[1].split(")", 1)[0]
        assert "active" in [c.strip() for c in columns.split(",")]
    if calls:  # the function's own INSERT names it, and the call passes it
        assert all("p_active =>" in call for call in calls)
        body = sql(store, f"SELECT pg_get_functiondef('{APPEND_FUNCTION}'::regproc)")[0][0]
        inserted = body.split("INSERT INTO messages (", 1)[1].split(")", 1)[0]
        assert '"active"' in [c.strip() for c in inserted.split(",")]
    assert sql(store, "SELECT DISTINCT active FROM messages") == [(1,)]


def test_append_counts_messages_and_tool_calls(store, repo):
    make_session(store)
    repo.append_message("s1", "user", "q")
    repo.append_message("s1", "assistant", "", tool_calls=[{"id": "a"}, {"id": "b"}])
    repo.append_message("s1", "tool", "r1", tool_call_id="a", tool_name="t")
    repo.append_message("s1", "tool", "r2", tool_call_id="b", tool_name="t")
    assert counters(store) == (4, 2)


# Spec 3.1 edge-case table, row by row: (given, stored, count added).
TOOL_CALL_CASES = [
    pytest.param(None, None, 0, id="None"),
    pytest.param([], None, 0, id="empty-list"),
    pytest.param("null", None, 0, id="json-null"),
    pytest.param("{bad", None, 0, id="invalid-json"),
    pytest.param({}, None, 1, id="empty-dict"),
    pytest.param("{}", None, 1, id="json-empty-dict"),
    pytest.param(0, None, 1, id="zero"),
    pytest.param(False, None, 1, id="False"),
    pytest.param([{"id": "a"}, {"id": "b"}], '[{"id": "a"}, {"id": "b"}]', 2, id="list-of-2"),
    pytest.param({"id": 1}, '{"id": 1}', 1, id="dict"),
    pytest.param('[{"id": "x"}]', '[{"id": "x"}]', 1, id="json-string-of-1-list"),
]


@pytest.mark.parametrize(("given", "expected", "added"), TOOL_CALL_CASES)
def test_tool_calls_edge_cases(store, repo, given, expected, added):
    make_session(store)
    mid = repo.append_message("s1", "assistant", "x", tool_calls=given)
    assert stored(store, mid)["tool_calls"] == expected
    assert counters(store) == (1, added)


@pytest.mark.parametrize("given", ["not json", "", "[1, 2", "{'single': 'quotes'}"])
def test_non_json_tool_call_strings_store_null_and_count_zero(store, repo, given):
    make_session(store)
    mid = repo.append_message("s1", "assistant", "x", tool_calls=given)
    assert stored(store, mid)["tool_calls"] is None
    assert counters(store) == (1, 0)


def test_tool_calls_json_string_is_not_double_encoded(store, repo):
    make_session(store)
    calls = [{"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}]
    mid = repo.append_message("s1", "assistant", "", tool_calls=json.dumps(calls))
    assert json.loads(stored(store, mid)["tool_calls"]) == calls
    assert repo.get_messages("s1")[0]["tool_calls"] == calls


def test_tool_role_adds_no_tool_calls(store, repo):
    make_session(store)
    repo.append_message("s1", "tool", "result", tool_call_id="c1", tool_name="terminal")
    assert counters(store) == (1, 0)


@pytest.mark.parametrize(
    "content", [[{"type": "text", "text": "hi"}], {"k": "v", "n": [1, 2]}], ids=["list", "dict"]
)
def test_structured_content_uses_json_prefix_and_decodes(store, repo, content):
    make_session(store)
    mid = repo.append_message("s1", "user", content)
    assert stored(store, mid)["content"] == "\x00json:" + json.dumps(content)
    assert repo.get_messages("s1")[0]["content"] == content


@pytest.mark.sqlite_only  # SQLite storage classes (typeof)
@pytest.mark.parametrize(
    ("content", "sqlite_type", "read_back"),
    [
        (b"\x00\xffraw", "blob", b"\x00\xffraw"),
        # Bound as given; the column's TEXT affinity then stores numbers as text, exactly
        # as it does for the original.
        (42, "text", "42"),
        (2.5, "text", "2.5"),
        (None, "null", None),
    ],
    ids=["bytes", "int", "float", "None"],
)
def test_scalar_content_is_stored_as_given(store, repo, content, sqlite_type, read_back):
    make_session(store)
    mid = repo.append_message("s1", "user", content)
    assert sql(store, "SELECT typeof(content) FROM messages WHERE id = :i", i=mid) == [
        (sqlite_type,)
    ]
    assert repo.get_messages("s1")[0]["content"] == read_back


def test_unsupported_content_type_is_refused_and_nothing_written(store, repo):
    make_session(store)
    with pytest.raises(InvalidInput):
        repo.append_message("s1", "user", {1, 2})
    assert repo.message_count("s1") == 0
    assert counters(store) == (0, 0)


def test_lone_surrogates_become_replacement_characters(store, repo):
    make_session(store)
    bad = "a\ud800b\udfffc"
    mid = repo.append_message(
        "s1",
        "assistant",
        bad,
        tool_name=bad,
        reasoning=bad,
        reasoning_content=bad,
        api_content=bad,
        display_kind=bad,
    )
    row = stored(store, mid)
    for col in ("content", "tool_name", "reasoning", "reasoning_content", "api_content"):
        assert row[col] == "a\ufffdb\ufffdc", col
    assert row["display_kind"] == "a\ufffdb\ufffdc"


def test_surrogates_inside_structured_content_survive_as_json_escapes(store, repo):
    make_session(store)
    repo.append_message("s1", "user", [{"type": "text", "text": "x\ud83dy"}])
    assert repo.get_messages("s1")[0]["content"] == [{"type": "text", "text": "x\ud83dy"}]


def test_empty_reasoning_strings_are_kept(store, repo):
    make_session(store)
    mid = repo.append_message("s1", "assistant", "x", reasoning="", reasoning_content="")
    row = stored(store, mid)
    assert row["reasoning"] == "" and row["reasoning_content"] == ""


@pytest.mark.parametrize(
    "col", ["reasoning_details", "codex_reasoning_items", "codex_message_items"]
)
def test_json_reasoning_columns_null_when_falsy(store, repo, col):
    make_session(store)
    empty = repo.append_message("s1", "assistant", "x", **{col: []})
    full = repo.append_message("s1", "assistant", "x", **{col: [{"type": "r", "n": 1}]})
    assert stored(store, empty)[col] is None
    assert stored(store, full)[col] == '[{"type": "r", "n": 1}]'


DISPLAY_METADATA_CASES = [
    pytest.param({"model": "m"}, '{"model": "m"}', id="dict"),
    pytest.param('{"model": "m"}', '{"model": "m"}', id="json-object-string"),
    pytest.param({}, None, id="empty-dict"),
    pytest.param([1, 2], None, id="list"),
    pytest.param(7, None, id="number"),
    pytest.param("{not json", None, id="invalid-json"),
    pytest.param('"just a string"', None, id="json-encoded-string"),
    pytest.param("", None, id="empty-string"),
    pytest.param(None, None, id="None"),
]


@pytest.mark.parametrize(("given", "expected"), DISPLAY_METADATA_CASES)
def test_display_metadata_encoding(store, repo, given, expected):
    make_session(store)
    mid = repo.append_message("s1", "user", "x", display_kind="k", display_metadata=given)
    assert stored(store, mid)["display_metadata"] == expected


def test_timestamp_defaults_to_now(store, repo):
    make_session(store)
    before = time.time()
    mid = repo.append_message("s1", "user", "x")
    after = time.time()
    assert before <= stored(store, mid)["timestamp"] <= after


def test_timestamp_from_datetime_and_number(store, repo):
    make_session(store)
    moment = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)
    a = repo.append_message("s1", "user", "x", timestamp=moment)
    b = repo.append_message("s1", "user", "x", timestamp=1234.5)
    c = repo.append_message("s1", "user", "x", timestamp=99)
    assert stored(store, a)["timestamp"] == moment.timestamp()
    assert stored(store, b)["timestamp"] == 1234.5
    assert stored(store, c)["timestamp"] == 99.0


@pytest.mark.parametrize("bad", ["yesterday", object(), float("nan"), float("inf"), True])
def test_unusable_timestamp_falls_back_to_now(store, repo, bad):
    make_session(store)
    before = time.time()
    mid = repo.append_message("s1", "user", "x", timestamp=bad)
    assert before <= stored(store, mid)["timestamp"] <= time.time()


def test_observed_is_a_zero_one_flag(store, repo):
    make_session(store)
    yes = repo.append_message("s1", "user", "x", observed="truthy")
    no = repo.append_message("s1", "user", "x", observed=0)
    assert stored(store, yes)["observed"] == 1 and stored(store, no)["observed"] == 0


def test_all_scalar_parameters_are_stored(store, repo):
    make_session(store)
    mid = repo.append_message(
        "s1",
        "assistant",
        "c",
        tool_call_id="tc",
        token_count=17,
        finish_reason="stop",
        platform_message_id="pm-1",
        effect_disposition="applied",
        api_content="sent",
        display_kind="hidden",
    )
    row = stored(store, mid)
    assert (row["tool_call_id"], row["token_count"], row["finish_reason"]) == ("tc", 17, "stop")
    assert (row["platform_message_id"], row["effect_disposition"]) == ("pm-1", "applied")
    assert (row["api_content"], row["display_kind"]) == ("sent", "hidden")


def test_unknown_session_raises_session_not_found(store, repo):
    with pytest.raises(SessionNotFound):
        repo.append_message("nope", "user", "x")
    assert repo.message_count() == 0


def test_ten_megabyte_content_round_trips_exactly(store, repo):
    make_session(store)
    big = ("0123456789abcdef" * 65536) * 10  # 10 MiB
    big = big[:-3] + "end"
    mid = repo.append_message("s1", "tool", big)
    assert repo.get_messages("s1")[0]["content"] == big
    assert sql(store, "SELECT length(content) FROM messages WHERE id = :i", i=mid) == [(len(big),)]


# byte length through CAST AS BLOB; PostgreSQL: tests/postgres/test_copy.py
@pytest.mark.sqlite_only
def test_nul_bytes_inside_content_are_stored_exactly(store, repo):
    make_session(store)
    value = "before\x00middle\x00\x00after"
    mid = repo.append_message("s1", "user", value)
    assert repo.get_messages("s1")[0]["content"] == value
    # length() stops at the first NUL for TEXT; the byte length proves nothing was cut.
    assert sql(
        store, "SELECT length(CAST(content AS BLOB)) FROM messages WHERE id = :i", i=mid
    ) == [(len(value.encode()),)]


# --------------------------------------------------------------------------- compression checks


def test_append_refused_while_another_holder_has_a_live_lease(store, repo):
    make_session(store)
    add_lock(store, "s1", "pid=1 host=a")
    with pytest.raises(CompressionSessionBusyError):
        repo.append_message("s1", "user", "x")
    with pytest.raises(CompressionSessionBusyError):
        repo.append_message("s1", "user", "x", compression_lock_holder="someone else")
    assert repo.message_count("s1") == 0 and counters(store) == (0, 0)


def test_append_allowed_for_the_lease_holder(store, repo):
    make_session(store)
    add_lock(store, "s1", "me")
    repo.append_message("s1", "user", "x", compression_lock_holder="me")
    assert repo.message_count("s1") == 1


def test_append_allowed_after_the_lease_expired(store, repo):
    make_session(store)
    add_lock(store, "s1", "other", expires_in=-1)
    repo.append_message("s1", "user", "x")
    assert repo.message_count("s1") == 1


def test_append_refused_on_a_compression_closed_session(store, repo):
    make_session(store)
    end_session(store, "s1", "compression")
    with pytest.raises(CompressionSessionClosedError):
        repo.append_message("s1", "user", "x")
    assert repo.message_count("s1") == 0


def test_append_allowed_on_a_session_ended_for_another_reason(store, repo):
    make_session(store)
    end_session(store, "s1", "user_exit")
    repo.append_message("s1", "user", "x")
    assert counters(store) == (1, 0)


def test_lease_is_checked_before_the_closed_state(store, repo):
    make_session(store)
    end_session(store, "s1", "compression")
    add_lock(store, "s1", "other")
    with pytest.raises(CompressionSessionBusyError):
        repo.append_message("s1", "user", "x")


def test_append_allowed_on_an_ended_session_without_a_reason(store, repo):
    # NULL end_reason: not compression-closed (a comparison with NULL must not refuse it)
    make_session(store)
    execute(store, "UPDATE sessions SET ended_at = :t WHERE id = 's1'", t=time.time())
    repo.append_message("s1", "user", "x")
    assert counters(store) == (1, 0)


def test_append_refused_on_a_missing_session_writes_nothing(store, repo):
    make_session(store)
    with pytest.raises(SessionNotFound):
        repo.append_message("nope", "user", "x")
    assert sql(store, "SELECT count(*) FROM messages") == [(0,)]


def test_lease_of_another_session_does_not_refuse(store, repo):
    make_session(store)
    make_session(store, "s2")
    add_lock(store, "s2", "other")
    repo.append_message("s1", "user", "x")
    assert counters(store) == (1, 0)


@pytest.mark.sqlite_only
def test_unstorable_value_on_a_refused_session_reports_the_refusal_first(store, repo):
    # on SQLite the checks come before the encoding's refusal, as they always did there
    # (PostgreSQL's one-call append encodes first, so there InvalidInput comes first)
    make_session(store)
    add_lock(store, "s1", "other")
    with pytest.raises(SessionNotFound):
        repo.append_message("nope", "user", object())
    with pytest.raises(CompressionSessionBusyError):
        repo.append_message("s1", "user", object())
    with pytest.raises(InvalidInput):
        repo.append_message("s1", "user", object(), compression_lock_holder="other")


@pytest.mark.parametrize("mode", JOURNAL_MODES)
def test_sqlite_append_checks_inside_its_insert(fresh_db, mode, monkeypatch):
    # on SQLite the session, its state and its lease are checked by the INSERT itself:
    # an allowed append sends BEGIN, the INSERT, the counters' UPDATE (and COMMIT)
    monkeypatch.setenv(JOURNAL_ENV, mode)
    set_journal_mode(fresh_db.removeprefix("sqlite:///"), mode)
    with Store(fresh_db) as store:
        repo = MessageRepository(store)
        make_session(store)
        repo.append_message("s1", "user", "warm")
        sent: list[str] = []

        def capture(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
            sent.append(statement.split(None, 1)[0].upper())

        event.listen(store.engine, "before_cursor_execute", capture)
        try:
            repo.append_message("s1", "user", "x")
            refused = len(sent)
            add_lock(store, "s1", "other")
            sent.clear()
            with pytest.raises(CompressionSessionBusyError):
                repo.append_message("s1", "user", "y")
        finally:
            event.remove(store.engine, "before_cursor_execute", capture)
        assert refused == 3
        # a refusal reads the state once more, to say which check failed
        assert sent == ["BEGIN", "INSERT", "SELECT"]
        assert counters(store) == (2, 0)
    assert journal_mode(fresh_db.removeprefix("sqlite:///")) == mode


# --------------------------------------------------------------------------- append_messages


def test_batch_append_counters_exact(store, repo):
    make_session(store)
    repo.append_message("s1", "user", "first", tool_calls=None)
    ids = repo.append_messages(
        "s1",
        [
            {"role": "user", "content": "q"},
            {"role": "assistant", "content": "", "tool_calls": [{"id": 1}, {"id": 2}, {"id": 3}]},
            {"role": "tool", "content": "r", "tool_call_id": "1"},
            {"role": "assistant", "content": "x", "tool_calls": "{bad"},
            {"role": "assistant", "content": "y", "tool_calls": {}},
            {"role": "assistant", "content": "z", "tool_calls": '[{"id": 9}]'},
        ],
    )
    assert len(ids) == 6 and ids == sorted(ids)
    assert counters(store) == (7, 3 + 0 + 1 + 1)
    assert repo.message_count("s1") == 7


def test_batch_append_returns_ids_in_input_order(store, repo):
    make_session(store)
    ids = repo.append_messages("s1", [{"role": "user", "content": str(i)} for i in range(50)])
    got = {m["id"]: m["content"] for m in repo.get_messages("s1")}
    assert [got[i] for i in ids] == [str(i) for i in range(50)]


def test_bulk_role_defaults_to_unknown(store, repo):
    make_session(store)
    repo.append_messages("s1", [{"content": "no role"}, {"role": "", "content": "empty"}])
    assert [m["role"] for m in repo.get_messages("s1")] == ["unknown", "unknown"]


def test_bulk_keeps_reasoning_fields_only_on_assistant_rows(store, repo):
    make_session(store)
    reasoning = {
        "reasoning": "r",
        "reasoning_content": "rc",
        "reasoning_details": [{"t": 1}],
        "codex_reasoning_items": [{"c": 1}],
        "codex_message_items": [{"m": 1}],
    }
    repo.append_messages(
        "s1",
        [
            {"role": "user", "content": "u", **reasoning},
            {"role": "assistant", "content": "a", **reasoning},
            {"role": "tool", "content": "t", **reasoning},
        ],
    )
    user, assistant, tool = repo.get_messages("s1")
    for key in reasoning:
        assert user[key] is None and tool[key] is None, key
    assert assistant["reasoning"] == "r" and assistant["reasoning_content"] == "rc"
    assert json.loads(assistant["reasoning_details"]) == [{"t": 1}]
    assert json.loads(assistant["codex_reasoning_items"]) == [{"c": 1}]
    assert json.loads(assistant["codex_message_items"]) == [{"m": 1}]


def test_bulk_platform_message_id_falls_back_to_message_id(store, repo):
    make_session(store)
    repo.append_messages(
        "s1",
        [
            {"role": "user", "content": "a", "message_id": "m-1"},
            {"role": "user", "content": "b", "message_id": "m-2", "platform_message_id": "p-2"},
            {"role": "user", "content": "c"},
        ],
    )
    assert [m["platform_message_id"] for m in repo.get_messages("s1")] == ["m-1", "p-2", None]


def test_bulk_running_clock_advances_one_microsecond(store, repo):
    make_session(store)
    before = time.time()
    repo.append_messages("s1", [{"role": "user", "content": str(i)} for i in range(5)])
    stamps = [m["timestamp"] for m in repo.get_messages("s1")]
    assert stamps[0] >= before
    for earlier, later in zip(stamps, stamps[1:], strict=False):
        assert later - earlier == pytest.approx(1e-6, abs=1e-7)


def test_bulk_explicit_timestamps_are_kept_and_push_the_clock(store, repo):
    make_session(store)
    future = time.time() + 1000.0
    repo.append_messages(
        "s1",
        [
            {"role": "user", "content": "a"},
            {"role": "user", "content": "b", "timestamp": future},
            {"role": "user", "content": "c"},
            {"role": "user", "content": "d", "timestamp": 5.0},
            {"role": "user", "content": "e"},
        ],
    )
    a, b, c, d, e = (m["timestamp"] for m in repo.get_messages("s1"))
    assert b == future and d == 5.0
    assert c == pytest.approx(future + 1e-6, abs=1e-6)
    # An old explicit stamp does not pull the clock back: max(clock + 1e-6, 5.0 + 1e-6).
    assert e == pytest.approx(c + 1e-6, abs=1e-6)
    assert a < b


def test_bulk_encodes_like_append_message(store, repo):
    make_session(store)
    repo.append_messages(
        "s1",
        [
            {
                "role": "assistant",
                "content": [{"type": "text", "text": "t"}],
                "tool_calls": "[]",
                "observed": True,
                "display_metadata": '{"a": 1}',
                "api_content": "x\ud800",
                "display_kind": "k",
                "token_count": 3,
                "finish_reason": "stop",
            }
        ],
    )
    (row,) = sql(
        store, "SELECT content, tool_calls, observed, display_metadata, api_content FROM messages"
    )
    assert row == ('\x00json:[{"type": "text", "text": "t"}]', None, 1, '{"a": 1}', "x\ufffd")


def test_batch_append_is_one_transaction(store, repo):
    make_session(store)
    with pytest.raises(InvalidInput):
        repo.append_messages(
            "s1", [{"role": "user", "content": "ok"}, {"role": "user", "content": {1}}]
        )
    assert repo.message_count("s1") == 0 and counters(store) == (0, 0)


def test_batch_append_checks_session_and_compression(store, repo):
    with pytest.raises(SessionNotFound):
        repo.append_messages("missing", [{"role": "user", "content": "x"}])
    make_session(store)
    add_lock(store, "s1", "other")
    with pytest.raises(CompressionSessionBusyError):
        repo.append_messages("s1", [{"role": "user", "content": "x"}])
    repo.append_messages("s1", [{"role": "user", "content": "x"}], compression_lock_holder="other")
    make_session(store, "s2")
    end_session(store, "s2", "compression")
    with pytest.raises(CompressionSessionClosedError):
        repo.append_messages("s2", [{"role": "user", "content": "x"}])


def test_batch_append_of_nothing_writes_nothing(store, repo):
    make_session(store)
    assert repo.append_messages("s1", []) == []
    assert counters(store) == (0, 0)


# --------------------------------------------------------------------------- other writers


def test_replace_messages_replaces_everything_and_sets_counters(store, repo):
    make_session(store)
    for i in range(3):
        repo.append_message("s1", "assistant", str(i), tool_calls=[{"id": i}])
    repo.replace_messages(
        "s1",
        [
            {"role": "user", "content": "new"},
            {"role": "assistant", "content": "", "tool_calls": [{}, {}]},
        ],
    )
    assert [m["content"] for m in repo.get_messages("s1", include_inactive=True)] == ["new", ""]
    assert counters(store) == (2, 2)


def test_replace_messages_active_only_keeps_inactive_rows(store, repo):
    make_session(store)
    ids = [repo.append_message("s1", "user", str(i)) for i in range(3)]
    repo.rewind_to_message("s1", ids[2])
    repo.replace_messages("s1", [{"role": "user", "content": "n"}], active_only=True)
    every = repo.get_messages("s1", include_inactive=True)
    assert [(m["content"], m["active"]) for m in every] == [("2", 0), ("n", 1)]
    assert counters(store) == (1, 0)


def test_replace_messages_refuses_a_compression_closed_session(store, repo):
    make_session(store)
    repo.append_message("s1", "user", "keep")
    end_session(store, "s1", "compression")
    with pytest.raises(CompressionSessionClosedError):
        repo.replace_messages("s1", [{"role": "user", "content": "x"}])
    assert [m["content"] for m in repo.get_messages("s1")] == ["keep"]


def test_replace_messages_unknown_session(store, repo):
    repo.replace_messages("ghost", [])  # nothing to insert: a no-op, as in the original
    with pytest.raises(SessionNotFound):
        repo.replace_messages("ghost", [{"role": "user", "content": "x"}])


def test_archive_and_compact(store, repo):
    make_session(store)
    old = [repo.append_message("s1", "user", str(i), tool_calls=[{}]) for i in range(3)]
    repo.rewind_to_message("s1", old[2])  # a rewound row stays rewound (compacted = 0)
    inserted = repo.archive_and_compact(
        "s1",
        [
            {"role": "user", "content": "summary"},
            {"role": "assistant", "content": "ok", "tool_calls": [{}]},
        ],
    )
    assert inserted == 2
    rows = sql(store, "SELECT content, active, compacted FROM messages ORDER BY id")
    assert rows == [("0", 0, 1), ("1", 0, 1), ("2", 0, 0), ("summary", 1, 0), ("ok", 1, 0)]
    assert counters(store) == (2, 1)
    assert repo.has_archived_messages("s1")


def test_set_latest_matching_message_display_kind(store, repo):
    make_session(store)
    first = repo.append_message("s1", "user", "same")
    second = repo.append_message("s1", "user", "same")
    repo.append_message("s1", "assistant", "same")
    assert repo.set_latest_matching_message_display_kind(
        "s1", role="user", content="same", display_kind="model_switch", display_metadata={"to": "m"}
    )
    assert stored(store, second)["display_kind"] == "model_switch"
    assert stored(store, second)["display_metadata"] == '{"to": "m"}'
    assert stored(store, first)["display_kind"] is None


def test_set_latest_matching_display_kind_matches_encoded_content(store, repo):
    make_session(store)
    content = [{"type": "text", "text": "pic"}]
    mid = repo.append_message("s1", "user", content)
    assert repo.set_latest_matching_message_display_kind(
        "s1", role="user", content=content, display_kind="k"
    )
    assert stored(store, mid)["display_kind"] == "k"


def test_set_latest_matching_display_kind_false_cases(store, repo):
    make_session(store)
    mid = repo.append_message("s1", "user", "x")
    assert not repo.set_latest_matching_message_display_kind(
        "s1", role="user", content="other", display_kind="k"
    )
    assert not repo.set_latest_matching_message_display_kind(
        "s1", role="", content="x", display_kind="k"
    )
    assert not repo.set_latest_matching_message_display_kind(
        "s1", role="user", content="", display_kind="k"
    )
    assert not repo.set_latest_matching_message_display_kind(
        "s1", role="user", content="x", display_kind=""
    )
    assert not repo.set_latest_matching_message_display_kind(
        "", role="user", content="x", display_kind="k"
    )
    repo.rewind_to_message("s1", mid)  # inactive rows never match
    assert not repo.set_latest_matching_message_display_kind(
        "s1", role="user", content="x", display_kind="k"
    )


def test_set_latest_user_api_content_only_on_the_newest_user_row(store, repo):
    make_session(store)
    older = repo.append_message("s1", "user", "a")
    newer = repo.append_message("s1", "user", "b")
    repo.append_message("s1", "assistant", "a")
    assert repo.set_latest_user_api_content("s1", "a", "sent a") == 0  # "a" is not the newest
    assert repo.set_latest_user_api_content("s1", "b", "sent b\ud800") == 1
    assert stored(store, newer)["api_content"] == "sent b\ufffd"
    assert stored(store, older)["api_content"] is None
    assert repo.set_latest_user_api_content("", "b", "x") == 0


def test_rewind_to_message(store, repo):
    make_session(store)
    ids = [repo.append_message("s1", r, c) for r, c in [("user", "q1"), ("assistant", "a1")]]
    target = repo.append_message("s1", "user", [{"type": "text", "text": "q2"}])
    ids += [target, repo.append_message("s1", "assistant", "a2")]
    result = repo.rewind_to_message("s1", target)
    assert result["rewound_count"] == 2
    assert result["new_head_id"] == ids[1]
    assert result["target_message"]["id"] == target
    assert result["target_message"]["content"] == [{"type": "text", "text": "q2"}]
    assert result["target_message"]["role"] == "user"
    assert [m["id"] for m in repo.get_messages("s1")] == ids[:2]
    assert sql(store, "SELECT rewind_count FROM sessions") == [(1,)]
    assert counters(store) == (4, 0)  # not recomputed at v23
    assert repo.message_count("s1") == 4  # rows stay on disk


def test_rewind_count_grows_even_when_nothing_is_left_to_rewind(store, repo):
    make_session(store)
    target = repo.append_message("s1", "user", "q")
    assert repo.rewind_to_message("s1", target)["new_head_id"] is None
    second = repo.rewind_to_message("s1", target)
    assert second["rewound_count"] == 0 and second["new_head_id"] is None
    assert sql(store, "SELECT rewind_count FROM sessions") == [(2,)]


def test_rewind_errors(store, repo):
    make_session(store)
    make_session(store, "s2")
    answer = repo.append_message("s1", "assistant", "a")
    elsewhere = repo.append_message("s2", "user", "q")
    with pytest.raises(ValueError) as missing:
        repo.rewind_to_message("s1", 9999)
    assert str(missing.value) == "message 9999 not found in session s1"
    with pytest.raises(ValueError) as foreign:
        repo.rewind_to_message("s1", elsewhere)
    assert str(foreign.value) == f"message {elsewhere} not found in session s1"
    with pytest.raises(ValueError) as role:
        repo.rewind_to_message("s1", answer)
    assert (
        str(role.value)
        == f"rewind target must be a 'user' message (got role='assistant', id={answer})"
    )
    assert sql(store, "SELECT rewind_count FROM sessions WHERE id = 's1'") == [(0,)]


def test_restore_rewound(store, repo):
    make_session(store)
    ids = [repo.append_message("s1", "user", str(i)) for i in range(4)]
    repo.rewind_to_message("s1", ids[1])
    assert repo.restore_rewound("s1", ids[2]) == 2
    assert [m["id"] for m in repo.get_messages("s1")] == [ids[0], ids[2], ids[3]]
    assert repo.restore_rewound("s1", ids[0]) == 1
    assert repo.restore_rewound("s1", ids[0]) == 0


def test_clear_messages(store, repo):
    make_session(store)
    make_session(store, "s2")
    repo.append_message("s1", "assistant", "x", tool_calls=[{}])
    repo.append_message("s2", "user", "y")
    repo.clear_messages("s1")
    assert repo.message_count("s1") == 0 and counters(store) == (0, 0)
    assert repo.message_count("s2") == 1
    repo.clear_messages("unknown")  # no-op


# --------------------------------------------------------------------------- readers


def test_get_messages_orders_by_id_not_timestamp(store, repo):
    make_session(store)
    base = time.time()
    ids = [repo.append_message("s1", "user", str(i), timestamp=base - i * 60) for i in range(5)]
    got = repo.get_messages("s1")
    assert [m["id"] for m in got] == ids
    assert [m["content"] for m in got] == ["0", "1", "2", "3", "4"]
    assert [m["timestamp"] for m in got] == sorted((m["timestamp"] for m in got), reverse=True)


def test_bulk_rows_are_ordered_by_id_too(store, repo):
    make_session(store)
    repo.append_messages(
        "s1", [{"role": "user", "content": str(i), "timestamp": 100.0 - i} for i in range(4)]
    )
    assert [m["content"] for m in repo.get_messages("s1")] == ["0", "1", "2", "3"]


def test_get_messages_include_inactive_and_paging(store, repo):
    make_session(store)
    ids = [repo.append_message("s1", "user", str(i)) for i in range(6)]
    repo.rewind_to_message("s1", ids[4])
    assert [m["content"] for m in repo.get_messages("s1")] == ["0", "1", "2", "3"]
    assert len(repo.get_messages("s1", include_inactive=True)) == 6
    assert [m["content"] for m in repo.get_messages("s1", limit=2)] == ["0", "1"]
    assert [m["content"] for m in repo.get_messages("s1", limit=2, offset=1)] == ["1", "2"]
    assert [m["content"] for m in repo.get_messages("s1", offset=2)] == ["2", "3"]
    assert [m["content"] for m in repo.get_messages("s1", include_inactive=True, offset=4)] == [
        "4",
        "5",
    ]
    assert repo.get_messages("s1", limit=0) == []


def test_get_messages_returns_full_decoded_rows(store, repo):
    make_session(store)
    repo.append_message(
        "s1",
        "assistant",
        {"a": 1},
        tool_calls=[{"id": "c"}],
        display_kind="k",
        display_metadata={"m": 1},
    )
    (msg,) = repo.get_messages("s1")
    assert len(msg) == 23
    assert msg["content"] == {"a": 1}
    assert msg["tool_calls"] == [{"id": "c"}]
    assert msg["display_metadata"] == {"m": 1}


def test_get_messages_shows_unknown_extra_columns(store, repo):
    make_session(store)
    execute(store, "ALTER TABLE messages ADD COLUMN future_col TEXT DEFAULT 'f'")
    repo.append_message("s1", "user", "x")
    assert repo.get_messages("s1")[0]["future_col"] == "f"


def test_corrupt_stored_values_are_tolerated_on_read(store, repo, caplog):
    make_session(store)
    mid = repo.append_message("s1", "assistant", "x")
    execute(
        store,
        "UPDATE messages SET tool_calls = '{broken', display_metadata = :dm, content = :c"
        " WHERE id = :i",
        dm=json.dumps(json.dumps({"wrapped": True})),
        c="\x00json:{broken",
        i=mid,
    )
    (msg,) = repo.get_messages("s1")
    assert msg["tool_calls"] == []
    assert msg["display_metadata"] == {"wrapped": True}  # one extra layer unwrapped
    assert msg["content"] == "\x00json:{broken"  # undecodable structured content: raw
    for bad in ("", "[1]", "3", '"s"', "{nope"):
        execute(store, "UPDATE messages SET display_metadata = :d WHERE id = :i", d=bad, i=mid)
        assert repo.get_messages("s1")[0]["display_metadata"] is None, bad


def test_get_messages_around(store, repo):
    make_session(store)
    make_session(store, "s2")
    ids = [
        repo.append_message("s1", "user" if i % 2 == 0 else "assistant", str(i)) for i in range(10)
    ]
    other = repo.append_message("s2", "user", "elsewhere")
    repo.rewind_to_message("s1", ids[8])  # inactive rows are included
    around = repo.get_messages_around("s1", ids[5], window=2)
    assert [m["id"] for m in around["window"]] == ids[3:8]
    assert (around["messages_before"], around["messages_after"]) == (2, 2)
    edge = repo.get_messages_around("s1", ids[1], window=3)
    assert [m["id"] for m in edge["window"]] == ids[0:5]
    assert (edge["messages_before"], edge["messages_after"]) == (1, 3)
    tail = repo.get_messages_around("s1", ids[9], window=5)
    assert tail["messages_after"] == 0 and tail["window"][-1]["active"] == 0
    assert repo.get_messages_around("s1", ids[4], window=-3)["window"][0]["id"] == ids[4]
    assert len(repo.get_messages_around("s1", ids[4], window=-3)["window"]) == 1
    empty = {"window": [], "messages_before": 0, "messages_after": 0}
    assert repo.get_messages_around("s1", other) == empty
    assert repo.get_messages_around("s1", 123456) == empty


def test_get_anchored_view(store, repo):
    make_session(store)
    spec = [
        ("user", "u0"),
        ("assistant", ""),  # empty: never a bookend
        ("tool", "t2"),
        ("assistant", "a3"),
        ("user", "u4"),
        ("tool", "t5"),  # the anchor: kept although its role is filtered out
        ("assistant", "a6"),
        ("tool", "t7"),
        ("user", "u8"),
        ("assistant", "a9"),
        ("user", "u10"),
        ("tool", "t11"),
    ]
    ids = [repo.append_message("s1", r, c) for r, c in spec]
    view = repo.get_anchored_view("s1", ids[5], window=2, bookend=2)
    assert [m["content"] for m in view["window"]] == ["a3", "u4", "t5", "a6"]
    assert (view["messages_before"], view["messages_after"]) == (2, 1)
    assert [m["content"] for m in view["bookend_start"]] == ["u0"]
    assert [m["content"] for m in view["bookend_end"]] == ["a9", "u10"]
    everything = repo.get_anchored_view("s1", ids[5], window=1, bookend=3, keep_roles=None)
    assert [m["content"] for m in everything["window"]] == ["u4", "t5", "a6"]
    assert [m["content"] for m in everything["bookend_start"]] == ["u0", "t2", "a3"]
    assert [m["content"] for m in everything["bookend_end"]] == ["a9", "u10", "t11"]
    missing = repo.get_anchored_view("s1", 99999)
    assert missing == {
        "window": [],
        "messages_before": 0,
        "messages_after": 0,
        "bookend_start": [],
        "bookend_end": [],
    }


def test_list_recent_user_messages(store, repo):
    make_session(store)
    skill = (
        '[IMPORTANT: The user has invoked the "deploy" skill, indicating they want you to follow '
        "its instructions. The full skill content is loaded below.]\n\nBODY " + "x" * 500 + "\n\n"
        "The user has provided the following instruction alongside the skill invocation: ship it"
        "\n\n[Runtime note: loaded]"
    )
    a = repo.append_message("s1", "user", "  hello \n\n  world  ")
    repo.append_message("s1", "assistant", "ignored")
    b = repo.append_message(
        "s1",
        "user",
        [{"type": "text", "text": "look"}, {"type": "image_url"}, {"type": "text", "text": "here"}],
    )
    c = repo.append_message("s1", "user", [{"type": "image_url", "image_url": {"url": "data:"}}])
    repo.append_message("s1", "user", "switched", display_kind="model_switch")
    d = repo.append_message("s1", "user", "y" * 81)
    e = repo.append_message("s1", "user", skill)
    f = repo.append_message("s1", "user", "z" * 80)
    recent = repo.list_recent_user_messages("s1")
    assert [r["id"] for r in recent] == [f, e, d, c, b, a]
    previews = {r["id"]: r["preview"] for r in recent}
    assert previews[a] == "hello world"
    assert previews[b] == "look here"
    assert previews[c] == "[multimodal content]"
    assert previews[d] == "y" * 77 + "..."
    assert previews[e] == "/deploy — ship it"
    assert previews[f] == "z" * 80
    assert all(isinstance(r["timestamp"], float) for r in recent)
    assert [r["id"] for r in repo.list_recent_user_messages("s1", limit=2)] == [f, e]
    repo.rewind_to_message("s1", e)
    assert [r["id"] for r in repo.list_recent_user_messages("s1")] == [d, c, b, a]
    assert len(repo.list_recent_user_messages("s1", include_inactive=True)) == 6


def test_has_archived_messages(store, repo):
    make_session(store)
    mid = repo.append_message("s1", "user", "x")
    assert not repo.has_archived_messages("s1")
    repo.rewind_to_message("s1", mid)
    assert repo.has_archived_messages("s1")
    assert not repo.has_archived_messages("unknown")


def test_has_platform_message_id(store, repo):
    make_session(store)
    make_session(store, "s2")
    repo.append_message("s1", "user", "x", platform_message_id="123")
    assert repo.has_platform_message_id("s1", "123")
    assert not repo.has_platform_message_id("s1", "12")
    assert not repo.has_platform_message_id("s2", "123")


def test_message_count_global_and_per_session(store, repo):
    make_session(store)
    make_session(store, "s2")
    ids = [repo.append_message("s1", "user", str(i)) for i in range(3)]
    repo.append_message("s2", "user", "x")
    repo.rewind_to_message("s1", ids[1])
    assert repo.message_count() == 4
    assert repo.message_count("s1") == 3
    assert repo.message_count("nobody") == 0


# --------------------------------------------------------------------------- conversation format


def test_conversation_keys_per_role(store, repo):
    make_session(store)
    repo.append_message("s1", "system", "sys")
    repo.append_message(
        "s1",
        "user",
        "question",
        platform_message_id="pm",
        observed=True,
        api_content="  raw <memory-context>kept</memory-context>",
        display_kind="k",
        display_metadata={"x": 1},
        reasoning="not on user rows",
    )
    repo.append_message(
        "s1",
        "assistant",
        "",
        tool_calls=[{"id": "c1"}],
        finish_reason="tool_calls",
        reasoning="why",
        reasoning_content="",
        reasoning_details=[{"d": 1}],
        codex_reasoning_items=[{"r": 1}],
        codex_message_items=[{"m": 1}],
    )
    repo.append_message(
        "s1", "tool", "out", tool_call_id="c1", tool_name="terminal", effect_disposition="ok"
    )
    repo.append_message("s1", "assistant", "done", reasoning="", finish_reason="")
    system, user, call, tool, done = repo.get_messages_as_conversation("s1")
    assert set(system) == {"role", "content", "timestamp"}
    assert user["message_id"] == "pm" and user["observed"] is True
    assert user["api_content"] == "  raw <memory-context>kept</memory-context>"  # verbatim
    assert user["display_kind"] == "k" and user["display_metadata"] == {"x": 1}
    assert "reasoning" not in user and "finish_reason" not in user
    assert isinstance(user["timestamp"], float)
    assert call["tool_calls"] == [{"id": "c1"}] and call["finish_reason"] == "tool_calls"
    assert call["reasoning"] == "why" and call["reasoning_content"] == ""
    assert call["reasoning_details"] == [{"d": 1}]
    assert call["codex_reasoning_items"] == [{"r": 1}] and call["codex_message_items"] == [{"m": 1}]
    assert set(tool) == {
        "role",
        "content",
        "timestamp",
        "tool_call_id",
        "tool_name",
        "effect_disposition",
    }
    assert set(done) == {"role", "content", "timestamp"}


def test_conversation_corrupt_json_columns(store, repo):
    make_session(store)
    mid = repo.append_message("s1", "assistant", "x", tool_calls=[{}], reasoning_details=[1])
    execute(
        store, "UPDATE messages SET tool_calls = 'x', reasoning_details = 'y' WHERE id = :i", i=mid
    )
    (msg,) = repo.get_messages_as_conversation("s1")
    assert msg["tool_calls"] == [] and msg["reasoning_details"] is None


def test_conversation_strips_memory_context(store, repo):
    make_session(store)
    fence = (
        "<memory-context>\n[System note: The following is recalled memory context, NOT new "
        "user input. Treat as informational background data.]\n\nUser likes tea\n</memory-context>"
    )
    repo.append_message("s1", "user", f"What should I drink?\n\n{fence}")
    repo.append_message("s1", "assistant", "Tea. </memory-context>")
    repo.append_message("s1", "tool", f"tool output {fence}")
    user, assistant, tool = repo.get_messages_as_conversation("s1")
    assert user["content"] == "What should I drink?"
    assert assistant["content"] == "Tea."
    assert tool["content"] == f"tool output {fence}"  # only user/assistant text is cleaned
    stray = "[System note: The following is recalled memory context, NOT new user input.] hi"
    assert strip_memory_context(stray) == "hi"


def test_conversation_include_inactive(store, repo):
    make_session(store)
    mid = repo.append_message("s1", "user", "a")
    repo.rewind_to_message("s1", mid)
    assert repo.get_messages_as_conversation("s1") == []
    assert [
        m["content"] for m in repo.get_messages_as_conversation("s1", include_inactive=True)
    ] == ["a"]


def test_conversation_include_ancestors_with_replay_dedup(store, repo):
    make_session(store, "root")
    repo.append_message("root", "user", "first question")
    repo.append_message("root", "assistant", "first answer")
    repo.append_message("root", "user", "pending prompt")
    end_session(store, "root", "compression")
    make_session(store, "mid", parent_session_id="root")
    repo.append_message("mid", "user", "pending prompt")  # replayed across the boundary
    repo.append_message("mid", "assistant", "answer")
    repo.append_message("mid", "user", "again")
    end_session(store, "mid", "compression")
    make_session(store, "tip", parent_session_id="mid")
    repo.append_message("tip", "user", "again")
    repo.append_message("tip", "user", "again")
    repo.append_message("tip", "assistant", "", tool_calls=[{"id": 1}])
    repo.append_message("tip", "user", "again")  # after a tool call: a new prompt, kept
    got = [
        (m["role"], m["content"])
        for m in repo.get_messages_as_conversation("tip", include_ancestors=True)
    ]
    assert got == [
        ("user", "first question"),
        ("assistant", "first answer"),
        ("user", "pending prompt"),
        ("assistant", "answer"),
        ("user", "again"),
        ("assistant", ""),
        ("user", "again"),
    ]
    # Without ancestors: the tip only, and no de-duplication.
    assert len(repo.get_messages_as_conversation("tip")) == 4


def test_conversation_lineage_is_cycle_safe(store, repo):
    make_session(store, "a")
    make_session(store, "b", parent_session_id="a")
    execute(store, "UPDATE sessions SET parent_session_id = 'b' WHERE id = 'a'")
    repo.append_message("a", "user", "in a")
    repo.append_message("b", "user", "in b")
    got = [m["content"] for m in repo.get_messages_as_conversation("b", include_ancestors=True)]
    assert got == ["in a", "in b"]


def test_conversation_lineage_walk_is_bounded(store, repo):
    make_session(store, "n0")
    for i in range(1, 110):
        make_session(store, f"n{i}", parent_session_id=f"n{i - 1}")
    repo.append_message("n0", "user", "too far up")
    repo.append_message("n9", "user", "within reach")
    got = [m["content"] for m in repo.get_messages_as_conversation("n109", include_ancestors=True)]
    assert got == ["within reach"]


def test_conversation_drops_review_harness_prompts(store, repo):
    make_session(store)
    repo.append_message("s1", "user", "real question")
    repo.append_message("s1", "assistant", "real answer")
    repo.append_message(
        "s1", "user", "Review the conversation above and update the skill library. Be active."
    )
    repo.append_message("s1", "assistant", "Updated the skill.")
    repo.append_message(
        "s1", "system", "Review the conversation above and consider saving to memory."
    )
    repo.append_message("s1", "assistant", "Saved.")
    repo.append_message("s1", "user", "next")
    repo.append_message(
        "s1", "assistant", "Review the conversation above and update the skill library"
    )
    got = [(m["role"], m["content"]) for m in repo.get_messages_as_conversation("s1")]
    assert got == [
        ("user", "real question"),
        ("assistant", "real answer"),
        ("user", "next"),
        # an assistant message with that text is not a harness prompt
        ("assistant", "Review the conversation above and update the skill library"),
    ]


def test_conversation_repair_alternation_merges_consecutive_user_messages(store, repo):
    make_session(store)
    repo.append_message("s1", "user", "one")
    repo.append_message("s1", "user", "two")
    repo.append_message("s1", "assistant", "reply")
    repo.append_message("s1", "user", "three")
    plain = repo.get_messages_as_conversation("s1")
    repaired = repo.get_messages_as_conversation("s1", repair_alternation=True)
    assert [m["role"] for m in plain] == ["user", "user", "assistant", "user"]
    assert [(m["role"], m["content"]) for m in repaired] == [
        ("user", "one\n\ntwo"),
        ("assistant", "reply"),
        ("user", "three"),
    ]
    assert repo.message_count("s1") == 4  # the stored transcript is unchanged
    listing = [{"role": "user", "content": [{"type": "text"}]}, {"role": "user", "content": "x"}]
    assert repair_message_alternation(listing) == listing  # structured content is left alone


# --------------------------------------------------------------------------- v23 fixture


@pytest.fixture
def v23(legacy_db: Callable[..., Path], db: Any) -> Iterator[tuple[Store, MessageRepository, Path]]:
    path = legacy_db(23)
    migrate.upgrade(db.url_for(path), fts_min_pause=0)
    s = Store(db.url_for(path))
    yield s, MessageRepository(s), path
    s.close()


def test_v23_fixture_conversation_example(v23):
    _, repo, _ = v23
    conv = repo.get_messages_as_conversation(FIX_S1)
    first, second = conv[0], conv[1]
    assert set(first) == {"role", "content", "timestamp"}
    assert first["role"] == "user"
    assert first["content"].startswith("请帮我设计一个数据库迁移方案：")
    assert isinstance(first["timestamp"], float)
    assert second["role"] == "assistant"
    assert set(second) == {
        "role",
        "content",
        "timestamp",
        "tool_calls",
        "finish_reason",
        "reasoning",
        "reasoning_details",
    }
    assert isinstance(second["tool_calls"], list) and len(second["tool_calls"]) == 1
    assert second["finish_reason"] == "tool_calls"
    assert isinstance(second["reasoning_details"], list)
    assert "reasoning_content" not in second
    assert len(conv) == 14


def test_v23_fixture_readers(v23, legacy_json):
    _, repo, _ = v23
    expected = legacy_json(23)["counts"]["per_session"]
    for sid, info in expected.items():
        rows = repo.get_messages(sid)
        assert len(rows) == info["messages"] == repo.message_count(sid)
        assert [r["id"] for r in rows] == sorted(r["id"] for r in rows)
    lineage = repo.get_messages_as_conversation(FIX_CHILD, include_ancestors=True)
    assert len(lineage) <= expected[FIX_PARENT]["messages"] + expected[FIX_CHILD]["messages"]
    assert len(lineage) > expected[FIX_CHILD]["messages"]


def test_v23_fixture_append_is_refused_on_the_compressed_parent(v23):
    _, repo, _ = v23
    with pytest.raises(CompressionSessionClosedError):
        repo.append_message(FIX_PARENT, "user", "late")
    repo.append_message(FIX_CHILD, "user", "fine")


@pytest.mark.sqlite_only  # compares with the SQLite fixture file
def test_replaying_the_fixture_calls_reproduces_its_messages(
    store, repo, legacy_json, legacy_db, db
):
    """Every append_message call that wrote state_v23.db, replayed through the repository,
    stores byte-identical role/content and the same counters."""
    fixture = legacy_json(23)
    for call in fixture["api_calls"]:
        kwargs = dict(call["kwargs"])
        if call["method"] == "create_session":
            make_session(
                store,
                kwargs["session_id"],
                kwargs["source"],
                parent_session_id=kwargs.get("parent_session_id"),
            )
        elif call["method"] == "end_session":
            end_session(store, kwargs["session_id"], kwargs["end_reason"])
        elif call["method"] == "append_message":
            assert repo.append_message(**kwargs) == call["result"]

    original = sqlite3.connect(f"file:{legacy_db(23)}?mode=ro", uri=True)
    mine = sqlite3.connect(str(store.url.database))
    try:
        for sid, info in fixture["counts"]["per_session"].items():
            assert db.role_content_sha256(mine, sid) == info["role_content_sha256"]
            assert counters(store, sid) == (
                info["message_count_column"],
                info["tool_call_count_column"],
            )
        columns = [
            "id", "session_id", "role", "content", "tool_call_id", "tool_calls", "tool_name",
            "token_count", "finish_reason", "reasoning", "reasoning_content", "reasoning_details",
            "codex_reasoning_items", "codex_message_items", "platform_message_id", "observed",
            "active", "compacted", "api_content", "display_kind", "display_metadata",
        ]  # fmt: skip
        query = f"SELECT {', '.join(columns)} FROM messages ORDER BY id"
        assert mine.execute(query).fetchall() == original.execute(query).fetchall()
    finally:
        original.close()
        mine.close()


# --------------------------------------------------------------------------- publication


def test_publish_compression_child(store, repo):
    make_session(
        store,
        "parent",
        user_id="u",
        session_key="k",
        chat_id="c",
        chat_type="dm",
        thread_id="t",
        display_name="D",
        origin_json='{"o": 1}',
        cwd="/work",
        git_branch="main",
        git_repo_root="/work",
        profile_name="prof",
    )
    repo.append_message("parent", "user", "old")
    add_lock(store, "parent", "me")
    repo.publish_compression_child(
        parent_session_id="parent",
        child_session_id="child",
        source="cli",
        messages=[
            {"role": "user", "content": "[CONTEXT COMPACTION] summary"},
            {"role": "assistant", "content": "", "tool_calls": [{}, {}], "reasoning": "r"},
            {"role": "user", "content": "pending", "reasoning": "dropped"},
        ],
        model="m1",
        model_config={"temperature": 0.5},
        system_prompt="sys",
        compression_lock_holder="me",
    )
    (child,) = sql(
        store,
        "SELECT parent_session_id, source, model, model_config, system_prompt, cwd, git_branch,"
        " git_repo_root, profile_name, user_id, session_key, chat_id, chat_type, thread_id,"
        " display_name, origin_json, message_count, tool_call_count, ended_at"
        " FROM sessions WHERE id = 'child'",
    )
    assert tuple(child) == (
        "parent", "cli", "m1", '{"temperature": 0.5}', "sys", "/work", "main", "/work", "prof",
        "u", "k", "c", "dm", "t", "D", '{"o": 1}', 3, 2, None,
    )  # fmt: skip
    ((reason, ended),) = sql(store, "SELECT end_reason, ended_at FROM sessions WHERE id = 'parent'")
    assert reason == "compression" and ended is not None
    msgs = repo.get_messages("child")
    assert [m["role"] for m in msgs] == ["user", "assistant", "user"]
    assert msgs[1]["reasoning"] == "r" and msgs[2]["reasoning"] is None
    assert all(m["active"] == 1 for m in msgs)
    with pytest.raises(CompressionSessionClosedError):
        repo.append_message("parent", "user", "too late", compression_lock_holder="me")


def test_publish_explicit_cwd_and_profile_win(store, repo):
    make_session(store, "parent", cwd="/old", profile_name="p-old")
    repo.publish_compression_child(
        parent_session_id="parent",
        child_session_id="child",
        source="cli",
        messages=[{"role": "user", "content": "x"}],
        cwd="/new",
        profile_name="p-new",
        require_compression_lease=False,
    )
    assert sql(store, "SELECT cwd, profile_name FROM sessions WHERE id = 'child'") == [
        ("/new", "p-new")
    ]


@pytest.mark.parametrize(
    ("lock", "holder"),
    [(None, "me"), (("other", 300.0), "me"), (("me", -5.0), "me"), (("me", 300.0), None)],
    ids=["no-lease", "other-holder", "expired", "no-holder-given"],
)
def test_publish_requires_a_live_lease(store, repo, lock, holder):
    make_session(store, "parent")
    if lock is not None:
        add_lock(store, "parent", lock[0], lock[1])
    with pytest.raises(CompressionSessionBusyError):
        repo.publish_compression_child(
            parent_session_id="parent",
            child_session_id="child",
            source="cli",
            messages=[{"role": "user", "content": "x"}],
            compression_lock_holder=holder,
        )
    assert sql(store, "SELECT count(*) FROM sessions WHERE id = 'child'") == [(0,)]
    assert sql(store, "SELECT ended_at FROM sessions WHERE id = 'parent'") == [(None,)]


def test_publish_without_lease_requirement(store, repo):
    make_session(store, "parent")
    repo.publish_compression_child(
        parent_session_id="parent",
        child_session_id="child",
        source="cli",
        messages=[{"role": "user", "content": "x"}],
        require_compression_lease=False,
    )
    assert counters(store, "child") == (1, 0)


def test_publish_errors(store, repo):
    def publish(parent: str, messages: list[dict[str, Any]]) -> None:
        repo.publish_compression_child(
            parent_session_id=parent,
            child_session_id="child",
            source="cli",
            messages=messages,
            require_compression_lease=False,
        )

    one = [{"role": "user", "content": "x"}]
    with pytest.raises(RuntimeError, match="^Compression parent not found: missing$"):
        publish("missing", one)
    make_session(store, "ended")
    end_session(store, "ended", "user_exit")
    with pytest.raises(RuntimeError, match="^Compression parent already ended: ended$"):
        publish("ended", one)
    make_session(store, "open")
    with pytest.raises(RuntimeError, match="^Compression child handoff must not be empty$"):
        publish("open", [])
    assert sql(store, "SELECT count(*) FROM sessions WHERE id = 'child'") == [(0,)]
    assert sql(store, "SELECT ended_at FROM sessions WHERE id = 'open'") == [(None,)]
    assert repo.message_count() == 0


def test_publish_is_one_transaction(store, repo):
    make_session(store, "parent")
    with pytest.raises(InvalidInput):
        repo.publish_compression_child(
            parent_session_id="parent",
            child_session_id="child",
            source="cli",
            messages=[{"role": "user", "content": "x"}, {"role": "user", "content": object()}],
            require_compression_lease=False,
        )
    make_session(store, "child")  # an existing child id makes the INSERT fail inside the unit
    with pytest.raises(Exception, match="UNIQUE|duplicate key"):
        repo.publish_compression_child(
            parent_session_id="parent",
            child_session_id="child",
            source="cli",
            messages=[{"role": "user", "content": "x"}],
            require_compression_lease=False,
        )
    assert repo.message_count() == 0
    assert sql(store, "SELECT ended_at FROM sessions WHERE id = 'parent'") == [(None,)]


# --------------------------------------------------------------------------- concurrency


def _append_worker(url: str, worker: int, count: int) -> list[int]:
    with Store(url) as s:
        repo = MessageRepository(s)
        return [
            repo.append_message("shared", "user", f"w{worker}-{i}", tool_calls=[{"i": i}])
            for i in range(count)
        ]


def test_four_processes_append_without_losing_anything(backend_url, store, repo):
    make_session(store, "shared")
    workers, per_worker = 4, 100
    context = multiprocessing.get_context("spawn")
    with context.Pool(workers) as pool:
        jobs = [(backend_url, w, per_worker) for w in range(workers)]
        results = pool.starmap(_append_worker, jobs)
    every_id = [i for ids in results for i in ids]
    assert len(set(every_id)) == workers * per_worker
    for ids in results:
        assert ids == sorted(ids)  # each writer sees its own appends in order
    rows = repo.get_messages("shared")
    assert len(rows) == workers * per_worker
    assert {r["content"] for r in rows} == {
        f"w{w}-{i}" for w in range(workers) for i in range(per_worker)
    }
    assert counters(store, "shared") == (workers * per_worker, workers * per_worker)


def test_bulk_insert_without_returning_support(store, repo, monkeypatch):
    # SQLite before 3.35 lacks RETURNING; the bulk path then inserts row by row.
    monkeypatch.setattr(store.engine.dialect, "insert_returning", False)
    make_session(store)
    ids = repo.append_messages("s1", [{"role": "user", "content": str(i)} for i in range(5)])
    assert [m["id"] for m in repo.get_messages("s1")] == ids
    assert counters(store) == (5, 0)
