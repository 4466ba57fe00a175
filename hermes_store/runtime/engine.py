"""Engines for a URL, and statements run at the driver: the only module that knows driver
details.

SQLite: the driver's own transaction handling is switched off and every unit of work
starts with an explicit BEGIN (IMMEDIATE for writes, DEFERRED for reads), the recipe from
SQLAlchemy's pysqlite documentation. Pragmas are set in a connect listener, outside any
transaction, because a PRAGMA inside one does nothing.

PostgreSQL (psycopg 3): READ COMMITTED; where SQLite relies on BEGIN IMMEDIATE the
repositories take row locks (repositories/_dialect.py). A lost connection fails the unit
of work that meets it, which is retried on a fresh one; a vanished server is noticed
within about 30 s (TCP keepalives), and a statement may not wait on a lock forever.
Which faults are retried: pg_faults.

Statements at the driver: `driver_run` executes one on a SQLite connection's driver
connection without SQLAlchemy's per-call bookkeeping, and `Prepared` is a Core statement
compiled once per dialect and run so (on PostgreSQL through `exec_driver_sql`): what the
hot paths send. `commit_at_driver` runs a whole SQLite write that is statements alone (a
`DriverWrite`: a plain append) on the store's kept writer the same way, doing what the
begin listener and the store's commit steps do, without a SQLAlchemy transaction.
"""

from __future__ import annotations

import logging
import operator
import os
import re
import sqlite3
import time
import weakref
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from itertools import repeat
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import quote

from sqlalchemy import CursorResult, create_engine, event
from sqlalchemy.engine import URL, Connection, Dialect, Engine, ExceptionContext
from sqlalchemy.exc import DBAPIError
from sqlalchemy.pool import NullPool
from sqlalchemy.sql import Executable
from sqlalchemy.sql.compiler import Compiled

from ..config import JOURNAL_ENV, JournalPolicy, resolve_url, sqlite_path
from ..errors import DatabaseNotWritable, DriverMissing, InvalidURL
from ..sqlite import driver as sqlite_driver
from ..sqlite import encryption
from ..sqlite.file import not_a_database_error, refuse_directory
from .backends import NAMES, dialect_named

log = logging.getLogger(__name__)

#: Execution option naming the BEGIN mode of a SQLite unit of work.
BEGIN_MODE = "hermes_begin"
BUSY_TIMEOUT_S = 1.0
_SIDECARS = ("", "-wal", "-shm", "-journal")
T = TypeVar("T")
_SECURED = "hermes_file_modes_secured"  # per DBAPI connection (Connection.info)
#: the journal mode a writing connection set up its file in (its pool record's info)
_JOURNAL = "hermes_store_journal_mode"
#: set while the switch to WAL the journal policy wants is still to be taken (pool record)
_WAL_PENDING = "hermes_store_wal_pending"
_DB_PATH = "hermes_db_path"  # the database file of a SQLite connection (Connection.info)


def wal_reset_vulnerable(version: tuple[int, int, int] | None = None) -> bool:
    """True for SQLite builds with the WAL-reset bug (3.7.0 <= v < 3.51.3, minus backports);
    without a version, for the SQLite this process drives (sqlite_driver)."""
    return sqlite_driver.wal_reset_vulnerable(version or sqlite_driver.current().sqlite_version)


def linked_version(dbapi_conn: sqlite3.Connection) -> tuple[int, int, int]:
    """The version of the SQLite library behind one DB-API connection."""
    text = str(dbapi_conn.execute("SELECT sqlite_version()").fetchone()[0])
    major, minor, patch = (int(part) for part in text.split(".")[:3])
    return major, minor, patch


@dataclass(frozen=True)
class JournalChoice:
    """The journal mode a SQLite file gets when hermes-store writes to it, and why."""

    mode: str  # "wal" or "delete"
    reason: str


def journal_choice(
    current: str, policy: JournalPolicy, version: tuple[int, int, int], driver: str = "sqlite3"
) -> JournalChoice:
    """The original's rules (docs/reference/schema.md, journal mode), for a file now in `current`
    mode opened through a SQLite `version` (the library of driver `driver`)."""
    sqlite = f"SQLite {'.'.join(map(str, version))} ({driver})"
    vulnerable = wal_reset_vulnerable(version)
    if current == "wal":
        why = "the file is in WAL mode, which is never switched back while others may hold it"
        if vulnerable:
            why += (
                f"; {sqlite} has the WAL-reset bug, so writers on it risk corrupting it "
                f"(a fixed SQLite: {sqlite_driver.how_to_get_the_fix()})"
            )
        else:
            why += f"; {sqlite} has the WAL-reset fix"
        return JournalChoice("wal", why)
    if policy.mode == "delete":
        return JournalChoice("delete", f"{JOURNAL_ENV}=delete (or JournalPolicy(mode='delete'))")
    if policy.mode == "wal":
        return JournalChoice("wal", f"{JOURNAL_ENV}=wal (or JournalPolicy(mode='wal'))")
    if vulnerable:
        return JournalChoice(
            "delete",
            f"{sqlite} has the WAL-reset bug (3.7.0 to 3.51.2, but 3.44.6+ and 3.50.7+), which "
            "can corrupt a WAL file under concurrent writers (a fixed SQLite, and with it WAL: "
            f"{sqlite_driver.how_to_get_the_fix()})",
        )
    return JournalChoice("wal", f"{sqlite} has the WAL-reset fix")


def apply_journal_mode(dbapi_conn: sqlite3.Connection, policy: JournalPolicy) -> str:
    """Choose the journal mode by the original's rules; never downgrade a WAL file. A lock
    held elsewhere that refuses the switch to WAL raises SQLite's error."""
    mode, _pending = set_up_journal_mode(dbapi_conn, policy, wait=True)
    return mode


def set_up_journal_mode(
    dbapi_conn: sqlite3.Connection, policy: JournalPolicy, *, wait: bool
) -> tuple[str, bool]:
    """Choose the journal mode by the original's rules (never downgrading a WAL file):
    the mode in force after it, and whether a switch to WAL is still wanted. With `wait`
    False a lock held elsewhere that refuses the switch leaves the file in its mode (and
    the switch wanted, for `retry_wal_switch`) instead of failing."""
    current = str(dbapi_conn.execute("PRAGMA journal_mode").fetchone()[0]).lower()
    # the library behind this very connection decides, whichever driver opened it
    want = journal_choice(current, policy, linked_version(dbapi_conn)).mode
    if want == current:
        return current, False
    if want == "delete":
        dbapi_conn.execute("PRAGMA journal_mode=DELETE")
        return "delete", False
    got = switch_to_wal(dbapi_conn, wait=wait)
    if got is None:
        return current, True
    return got, False


def switch_to_wal(dbapi_conn: sqlite3.Connection, *, wait: bool) -> str | None:
    """`PRAGMA journal_mode=WAL`: the mode in force after it ("delete" where the file
    system cannot do WAL), or, with `wait` False, None when a lock held elsewhere refused
    it. The switch needs the file to itself: SQLite refuses it at once while another
    connection holds the write lock (the busy timeout does not apply there), and after the
    busy timeout while one reads. Without `wait` it is tried with no busy timeout at all,
    and the caller goes on in the file's present mode."""
    saved = None
    if not wait:
        saved = int(dbapi_conn.execute("PRAGMA busy_timeout").fetchone()[0])
        dbapi_conn.execute("PRAGMA busy_timeout = 0")
    try:
        return str(dbapi_conn.execute("PRAGMA journal_mode=WAL").fetchone()[0]).lower()
    except sqlite_driver.OperationalError as exc:
        text = str(exc).lower()
        if "locking protocol" in text or "not authorized" in text:
            log.warning("WAL is not available here (%s); using DELETE journal mode", exc)
            return "delete"
        code = getattr(exc, "sqlite_errorcode", None)
        if not wait and code is not None and code & 0xFF in _LOCK_CODES:
            return None
        raise
    finally:
        if saved is not None:
            dbapi_conn.execute(f"PRAGMA busy_timeout = {saved}")


_LOCK_CODES = (sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED)


def retry_wal_switch(conn: Connection) -> None:
    """Before a write's BEGIN on a connection whose switch to WAL a lock refused when it
    connected: try the switch again, without waiting; while it is refused the write goes
    on in the file's present mode, waiting for locks as any write there does."""
    info = conn.connection.info
    if not info.get(_WAL_PENDING):
        return
    dbapi_conn = conn.connection.driver_connection
    assert dbapi_conn is not None
    _retry_wal_switch(info, dbapi_conn)


def _retry_wal_switch(info: dict[Any, Any], dbapi_conn: Any) -> None:
    """`retry_wal_switch` on a driver connection and its pool record's `info`."""
    try:
        got = switch_to_wal(dbapi_conn, wait=False)
    except sqlite_driver.Error as exc:
        # the BEGIN that follows meets whatever this is and reports it in its terms
        log.debug("switching to WAL before a write failed: %s", exc)
        return
    if got is not None:
        info[_JOURNAL] = got
        del info[_WAL_PENDING]


def secure_file_modes(path: Path) -> None:
    """0600 on the database and its sidecars, by path (never through a descriptor)."""
    for suffix in _SIDECARS:
        candidate = Path(str(path) + suffix)
        try:
            if candidate.exists() and (candidate.stat().st_mode & 0o777) != 0o600:
                os.chmod(candidate, 0o600)
        except PermissionError:
            pass  # someone else's file: leave it; SQLite will say if it cannot write


def check_writable(path: Path) -> None:
    directory = path.parent
    # is_dir, not exists: a regular file in the way must fail here too (as root,
    # os.access below would pass for one with an execute bit).
    if not directory.is_dir():
        try:
            directory.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise DatabaseNotWritable(
                f"cannot create directory {directory} for database {path}: {exc}"
            ) from exc
    if path.exists() and not os.access(path, os.W_OK):
        if _on_read_only_mount(path):
            raise DatabaseNotWritable(
                f"database file {path} is on a read-only file system; remount it read-write "
                "or open the database read-only"
            )
        raise DatabaseNotWritable(
            f"database file {path} is read-only for this user; fix with: chmod u+rw '{path}'"
        )
    if not os.access(directory, os.W_OK | os.X_OK):
        where = " (a read-only file system)" if _on_read_only_mount(directory) else ""
        raise DatabaseNotWritable(
            f"directory {directory} of database {path} is not writable{where}; "
            "SQLite needs it for its journal files"
        )


def _on_read_only_mount(path: Path) -> bool:
    try:
        return bool(os.statvfs(path).f_flag & os.ST_RDONLY)
    except (OSError, AttributeError):  # AttributeError: no statvfs (Windows)
        return False


def _install_sqlite_listeners(
    engine: Engine, policy: JournalPolicy, read_only: bool, db_path: Path | None
) -> None:

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_conn: sqlite3.Connection, _record: Any) -> None:
        # the key before anything else: SQLCipher reads nothing of the file without it
        encryption.unlock(dbapi_conn, db_path)
        dbapi_conn.isolation_level = None  # we issue BEGIN ourselves
        if db_path is not None:
            _record.info[_DB_PATH] = db_path
        if not read_only:
            # without waiting: a lock held elsewhere (another process's write) must not
            # fail the connection, which reads in any mode; the switch is taken before a
            # later write instead (retry_wal_switch)
            mode, pending = set_up_journal_mode(dbapi_conn, policy, wait=False)
            _record.info[_JOURNAL] = mode
            if pending:
                _record.info[_WAL_PENDING] = True
            dbapi_conn.execute("PRAGMA foreign_keys=ON")
            dbapi_conn.execute("PRAGMA recursive_triggers=ON")

    @event.listens_for(engine, "begin")
    def _on_begin(conn: Connection) -> None:
        mode = conn.get_execution_options().get(BEGIN_MODE, "DEFERRED")
        dbapi_conn = conn.connection.driver_connection
        if dbapi_conn is not None and dbapi_conn.in_transaction:
            # SQLAlchemy believes no transaction is open, so nothing it tracks is pending:
            # whatever the driver still holds is a failed unit's leftover (see
            # end_failed_transaction), and BEGIN would fail on it forever
            log.warning("rolling back a transaction a failed unit of work left open")
            dbapi_conn.execute("ROLLBACK")
        if mode == "IMMEDIATE" and not read_only:
            retry_wal_switch(conn)
        driver_execute(conn, _BEGIN[mode])
        if read_only and db_path is not None:
            _read_past_a_hot_journal(conn, db_path, _BEGIN[mode])
        # 0600 on a file someone else created (0644, say) when a connection first writes,
        # not when it connects: reading (`sessions list`, `check`) must leave the file as
        # it found it. Files created here are 0600 from the start (_create_private).
        if mode == "IMMEDIATE" and not read_only and db_path and not conn.info.get(_SECURED):
            secure_file_modes(db_path)
            conn.info[_SECURED] = True

    if db_path is not None and not read_only:

        @event.listens_for(engine, "do_connect")
        def _create_private(*_args: Any) -> None:
            create_private_file(db_path)

    @event.listens_for(engine, "handle_error")
    def _on_error(context: ExceptionContext) -> Exception | None:
        if context.statement is None and context.connection is not None:
            # COMMIT (or ROLLBACK) failed: see end_failed_transaction
            end_failed_transaction(context.connection)
        if db_path is None:
            return None
        return not_a_database_error(db_path, context.original_exception)


def create_private_file(path: Path) -> None:
    """Create `path` empty with mode 0600 if it does not exist, before SQLite opens it.

    SQLite would create it 0644 (less the umask), and a process of another user that
    opened it in that moment would keep its descriptor, reading every conversation written
    later. SQLite gives the journal, -wal and -shm files the database's own mode. O_EXCL:
    only a file that did not exist is created, so no descriptor of a live database is ever
    opened (closing one would drop this process's POSIX locks on it)."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
    except FileExistsError:
        return
    except OSError:
        return  # SQLite's own open reports the problem, in its terms
    os.close(fd)


def hot_journal(db_path: Path, exc: BaseException) -> bool:
    """Whether `exc`, raised by a read-only connection, is SQLite refusing to read a file
    whose rollback journal a crashed writer left behind (only a connection that may write
    can roll it back)."""
    orig = exc.orig if isinstance(exc, DBAPIError) else exc
    code = getattr(orig, "sqlite_errorcode", None)
    return (
        code is not None
        and code & 0xFF == sqlite3.SQLITE_READONLY
        and Path(f"{db_path}-journal").exists()
    )


def wal_index_unavailable(db_path: Path, exc: BaseException) -> DatabaseNotWritable | None:
    """The DatabaseNotWritable that `exc`, raised by a read-only connection's first read
    (no hot journal behind it), stands for: SQLite could not open or create the WAL index
    (`-shm`) a WAL-mode file needs, because this process may not write the directory
    (SQLITE_READONLY, or SQLITE_READONLY_DIRECTORY on some builds) or its file system is
    mounted read-only (SQLITE_CANTOPEN). Nothing else makes a read fail so: a read-only
    connection writes nothing else, and the database file itself was already open. None
    for other errors. The companions are named beside the file SQLite opened, the target
    of a symbolic link."""
    orig = exc.orig if isinstance(exc, DBAPIError) else exc
    code = getattr(orig, "sqlite_errorcode", None)
    if code is None or code & 0xFF not in (sqlite3.SQLITE_READONLY, sqlite3.SQLITE_CANTOPEN):
        return None
    target = db_path.resolve()
    directory = target.parent
    where = " (its file system is mounted read-only)" if _on_read_only_mount(directory) else ""
    return DatabaseNotWritable(
        f"cannot read the database {db_path} ({orig}): it is in WAL mode, and reading it "
        f"needs its WAL index {target}-shm, which SQLite cannot create or open in "
        f"{directory}{where}; nothing was changed. Make that directory writable for this "
        "user (or run the command as the user who writes the database), or switch the file "
        "to DELETE mode where it is writable (`PRAGMA journal_mode=DELETE`), which reads "
        "without it"
    )


def _read_past_a_hot_journal(conn: Connection, db_path: Path, begin: str) -> None:
    """Start a read-only connection's read now; if a crashed writer's hot journal stops
    it, roll that journal back (roll_back_hot_journal) and start again."""
    try:
        take_read_lock(conn)
        return
    except DBAPIError as exc:
        if not hot_journal(db_path, exc):
            unopenable = wal_index_unavailable(db_path, exc)
            if unopenable is None:
                # the statements that follow meet it again and report it in their terms
                # (check's quick_check reports damage as what is wrong with the file)
                return
            driver_execute(conn, "ROLLBACK")
            raise unopenable from exc
        driver_execute(conn, "ROLLBACK")
        roll_back_hot_journal(db_path, conn.dialect.loaded_dbapi, exc)
    driver_execute(conn, begin)
    take_read_lock(conn)


_RECOVERY_ERRORS: tuple[type[Exception], ...] = (DatabaseNotWritable, *sqlite_driver.Error)


def roll_back_hot_journal(db_path: Path, dbapi: Any, found: BaseException) -> None:
    """Roll back the transaction a crashed writer left in `db_path`-journal, as SQLite does
    on the next open that may write: the file returns to its last committed state, and
    nothing committed is touched. A reader without write access cannot do it; it gets a
    DatabaseNotWritable that says who can and what to run."""
    journal = f"{db_path}-journal"
    try:
        check_writable(db_path)
        recovery = dbapi.connect(str(db_path), timeout=BUSY_TIMEOUT_S, isolation_level=None)
        try:
            encryption.unlock(recovery, db_path)
            # the first read of a connection that may write rolls a hot journal back
            recovery.execute("PRAGMA schema_version").fetchone()
        finally:
            recovery.close()
    except _RECOVERY_ERRORS as exc:
        raise DatabaseNotWritable(
            f"{db_path} cannot be read: a writer that stopped mid-transaction (killed, or "
            f"its machine lost power) left its rollback journal {journal}, and rolling it "
            f"back needs write access, which this process lacks ({exc}). As a user who can "
            f"write the file and its directory, run: hermes-store check --url '{db_path}' "
            "(any writing open rolls the journal back; nothing committed is lost)"
        ) from found
    log.warning(
        "rolled back the unfinished transaction a crashed writer left in %s; %s is at its "
        "last committed state",
        journal,
        db_path,
    )


def end_failed_transaction(conn: Connection) -> None:
    """Roll back what SQLite still holds after a failed COMMIT.

    A COMMIT that SQLite answers with SQLITE_BUSY (in DELETE mode: a reader still holds
    its shared lock when the writer needs the exclusive one) leaves the transaction open,
    holding the writer's RESERVED and PENDING locks, while SQLAlchemy marks it ended. Left
    so, the connection keeps every other process from reading or writing and its own next
    BEGIN fails ("cannot start a transaction within a transaction"). The unit of work is
    retried as a whole, so its uncommitted changes are rolled back here; a connection that
    cannot even roll back is invalidated, so the pool never hands it out again."""
    dbapi_conn = conn.connection.driver_connection
    if dbapi_conn is None or not dbapi_conn.in_transaction:
        return
    try:
        dbapi_conn.execute("ROLLBACK")
    except sqlite_driver.Error as exc:
        log.warning("rolling back after a failed COMMIT failed (%s); dropping the connection", exc)
        conn.invalidate(exc)


#: Both SQLite drivers' base error classes (sqlite_driver.Error), bound once.
_DRIVER_ERRORS = sqlite_driver.Error

_BEGIN = {mode: f"BEGIN {mode}" for mode in ("DEFERRED", "IMMEDIATE", "EXCLUSIVE")}


def driver_run(
    conn: Connection, sql: str, params: Any, consume: Callable[[sqlite3.Cursor], T]
) -> T:
    """Execute one SQLite statement on the driver connection under `conn` (inside its
    transaction) and hand its cursor to `consume`, without `Connection.execute`'s
    bookkeeping, which costs several times what SQLite takes for a small statement.
    Errors, also those raised while rows are fetched (an INSERT ... RETURNING does its
    work then), are raised as `Connection.execute` would raise them (SQLAlchemy's types,
    a file that is not a database named as such), and the engine's cursor-execute
    listeners (instrumentation, statement recording) still see the statement."""
    dbapi_conn = conn.connection.driver_connection
    dispatch = conn.dispatch
    if dispatch.before_cursor_execute:
        for listener in dispatch.before_cursor_execute:
            listener(conn, None, sql, params, None, False)
    try:
        cursor: sqlite3.Cursor = dbapi_conn.execute(sql, params)  # type: ignore[union-attr]
        if dispatch.after_cursor_execute:
            for listener in dispatch.after_cursor_execute:
                listener(conn, cursor, sql, params, None, False)
        return consume(cursor)
    except sqlite_driver.Error as exc:
        raise _as_raised(conn.dialect, conn.info, sql, params, exc) from exc


def _as_raised(
    dialect: Dialect, info: dict[Any, Any], sql: str | None, params: Any, exc: Exception
) -> Exception:
    """The error `Connection.execute` (or, for `sql` None, its COMMIT) would raise for the
    driver's `exc` on a connection whose pool record's info is `info`: a file that is not
    a database named as such (the engine's error listener), else SQLAlchemy's type."""
    path = info.get(_DB_PATH)
    named = not_a_database_error(path, exc) if path is not None else None
    if named is not None:
        return named
    return DBAPIError.instance(sql, params, exc, dialect.loaded_dbapi.Error, dialect=dialect)


def driver_execute(conn: Connection, sql: str) -> None:
    """`driver_run` for a statement without parameters or rows (BEGIN, a PRAGMA)."""
    driver_run(conn, sql, (), _discard)


def _discard(cursor: sqlite3.Cursor) -> None:
    cursor.close()


# --- A write sent at the driver of the store's writer, without SQLAlchemy's transaction ---

#: Engines made by `make_engine` for writing a SQLite file: the only ones whose begin and
#: error listeners `commit_at_driver` knows how to stand in for.
_WRITES_AT_DRIVER: weakref.WeakSet[Engine] = weakref.WeakSet()


def writes_at_driver(engine: Engine) -> bool:
    """Whether `engine` is one `commit_at_driver` may write through: made by
    `make_engine` for writing (its begin listener is known), checked once per store."""
    return engine in _WRITES_AT_DRIVER


def writer_unwatched(engine: Engine) -> bool:
    """Whether a write on a Connection of `engine` (one `writes_at_driver` accepts) would
    do nothing more than `commit_at_driver` does: no listener on its statements, its
    transactions or its errors beside make_engine's own, no echo, no execution options.
    A test or tracing instrumentation that listens sees every write through a Connection,
    as SQLAlchemy promises."""
    dispatch = engine.dispatch
    return not (
        getattr(Connection, "_has_events", False)
        or dispatch.before_cursor_execute
        or dispatch.after_cursor_execute
        or dispatch.before_execute
        or dispatch.after_execute
        or dispatch.commit
        or dispatch.rollback
        # make_engine's own: one begin listener, one error listener
        or len(dispatch.begin) != 1
        or len(engine.dialect.dispatch.handle_error) != 1
        or engine._execution_options
        or engine._should_log_info()
    )


@dataclass(slots=True)
class DriverWrite:
    """A write that is SQLite statements and nothing else (a plain append), each as the
    driver takes it (its SQL, its bound parameters): the first statement's first row
    holds the write's result in its first column, and no row back means the write was
    refused, to be made again through a Connection, where the refusal is diagnosed.
    `statements` makes them once BEGIN IMMEDIATE holds the write lock, as a unit of work
    runs under it: what they stamp (the time) is taken under the lock, so ids and times
    rise together across processes; None from it has the write made through a
    Connection instead (a value the Connection path reports in its own order).
    `rowcount`: the write's result is instead how many rows its first statement changed
    (a plain UPDATE), and nothing is refused but a None from `statements`."""

    statements: Callable[[], tuple[tuple[str, Any], ...] | None]
    rowcount: bool = False


#: What `commit_at_driver` returns for a write that was refused (and rolled back).
REFUSED: Any = object()


def commit_at_driver(
    conn: Connection,
    write: DriverWrite | tuple[str, Any],
    started: float,
    readers_wait_s: Callable[[], float],
) -> Any:
    """Run `write` as one transaction on the driver connection under `conn` (the store's
    kept writer Connection, outside any transaction of SQLAlchemy's), doing what the
    Connection path's begin listener and the store's commit steps do, without the
    Connection's transaction object and its events: a failed unit's leftover transaction
    rolled back, a pending switch to WAL tried, BEGIN IMMEDIATE, 0600 on the files at a
    connection's first write, the statements, in DELETE mode past the first busy timeout
    a COMMIT that waits for readers (as `SQLiteStoreDialect.before_commit`), COMMIT. The
    result (`DriverWrite.rowcount`: the rows the first statement changed; else REFUSED
    when the first statement gave no row). `write` may also be one statement already
    bound (its SQL, its parameters: `Store.write_one`'s, made before the lock since it
    stamps nothing), whose result is the rows it changed. Any failure rolls back what
    is open and raises what the Connection path raises (SQLAlchemy's DBAPIError, or a
    file that is not a database named as such); a connection that cannot even roll back
    is invalidated, so the store's next write opens a new one."""
    fairy = conn.connection
    # the DB-API connection itself (SQLite's drivers are not adapted: it is also the
    # `driver_connection`), without two properties per write
    dbapi_conn: Any = fairy.dbapi_connection
    info = fairy.info
    dialect = conn.dialect
    sql: str | None = None
    params: Any = None
    widened = False
    try:
        if dbapi_conn.in_transaction:
            log.warning("rolling back a transaction a failed unit of work left open")
            sql = "ROLLBACK"
            dbapi_conn.execute(sql)
        if info.get(_WAL_PENDING):
            _retry_wal_switch(info, dbapi_conn)
        sql = _BEGIN["IMMEDIATE"]
        dbapi_conn.execute(sql)
        if not info.get(_SECURED):
            path = info.get(_DB_PATH)
            if path is not None:
                secure_file_modes(path)
            info[_SECURED] = True
        if isinstance(write, tuple):  # one statement, bound already: the rows it changed
            sql, params = write
            cursor = dbapi_conn.execute(sql, params)
            result = cursor.rowcount
            cursor.close()
        else:
            made = write.statements()
            if made is None:
                dbapi_conn.rollback()
                return REFUSED
            statements = iter(made)
            sql, params = next(statements)
            cursor = dbapi_conn.execute(sql, params)
            if write.rowcount:
                result = cursor.rowcount
            else:
                row = cursor.fetchone()
                if row is None:
                    cursor.close()
                    sql = params = None
                    dbapi_conn.rollback()
                    return REFUSED
                result = row[0]
            cursor.close()
            for sql, params in statements:
                dbapi_conn.execute(sql, params).close()
        if time.monotonic() - started >= BUSY_TIMEOUT_S and info.get(_JOURNAL) not in (
            None,
            "wal",
        ):
            sql, params = f"PRAGMA busy_timeout = {max(0, int(readers_wait_s() * 1000))}", ()
            dbapi_conn.execute(sql)
            widened = True
        sql = params = None  # a COMMIT's error is reported without a statement
        dbapi_conn.commit()
        return result
    except sqlite_driver.Error as exc:
        _end_at_driver(conn, dbapi_conn, exc)
        raise _as_raised(dialect, info, sql, params, exc) from exc
    except BaseException as exc:
        _end_at_driver(conn, dbapi_conn, exc)
        raise
    finally:
        if widened and not conn.invalidated:
            try:
                dbapi_conn.execute(f"PRAGMA busy_timeout = {int(BUSY_TIMEOUT_S * 1000)}")
            except sqlite_driver.Error as exc:
                log.debug("resetting the busy timeout failed: %s", exc)


def _end_at_driver(conn: Connection, dbapi_conn: Any, exc: BaseException) -> None:
    """After a failed `commit_at_driver`: roll back what SQLite still holds (a COMMIT
    that met a lock leaves the transaction open, see end_failed_transaction); a
    connection that cannot roll back, or that SQLAlchemy would call disconnected, is
    invalidated."""
    try:
        if dbapi_conn.in_transaction:
            dbapi_conn.rollback()
    except sqlite_driver.Error as failed:
        log.warning("rolling back a failed write failed (%s); dropping the connection", failed)
        conn.invalidate(failed)
        return
    if isinstance(exc, sqlite_driver.Error) and conn.dialect.is_disconnect(
        exc,  # type: ignore[arg-type]  # the driver's own DB-API error
        dbapi_conn,
        None,
    ):
        conn.invalidate(exc)


def readers_block_commits(conn: Connection) -> bool:
    """Whether a COMMIT on this writing connection waits for readers: its file is in a
    rollback-journal mode (DELETE), where a reader's shared lock keeps a writer from
    committing, not WAL."""
    mode = conn.connection.info.get(_JOURNAL)
    return mode is not None and mode != "wal"


def set_busy_timeout(conn: Connection, seconds: float) -> None:
    """How long SQLite waits for a lock on this connection before it answers "database is
    locked" (BUSY_TIMEOUT_S unless a unit of work sets more)."""
    driver_execute(conn, f"PRAGMA busy_timeout = {max(0, int(seconds * 1000))}")


def take_read_lock(conn: Connection) -> None:
    """Start the read transaction of a deferred SQLite transaction now (its first read
    takes the shared lock / WAL snapshot, which lasts until the transaction ends)."""
    driver_execute(conn, "PRAGMA schema_version")


# --- Prepared statements: a Core statement compiled once per dialect, run at the driver ---

Params = Mapping[str, Any]
_NO_PARAMS: dict[str, Any] = {}


def _no_values(_params: Params) -> tuple[Any, ...]:
    return ()


def _one_value(name: str) -> Callable[[Params], tuple[Any, ...]]:
    def value_of(params: Params) -> tuple[Any, ...]:
        return (params[name],)

    return value_of


class _Compiled:
    __slots__ = ("sql", "names", "values_of", "defaults", "positional", "at_driver")

    def __init__(self, compiled: Compiled, dialect: Dialect) -> None:
        if "POSTCOMPILE" in compiled.string:
            raise ValueError(
                "a statement with expanding or literal-execute parameters cannot be "
                f"prepared: {compiled.string[:200]}"
            )
        self.sql = compiled.string
        self.positional = bool(dialect.positional)
        # a dialect hermes-store does not run on is only ever compiled for (`Prepared.sql`)
        self.at_driver = dialect.name in NAMES and dialect_named(dialect.name).in_process
        self.names: tuple[str, ...] = tuple(getattr(compiled, "positiontup", None) or ())
        #: the parameters' values in the statement's order, as a tuple (itemgetter: the
        #: lookups in C, where every append binds about 25)
        self.values_of: Callable[[Params], tuple[Any, ...]] = (
            _no_values
            if not self.names
            else _one_value(self.names[0])
            if len(self.names) == 1
            else operator.itemgetter(*self.names)
        )
        # Values the statement was built with (constants); a parameter declared without a
        # value must be given by every call, so a misspelt name fails instead of binding NULL
        names = getattr(compiled, "bind_names", {})
        self.defaults: dict[str, Any] = {
            name: bind.effective_value for bind, name in names.items() if not bind.required
        }

    def bind(self, params: Params) -> Any:
        if self.positional:
            if not self.defaults:
                return self.values_of(params)
            # a given value over the constant's, looked up in C (an append binds about 28)
            return self.values_of({**self.defaults, **params})
        if not self.defaults:
            return params
        return {**self.defaults, **params}


class Prepared:
    """A Core statement compiled once per dialect and run at the driver.

    The hot calls (an append, loading a conversation, a listing) send a handful of small
    statements each. Through `Connection.execute` every one of them pays SQLAlchemy's
    cache key generation, execution context and result wrapping, about 15-25 us, where
    SQLite itself answers in 1-5 us. A `Prepared` keeps the statement written once as a
    Core construct (so the SQL still comes from the models' tables and the per-dialect
    compilers) but compiles it a single time per dialect and then:

    - on a database in the process (SQLite: the dialect's `in_process`, backends.py),
      executes the compiled string on the driver connection of the unit of work's
      connection, inside its transaction (`driver_run`: errors raised as SQLAlchemy's,
      cursor-execute listeners still called);
    - on a server (PostgreSQL), hands the compiled string to
      `Connection.exec_driver_sql`, which keeps SQLAlchemy's disconnect handling and
      events (a network round trip dwarfs the difference there).

    Only statements with plain bound parameters can be prepared: no expanding IN lists
    and no literal-execute parameters, which must be rendered per call (`Prepared`
    refuses them when it compiles). Constants inside the statement keep the values they
    were built with. Results come back as plain tuples; `dicts` pairs them with the
    cursor's column names."""

    __slots__ = ("statement", "_by_dialect")

    def __init__(self, statement: Executable) -> None:
        self.statement = statement
        self._by_dialect: dict[str, _Compiled] = {}

    def _compiled(self, dialect: Dialect) -> _Compiled:
        found = self._by_dialect.get(dialect.name)
        if found is None:
            compiled = self.statement.compile(dialect=dialect)  # type: ignore[attr-defined]
            found = self._by_dialect[dialect.name] = _Compiled(compiled, dialect)
        return found

    def sql(self, dialect: Dialect) -> str:
        """The statement as `dialect` receives it."""
        return self._compiled(dialect).sql

    def bound(self, dialect: Dialect, params: Params) -> tuple[str, Any]:
        """The statement as `dialect`'s driver takes it, and `params` bound for it (a
        statement of a `DriverWrite`)."""
        compiled = self._compiled(dialect)
        return compiled.sql, compiled.bind(params)

    def _execute(self, conn: Connection, params: Params, consume: Callable[[Any], T]) -> T:
        """Execute once and give `consume` the DBAPI cursor (SQLite) or SQLAlchemy
        result (PostgreSQL); both offer fetchone, fetchall, rowcount and close."""
        compiled = self._compiled(conn.dialect)
        bound = compiled.bind(params)
        if compiled.at_driver:
            return driver_run(conn, compiled.sql, bound, consume)
        return consume(conn.exec_driver_sql(compiled.sql, bound))

    def execute(self, conn: Connection, params: Params, consume: Callable[[Any], T]) -> T:
        """Execute once inside `conn`'s transaction; `consume` gets the cursor (`_execute`)."""
        return self._execute(conn, params, consume)

    def run_alone(self, conn: Connection, params: Params, consume: Callable[[Any], T]) -> T:
        """SQLite: execute as a transaction of its own, on the driver connection under
        `conn`, which must have no SQLAlchemy transaction open. The driver runs in
        autocommit (`isolation_level = None`), so without a BEGIN the statement is its own
        transaction: it reads one snapshot (WAL) or holds the shared lock (DELETE) only
        while it runs, and `consume` reads every row it wants before the cursor is closed,
        which ends it. What `_on_begin` does first is done here too: a transaction a
        failed unit left open at the driver is rolled back (the statement would otherwise
        read inside it, in its old snapshot).

        One Python frame of its own where nothing listens to the connection's statements
        (what `driver_run` does, spelt out: this is every point read's path); with a
        cursor-execute listener it goes through `driver_run`, which calls it."""
        fairy = conn.connection
        # the DB-API connection itself: SQLite's drivers are not adapted (asyncio's are),
        # so it is also the `driver_connection`, reached without two properties
        dbapi_conn: Any = fairy.dbapi_connection
        if dbapi_conn.in_transaction:
            log.warning("rolling back a transaction a failed unit of work left open")
            driver_execute(conn, "ROLLBACK")
        dialect = conn.dialect
        compiled = self._by_dialect.get(dialect.name) or self._compiled(dialect)
        sql = compiled.sql
        bound = compiled.bind(params)
        dispatch = conn.dispatch
        if dispatch.before_cursor_execute or dispatch.after_cursor_execute:
            return driver_run(conn, sql, bound, _closing(consume))
        try:
            cursor = dbapi_conn.execute(sql, bound)
            try:
                return consume(cursor)
            finally:
                cursor.close()
        except _DRIVER_ERRORS as exc:
            raise _as_raised(dialect, fairy.info, sql, bound, exc) from exc

    def rows(self, conn: Connection, params: Params = _NO_PARAMS) -> list[tuple[Any, ...]]:
        return self._execute(conn, params, _all_tuples)

    def first(self, conn: Connection, params: Params = _NO_PARAMS) -> tuple[Any, ...] | None:
        return self._execute(conn, params, _first_tuple)

    def scalar(self, conn: Connection, params: Params = _NO_PARAMS) -> Any:
        row = self.first(conn, params)
        return None if row is None else row[0]

    def dicts(self, conn: Connection, params: Params = _NO_PARAMS) -> list[dict[str, Any]]:
        """Every row as a dict keyed by the result's column names."""
        return self._execute(conn, params, _all_dicts)

    def run(self, conn: Connection, params: Params = _NO_PARAMS) -> int:
        """Execute a data-changing statement; the number of rows it changed."""
        return self._execute(conn, params, _rowcount)


def _driver_rows(cursor: Any) -> tuple[list[Any], list[str]]:
    """Every row as the driver returns it (a tuple), and the column names. From a
    SQLAlchemy result (PostgreSQL) the rows come from its DB-API cursor: a statement
    compiled here declares no result types, so SQLAlchemy would only wrap each row."""
    if isinstance(cursor, CursorResult):
        raw = cursor.cursor
        if raw is None or raw.description is None:
            return [], []
        names = [column[0] for column in raw.description]
        rows = list(raw.fetchall())
        cursor.close()
        return rows, names
    return cursor.fetchall(), [column[0] for column in cursor.description or ()]


def _closing(consume: Callable[[Any], T]) -> Callable[[Any], T]:
    """`consume`, then the cursor closed whatever happened: an unfinished statement would
    keep its read transaction (and in DELETE mode its shared lock) open on a connection
    kept idle between reads."""

    def run(cursor: Any) -> T:
        try:
            return consume(cursor)
        finally:
            cursor.close()

    return run


def _all_tuples(cursor: Any) -> list[tuple[Any, ...]]:
    rows, _names = _driver_rows(cursor)
    if not rows or type(rows[0]) is tuple:  # both drivers' rows already are
        return rows
    return [tuple(row) for row in rows]


def _first_tuple(cursor: Any) -> tuple[Any, ...] | None:
    row = cursor.fetchone()
    cursor.close()
    return None if row is None else tuple(row)


def _first_value(cursor: Any) -> Any:
    # `_first_tuple`'s steps, without its frame: every point read of one value ends here
    row = cursor.fetchone()
    cursor.close()
    return None if row is None else row[0]


def _all_dicts(cursor: Any) -> list[dict[str, Any]]:
    rows, names = _driver_rows(cursor)
    # map rather than a comprehension: no Python frame per row (a driver's rows are as
    # wide as its description, so zip needs no length check)
    return list(map(dict, map(zip, repeat(names), rows)))


#: What a read hands `Prepared.execute`, `run_alone` or `Store.read_one` as `consume`:
#: every row as a tuple, the first row (None: no row), the first row's first value (None:
#: no row), every row as a dict keyed by the result's column names. Each takes a SQLite
#: cursor or a SQLAlchemy result.
all_tuples = _all_tuples
first_tuple = _first_tuple
first_value = _first_value
all_dicts = _all_dicts


def _rowcount(cursor: Any) -> int:
    return int(cursor.rowcount)


def make_engine(
    url: str | URL | None = None,
    *,
    read_only: bool = False,
    journal: JournalPolicy | None = None,
    driver: sqlite_driver.Driver | None = None,
    **engine_kwargs: Any,
) -> Engine:
    """An Engine for `url` (see `config.resolve_url`) with hermes-store's connection rules.
    SQLite files are driven through `driver`, by default this process's (sqlite_driver)."""
    resolved = resolve_url(url)
    if resolved.get_backend_name() == "postgresql":
        return _postgresql_engine(resolved, read_only=read_only, **engine_kwargs)
    if resolved.get_backend_name() != "sqlite":
        raise ValueError(
            f"unsupported database {resolved.get_backend_name()!r}: "
            "hermes-store runs on SQLite and PostgreSQL"
        )

    path = sqlite_path(resolved)
    connect_args: dict[str, Any] = {"timeout": BUSY_TIMEOUT_S, "check_same_thread": False}
    if path is not None:
        refuse_directory(path)
        if read_only:
            if not path.exists():
                raise DatabaseNotWritable(f"database file {path} does not exist")
            # percent-encoded: a "?", "#" or "%" in the path would otherwise end or
            # change the URI's path (and "#" would drop mode=ro, creating a new file)
            uri = f"file:{quote(str(path), safe='/')}?mode=ro"
            resolved = URL.create("sqlite", database=uri, query={"uri": "true"})
        else:
            check_writable(path)
    engine_kwargs.setdefault("poolclass", NullPool)
    chosen = driver or sqlite_driver.current()
    if path is not None and encryption.has_key(path) and not chosen.encrypts:
        sqlite_driver.require_encryption(f"the database {path}")
    engine = create_engine(
        resolved, connect_args=connect_args, module=chosen.module, **engine_kwargs
    )
    _install_sqlite_listeners(engine, journal or JournalPolicy.from_env(), read_only, path)
    if not read_only:
        _WRITES_AT_DRIVER.add(engine)
    return engine


#: How long a PostgreSQL statement may wait for a lock before it fails (and is retried by
#: the write path as SQLite's busy timeout would be): a stuck peer must not hang a turn.
PG_LOCK_TIMEOUT_MS = 10_000


#: Neither driver can encode a lone UTF-16 surrogate as UTF-8 (both raise
#: UnicodeEncodeError); the original stores U+FFFD in its place. The repositories scrub
#: the text they write (repositories/encoding.py) and the search a query's text, the same
#: way, so that a query finds what was stored.
_SURROGATES = re.compile("[\ud800-\udfff]")


def scrub_surrogates(value: str) -> str:
    """`value` with each lone surrogate replaced by U+FFFD, as the original stores it."""
    if value.isascii():  # an ASCII text holds no surrogate
        return value
    return _SURROGATES.sub("\ufffd", value)


#: PostgreSQL's text cannot hold U+0000, which SQLite stores and the original writes (the
#: `\x00json:` prefix of structured content). Every string hermes-store sends to
#: PostgreSQL has U+0000 written as U+FFFF "0" and U+FFFF (a noncharacter) as U+FFFF
#: U+FFFF; every text it reads back is unescaped. Done in the driver, so values round-trip
#: exactly through any statement, typed or not. SQL run outside hermes-store sees the
#: escaped form.
NUL_ESCAPE = "\uffff"


def escape_nul(value: str) -> str:
    if NUL_ESCAPE not in value and "\x00" not in value:
        return value
    return value.replace(NUL_ESCAPE, NUL_ESCAPE * 2).replace("\x00", NUL_ESCAPE + "0")


def unescape_nul(value: str) -> str:
    if NUL_ESCAPE not in value:
        return value
    out: list[str] = []
    i = 0
    while i < len(value):
        char = value[i]
        if char == NUL_ESCAPE and i + 1 < len(value):
            out.append("\x00" if value[i + 1] == "0" else value[i + 1])
            i += 2
            continue
        out.append(char)
        i += 1
    return "".join(out)


def install_pg_text_adapters(dbapi_conn: Any) -> None:
    """Register the NUL-escaping dumpers and loaders on one psycopg connection."""
    from psycopg.types import string

    # Every string parameter and text column of every statement goes through these: the
    # base class's method is called directly (no super() lookup) and the escape only where
    # the string holds something to escape.
    def escaping(base: type[Any]) -> type:
        base_dump = base.dump

        class Dumper(base):  # type: ignore[misc]
            def dump(self, obj: str) -> Any:
                if "\x00" in obj or NUL_ESCAPE in obj:
                    obj = escape_nul(obj)
                return base_dump(self, obj)

        return Dumper

    def unescaping(base: type[Any]) -> type:
        base_load = base.load

        class Loader(base):  # type: ignore[misc]
            def load(self, data: Any) -> Any:
                value = base_load(self, data)
                if isinstance(value, str) and NUL_ESCAPE in value:
                    return unescape_nul(value)
                return value

        return Loader

    adapters = dbapi_conn.adapters
    for base in (string.StrDumperUnknown, string.StrBinaryDumper):
        adapters.register_dumper(str, escaping(base))
    for oid in ("text", "varchar", "bpchar"):
        adapters.register_loader(oid, unescaping(string.TextLoader))
        adapters.register_loader(oid, unescaping(string.TextBinaryLoader))


#: libpq settings hermes-store gives each PostgreSQL connection unless the URL sets them:
#: give up a connection attempt after 10 s (an unreachable host otherwise hangs for the
#: kernel's TCP timeout, minutes), and notice a peer that vanished (a host that lost power,
#: a dropped NAT entry) within about 30 s, whether the socket is idle (keepalives) or has
#: a statement unacknowledged (tcp_user_timeout); each such fault is retried by the store.
PG_CONNECTION_DEFAULTS: dict[str, Any] = {
    "connect_timeout": 10,
    "keepalives": 1,
    "keepalives_idle": 15,
    "keepalives_interval": 5,
    "keepalives_count": 3,
    "tcp_user_timeout": 30_000,
}


def _prepare_threshold(value: str) -> int | None:
    """psycopg's `prepare_threshold` from a URL: `none` (or empty) turns server-side
    prepared statements off, which PgBouncer before 1.21 cannot carry in transaction mode.
    Anything but a whole number >= 0 raises InvalidURL (a ValueError) before a connection
    is tried."""
    if value.strip().lower() in ("", "none", "off"):
        return None
    try:
        threshold = int(value)
    except ValueError:
        threshold = -1
    if threshold < 0:
        raise InvalidURL(
            f"prepare_threshold={value!r} in the database URL: give the number of executions "
            "after which psycopg prepares a statement (0 or more), or none to never prepare"
        )
    return threshold


def _postgresql_engine(url: URL, *, read_only: bool, **engine_kwargs: Any) -> Engine:
    try:
        import psycopg  # noqa: F401
    except ImportError as exc:
        raise DriverMissing(
            "PostgreSQL needs the psycopg driver, which is not installed: "
            "pip install 'hermes-store[postgres]'"
        ) from exc
    connect_args: dict[str, Any] = {"application_name": "hermes-store"}
    if "options" not in url.query:
        # A URL that sets `options` (empty, say, for a pooler that refuses startup
        # options) takes responsibility for these settings (docs/postgresql.md, "Behind PgBouncer").
        options = f"-c lock_timeout={PG_LOCK_TIMEOUT_MS}"
        if read_only:
            options += " -c default_transaction_read_only=on"
        connect_args["options"] = options
    connect_args.update({k: v for k, v in PG_CONNECTION_DEFAULTS.items() if k not in url.query})
    if "prepare_threshold" in url.query:
        threshold = url.query["prepare_threshold"]
        connect_args["prepare_threshold"] = _prepare_threshold(
            threshold if isinstance(threshold, str) else threshold[-1]
        )
        url = url.difference_update_query(["prepare_threshold"])
    connect_args.update(engine_kwargs.pop("connect_args", {}))
    # No ping per checkout (a round trip per unit of work): a connection the server
    # dropped fails its unit of work, which the store retries on a fresh connection
    # (pg_faults), and SQLAlchemy then replaces every pooled connection older than it.
    engine_kwargs.setdefault("isolation_level", "READ COMMITTED")
    engine = create_engine(url, connect_args=connect_args, **engine_kwargs)

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_conn: Any, _record: Any) -> None:
        install_pg_text_adapters(dbapi_conn)

    return engine


def unlock_on_connect(engine: Engine, path: Path | None) -> Engine:
    """Have every connection of a plain SQLite engine (one made without make_engine's
    rules) take the file's encryption key first (encryption.unlock)."""

    @event.listens_for(engine, "connect", insert=True)
    def _unlock(dbapi_conn: Any, _record: Any) -> None:
        encryption.unlock(dbapi_conn, path)

    return engine


def write_connection(engine: Engine) -> Connection:
    """A connection whose transactions begin IMMEDIATE (take the write lock up front)."""
    return engine.connect().execution_options(**{BEGIN_MODE: "IMMEDIATE"})
