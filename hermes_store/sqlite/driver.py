"""Which SQLite library this process drives, and the error classes of every library it may.

SQLite builds from 3.7.0 up to 3.51.2 (but the 3.44.6 and 3.50.7 backports) carry the
WAL-reset bug, which can corrupt a WAL database under concurrent writers, so on them a
new `state.db` runs in DELETE journal mode, where a reader keeps writers from committing.
Python's own `sqlite3` links the system's library, which on most machines is such a build.
`pysqlite3` is the same DB-API module built with a bundled, fixed SQLite; it is a
dependency on the platforms it publishes wheels for (`has_pysqlite3_wheel`; the `sqlite`
extra asks for it everywhere). When it is importable and its SQLite is fixed it is used,
and new files get WAL. `HERMES_STORE_SQLITE_DRIVER` overrides the choice: `sqlite3` (the
standard library), `pysqlite3` or `sqlcipher3` (required; an error if it is missing).

`sqlcipher3` (the `encryption` extra) is the same DB-API module built with SQLCipher, a
SQLite that encrypts the file (docs/encryption.md). Without a key it reads and writes
plain files as any SQLite does. It is chosen automatically when a key is configured
(`HERMES_STORE_KEY` or `HERMES_STORE_KEY_FILE` when the driver is first chosen, or a key
given to `Store` before any SQLite file was opened); a key with another driver chosen
raises EncryptionUnavailable, never a silent plain-text file.

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
import threading
from dataclasses import dataclass
from functools import cache
from types import ModuleType
from typing import Any

from ..errors import EncryptionUnavailable, InvalidURL

DRIVER_ENV = "HERMES_STORE_SQLITE_DRIVER"
DRIVER_CHOICES = ("auto", "sqlite3", "pysqlite3", "sqlcipher3")
#: The DB-API module of the `sqlite` extra.
BUNDLED_MODULE = "pysqlite3.dbapi2"
#: The DB-API module of the `encryption` extra (SQLCipher).
CIPHER_MODULE = "sqlcipher3.dbapi2"
#: What installs it.
CIPHER_INSTALL = "pip install 'hermes-store[encryption]'"
#: The environment variables that configure a key (docs/encryption.md).
KEY_ENVS = ("HERMES_STORE_KEY", "HERMES_STORE_KEY_FILE")


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


@cache
def _cipher() -> ModuleType | None:
    # cached: unlock asks on every new connection, and a failed import is not cached
    try:
        return importlib.import_module(CIPHER_MODULE)
    except ImportError:
        return None


def _classes(name: str) -> tuple[type[Any], ...]:
    """The class `name` (Error, OperationalError, Connection, ...) of the standard library,
    pysqlite3 and sqlcipher3 (those installed)."""
    found: list[type[Any]] = [getattr(sqlite3, name)]
    for module in (_bundled(), _cipher()):
        if module is not None:
            found.append(getattr(module, name))
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
    for module in (_bundled(), _cipher()):
        if module is not None and isinstance(conn, module.Connection):
            return module
    return sqlite3


def is_cipher(conn: object) -> bool:
    """Whether a DB-API connection is sqlcipher3's (one that can take a key)."""
    cipher = _cipher()
    return cipher is not None and isinstance(conn, cipher.Connection)


def key_configured() -> bool:
    """Whether the environment configures an encryption key."""
    return any(os.environ.get(name) for name in KEY_ENVS)


@dataclass(frozen=True)
class Driver:
    """The SQLite DB-API module this process uses, and why it was chosen."""

    name: str  # "sqlite3", "pysqlite3" or "sqlcipher3"
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

    @property
    def encrypts(self) -> bool:
        return self.name == "sqlcipher3"

    def connect(self, database: str, **kwargs: Any) -> sqlite3.Connection:
        """A DB-API connection through this driver (typed as the standard library's, whose
        interface pysqlite3 and sqlcipher3 share), without a key: encryption.connect gives
        a file its key."""
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
    keyed = key_configured()
    if keyed and wanted in ("sqlite3", "pysqlite3"):
        raise EncryptionUnavailable(
            f"an encryption key is configured ({' or '.join(KEY_ENVS)}), but "
            f"{DRIVER_ENV}={wanted} cannot encrypt: set {DRIVER_ENV}=sqlcipher3 or leave it "
            "unset (docs/encryption.md)"
        )
    if wanted == "sqlcipher3" or (keyed and wanted == "auto"):
        return _cipher_driver(
            f"{DRIVER_ENV}=sqlcipher3"
            if wanted == "sqlcipher3"
            else f"an encryption key is configured ({' or '.join(KEY_ENVS)})"
        )
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


def _cipher_driver(reason: str) -> Driver:
    cipher = _cipher()
    if cipher is None:
        raise EncryptionUnavailable(
            f"encryption needs sqlcipher3, which is not installed ({reason}): {CIPHER_INSTALL}"
        )
    return Driver("sqlcipher3", cipher, f"{reason}; SQLCipher on SQLite {cipher.sqlite_version}")


_chosen: Driver | None = None
_choosing = threading.Lock()


def current() -> Driver:
    """The driver of this process, chosen once (see the module docstring for why once)."""
    global _chosen
    if _chosen is None:
        with _choosing:
            if _chosen is None:
                _chosen = choose()
    return _chosen


def require_encryption(what: str) -> Driver:
    """The driver of this process for `what` (a key given for a file), which must be
    sqlcipher3: chosen now if no driver is chosen yet and the setting allows it; else
    EncryptionUnavailable, saying why."""
    global _chosen
    with _choosing:
        if _chosen is None:
            wanted = (os.environ.get(DRIVER_ENV, "") or "auto").strip().lower()
            if wanted in ("auto", "sqlcipher3"):
                _chosen = _cipher_driver(f"{what} was given a key")
            else:
                _chosen = choose()
        chosen = _chosen
    if not chosen.encrypts:
        raise EncryptionUnavailable(
            f"{what} was given an encryption key, but this process drives SQLite through "
            f"{chosen.name} ({chosen.reason}), which cannot encrypt, and one process drives "
            f"every SQLite file through one library: set {DRIVER_ENV}=sqlcipher3 (or "
            "HERMES_STORE_KEY) before the process opens its first file"
        )
    return chosen
