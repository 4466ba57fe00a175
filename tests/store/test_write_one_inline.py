"""`Store.write_one` on SQLite makes its first attempt itself, at the driver of the kept
writer: a write that succeeds builds no `DriverWrite` and passes through neither
`Store.write` nor the retry policy. What a write guarantees stays: the write lock, the
rollback of a failed statement with the writer still usable, typed errors, the write
count behind the PASSIVE checkpoint, a Connection where something listens, and the
refusals of a read-only or closed store. On both SQLite drivers and journal modes."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import pytest
from helpers.statements import RecordingRetry
from sqlalchemy import event, text
from sqlalchemy.exc import IntegrityError

from hermes_store import store as store_module
from hermes_store.config import JOURNAL_ENV
from hermes_store.errors import ReadOnlyStore, StoreClosed
from hermes_store.runtime.engine import DriverWrite, Prepared
from hermes_store.store import Store

pytestmark = pytest.mark.usefixtures("sqlite_driver")


_WRITE = Prepared(text("UPDATE state_meta SET value = :value WHERE key = :key"))
#: state_meta.key is the primary key: renaming one key onto another fails in SQLite
_CLASH = Prepared(text("UPDATE state_meta SET key = :to WHERE key = :key"))


@pytest.fixture(autouse=True)
def _journal_kept(journal: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The file stays in the journal mode of this run (a fixed SQLite would switch it)."""
    monkeypatch.setenv(JOURNAL_ENV, journal)


@pytest.fixture
def built(monkeypatch: pytest.MonkeyPatch) -> list[DriverWrite]:
    """Every DriverWrite the store module builds."""
    made: list[DriverWrite] = []

    def recording(*args: Any, **kwargs: Any) -> DriverWrite:
        write = DriverWrite(*args, **kwargs)
        made.append(write)
        return write

    monkeypatch.setattr(store_module, "DriverWrite", recording)
    return made


@pytest.fixture
def store(journal_db: str) -> Iterator[Store]:
    with Store(journal_db, retry=RecordingRetry(), checkpoint_every=0) as store:
        store.meta.set_meta("k", "v")
        store.meta.set_meta("other", "o")
        yield store


def _entered_write(store: Store, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    entered: list[str] = []
    write = store.write

    def recording(work: Any, **options: Any) -> Any:
        entered.append("write")
        return write(work, **options)

    monkeypatch.setattr(store, "write", recording)
    return entered


def _policy(store: Store) -> list[str]:
    assert isinstance(store.retry, RecordingRetry)
    return store.retry.calls


def test_a_write_that_succeeds_builds_nothing_per_call(
    store: Store, built: list[DriverWrite], monkeypatch: pytest.MonkeyPatch
) -> None:
    entered = _entered_write(store, monkeypatch)
    _policy(store).clear()
    before = store.writes
    for n in range(5):
        assert store.write_one(_WRITE, {"key": "k", "value": f"v{n}"}) == 1
    assert store.write_one(_WRITE, {"key": "none", "value": "x"}) == 0
    assert built == [] and entered == [] and _policy(store) == []
    assert store.writes == before + 6  # counted, as the PASSIVE checkpoint's rate needs
    assert store.meta.get_meta("k") == "v4"


def test_a_failed_statement_is_rolled_back_raised_and_not_retried(store: Store) -> None:
    _policy(store).clear()
    with pytest.raises(IntegrityError):
        store.write_one(_CLASH, {"key": "k", "to": "other"})
    assert _policy(store) == ["resume IntegrityError"]  # entered, and raised at once
    writer = store._write_conn
    assert writer is not None and not writer.invalidated
    assert not writer.connection.dbapi_connection.in_transaction  # type: ignore[union-attr]
    assert store.write_one(_WRITE, {"key": "k", "value": "after"}) == 1
    assert store.meta.get_meta("k") == "after"
    assert store.meta.get_meta("other") == "o"


def test_a_write_waits_for_the_store_write_lock(store: Store) -> None:
    done = threading.Event()

    def write() -> None:
        store.write_one(_WRITE, {"key": "k", "value": "late"})
        done.set()

    with store.write_lock:
        thread = threading.Thread(target=write)
        thread.start()
        assert not done.wait(0.3)  # it cannot write while the lock is held here
        assert store.meta.get_meta("k") == "v"
    thread.join(10)
    assert done.is_set()
    assert store.meta.get_meta("k") == "late"


def test_a_listener_sees_the_write_through_a_connection(
    store: Store, built: list[DriverWrite]
) -> None:
    sent: list[str] = []
    begun: list[object] = []
    event.listen(store.engine, "before_cursor_execute", lambda *args: sent.append(args[2]))
    event.listen(store.engine, "commit", lambda conn: begun.append(conn))
    assert store.write_one(_WRITE, {"key": "k", "value": "seen"}) == 1
    assert sent == ["BEGIN IMMEDIATE", _WRITE.sql(store.engine.dialect)]
    assert len(begun) == 1  # SQLAlchemy's transaction, committed
    assert built == []  # declined before any DriverWrite: the Connection path is `work`
    assert store.meta.get_meta("k") == "seen"


def test_a_read_only_or_closed_store_refuses(journal_db: str) -> None:
    with Store(journal_db, read_only=True) as reader:
        with pytest.raises(ReadOnlyStore):
            reader.write_one(_WRITE, {"key": "k", "value": "x"})
    store = Store(journal_db)
    store.close()
    with pytest.raises(StoreClosed):
        store.write_one(_WRITE, {"key": "k", "value": "x"})
