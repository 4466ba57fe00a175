"""Reading a database without writing to it: the engine the read commands and a
read-only `Store` use, the judgement of whether the repositories can read a database as
it is (by its shape: a `state.db` the original v23 code wrote needs no upgrade to be
read), and the typed refusal of one they cannot read.

A read-only SQLite connection to a WAL-mode file creates the file's `-wal` and `-shm`
companions when none exist (no process has the file open), and only a connection that
may write removes them when it closes. So once the last read-only connection of an
engine has closed, the companions it created are handed to a plain read-write
connection that reads one value and closes: as the file's last connection SQLite
removes them (it checkpoints an empty WAL, which writes nothing); if another process
opened the file meanwhile they stay, as theirs.
"""

from __future__ import annotations

import logging
import os
import threading
import weakref
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sqlalchemy import Connection, Engine, Select, event, inspect, select, sql, text
from sqlalchemy.engine import URL
from sqlalchemy.exc import DBAPIError
from sqlalchemy.pool import QueuePool

from ..config import SCHEMA_VERSION, resolve_url, shown_url, sqlite_path
from ..contract import FTS_TABLE, VERSION_TABLE
from ..errors import (
    DatabaseMissing,
    NotAHermesDatabase,
    NotAtHead,
    SchemaBehind,
    SchemaTooNew,
    StoreError,
)
from ..models import metadata
from ..runtime.engine import BUSY_TIMEOUT_S, make_engine
from ..sqlite import driver as sqlite_driver
from ..sqlite import encryption
from ..sqlite.file import refuse_directory
from .head import HEAD_REVISION, known_revisions
from .inventory import INVENTORY

log = logging.getLogger(__name__)

_COMPANIONS = ("-wal", "-shm")
#: The Alembic revision a database is at (its version table has no model).
_STORED_REVISION: Select[tuple[str]] = select(sql.column("version_num")).select_from(
    sql.table(VERSION_TABLE)
)


def _read_needs() -> tuple[tuple[str, str], ...]:
    """What the repositories read: every table of upstream schema version 23 that
    INVENTORY names (the FTS tables aside: search falls back without them, and PostgreSQL
    has none), as ("table", "") and each of its columns as the models declare them."""
    tables = [
        table
        for items in INVENTORY.values()
        for kind, table, _ in items
        if kind == "table" and not table.startswith(FTS_TABLE)
    ]
    needs: dict[tuple[str, str], None] = {}
    for table in tables:
        needs[(table, "")] = None
        model = metadata.tables.get(table)
        for column in [] if model is None else model.columns:
            needs[(table, column.name)] = None
    return tuple(needs)


READ_NEEDS = _read_needs()


@dataclass(frozen=True)
class ReadVerdict:
    """Whether the repositories can read a database as it is, without writing to it."""

    kind: str  # as DatabaseShape.kind
    #: the hermes-store revision it records (None: not adopted by hermes-store)
    revision: str | None
    stored_version: int | None
    #: what it records that this code does not know (`schema_version 24`), else None
    too_new: str | None
    #: tables and columns of schema version 23 it lacks ("column sessions.session_key")
    missing: tuple[str, ...]
    #: it lacks nothing, but records an older hermes-store revision or schema_version
    behind: bool

    @property
    def readable(self) -> bool:
        return (
            self.kind in ("managed", "legacy")
            and self.too_new is None
            and not self.missing
            and not self.behind
        )

    @property
    def adopted(self) -> bool:
        return self.revision is not None

    def state(self, head: str) -> str:
        """Where the database stands, in words."""
        if self.revision is not None:
            return f"hermes-store revision {self.revision}, this hermes-store's is {head}"
        version = "no version" if self.stored_version is None else self.stored_version
        return f"schema_version {version}, written by Hermes and not adopted by hermes-store"


def _newer_than_code(stored: int | None, revision: str | None, head: str) -> str | None:
    """What a database records that is newer than this code (`schema_version 24`,
    `hermes-store revision hs0009`: a revision this code does not have), else None."""
    if stored is not None and stored > SCHEMA_VERSION:
        return f"schema_version {stored}"
    if revision is not None and revision != head and revision not in known_revisions():
        return f"hermes-store revision {revision}"
    return None


def too_new_error(
    stored: int | None, revision: str | None, head: str, place: str
) -> SchemaTooNew | None:
    """The one refusal of a database newer than this code, whichever command meets it."""
    if stored is not None and stored > SCHEMA_VERSION:
        return SchemaTooNew(stored, SCHEMA_VERSION, place)
    found = _newer_than_code(stored, revision, head)
    if found is None:
        return None
    return SchemaTooNew(found, f"revision {head}", place)


def _catalogue(conn: Connection) -> tuple[set[str], dict[str, set[str]]]:
    """Every table's name, and the column names of the tables reading needs and of
    hermes-store's version table (one catalogue query each on PostgreSQL). Only those
    columns: a virtual table whose module or tokenizer this SQLite lacks
    (messages_fts_cjk) cannot even be listed."""
    inspector = inspect(conn)
    tables = set(inspector.get_table_names())
    wanted = {table for table, _ in READ_NEEDS} | {VERSION_TABLE}
    present = sorted(wanted & tables)
    found = inspector.get_multi_columns(filter_names=present) if present else {}
    columns = {table: {str(c["name"]) for c in cols} for (_, table), cols in found.items()}
    return tables, columns


def judge_for_reading(conn: Connection, head: str) -> ReadVerdict:
    """Can the repositories read this database as it is? By its shape, not by whether
    hermes-store adopted it: a `state.db` the original v23 code wrote is read as it is.
    Reads only (two or three catalogue statements)."""
    tables, columns = _catalogue(conn)
    stored: int | None = None
    if "schema_version" in tables:
        value = conn.execute(text("SELECT MAX(version) FROM schema_version")).scalar()
        stored = int(value) if value is not None else None
    revision: str | None = None
    if VERSION_TABLE in tables:
        value = conn.execute(_STORED_REVISION).scalar()
        revision = None if value is None else str(value)
    if revision is not None:
        kind = "managed"
    elif not tables - {VERSION_TABLE}:
        kind = "empty"
    elif "sessions" not in tables or "messages" not in tables:
        kind = "foreign"
    else:
        kind = "legacy"
    too_new = _newer_than_code(stored, revision, head)
    missing: tuple[str, ...] = ()
    behind = False
    if kind in ("managed", "legacy") and too_new is None:
        missing = tuple(
            f"table {table}" if not name else f"column {table}.{name}"
            for table, name in READ_NEEDS
            # a missing table is named once, not with each of its columns
            if (not name and table not in columns)
            or (name and table in columns and name not in columns[table])
        )
        # reading needs the v23 shape only: a database at the upstream head or one of the
        # project's own revisions reads as it is (writing needs the head, see Store)
        behind = stored != SCHEMA_VERSION or (
            revision is not None and revision.isdigit() and int(revision) < SCHEMA_VERSION
        )
    return ReadVerdict(
        kind=kind,
        revision=revision,
        stored_version=stored,
        too_new=too_new,
        missing=missing,
        behind=behind,
    )


def place_of(url: URL) -> str:
    """How messages name a database: the file's path, else the URL without credentials."""
    path = sqlite_path(url)
    return str(path) if path is not None else shown_url(url)


def upgrade_command(url: URL) -> str:
    return f"hermes-store upgrade --url '{place_of(url)}'"


def _companions(path: Path) -> set[str]:
    return {suffix for suffix in _COMPANIONS if Path(f"{path}{suffix}").exists()}


def _remove_companions(path: Path, created: set[str]) -> None:
    """Let SQLite remove the companions a read-only connection created (see the module
    docstring); nothing when this process may not write the file or its directory."""
    if not os.access(path, os.W_OK) or not os.access(path.parent, os.W_OK | os.X_OK):
        log.debug("cannot remove %s of %s: not writable here", sorted(created), path)
        return
    try:
        con = encryption.connect(str(path), timeout=BUSY_TIMEOUT_S, isolation_level=None)
        try:
            con.execute("PRAGMA schema_version").fetchone()
        finally:
            con.close()
    except sqlite_driver.Error as exc:
        log.debug("leaving %s of %s: %s", sorted(created), path, exc)


def leave_no_companions(engine: Engine, path: Path) -> None:
    """Install on a read-only SQLite engine for `path`: whenever its last connection has
    closed, the `-wal`/`-shm` files its connections created (absent when this was called)
    are removed as SQLite removes them after a writer. They are looked for where SQLite
    puts them, beside the file a symbolic link names. An engine that is never disposed
    (a read-only Store never closed) has its idle connections closed, and so tidied, when
    it is garbage-collected or at the latest when the interpreter exits."""
    # SQLite opens a symbolic link's target and names its companions after that file
    path = path.resolve()
    before = _companions(path)
    if set(_COMPANIONS) <= before:
        return  # the file is open elsewhere (or was left so): its companions are not ours
    tidy = _Companions(path, before)
    event.listen(engine, "connect", tidy.opened)
    event.listen(engine, "close", tidy.closed)
    event.listen(engine, "close_detached", tidy.closed)
    # holds the connections, never the engine (the pool's listeners refer back to it, so
    # holding the pool would keep the engine alive): runs when the engine is collected,
    # or at exit if it is still alive then
    weakref.finalize(engine, tidy.abandoned)


class _Companions:
    """The connections of one read-only engine, and the tidy-up after its last one."""

    def __init__(self, path: Path, before: set[str]) -> None:
        self.path = path
        self.before = before
        # reentrant: a collection (and so `abandoned`) can start inside `closed`
        self.lock = threading.RLock()
        self.connections: dict[int, Any] = {}  # id -> DB-API connection, while open

    def opened(self, dbapi_conn: Any, *_args: Any) -> None:
        with self.lock:
            self.connections[id(dbapi_conn)] = dbapi_conn

    def closed(self, dbapi_conn: Any, *_args: Any) -> None:
        # the pool announces a close before it closes: close now (closing twice is
        # harmless), or this connection would still hold the file open during the tidy-up
        dbapi_conn.close()
        with self.lock:
            self.connections.pop(id(dbapi_conn), None)
            if not self.connections:
                self._tidy()

    def abandoned(self) -> None:
        """The engine was collected without being disposed of, or the interpreter is
        exiting: close what is still open, then tidy up (nothing when every connection
        was closed already: the last close tidied)."""
        with self.lock:
            left, self.connections = list(self.connections.values()), {}
            if not left:
                return
            for dbapi_conn in left:
                try:
                    dbapi_conn.close()
                except sqlite_driver.Error as exc:
                    log.debug("closing an abandoned connection failed: %s", exc)
            self._tidy()

    def _tidy(self) -> None:
        created = _companions(self.path) - self.before
        if created:
            _remove_companions(self.path, created)


def refuse_missing_file(url: URL) -> None:
    """NotAtHead for a SQLite path that holds no database (nothing is created)."""
    path = sqlite_path(url)
    if path is None:
        return
    refuse_directory(path)
    if not path.exists() or path.stat().st_size == 0:
        raise NotAtHead(
            f"there is no hermes-store database at {path}; create it with: "
            f"hermes-store upgrade --url '{path}'"
        )


def reading_engine(url: str | URL | None, *, refuse_empty: bool = True) -> Engine:
    """A read-only engine for the database at `url` (which must exist; an empty file is
    refused too unless `refuse_empty` is False), keeping one connection until it is
    disposed; a SQLite file keeps its bytes, its mode and its journal mode, and is left
    without companions it did not have."""
    resolved = resolve_url(url)
    path = sqlite_path(resolved)
    if refuse_empty or path is None or not path.exists():
        refuse_missing_file(resolved)
    else:
        refuse_directory(path)
    engine = make_engine(resolved, read_only=True, poolclass=QueuePool, pool_size=1)
    if path is not None:
        leave_no_companions(engine, path)
    return engine


def refuse_unreadable(verdict: ReadVerdict, url: URL, head: str) -> None:
    """The typed refusal of a database the repositories cannot read as it is."""
    place = place_of(url)
    newer = too_new_error(verdict.stored_version, verdict.revision, head, place)
    if newer is not None:
        raise newer
    if verdict.kind == "empty":
        raise NotAtHead(
            f"there is no hermes-store database in {place} (it holds no tables); create it "
            f"with: {upgrade_command(url)}"
        )
    if verdict.kind == "foreign":
        raise NotAHermesDatabase(
            f"{place} holds tables but no Hermes sessions/messages tables; point --url at a "
            "Hermes state.db"
        )
    if not verdict.readable:
        raise SchemaBehind(place, verdict.state(head), list(verdict.missing), upgrade_command(url))


def require_readable(conn: Connection, url: URL, head: str) -> ReadVerdict:
    """The verdict on the database behind `conn`, or its typed refusal."""
    verdict = judge_for_reading(conn, head)
    refuse_unreadable(verdict, url, head)
    return verdict


def missing_database(url: URL, exc: BaseException) -> DatabaseMissing | None:
    """DatabaseMissing when connecting to the PostgreSQL database at `url` failed because
    the server has no database of that name (asked of the server's maintenance database:
    the error text is translated by the server's locale, and carries no SQLSTATE)."""
    if not url.database:
        return None
    orig = exc.orig if isinstance(exc, DBAPIError) else exc
    if not type(orig).__module__.startswith("psycopg"):
        return None
    import psycopg

    if not isinstance(orig, psycopg.OperationalError) or orig.sqlstate is not None:
        return None
    for maintenance in ("postgres", "template1"):
        conninfo = (
            url.set(drivername="postgresql", database=maintenance)
            .difference_update_query(["prepare_threshold"])
            .render_as_string(hide_password=False)
        )
        try:
            with psycopg.connect(conninfo, connect_timeout=5) as con:
                found = con.execute(
                    "SELECT 1 FROM pg_database WHERE datname = %s", (url.database,)
                ).fetchone()
        except psycopg.Error:
            continue
        if found is not None:
            return None
        server = f"{url.host or 'on the local socket'}" + (f":{url.port}" if url.port else "")
        return DatabaseMissing(url.database, server, upgrade_command(url))
    return None


@contextmanager
def explained_connection_errors(url: URL) -> Iterator[None]:
    """A failed connection to a PostgreSQL database that does not exist becomes
    DatabaseMissing, naming the `createdb` command."""
    try:
        yield
    except (DBAPIError, StoreError) as exc:
        cause: BaseException = exc
        if isinstance(exc, StoreError) and exc.__cause__ is not None:
            cause = exc.__cause__
        missing = missing_database(url, cause)
        if missing is None:
            raise
        raise missing from exc


def read_only_engine(url: str | URL | None = None) -> Engine:
    """An engine for reading the database at `url` as it is, for notebooks and scripts:
    any database whose shape is head, adopted by hermes-store or not, read-only (no
    journal-mode change, no pragmas; PostgreSQL transactions are read-only). A database
    the models cannot read is refused with what to do (SchemaBehind naming what it lacks,
    SchemaTooNew, NotAtHead for a missing file). Once `engine.dispose()` has closed its
    connections a SQLite file is as it was: its bytes, its mode, no -wal/-shm left that
    it did not have."""
    resolved = resolve_url(url)
    with explained_connection_errors(resolved):
        engine = reading_engine(resolved)
        try:
            with engine.connect() as conn:
                require_readable(conn, resolved, HEAD_REVISION)
                conn.rollback()
        except BaseException:
            engine.dispose()
            raise
    return engine
