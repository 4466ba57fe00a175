"""Which PostgreSQL errors are retried (by SQLSTATE and driver class, checked on errors a
real server and the real driver raise), and what a caller gets when the server stays
away: one DatabaseUnavailable naming the server, never its password, and how long it
waited. Errors that are not transient reach the caller after one attempt."""

from __future__ import annotations

import pickle
import time
from typing import Any

import pytest
from helpers.pg_cluster import free_port
from sqlalchemy import text
from sqlalchemy.exc import IntegrityError, ProgrammingError

from hermes_store.errors import DatabaseUnavailable, StoreError
from hermes_store.postgresql.faults import is_transient
from hermes_store.repositories.sessions import SessionRepository
from hermes_store.runtime.retry import RetryPolicy
from hermes_store.store import Store

psycopg = pytest.importorskip("psycopg")


def _connect(url: str, **kwargs: Any) -> Any:
    from sqlalchemy.engine import make_url

    u = make_url(url)
    return psycopg.connect(
        host=u.host, port=u.port or 5432, user=u.username, dbname=u.database, **kwargs
    )


def _raised(fn: Any) -> BaseException:
    try:
        fn()
    except Exception as exc:  # noqa: BLE001 (returned for inspection)
        return exc
    raise AssertionError("nothing was raised")


def test_real_server_errors_are_classified_by_sqlstate(pg_fresh_db: str) -> None:
    with _connect(pg_fresh_db, autocommit=True) as victim, _connect(
        pg_fresh_db, autocommit=True
    ) as admin:
        pid = victim.info.backend_pid
        admin.execute("SELECT pg_terminate_backend(%s)", (pid,))
        terminated = _raised(lambda: victim.execute("SELECT 1"))
    assert getattr(terminated, "sqlstate", None) == "57P01"  # admin_shutdown
    assert is_transient(terminated)

    with _connect(pg_fresh_db) as holder, _connect(pg_fresh_db) as waiter:
        holder.execute("LOCK TABLE messages IN ACCESS EXCLUSIVE MODE")
        waiter.execute("SET lock_timeout = 50")
        timed_out = _raised(lambda: waiter.execute("SELECT count(*) FROM messages"))
    assert getattr(timed_out, "sqlstate", None) == "55P03"
    assert is_transient(timed_out)

    refused = _raised(
        lambda: psycopg.connect(host="127.0.0.1", port=free_port(), user="x", connect_timeout=5)
    )
    assert isinstance(refused, psycopg.OperationalError) and is_transient(refused)

    # libpq gives a refused login no SQLSTATE: the server answering pings tells it apart
    missing = _raised(lambda: _connect(pg_fresh_db.rsplit("/", 1)[0] + "/no_such_database"))
    assert isinstance(missing, psycopg.OperationalError) and not is_transient(missing)

    with _connect(pg_fresh_db, autocommit=True) as conn:
        syntax = _raised(lambda: conn.execute("SELEC 1"))
        insert = "INSERT INTO sessions (id, source, started_at) VALUES ('d', 'cli', 1)"
        conn.execute(insert)
        duplicate = _raised(lambda: conn.execute(insert))
    assert not is_transient(syntax) and not is_transient(duplicate)
    assert not is_transient(ValueError("connection refused"))
    # the driver's own protocol error (no SQLSTATE), as behind a pooler whose server was
    # cut mid-answer (seen in test_writers_survive_a_restart_behind_pgbouncer): the
    # connection is unusable, and the retry checks whether its COMMIT was applied
    assert is_transient(psycopg.InternalError("received 2 results from command 'COMMIT'"))


def test_errors_that_are_not_transient_are_not_retried(pg_fresh_db: str) -> None:
    calls: list[str] = []

    def insert_twice(session: Any) -> None:
        calls.append("insert")
        session.execute(text("INSERT INTO sessions (id, source, started_at) VALUES ('x', 'c', 1)"))
        session.execute(text("INSERT INTO sessions (id, source, started_at) VALUES ('x', 'c', 1)"))

    def bad_sql(session: Any) -> None:
        calls.append("syntax")
        session.execute(text("SELEC 1"))

    with Store(pg_fresh_db) as store:
        with pytest.raises(IntegrityError):
            store.write(insert_twice)
        with pytest.raises(ProgrammingError):
            store.write(bad_sql)
        with pytest.raises(ProgrammingError):
            store.read(bad_sql)
        assert SessionRepository(store).get_session("x") is None
    assert calls == ["insert", "syntax", "syntax"]


def test_an_unreachable_server_raises_database_unavailable_naming_it() -> None:
    """Nothing listens on the port: every attempt is refused. After the budget (1 s here,
    30 s by default) one typed error, for writes, reads and repository calls alike; it
    names host, port and database, never the password."""
    port = free_port()
    url = f"postgresql+psycopg://hermes:s3cret-pw@127.0.0.1:{port}/hermesdb"
    with pytest.raises(DatabaseUnavailable, match=f"127.0.0.1:{port}"):
        Store(url, retry=RetryPolicy(server_budget_seconds=1.0))  # its schema check waits too
    store = Store(url, retry=RetryPolicy(server_budget_seconds=1.0), check_schema=False)
    try:
        started = time.monotonic()
        with pytest.raises(DatabaseUnavailable) as info:
            store.write(lambda s: s.execute(text("SELECT 1")))
        took = time.monotonic() - started
        error = info.value
        assert isinstance(error, StoreError)
        assert f"127.0.0.1:{port}" in str(error) and "hermesdb" in str(error)
        assert "s3cret-pw" not in str(error) and "s3cret-pw" not in repr(error.args)
        assert 1.0 <= error.waited <= took and error.attempts >= 2
        assert not error.outcome_unknown and "nothing was applied" in str(error)
        copy = pickle.loads(pickle.dumps(error))
        assert type(copy) is DatabaseUnavailable and str(copy) == str(error)

        with pytest.raises(DatabaseUnavailable):
            store.read(lambda s: s.execute(text("SELECT 1")).scalar())
        with pytest.raises(DatabaseUnavailable):
            with store.read() as session:
                session.execute(text("SELECT 1"))
        with pytest.raises(DatabaseUnavailable, match=f"127.0.0.1:{port}"):
            SessionRepository(store).get_session("s")
    finally:
        store.engine.dispose()


def test_a_missing_database_is_refused_at_once(pg_fresh_db: str) -> None:
    """A login the server refuses is not waited out: the caller learns at once."""
    missing = pg_fresh_db.rsplit("/", 1)[0] + "/no_such_database"
    started = time.monotonic()
    with pytest.raises(Exception) as opening:
        Store(missing, retry=RetryPolicy(server_budget_seconds=20.0))
    assert time.monotonic() - started < 5
    assert not isinstance(opening.value, DatabaseUnavailable)
    assert "no_such_database" in str(opening.value)
    store = Store(missing, retry=RetryPolicy(server_budget_seconds=20.0), check_schema=False)
    try:
        started = time.monotonic()
        with pytest.raises(Exception) as info:
            store.write(lambda s: s.execute(text("SELECT 1")))
        assert time.monotonic() - started < 5
        assert not isinstance(info.value, DatabaseUnavailable)
        assert "no_such_database" in str(info.value)
    finally:
        store.engine.dispose()
