"""A one-statement read (`Store.read_one`) and a write (`Store.write`, `write_one`) make
their first attempt themselves and enter the retry policy only when it fails
(`RetryPolicy.resume`): a call that succeeds at once runs none of the policy's code, and
one that meets a lock is retried as before, the same attempts counted. On both SQLite
drivers."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import pytest
from helpers.databases import set_journal_mode, sqlite_connect
from helpers.statements import RecordingRetry
from sqlalchemy import event, text

from hermes_store.config import JOURNAL_ENV
from hermes_store.errors import DatabaseLocked
from hermes_store.runtime.engine import Prepared, first_value
from hermes_store.runtime.retry import RetryPolicy
from hermes_store.store import Store

pytestmark = pytest.mark.usefixtures("sqlite_driver")


_READ = Prepared(text("SELECT value FROM state_meta WHERE key = :key"))
_WRITE = Prepared(text("UPDATE state_meta SET value = :value WHERE key = :key"))


@pytest.fixture
def delete_db(fresh_db: str, monkeypatch: pytest.MonkeyPatch) -> str:
    """A fresh file in DELETE mode, kept so (a fixed SQLite would switch it to WAL)."""
    monkeypatch.setenv(JOURNAL_ENV, "delete")
    set_journal_mode(fresh_db.removeprefix("sqlite:///"), "delete")
    return fresh_db


def _hold(path: Path, begin: str, seconds: float) -> threading.Thread:
    """Another connection holding the lock `begin` takes for `seconds`, in a thread;
    returned once it holds it."""
    held = threading.Event()

    def hold() -> None:
        con = sqlite_connect(path, isolation_level=None)
        try:
            con.execute(begin)
            held.set()
            time.sleep(seconds)
            con.execute("ROLLBACK")
        finally:
            con.close()

    thread = threading.Thread(target=hold)
    thread.start()
    assert held.wait(10)
    return thread


def test_a_read_that_succeeds_runs_no_retry_code(delete_db: str) -> None:
    policy = RecordingRetry()
    with Store(delete_db, retry=policy) as store:
        store.meta.set_meta("k", "v")
        assert store.read_one(_READ, {"key": "k"}, first_value) == "v"  # keeps a reader
        policy.calls.clear()
        for _ in range(5):
            assert store.read_one(_READ, {"key": "k"}, first_value) == "v"
            assert store.meta.get_meta("k") == "v"
        assert policy.calls == []


def test_a_read_that_meets_a_lock_goes_on_in_the_policy(delete_db: str) -> None:
    path = Path(delete_db.removeprefix("sqlite:///"))
    policy = RecordingRetry()
    with Store(delete_db, retry=policy) as store:
        store.meta.set_meta("k", "v")
        store.read_one(_READ, {"key": "k"}, first_value)
        policy.calls.clear()
        holder = _hold(path, "BEGIN EXCLUSIVE", 1.5)  # longer than one busy timeout
        try:
            assert store.read_one(_READ, {"key": "k"}, first_value) == "v"
        finally:
            holder.join()
        # the failed reader went back to the pool: the next attempt checks one out,
        # itself under the policy
        assert policy.calls == ["resume OperationalError", "run"]
    # the attempts are counted from the one made inline: two attempts of a busy timeout
    # each, then the typed error
    with Store(delete_db, retry=RetryPolicy(attempts=2)) as store:
        store.read_one(_READ, {"key": "k"}, first_value)
        holder = _hold(path, "BEGIN EXCLUSIVE", 4.0)
        try:
            with pytest.raises(DatabaseLocked):
                store.read_one(_READ, {"key": "k"}, first_value)
        finally:
            holder.join()


def test_a_read_under_a_statement_listener_is_seen_and_kept(delete_db: str) -> None:
    with Store(delete_db) as store:
        store.meta.set_meta("k", "v")
        store.read_one(_READ, {"key": "k"}, first_value)
        kept = list(store._idle_readers)
        sent: list[str] = []
        event.listen(store.engine, "after_cursor_execute", lambda *args: sent.append(args[2]))
        assert store.read_one(_READ, {"key": "k"}, first_value) == "v"
        assert sent == [_READ.sql(store.engine.dialect)]
        assert store._idle_readers == kept  # the same connection, kept again


def test_a_write_that_succeeds_runs_no_retry_code(delete_db: str) -> None:
    policy = RecordingRetry()
    with Store(delete_db, retry=policy, checkpoint_every=0) as store:
        store.meta.set_meta("k", "v")
        policy.calls.clear()
        before = store.writes
        for n in range(5):
            assert store.write_one(_WRITE, {"key": "k", "value": f"v{n}"}) == 1
            store.write(  # a unit of work: `write(work)`
                lambda conn, n=n: conn.execute(
                    text("UPDATE state_meta SET value = :v WHERE key = 'k'"), {"v": f"w{n}"}
                )
            )
        assert policy.calls == []
        assert store.writes == before + 10
        assert store.meta.get_meta("k") == "w4"


def test_a_write_that_meets_a_lock_goes_on_in_the_policy(delete_db: str) -> None:
    path = Path(delete_db.removeprefix("sqlite:///"))
    policy = RecordingRetry()
    with Store(delete_db, retry=policy, checkpoint_every=0) as store:
        store.meta.set_meta("k", "v")
        policy.calls.clear()
        holder = _hold(path, "BEGIN IMMEDIATE", 1.5)
        try:
            assert store.write_one(_WRITE, {"key": "k", "value": "after"}) == 1
        finally:
            holder.join()
        assert policy.calls == ["resume OperationalError"]
        assert store.meta.get_meta("k") == "after"


def test_a_reader_a_listener_began_a_transaction_on_is_not_kept(delete_db: str) -> None:
    with Store(delete_db) as store:
        store.meta.set_meta("k", "v")
        store.read_one(_READ, {"key": "k"}, first_value)
        kept = list(store._idle_readers)
        used: list[Any] = []

        def begin_one(conn: Any, *_args: Any) -> None:
            if not used:  # the listener's own statement fires it again
                used.append(conn)
                conn.execute(text("SELECT 1"))  # autobegins SQLAlchemy's transaction

        event.listen(store.engine, "after_cursor_execute", begin_one)
        assert store.read_one(_READ, {"key": "k"}, first_value) == "v"
        event.remove(store.engine, "after_cursor_execute", begin_one)
        assert used and used[0] in kept
        assert used[0] not in store._idle_readers
        assert store.read_one(_READ, {"key": "k"}, first_value) == "v"
