"""The facade's single-statement writes and reads, sent at the driver on SQLite.

Writes (`end_session`, `reopen_session`, `update_session_model`, `set_session_archived`,
`set_session_pinned`) are one UPDATE each, sent at the driver of the store's kept writer
(`Store.write_one`, or a `DriverWrite` with a RETURNING for the model switch): SQLite
receives BEGIN IMMEDIATE, the UPDATE and COMMIT, and SQLAlchemy builds no transaction.
Reads (handoffs, gateway sessions, the whole message count, the logical size, Telegram
topic reads) are one prepared statement each through `Store.read_one`: no BEGIN and no
ROLLBACK around it. Each answers as the Connection path does (a store whose engine has a
statement listener takes that path): the same returns, rows, errors and change feed, on
both SQLite drivers and both journal modes.

What reaches SQLite for a write is read from SQLite itself (the driver's trace callback);
whether SQLAlchemy built a transaction, from `Connection.begin`.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from helpers.statements import Traced, built, counted_begins, sent
from sqlalchemy import Connection, event, text

from hermes_store.config import JOURNAL_ENV
from hermes_store.runtime.engine import make_engine
from hermes_store.store import Store

pytestmark = pytest.mark.usefixtures("sqlite_driver")


@pytest.fixture(autouse=True)
def _journal_kept(journal: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The store keeps the file in the journal mode of this run (a fixed SQLite would
    switch a DELETE file to WAL)."""
    monkeypatch.setenv(JOURNAL_ENV, journal)


@pytest.fixture
def store(journal_db: str) -> Iterator[Store]:
    with Store(journal_db) as opened:
        yield opened


@pytest.fixture
def begins(monkeypatch: pytest.MonkeyPatch, store: Store) -> list[Connection]:
    return counted_begins(monkeypatch, store)


def _fill(store: Store) -> None:
    sessions = store.sessions
    sessions.create_session("s1", "cli", model="m1")
    sessions.create_session("s2", "telegram", model="m1", session_key="k2", user_id="u2")
    lock = {"browser_model_lock": {"model": "x"}, "other": "kept"}
    sessions.create_session("locked", "cli", model="m1", model_config=lock)
    sessions.create_session("escaped", "cli", model="m1")
    with store.engine.begin() as conn:  # a key spelt with a JSON escape
        conn.execute(
            text("UPDATE sessions SET model_config = :c WHERE id = 'escaped'"),
            {"c": '{"\\u0062rowser_model_lock": 1, "a": 2}'},
        )
    store.messages.append_message("s1", "user", "hello")
    store.gateway_routing.request_handoff("s2", "telegram")


def _row(store: Store, sid: str) -> dict[str, Any] | None:
    return store.sessions.get_session(sid)


def _feed(store: Store) -> list[tuple[str, str]]:
    with store.read() as conn:
        rows = conn.execute(
            text("SELECT kind, session_id FROM hermes_store_changes ORDER BY position")
        ).all()
    return [(str(kind), str(sid)) for kind, sid in rows]


#: Each write, as the facade calls it, with what it returns.
WRITES: dict[str, Callable[[Store, str], Any]] = {
    "end_session": lambda s, sid: s.sessions.end_session(sid, "user_exit"),
    "end_session again": lambda s, sid: s.sessions.end_session(sid, "later"),
    "reopen_session": lambda s, sid: s.sessions.reopen_session(sid),
    "update_session_model": lambda s, sid: s.sessions.update_session_model(sid, "m2"),
    "set_session_archived": lambda s, sid: s.sessions.set_session_archived(sid, True),
    "set_session_pinned": lambda s, sid: s.sessions.set_session_pinned(sid, True),
    "unarchive": lambda s, sid: s.sessions.set_session_archived(sid, False),
}


@pytest.mark.parametrize("name", ["end_session", "reopen_session", "set_session_archived"])
def test_a_write_is_begin_update_commit_at_the_driver(
    store: Store, begins: list[Connection], name: str
) -> None:
    traced = Traced(store)  # before the first write opens the writer connection
    _fill(store)
    store.sessions.end_session("s2", "warm")  # opens the writer connection
    traced.statements.clear()
    begins.clear()
    WRITES[name](store, "s1")
    assert len(traced.statements) == 3, traced.statements
    assert traced.statements[0] == "BEGIN IMMEDIATE"
    assert traced.statements[1].startswith("UPDATE sessions SET")
    assert traced.statements[2] == "COMMIT"
    assert begins == []  # no SQLAlchemy transaction


def test_a_model_switch_is_one_update_at_the_driver_unless_the_config_may_hold_the_lock(
    store: Store, begins: list[Connection]
) -> None:
    traced = Traced(store)  # before the first write opens the writer connection
    _fill(store)
    store.sessions.end_session("s2", "warm")
    traced.statements.clear()
    begins.clear()
    store.sessions.update_session_model("s1", "m2")
    assert len(traced.statements) == 3, traced.statements
    assert traced.statements[1].startswith("UPDATE sessions SET model=")
    assert "RETURNING" in traced.statements[1]
    assert begins == []
    # a config holding the lock: the UPDATE matches nothing and the Connection path runs
    # (reading the config, removing the lock in Python)
    for sid in ("locked", "escaped"):
        store.sessions.update_session_model(sid, "m2")
    assert len(begins) == 2
    locked = _row(store, "locked")
    assert locked is not None and json.loads(locked["model_config"]) == {"other": "kept"}
    escaped = _row(store, "escaped")
    assert escaped is not None and json.loads(escaped["model_config"]) == {"a": 2}


def _apply_every_write(store: Store) -> list[Any]:
    answers: list[Any] = []
    for sid in ("s1", "locked", "escaped", "missing"):
        for write in WRITES.values():
            try:
                answers.append(write(store, sid))
            except Exception as exc:  # noqa: BLE001 (the error is what is compared)
                answers.append(type(exc).__name__)
    return answers


def _listen(store: Store) -> None:
    """A statement listener: the store's writes then go through a Connection."""
    event.listen(store.engine, "before_cursor_execute", lambda *_args: None)


def _state(store: Store) -> list[dict[str, Any] | None]:
    """Each session's row, its times (which differ between two stores) as whether set."""
    rows: list[dict[str, Any] | None] = []
    for sid in ("s1", "s2", "locked", "escaped", "missing"):
        row = _row(store, sid)
        if row is not None:
            row = {**row, "started_at": None, "ended_at": row["ended_at"] is not None}
        rows.append(row)
    return rows


def test_the_writes_answer_and_change_as_through_a_connection(journal_db: str) -> None:
    """The same writes on two copies of one file, one store taking the Connection path
    (a statement listener): the same answers, rows and change feed."""
    source = journal_db.removeprefix("sqlite:///")
    other = source.replace("state.db", "other.db")
    with Store(journal_db) as store:
        _fill(store)
        store.checkpoint("TRUNCATE")
        store.dispose()
        shutil.copy2(source, other)
    with Store(journal_db) as direct, Store(f"sqlite:///{other}") as through:
        _listen(through)
        fed = len(_feed(direct))
        assert fed == len(_feed(through))
        assert _apply_every_write(direct) == _apply_every_write(through)
        assert _state(direct) == _state(through)
        assert _feed(direct)[fed:] == _feed(through)[fed:]
        # an UPDATE that changed a row fired the change feed's trigger
        assert ("session.updated", "s1") in _feed(direct)[fed:]


def test_write_answers(store: Store) -> None:
    _fill(store)
    sessions = store.sessions
    assert sessions.set_session_archived("s1", True) is True
    assert sessions.set_session_archived("missing", True) is False
    assert sessions.set_session_pinned("missing", True) is False
    assert sessions.end_session("missing", "x") is None  # type: ignore[func-returns-value]
    assert sessions.reopen_session("missing") is None  # type: ignore[func-returns-value]
    sessions.update_session_model("missing", "m2")
    assert _row(store, "missing") is None
    sessions.end_session("s1", "first")
    sessions.end_session("s1", "second")
    ended = _row(store, "s1")
    assert ended is not None and ended["end_reason"] == "first"
    sessions.reopen_session("s1")
    reopened = _row(store, "s1")
    assert reopened is not None
    assert (reopened["ended_at"], reopened["end_reason"]) == (None, None)


#: Each read moved onto `read_one`.
READS: dict[str, Callable[[Store], Any]] = {
    "get_handoff_state": lambda s: s.gateway_routing.get_handoff_state("s2"),
    "get_handoff_state (missing)": lambda s: s.gateway_routing.get_handoff_state("missing"),
    "list_pending_handoffs": lambda s: s.gateway_routing.list_pending_handoffs(),
    "list_gateway_sessions": lambda s: s.gateway_routing.list_gateway_sessions(),
    "list_gateway_sessions (all)": lambda s: s.gateway_routing.list_gateway_sessions(
        platform="TELEGRAM", active_only=False
    ),
    "message_count": lambda s: s.messages.message_count(),
    "logical_size_bytes": lambda s: s.housekeeping.logical_size_bytes(),
    "topic mode": lambda s: s.telegram_topics.is_telegram_topic_mode_enabled("c1", "u1"),
    "topic mode (chat)": lambda s: s.telegram_topics.is_telegram_topic_mode_enabled("c1"),
    "binding": lambda s: s.telegram_topics.get_telegram_topic_binding("c1", "7"),
    "binding by session": lambda s: s.telegram_topics.get_telegram_topic_binding_by_session("s2"),
    "bindings of chat": lambda s: s.telegram_topics.list_telegram_topic_bindings_for_chat("c1"),
    "linked": lambda s: s.telegram_topics.is_telegram_session_linked_to_topic("s2"),
}


def _reads(store: Store) -> dict[str, Any]:
    return {name: read(store) for name, read in READS.items()}


def test_each_read_is_one_statement_without_a_transaction(store: Store) -> None:
    _fill(store)
    _reads(store)  # the topic tables' absence read; connections kept
    for name, read in READS.items():
        with sent(store, transactions=True) as statements:
            read(store)
        assert len(statements) == 1, (name, statements)
        assert statements[0].split()[0] == "SELECT", (name, statements)
    topics = store.telegram_topics
    topics.enable_telegram_topic_mode(chat_id="c1", user_id="u1")
    topics.bind_telegram_topic(
        chat_id="c1", thread_id="7", user_id="u1", session_key="k2", session_id="s2"
    )
    _reads(store)  # the topic tables seen
    for name, read in READS.items():
        with sent(store, transactions=True) as statements:
            read(store)
        assert len(statements) == 1, (name, statements)
        assert "sqlite_master" not in statements[0], (name, statements)


def test_the_reads_answer_as_in_a_transaction(store: Store, journal_db: str) -> None:
    """The same reads through a second store over a caller's engine (which runs each
    statement inside a transaction of `read`, not alone): the same answers, and the
    answers the rows written give, with and without the Telegram tables."""
    _fill(store)
    engine = make_engine(journal_db)
    try:
        with Store(engine=engine) as other:
            assert not other._reads_alone
            first = _reads(store)
            assert first == _reads(other)
            assert first["topic mode"] is False and first["binding"] is None
            assert first["bindings of chat"] == [] and first["linked"] is False
            assert first["message_count"] == 1
            assert first["get_handoff_state"] == {
                "state": "pending",
                "platform": "telegram",
                "error": None,
            }
            assert first["get_handoff_state (missing)"] is None
            assert [r["id"] for r in first["list_pending_handoffs"]] == ["s2"]
            assert [r["id"] for r in first["list_gateway_sessions"]] == ["s2"]
            topics = store.telegram_topics
            topics.enable_telegram_topic_mode(chat_id="c1", user_id="u1")
            topics.bind_telegram_topic(
                chat_id="c1", thread_id="7", user_id="u1", session_key="k2", session_id="s2"
            )
            second = _reads(store)
            assert second == _reads(other)
            assert second["topic mode"] is True and second["linked"] is True
            assert second["binding"] is not None and second["binding"]["session_id"] == "s2"
            assert second["logical_size_bytes"] >= first["logical_size_bytes"]
    finally:
        engine.dispose()


def test_a_topic_table_dropped_after_it_was_seen_reads_as_missing(store: Store) -> None:
    _fill(store)
    topics = store.telegram_topics
    topics.enable_telegram_topic_mode(chat_id="c1", user_id="u1")
    topics.bind_telegram_topic(
        chat_id="c1", thread_id="7", user_id="u1", session_key="k2", session_id="s2"
    )
    assert topics.get_telegram_topic_binding("c1", "7") is not None
    assert topics.is_telegram_topic_mode_enabled("c1") is True
    with store.engine.begin() as conn:
        conn.execute(text("DROP TABLE telegram_dm_topic_bindings"))
        conn.execute(text("DROP TABLE telegram_dm_topic_mode"))
    assert topics.get_telegram_topic_binding("c1", "7") is None
    assert topics.list_telegram_topic_bindings_for_chat("c1") == []
    assert topics.is_telegram_topic_mode_enabled("c1") is False
    # and read first again from then on
    with sent(store) as statements:
        assert topics.get_telegram_topic_binding_by_session("s2") is None
    assert len(statements) == 1 and "sqlite_master" in statements[0]


def _conversation(store: Store) -> list[dict[str, Any]]:
    """Session w: 12 rows of alternating roles, two of them without content, one tool
    row; another session's rows between them (ids interleave)."""
    store.sessions.create_session("w", "cli")
    store.sessions.create_session("other", "cli")
    roles = ["user", "assistant", "tool"]
    for n in range(12):
        content = "" if n in (1, 10) else f"m{n}"
        store.messages.append_message("w", roles[n % 3], content)
        store.messages.append_message("other", "user", f"o{n}")
    return [dict(row) for row in store.messages.get_messages("w")]


def _expected_view(
    rows: list[dict[str, Any]], anchor: int, window: int, bookend: int, keep: Any
) -> dict[str, Any]:
    """`get_anchored_view` worked out from the whole transcript."""
    at = next(i for i, r in enumerate(rows) if r["id"] == anchor)
    side = max(0, window)
    before, after = rows[max(0, at - side) : at], rows[at + 1 : at + 1 + side]
    low = (before[0] if before else rows[at])["id"]
    high = (after[-1] if after else rows[at])["id"]
    kept = [r for r in rows if r["content"] and (keep is None or r["role"] in keep)]
    start = [r for r in kept if r["id"] < low][: max(0, bookend)]
    later = [r for r in kept if r["id"] > high]
    end = later[len(later) - max(0, bookend) :] if bookend > 0 else []
    if keep is not None:
        before = [r for r in before if r["role"] in keep]
        after = [r for r in after if r["role"] in keep]
    return {
        "window": [*before, rows[at], *after],
        "messages_before": len(before),
        "messages_after": len(after),
        "bookend_start": start,
        "bookend_end": end,
    }


@pytest.mark.parametrize(
    ("window", "bookend", "keep"),
    [
        (2, 2, ("user", "assistant")),
        (0, 1, None),
        (-3, 3, ()),
        (1, 0, ("tool",)),
        (100, 100, ["user", "assistant", "tool"]),
    ],
)
def test_windows_and_anchored_views_answer_as_before(
    store: Store, window: int, bookend: int, keep: Any
) -> None:
    rows = _conversation(store)
    messages = store.messages
    for anchor in (rows[0]["id"], rows[5]["id"], rows[-1]["id"]):
        view = messages.get_anchored_view("w", anchor, window, bookend, keep)
        assert view == _expected_view(rows, anchor, window, bookend, keep)
        around = messages.get_messages_around("w", anchor, window)
        expected = _expected_view(rows, anchor, window, 0, None)
        assert around == {k: expected[k] for k in ("window", "messages_before", "messages_after")}
    other = store.messages.get_messages("other")[0]["id"]
    assert messages.get_messages_around("w", other) == {
        "window": [],
        "messages_before": 0,
        "messages_after": 0,
    }
    assert messages.get_anchored_view("w", 10**9)["window"] == []


def test_windows_and_anchored_views_build_no_statement_per_call(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    rows = _conversation(store)
    messages = store.messages
    anchor = rows[5]["id"]
    # a window's and a bookend's size are written into their statements: the first call
    # of each size builds it, every later one reuses it
    messages.get_messages_around("w", anchor, 3)
    messages.get_anchored_view("w", anchor, 2, 1, ("assistant", "user"))
    with built(monkeypatch) as names:
        messages.get_messages_around("w", anchor, 3)
        messages.get_anchored_view("w", anchor, 2, 1, ("assistant", "user"))
    assert names == []
