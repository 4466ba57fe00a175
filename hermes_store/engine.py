"""Engines for a URL: the only module that knows driver details.

SQLite: the driver's own transaction handling is switched off and every unit of work
starts with an explicit BEGIN (IMMEDIATE for writes, DEFERRED for reads), the recipe from
SQLAlchemy's pysqlite documentation. Pragmas are set in a connect listener, outside any
transaction, because a PRAGMA inside one does nothing.
"""

from __future__ import annotations

import logging
import os
import sqlite3
from pathlib import Path
from typing import Any
from urllib.parse import quote

from sqlalchemy import create_engine, event
from sqlalchemy.engine import URL, Connection, Engine
from sqlalchemy.pool import NullPool

from .config import JournalPolicy, resolve_url, sqlite_path
from .errors import DatabaseNotWritable

log = logging.getLogger(__name__)

#: Execution option naming the BEGIN mode of a SQLite unit of work.
BEGIN_MODE = "hermes_begin"
BUSY_TIMEOUT_S = 1.0
_SIDECARS = ("", "-wal", "-shm", "-journal")


def wal_reset_vulnerable(version: tuple[int, int, int] | None = None) -> bool:
    """True for SQLite builds with the WAL-reset bug (3.7.0 <= v < 3.51.3, minus backports)."""
    v = version or sqlite3.sqlite_version_info
    if v < (3, 7, 0) or v >= (3, 51, 3):
        return False
    if (3, 50, 7) <= v < (3, 51, 0) or (3, 44, 6) <= v < (3, 45, 0):
        return False
    return True


def apply_journal_mode(dbapi_conn: sqlite3.Connection, policy: JournalPolicy) -> str:
    """Choose the journal mode by the original's rules; never downgrade a WAL file."""
    current = str(dbapi_conn.execute("PRAGMA journal_mode").fetchone()[0]).lower()
    if current == "wal":
        return "wal"
    want = policy.mode
    if want == "auto":
        want = "delete" if wal_reset_vulnerable() else "wal"
    if want == "delete":
        if current != "delete":
            dbapi_conn.execute("PRAGMA journal_mode=DELETE")
        return "delete"
    try:
        got = str(dbapi_conn.execute("PRAGMA journal_mode=WAL").fetchone()[0]).lower()
    except sqlite3.OperationalError as exc:
        text = str(exc).lower()
        if "locking protocol" in text or "not authorized" in text:
            log.warning("WAL is not available here (%s); using DELETE journal mode", exc)
            return "delete"
        raise
    return got


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
        raise DatabaseNotWritable(
            f"database file {path} is read-only for this user; fix with: chmod u+rw '{path}'"
        )
    if not os.access(directory, os.W_OK | os.X_OK):
        raise DatabaseNotWritable(
            f"directory {directory} of database {path} is not writable; "
            "SQLite needs it for its journal files"
        )


def _install_sqlite_listeners(engine: Engine, policy: JournalPolicy, read_only: bool) -> None:
    db_path = sqlite_path(engine.url)

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_conn: sqlite3.Connection, _record: Any) -> None:
        dbapi_conn.isolation_level = None  # we issue BEGIN ourselves
        if not read_only:
            apply_journal_mode(dbapi_conn, policy)
            dbapi_conn.execute("PRAGMA foreign_keys=ON")
            dbapi_conn.execute("PRAGMA recursive_triggers=ON")
            if db_path is not None:
                secure_file_modes(db_path)

    @event.listens_for(engine, "begin")
    def _on_begin(conn: Connection) -> None:
        mode = conn.get_execution_options().get(BEGIN_MODE, "DEFERRED")
        conn.exec_driver_sql(f"BEGIN {mode}")


def make_engine(
    url: str | URL | None = None,
    *,
    read_only: bool = False,
    journal: JournalPolicy | None = None,
    **engine_kwargs: Any,
) -> Engine:
    """An Engine for `url` (see `config.resolve_url`) with hermes-store's connection rules."""
    resolved = resolve_url(url)
    if resolved.get_backend_name() != "sqlite":
        return create_engine(resolved, **engine_kwargs)

    path = sqlite_path(resolved)
    connect_args: dict[str, Any] = {"timeout": BUSY_TIMEOUT_S, "check_same_thread": False}
    if path is not None:
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
    engine = create_engine(resolved, connect_args=connect_args, **engine_kwargs)
    _install_sqlite_listeners(engine, journal or JournalPolicy(), read_only)
    return engine


def write_connection(engine: Engine) -> Connection:
    """A connection whose transactions begin IMMEDIATE (take the write lock up front)."""
    return engine.connect().execution_options(**{BEGIN_MODE: "IMMEDIATE"})
