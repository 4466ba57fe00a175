"""hermes_store_session_activity on PostgreSQL: a statement that deletes many messages
recomputes each touched session's last activity once, not once per row (the rows a
statement deleted stay in the timestamp index until its transaction ends, so a per-row
recount walks back over all of them), and the value it leaves is the one the full
recount gives."""

from __future__ import annotations

from typing import Any

import psycopg
from sqlalchemy.engine import make_url

from hermes_store.contract import ACTIVITY_OBJECT_PREFIX, ACTIVITY_TABLE
from hermes_store.repositories.sessions import SessionRepository
from hermes_store.store import Store

ROWS = 400


def _connect(url: str) -> psycopg.Connection[Any]:
    u = make_url(url)
    return psycopg.connect(host=u.host, port=u.port or 5432, user=u.username, dbname=u.database)


def _activity_calls(conn: psycopg.Connection[Any]) -> int:
    row = conn.execute(
        "SELECT COALESCE(sum(pg_stat_get_xact_function_calls(oid)), 0) FROM pg_proc "
        "WHERE left(proname::text, length(%s)) = %s",
        (ACTIVITY_OBJECT_PREFIX, ACTIVITY_OBJECT_PREFIX),
    ).fetchone()
    assert row is not None
    return int(row[0])


def _last_active(conn: psycopg.Connection[Any], session_id: str) -> float | None:
    row = conn.execute(
        f"SELECT last_active FROM {ACTIVITY_TABLE} WHERE session_id = %s", (session_id,)
    ).fetchone()
    return None if row is None else float(row[0])


def test_a_bulk_delete_recounts_each_session_once(pg_fresh_db: str) -> None:
    with Store(pg_fresh_db) as store:
        sessions = SessionRepository(store)
        sessions.create_session("big", "cli")
        sessions.create_session("other", "cli")
    with _connect(pg_fresh_db) as conn:
        for sid in ("big", "other"):
            conn.execute(
                "INSERT INTO messages (session_id, role, content, timestamp) "
                "SELECT %s, 'user', 'm' || i, 1000000 + i FROM generate_series(1, %s) AS i",
                (sid, ROWS),
            )
        conn.commit()
        assert _last_active(conn, "big") == 1000000 + ROWS
        conn.execute("SET track_functions = 'all'")
        before = _activity_calls(conn)
        # every row but the oldest of "big", and the newest half of "other"
        conn.execute(
            "DELETE FROM messages WHERE (session_id = 'big' AND timestamp > 1000001)"
            " OR (session_id = 'other' AND timestamp > %s)",
            (1000000 + ROWS // 2,),
        )
        calls = _activity_calls(conn) - before
        conn.commit()
        assert calls == 1, calls
        assert _last_active(conn, "big") == 1000001
        assert _last_active(conn, "other") == 1000000 + ROWS // 2
        # a delete that empties a session falls back to when it started
        conn.execute("DELETE FROM messages WHERE session_id = 'big'")
        conn.commit()
        started = conn.execute("SELECT started_at FROM sessions WHERE id = 'big'").fetchone()
        assert started is not None
        assert _last_active(conn, "big") == float(started[0])
