"""The facade's message, meta, coordination and housekeeping point reads and small writes,
sent at the driver on SQLite.

Reads (`find_session_by_origin`, `load_gateway_routing_entries`,
`list_recent_user_messages`, `get_ancestor_display_prefix` of a session without a
parent, `count_empty_sessions`) are one prepared statement each through
`Store.read_one`: no BEGIN and no ROLLBACK around it. Writes (`set_meta`,
`save_gateway_routing_entry`, `release_compression_lock`, and `try_acquire` of a lease on
a session that has none) are one statement at the driver of the store's kept writer:
SQLite receives BEGIN IMMEDIATE, the statement and COMMIT, and SQLAlchemy builds no
transaction; a lease already there has `try_acquire` take the Connection path, which
decides whether it is stale. Each answers as the Connection path does (a store over a
caller's engine for the reads, a store whose engine has a statement listener for the
writes), on both SQLite drivers and both journal modes; the answers themselves are
pinned on PostgreSQL too.

What reaches SQLite is read from SQLite itself (the driver's trace callback) or from the
engine's statement events; whether SQLAlchemy built a transaction, from `Connection.begin`.
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from helpers.statements import Traced, counted_begins, sent
from sqlalchemy import Connection, event, text

from hermes_store.config import JOURNAL_ENV
from hermes_store.runtime.engine import make_engine
from hermes_store.store import Store

pytestmark = pytest.mark.usefixtures("sqlite_driver")


@pytest.fixture(autouse=True)
def _journal_kept(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """The store keeps the file in the journal mode of this run (a fixed SQLite would
    switch a DELETE file to WAL)."""
    if "journal" in request.fixturenames:
        monkeypatch.setenv(JOURNAL_ENV, request.getfixturevalue("journal"))


@pytest.fixture
def store(journal_db: str) -> Iterator[Store]:
    with Store(journal_db) as opened:
        yield opened


@pytest.fixture
def begins(monkeypatch: pytest.MonkeyPatch, store: Store) -> list[Connection]:
    return counted_begins(monkeypatch, store)


def _fill(store: Store) -> None:
    sessions, messages = store.sessions, store.messages
    sessions.create_session("root", "telegram", session_key="k0", chat_id="c1", user_id="u1")
    sessions.create_session(
        "child", "telegram", session_key="k1", chat_id="c1", user_id="u1", parent_session_id="root"
    )
    sessions.create_session(
        "peer", "Telegram", session_key="k2", chat_id="c2", user_id="u2", thread_id="t1"
    )
    sessions.create_session("peer2", "telegram", session_key="k3", chat_id="c2", user_id="u3")
    sessions.create_session("gone", "cli")
    sessions.end_session("gone", "user_exit")
    sessions.create_session("kept", "cli")
    sessions.end_session("kept", "user_exit")
    messages.append_message("kept", "user", "a message keeps it")
    for sid in ("root", "child"):
        for n in range(6):
            messages.append_message(
                sid,
                "user" if n % 2 == 0 else "assistant",
                f"{sid} {n}",
                platform_message_id=f"p{n}",
            )
    messages.append_message("child", "user", "shown only", display_kind="note")
    messages.append_message("child", "user", [{"type": "text", "text": "parts"}])
    first = messages.get_messages("child")[-2]["id"]
    messages.append_message("child", "user", "rewound")
    messages.append_message("child", "assistant", "rewound too")
    rewound = messages.get_messages("child")[-2]["id"]
    messages.rewind_to_message("child", rewound)
    assert first < rewound
    store.meta.set_meta("k", "v")
    routing = store.gateway_routing
    routing.save_entry("key1", '{"a": 1}')
    routing.save_entry("key2", '{"b": 2}')
    routing.save_entry("key1", '{"a": 3}', scope="other")


#: Each read moved onto `read_one`, as the facade calls it.
READS: dict[str, Callable[[Store], Any]] = {
    "origin": lambda s: s.gateway_routing.find_session_by_origin(platform="TELEGRAM", chat_id="c1"),
    "origin (user)": lambda s: s.gateway_routing.find_session_by_origin(
        platform="telegram", chat_id="c2", user_id="u3"
    ),
    "origin (shared)": lambda s: s.gateway_routing.find_session_by_origin(
        platform="telegram", chat_id="c2"
    ),
    "origin (unknown sender)": lambda s: s.gateway_routing.find_session_by_origin(
        platform="telegram", chat_id="c2", user_id="u9"
    ),
    "origin (thread)": lambda s: s.gateway_routing.find_session_by_origin(
        platform="telegram", chat_id="c2", thread_id="t1"
    ),
    "origin (no thread)": lambda s: s.gateway_routing.find_session_by_origin(
        platform="telegram", chat_id="c2", thread_id=""
    ),
    "origin (none)": lambda s: s.gateway_routing.find_session_by_origin(
        platform="discord", chat_id="c1"
    ),
    "routing entries": lambda s: s.gateway_routing.load_entries(),
    "routing entries (scope)": lambda s: s.gateway_routing.load_entries(scope="other"),
    "routing entries (empty scope)": lambda s: s.gateway_routing.load_entries(scope="none"),
    "recent users": lambda s: s.messages.list_recent_user_messages("child"),
    "recent users (1)": lambda s: s.messages.list_recent_user_messages("child", 1),
    "recent users (0)": lambda s: s.messages.list_recent_user_messages("child", 0),
    "recent users (no limit)": lambda s: s.messages.list_recent_user_messages("child", -1),
    "recent users (bound limit)": lambda s: s.messages.list_recent_user_messages("child", 500),
    "recent users (inactive)": lambda s: s.messages.list_recent_user_messages(
        "child", include_inactive=True
    ),
    "recent users (missing)": lambda s: s.messages.list_recent_user_messages("missing"),
    "ancestors (none)": lambda s: s.messages.get_ancestor_display_prefix("root"),
    "ancestors (missing)": lambda s: s.messages.get_ancestor_display_prefix("missing"),
    "empty sessions": lambda s: s.maintenance.count_empty_sessions(),
}

#: Reads that are not one statement (a session with a parent reads its lineage in a
#: transaction), compared all the same.
OTHER_READS: dict[str, Callable[[Store], Any]] = {
    "ancestors": lambda s: s.messages.get_ancestor_display_prefix("child"),
    "get_meta": lambda s: s.meta.get_meta("k"),
    "get_meta (missing)": lambda s: s.meta.get_meta("missing"),
    "fts_optimize_available": lambda s: s.housekeeping.fts_optimize_available(),
}


def _reads(store: Store) -> dict[str, Any]:
    return {name: read(store) for name, read in {**READS, **OTHER_READS}.items()}


@pytest.mark.parametrize("name", sorted(READS))
def test_each_read_is_one_statement_without_a_transaction(
    store: Store, begins: list[Connection], name: str
) -> None:
    _fill(store)
    READS[name](store)  # a reader connection kept
    begins.clear()
    with sent(store, transactions=True) as statements:
        READS[name](store)
    assert len(statements) == 1, statements
    assert statements[0].split()[0] == "SELECT", statements
    assert begins == []


def test_the_search_index_state_is_two_reads_without_a_transaction(
    store: Store, begins: list[Connection]
) -> None:
    """`fts_optimize_available`: the catalog and the bookkeeping keys, each read alone
    (the original reads them without a transaction too); a pending backfill is seen."""
    _fill(store)
    housekeeping = store.housekeeping
    assert housekeeping.fts_optimize_available() is False
    begins.clear()
    with sent(store, transactions=True) as statements:
        assert housekeeping.fts_optimize_available() is False
    assert [s.split()[0] for s in statements] == ["SELECT", "SELECT"], statements
    assert "sqlite_master" in statements[0] and "state_meta" in statements[1]
    assert begins == []
    store.meta.set_meta("fts_rebuild_high_water", 10)
    assert housekeeping.fts_optimize_available() is True


def _expected_answers(answers: dict[str, Any]) -> None:
    """What the reads answer on the `_fill` data, types included."""
    assert answers["origin"] == "child"
    assert answers["origin (user)"] == "peer2"
    assert answers["origin (shared)"] is None
    assert answers["origin (unknown sender)"] is None
    assert answers["origin (thread)"] == "peer"
    assert answers["origin (no thread)"] == "peer2"
    assert answers["origin (none)"] is None
    assert answers["routing entries"] == {"key1": '{"a": 1}', "key2": '{"b": 2}'}
    assert answers["routing entries (scope)"] == {"key1": '{"a": 3}'}
    assert answers["routing entries (empty scope)"] == {}
    recent = answers["recent users"]
    assert [r["preview"] for r in recent] == ["parts", "child 4", "child 2", "child 0"]
    assert all(type(r["id"]) is int and type(r["timestamp"]) is float for r in recent)
    assert [list(r) for r in recent] == [["id", "timestamp", "preview"]] * 4
    assert answers["recent users (1)"] == recent[:1]
    assert answers["recent users (0)"] == []
    assert answers["recent users (no limit)"] == recent
    assert answers["recent users (bound limit)"] == recent
    assert [r["preview"] for r in answers["recent users (inactive)"]] == [
        "rewound",
        "parts",
        "child 4",
        "child 2",
        "child 0",
    ]
    assert answers["recent users (missing)"] == []
    assert answers["ancestors (none)"] == []
    assert answers["ancestors (missing)"] == []
    assert [m["content"] for m in answers["ancestors"]] == [f"root {n}" for n in range(6)]
    assert answers["empty sessions"] == 1
    assert answers["get_meta"] == "v"
    assert answers["get_meta (missing)"] is None
    assert answers["fts_optimize_available"] is False


def test_the_reads_answer_as_in_a_transaction(store: Store, journal_db: str) -> None:
    """The same reads through a second store over a caller's engine (which runs each
    statement inside a transaction of `read`, not alone): the same answers."""
    _fill(store)
    engine = make_engine(journal_db)
    try:
        with Store(engine=engine) as other:
            assert not other._reads_alone
            answers = _reads(store)
            assert answers == _reads(other)
            _expected_answers(answers)
    finally:
        engine.dispose()


@pytest.mark.parametrize("backend_url", ["postgresql"], indirect=True)
def test_the_reads_answer_the_same_on_postgresql(backend_url: str) -> None:
    with Store(backend_url) as server:
        _fill(server)
        _expected_answers(_reads(server))


#: Each write sent at the driver, as the facade calls it, with how the statements it
#: sends between BEGIN IMMEDIATE and COMMIT begin.
WRITES: dict[str, tuple[tuple[str, ...], Callable[[Store], Any]]] = {
    "set_meta": (("INSERT INTO state_meta",), lambda s: s.meta.set_meta("k", 2.5)),
    "save_gateway_routing_entry": (
        ("INSERT INTO gateway_routing",),
        lambda s: s.gateway_routing.save_entry("key1", '{"c": 1}'),
    ),
    "release_compression_lock": (
        ("DELETE FROM compression_locks",),
        lambda s: s.compression_locks.release("root", "h1"),
    ),
    "try_acquire_compression_lock": (
        ("INSERT INTO compression_locks",),
        lambda s: s.compression_locks.try_acquire("child", "h2"),
    ),
    "set_latest_user_api_content": (
        ("UPDATE messages SET api_content",),
        lambda s: s.messages.set_latest_user_api_content(
            "child", [{"type": "text", "text": "parts"}], "as sent"
        ),
    ),
    "restore_rewound": (
        ("UPDATE messages SET active",),
        lambda s: s.messages.restore_rewound("child", 0),
    ),
    "clear_messages": (
        ("DELETE FROM messages", "UPDATE sessions SET message_count"),
        lambda s: s.messages.clear_messages("root"),
    ),
}


@pytest.mark.parametrize("name", sorted(WRITES))
def test_a_write_is_begin_statements_commit_at_the_driver(
    store: Store, begins: list[Connection], name: str
) -> None:
    traced = Traced(store)  # before the first write opens the writer connection
    _fill(store)
    assert store.compression_locks.try_acquire("root", "h1") is True
    traced.statements.clear()
    begins.clear()
    starts, write = WRITES[name]
    write(store)
    assert len(traced.statements) == len(starts) + 2, traced.statements
    assert traced.statements[0] == "BEGIN IMMEDIATE"
    for sent_statement, start in zip(traced.statements[1:-1], starts, strict=True):
        assert sent_statement.startswith(start), traced.statements
    assert traced.statements[-1] == "COMMIT"
    assert begins == []


def test_deleting_one_session_binds_its_id_without_an_in_list(store: Store) -> None:
    """A `delete_session` of a session without delegate runs: its existence, the delegate
    marks, its children unlinked, its messages and its row, each statement prepared (an
    expanding IN list would be rendered on every call)."""
    _fill(store)
    with sent(store) as statements:
        assert store.maintenance.delete_session("root") is True
    assert len(statements) == 5, statements
    assert not [s for s in statements if " IN (" in s], statements
    assert store.sessions.get_session("root") is None
    child = store.sessions.get_session("child")
    assert child is not None and child["parent_session_id"] is None
    assert store.messages.message_count("root") == 0


def _stale(store: Store, session_id: str) -> None:
    """The session's lease expired an hour ago."""
    with store.engine.begin() as conn:
        conn.execute(
            text("UPDATE compression_locks SET expires_at = :t WHERE session_id = :s"),
            {"t": time.time() - 3600, "s": session_id},
        )


def _lock_steps(store: Store) -> list[Any]:
    locks = store.compression_locks
    answers: list[Any] = [
        locks.try_acquire("root", "h1"),  # free: granted
        locks.try_acquire("root", "h1"),  # one's own live lease: True, not extended
        locks.try_acquire("root", "h2"),  # another's live lease: refused
        locks.get_holder("root"),
    ]
    locks.release("root", "h2")  # not the holder: nothing
    answers.append(locks.get_holder("root"))
    _stale(store, "root")
    answers.append(locks.get_holder("root"))  # an expired lease has no live holder
    answers.append(locks.try_acquire("root", "h2"))  # reclaimed
    answers.append(locks.get_holder("root"))
    locks.release("root", "h2")
    answers.append(locks.get_holder("root"))
    answers.append(locks.try_acquire("missing", "h3"))  # granted as the original grants it
    answers.append(locks.try_acquire("", "h3"))
    locks.release("", "h3")
    return answers


def _state(store: Store) -> dict[str, Any]:
    with store.read() as conn:
        locks = conn.execute(
            text("SELECT session_id, holder FROM compression_locks ORDER BY session_id")
        ).all()
        meta = conn.execute(text("SELECT key, value FROM state_meta WHERE key = 'k'")).all()
        routing = conn.execute(
            text("SELECT scope, session_key, entry_json FROM gateway_routing ORDER BY 1, 2")
        ).all()
        sessions = conn.execute(
            text(
                "SELECT id, parent_session_id, message_count, tool_call_count FROM sessions "
                "ORDER BY id"
            )
        ).all()
        messages = conn.execute(
            text("SELECT session_id, content, active, api_content FROM messages ORDER BY id")
        ).all()
    return {
        "locks": locks,
        "meta": meta,
        "routing": routing,
        "sessions": sessions,
        "messages": messages,
    }


def test_the_writes_answer_and_change_as_through_a_connection(
    journal_db: str, caplog: pytest.LogCaptureFixture
) -> None:
    """The same writes on two copies of one file, one store taking the Connection path
    (a statement listener): the same answers and rows."""
    source = journal_db.removeprefix("sqlite:///")
    other = source.replace("state.db", "other.db")
    with Store(journal_db) as store:
        _fill(store)
        store.checkpoint("TRUNCATE")
        store.dispose()
        shutil.copy2(source, other)
    with Store(journal_db) as direct, Store(f"sqlite:///{other}") as through:
        event.listen(through.engine, "before_cursor_execute", lambda *_args: None)
        with caplog.at_level("INFO", logger="hermes_store.repositories.coordination"):
            steps = _lock_steps(direct)
        assert steps == _lock_steps(through)
        assert steps == [True, True, False, "h1", "h1", None, True, "h2", None, True, False]
        assert sum("Reclaimed stale compression lock" in r.message for r in caplog.records) == 1
        answers = [(write(direct), write(through)) for _starts, write in WRITES.values()]
        assert [a for a, _b in answers] == [b for _a, b in answers]
        assert [a for a, _b in answers] == [None, None, None, True, 1, 2, None]
        for sid in ("missing", "root", "gone"):
            assert direct.maintenance.delete_session(sid) == through.maintenance.delete_session(sid)
        assert _state(direct) == _state(through)
        state = _state(direct)
        assert state["meta"] == [("k", "2.5")]
        assert [row[0] for row in state["sessions"]] == ["child", "kept", "peer", "peer2"]
        sent_as = [row for row in state["messages"] if row[3] == "as sent"]
        assert len(sent_as) == 1 and "parts" in sent_as[0][1]
