"""The one place repositories ask which database they are on.

What the repositories run differently is the `sql` part of each dialect
(hermes_store/runtime/backends.py): `SQLiteSQLDialect` and `PostgreSQLSQLDialect` below, reached
as `dialect_for(conn).sql` (`store.dialect.sql` where a store is at hand) or through the
helpers of one connection below (`lock_session`, `upsert_insert`, ...), so that callers
pass only their connection. Row locking: where SQLite relies on BEGIN IMMEDIATE (one
writer at a time), PostgreSQL runs READ COMMITTED and a read-then-write takes the
session's row lock first (`lock_session`). SQL functions that differ are small expression
classes compiled per dialect (SQLAlchemy's own registry, `@compiles`), so repository
queries stay written once.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from functools import cache
from typing import Any

from sqlalchemy import (
    Boolean,
    Connection,
    Integer,
    String,
    Text,
    bindparam,
    cast,
    literal_column,
    select,
    text,
)
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.engine import Dialect
from sqlalchemy.exc import DBAPIError
from sqlalchemy.ext.compiler import compiles
from sqlalchemy.sql import Executable
from sqlalchemy.sql.compiler import SQLCompiler
from sqlalchemy.sql.functions import Function, FunctionElement

from ..contract import (
    APPEND_BUSY,
    APPEND_CLOSED,
    APPEND_FUNCTION,
    APPEND_MISSING,
    PG_SEARCH_VECTOR_COLUMN,
)
from ..postgresql import faults as pg_faults
from ..postgresql import pipelined as pg_pipelined
from ..runtime.backends import dialect_for, dialect_named
from ..runtime.engine import Prepared
from ..search.backend import row_dicts
from ._tables import MESSAGES


class SQLDialect:
    """The repositories' dialect differences; see SQLiteSQLDialect, PostgreSQLSQLDialect."""

    #: The INSERT constructor whose `on_conflict_do_update` and `excluded` the upserts
    #: use (both dialects spell the upsert the same way).
    insert: Callable[[Any], sqlite.Insert | postgresql.Insert] = staticmethod(sqlite.insert)

    #: Whether read-then-write units of work on one session take its row lock
    #: (`lock_session`); False where the write transaction holds the database's one write
    #: lock from its BEGIN, and `lock_session` has nothing to do.
    locks_rows = False

    def lock_session(self, conn: Connection, session_id: str) -> bool:
        """Serialise read-then-write units of work on one session; False when the
        session's row was not there to lock."""
        return True

    def lock_key(self, conn: Connection, key: str) -> None:
        """Serialise units of work on a name that has no row yet."""

    #: Whether a commit can wake a follower (LISTEN/NOTIFY) rather than being polled for.
    pushes_changes = False
    #: Whether `append_one` appends a message in one call (a function on the server).
    appends_in_one_call = False

    def database_size(self, conn: Connection) -> int | None:
        """Bytes the database takes."""
        raise NotImplementedError

    #: Whether the write path checks what became of an unanswered COMMIT, and so wants
    #: to be told which message a unit of work appended (`note_appended`).
    checks_commit_outcome = False

    def note_appended(self, conn: Connection, message_id: int, row: Mapping[str, Any]) -> None:
        """Tell the write path which message the unit of work on `conn` appended (the
        encoded `row` it inserted as `message_id`), for the commit-outcome check."""

    def clock(self, conn: Connection) -> float:
        """The epoch seconds that leases are judged by."""
        return time.time()

    def message_columns(self, conn: Connection) -> tuple[str, ...] | None:
        """The columns a whole-row read of `messages` names; None: every column (`*`)."""
        return None

    def append_one(
        self, conn: Connection, row: Mapping[str, Any], holder: str | None, at: float, calls: int
    ) -> int | None:
        """Append the encoded `row` in one call, checks and counters included, where the
        database has a function for it (the new id); None where it has not, and the
        caller sends the statements itself. A refusal raises the DBAPIError whose
        SQLSTATE `append_refusal` names."""
        return None

    def append_call(
        self, dialect: Dialect, row: Mapping[str, Any], holder: str | None, at: float, calls: int
    ) -> pg_pipelined.Call:
        """`append_one` as one statement of its own, where `appends_in_one_call`."""
        raise NotImplementedError


class SQLiteSQLDialect(SQLDialect):
    """No locks to take: the write transaction began IMMEDIATE and holds the database's
    write lock. The size is the file's pages (not its -wal file)."""

    def database_size(self, conn: Connection) -> int | None:
        pages = conn.exec_driver_sql("PRAGMA page_count").scalar()
        page_size = conn.exec_driver_sql("PRAGMA page_size").scalar()
        return None if pages is None or page_size is None else int(pages) * int(page_size)


class PostgreSQLSQLDialect(SQLDialect):
    """A session's row lock, a transaction-scoped advisory lock per name, and
    pg_database_size."""

    insert = staticmethod(postgresql.insert)
    locks_rows = True
    pushes_changes = True
    appends_in_one_call = True
    checks_commit_outcome = True

    def lock_session(self, conn: Connection, session_id: str) -> bool:
        # usually a unit of work's first statement: with its BEGIN in one round trip
        locked = pg_pipelined.first_row(conn, _LOCK_SESSION.sql(conn.dialect), {"id": session_id})
        return locked is not None

    def lock_key(self, conn: Connection, key: str) -> None:
        conn.execute(text("SELECT pg_advisory_xact_lock(hashtextextended(:k, 0))"), {"k": key})

    def clock(self, conn: Connection) -> float:
        """The server's clock, so that every host judges a lease by the same time."""
        return float(
            conn.execute(text("SELECT EXTRACT(EPOCH FROM clock_timestamp())::float8")).scalar_one()
        )

    def append_one(
        self, conn: Connection, row: Mapping[str, Any], holder: str | None, at: float, calls: int
    ) -> int:
        # with the unit of work's BEGIN in the same round trip (pg_pipelined)
        return int(self.append_call(conn.dialect, row, holder, at, calls).run(conn))

    def append_call(
        self, dialect: Dialect, row: Mapping[str, Any], holder: str | None, at: float, calls: int
    ) -> pg_pipelined.Call:
        """`append_one` as a statement of its own (what Store.write's `call` takes): its
        answer is the new id, then the transaction's marker; its witness the row. `at` is
        read again once a connection is held (`Call.stamped`)."""
        params = {**row, "holder": holder, "at": at, "tool_calls_added": calls}
        sql = _append_one_call(tuple(row)).sql(dialect)
        return pg_pipelined.Call(
            sql, params, lambda message_id: _witness(message_id, row), stamped="at"
        )

    def note_appended(self, conn: Connection, message_id: int, row: Mapping[str, Any]) -> None:
        pg_faults.note_witness(conn, _witness(message_id, row))

    def message_columns(self, conn: Connection) -> tuple[str, ...]:
        """Every column of `messages` but the search machinery's (the generated search
        vector, which the server would render as text for every row read), read from the
        catalogue once per connection: one a newer Hermes or a fork added shows on the
        connections opened after it was added."""
        info = conn.connection.info
        found: tuple[str, ...] | None = info.get(_MESSAGE_COLUMNS)
        if found is None:
            names = conn.exec_driver_sql(_COLUMNS_OF_MESSAGES).scalars().all()
            found = info[_MESSAGE_COLUMNS] = tuple(
                str(name) for name in names if name not in SEARCH_COLUMNS
            )
        return found

    def database_size(self, conn: Connection) -> int | None:
        size = conn.scalar(text("SELECT pg_database_size(current_database())"))
        return None if size is None else int(size)


#: Whether an appended message is stored: its id holding its session, role and content
#: (the witness of pg_faults.note_witness; another transaction given the same id after a
#: crash writes another row there, or none).
_WITNESSED = ("session_id", "role", "content")
_APPENDED = (
    "SELECT EXISTS (SELECT 1 FROM messages WHERE id = :id AND session_id = :session_id"
    " AND role = CAST(:role AS TEXT) AND content IS NOT DISTINCT FROM CAST(:content AS TEXT))"
)


def _witness(message_id: int, row: Mapping[str, Any]) -> pg_faults.Witness:
    return _APPENDED, {"id": message_id, **{k: row.get(k) for k in _WITNESSED}}


#: The session's row lock; a row back when there was a row to lock.
_LOCK_SESSION = Prepared(text("SELECT 1 FROM sessions WHERE id = :id FOR UPDATE"))


@cache
def _append_one_call(columns: tuple[str, ...]) -> Prepared:
    """The one-call append (revision hs0005) of a row with these columns, its arguments
    named (the server checks every name against the function's parameters)."""
    names = ("holder", "at", "tool_calls_added", *columns)
    call = Function(
        APPEND_FUNCTION, *(_named_argument(f"p_{name}", _argument(name)) for name in names)
    ).table_valued("new_id", "transaction_id", "backend_pid", "server_started")
    return Prepared(select(*call.c))


def _argument(name: str) -> Any:
    """A text column's value cast to text: a number given for it (which the encoding lets
    through, as SQLite stores it) is bound as a number, and the function takes no
    implicit cast to its text parameter, where an INSERT's assignment takes one."""
    column = MESSAGES.c.get(name)
    if column is not None and isinstance(column.type, String):
        return cast(bindparam(name), Text)
    return bindparam(name)


def _named_argument(name: str, value: Any) -> Any:
    """`name => value`, PostgreSQL's named notation for a function's argument."""
    return literal_column(name).op("=>")(value)


#: Which refusal an error of the one-call append is, by its SQLSTATE.
APPEND_REFUSALS = {APPEND_BUSY: "busy", APPEND_MISSING: "missing", APPEND_CLOSED: "closed"}


def append_refusal(exc: DBAPIError) -> str | None:
    """'busy', 'missing' or 'closed' for the one-call append's refusals; None otherwise."""
    return APPEND_REFUSALS.get(str(getattr(exc.orig, "sqlstate", None)))


#: Connection.info key of a PostgreSQL connection's `message_columns`.
_MESSAGE_COLUMNS = "hermes_message_columns"
_COLUMNS_OF_MESSAGES = (
    "SELECT attname FROM pg_attribute WHERE attrelid = 'messages'::regclass"
    " AND attnum > 0 AND NOT attisdropped ORDER BY attnum"
)


dialect_named("sqlite").sql = SQLiteSQLDialect()
dialect_named("postgresql").sql = PostgreSQLSQLDialect()


def upsert_insert(conn: Connection, entity: Any) -> sqlite.Insert | postgresql.Insert:
    """An INSERT that supports ON CONFLICT for the dialect `conn` is bound to; callers
    stay dialect-neutral as long as they only pick the constructor here."""
    return dialect_for(conn).sql.insert(entity)


def lock_session(conn: Connection, session_id: str) -> bool:
    """Serialise read-then-write units of work on one session: its row lock on
    PostgreSQL; nothing on SQLite, whose write transaction holds the write lock.

    False when PostgreSQL found no row to lock. The caller must then take the session
    for missing, whatever its later statements read: under READ COMMITTED each statement
    sees what has committed when it starts, so a session whose creator commits after the
    lock's statement shows up in the next one, unlocked, and a unit of work that acted on
    it would run beside another holding the row lock (two appends' ids interleaved).
    Always True on SQLite, where the caller's own read decides."""
    return dialect_for(conn).sql.lock_session(conn, session_id)


def lock_key(conn: Connection, key: str) -> None:
    """Serialise units of work on a name that has no row yet (a title, a lock name):
    a transaction-scoped advisory lock on PostgreSQL, nothing on SQLite."""
    dialect_for(conn).sql.lock_key(conn, key)


def message_columns(conn: Connection) -> tuple[str, ...] | None:
    """The columns a whole-row read of `messages` names (None: `*`): on PostgreSQL every
    column but the search vector, on SQLite `*`, which has no such column."""
    return dialect_for(conn).sql.message_columns(conn)


def database_size(conn: Connection) -> int | None:
    """Bytes the database takes: SQLite's pages (not its -wal file), PostgreSQL's
    pg_database_size."""
    return dialect_for(conn).sql.database_size(conn)


class PreparedUpsert:
    """An upsert written once and prepared once per dialect: `build` receives the
    dialect's INSERT constructor, as `upsert_insert` would pick it, and returns the
    statement with every value a bound parameter."""

    __slots__ = ("_build", "_by_dialect")

    def __init__(self, build: Callable[[Callable[[Any], Any]], Executable]) -> None:
        self._build = build
        self._by_dialect: dict[str, Prepared] = {}

    def run(self, conn: Connection, params: Mapping[str, Any]) -> int:
        """Execute it in `conn`'s transaction; the number of rows it changed."""
        name = conn.dialect.name
        prepared = self._by_dialect.get(name)
        if prepared is None:
            insert = dialect_for(conn).sql.insert
            prepared = self._by_dialect[name] = Prepared(self._build(insert))
        return prepared.run(conn, params)


#: Columns a `SELECT *` returns on PostgreSQL that are not data: the generated search
#: vector (migrations/_pg_search.py). Callers drop them from whole-row reads.
SEARCH_COLUMNS = frozenset({PG_SEARCH_VECTOR_COLUMN})


def data_columns(row: Any) -> dict[str, Any]:
    """A `SELECT *` row as a dict, without the search machinery's columns."""
    out = dict(row)
    for name in SEARCH_COLUMNS:
        out.pop(name, None)
    return out


def data_rows(result: Any) -> list[dict[str, Any]]:
    """Every row of a `SELECT *` result as a dict without the search machinery's columns."""
    rows = row_dicts(result)
    for name in SEARCH_COLUMNS.intersection(result.keys()):
        for row in rows:
            del row[name]
    return rows


def data_dicts(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """`SELECT *` rows (dicts) without the search machinery's columns, in place."""
    if rows:
        for name in SEARCH_COLUMNS.intersection(rows[0]):
            for row in rows:
                del row[name]
    return rows


class json_member(FunctionElement[str]):  # noqa: N801 (an SQL function)
    """`doc`'s top-level `key` as text, NULL when absent or when `doc` is not valid JSON
    (one corrupt model_config must not break every listing)."""

    type = Text()
    inherit_cache = True


@compiles(json_member, "sqlite")
def _json_member_sqlite(element: json_member, compiler: SQLCompiler, **kw: Any) -> str:
    doc, key = list(element.clauses)
    doc_sql = compiler.process(doc, **kw)
    path = "'$.' || " + compiler.process(key, **kw)
    return f"(CASE WHEN json_valid({doc_sql}) = 1 THEN json_extract({doc_sql}, {path}) END)"


@compiles(json_member, "postgresql")
def _json_member_pg(element: json_member, compiler: SQLCompiler, **kw: Any) -> str:
    doc, key = list(element.clauses)
    # hermes_json_object: revision 0016 (NULL unless the text is a JSON object)
    return f"(hermes_json_object({compiler.process(doc, **kw)}) ->> {compiler.process(key, **kw)})"


def _compile_as(element: type[FunctionElement[Any]], **names: str) -> None:
    """Compile `element(args)` to each dialect's own function of the same arguments
    (`names` maps a dialect name to that function's name)."""
    for dialect, name in names.items():

        def render(
            el: FunctionElement[Any], compiler: SQLCompiler, _name: str = name, **kw: Any
        ) -> str:
            return f"{_name}({compiler.process(el.clauses, **kw)})"

        compiles(element, dialect)(render)


class position_of(FunctionElement[int]):  # noqa: N801
    """1-based position of `needle` in `haystack`, 0 when absent (no LIKE wildcards)."""

    type = Integer()
    inherit_cache = True


_compile_as(position_of, sqlite="instr", postgresql="strpos")


class last_chars(FunctionElement[str]):  # noqa: N801
    """The last `n` characters of a text (SQLite's substr(x, -n))."""

    type = Text()
    inherit_cache = True


@compiles(last_chars, "sqlite")
def _last_sqlite(element: last_chars, compiler: SQLCompiler, **kw: Any) -> str:
    value, n = list(element.clauses)
    return f"substr({compiler.process(value, **kw)}, -({compiler.process(n, **kw)}))"


_compile_as(last_chars, postgresql="right")


class utc_day(FunctionElement[str]):  # noqa: N801
    """'YYYY-MM-DD' (UTC) of an epoch-seconds expression."""

    type = Text()
    inherit_cache = True


@compiles(utc_day, "sqlite")
def _utc_day_sqlite(element: utc_day, compiler: SQLCompiler, **kw: Any) -> str:
    (epoch,) = list(element.clauses)
    return f"date({compiler.process(epoch, **kw)}, 'unixepoch')"


@compiles(utc_day, "postgresql")
def _utc_day_pg(element: utc_day, compiler: SQLCompiler, **kw: Any) -> str:
    (epoch,) = list(element.clauses)
    return f"to_char(timezone('UTC', to_timestamp({compiler.process(epoch, **kw)})), 'YYYY-MM-DD')"


class usually(FunctionElement[bool]):  # noqa: N801
    """A condition most rows meet, said so to SQLite's planner (`likely()`); the bare
    condition elsewhere. Newer SQLite planners take an equality on an unindexed column
    (`archived = 0`) for a selective filter, and rather than walk `idx_sessions_started`
    to the first page of a listing they scan and sort the whole table."""

    type = Boolean()
    inherit_cache = True


@compiles(usually, "sqlite")
def _usually_sqlite(element: usually, compiler: SQLCompiler, **kw: Any) -> str:
    return f"likely({compiler.process(element.clauses, **kw)})"


@compiles(usually)
def _usually_default(element: usually, compiler: SQLCompiler, **kw: Any) -> str:
    return f"({compiler.process(element.clauses, **kw)})"
