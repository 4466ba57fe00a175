"""Reliability on PostgreSQL: a unit of work that reads a session's state and then
writes must not act on a state another transaction is changing (READ COMMITTED reads the
last committed state; SQLite's BEGIN IMMEDIATE gives this for free). Real server, real
concurrent transactions, no mocks."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest


def _psycopg(url: str) -> Any:
    import psycopg
    from sqlalchemy.engine import make_url

    u = make_url(url)
    return psycopg.connect(
        host=u.host, port=u.port or 5432, user=u.username, dbname=u.database, autocommit=False
    )


@pytest.fixture
def pg_store(pg_fresh_db: str) -> Iterator[Any]:
    from hermes_store.store import Store

    store = Store(pg_fresh_db)
    try:
        yield store
    finally:
        store.close()


def _wait_until_blocked(watcher: Any, dbname: str, thread: threading.Thread) -> bool:
    """True once a hermes-store backend of `dbname` waits on a lock; False if the thread
    ended first. (A failsafe deadline only; nothing here is timed.)"""
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and thread.is_alive():
        row = watcher.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = %s"
            " AND application_name = 'hermes-store' AND wait_event_type = 'Lock'",
            (dbname,),
        ).fetchone()
        if row[0]:
            return True
        time.sleep(0.01)
    return False


@pytest.mark.parametrize("batch", [False, True], ids=["append_message", "append_messages"])
def test_append_waits_for_a_concurrent_compression_close(pg_store: Any, batch: bool) -> None:
    """Another transaction ends the session by compression and has not committed yet
    when an append starts. The append must wait for it and then refuse (the original's
    CompressionSessionClosedError), not add a row to the closed session."""
    from sqlalchemy.engine import make_url

    from hermes_store.errors import CompressionSessionClosedError
    from hermes_store.repositories.messages import MessageRepository
    from hermes_store.repositories.sessions import SessionRepository

    url = pg_store.url.render_as_string(hide_password=False)
    dbname = make_url(url).database
    SessionRepository(pg_store).create_session("s", "cli")
    messages = MessageRepository(pg_store)
    messages.append_message("s", "user", "before")

    closer = _psycopg(url)
    watcher = _psycopg(url)
    watcher.autocommit = True
    outcome: dict[str, Any] = {}

    def append() -> None:
        try:
            if batch:
                outcome["id"] = messages.append_messages(
                    "s", [{"role": "user", "content": "after the close"}]
                )
            else:
                outcome["id"] = messages.append_message("s", "user", "after the close")
        except BaseException as exc:  # noqa: BLE001 (inspected by the test)
            outcome["error"] = exc

    try:
        closer.execute(
            "UPDATE sessions SET ended_at = 2e9, end_reason = 'compression' WHERE id = 's'"
        )
        thread = threading.Thread(target=append)
        thread.start()
        blocked = _wait_until_blocked(watcher, dbname, thread)
        closer.commit()
        thread.join(timeout=60)
        assert not thread.is_alive()
        assert blocked, f"the append did not wait for the closing transaction: {outcome}"
    finally:
        closer.close()
        watcher.close()

    assert "id" not in outcome, f"appended message {outcome.get('id')} to a closed session"
    assert isinstance(outcome.get("error"), CompressionSessionClosedError), outcome
    assert [m["content"] for m in messages.get_messages("s")] == ["before"]
    session = SessionRepository(pg_store).get_session("s")
    assert session is not None and session["message_count"] == 1
