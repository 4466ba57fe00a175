"""The feed's PostgreSQL triggers work per statement, not per row (issue 35, item 11,
revision hs0006): a 50-row insert and a 500-message delete call the feed's functions a
handful of times each, where per-row triggers called them once per row (and the numbering
at commit once per row too); the feed they write is the same, in commit order."""

from __future__ import annotations

from typing import Any

import psycopg
from sqlalchemy.engine import make_url

from hermes_store.contract import CHANGES_PENDING_TABLE, FEED_OBJECT_PREFIX, FEED_STAMP_TRIGGER
from hermes_store.repositories.changes import ChangeFeed
from hermes_store.repositories.messages import MessageRepository
from hermes_store.repositories.sessions import SessionRepository
from hermes_store.store import Store

ROWS = 500


def _connect(url: str) -> psycopg.Connection[Any]:
    u = make_url(url)
    return psycopg.connect(host=u.host, port=u.port or 5432, user=u.username, dbname=u.database)


def _feed_calls(conn: psycopg.Connection[Any]) -> int:
    """Calls of the feed's functions in this transaction so far."""
    row = conn.execute(
        "SELECT COALESCE(sum(pg_stat_get_xact_function_calls(oid)), 0) FROM pg_proc "
        "WHERE left(proname::text, length(%s)) = %s",
        (FEED_OBJECT_PREFIX, FEED_OBJECT_PREFIX),
    ).fetchone()
    assert row is not None
    return int(row[0])


def _statement(conn: psycopg.Connection[Any], sql: str) -> int:
    """The feed's function calls one statement makes, its numbering at commit included
    (run at once here: the stamp trigger is made IMMEDIATE for the transaction)."""
    conn.execute("SET track_functions = 'all'")
    conn.execute(f"SET CONSTRAINTS {FEED_STAMP_TRIGGER} IMMEDIATE")
    before = _feed_calls(conn)
    conn.execute(sql)
    calls = _feed_calls(conn) - before
    conn.commit()
    return calls


def test_bulk_inserts_and_deletes_cost_the_feed_per_statement(pg_fresh_db: str) -> None:
    with Store(pg_fresh_db) as store:
        SessionRepository(store).create_session("big", "cli")
        start = ChangeFeed(store).latest()
    with _connect(pg_fresh_db) as conn:
        insert = (
            "INSERT INTO messages (session_id, role, content, timestamp) "
            f"SELECT 'big', 'user', 'm' || i, i FROM generate_series(1, {ROWS}) AS i"
        )
        update = "UPDATE messages SET content = content || '!' WHERE session_id = 'big'"
        delete = "DELETE FROM messages WHERE session_id = 'big'"
        calls = {name: _statement(conn, sql) for name, sql in
                 (("insert", insert), ("update", update), ("delete", delete))}  # fmt: skip
        pending = conn.execute(f"SELECT count(*) FROM {CHANGES_PENDING_TABLE}").fetchone()
    assert all(n <= 3 for n in calls.values()), calls
    assert pending == (0,)
    with Store(pg_fresh_db) as store:
        changes = ChangeFeed(store).changes(start, limit=10_000)
    kinds = [c.kind for c in changes]
    assert kinds == (
        ["message.appended"] * ROWS + ["message.updated"] * ROWS + ["message.deleted"] * ROWS
    )
    assert [c.position for c in changes] == list(range(start + 1, start + 1 + 3 * ROWS))
    ids = [c.message_id for c in changes]
    assert ids[:ROWS] == sorted(ids[:ROWS]) and set(ids[:ROWS]) == set(ids[2 * ROWS :])


def test_the_repositories_batches_and_session_deletes_are_in_the_feed(pg_fresh_db: str) -> None:
    with Store(pg_fresh_db) as store:
        feed, sessions = ChangeFeed(store), SessionRepository(store)
        messages = MessageRepository(store)
        sessions.create_session("s", "cli")
        ids = messages.append_messages("s", [{"role": "user", "content": "x"}] * 50)
        from hermes_store.repositories.maintenance import MaintenanceRepository

        assert MaintenanceRepository(store).delete_session("s")
        got = [(c.kind, c.message_id) for c in feed.changes(0, limit=1000)]
    assert got[0] == ("session.created", None)
    assert [m for k, m in got if k == "message.appended"] == ids
    assert sorted(m for k, m in got if k == "message.deleted") == ids  # type: ignore[type-var]
    assert got[-1] == ("session.deleted", None)


def test_a_statements_sessions_are_numbered_in_the_order_it_wrote_them(
    pg_fresh_db: str,
) -> None:
    """One INSERT of several sessions (a copy, a batched import): their session.created
    changes follow the order the statement wrote them in, as per-row capture and SQLite
    number them, not the order of their ids."""
    with Store(pg_fresh_db) as store:
        start = ChangeFeed(store).latest()
    written = ["b-parent", "a-child", "c-other", "0-last"]
    with _connect(pg_fresh_db) as conn:
        conn.execute(
            "INSERT INTO sessions (id, source, started_at) "
            "SELECT id, 'cli', 1000 FROM unnest(%s::text[]) WITH ORDINALITY AS t(id, n) "
            "ORDER BY n",
            (written,),
        )
        conn.commit()
    with Store(pg_fresh_db) as store:
        changes = ChangeFeed(store).changes(start, limit=100)
    created = [c.session_id for c in changes if c.kind == "session.created"]
    assert created == written
