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

from .errors import NotADatabaseFile

#: The first 16 bytes of every SQLite database file.
SQLITE_MAGIC = b"SQLite format 3\x00"
_HEADER_SIZE = 100


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
    from .encryption import key_required_error, may_be_encrypted

    if may_be_encrypted(path):
        return key_required_error(path)
    return NotADatabaseFile(
        f"{path} is not an SQLite database file (it does not begin with the SQLite "
        "header); check the path, it should name a Hermes state.db. Nothing was changed"
    )
