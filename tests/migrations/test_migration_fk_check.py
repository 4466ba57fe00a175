"""The migration transaction's foreign-key guard (FKs are off during a run, so the run
checks that it added no violation) without reading every message: `messages` is checked
in full only when the run removed session ids."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from hermes_store import migrate
from hermes_store.errors import MigrationError
from hermes_store.migration import adoption

pytestmark = pytest.mark.sqlite_only


def _count(path: Path, sql: str) -> int:
    con = sqlite3.connect(str(path))
    try:
        return int(con.execute(sql).fetchone()[0])
    finally:
        con.close()


def test_an_old_orphaned_message_does_not_block_the_upgrade(legacy_db, db) -> None:  # type: ignore[no-untyped-def]
    path = legacy_db(22)
    con = db.raw(path, foreign_keys=False)
    try:
        con.execute(
            "INSERT INTO messages (session_id, role, content, timestamp) "
            "VALUES ('gone', 'user', 'left behind', 1.0)"
        )
    finally:
        con.close()
    report = migrate.upgrade(db.url_for(path))
    assert report.after == migrate.HEAD
    orphans = "SELECT COUNT(*) FROM messages WHERE session_id NOT IN (SELECT id FROM sessions)"
    assert _count(path, orphans) == 1


def test_a_run_that_removes_a_session_with_messages_is_refused(
    legacy_db, db, monkeypatch: pytest.MonkeyPatch
) -> None:  # type: ignore[no-untyped-def]
    """Stands in for a revision that would delete or re-key sessions (none does): the
    guard notices the changed session ids and checks messages in full."""
    path = legacy_db(22)
    session = (
        sqlite3.connect(str(path))
        .execute("SELECT session_id FROM messages ORDER BY id LIMIT 1")
        .fetchone()[0]
    )
    inspect_shape = adoption.inspect_shape

    def removing_a_session(conn):  # type: ignore[no-untyped-def]
        shape = inspect_shape(conn)
        in_migration = conn.exec_driver_sql("PRAGMA foreign_keys").scalar() == 0
        if in_migration and shape.kind == "legacy":
            # only messages are left pointing at it: the other child tables are small and
            # always checked
            tables = conn.exec_driver_sql(
                "SELECT name FROM sqlite_master WHERE type = 'table' AND name <> 'messages'"
            ).scalars()
            for table in list(tables):
                for fk in conn.exec_driver_sql(f'PRAGMA foreign_key_list("{table}")').all():
                    if fk[2] == "sessions":
                        conn.exec_driver_sql(
                            f'DELETE FROM "{table}" WHERE "{fk[3]}" = ?',  # noqa: S608
                            (session,),
                        )
            conn.exec_driver_sql("DELETE FROM sessions WHERE id = ?", (session,))
        return shape

    monkeypatch.setattr(adoption, "inspect_shape", removing_a_session)
    with pytest.raises(MigrationError, match="foreign-key violations"):
        migrate.upgrade(db.url_for(path))
    assert _count(path, f"SELECT COUNT(*) FROM sessions WHERE id = '{session}'") == 1
    assert _count(path, "SELECT MAX(version) FROM schema_version") == 22
