"""SQLite writes refused by a limit of the process rather than of the disk: the file-size
limit (RLIMIT_FSIZE, `ulimit -f`) makes the kernel refuse to grow a file past it with
EFBIG, which SQLite reports as an I/O error, not as a full disk."""

from __future__ import annotations

import os
import sqlite3
from contextlib import suppress
from pathlib import Path

#: SQLite's reports of a write the operating system refused. EFBIG (a file-size limit)
#: arrives as SQLITE_IOERR_WRITE from the database or its journal, as the bare
#: SQLITE_IOERR when a statement journal spills to a temporary file, as
#: SQLITE_IOERR_TRUNCATE or SQLITE_IOERR_SHMSIZE when a file is grown by truncation;
#: a short write as SQLITE_FULL.
WRITE_IOERRS = frozenset(
    {
        sqlite3.SQLITE_IOERR,
        sqlite3.SQLITE_IOERR_WRITE,
        sqlite3.SQLITE_IOERR_TRUNCATE,
        sqlite3.SQLITE_IOERR_SHMSIZE,
    }
)

#: How far below the process's file-size limit the database files may be for a failed
#: write to be put down to that limit: more than any one transaction of hermes-store
#: adds (an import call is at most 25 MiB of JSON; its rows and index entries a few
#: times that). SQLite does not pass on the errno, and after the rollback the
#: transaction's pages are gone, so the sizes are all there is to go by.
_FSIZE_SLACK = 256 * 1024 * 1024


def file_size_limit_hit(path: Path) -> tuple[int, int] | None:
    """(the limit, the size of the database file) when this process has a file-size limit
    (RLIMIT_FSIZE, `ulimit -f`) that a write to the database, its journal or SQLite's
    temporary files could have crossed; None without such a limit."""
    try:
        import resource
    except ImportError:  # no such limit on Windows
        return None
    soft, _hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    if soft == resource.RLIM_INFINITY:
        return None
    sizes: dict[str, int] = {}
    for suffix in ("", "-journal", "-wal"):
        with suppress(OSError):
            sizes[suffix] = os.path.getsize(f"{path}{suffix}")
    if max(sizes.values(), default=0) + _FSIZE_SLACK < soft:
        return None
    return soft, sizes.get("", 0)
