"""What is at a SQLite path that SQLite cannot use as a database: a directory, or a file
that is not an SQLite database at all (a text file given by mistake). Both are named as
such (NotADatabaseFile), not as a disk I/O error or as damage to restore from a backup.

The file's bytes are looked at only after SQLite has refused the file as "not a
database" (SQLITE_NOTADB): opening and closing a descriptor on a database drops every
POSIX lock the process holds on it, so a live database is never probed like this.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

from ..errors import EncryptionKeyRequired, NotADatabaseFile
from . import driver as sqlite_driver

#: The first 16 bytes of every SQLite database file.
SQLITE_MAGIC = b"SQLite format 3\x00"
_HEADER_SIZE = 100
#: SQLCipher pages are 4096 bytes by default and never smaller than 512
_SMALLEST_PAGE = 512


def refuse_directory(path: Path) -> None:
    if path.is_dir():
        raise NotADatabaseFile(
            f"{path} is a directory, not a database file; give the path of the database "
            f"file itself (for example {path / 'state.db'})"
        )


def _looks_like_sqlite(header: bytes) -> bool:
    """True when the header is SQLite's, or is SQLite's with its magic string destroyed
    (damage: the rest of the header still says page size, versions and payload
    fractions as only SQLite writes them)."""
    if header.startswith(SQLITE_MAGIC):
        return True
    if len(header) < _HEADER_SIZE:
        return False
    page_size = int.from_bytes(header[16:18], "big")
    power_of_two = page_size & (page_size - 1) == 0
    page_size_ok = page_size == 1 or (512 <= page_size <= 32768 and power_of_two)
    versions_ok = header[18] in (1, 2) and header[19] in (1, 2)
    return page_size_ok and versions_ok and header[21:24] == bytes((64, 32, 32))


def not_a_database_error(path: Path, error: BaseException | None) -> NotADatabaseFile | None:
    """The NotADatabaseFile that `error` (raised by sqlite3 for `path`) stands for, or
    None: when SQLite did not say "not a database", or the file looks like an SQLite file
    whose header is damaged (that is damage, reported as such by sqlite_damage)."""
    if getattr(error, "sqlite_errorcode", None) != sqlite3.SQLITE_NOTADB:
        return None
    try:
        with path.open("rb") as fp:
            header = fp.read(_HEADER_SIZE)
    except OSError:
        return None
    if _looks_like_sqlite(header):
        return None
    if may_be_encrypted(path):
        return key_required_error(path)
    return NotADatabaseFile(
        f"{path} is not an SQLite database file (it does not begin with the SQLite "
        "header); check the path, it should name a Hermes state.db. Nothing was changed"
    )


def is_plain_sqlite(path: Path) -> bool | None:
    """Whether `path` begins with SQLite's plain-text header (None: empty, or unreadable).
    Only for a file this process holds no connection to (the module docstring)."""
    try:
        with path.open("rb") as fp:
            header = fp.read(len(SQLITE_MAGIC))
    except OSError:
        return None
    if not header:
        return None
    return header == SQLITE_MAGIC


def may_be_encrypted(path: Path) -> bool:
    """Whether `path` could be an SQLCipher file: not SQLite's plain header, and a size
    that is a whole number of pages (a text file given by mistake rarely is)."""
    try:
        size = path.stat().st_size
    except OSError:
        return False
    return size >= _SMALLEST_PAGE and size % _SMALLEST_PAGE == 0 and not is_plain_sqlite(path)


def key_required_error(path: Path) -> EncryptionKeyRequired:
    """The error for an encrypted-looking file opened without a key (docs/encryption.md)."""
    key_env, key_file_env = sqlite_driver.KEY_ENVS
    driver = sqlite_driver.current()
    how = (
        f"set {key_env} (or {key_file_env}), or pass key= to Store"
        if driver.encrypts
        else f"install the encryption extra ({sqlite_driver.CIPHER_INSTALL}) and set "
        f"{key_env} (or {key_file_env}), or pass key= to Store"
    )
    return EncryptionKeyRequired(
        f"{path} is encrypted (or is not an SQLite database file at all) and no encryption "
        f"key was given: {how} (docs/encryption.md). Nothing was changed"
    )
