"""Telegram DM topic mode (opt-in): `telegram_dm_topic_mode` and
`telegram_dm_topic_bindings`.

docs/reference/behaviour.md 15, docs/reference/schema.md 2.9. The two tables exist only
after a user opts in (`/topic`): nothing here creates them implicitly except the
explicit opt-in paths (`apply_telegram_topic_migration`, `enable_telegram_topic_mode`,
`bind_telegram_topic`). Every reader returns an empty result (None, False, []) while the
tables are missing.

These tables are owned by the Telegram module and are excluded from the ORM metadata and
from Alembic; this module holds their one definition. On SQLite they are created from raw
DDL, exactly the text the original writes (SQLite keeps that text in sqlite_master), and
the migration also rebuilds a v1 bindings table (it needs `PRAGMA foreign_keys` and
`PRAGMA foreign_key_list`). `TABLES` describes the same columns for SQLAlchemy Core: the
column list `hermes-store copy` reads and writes, and, compiled, the PostgreSQL DDL (a
database the original never wrote: 8-byte integers and floats, as the migrations use
there). A test keeps the raw text and `TABLES` in step.
"""

from __future__ import annotations

import logging
import sqlite3
from collections.abc import Callable
from functools import cache
from typing import TYPE_CHECKING, Any, TypeVar, cast

from sqlalchemy import (
    BigInteger,
    Column,
    Connection,
    ForeignKey,
    MetaData,
    Table,
    bindparam,
    case,
    column,
    exists,
    func,
    insert,
    inspect,
    or_,
    select,
    table,
    text,
)
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.engine import Dialect
from sqlalchemy.exc import OperationalError
from sqlalchemy.schema import CreateTable

from ..errors import MigrationError, SessionNotFound
from ..models.base import Integer_, Real_, Text_
from ..runtime.backends import dialect_for
from ..runtime.engine import Prepared, all_dicts, first_value
from ._dialect import PreparedUpsert
from ._paging import bound_limit
from ._sql import alias
from ._state_meta import SQLITE_SET_SQL, set_value
from ._tables import SESSIONS
from .encoding import now, scrub
from .listing import rich_rows, rich_select

if TYPE_CHECKING:
    from ..store import Store

log = logging.getLogger(__name__)
T = TypeVar("T")

MODE_TABLE = "telegram_dm_topic_mode"
BINDINGS_TABLE = "telegram_dm_topic_bindings"
SCHEMA_VERSION_KEY = "telegram_dm_topic_schema_version"
SCHEMA_VERSION = "2"
ALREADY_LINKED = "session is already linked to another Telegram topic"

MODE_DDL = """CREATE TABLE IF NOT EXISTS telegram_dm_topic_mode (
    chat_id TEXT PRIMARY KEY,
    user_id TEXT NOT NULL,
    enabled INTEGER NOT NULL DEFAULT 1,
    activated_at REAL NOT NULL,
    updated_at REAL NOT NULL,
    has_topics_enabled INTEGER,
    allows_users_to_create_topics INTEGER,
    capability_checked_at REAL,
    intro_message_id TEXT,
    pinned_message_id TEXT
)"""

_BINDINGS_COLUMNS = """(
    chat_id TEXT NOT NULL,
    thread_id TEXT NOT NULL,
    user_id TEXT NOT NULL,
    session_key TEXT NOT NULL,
    session_id TEXT NOT NULL REFERENCES sessions(id) ON DELETE CASCADE,
    managed_mode TEXT NOT NULL DEFAULT 'auto',
    linked_at REAL NOT NULL,
    updated_at REAL NOT NULL,
    PRIMARY KEY (chat_id, thread_id)
)"""

BINDINGS_DDL = f"CREATE TABLE IF NOT EXISTS telegram_dm_topic_bindings {_BINDINGS_COLUMNS}"

INDEX_DDL = (
    "CREATE UNIQUE INDEX IF NOT EXISTS idx_telegram_dm_topic_bindings_session "
    "ON telegram_dm_topic_bindings(session_id)",
    "CREATE INDEX IF NOT EXISTS idx_telegram_dm_topic_bindings_user "
    "ON telegram_dm_topic_bindings(user_id, chat_id)",
)


_METADATA = MetaData()
# the parent of the bindings' foreign key, for compiling it (copy never reads it here)
Table("sessions", _METADATA, Column("id", Text_, primary_key=True))
MODE = Table(
    MODE_TABLE,
    _METADATA,
    Column("chat_id", Text_, primary_key=True),
    Column("user_id", Text_, nullable=False),
    Column("enabled", Integer_, nullable=False, server_default=text("1")),
    Column("activated_at", Real_, nullable=False),
    Column("updated_at", Real_, nullable=False),
    Column("has_topics_enabled", Integer_),
    Column("allows_users_to_create_topics", Integer_),
    Column("capability_checked_at", Real_),
    Column("intro_message_id", Text_),
    Column("pinned_message_id", Text_),
)
BINDINGS = Table(
    BINDINGS_TABLE,
    _METADATA,
    Column("chat_id", Text_, primary_key=True),
    Column("thread_id", Text_, primary_key=True),
    Column("user_id", Text_, nullable=False),
    Column("session_key", Text_, nullable=False),
    Column("session_id", Text_, ForeignKey("sessions.id", ondelete="CASCADE"), nullable=False),
    Column("managed_mode", Text_, nullable=False, server_default=text("'auto'")),
    Column("linked_at", Real_, nullable=False),
    Column("updated_at", Real_, nullable=False),
)
#: Both tables, parents first.
TABLES = (MODE, BINDINGS)

#: No v1 shape ever existed on PostgreSQL, so there is nothing to rebuild there.
_PG: Dialect = postgresql.dialect()  # type: ignore[no-untyped-call]
POSTGRESQL_DDL = (
    *(str(CreateTable(t, if_not_exists=True).compile(dialect=_PG)) for t in TABLES),
    *INDEX_DDL,
)


def create_tables(conn: Connection) -> None:
    """Both tables and their indexes as this dialect's opt-in makes them (no lock, no
    schema-version row: for a copy target, which receives state_meta from its source)."""
    if not dialect_for(conn).shared_with_the_original:
        for ddl in POSTGRESQL_DDL:
            conn.exec_driver_sql(ddl)
        return
    for ddl in (MODE_DDL, BINDINGS_DDL, *INDEX_DDL):
        conn.exec_driver_sql(ddl)


#: Serialises concurrent opt-ins on PostgreSQL (two CREATE TABLE IF NOT EXISTS racing can
#: both pass the check and one then fails on the catalog's unique index).
_PG_MIGRATION_LOCK = "SELECT pg_advisory_xact_lock(hashtext('hermes_store.telegram_topics'))"

_BINDING_FIELDS = (
    "chat_id",
    "thread_id",
    "user_id",
    "session_key",
    "session_id",
    "managed_mode",
    "linked_at",
    "updated_at",
)


def _bind_statement(dialect_insert: Any) -> Any:
    """Bind a topic to a session: a new binding, or the topic's binding moved to this
    session (linked_at kept when the session is the one it already had)."""
    b = BINDINGS.c
    given = ("chat_id", "thread_id", "user_id", "session_key", "session_id", "managed_mode")
    stmt = dialect_insert(BINDINGS).values(
        **{name: bindparam(name) for name in given},
        linked_at=bindparam("ts"),
        updated_at=bindparam("ts"),
    )
    new = stmt.excluded
    return stmt.on_conflict_do_update(
        index_elements=[b.chat_id, b.thread_id],
        set_={
            "user_id": new.user_id,
            "session_key": new.session_key,
            "linked_at": case((b.session_id == new.session_id, b.linked_at), else_=new.linked_at),
            "session_id": new.session_id,
            "managed_mode": new.managed_mode,
            "updated_at": new.updated_at,
        },
    )


_BIND = PreparedUpsert(_bind_statement)
#: The SQLite migration's copy of the v1 table's rows into the v2 table.
_COPY_V1_BINDINGS = str(
    insert(BINDINGS)
    .from_select(
        _BINDING_FIELDS,
        select(*(column(name) for name in _BINDING_FIELDS)).select_from(
            table("telegram_dm_topic_bindings_v1")
        ),
    )
    .compile(dialect=sqlite.dialect())
)


def _flag(value: bool | None) -> int | None:
    return None if value is None else int(bool(value))


def _id(value: object) -> str:
    """Telegram ids arrive as ints or strings; they are stored as text either way."""
    return cast(str, scrub(str(value)))


def _has(conn: Connection, *tables: str) -> bool:
    insp = inspect(conn)
    return all(insp.has_table(t) for t in tables)


def _needs_cascade_rebuild(con: sqlite3.Connection) -> bool:
    """True when the bindings table exists but its session_id FK lacks ON DELETE
    CASCADE (the v1 shape), or has no FK to sessions at all."""
    if not con.execute(
        "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?", (BINDINGS_TABLE,)
    ).fetchone():
        return False
    rows = con.execute(f"PRAGMA foreign_key_list('{BINDINGS_TABLE}')").fetchall()
    # foreign_key_list columns: id, seq, table, from, to, on_update, on_delete, match
    return not any(
        row[2] == "sessions" and row[3] == "session_id" and str(row[6]).upper() == "CASCADE"
        for row in rows
    )


def _create_on_postgresql(conn: Connection) -> None:
    conn.execute(text(_PG_MIGRATION_LOCK))
    for ddl in POSTGRESQL_DDL:
        conn.execute(text(ddl))
    set_value(conn, SCHEMA_VERSION_KEY, SCHEMA_VERSION)


def _enable_mode(conn: Connection, params: dict[str, Any]) -> dict[str, Any]:
    conn.execute(
        text(
            """
            INSERT INTO telegram_dm_topic_mode AS m (
                chat_id, user_id, enabled, activated_at, updated_at,
                has_topics_enabled, allows_users_to_create_topics,
                capability_checked_at, intro_message_id, pinned_message_id
            ) VALUES (:chat_id, :user_id, 1, :ts, :ts, :has, :allows, :checked,
                      :intro, :pinned)
            ON CONFLICT(chat_id) DO UPDATE SET
                user_id = excluded.user_id,
                enabled = 1,
                updated_at = excluded.updated_at,
                has_topics_enabled =
                    COALESCE(excluded.has_topics_enabled, m.has_topics_enabled),
                allows_users_to_create_topics = COALESCE(
                    excluded.allows_users_to_create_topics,
                    m.allows_users_to_create_topics),
                capability_checked_at =
                    COALESCE(excluded.capability_checked_at, m.capability_checked_at),
                intro_message_id = COALESCE(excluded.intro_message_id, m.intro_message_id),
                pinned_message_id =
                    COALESCE(excluded.pinned_message_id, m.pinned_message_id)
            """
        ),
        params,
    )
    row = (
        conn.execute(
            text("SELECT * FROM telegram_dm_topic_mode WHERE chat_id = :c"),
            {"c": params["chat_id"]},
        )
        .mappings()
        .one()
    )
    return dict(row)


def _disable_mode(conn: Connection, chat: str, clear_bindings: bool) -> bool:
    found = False
    if _has(conn, MODE_TABLE):
        result = conn.execute(
            text(
                "UPDATE telegram_dm_topic_mode SET enabled = 0, updated_at = :ts WHERE chat_id = :c"
            ),
            {"ts": now(), "c": chat},
        )
        found = cast(Any, result).rowcount > 0
    if clear_bindings and _has(conn, BINDINGS_TABLE):
        conn.execute(text("DELETE FROM telegram_dm_topic_bindings WHERE chat_id = :c"), {"c": chat})
    return found


def _delete_binding(conn: Connection, params: dict[str, str]) -> bool:
    if not _has(conn, BINDINGS_TABLE):
        return False
    result = conn.execute(
        text("DELETE FROM telegram_dm_topic_bindings WHERE chat_id = :c AND thread_id = :t"),
        params,
    )
    if not cast(Any, result).rowcount:
        return False
    if _has(conn, MODE_TABLE):
        conn.execute(
            text(
                "UPDATE telegram_dm_topic_mode SET enabled = 0, updated_at = :ts "
                "WHERE chat_id = :c AND enabled != 0 AND NOT EXISTS ("
                "SELECT 1 FROM telegram_dm_topic_bindings b WHERE b.chat_id = :c)"
            ),
            {"c": params["c"], "ts": now()},
        )
    return True


def _bind_topic(conn: Connection, params: dict[str, Any], session_id: str) -> dict[str, Any]:
    exists = conn.execute(
        text("SELECT 1 FROM sessions WHERE id = :s"), {"s": params["session_id"]}
    ).first()
    if exists is None:
        raise SessionNotFound(str(session_id))
    current = conn.execute(
        text("SELECT chat_id, thread_id FROM telegram_dm_topic_bindings WHERE session_id = :s"),
        {"s": params["session_id"]},
    ).first()
    if current is not None and (current[0], current[1]) != (
        params["chat_id"],
        params["thread_id"],
    ):
        raise ValueError(ALREADY_LINKED)
    _BIND.run(conn, {**params, "ts": now()})
    row = (
        conn.execute(
            text("SELECT * FROM telegram_dm_topic_bindings WHERE chat_id = :c AND thread_id = :t"),
            {"c": params["chat_id"], "t": params["thread_id"]},
        )
        .mappings()
        .one()
    )
    return dict(row)


def _migrated(conn: Connection) -> bool:
    """Both tables exist and the sub-schema is at the version this code writes."""
    if not _has(conn, MODE_TABLE, BINDINGS_TABLE):
        return False
    version = conn.execute(
        text("SELECT value FROM state_meta WHERE key = :k"), {"k": SCHEMA_VERSION_KEY}
    ).scalar_one_or_none()
    return bool(version == SCHEMA_VERSION)


_TABLE_EXISTS = Prepared(text("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = :name"))
_MODE_OF_CHAT = Prepared(text("SELECT enabled FROM telegram_dm_topic_mode WHERE chat_id = :c"))
_MODE_OF_CHAT_AND_USER = Prepared(
    text("SELECT enabled FROM telegram_dm_topic_mode WHERE chat_id = :c AND user_id = :u")
)
_BINDING_OF_TOPIC = Prepared(
    text("SELECT * FROM telegram_dm_topic_bindings WHERE chat_id = :c AND thread_id = :t")
)
_BINDING_OF_SESSION = Prepared(
    text("SELECT * FROM telegram_dm_topic_bindings WHERE session_id = :s")
)
_BINDINGS_OF_CHAT = Prepared(
    text(
        "SELECT * FROM telegram_dm_topic_bindings WHERE chat_id = :c "
        "ORDER BY updated_at DESC, thread_id"
    )
)


def _no_such_table(exc: OperationalError, table: str) -> bool:
    """Whether SQLite refused a statement because `table` does not exist."""
    return str(exc.orig).lower() == f"no such table: {table}"


def _bindings_of_chat(conn: Connection, chat: str) -> list[dict[str, Any]]:
    if not _has(conn, BINDINGS_TABLE):
        return []
    return _BINDINGS_OF_CHAT.dicts(conn, {"c": chat})


def _one_binding(
    conn: Connection, statement: Prepared, params: dict[str, Any]
) -> dict[str, Any] | None:
    if not _has(conn, BINDINGS_TABLE):
        return None
    rows = statement.dicts(conn, params)
    return rows[0] if rows else None


_BINDINGS = table(BINDINGS_TABLE, column("session_id"))


@cache
def _unlinked_statement(bindings_exist: bool) -> Prepared:
    s = alias(SESSIONS, "s")
    query = rich_select(s, False).where(
        func.lower(s.c.source) == "telegram",
        s.c.user_id == bindparam("user_id"),
        or_(s.c.chat_id.is_(None), s.c.chat_id == "", s.c.chat_id == bindparam("chat_id")),
    )
    if bindings_exist:
        query = query.where(~exists().where(_BINDINGS.c.session_id == s.c.id))
    activity = query.selected_columns.last_active
    order = (activity.desc(), s.c.started_at.desc(), s.c.id.desc())
    # 64-bit: an Integer parameter is cast to PostgreSQL's 32-bit integer
    return Prepared(query.order_by(*order).limit(bindparam("limit", type_=BigInteger())))


def _unlinked_sessions(conn: Connection, params: dict[str, Any]) -> list[dict[str, Any]]:
    statement = _unlinked_statement(_has(conn, BINDINGS_TABLE))
    return rich_rows(conn, statement, params)


class TelegramTopicRepository:
    """Topic-mode flags per private chat and the (chat, thread) -> session bindings.

    A session is bound to at most one topic (unique index on session_id); deleting a
    session removes its binding by cascade (the Store's connections run with FKs on).

    Args:
        store: the Store the repository works on.
    """

    def __init__(self, store: Store) -> None:
        self.store = store
        #: the tables seen to exist (SQLite: `_read_alone`)
        self._tables_seen: set[str] = set()

    # ------------------------------------------------------------------ migration

    def apply_telegram_topic_migration(self) -> bool:
        """Create both tables and their indexes (IF NOT EXISTS), rebuild a v1 bindings
        table (no ON DELETE CASCADE) keeping its rows, and set
        `state_meta['telegram_dm_topic_schema_version'] = '2'`. Idempotent.

        Returns True iff a v1 -> v2 rebuild happened. The rebuild runs on a raw
        connection with `foreign_keys=OFF` (set outside the transaction, where SQLite
        honours it), inside one BEGIN IMMEDIATE, and checks `PRAGMA foreign_key_check`
        before COMMIT: bindings pointing at missing sessions roll everything back and
        raise MigrationError (nothing is changed). Lock contention is retried as a unit
        by the store's RetryPolicy.
        """
        self.store.require_writable()
        if not self.store.dialect.shared_with_the_original:  # no v1 tables to rebuild
            self.store.write(_create_on_postgresql)
            return False
        return self.store.retry.run(self._migrate_once)

    def _migrate_once(self) -> bool:
        with self.store.engine.connect() as conn:
            con = cast(sqlite3.Connection, conn.connection.driver_connection)
            con.execute("PRAGMA foreign_keys=OFF")
            try:
                con.execute("BEGIN IMMEDIATE")
                try:
                    rebuilt = self._migrate_in(con)
                    con.execute("COMMIT")
                except BaseException:
                    con.execute("ROLLBACK")
                    raise
            finally:
                con.execute("PRAGMA foreign_keys=ON")
        if rebuilt:
            log.info("rebuilt %s with ON DELETE CASCADE (topic schema v1 -> v2)", BINDINGS_TABLE)
        return rebuilt

    @staticmethod
    def _migrate_in(con: sqlite3.Connection) -> bool:
        con.execute(MODE_DDL)
        rebuilt = _needs_cascade_rebuild(con)
        if rebuilt:
            # Move the v1 table aside (its indexes go with it), create the v2 table under
            # the real name (so its stored SQL is the same as a fresh creation's), copy,
            # and drop the old one, which drops the old indexes.
            con.execute("DROP TABLE IF EXISTS telegram_dm_topic_bindings_v1")
            con.execute(f"ALTER TABLE {BINDINGS_TABLE} RENAME TO telegram_dm_topic_bindings_v1")
            con.execute(BINDINGS_DDL)
            con.execute(_COPY_V1_BINDINGS)
            con.execute("DROP TABLE telegram_dm_topic_bindings_v1")
        else:
            con.execute(BINDINGS_DDL)
        for ddl in INDEX_DDL:
            con.execute(ddl)
        con.execute(SQLITE_SET_SQL, (SCHEMA_VERSION_KEY, SCHEMA_VERSION))
        orphans = con.execute(f"PRAGMA foreign_key_check('{BINDINGS_TABLE}')").fetchall()
        if orphans:
            raise MigrationError(
                f"{len(orphans)} Telegram topic binding(s) reference sessions that no longer "
                f"exist; nothing was changed (delete those rows from {BINDINGS_TABLE}, then "
                "retry)"
            )
        return rebuilt

    def _ensure_migrated(self) -> None:
        """Run the migration unless both tables exist at sub-schema version 2."""
        ready = self.store.read(_migrated)
        if not ready:
            self.apply_telegram_topic_migration()

    # ------------------------------------------------------------------ mode

    def enable_telegram_topic_mode(
        self,
        *,
        chat_id: str | int,
        user_id: str | int,
        has_topics_enabled: bool | None = None,
        allows_users_to_create_topics: bool | None = None,
        intro_message_id: str | int | None = None,
        pinned_message_id: str | int | None = None,
    ) -> dict[str, Any]:
        """Turn topic mode on for one private chat (this is the explicit opt-in, so it
        runs the migration first). Upsert on `chat_id`: `activated_at` is kept on
        re-enable, `user_id`/`updated_at` are overwritten, and `enabled` becomes 1.
        The capability flags are stored as 0/1 and stamp `capability_checked_at` when
        either is given; a None flag or message id keeps the stored value. Returns the
        stored row.

        Args:
            chat_id: the gateway chat's id.
            user_id: the user's id on the platform.
            has_topics_enabled: whether the chat has topics enabled (None: unknown).
            allows_users_to_create_topics: whether the chat lets users create topics (None:
                unknown).
            intro_message_id: the id of the bot's introduction message in the chat.
            pinned_message_id: the id of the message pinned in the chat.
        """
        self._ensure_migrated()
        checked = has_topics_enabled is not None or allows_users_to_create_topics is not None
        ts = now()
        params = {
            "chat_id": _id(chat_id),
            "user_id": _id(user_id),
            "ts": ts,
            "has": _flag(has_topics_enabled),
            "allows": _flag(allows_users_to_create_topics),
            "checked": ts if checked else None,
            "intro": None if intro_message_id is None else _id(intro_message_id),
            "pinned": None if pinned_message_id is None else _id(pinned_message_id),
        }

        return self.store.write(lambda conn: _enable_mode(conn, params))

    def disable_telegram_topic_mode(
        self, *, chat_id: str | int, clear_bindings: bool = True
    ) -> bool:
        """Set `enabled = 0` for the chat and, unless `clear_bindings` is False, delete
        every binding of that chat (so a later re-enable starts clean). Never creates
        the tables: without them this is a no-op. Returns True iff a mode row existed.

        Args:
            chat_id: the gateway chat's id.
            clear_bindings: also delete the chat's topic-to-session bindings.
        """
        chat = _id(chat_id)

        return self.store.write(lambda conn: _disable_mode(conn, chat, clear_bindings))

    def is_telegram_topic_mode_enabled(
        self, chat_id: str | int, user_id: str | int | None = None
    ) -> bool:
        """True iff the chat has topic mode on (and, with `user_id`, was enabled by that
        user). False when the table does not exist.

        Args:
            chat_id: the gateway chat's id.
            user_id: the user's id on the platform.
        """
        sql = "SELECT enabled FROM telegram_dm_topic_mode WHERE chat_id = :c"
        params: dict[str, Any] = {"c": _id(chat_id)}
        if user_id is not None:
            sql += " AND user_id = :u"
            params["u"] = _id(user_id)
        if self.store.dialect.in_process:
            statement = _MODE_OF_CHAT if user_id is None else _MODE_OF_CHAT_AND_USER
            return bool(self._read_alone(MODE_TABLE, statement, params, first_value, None))
        return self.store.read(
            lambda conn: _has(conn, MODE_TABLE) and bool(conn.execute(text(sql), params).scalar())
        )

    # ------------------------------------------------------------------ bindings

    def get_telegram_topic_binding(
        self, chat_id: str | int, thread_id: str | int
    ) -> dict[str, Any] | None:
        """The binding row of one topic, or None (also when the table is missing).

        Args:
            chat_id: the gateway chat's id.
            thread_id: the gateway thread's id (a Telegram topic).
        """
        return self._one(_BINDING_OF_TOPIC, {"c": _id(chat_id), "t": _id(thread_id)})

    def get_telegram_topic_binding_by_session(self, session_id: str) -> dict[str, Any] | None:
        """The binding row of a session (at most one), or None.

        Args:
            session_id: the session's id.
        """
        return self._one(_BINDING_OF_SESSION, {"s": str(session_id)})

    def list_telegram_topic_bindings_for_chat(self, chat_id: str | int) -> list[dict[str, Any]]:
        """Every binding of one chat, most recently updated first (ties by thread_id);
        [] when the table is missing.

        Args:
            chat_id: the gateway chat's id.
        """
        chat = _id(chat_id)
        if self.store.dialect.in_process:
            params = {"c": chat}
            return self._read_alone(BINDINGS_TABLE, _BINDINGS_OF_CHAT, params, all_dicts, [])
        return self.store.read(lambda conn: _bindings_of_chat(conn, chat))

    def is_telegram_session_linked_to_topic(self, session_id: str) -> bool:
        """True iff the session is bound to any topic; False when the table is missing.

        Args:
            session_id: the session's id.
        """
        return self.get_telegram_topic_binding_by_session(session_id) is not None

    def delete_telegram_topic_binding(self, chat_id: str | int, thread_id: str | int) -> bool:
        """Remove one topic's binding (the session itself is kept); removing the chat's
        last binding turns topic mode off for the chat, as the original does. True iff a
        row was deleted; False, without creating anything, when the table is missing.

        Args:
            chat_id: the gateway chat's id.
            thread_id: the gateway thread's id (a Telegram topic).
        """
        params = {"c": _id(chat_id), "t": _id(thread_id)}

        return self.store.write(lambda conn: _delete_binding(conn, params))

    def bind_telegram_topic(
        self,
        *,
        chat_id: str | int,
        thread_id: str | int,
        user_id: str | int,
        session_key: str,
        session_id: str,
        managed_mode: str = "auto",
    ) -> dict[str, Any]:
        """Bind one topic to one session (runs the migration first: binding is part of
        the opt-in). Upsert on (chat_id, thread_id): rebinding the same topic to the
        same session is idempotent (keeps `linked_at`, refreshes `updated_at`);
        pointing a topic at a new session resets `linked_at`.

        Raises ValueError("session is already linked to another Telegram topic") when
        the session is bound to a different topic, and SessionNotFound when the session
        row does not exist (the FK would reject it). Returns the stored row.

        Args:
            chat_id: the gateway chat's id.
            thread_id: the gateway thread's id (a Telegram topic).
            user_id: the user's id on the platform.
            session_key: the gateway's key for the conversation.
            session_id: the session's id.
            managed_mode: the binding's management mode (default 'auto').
        """
        self._ensure_migrated()
        params = {
            "chat_id": _id(chat_id),
            "thread_id": _id(thread_id),
            "user_id": _id(user_id),
            "session_key": scrub(str(session_key)),
            "session_id": str(session_id),
            "managed_mode": scrub(str(managed_mode)),
        }

        return self.store.write(lambda conn: _bind_topic(conn, params, str(session_id)))

    def list_unlinked_telegram_sessions_for_user(
        self, *, chat_id: str | int, user_id: str | int, limit: int = 10
    ) -> list[dict[str, Any]]:
        """This user's Telegram sessions (source 'telegram', any case) that no topic is
        bound to, for offering "resume into this topic". Sessions recorded in another
        chat are left out (a group chat's sessions must not surface in the DM); sessions
        with no chat_id recorded are included. Full session rows plus `last_active`
        (latest message timestamp, else `started_at`), most recently active first,
        at most `limit` rows, each with the listing's `preview`. Read-only: without the
        bindings table every matching session counts as unlinked.

        Args:
            chat_id: the gateway chat's id.
            user_id: the user's id on the platform.
            limit: at most this many rows.
        """
        params = {"user_id": _id(user_id), "chat_id": _id(chat_id), "limit": bound_limit(limit)}
        return self.store.read(lambda conn: _unlinked_sessions(conn, params))

    # ------------------------------------------------------------------ helpers

    def _one(self, statement: Prepared, params: dict[str, Any]) -> dict[str, Any] | None:
        if self.store.dialect.in_process:
            # a topic and a session each have at most one binding (their keys are unique)
            none: list[dict[str, Any]] = []
            rows = self._read_alone(BINDINGS_TABLE, statement, params, all_dicts, none)
            return rows[0] if rows else None
        return self.store.read(lambda conn: _one_binding(conn, statement, params))

    def _read_alone(
        self,
        table: str,
        statement: Prepared,
        params: dict[str, Any],
        consume: Callable[[Any], T],
        missing: T,
    ) -> T:
        """SQLite: `statement`, which reads `table`, as a read of its own (`read_one`);
        `missing` while `table` is not there. Whether it is is read first, until it has
        been seen (the opt-in creates the tables for good: the v1 rebuild replaces the
        bindings table inside one transaction); a statement SQLite still refuses because
        `table` is not there finds it missing as well, in the snapshot it read."""
        if table not in self._tables_seen:
            if self.store.read_one(_TABLE_EXISTS, {"name": table}, first_value) is None:
                return missing
            self._tables_seen.add(table)
        try:
            return self.store.read_one(statement, params, consume)
        except OperationalError as exc:
            if not _no_such_table(exc, table):
                raise
        self._tables_seen.discard(table)
        return missing
