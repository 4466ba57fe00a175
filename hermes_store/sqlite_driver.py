"""Which SQLite library this process drives, and the error classes of every library it may.

SQLite builds from 3.7.0 up to 3.51.2 (but the 3.44.6 and 3.50.7 backports) carry the
WAL-reset bug, which can corrupt a WAL database under concurrent writers, so on them a
new `state.db` runs in DELETE journal mode, where a reader keeps writers from committing.
Python's own `sqlite3` links the system's library, which on most machines is such a build.
The `sqlite` extra installs `pysqlite3`, the same DB-API module built with a bundled,
fixed SQLite; when it is importable and its SQLite is fixed it is used, and new files get
WAL. `HERMES_STORE_SQLITE_DRIVER` overrides the choice: `sqlite3` (the standard library)
or `pysqlite3` (required; an error if it is missing).

One process drives every SQLite file through one library: two copies of SQLite in one
process do not see each other's POSIX locks, and closing a file in one drops the locks
the other holds on it (https://www.sqlite.org/howtocorrupt.html, section 2.2.1). Code
that opens a file itself (recovery, the facade's raw connection) takes `connect` from here.
"""

from __future__ import annotations

import importlib
import os
import sqlite3
from dataclasses import dataclass
from functools import cache
from types import ModuleType
from typing import Any

from .errors import InvalidURL

DRIVER_ENV = "HERMES_STORE_SQLITE_DRIVER"
DRIVER_CHOICES = ("auto", "sqlite3", "pysqlite3")
#: The DB-API module of the `sqlite` extra.
BUNDLED_MODULE = "pysqlite3.dbapi2"


def wal_reset_vulnerable(version: tuple[int, int, int]) -> bool:
    """True for SQLite builds with the WAL-reset bug (3.7.0 <= v < 3.51.3, minus backports)."""
    if version < (3, 7, 0) or version >= (3, 51, 3):
        return False
    if (3, 50, 7) <= version < (3, 51, 0) or (3, 44, 6) <= version < (3, 45, 0):
        return False
    return True


def _bundled() -> ModuleType | None:
    try:
        return importlib.import_module(BUNDLED_MODULE)
    except ImportError:
        return None


def _classes(name: str) -> tuple[type[Any], ...]:
    """The class `name` (Error, OperationalError, Connection, ...) of the standard library
    and of pysqlite3."""
    found: list[type[Any]] = [getattr(sqlite3, name)]
    bundled = _bundled()
    if bundled is not None:
        found.append(getattr(bundled, name))
    return tuple(found)


#: For `except` and `isinstance`: an error raised by either library.
Error: tuple[type[Exception], ...] = _classes("Error")
DatabaseError: tuple[type[Exception], ...] = _classes("DatabaseError")
OperationalError: tuple[type[Exception], ...] = _classes("OperationalError")
IntegrityError: tuple[type[Exception], ...] = _classes("IntegrityError")
ProgrammingError: tuple[type[Exception], ...] = _classes("ProgrammingError")
#: A DB-API connection of either library.
Connection: tuple[type[Any], ...] = _classes("Connection")


def module_of(conn: object) -> ModuleType:
    """The DB-API module a connection belongs to."""
    bundled = _bundled()
    if bundled is not None and isinstance(conn, bundled.Connection):
        return bundled
    return sqlite3


@dataclass(frozen=True)
class Driver:
    """The SQLite DB-API module this process uses, and why it was chosen."""

    name: str  # "sqlite3" or "pysqlite3"
    module: ModuleType
    reason: str

    @property
    def sqlite_version(self) -> tuple[int, int, int]:
        info: tuple[int, int, int] = self.module.sqlite_version_info
        return info

    @property
    def sqlite_version_text(self) -> str:
        return str(self.module.sqlite_version)

    @property
    def wal_safe(self) -> bool:
        return not wal_reset_vulnerable(self.sqlite_version)

    def connect(self, database: str, **kwargs: Any) -> sqlite3.Connection:
        """A DB-API connection through this driver (typed as the standard library's, whose
        interface pysqlite3 shares)."""
        conn: sqlite3.Connection = self.module.connect(database, **kwargs)
        return conn


def choose(setting: str | None = None) -> Driver:
    """The driver `setting` (else `$HERMES_STORE_SQLITE_DRIVER`, else auto) asks for."""
    wanted = (setting if setting is not None else os.environ.get(DRIVER_ENV, "")) or "auto"
    wanted = wanted.strip().lower()
    if wanted not in DRIVER_CHOICES:
        raise InvalidURL(
            f"{DRIVER_ENV}={wanted!r}: choose one of {', '.join(DRIVER_CHOICES)}"
        )
    bundled = _bundled()
    if wanted == "sqlite3":
        return Driver("sqlite3", sqlite3, f"{DRIVER_ENV}=sqlite3")
    if wanted == "pysqlite3":
        if bundled is None:
            raise InvalidURL(
                f"{DRIVER_ENV}=pysqlite3, but pysqlite3 is not installed: "
                "pip install 'hermes-store[sqlite]'"
            )
        return Driver("pysqlite3", bundled, f"{DRIVER_ENV}=pysqlite3")
    stdlib_fixed = not wal_reset_vulnerable(sqlite3.sqlite_version_info)
    if stdlib_fixed:
        return Driver("sqlite3", sqlite3, "the standard library's SQLite has the WAL-reset fix")
    if bundled is not None and not wal_reset_vulnerable(bundled.sqlite_version_info):
        return Driver(
            "pysqlite3",
            bundled,
            f"the standard library's SQLite {sqlite3.sqlite_version} has the WAL-reset bug; "
            f"pysqlite3 bundles {bundled.sqlite_version}, which has the fix",
        )
    if bundled is not None:
        why = f"pysqlite3's SQLite {bundled.sqlite_version} has the WAL-reset bug too"
    else:
        why = "pysqlite3 (pip install 'hermes-store[sqlite]') is not installed"
    return Driver(
        "sqlite3",
        sqlite3,
        f"the standard library's SQLite {sqlite3.sqlite_version} has the WAL-reset bug and {why}",
    )


@cache
def current() -> Driver:
    """The driver of this process, chosen once (see the module docstring for why once)."""
    return choose()
