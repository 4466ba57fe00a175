"""A plain append on PostgreSQL is committed on a driver connection checked out of the
pool, without a SQLAlchemy Connection (postgresql/pipelined.py, `commit_call`): one
checkout and one return, no Connection built. Errors still leave as SQLAlchemy's, a
connection the server dropped is invalidated and the write retried, the pool gets every
connection back, and watched engines keep the ordinary path. On the real server; what
SQLAlchemy runs is observed with a profiler, as tests/project/test_call_paths.py does."""

from __future__ import annotations

import sys
import threading
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import FrameType
from typing import Any

import pytest
from sqlalchemy import event, text
from sqlalchemy.exc import DBAPIError

from hermes_store.errors import SessionNotFound
from hermes_store.repositories.messages import MessageRepository
from hermes_store.repositories.sessions import SessionRepository
from hermes_store.runtime.engine import make_engine
from hermes_store.store import Store

pytest.importorskip("psycopg")

#: SQLAlchemy's functions counted: a Connection made, a pool checkout, a return
WATCHED = {
    "Connection.__init__": "connection",
    "_ConnectionFairy._checkout": "checkout",
    "_ConnectionFairy._checkin": "return",
}


@contextmanager
def sqlalchemy_calls() -> Iterator[Counter[str]]:
    """How often the WATCHED functions are called inside the block, on any thread."""
    seen: Counter[str] = Counter()

    def profile(frame: FrameType, event_name: str, arg: Any) -> None:
        if event_name == "call":
            name = WATCHED.get(frame.f_code.co_qualname)
            if name is not None and "sqlalchemy" in frame.f_code.co_filename:
                seen[name] += 1

    threading.setprofile(profile)  # type: ignore[arg-type]
    sys.setprofile(profile)  # type: ignore[arg-type]
    try:
        yield seen
    finally:
        sys.setprofile(None)
        threading.setprofile(None)  # type: ignore[arg-type]


@pytest.fixture
def pg_store(pg_fresh_db: str) -> Iterator[Store]:
    store = Store(pg_fresh_db)
    try:
        SessionRepository(store).create_session("s", "cli")
        yield store
    finally:
        store.close()


def _contents(store: Store) -> list[str]:
    return [str(m["content"]) for m in MessageRepository(store).get_messages("s")]


def test_a_plain_append_builds_no_connection_and_checks_out_once(pg_store: Store) -> None:
    messages = MessageRepository(pg_store)
    messages.append_message("s", "user", "warm")
    with sqlalchemy_calls() as seen:
        appended = messages.append_message("s", "user", "counted")
    assert seen == Counter({"checkout": 1, "return": 1}), seen
    assert pg_store.engine.pool.checkedout() == 0  # type: ignore[attr-defined]
    assert pg_store.writes == 3  # the session, "warm", "counted"
    assert _contents(pg_store) == ["warm", "counted"]
    assert MessageRepository(pg_store).get_messages("s")[-1]["id"] == appended


def test_a_watched_engine_appends_through_a_connection(pg_store: Store) -> None:
    """A listener on the engine's statements sees the call, with its context."""
    messages = MessageRepository(pg_store)
    seen_statements: list[str] = []

    def before(conn: Any, cursor: Any, statement: str, *rest: Any) -> None:
        seen_statements.append(statement)

    event.listen(pg_store.engine, "before_cursor_execute", before)
    with sqlalchemy_calls() as seen:
        messages.append_message("s", "user", "watched")
    assert seen["connection"] == 1 and seen["checkout"] == 1, seen
    assert any("hermes_store_append_message" in s for s in seen_statements)
    assert _contents(pg_store) == ["watched"]


def test_engine_error_events_see_a_refusal_of_the_bare_append(pg_fresh_db: str) -> None:
    """handle_error listeners are events too: with one, the refusal goes through a
    Connection, and the listener sees it; the caller gets the typed error either way."""
    with Store(pg_fresh_db) as plain:
        with pytest.raises(SessionNotFound):
            MessageRepository(plain).append_message("missing", "user", "refused")
        assert plain.engine.pool.checkedout() == 0  # type: ignore[attr-defined]
    with Store(pg_fresh_db) as store:
        errors: list[BaseException] = []
        event.listen(
            store.engine, "handle_error", lambda ctx: errors.append(ctx.original_exception)
        )
        with pytest.raises(SessionNotFound):
            MessageRepository(store).append_message("missing", "user", "refused")
        assert len(errors) == 1


def test_a_dropped_connection_fails_the_bare_attempt_and_the_write_is_retried(
    pg_store: Store,
) -> None:
    """The pooled connection's backend is ended between two appends: the bare attempt
    meets the closed connection, SQLAlchemy's handling invalidates it (and the pool's
    older ones), and the retry appends once on a new connection."""
    messages = MessageRepository(pg_store)
    messages.append_message("s", "user", "first")
    with pg_store.engine.connect() as conn:
        pid = conn.exec_driver_sql("SELECT pg_backend_pid()").scalar()
        conn.rollback()
    admin = make_engine(pg_store.url)
    try:
        with admin.connect() as conn:
            assert conn.execute(text("SELECT pg_terminate_backend(:p)"), {"p": pid}).scalar()
            conn.commit()
    finally:
        admin.dispose()
    with sqlalchemy_calls() as seen:
        messages.append_message("s", "user", "second")
    # the dead one, then a new one; a Connection only to report the error through
    assert seen == Counter({"checkout": 2, "return": 2, "connection": 1}), seen
    assert _contents(pg_store) == ["first", "second"]
    assert pg_store.engine.pool.checkedout() == 0  # type: ignore[attr-defined]
    with pg_store.engine.connect() as conn:
        assert conn.exec_driver_sql("SELECT pg_backend_pid()").scalar() != pid


def test_a_driver_error_leaves_as_sqlalchemys_and_rolls_back(pg_store: Store) -> None:
    """An error that is no refusal (a token count past bigint: the server finds no
    function taking a numeric there) is SQLAlchemy's DBAPIError, as through a
    Connection; the connection goes back idle and usable."""
    messages = MessageRepository(pg_store)
    with pytest.raises(DBAPIError) as raised:
        messages.append_message("s", "user", "too many tokens", token_count=2**70)
    assert raised.value.orig.sqlstate == "42883"  # type: ignore[union-attr]
    assert pg_store.engine.pool.checkedout() == 0  # type: ignore[attr-defined]
    messages.append_message("s", "user", "after")
    assert _contents(pg_store) == ["after"]


def test_appends_from_more_threads_than_connections_share_the_pool(pg_fresh_db: str) -> None:
    """Every bare append returns its connection: a pool of one serves four threads."""
    engine = make_engine(pg_fresh_db, pool_size=1, max_overflow=0, pool_timeout=5)
    with Store(pg_fresh_db, engine=engine) as store:
        SessionRepository(store).create_session("s", "cli")
        messages = MessageRepository(store)
        failures: list[BaseException] = []

        def writer(i: int) -> Callable[[], None]:
            def run() -> None:
                try:
                    for n in range(10):
                        messages.append_message("s", "user", f"{i}-{n}")
                except BaseException as exc:  # noqa: BLE001 (reported below)
                    failures.append(exc)

            return run

        threads = [threading.Thread(target=writer(i)) for i in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert failures == []
        assert len(_contents(store)) == 40
        assert store.engine.pool.checkedout() == 0  # type: ignore[attr-defined]
