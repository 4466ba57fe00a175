"""Reads that are one prepared statement (`Store.read_one`): on SQLite the statement goes
to the driver of a kept reader connection alone, with no BEGIN, no ROLLBACK and no
SQLAlchemy transaction around it (the driver is in autocommit, so it is a transaction of
its own), and every guarantee of a read in a transaction holds: the same answers, a
commit made elsewhere seen, lock contention retried and typed, a transaction a failed unit
left open rolled back first, a read-only store past a crashed writer's journal, damage
typed. On both SQLite drivers and in both journal modes (PostgreSQL runs it as `read`).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from helpers.databases import journal_mode, set_journal_mode, sqlite_connect
from helpers.processes import start_hanging_writer
from sqlalchemy import event, text

from hermes_store.config import JOURNAL_ENV
from hermes_store.errors import DatabaseCorrupt, DatabaseLocked
from hermes_store.repositories.messages import MessageRepository
from hermes_store.repositories.sessions import SessionRepository
from hermes_store.runtime.engine import Prepared, all_dicts, first_value, make_engine
from hermes_store.runtime.retry import RetryPolicy
from hermes_store.store import Store

pytestmark = pytest.mark.usefixtures("sqlite_driver")


@pytest.fixture(autouse=True)
def _journal_kept(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every store (and writer process) of a test keeps the file in the journal mode the
    test put it in: a fixed SQLite would switch a DELETE file to WAL. A test without the
    `journal` parameter runs in DELETE mode."""
    mode = request.getfixturevalue("journal") if "journal" in request.fixturenames else "delete"
    monkeypatch.setenv(JOURNAL_ENV, mode)


def _path(url: str) -> Path:
    return Path(url.removeprefix("sqlite:///"))


def _fill(store: Store, sid: str = "s1", count: int = 30) -> None:
    SessionRepository(store).create_session(sid, "cli", model="m")
    store.meta.set_meta("k", "v")
    store.titles.set_session_title(sid, f"title {sid}")
    MessageRepository(store).append_messages(
        sid,
        [
            {"role": "user" if n % 2 == 0 else "assistant", "content": f"message {n}"}
            for n in range(count)
        ],
    )


def _hot_reads(store: Store, sid: str = "s1") -> dict[str, Any]:
    """Every read moved onto `read_one`, on session `sid`."""
    messages = MessageRepository(store)
    sessions = SessionRepository(store)
    return {
        "newest": messages.get_newest_messages(sid, 20),
        "newest columns": messages.get_newest_messages(sid, 5, columns=["id", "content"]),
        "messages": messages.get_messages(sid),
        "page": messages.get_messages(sid, limit=5, offset=3),
        "conversation": messages.get_messages_as_conversation(sid),
        "session": sessions.get_session(sid),
        "no session": sessions.get_session("missing"),
        "streak": sessions.get_compression_fallback_streak(sid),
        "cooldown": sessions.get_compression_failure_cooldown(sid),
        "first assistant": sessions.get_first_assistant_text(sid),
        "title": store.titles.get_session_title(sid),
        "by title": store.titles.get_session_by_title(f"title {sid}"),
        "meta": store.meta.get_meta("k"),
        "holder": store.compression_locks.get_holder(sid),
        "archived": messages.has_archived_messages(sid),
        "platform id": messages.has_platform_message_id(sid, "p1"),
        "count": messages.message_count(sid),
    }


@pytest.fixture
def recorded(journal_db: str) -> Iterator[tuple[Store, list[str]]]:
    """A store on a filled file, and the list that each statement, BEGIN and ROLLBACK it
    sends from then on is appended to."""
    store = Store(journal_db)
    _fill(store)
    sent: list[str] = []

    def statement(_conn: Any, _cursor: Any, sql: str, *_rest: Any) -> None:
        sent.append(sql)

    event.listen(store.engine, "before_cursor_execute", statement)
    event.listen(store.engine, "begin", lambda _conn: sent.append("<begin>"))
    event.listen(store.engine, "rollback", lambda _conn: sent.append("<rollback>"))
    yield store, sent
    store.close()


def test_a_one_statement_read_sends_that_statement_alone(
    recorded: tuple[Store, list[str]],
) -> None:
    store, sent = recorded
    messages = MessageRepository(store)
    messages.get_newest_messages("s1", 20)  # a reader connection is kept from here on
    for read in (
        lambda: messages.get_newest_messages("s1", 20),
        lambda: messages.get_messages("s1"),
        lambda: messages.get_messages_as_conversation("s1"),
        lambda: SessionRepository(store).get_session("s1"),
        lambda: store.meta.get_meta("k"),
        lambda: store.titles.get_session_title("s1"),
        lambda: messages.message_count("s1"),
    ):
        sent.clear()
        read()
        assert len(sent) == 1, sent
        assert sent[0].lstrip().upper().startswith("SELECT"), sent


def test_answers_equal_those_of_a_read_in_a_transaction(journal_db: str) -> None:
    with Store(journal_db) as store:
        _fill(store)
        fast = _hot_reads(store)
        statement = Prepared(
            text("SELECT id, role, content FROM messages WHERE session_id = :sid ORDER BY id")
        )
        alone = store.read_one(statement, {"sid": "s1"}, all_dicts)
        inside = store.read(lambda conn: statement.dicts(conn, {"sid": "s1"}))
        assert alone == inside and len(alone) == 30
    # a store over a caller's engine reads in a transaction (`read`) as before
    engine = make_engine(journal_db)
    try:
        with Store(engine=engine) as over_engine:
            assert not over_engine._reads_alone
            assert _hot_reads(over_engine) == fast
    finally:
        engine.dispose()
    assert fast["newest"][-1]["content"] == "message 29" and len(fast["newest"]) == 20
    assert fast["session"] is not None and fast["session"]["model"] == "m"
    assert fast["count"] == 30 and fast["meta"] == "v" and fast["title"] == "title s1"
    assert fast["first assistant"] == "message 1"


def test_a_read_sees_what_another_connection_committed(journal_db: str) -> None:
    with Store(journal_db) as store, Store(journal_db) as other:
        _fill(store)
        messages = MessageRepository(store)
        assert messages.message_count("s1") == 30
        MessageRepository(other).append_message("s1", "user", "from elsewhere")
        assert messages.get_newest_messages("s1", 1)[0]["content"] == "from elsewhere"
        assert messages.message_count("s1") == 31


def test_a_read_leaves_no_lock_or_snapshot_behind(journal_db: str, journal: str) -> None:
    """A consume that reads one row of many and leaves its cursor open still ends the
    statement: the kept connection holds nothing once the read returns."""
    path = _path(journal_db)
    with Store(journal_db) as store:
        _fill(store)
        statement = Prepared(text("SELECT id FROM messages"))
        kept: list[Any] = []  # the cursor outlives the read, as a caller's may

        def first(cursor: Any) -> Any:
            kept.append(cursor)
            return cursor.fetchone()

        assert store.read_one(statement, {}, first) is not None
        assert store._idle_readers, "the reader connection was not kept"
        assert journal_mode(path) == journal
        other = sqlite_connect(path, timeout=0, isolation_level=None)
        try:
            if journal == "delete":
                other.execute("BEGIN EXCLUSIVE")  # refused while a shared lock is held
                other.execute("ROLLBACK")
            else:
                busy = other.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()[0]
                assert busy == 0, "a reader still holds a WAL snapshot"
        finally:
            other.close()


def _hold_exclusive(path: Path, seconds: float) -> tuple[threading.Thread, threading.Event]:
    """Another connection holding the EXCLUSIVE lock (DELETE mode: no reader gets in) for
    `seconds`, in a thread; the event is set once it holds it."""
    held = threading.Event()

    def hold() -> None:
        con = sqlite_connect(path, isolation_level=None)
        try:
            con.execute("BEGIN EXCLUSIVE")
            held.set()
            time.sleep(seconds)
            con.execute("ROLLBACK")
        finally:
            con.close()

    thread = threading.Thread(target=hold)
    thread.start()
    assert held.wait(10)
    return thread, held


def test_contention_is_retried_then_typed(fresh_db: str) -> None:
    path = _path(fresh_db)
    set_journal_mode(path, "delete")
    with Store(fresh_db, retry=RetryPolicy(attempts=2)) as store:
        _fill(store)
        messages = MessageRepository(store)
        messages.get_newest_messages("s1", 1)
        thread, _held = _hold_exclusive(path, 4.0)
        try:
            started = time.monotonic()
            with pytest.raises(DatabaseLocked):
                messages.get_newest_messages("s1", 1)
            # two attempts, each waiting out the busy timeout
            assert time.monotonic() - started >= 1.5
        finally:
            thread.join()
    with Store(fresh_db) as store:
        messages = MessageRepository(store)
        thread, _held = _hold_exclusive(path, 1.5)
        try:
            # longer than one busy timeout: answered by a later attempt
            assert messages.get_newest_messages("s1", 1)[0]["content"] == "message 29"
        finally:
            thread.join()


def test_a_transaction_a_failed_unit_left_open_is_rolled_back_first(
    journal_db: str, journal: str, caplog: pytest.LogCaptureFixture
) -> None:
    with Store(journal_db) as store:
        _fill(store)
        messages = MessageRepository(store)
        messages.get_newest_messages("s1", 1)
        driver = store._idle_readers[-1].connection.driver_connection
        assert driver is not None
        driver.execute("BEGIN")
        driver.execute("SELECT count(*) FROM messages").fetchall()
        if journal == "wal":  # the leftover's snapshot does not hold other writers back
            with Store(journal_db) as other:
                MessageRepository(other).append_message("s1", "user", "after the leftover")
        with caplog.at_level(logging.WARNING, logger="hermes_store.runtime.engine"):
            newest = messages.get_newest_messages("s1", 1)
        assert "left open" in caplog.text
        assert not driver.in_transaction
        if journal == "wal":
            assert newest[0]["content"] == "after the leftover"


def test_a_read_only_store_reads_past_a_crashed_writer_s_journal(fresh_db: str) -> None:
    path = _path(fresh_db)
    set_journal_mode(path, "delete")
    with Store(fresh_db) as store:
        SessionRepository(store).create_session("kept", "cli")
        MessageRepository(store).append_message("kept", "user", "committed before the crash")
    writer = start_hanging_writer(fresh_db, spill=True)
    writer.kill()
    writer.wait()
    assert Path(f"{path}-journal").stat().st_size > 0, "the writer left no journal"
    with Store(fresh_db, read_only=True) as store:
        newest = MessageRepository(store).get_newest_messages("kept", 5)
        assert [m["content"] for m in newest] == ["committed before the crash"]
        assert SessionRepository(store).get_session("doomed") is None
    assert not Path(f"{path}-journal").exists()


def test_a_picker_that_reads_leaves_no_transaction_to_the_next_read(journal_db: str) -> None:
    # a picker may read only where a read has a transaction; one that reads anyway on
    # SQLite must not leave the kept connection believed inside a transaction, which
    # would have the next read block run without its BEGIN, one snapshot a statement
    prepared = Prepared(text("SELECT count(*) FROM sessions"))

    def picker(conn: Any) -> Prepared:
        conn.exec_driver_sql("SELECT 1").fetchall()
        return prepared

    with Store(journal_db) as store:
        assert store.read_one(picker, {}, first_value) == 0
        with store.read() as conn:
            conn.exec_driver_sql("SELECT count(*) FROM sessions").fetchall()
            assert conn.connection.driver_connection.in_transaction


def _damage_messages_root(path: Path) -> None:
    """Overwrite the root page of the `messages` table with bytes of no page type."""
    con = sqlite_connect(path)
    try:
        root = con.execute("SELECT rootpage FROM sqlite_master WHERE name = 'messages'")
        page = int(root.fetchone()[0])
        size = int(con.execute("PRAGMA page_size").fetchone()[0])
    finally:
        con.close()
    assert page != 1
    with open(path, "r+b") as f:
        f.seek((page - 1) * size)
        f.write(b"\x77" * size)


def test_damage_is_typed(journal_db: str) -> None:
    path = _path(journal_db)
    with Store(journal_db) as store:
        SessionRepository(store).create_session("s1", "cli")
        MessageRepository(store).append_messages(
            "s1", [{"role": "user", "content": f"m {n} " + "x" * 300} for n in range(200)]
        )
        store.checkpoint("TRUNCATE")
    _damage_messages_root(path)
    with Store(journal_db) as store:
        messages = MessageRepository(store)
        with pytest.raises(DatabaseCorrupt):
            messages.get_newest_messages("s1", 5)
        with pytest.raises(DatabaseCorrupt):
            messages.get_messages("s1")


def test_postgresql_reads_one_statement_in_a_transaction(pg_fresh_db: str) -> None:
    with Store(pg_fresh_db) as store:
        assert not store._reads_alone
        _fill(store)
        begun: list[str] = []
        event.listen(store.engine, "begin", lambda _conn: begun.append("<begin>"))
        answers = _hot_reads(store)
        assert begun, "a read on a server runs in a transaction"
        assert answers["newest"][-1]["content"] == "message 29" and answers["count"] == 30
        assert answers["session"] is not None and answers["title"] == "title s1"
        assert answers["meta"] == "v" and answers["first assistant"] == "message 1"
