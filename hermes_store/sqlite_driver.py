"""Which SQLite library this process drives, and the error classes of every library it may.

SQLite builds from 3.7.0 up to 3.51.2 (but the 3.44.6 and 3.50.7 backports) carry the
WAL-reset bug, which can corrupt a WAL database under concurrent writers, so on them a
new `state.db` runs in DELETE journal mode, where a reader keeps writers from committing.
Python's own `sqlite3` links the system's library, which on most machines is such a build.
`pysqlite3` is the same DB-API module built with a bundled, fixed SQLite; it is a
dependency on the platforms it publishes wheels for (`has_pysqlite3_wheel`; the `sqlite`
extra asks for it everywhere). When it is importable and its SQLite is fixed it is used,
and new files get WAL. `HERMES_STORE_SQLITE_DRIVER` overrides the choice: `sqlite3` (the
standard library) or `pysqlite3` (required; an error if it is missing).

One process drives every SQLite file through one library: two copies of SQLite in one
process do not see each other's POSIX locks, and closing a file in one drops the locks
the other holds on it (https://www.sqlite.org/howtocorrupt.html, section 2.2.1). Code
that opens a file itself (recovery, the facade's raw connection) takes `connect` from here.
"""

from __future__ import annotations

import importlib
import os
import platform
import sqlite3
import sys
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


def has_pysqlite3_wheel(
    implementation: str | None = None,
    version: tuple[int, int] | None = None,
    system: str | None = None,
    machine: str | None = None,
) -> bool:
    """Whether pysqlite3 publishes a wheel for this platform (or the one given), which is
    where the project depends on it: the environment marker of its requirement in
    pyproject.toml says the same (CPython 3.11-3.14 on Linux x86_64, macOS arm64,
    Windows x86 and x64)."""
    implementation = implementation or platform.python_implementation()
    version = version or (sys.version_info.major, sys.version_info.minor)
    system = system or sys.platform
    machine = machine if machine is not None else platform.machine()
    if implementation != "CPython" or version >= (3, 15):
        return False
    wheels = {"linux": ("x86_64",), "darwin": ("arm64",), "win32": ("AMD64", "x86")}
    return machine in wheels.get(system, ())


def how_to_get_the_fix() -> str:
    """What gives this process a SQLite with the WAL-reset fix, for the messages that say
    a file runs in DELETE mode (or in WAL mode on a SQLite with the bug)."""
    bundled = _bundled()
    if bundled is not None and not wal_reset_vulnerable(bundled.sqlite_version_info):
        return (
            f"pysqlite3 is installed and its SQLite {bundled.sqlite_version} has the fix: "
            f"leave {DRIVER_ENV} unset"
        )
    if bundled is not None:
        return f"pysqlite3's SQLite {bundled.sqlite_version} has the bug too: upgrade pysqlite3"
    if has_pysqlite3_wheel():
        return "pip install pysqlite3 (a dependency of hermes-store here, with a fixed SQLite)"
    return (
        f"pysqlite3 has no wheel for this platform ({platform.python_implementation()} "
        f"{sys.version_info.major}.{sys.version_info.minor}, {sys.platform} "
        f"{platform.machine()}), so it is not installed, and built from source it links the "
        "system's SQLite: use a Python linked against SQLite 3.51.3 or newer"
    )


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
    return Driver(
        "sqlite3",
        sqlite3,
        f"the standard library's SQLite {sqlite3.sqlite_version} has the WAL-reset bug; "
        f"{how_to_get_the_fix()}",
    )


@cache
def current() -> Driver:
    """The driver of this process, chosen once (see the module docstring for why once)."""
    return choose()
