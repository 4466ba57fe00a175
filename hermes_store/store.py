"""Store: an engine plus units of work.

`store.write(fn)` runs `fn(session)` in one BEGIN IMMEDIATE transaction (row locks and
READ COMMITTED on PostgreSQL, later), retried as a whole by the store's RetryPolicy on
lock contention, so `fn` must not have side effects outside the database. Every 50th
successful write runs a PASSIVE WAL checkpoint; `close()` runs a TRUNCATE checkpoint.
`store.read()` gives a Session in a deferred transaction that never takes the write lock.

Damage (SQLite): a write that fails on a damaged FTS index gets one in-place rebuild of the
indexes per Store and is retried (the original's rule); any other damage SQLite reports
raises DatabaseCorrupt after the rollback, and from then on the Store refuses every write
(SQLite only notices damage on pages it reads, so a later write that happens to miss the
damaged pages would otherwise go on adding to a broken file). Reads keep working.
"""

from __future__ import annotations

import logging
import sqlite3
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TypeVar

from sqlalchemy import Engine, text
from sqlalchemy.engine import URL
from sqlalchemy.exc import DBAPIError
from sqlalchemy.orm import Session
from sqlalchemy.pool import QueuePool

from .config import JournalPolicy, resolve_url
from .engine import BEGIN_MODE, make_engine, write_connection
from .errors import (
    DatabaseCorrupt,
    DatabaseNotWritable,
    InvalidInput,
    StorageFull,
    StoreError,
)
from .retry import DEFAULT_RETRY, RetryPolicy
from .search import maintenance
from .sqlite_damage import classify, quick_check, sqlite_error, where

log = logging.getLogger(__name__)

T = TypeVar("T")

CHECKPOINT_EVERY = 50


def _surrogate_error(exc: UnicodeEncodeError) -> InvalidInput | None:
    """A value the driver could not encode because it holds a lone UTF-16 surrogate:
    text fields are scrubbed to U+FFFD before binding (the original's rule), so this is
    an id or a key, which cannot exist in the database either. Raised after the rollback."""
    if exc.reason != "surrogates not allowed":
        return None
    bad = exc.object[exc.start : exc.end]
    return InvalidInput(
        f"a value holding the lone UTF-16 surrogate {ascii(bad)} (at position {exc.start}) "
        "cannot be stored or looked up; nothing was written. Ids and keys must be valid "
        "Unicode text"
    )


class Store:
    def __init__(
        self,
        url: str | URL | None = None,
        *,
        retry: RetryPolicy = DEFAULT_RETRY,
        checkpoint_every: int = CHECKPOINT_EVERY,
        journal: JournalPolicy | None = None,
        read_only: bool = False,
        engine: Engine | None = None,
    ) -> None:
        self.url = resolve_url(url)
        self.read_only = read_only
        self.retry = retry
        self.checkpoint_every = checkpoint_every
        self.engine = engine or make_engine(
            # pooled, so the connect-time pragmas run once per connection, not per unit
            self.url,
            read_only=read_only,
            journal=journal,
            poolclass=QueuePool,
            pool_size=5,
            # the most recently returned connection first: a single-threaded caller keeps
            # reusing one connection, whose page and statement caches are warm
            pool_use_lifo=True,
        )
        self._writer = self.engine.execution_options(**{BEGIN_MODE: "IMMEDIATE"})
        self._write_lock = threading.Lock()
        self._writes = 0
        self._closed = False
        self._fts_rebuilds = 0  # the one in-place rebuild this Store may do
        self._damaged: DatabaseCorrupt | None = None  # structural damage seen: no more writes

    @property
    def dialect(self) -> str:
        return self.engine.dialect.name

    @property
    def write_lock(self) -> threading.Lock:
        """The lock this store's writes hold (one writer at a time in the process); work
        that must not interleave with them, such as VACUUM, holds it too."""
        return self._write_lock

    def write(self, work: Callable[[Session], T]) -> T:
        """Run `work` in one write transaction, retried as a unit on lock contention."""

        def attempt() -> tuple[T, int]:
            with self._write_lock, Session(self._writer, expire_on_commit=False) as session:
                with session.begin():
                    # BEGIN IMMEDIATE now, not at `work`'s first statement: the lock is
                    # held before `work` runs, and contention never surfaces inside it
                    session.connection()
                    result = work(session)
                self._writes += 1  # under the lock: concurrent writers must not lose counts
                return result, self._writes

        if self._damaged is not None:
            raise DatabaseCorrupt(
                self._damaged.where, f"found by an earlier operation: {self._damaged.detail}"
            )
        rebuilds = self._fts_rebuilds
        with self._typed_errors():
            try:
                result, writes = self.retry.run(attempt)
            except DBAPIError as exc:
                if not self._repaired_fts_after(exc, rebuilds):
                    raise
                result, writes = self.retry.run(attempt)
        if self.checkpoint_every and writes % self.checkpoint_every == 0:
            self.checkpoint("PASSIVE")
        return result

    @contextmanager
    def _typed_errors(self) -> Iterator[None]:
        """Driver errors that mean something to a caller (damage, a full disk, a read-only
        file, an unencodable id) leave as hermes-store's typed errors; others as they are."""
        try:
            yield
        except DBAPIError as exc:
            typed = self._typed_error(exc)
            if typed is None:
                raise
            raise typed from exc
        except UnicodeEncodeError as exc:
            refused = _surrogate_error(exc)
            if refused is None:
                raise
            raise refused from exc

    def _damage_error(self, exc: DBAPIError) -> DatabaseCorrupt | None:
        """The DatabaseCorrupt an error of this store stands for (remembering structural
        damage, which stops further writes), or None if it reports no damage."""
        if self.dialect != "sqlite":
            return None
        kind = classify(exc)
        if kind is None or kind == "suspect_fts":
            return None
        error = DatabaseCorrupt(where(self.url), str(exc.orig), fts_only=kind == "fts")
        if kind == "structural":
            self._damaged = error
        return error

    def _typed_error(self, exc: DBAPIError) -> StoreError | None:
        return self._damage_error(exc) or self._unwritable_error(exc)

    def _unwritable_error(self, exc: DBAPIError) -> DatabaseNotWritable | None:
        """The typed error for SQLite failing to open or write this file (SQLite only): the
        file or its directory became read-only, the disk is full, or a read-only open of a
        WAL-mode file cannot create the -shm file it needs. Raised after the rollback, so
        the failed operation wrote nothing."""
        if self.dialect != "sqlite":
            return None
        orig = sqlite_error(exc)
        code = getattr(orig, "sqlite_errorcode", None)
        if orig is None or code is None:
            return None
        place = where(self.url)
        directory = Path(place).parent
        if code & 0xFF == sqlite3.SQLITE_CANTOPEN and self.read_only:
            return DatabaseNotWritable(
                f"cannot open the database {place} read-only ({orig}): a WAL-mode database "
                f"needs its {place}-shm file, and SQLite cannot create it in {directory}. "
                "Make the directory writable, or switch the file to DELETE mode "
                "(`PRAGMA journal_mode=DELETE`) where it is writable"
            )
        if self.read_only:
            return None
        if code & 0xFF == sqlite3.SQLITE_FULL:
            return StorageFull(
                f"the disk holding the database {place} is full ({orig}); nothing was "
                "written and the database is intact. Free some space, then retry"
            )
        if code & 0xFF in (sqlite3.SQLITE_READONLY, sqlite3.SQLITE_CANTOPEN):
            return DatabaseNotWritable(
                f"cannot write the database {place} ({orig}); nothing was written. The file "
                f"and its directory {directory} must be writable (SQLite creates its journal "
                "files next to the database) and their file system not mounted read-only"
            )
        return None

    def _repaired_fts_after(self, exc: DBAPIError, rebuilds_before: int) -> bool:
        """After a failed write (rolled back): True if it is worth one more attempt, the
        FTS indexes having been rebuilt (by this call or, since the write began, by
        another thread's); raises DatabaseCorrupt for damage it cannot repair; False if
        the error reports no damage."""
        if self.dialect != "sqlite" or self.read_only:
            return False
        kind = classify(exc)
        if kind is None:
            return False
        place = where(self.url)
        # under the write lock: this store's other writers wait for the diagnosis and the
        # rebuild instead of failing on the same damage meanwhile
        with self._write_lock:
            if self._fts_rebuilds > rebuilds_before:
                return True
            if self._fts_rebuilds:
                # the original's rule: one rebuild per instance, then the error propagates
                if kind == "fts":
                    raise DatabaseCorrupt(place, f"{exc.orig}; already rebuilt once", True) from exc
                return False
            # A rebuild rewrites every FTS page: never into a file whose b-trees are
            # damaged. quick_check reads the whole file, which is acceptable on this path
            # only (once, after SQLite has already reported damage).
            with self.engine.connect() as conn:
                problems = quick_check(conn)
                conn.rollback()
            if problems != ["ok"]:
                shown = "; ".join(problems[:3]) + (" ..." if len(problems) > 3 else "")
                self._damaged = DatabaseCorrupt(place, f"{exc.orig}; quick_check: {shown}")
                raise self._damaged from exc
            # FTS5's own report needs no confirmation; the others do
            fts_errors = [str(exc.orig)] if kind == "fts" else self.retry.run(self._fts_errors)
            if not fts_errors:
                # the bare constraint error was an ordinary one; otherwise the damage SQLite
                # reported is gone (another process repaired it meanwhile): try again
                return kind != "suspect_fts"
            log.warning(
                "a write to %s failed because its full-text index is damaged (%s): rebuilding "
                "the FTS indexes in place (once per store), then retrying the write",
                place,
                "; ".join(fts_errors),
            )
            self._fts_rebuilds += 1
            try:
                maintenance.rebuild(self.engine, self.retry)
            except DBAPIError as failed:
                raise DatabaseCorrupt(
                    place, f"{'; '.join(fts_errors)}; the rebuild failed: {failed.orig}", True
                ) from failed
            return True

    def _fts_errors(self) -> list[str]:
        # BEGIN IMMEDIATE, under the retry policy: the integrity-check is an FTS5 command
        # (an INSERT), and lock contention must not be mistaken for a damaged index
        with write_connection(self.engine) as conn:
            transaction = conn.begin()
            try:
                return maintenance.integrity_errors(conn)
            finally:
                transaction.rollback()

    @contextmanager
    def read(self) -> Iterator[Session]:
        """A Session for reading; its deferred transaction ends when the block does."""
        with Session(self.engine, expire_on_commit=False) as session:
            session.begin()
            try:
                with self._typed_errors():
                    try:
                        if self.dialect == "sqlite":
                            # Take the read lock now, under the retry policy: in DELETE
                            # mode a stream of committing writers (this store's other
                            # threads included) can keep a reader out for longer than one
                            # busy timeout.
                            self.retry.run(
                                lambda: session.execute(text("PRAGMA schema_version"))
                            )
                        yield session
                    except DBAPIError:
                        session.rollback()  # before the error is examined
                        raise
            finally:
                # A read has nothing to commit; rolling back also ends a transaction that
                # an error inside it (a damaged FTS index, say) left unusable.
                session.rollback()

    def checkpoint(self, mode: str = "PASSIVE") -> None:
        if self.dialect != "sqlite" or self.read_only:
            return
        if mode not in ("PASSIVE", "FULL", "RESTART", "TRUNCATE"):
            raise ValueError(f"unknown checkpoint mode {mode!r}")
        try:
            with self.engine.connect() as conn:
                conn.connection.driver_connection.execute(  # type: ignore[union-attr]
                    f"PRAGMA wal_checkpoint({mode})"
                )
        except Exception as exc:  # noqa: BLE001 (a checkpoint is best effort)
            log.debug("wal_checkpoint(%s) failed: %s", mode, exc)

    @property
    def writes(self) -> int:
        return self._writes

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self.checkpoint("TRUNCATE")
        self.engine.dispose()

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
