"""What the original does to a `state.db` that SQLite cannot use as it is
(docs/reference/behaviour.md 1.1 step 3, and 17): a health probe on a fresh connection, a
zeroed file moved aside, and the schema repair that escalates from an FTS rebuild to
dropping the FTS schema.

Byte-level access to the database file (reading its header, copying it for a backup) is
only ever done while this process holds no connection to it: closing any descriptor of a
file drops every POSIX lock the process holds on it, SQLite's included (upstream #71418:
the original's probe of the header at every open corrupted a heavy user's databases that
way). Everything else goes through SQLite connections, whose library keeps its
descriptors and locks consistent. Nothing here changes a file mode.
"""

from __future__ import annotations

import contextlib
import datetime
import fcntl
import logging
import os
import shutil
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from sqlalchemy import TEXT, Executable, column, insert, literal_column, select, table
from sqlalchemy.dialects import sqlite

from ..errors import DatabaseCorrupt
from . import driver as sqlite_driver
from . import encryption

log = logging.getLogger(__name__)

SIDECARS = ("-wal", "-shm", "-journal")
MALFORMED_MARKERS = ("malformed database schema", "database disk image is malformed")
FTS_TABLES = ("messages_fts", "messages_fts_trigram", "messages_fts_cjk")
QUARANTINE_LOCK_TIMEOUT_S = 5.0


def _sqlite_text(statement: Executable) -> str:
    """A Core statement as SQLite text with its constants inline, for a driver connection."""
    compiled = statement.compile(  # type: ignore[attr-defined]
        dialect=sqlite.dialect(), compile_kwargs={"literal_binds": True}
    )
    return str(compiled)


#: Per FTS table, a MATCH of the empty phrase: it reads the index and matches nothing.
_FTS_PROBES = {
    name: _sqlite_text(
        select(literal_column("1"))
        .select_from(table(name))
        .where(column(name).match('""'))
        .limit(1)
    )
    for name in FTS_TABLES
}
#: Per FTS5 index the repair rebuilds, FTS5's `rebuild` command.
_FTS_REBUILDS = {
    name: _sqlite_text(insert(table(name, column(name, TEXT))).values({name: "rebuild"}))
    for name in ("messages_fts", "messages_fts_trigram")
}

_live: dict[str, int] = {}
_live_lock = threading.Lock()


def _key(path: str | os.PathLike[str]) -> str:
    return os.path.realpath(path)


def hold(path: str | os.PathLike[str]) -> None:
    """Mark `path` as open in this process (the facade does for the life of a handle), so
    that nothing here reads or copies its bytes; `release` undoes one `hold`."""
    key = _key(path)
    with _live_lock:
        _live[key] = _live.get(key, 0) + 1


def release(path: str | os.PathLike[str]) -> None:
    key = _key(path)
    with _live_lock:
        if _live.get(key, 0) <= 1:
            _live.pop(key, None)
        else:
            _live[key] -= 1


def held_by_this_process(path: str | os.PathLike[str]) -> bool:
    """Whether this process has the file open: through a handle that said so (`holding`),
    or, where /proc shows it, through any descriptor (a Store, a plain sqlite3 connection)."""
    key = _key(path)
    with _live_lock:
        if _live.get(key):
            return True
    fds = Path("/proc/self/fd")
    if not fds.is_dir():
        return False
    with contextlib.suppress(OSError):
        for fd in fds.iterdir():
            with contextlib.suppress(OSError):
                if os.readlink(fd) == key:
                    return True
    return False


def is_malformed_db_error(exc: BaseException) -> bool:
    """A `sqlite3.DatabaseError` saying the schema or the file is malformed."""
    return isinstance(exc, sqlite_driver.DatabaseError) and any(
        marker in str(exc).lower() for marker in MALFORMED_MARKERS
    )


# --------------------------------------------------------------------------- zeroed files


def is_zeroed_state_db(
    path: str | os.PathLike[str], *, probe_bytes: int = 100, force: bool = False
) -> bool:
    """True for a non-empty file whose first `probe_bytes` (at least 16) bytes are all NUL,
    the state a crashed copy or a full disk can leave behind. A file this process holds
    open is not probed (False) unless `force` says it is an offline copy."""
    target = Path(path)
    if not force and held_by_this_process(target):
        return False
    try:
        if target.stat().st_size <= 0:
            return False
        with target.open("rb") as handle:
            head = handle.read(max(16, probe_bytes))
    except OSError:
        return False
    return bool(head) and not head.startswith(b"SQLite format 3") and not any(head)


@contextlib.contextmanager
def _cross_process_lock(lock_path: Path, timeout: float) -> Iterator[bool]:
    """An exclusive flock on a lock file next to the database (never on the database)."""
    lock_path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o600)
    acquired = False
    try:
        deadline = time.monotonic() + timeout
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                acquired = True
                break
            except OSError:
                if time.monotonic() >= deadline:
                    break
                time.sleep(0.02)
        yield acquired
    finally:
        if acquired:
            fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)


def quarantine_zeroed_state_db(path: str | os.PathLike[str]) -> Path | None:
    """Move a zeroed database (and its sidecars) aside to
    `<name>.zeroed-<YYYYmmdd-HHMMSS>-<pid>.bak`, keeping its bytes; returns where it went,
    or None when another process got there first (the file is gone or no longer zeroed).

    Two processes starting at once serialise on `<name>.quarantine.lock`; one that cannot
    get it within 5 s changes nothing and raises DatabaseCorrupt (fail closed)."""
    target = Path(path)
    lock = target.with_name(target.name + ".quarantine.lock")
    with _cross_process_lock(lock, QUARANTINE_LOCK_TIMEOUT_S) as acquired:
        if not acquired:
            raise DatabaseCorrupt(
                str(target),
                f"the file is zeroed, and another process held {lock} for "
                f"{QUARANTINE_LOCK_TIMEOUT_S:.0f} s, so it was not moved aside",
            )
        if not target.exists() or not is_zeroed_state_db(target):
            return None
        stem = f"{target.name}.zeroed-{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}"
        dest = target.with_name(f"{stem}.bak")
        n = 0
        while dest.exists():
            n += 1
            dest = target.with_name(f"{stem}-{n}.bak")
        for suffix in SIDECARS:
            sidecar = Path(str(target) + suffix)
            if sidecar.exists():
                os.rename(sidecar, Path(str(dest) + suffix))
        os.rename(target, dest)
    log.warning("%s was zeroed (its header is all NUL bytes): moved it to %s", target, dest)
    return dest


# --------------------------------------------------------------------------- health probe


def _connect(path: Path) -> sqlite3.Connection:
    # a fresh connection of our own, autocommit, with the original's 1 s busy timeout
    conn: sqlite3.Connection = encryption.connect(str(path), isolation_level=None, timeout=1.0)
    return conn


def _fts_tables(conn: sqlite3.Connection) -> list[str]:
    present = {
        row[0]
        for row in conn.execute(
            "SELECT name FROM sqlite_master WHERE type = 'table' AND name IN (?, ?, ?)",
            FTS_TABLES,
        )
    }
    return [name for name in FTS_TABLES if name in present]


def _not_built(exc: Exception) -> bool:
    """Tables not created yet (a new file): not a database to judge."""
    text = str(exc).lower()
    return "no such table" in text or "no such column" in text


def _write_probe(conn: sqlite3.Connection) -> str | None:
    """Drive one row through the messages triggers in a transaction that is always rolled
    back: an FTS index that breaks every write shows up here while reads look healthy."""
    probe = f"_hermes_store_health_probe_{time.time_ns()}"
    try:
        conn.execute("BEGIN IMMEDIATE")
        conn.execute(
            "INSERT INTO sessions (id, source, started_at) VALUES (?, ?, ?)",
            (probe, "_health_probe", time.time()),
        )
        conn.execute(
            "INSERT INTO messages (session_id, role, content, timestamp) VALUES (?, ?, ?, ?)",
            (probe, "user", "_fts_health_probe", time.time()),
        )
    except sqlite_driver.OperationalError as exc:
        return None if _not_built(exc) else str(exc)
    finally:
        with contextlib.suppress(*sqlite_driver.Error):
            conn.execute("ROLLBACK")
    return None


def opens_cleanly(db_path: str | os.PathLike[str]) -> str | None:
    """None for a healthy database, else a short reason: probes, on a fresh connection,
    `PRAGMA journal_mode` (the first statement, which fails on a malformed schema),
    `PRAGMA integrity_check` (its first three problems, joined by "; "), a read of
    `sessions`, a MATCH on each FTS table and a rolled-back `messages` insert."""
    conn = _connect(Path(db_path))
    try:
        conn.execute("PRAGMA journal_mode").fetchone()
        rows = conn.execute("PRAGMA integrity_check").fetchall()
        problems = [str(r[0]) for r in rows if r and str(r[0]).lower() != "ok"]
        if problems:
            return "; ".join(problems[:3])
        try:
            conn.execute("SELECT COUNT(*) FROM sessions").fetchone()
        except sqlite_driver.OperationalError as exc:
            if _not_built(exc):
                return None
            raise
        for name in _fts_tables(conn):
            try:
                conn.execute(_FTS_PROBES[name]).fetchall()
            except sqlite_driver.OperationalError as exc:
                # an index whose tokenizer is not loaded here (the optional CJK one) is
                # not damage; every other error is
                if "no such tokenizer" not in str(exc):
                    return f"{name}: {exc}"
        return _write_probe(conn)
    except sqlite_driver.DatabaseError as exc:
        return str(exc)
    finally:
        conn.close()


# --------------------------------------------------------------------------- repair


def _backup(path: Path) -> Path:
    stamp = datetime.datetime.now().strftime("%Y%m%d_%H%M%S")
    dest = path.with_name(f"{path.name}.malformed-backup-{stamp}")
    # a raw copy on purpose: the file does not open cleanly, so keep its bytes as they are
    shutil.copy2(path, dest)
    for suffix in SIDECARS:
        sidecar = Path(str(path) + suffix)
        if sidecar.exists():
            shutil.copy2(sidecar, Path(str(dest) + suffix))
    return dest


def _rebuild_fts(conn: sqlite3.Connection) -> None:
    for rebuild in _FTS_REBUILDS.values():
        with contextlib.suppress(*sqlite_driver.OperationalError):  # absent: nothing to rebuild
            conn.execute(rebuild)


def _reindex(conn: sqlite3.Connection) -> None:
    conn.execute("REINDEX")


def _dedup_schema(conn: sqlite3.Connection) -> None:
    conn.execute("PRAGMA writable_schema=ON")
    try:
        duplicates = conn.execute(
            "SELECT type, name, MIN(rowid) FROM sqlite_master GROUP BY type, name "
            "HAVING COUNT(*) > 1"
        ).fetchall()
        for kind, name, keep in duplicates:
            conn.execute(
                "DELETE FROM sqlite_master WHERE type IS ? AND name IS ? AND rowid <> ?",
                (kind, name, keep),
            )
    finally:
        conn.execute("PRAGMA writable_schema=OFF")


def _drop_fts_schema(conn: sqlite3.Connection) -> None:
    conn.execute("PRAGMA writable_schema=ON")
    try:
        conn.execute("DELETE FROM sqlite_master WHERE name LIKE 'messages_fts%'")
    finally:
        conn.execute("PRAGMA writable_schema=OFF")
    conn.execute("VACUUM")  # frees the pages the dropped objects leave behind


#: Least destructive first; none of them touches a row of `sessions` or `messages`.
STRATEGIES: tuple[tuple[str, Callable[[sqlite3.Connection], None]], ...] = (
    ("rebuild_fts", _rebuild_fts),
    ("reindex_btree", _reindex),
    ("dedup_schema", _dedup_schema),
    ("drop_fts_rebuild", _drop_fts_schema),
)


def repair_state_db_schema(
    db_path: str | os.PathLike[str], *, backup: bool = True
) -> dict[str, Any]:
    """Repair a database whose schema is malformed or whose FTS index rejects writes:
    probe it (`opens_cleanly`); if unhealthy, take a raw backup
    `<name>.malformed-backup-<YYYYmmdd_HHMMSS>` (with sidecars), then try, probing after
    each, an FTS 'rebuild', REINDEX, removing duplicate `sqlite_master` rows (the lowest
    rowid stays) and finally dropping every `messages_fts*` object (+ VACUUM).

    Returns `{repaired, strategy, backup_path, error}`; `strategy` is `already_healthy` or
    the one that worked. The backup is refused while this process holds the file open (a
    copy closing its descriptor would drop this process's locks on it): then nothing is
    changed and `error` says so."""
    path = Path(db_path)
    report: dict[str, Any] = {
        "repaired": False,
        "strategy": None,
        "backup_path": None,
        "error": None,
    }
    if not path.exists():
        report["error"] = f"{path} does not exist"
        return report
    reason = opens_cleanly(path)
    if reason is None:
        report.update(repaired=True, strategy="already_healthy")
        return report
    if backup:
        if held_by_this_process(path):
            report["error"] = (
                f"{path} is unhealthy ({reason}) but this process has it open, so it was not "
                "copied for a backup nor repaired; close every handle on it and retry"
            )
            return report
        try:
            report["backup_path"] = str(_backup(path))
        except OSError as exc:
            report["error"] = f"could not back up {path} ({exc}); nothing was repaired"
            return report
    for name, strategy in STRATEGIES:
        try:
            conn = _connect(path)
            try:
                strategy(conn)
            finally:
                conn.close()
        except sqlite_driver.DatabaseError as exc:
            log.warning("state.db repair step %s failed on %s: %s", name, path, exc)
            reason = str(exc)
            continue
        reason = opens_cleanly(path)
        if reason is None:
            log.warning("repaired %s (%s); backup: %s", path, name, report["backup_path"])
            report.update(repaired=True, strategy=name)
            return report
    report["error"] = reason
    log.error(
        "could not repair %s automatically (%s); backup: %s",
        path,
        reason,
        report["backup_path"],
    )
    return report
