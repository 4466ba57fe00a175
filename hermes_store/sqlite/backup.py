"""A copy of an SQLite database file taken before a command changes it (`hermes-store
upgrade` and `downgrade`): through SQLite's online backup API, so that it is one
consistent snapshot even while Hermes keeps writing, and private (mode 0600) from the
moment it exists, since it holds every conversation the database does."""

from __future__ import annotations

import errno
import os
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from ..errors import BackupFailed
from . import driver as sqlite_driver
from . import encryption

#: SQLite's primary result code for a full disk
SQLITE_FULL = 13

#: How long the backup waits for a writer's lock on the source (DELETE journal mode)
BUSY_TIMEOUT_S = 20.0


def backup_name(path: Path, label: str, now: datetime | None = None) -> Path:
    """Where the backup of `path` goes: beside it (the same file system and directory
    permissions), named after the file, what it held (`label`: a revision, or the
    schema_version of a file the original wrote) and the time in UTC, e.g.
    `state.db.backup-0023-20261206T085102Z`."""
    stamp = (now or datetime.now(UTC)).strftime("%Y%m%dT%H%M%SZ")
    return path.with_name(f"{path.name}.backup-{label}-{stamp}")


def _create(base: Path) -> Path:
    """Create the backup file, empty and mode 0600: `base`, or `base-1`, `-2`, ... when
    that name is taken. O_EXCL: never write through a file or link someone else put
    there."""
    candidate, n = base, 0
    while True:
        try:
            fd = os.open(candidate, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        except FileExistsError:
            n += 1
            candidate = base.with_name(f"{base.name}-{n}")
            continue
        except OSError as exc:
            raise BackupFailed(
                f"could not create the backup {candidate}: {exc.strerror}; nothing was "
                "changed (--no-backup skips the backup)"
            ) from exc
        os.close(fd)
        return candidate


def _disk_full(exc: BaseException) -> bool:
    if isinstance(exc, OSError):
        return exc.errno == errno.ENOSPC
    code = getattr(exc, "sqlite_errorcode", None)
    return (code is not None and code & 0xFF == SQLITE_FULL) or "disk is full" in str(exc)


def backup_sqlite(path: Path, label: str, key: Any = None) -> Path:
    """Copy the SQLite database `path` to a new file beside it (`backup_name`) with the
    online backup API, reading the source through a read-only connection, and return the
    copy's path. The copy is created mode 0600 before any byte is written to it. On any
    failure the partial copy is removed and BackupFailed says why; the source is never
    changed. An encrypted file is read with `key` (an encryption.Key, or
    encryption.NO_KEY for a plain file), else with its configured key, and its copy is
    encrypted with the same key."""
    target = _create(backup_name(path, label))
    module = sqlite_driver.current().module  # one SQLite library per process
    source = dest = None
    try:
        # an encrypted file's copy is encrypted with its key (SQLCipher copies pages only
        # between files with the same key)
        source = encryption.connect(
            f"{path.resolve().as_uri()}?mode=ro", uri=True,
            timeout=BUSY_TIMEOUT_S,
            key_of=path,
            key=key,
        )
        dest = encryption.connect(str(target), timeout=BUSY_TIMEOUT_S, key_of=path, key=key)
        source.backup(dest)
        dest.close()
        dest = None
    except (module.Error, OSError) as exc:
        if dest is not None:
            dest.close()
        for leftover in (target, *(Path(f"{target}{s}") for s in ("-journal", "-wal", "-shm"))):
            leftover.unlink(missing_ok=True)
        room = ""
        if _disk_full(exc):
            room = (
                f" (the disk holding {target.parent} is full: the backup needs about "
                f"{path.stat().st_size:,} bytes free)"
            )
        raise BackupFailed(
            f"could not back up {path} to {target}: {exc}{room}; nothing was changed; "
            "free some space, or skip the backup with --no-backup"
        ) from exc
    finally:
        if source is not None:
            source.close()
    os.chmod(target, 0o600)
    return target
