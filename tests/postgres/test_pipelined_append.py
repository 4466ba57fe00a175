"""The one-call append sends its transaction's BEGIN in the same round trip as the call
(postgresql/pipelined.py), and has the call's answer, the transaction id included, before
COMMIT is sent; the driver connection goes back to the pool exactly as psycopg leaves a
transaction it began itself, so the next unit of work on it is one transaction again.
Checked on the wire with libpq's protocol trace, on the real server."""

from __future__ import annotations

import inspect
import tempfile
from collections.abc import Iterator
from typing import Any

import pytest
from sqlalchemy import text

from hermes_store.errors import CompressionSessionBusyError, SessionNotFound
from hermes_store.repositories.coordination import CompressionLockRepository
from hermes_store.repositories.encoding import encode_row
from hermes_store.repositories.messages import MessageRepository, _append_one
from hermes_store.repositories.sessions import SessionRepository
from hermes_store.store import Store

psycopg = pytest.importorskip("psycopg")

#: append_message's message fields: what encode_row takes besides the session and time
FIELDS = tuple(
    name
    for name, parameter in inspect.signature(encode_row).parameters.items()
    if parameter.kind is parameter.KEYWORD_ONLY and name != "timestamp"
)


@pytest.fixture
def pg_store(pg_fresh_db: str) -> Iterator[Store]:
    store = Store(pg_fresh_db)
    try:
        SessionRepository(store).create_session("s", "cli")
        yield store
    finally:
        store.close()


def _driver(store: Store) -> Any:
    """The driver connection a single-threaded caller's next unit of work gets (the
    pool hands out the most recently returned one)."""
    with store.engine.connect() as conn:
        return conn.connection.driver_connection


def _traced(store: Store, work: Any) -> list[tuple[str, str]]:
    """(direction, message) of every protocol message `work()` exchanges on the store's
    connection: F from the client, B from the server."""
    pgconn = _driver(store).pgconn
    with tempfile.TemporaryFile("w+") as trace:
        pgconn.trace(trace.fileno())
        pgconn.set_trace_flags(psycopg.pq.Trace.SUPPRESS_TIMESTAMPS)
        try:
            work()
        finally:
            pgconn.untrace()
        trace.seek(0)
        lines = trace.read().splitlines()
    messages: list[tuple[str, str]] = []
    for line in lines:
        fields = line.split("\t")
        if len(fields) >= 3 and fields[0] in ("F", "B"):
            messages.append((fields[0], " ".join(" ".join(fields[2:]).split())))
        elif messages:  # a statement's text goes on over several lines
            direction, message = messages[-1]
            messages[-1] = (direction, f"{message} {line}")
    return messages


def test_begin_and_the_call_share_a_round_trip_and_commit_follows_the_answer(
    pg_store: Store,
) -> None:
    messages = MessageRepository(pg_store)
    messages.append_message("s", "user", "warm")
    wire = _traced(pg_store, lambda: messages.append_message("s", "user", "traced"))
    sent = [m for d, m in wire if d == "F"]
    first_answer = next(i for i, (d, _m) in enumerate(wire) if d == "B")
    before_answer = " | ".join(m for _d, m in wire[:first_answer])
    # BEGIN and the function call both go out before the server has answered anything
    assert "BEGIN" in before_answer and "hermes_store_append_message" in before_answer
    assert sum("BEGIN" in m for m in sent) == 1
    # the row with the transaction id arrives before COMMIT leaves
    commit_at = next(i for i, (d, m) in enumerate(wire) if d == "F" and m == 'Query "COMMIT"')
    row_at = next(i for i, (d, m) in enumerate(wire) if d == "B" and m.startswith("DataRow"))
    assert row_at < commit_at
    assert [m.split()[0] for d, m in wire if d == "B"][-2:] == ["CommandComplete", "ReadyForQuery"]


def test_a_write_that_starts_with_the_row_lock_sends_it_with_its_begin(pg_store: Store) -> None:
    """An append with an idempotency key (and every unit of work whose first statement
    is the session's row lock) sends the lock in the round trip of its BEGIN."""
    messages = MessageRepository(pg_store)
    messages.append_message("s", "user", "warm", idempotency_key="k0")
    wire = _traced(
        pg_store, lambda: messages.append_message("s", "user", "keyed", idempotency_key="k1")
    )
    first_answer = next(i for i, (d, _m) in enumerate(wire) if d == "B")
    before_answer = " | ".join(m for _d, m in wire[:first_answer])
    assert "BEGIN" in before_answer and "FOR UPDATE" in before_answer
    assert (
        messages.append_message("s", "user", "again", idempotency_key="k1")
        == (messages.get_messages("s")[-1]["id"])
    )


def test_the_connection_goes_back_as_psycopg_leaves_it(pg_store: Store) -> None:
    """After an append and after a refused one the driver is out of autocommit and idle,
    so the next unit of work on it is still one transaction: its failure undoes all."""
    messages = MessageRepository(pg_store)
    messages.append_message("s", "user", "one")
    driver = _driver(pg_store)
    assert driver.autocommit is False
    assert driver.info.transaction_status == psycopg.pq.TransactionStatus.IDLE
    with pytest.raises(SessionNotFound):
        messages.append_message("missing", "user", "refused")
    assert _driver(pg_store) is driver and driver.autocommit is False
    assert driver.info.transaction_status == psycopg.pq.TransactionStatus.IDLE

    def half_then_fail(conn: Any) -> None:
        conn.execute(text("INSERT INTO sessions (id, source, started_at) VALUES ('t', 'cli', 1)"))
        raise RuntimeError("the work fails after its first statement")

    with pytest.raises(RuntimeError):
        pg_store.write(half_then_fail)
    with pg_store.read() as conn:
        assert conn.execute(text("SELECT count(*) FROM sessions WHERE id = 't'")).scalar() == 0
    assert [m["content"] for m in messages.get_messages("s")] == ["one"]


def test_a_refusal_after_the_pipelined_begin_is_typed_and_rolled_back(pg_store: Store) -> None:
    assert CompressionLockRepository(pg_store).try_acquire("s", "compressor")
    messages = MessageRepository(pg_store)
    with pytest.raises(CompressionSessionBusyError):
        messages.append_message("s", "user", "refused while leased")
    assert messages.append_message(
        "s", "user", "by the holder", compression_lock_holder="compressor"
    )
    assert [m["content"] for m in messages.get_messages("s")] == ["by the holder"]


def test_a_call_inside_a_larger_unit_of_work_stays_in_its_transaction(pg_store: Store) -> None:
    """Where the unit of work has sent statements already, the call goes as one statement
    of that transaction (no BEGIN of its own), and a later failure undoes it."""
    sql = pg_store.dialect.sql

    def append_then_fail(conn: Any) -> None:
        conn.execute(text("UPDATE sessions SET title = 'renamed' WHERE id = 's'"))
        fields = dict.fromkeys(FIELDS) | {"role": "user", "content": "inside", "observed": False}
        _append_one(conn, sql, "s", None, None, fields)
        raise RuntimeError("the work fails after the append")

    with pytest.raises(RuntimeError):
        pg_store.write(append_then_fail)
    assert MessageRepository(pg_store).get_messages("s") == []
    assert SessionRepository(pg_store).get_session("s")["title"] is None  # type: ignore[index]


def test_a_watched_connection_sends_the_call_the_ordinary_way(pg_store: Store) -> None:
    """Where listeners watch the statements (tracing instrumentation sets attributes on
    the execution context), the call goes through SQLAlchemy's ordinary path: every
    listener sees it with a cursor and a context, and BEGIN has its own round trip."""
    from sqlalchemy import event

    messages = MessageRepository(pg_store)
    messages.append_message("s", "user", "warm")
    seen: list[tuple[str, bool, bool]] = []

    def before(conn: Any, cursor: Any, statement: str, params: Any, context: Any, *_: Any) -> None:
        context.tagged = True  # what an instrumentation does; fails on a None context
        seen.append((statement, cursor is not None, context is not None))

    event.listen(pg_store.engine, "before_cursor_execute", before)
    try:
        wire = _traced(pg_store, lambda: messages.append_message("s", "user", "watched"))
    finally:
        event.remove(pg_store.engine, "before_cursor_execute", before)
    assert any("hermes_store_append_message" in s and c and x for s, c, x in seen), seen
    first_answer = next(i for i, (d, _m) in enumerate(wire) if d == "B")
    assert "hermes_store_append_message" not in " ".join(m for _d, m in wire[:first_answer])
    assert messages.get_messages("s")[-1]["content"] == "watched"


def test_an_append_is_two_round_trips_with_its_checkout_and_return(pg_store: Store) -> None:
    """The whole call, its pool checkout and return included, exchanges two round trips
    (BEGIN and the call in one, COMMIT): the checkout sends no ping and the return no
    ROLLBACK, since the transaction has ended by then and psycopg sends nothing to roll
    back an idle connection."""
    messages = MessageRepository(pg_store)
    messages.append_message("s", "user", "warm")
    wire = _traced(pg_store, lambda: messages.append_message("s", "user", "counted"))
    answers = [m.split()[0] for d, m in wire if d == "B"]
    assert answers.count("ReadyForQuery") == 2, wire
    # what is parsed or run as a query: the BEGIN, the call (unless psycopg has prepared
    # it by now, then only bound), COMMIT; nothing from the pool
    sent = [m for d, m in wire if d == "F" and m.startswith(("Query", "Parse"))]
    assert "BEGIN" in sent[0] and sent[-1] == 'Query "COMMIT"', sent
    assert all("hermes_store_append_message" in m for m in sent[1:-1]) and len(sent) <= 3, sent
    assert not any("ROLLBACK" in m for _d, m in wire)
