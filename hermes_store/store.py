"""Store: an engine plus units of work.

`store.write(fn)` runs `fn(conn)` in one BEGIN IMMEDIATE transaction (row locks and
READ COMMITTED on PostgreSQL), retried as a whole by the store's RetryPolicy on lock
contention, so `fn` must not have side effects outside the database. Every 50th
successful write runs a PASSIVE WAL checkpoint; `close()` runs a TRUNCATE checkpoint.
`store.read()` gives a Connection in a deferred transaction that never takes the write
lock.

Units of work get a SQLAlchemy Core `Connection`, not an ORM `Session`: a Session costs
about 0.1 ms per unit of work in its own bookkeeping, which is most of what a listing or
an append costs in SQLite itself, and the repositories only ever send Core statements.
ORM users bind a Session to the connection they are given (`orm.Session(bind=conn)`).

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
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from typing import Any, TypeVar, overload

from sqlalchemy import Connection, Engine
from sqlalchemy.engine import URL
from sqlalchemy.exc import DBAPIError
from sqlalchemy.pool import QueuePool

from . import pg_faults
from .config import SCHEMA_VERSION, JournalPolicy, resolve_url, sqlite_path
from .contract import VERSION_TABLE
from .engine import BEGIN_MODE, make_engine, take_read_lock, write_connection
from .errors import (
    DatabaseCorrupt,
    DatabaseNotWritable,
    DatabaseUnavailable,
    InvalidInput,
    NotAtHead,
    StorageFull,
    StoreClosed,
    StoreError,
)
from .retry import DEFAULT_RETRY, RetryPolicy, first_line
from .search import maintenance
from .sqlite_damage import classify, quick_check, sqlite_error, where
from .sqlite_file import refuse_directory

log = logging.getLogger(__name__)

T = TypeVar("T")

CHECKPOINT_EVERY = 50
HEAD = f"{SCHEMA_VERSION:04d}"


def refuse_missing_database(url: URL) -> None:
    """NotAtHead, before anything is created, for a SQLite path that holds no database:
    opening one would leave an empty file (and its directory) behind."""
    path = sqlite_path(url)
    if path is None:
        return
    refuse_directory(path)
    if not path.exists() or path.stat().st_size == 0:
        raise NotAtHead(
            f"there is no hermes-store database at {path}; create it with: "
            f"hermes-store upgrade --url '{path}'"
        )


def stored_revision(conn: Connection) -> str | None:
    """The hermes-store revision a database records, None when it records none."""
    # The version table is hermes-store's own; its name is a constant, never input.
    try:
        found = conn.exec_driver_sql(f"SELECT version_num FROM {VERSION_TABLE}").first()  # noqa: S608
    except DBAPIError:
        return None
    return None if found is None else str(found[0])


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
        check_schema: bool = True,
    ) -> None:
        self.url = resolve_url(url)
        self.read_only = read_only
        self._closed = False
        if check_schema and engine is None:
            refuse_missing_database(self.url)
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
        self._write_conn: Connection | None = None
        self._writes = 0
        if check_schema:
            try:
                self._require_head()
            except BaseException:
                self.engine.dispose()
                raise
        self._fts_rebuilds = 0  # the one in-place rebuild this Store may do
        self._damaged: DatabaseCorrupt | None = None  # structural damage seen: no more writes

    def _require_head(self) -> None:
        """Refuse a database the repositories cannot serve: one that is not at the
        schema this code writes (a legacy file before its upgrade, a newer one)."""
        with self._typed_errors(), self._read_transaction() as conn:
            revision = stored_revision(conn)
        if revision != HEAD:
            raise NotAtHead(
                f"the database {where(self.url)} is at revision {revision or 'none'}, not "
                f"{HEAD}; upgrade it first: hermes-store upgrade --url '{where(self.url)}'"
            )

    def check_open(self) -> None:
        """Raise StoreClosed once `close()` has run."""
        if self._closed:
            raise StoreClosed(f"the store for {where(self.url)} is closed; open a new Store")

    @property
    def dialect(self) -> str:
        return self.engine.dialect.name

    @property
    def _server(self) -> str | None:
        """What DatabaseUnavailable names: the PostgreSQL server, never its password."""
        if self.dialect != "postgresql":
            return None
        return pg_faults.describe_server(self.engine.url)

    @property
    def write_lock(self) -> threading.Lock:
        """The lock this store's writes hold (one writer at a time in the process); work
        that must not interleave with them, such as VACUUM, holds it too."""
        return self._write_lock

    def _writer_connection(self) -> Connection:
        """The connection a write goes through. On SQLite it is kept between writes
        (under the write lock): the process has one writer at a time anyway, as the
        original has one writer connection, and a pool checkout and return per write cost
        more than an append's statements."""
        if self.dialect != "sqlite":
            # a server's connection is checked out per write: the pool pings it, and a
            # connection a restart (or a pooler) left half-dead never starts a unit
            return self._writer.connect()
        conn = self._write_conn
        if conn is None or conn.closed or conn.invalidated:
            conn = self._write_conn = self._writer.connect()
        return conn

    def _discard_writer_connection(self) -> None:
        conn, self._write_conn = self._write_conn, None
        if conn is not None:
            try:
                conn.close()
            except DBAPIError as exc:  # a connection the server already dropped
                log.debug("closing the writer connection failed: %s", exc)

    def write(self, work: Callable[[Connection], T]) -> T:
        """Run `work` in one write transaction, retried as a unit on lock contention."""
        self.check_open()

        # PostgreSQL: a retry after a COMMIT that got no answer first asks the server
        # whether it was applied (pg_faults), so the work is never applied twice
        once = pg_faults.WriteOnce(str(self._server)) if self.dialect == "postgresql" else None

        def attempt() -> tuple[T, int]:
            with self._write_lock:
                conn = self._writer_connection()
                try:
                    # BEGIN IMMEDIATE now, not at `work`'s first statement: the lock is
                    # held before `work` runs, and contention never surfaces inside it
                    with conn.begin():
                        if once is not None and once.committed_earlier(conn):
                            result = once.result
                        else:
                            result = work(conn)
                            if once is not None:
                                once.before_commit(conn, result)
                finally:
                    if self.dialect != "sqlite":
                        conn.close()  # back to the pool, which vets it before its next use
                self._writes += 1  # under the lock: concurrent writers must not lose counts
                return result, self._writes

        def run() -> tuple[T, int]:
            in_doubt = None if once is None else lambda: once.in_doubt
            return self.retry.run(attempt, server=self._server, in_doubt=in_doubt)

        if self._damaged is not None:
            raise DatabaseCorrupt(
                self._damaged.where, f"found by an earlier operation: {self._damaged.detail}"
            )
        rebuilds = self._fts_rebuilds
        with self._typed_errors():
            try:
                result, writes = run()
            except DBAPIError as exc:
                if not self._repaired_fts_after(exc, rebuilds):
                    raise
                result, writes = run()
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
        return self._damage_error(exc) or self._unwritable_error(exc) or self._unavailable(exc)

    def _unavailable(self, exc: DBAPIError) -> DatabaseUnavailable | None:
        """A server fault that met no retry (inside a `with store.read()` block, which
        cannot be run again) still leaves as a typed error naming the server."""
        if self.dialect != "postgresql" or not pg_faults.is_transient(exc):
            return None
        return DatabaseUnavailable(str(self._server), 0.0, 1, first_line(exc))

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

    @overload
    def read(self) -> AbstractContextManager[Connection]: ...

    @overload
    def read(self, work: Callable[[Connection], T]) -> T: ...

    def read(self, work: Callable[[Connection], T] | None = None) -> Any:
        """`with store.read() as conn:` a Connection for reading, whose deferred
        transaction ends when the block does; on PostgreSQL getting its connection is
        retried through server faults, a fault inside the block raises DatabaseUnavailable.
        `store.read(work)` runs `work(conn)` the same way, retried as a whole (so `work`
        must have no side effects outside the database), and returns what it returns."""
        self.check_open()
        if work is None:
            return self._read_block()

        def attempt() -> T:
            with self._read_transaction() as session:
                return work(session)

        with self._typed_errors():
            return self.retry.run(attempt, server=self._server)

    @contextmanager
    def _read_block(self) -> Iterator[Connection]:
        with self._typed_errors(), self._read_transaction() as conn:
            yield conn

    @contextmanager
    def _read_transaction(self) -> Iterator[Connection]:
        # under the retry policy: a new SQLite connection reads the journal mode, which a
        # committing writer can lock; a PostgreSQL server may be restarting
        conn = self.retry.run(self.engine.connect, server=self._server)
        with conn:
            try:
                try:
                    conn.begin()
                    if self.dialect == "sqlite":
                        # Take the read lock now, under the retry policy: in DELETE mode a
                        # stream of committing writers (this store's other threads
                        # included) can keep a reader out for longer than one busy timeout.
                        self.retry.run(lambda: take_read_lock(conn))
                    yield conn
                except DBAPIError:
                    conn.rollback()  # before the error is examined
                    raise
            finally:
                # A read has nothing to commit; rolling back also ends a transaction that
                # an error inside it (a damaged FTS index, say) left unusable.
                conn.rollback()

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
        with self._write_lock:
            self._discard_writer_connection()
        self.checkpoint("TRUNCATE")
        self.engine.dispose()

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
