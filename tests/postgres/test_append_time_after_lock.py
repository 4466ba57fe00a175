"""The one-call append stamps a message given no time after it holds the session's row
lock (revision hs0009), so a writer that waited for another's lock is never stamped
before what committed during the wait: ids and timestamps rise together across
connections and processes. On the real server, with another connection holding the
row lock as another process's append would."""

from __future__ import annotations

import importlib
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from sqlalchemy import create_engine, text

from hermes_store import migrate
from hermes_store.contract import APPEND_FUNCTION
from hermes_store.repositories.messages import MessageRepository, _append_one
from hermes_store.repositories.sessions import SessionRepository
from hermes_store.store import Store

psycopg = pytest.importorskip("psycopg")

#: how long the other connection holds the session's row
HOLD = 0.5


@pytest.fixture
def pg_store(pg_fresh_db: str) -> Iterator[Store]:
    store = Store(pg_fresh_db)
    try:
        SessionRepository(store).create_session("s", "cli")
        MessageRepository(store).append_message("s", "user", "warm")
        yield store
    finally:
        store.close()


def _libpq_url(store: Store) -> str:
    return store.engine.url.set(drivername="postgresql").render_as_string(hide_password=False)


def _someone_waits_for(watcher: Any, holder: Any) -> bool:
    """Whether some backend waits for a lock `holder`'s backend holds (asked on `watcher`)."""
    row = watcher.execute(
        "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock'"
        " AND %s = ANY (pg_blocking_pids(pid))",
        (holder.info.backend_pid,),
    ).fetchone()
    return bool(row[0])


def _released_while_appending(store: Store, append: Callable[[], Any]) -> float:
    """Run `append` while another connection holds the session's row lock; the lock is
    released once the append waits for it. The time just before that release."""
    with (
        psycopg.connect(_libpq_url(store)) as holder,
        psycopg.connect(_libpq_url(store), autocommit=True) as watcher,
    ):
        holder.execute("SELECT 1 FROM sessions WHERE id = 's' FOR UPDATE")
        failures: list[BaseException] = []

        def run() -> None:
            try:
                append()
            except BaseException as exc:  # reported below, on the test's thread
                failures.append(exc)

        appender = threading.Thread(target=run)
        appender.start()
        deadline = time.monotonic() + 30
        while not _someone_waits_for(watcher, holder):
            assert time.monotonic() < deadline, "the append never waited for the lock"
            time.sleep(0.01)
        time.sleep(HOLD)
        released = time.time()
        holder.commit()
        appender.join(timeout=30)
        assert not appender.is_alive()
        assert not failures, failures
    return released


def _newest(store: Store) -> dict[str, Any]:
    return MessageRepository(store).get_messages("s")[-1]


def test_an_append_that_waited_for_the_row_lock_is_stamped_after_it(pg_store: Store) -> None:
    messages = MessageRepository(pg_store)
    released = _released_while_appending(
        pg_store, lambda: messages.append_message("s", "user", "after the lock")
    )
    newest = _newest(pg_store)
    assert newest["content"] == "after the lock"
    assert newest["timestamp"] >= released


def test_the_unit_of_work_s_one_call_append_is_stamped_after_the_lock(pg_store: Store) -> None:
    # the same function, reached from a unit of work (Store.write with a Connection)
    sql = pg_store.dialect.sql
    fields = {
        "role": "user", "content": "in a unit of work", "tool_name": None, "tool_calls": None,
        "tool_call_id": None, "token_count": None, "finish_reason": None, "reasoning": None,
        "reasoning_content": None, "reasoning_details": None, "codex_reasoning_items": None,
        "codex_message_items": None, "platform_message_id": None, "observed": False,
        "effect_disposition": None, "api_content": None, "display_kind": None,
        "display_metadata": None,
    }  # fmt: skip

    def append() -> int:
        return pg_store.write(lambda conn: _append_one(conn, sql, "s", None, None, fields))

    released = _released_while_appending(pg_store, append)
    newest = _newest(pg_store)
    assert newest["content"] == "in a unit of work"
    assert newest["timestamp"] >= released


def test_an_append_that_waited_for_the_pool_is_stamped_after_the_wait(pg_store: Store) -> None:
    # every connection of the pool taken: the append waits for one before anything
    # reaches the server, so its time is read once it holds one (Call.stamped)
    pool = pg_store.engine.pool
    taken = []
    while pool.checkedout() < pool.size() + pool._max_overflow:  # type: ignore[attr-defined]
        taken.append(pg_store.engine.raw_connection())
    failures: list[BaseException] = []

    def run() -> None:
        try:
            MessageRepository(pg_store).append_message("s", "user", "after the pool")
        except BaseException as exc:  # reported below, on the test's thread
            failures.append(exc)

    appender = threading.Thread(target=run)
    appender.start()
    time.sleep(HOLD)
    released = time.time()
    for conn in taken:
        conn.close()
    appender.join(timeout=30)
    assert not appender.is_alive() and not failures, failures
    newest = _newest(pg_store)
    assert newest["content"] == "after the pool"
    assert newest["timestamp"] >= released


def test_a_given_time_is_stored_as_given(pg_store: Store) -> None:
    messages = MessageRepository(pg_store)
    given = 1_700_000_000.123456789
    messages.append_message("s", "user", "dated", timestamp=given)
    stored = _newest(pg_store)["timestamp"]
    assert isinstance(stored, float) and stored == given


def test_the_stamp_is_epoch_seconds_in_double_precision(pg_store: Store) -> None:
    before = time.time()
    MessageRepository(pg_store).append_message("s", "user", "now")
    after = time.time()
    with pg_store.engine.connect() as conn:
        kind = conn.execute(text("SELECT pg_typeof(timestamp)::text FROM messages")).scalars()
        assert set(kind) == {"double precision"}
    stored = _newest(pg_store)["timestamp"]
    # one clock on this host: the server's, read between the two
    assert before - 0.001 <= stored <= after + 0.001


def test_the_stamp_is_the_server_s_clock(pg_store: Store) -> None:
    # a client whose clock is a day behind the server's: a message it leaves without a
    # time is stamped by the server's clock (its `p_at` judges only the lease)
    columns = importlib.import_module(
        "hermes_store._migrations.versions.hs0009_append_time_after_lock"
    ).APPEND_COLUMNS
    values = {f"p_{name}": None for name, _kind in columns}
    values.update(p_role="user", p_content="behind", p_active=1, p_compacted=0)
    named = ", ".join(f"{name} => :{name}" for name in values)
    day_behind = time.time() - 86_400
    server_now = text("SELECT EXTRACT(EPOCH FROM clock_timestamp())::float8")
    with pg_store.engine.begin() as conn:
        before = conn.execute(server_now).scalar_one()
        conn.execute(
            text(
                f"SELECT * FROM {APPEND_FUNCTION}(p_session_id => 's', p_holder => NULL,"
                f" p_at => :at, p_tool_calls_added => 0, {named})"
            ),
            {"at": day_behind, **values},
        )
        after = conn.execute(server_now).scalar_one()
    stored = _newest(pg_store)["timestamp"]
    assert before <= stored <= after


def _function_body(url: str) -> str:
    engine = create_engine(url)
    try:
        with engine.connect() as conn:
            found = conn.execute(text(f"SELECT pg_get_functiondef('{APPEND_FUNCTION}'::regproc)"))
            return str(found.scalar_one())
    finally:
        engine.dispose()


def test_the_downgrade_restores_hs0005_s_function(pg_fresh_db: str) -> None:
    at_head = _function_body(pg_fresh_db)
    assert "COALESCE(p_timestamp" in at_head
    migrate.downgrade(pg_fresh_db, "hs0008")
    restored = " ".join(_function_body(pg_fresh_db).split())
    assert "COALESCE(p_timestamp" not in restored
    assert ", p_timestamp, " in restored
    migrate.upgrade(pg_fresh_db)
    assert _function_body(pg_fresh_db) == at_head
