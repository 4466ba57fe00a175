"""Telegram DM topic mode (docs/reference/behaviour.md 15, docs/reference/schema.md 2.9) on
real files."""

from __future__ import annotations

import re
import sqlite3
import time
from typing import Any

import pytest
from sqlalchemy import text

from hermes_store.errors import MigrationError, SessionNotFound
from hermes_store.repositories.telegram import (
    ALREADY_LINKED,
    BINDINGS_DDL,
    MODE_DDL,
    TelegramTopicRepository,
)
from hermes_store.store import Store

TABLES = ("telegram_dm_topic_mode", "telegram_dm_topic_bindings")

V1_BINDINGS = """CREATE TABLE telegram_dm_topic_bindings (
    chat_id TEXT NOT NULL,
    thread_id TEXT NOT NULL,
    user_id TEXT NOT NULL,
    session_key TEXT NOT NULL,
    session_id TEXT NOT NULL REFERENCES sessions(id),
    managed_mode TEXT NOT NULL DEFAULT 'auto',
    linked_at REAL NOT NULL,
    updated_at REAL NOT NULL,
    PRIMARY KEY (chat_id, thread_id)
)"""



@pytest.fixture
def con(raw_con: Any) -> Any:
    """Plain SQL on the store's own database (SQLite file or PostgreSQL)."""
    return raw_con


@pytest.fixture
def tg(store: Store) -> TelegramTopicRepository:
    return TelegramTopicRepository(store)


def add_session(con: sqlite3.Connection, sid: str, **cols: Any) -> None:
    values = {"id": sid, "source": "telegram", "started_at": time.time(), **cols}
    names = ", ".join(values)
    marks = ", ".join("?" for _ in values)
    con.execute(f"INSERT INTO sessions ({names}) VALUES ({marks})", list(values.values()))


def add_message(con: sqlite3.Connection, sid: str, ts: float) -> None:
    con.execute(
        "INSERT INTO messages (session_id, role, content, timestamp) VALUES (?, 'user', 'hi', ?)",
        (sid, ts),
    )


def tables(con: Any) -> set[str]:
    if con.dialect == "postgresql":
        sql = "SELECT table_name FROM information_schema.tables WHERE table_schema = 'public'"
    else:
        sql = "SELECT name FROM sqlite_master WHERE type = 'table'"
    return {r[0] for r in con.execute(sql)}


def meta(con: sqlite3.Connection, key: str = "telegram_dm_topic_schema_version") -> str | None:
    row = con.execute("SELECT value FROM state_meta WHERE key = ?", (key,)).fetchone()
    return None if row is None else row[0]


def stored_sql(con: sqlite3.Connection, name: str) -> str:
    return str(con.execute("SELECT sql FROM sqlite_master WHERE name = ?", (name,)).fetchone()[0])


def norm(sql: str) -> str:
    return re.sub(r"\s+", " ", sql.replace("IF NOT EXISTS ", "")).strip()


def cascade(con: sqlite3.Connection) -> list[str]:
    return [
        r["on_delete"]
        for r in con.execute("PRAGMA foreign_key_list('telegram_dm_topic_bindings')")
        if r["table"] == "sessions"
    ]


def binding_rows(con: sqlite3.Connection) -> list[tuple[Any, ...]]:
    return [
        tuple(r)
        for r in con.execute("SELECT * FROM telegram_dm_topic_bindings ORDER BY chat_id, thread_id")
    ]


def bind(tg: TelegramTopicRepository, sid: str, thread: str = "t1", **kw: Any) -> dict[str, Any]:
    args: dict[str, Any] = {
        "chat_id": "c1",
        "thread_id": thread,
        "user_id": "u1",
        "session_key": f"agent:main:telegram:dm:{sid}",
        "session_id": sid,
    }
    return tg.bind_telegram_topic(**{**args, **kw})


# --------------------------------------------------------------------------- absent


def test_tables_not_created_at_open(store: Store, con: sqlite3.Connection) -> None:
    assert not tables(con) & set(TABLES)
    assert meta(con) is None


def test_readers_before_migration_return_empty(
    tg: TelegramTopicRepository, con: sqlite3.Connection
) -> None:
    add_session(con, "s1", user_id="u1")
    assert tg.is_telegram_topic_mode_enabled("c1") is False
    assert tg.get_telegram_topic_binding("c1", "t1") is None
    assert tg.list_telegram_topic_bindings_for_chat("c1") == []
    assert tg.get_telegram_topic_binding_by_session("s1") is None
    assert tg.is_telegram_session_linked_to_topic("s1") is False
    assert tg.delete_telegram_topic_binding("c1", "t1") is False
    assert tg.disable_telegram_topic_mode(chat_id="c1") is False
    # every telegram session of the user counts as unlinked
    assert [
        r["id"] for r in tg.list_unlinked_telegram_sessions_for_user(chat_id="c1", user_id="u1")
    ] == ["s1"]
    assert not tables(con) & set(TABLES)  # no reader or no-op writer created anything
    assert meta(con) is None


# --------------------------------------------------------------------------- migration


@pytest.mark.sqlite_only
def test_migration_creates_exact_ddl_indexes_and_version(
    tg: TelegramTopicRepository, con: sqlite3.Connection
) -> None:
    assert tg.apply_telegram_topic_migration() is False
    assert set(TABLES) <= tables(con)
    assert norm(stored_sql(con, "telegram_dm_topic_mode")) == norm(MODE_DDL)
    assert norm(stored_sql(con, "telegram_dm_topic_bindings")) == norm(BINDINGS_DDL)
    assert cascade(con) == ["CASCADE"]
    indexes = {
        r["name"]: r["unique"]
        for r in con.execute("PRAGMA index_list('telegram_dm_topic_bindings')")
    }
    assert indexes["idx_telegram_dm_topic_bindings_session"] == 1
    assert indexes["idx_telegram_dm_topic_bindings_user"] == 0

    def cols(ix: str) -> list[str]:
        return [r["name"] for r in con.execute(f"PRAGMA index_info('{ix}')")]

    assert cols("idx_telegram_dm_topic_bindings_session") == ["session_id"]
    assert cols("idx_telegram_dm_topic_bindings_user") == ["user_id", "chat_id"]
    assert meta(con) == "2"


def test_migration_is_idempotent_and_keeps_rows(
    tg: TelegramTopicRepository, con: sqlite3.Connection
) -> None:
    add_session(con, "s1")
    bind(tg, "s1")
    before = binding_rows(con)
    assert tg.apply_telegram_topic_migration() is False
    assert tg.apply_telegram_topic_migration() is False
    assert binding_rows(con) == before
    assert meta(con) == "2"


def _make_v1(con: sqlite3.Connection) -> None:
    con.execute(MODE_DDL)
    con.execute(V1_BINDINGS)
    con.execute(
        "CREATE UNIQUE INDEX idx_telegram_dm_topic_bindings_session "
        "ON telegram_dm_topic_bindings(session_id)"
    )
    con.execute(
        "INSERT INTO state_meta (key, value) VALUES ('telegram_dm_topic_schema_version', '1')"
    )


@pytest.mark.sqlite_only
def test_v1_to_v2_rebuild_keeps_rows_and_adds_cascade(
    store: Store, tg: TelegramTopicRepository, con: sqlite3.Connection
) -> None:
    _make_v1(con)
    for i in range(3):
        add_session(con, f"s{i}")
        con.execute(
            "INSERT INTO telegram_dm_topic_bindings VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            ("c1", f"t{i}", "u1", f"key{i}", f"s{i}", "manual" if i else "auto", 1.5 + i, 2.5),
        )
    con.execute(
        "INSERT INTO telegram_dm_topic_mode (chat_id, user_id, activated_at, updated_at) "
        "VALUES ('c1', 'u1', 1.0, 1.0)"
    )
    before = binding_rows(con)
    assert cascade(con) == ["NO ACTION"]

    assert tg.apply_telegram_topic_migration() is True

    assert binding_rows(con) == before
    assert cascade(con) == ["CASCADE"]
    assert norm(stored_sql(con, "telegram_dm_topic_bindings")) == norm(BINDINGS_DDL)
    names = {r["name"] for r in con.execute("PRAGMA index_list('telegram_dm_topic_bindings')")}
    assert {
        "idx_telegram_dm_topic_bindings_session",
        "idx_telegram_dm_topic_bindings_user",
    } <= names
    assert "telegram_dm_topic_bindings_v1" not in tables(con)
    assert meta(con) == "2"
    assert tg.is_telegram_topic_mode_enabled("c1") is True
    assert con.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    # the raw connection went back to the pool with foreign keys on again
    for _ in range(6):  # more than the pool size: every pooled connection is checked
        with store.read() as s:
            assert s.execute(text("PRAGMA foreign_keys")).scalar_one() == 1
    assert tg.apply_telegram_topic_migration() is False


@pytest.mark.sqlite_only
def test_v1_rebuild_with_orphan_binding_changes_nothing(
    tg: TelegramTopicRepository, con: sqlite3.Connection
) -> None:
    _make_v1(con)
    con.execute("PRAGMA foreign_keys=OFF")
    con.execute(
        "INSERT INTO telegram_dm_topic_bindings VALUES "
        "('c1', 't1', 'u1', 'k', 'gone', 'auto', 1.0, 1.0)"
    )
    con.execute("PRAGMA foreign_keys=ON")
    with pytest.raises(MigrationError, match="no longer exist"):
        tg.apply_telegram_topic_migration()
    assert cascade(con) == ["NO ACTION"]
    assert len(binding_rows(con)) == 1
    assert meta(con) == "1"


# --------------------------------------------------------------------------- cascade


def test_deleting_a_session_removes_its_binding(
    store: Store, tg: TelegramTopicRepository, con: sqlite3.Connection
) -> None:
    add_session(con, "s1")
    add_session(con, "s2")
    bind(tg, "s1", "t1")
    bind(tg, "s2", "t2")
    store.write(lambda s: s.execute(text("DELETE FROM sessions WHERE id = 's1'")))
    assert tg.get_telegram_topic_binding("c1", "t1") is None
    assert tg.get_telegram_topic_binding("c1", "t2") is not None


# --------------------------------------------------------------------------- mode


def test_enable_is_the_opt_in_and_upserts(
    tg: TelegramTopicRepository, con: sqlite3.Connection
) -> None:
    row = tg.enable_telegram_topic_mode(
        chat_id=42, user_id=7, has_topics_enabled=True, allows_users_to_create_topics=False
    )
    assert set(TABLES) <= tables(con) and meta(con) == "2"
    assert row["chat_id"] == "42" and row["user_id"] == "7" and row["enabled"] == 1
    assert row["has_topics_enabled"] == 1 and row["allows_users_to_create_topics"] == 0
    assert row["capability_checked_at"] is not None
    assert tg.is_telegram_topic_mode_enabled(42) is True
    assert tg.is_telegram_topic_mode_enabled("42", user_id="7") is True
    assert tg.is_telegram_topic_mode_enabled("42", user_id="8") is False

    tg.disable_telegram_topic_mode(chat_id=42)
    again = tg.enable_telegram_topic_mode(chat_id=42, user_id=7, intro_message_id=99)
    assert again["enabled"] == 1
    assert again["activated_at"] == row["activated_at"]  # kept on re-enable
    assert again["updated_at"] >= row["updated_at"]
    assert again["has_topics_enabled"] == 1  # None keeps the stored flag
    assert again["intro_message_id"] == "99"


def test_disable_clears_bindings_by_default(
    tg: TelegramTopicRepository, con: sqlite3.Connection
) -> None:
    add_session(con, "s1")
    add_session(con, "s2")
    tg.enable_telegram_topic_mode(chat_id="c1", user_id="u1")
    bind(tg, "s1", "t1")
    bind(tg, "s2", "t9", chat_id="other")
    assert tg.disable_telegram_topic_mode(chat_id="c1") is True
    assert tg.is_telegram_topic_mode_enabled("c1") is False
    assert tg.list_telegram_topic_bindings_for_chat("c1") == []
    assert tg.get_telegram_topic_binding("other", "t9") is not None  # other chats untouched


def test_disable_can_keep_bindings(tg: TelegramTopicRepository, con: sqlite3.Connection) -> None:
    add_session(con, "s1")
    tg.enable_telegram_topic_mode(chat_id="c1", user_id="u1")
    bind(tg, "s1")
    assert tg.disable_telegram_topic_mode(chat_id="c1", clear_bindings=False) is True
    assert tg.is_telegram_topic_mode_enabled("c1") is False
    assert tg.get_telegram_topic_binding("c1", "t1") is not None
    assert tg.disable_telegram_topic_mode(chat_id="unknown") is False


# --------------------------------------------------------------------------- bindings


def test_bind_creates_tables_and_returns_row(
    tg: TelegramTopicRepository, con: sqlite3.Connection
) -> None:
    add_session(con, "s1")
    row = tg.bind_telegram_topic(
        chat_id=1, thread_id=2, user_id=3, session_key="k", session_id="s1"
    )
    assert meta(con) == "2"
    assert row["chat_id"] == "1" and row["thread_id"] == "2" and row["user_id"] == "3"
    assert row["managed_mode"] == "auto" and row["linked_at"] == row["updated_at"]
    assert tg.get_telegram_topic_binding(1, 2) == row
    assert tg.get_telegram_topic_binding_by_session("s1") == row


def test_rebinding_same_topic_and_session_is_idempotent(
    tg: TelegramTopicRepository, con: sqlite3.Connection
) -> None:
    add_session(con, "s1")
    first = bind(tg, "s1")
    second = bind(tg, "s1", managed_mode="manual")
    assert second["linked_at"] == first["linked_at"]
    assert second["managed_mode"] == "manual"
    assert len(binding_rows(con)) == 1


def test_session_linked_elsewhere_raises(
    tg: TelegramTopicRepository, con: sqlite3.Connection
) -> None:
    add_session(con, "s1")
    bind(tg, "s1", "t1")
    with pytest.raises(ValueError, match=f"^{ALREADY_LINKED}$"):
        bind(tg, "s1", "t2")
    with pytest.raises(ValueError, match=ALREADY_LINKED):
        bind(tg, "s1", "t1", chat_id="c2")
    assert tg.get_telegram_topic_binding("c1", "t2") is None


def test_topic_can_be_pointed_at_a_new_session(
    tg: TelegramTopicRepository, con: sqlite3.Connection
) -> None:
    add_session(con, "s1")
    add_session(con, "s2")
    first = bind(tg, "s1")
    second = bind(tg, "s2")
    assert second["session_id"] == "s2" and second["linked_at"] >= first["linked_at"]
    assert tg.is_telegram_session_linked_to_topic("s1") is False
    assert tg.is_telegram_session_linked_to_topic("s2") is True


def test_bind_to_missing_session_raises(tg: TelegramTopicRepository) -> None:
    with pytest.raises(SessionNotFound):
        bind(tg, "nope")


def test_list_bindings_newest_first_and_delete(
    tg: TelegramTopicRepository, con: sqlite3.Connection
) -> None:
    for i in range(3):
        add_session(con, f"s{i}")
        bind(tg, f"s{i}", f"t{i}")
    for thread, ts in (("t0", 5.0), ("t1", 9.0), ("t2", 5.0)):
        con.execute(
            "UPDATE telegram_dm_topic_bindings SET updated_at = ? WHERE thread_id = ?", (ts, thread)
        )
    listed = tg.list_telegram_topic_bindings_for_chat("c1")
    assert [r["thread_id"] for r in listed] == ["t1", "t0", "t2"]  # ties by thread_id
    assert tg.list_telegram_topic_bindings_for_chat("c2") == []
    assert tg.delete_telegram_topic_binding("c1", "t1") is True
    assert tg.delete_telegram_topic_binding("c1", "t1") is False
    assert tg.is_telegram_session_linked_to_topic("s1") is False
    assert con.execute("SELECT 1 FROM sessions WHERE id = 's1'").fetchone() is not None


def test_list_unlinked_sessions_for_user(
    tg: TelegramTopicRepository, con: sqlite3.Connection
) -> None:
    add_session(con, "old", user_id="u1", chat_id="c1", started_at=10.0)
    add_session(con, "busy", user_id="u1", chat_id="c1", started_at=5.0)
    add_message(con, "busy", 50.0)  # started earlier, active later
    add_session(con, "nochat", user_id="u1", started_at=20.0)
    add_session(con, "Upper", source="Telegram", user_id="u1", chat_id="c1", started_at=1.0)
    add_session(con, "linked", user_id="u1", chat_id="c1", started_at=30.0)
    add_session(con, "group", user_id="u1", chat_id="g1", started_at=40.0)
    add_session(con, "other-user", user_id="u2", chat_id="c1", started_at=40.0)
    add_session(con, "cli", source="cli", user_id="u1", started_at=40.0)
    bind(tg, "linked")

    rows = tg.list_unlinked_telegram_sessions_for_user(chat_id="c1", user_id="u1")
    assert [r["id"] for r in rows] == ["busy", "nochat", "old", "Upper"]
    assert rows[0]["last_active"] == 50.0 and rows[1]["last_active"] == 20.0
    assert "title" in rows[0]  # full session rows
    limited = tg.list_unlinked_telegram_sessions_for_user(chat_id="c1", user_id="u1", limit=2)
    assert [r["id"] for r in limited] == ["busy", "nochat"]
    assert tg.list_unlinked_telegram_sessions_for_user(chat_id="c1", user_id="u1", limit=0) == []


def test_postgresql_tables_have_wide_types_cascade_and_indexes(pg_fresh_db: str) -> None:
    store = Store(pg_fresh_db)
    try:
        tg = TelegramTopicRepository(store)
        assert tg.apply_telegram_topic_migration() is False
        assert tg.apply_telegram_topic_migration() is False  # idempotent
        with store.engine.connect() as conn:

            def rows(sql: str) -> list[Any]:
                return list(conn.execute(text(sql)).all())

            types = {
                (table, column): kind
                for table, column, kind in rows(
                    "SELECT table_name, column_name, data_type FROM information_schema.columns "
                    "WHERE table_name IN ('telegram_dm_topic_mode', 'telegram_dm_topic_bindings')"
                )
            }
            rules = rows(
                "SELECT rc.delete_rule FROM information_schema.referential_constraints rc "
                "JOIN information_schema.table_constraints tc "
                "ON tc.constraint_name = rc.constraint_name "
                "WHERE tc.table_name = 'telegram_dm_topic_bindings'"
            )
            indexes = rows(
                "SELECT indexname FROM pg_indexes WHERE tablename = 'telegram_dm_topic_bindings'"
            )
            version = rows(
                "SELECT value FROM state_meta WHERE key = 'telegram_dm_topic_schema_version'"
            )
    finally:
        store.close()
    assert types[("telegram_dm_topic_mode", "activated_at")] == "double precision"
    assert types[("telegram_dm_topic_mode", "enabled")] == "bigint"
    assert types[("telegram_dm_topic_bindings", "linked_at")] == "double precision"
    assert [r[0] for r in rules] == ["CASCADE"]
    assert {"idx_telegram_dm_topic_bindings_session", "idx_telegram_dm_topic_bindings_user"} <= {
        r[0] for r in indexes
    }
    assert [r[0] for r in version] == ["2"]


def test_deleting_the_last_binding_turns_topic_mode_off(
    tg: TelegramTopicRepository, con: Any
) -> None:
    add_session(con, "s1")
    add_session(con, "s2")
    tg.enable_telegram_topic_mode(chat_id="c1", user_id="u1")
    tg.enable_telegram_topic_mode(chat_id="c2", user_id="u1")
    bind(tg, "s1", "t1")
    bind(tg, "s2", "t2")
    assert tg.delete_telegram_topic_binding("c1", "t1") is True
    assert tg.is_telegram_topic_mode_enabled("c1") is True  # t2 is still bound
    assert tg.delete_telegram_topic_binding("c1", "t9") is False
    assert tg.is_telegram_topic_mode_enabled("c1") is True  # nothing was deleted
    assert tg.delete_telegram_topic_binding("c1", "t2") is True
    assert tg.is_telegram_topic_mode_enabled("c1") is False
    assert tg.is_telegram_topic_mode_enabled("c2") is True  # another chat is untouched


def test_unlinked_sessions_carry_the_listing_preview(
    tg: TelegramTopicRepository, con: Any
) -> None:
    add_session(con, "talk", user_id="u1", chat_id="c1", started_at=10.0)
    add_session(con, "quiet", user_id="u1", chat_id="c1", started_at=5.0)
    con.execute(
        "INSERT INTO messages (session_id, role, content, timestamp) VALUES (?, ?, ?, ?)",
        ("talk", "user", "where did we leave the\ndeploy script? " + "x" * 80, 11.0),
    )
    rows = tg.list_unlinked_telegram_sessions_for_user(chat_id="c1", user_id="u1")
    previews = {r["id"]: r["preview"] for r in rows}
    assert previews == {
        "talk": "where did we leave the deploy script? " + "x" * 22 + "...",
        "quiet": "",
    }
