"""What a Store does differently on SQLite and on PostgreSQL at run time: the `store` part
of each dialect (backends.py), one `StoreDialect` class per database kind, of which the
Store makes one instance when it opens (`store.dialect.store`). `store.py` is written
once for both and asks it:

- which connection a write goes through (SQLite keeps one, a server's is checked out
  per write so the pool vets it),
- what a read does first (SQLite takes its read lock under the retry policy),
- how a driver error becomes a typed one (SQLite: damage, a full disk, a read-only
  file; PostgreSQL: an outage that met no retry),
- what is done about a failed write before it is given up (SQLite: the original's one
  in-place FTS rebuild per instance; PostgreSQL: asking whether a COMMIT that got no
  answer was applied),
- what a checkpoint is (SQLite's WAL checkpoint; nothing on a server).
"""

from __future__ import annotations

import logging
import sqlite3
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, ClassVar, TypeVar

from sqlalchemy import Connection, Engine
from sqlalchemy.engine import URL
from sqlalchemy.exc import DBAPIError

from ..config import where
from ..errors import (
    DatabaseCorrupt,
    DatabaseLocked,
    DatabaseNotWritable,
    DatabaseUnavailable,
    ReadOnlyStore,
    StorageFull,
    StoreError,
)
from ..postgresql import faults as pg_faults
from ..postgresql import pipelined as pg_pipelined
from ..search import limits, maintenance
from ..sqlite.damage import btree_problems, classify, quick_check, sqlite_error
from ..sqlite.limits import WRITE_IOERRS, file_size_limit_hit
from .backends import dialect_named
from .engine import (
    BEGIN_MODE,
    BUSY_TIMEOUT_S,
    REFUSED,
    DriverWrite,
    Params,
    Prepared,
    commit_at_driver,
    readers_block_commits,
    set_busy_timeout,
    take_read_lock,
    wal_index_unavailable,
    write_connection,
    writer_unwatched,
    writes_at_driver,
)
from .retry import RetryPolicy, first_line, sqlite_busy
from .waiting import sqlite_lock_holders

log = logging.getLogger(__name__)
T = TypeVar("T")

CHECKPOINT_MODES = ("PASSIVE", "FULL", "RESTART", "TRUNCATE")
#: Past a search's time limit, how long it may take to notice and end its read.
READER_GRACE_S = 1.0


def readers_wait_s() -> float:
    """How long a write in DELETE mode waits at its COMMIT for readers to leave: the
    longest a search reads (HERMES_SEARCH_TIMEOUT_MS; its default when a search has no
    limit), and a grace for it to end."""
    budget = limits.timeout_ms() or limits.DEFAULT_TIMEOUT_MS
    return budget / 1000 + READER_GRACE_S


class StoreDialect:
    """The interface, with the behaviour of a backend that needs nothing special."""

    #: True: one writer connection is kept between writes (under the store's write lock).
    keeps_writer_connection: ClassVar[bool] = False
    #: True: a read's connection is kept for the next read instead of going back to the
    #: pool (`Store.read`); False: each read checks one out, which the pool vets.
    keeps_reader_connections: ClassVar[bool] = False
    #: True: the store's writes take its process-wide write lock, one at a time. SQLite
    #: has one writer per file anyway; a server keeps writers apart with row locks.
    serialises_writes: ClassVar[bool] = True
    #: True: a read transaction takes a lock as it starts (`start_read`). False: reads
    #: lock nothing, and the store does not call `start_read` at all.
    locks_reads: ClassVar[bool] = False
    #: True: a read that is one statement runs as a transaction of its own, without a
    #: BEGIN or a ROLLBACK (`read_alone`); False: it runs in a read transaction as any.
    reads_statements_alone: ClassVar[bool] = False
    #: What DatabaseUnavailable names: a database server, never its password (None: a file).
    server: str | None = None
    #: True: `Store.write_one` makes its first attempt through `commit_one`, without a
    #: unit of work around it (set per store where the engine allows it).
    commits_one_at_driver: bool = False

    def __init__(
        self,
        engine: Engine,
        url: URL,
        *,
        read_only: bool,
        retry: RetryPolicy,
        write_lock: threading.Lock,
    ) -> None:
        self.engine = engine
        self.place = where(url)  # how errors name the database
        self.read_only = read_only
        self.retry = retry
        self.write_lock = write_lock

    def writer(self) -> Engine:
        """What the store's writes check their connections out of."""
        return self.engine

    def write_once(self) -> pg_faults.WriteOnce | None:
        """For one write: what lets its retry tell whether an unanswered COMMIT applied."""
        return None

    def commit_call(
        self,
        call: pg_pipelined.Call | DriverWrite,
        once: pg_faults.WriteOnce | None,
        writer: Callable[[], Connection],
        started: float,
    ) -> Any:
        """Run `call` (the dialect's kind of call) as a whole write without a SQLAlchemy
        transaction (on PostgreSQL its marker handed to `once`); NOT_RUN, having
        committed nothing, where the write has to go through a Connection. `writer`: the
        store's writer Connection, for a dialect that writes through the driver
        connection under it; `started`: when the write began."""
        return pg_pipelined.NOT_RUN

    def commit_one(self, conn: Connection, bound: tuple[str, Any], started: float) -> Any:
        """Where `commits_one_at_driver`: run one data-changing statement already bound
        (its SQL, its parameters) as a whole write on the driver connection under `conn`,
        the store's writer, with the write lock held; the rows it changed, or NOT_RUN,
        having sent nothing, where the write has to go through a Connection."""
        return pg_pipelined.NOT_RUN

    def refuse_writes(self) -> None:
        """Raise the error that forbids any further write, if there is one."""

    def repairs_done(self) -> int:
        """A mark taken before a write, handed to `repaired_after` if the write fails."""
        return 0

    def repaired_after(self, exc: DBAPIError, repairs_before: int) -> bool:
        """After a failed (rolled back) write: True if one more attempt is worth it."""
        return False

    def typed_error(self, exc: Exception) -> StoreError | None:
        """The hermes-store error a driver error stands for, None for others."""
        return None

    def lock_error(self, exc: Exception, waited: float) -> StoreError | None:
        """The typed error for lock contention that outlasted a unit of work's whole retry
        (`waited` seconds), None when `exc` is not that."""
        return None

    def before_commit(self, conn: Connection, started: float) -> bool:
        """Just before a write commits (`started`: when the write began): True when it
        changed the connection, for `after_commit` to put back."""
        return False

    def after_commit(self, conn: Connection) -> None:
        """After a write whose `before_commit` said True, committed or not."""

    def start_read(self, conn: Connection) -> None:
        """Run at the start of every read transaction where `locks_reads` is set."""

    def read_alone(
        self, statement: Prepared, conn: Connection, params: Params, consume: Callable[[Any], T]
    ) -> T:
        """Where `reads_statements_alone`: run `statement` as a transaction of its own on
        `conn`, which has none open, and hand its cursor to `consume`."""
        raise NotImplementedError

    def vet_for_block(self, conn: Connection) -> None:
        """Before a `with store.read()` block, which cannot be run again: fail here, where
        the connection is retried, on a connection that is no longer usable."""

    def checkpoint(self, mode: str) -> None:
        """Move committed work into the main database file, best effort."""
        if mode not in CHECKPOINT_MODES:
            raise ValueError(f"unknown checkpoint mode {mode!r}")


class PostgreSQLStoreDialect(StoreDialect):
    """Writes run side by side (row locks serialise those on one session), each on a
    connection checked out without a ping: a connection the server dropped fails the
    attempt, which the retry policy runs again on a fresh one (with the COMMIT check)."""

    serialises_writes = False
    server: str

    def __init__(self, engine: Engine, url: URL, **options: Any) -> None:
        super().__init__(engine, url, **options)
        # named once: every unit of work hands it to the retry policy
        self.server = pg_faults.describe_server(engine.url)

    def vet_for_block(self, conn: Connection) -> None:
        conn.exec_driver_sql("SELECT 1")

    def write_once(self) -> pg_faults.WriteOnce:
        return pg_faults.WriteOnce(self.server)

    def commit_call(
        self,
        call: pg_pipelined.Call | DriverWrite,
        once: pg_faults.WriteOnce | None,
        writer: Callable[[], Connection],
        started: float,
    ) -> Any:
        # the pool's checkout and return without the Connection object, its transaction
        # object and their event checks, Python that every append would otherwise run
        assert isinstance(call, pg_pipelined.Call) and once is not None
        return pg_pipelined.commit_call(self.engine, call, once)

    def typed_error(self, exc: Exception) -> StoreError | None:
        if self.read_only and _read_only_transaction(exc):
            return ReadOnlyStore(self.place)
        # a server fault that met no retry (inside a `with store.read()` block, which
        # cannot be run again) still leaves as a typed error naming the server
        if not pg_faults.is_transient(exc):
            return None
        return DatabaseUnavailable(self.server, 0.0, 1, first_line(exc))


def _read_only_transaction(exc: Exception) -> bool:
    """PostgreSQL refusing a statement that writes in a read-only transaction (SQLSTATE
    25006, read_only_sql_transaction): a read-only store's connections default to them."""
    orig = exc.orig if isinstance(exc, DBAPIError) else exc
    return getattr(orig, "sqlstate", None) == "25006"


class SQLiteStoreDialect(StoreDialect):
    """Damage: a write that fails on a damaged FTS index gets one in-place rebuild of the
    indexes per Store and is retried (the original's rule); any other damage SQLite
    reports raises DatabaseCorrupt after the rollback, and from then on every write is
    refused (SQLite only notices damage on pages it reads, so a later write that happens
    to miss the damaged pages would otherwise go on adding to a broken file)."""

    # the process has one writer at a time anyway, as the original has one writer
    # connection, and a pool checkout and return per write cost more than an append
    keeps_writer_connection = True
    # likewise a read: a pool checkout and return (a Connection built, the pool's reset
    # ROLLBACK, its events) cost more than a small SELECT; an idle SQLite connection holds
    # no lock and no snapshot, so keeping one is what the pool does with it anyway
    keeps_reader_connections = True

    # a read takes its shared lock as it starts (start_read)
    locks_reads = True
    # the driver runs in autocommit: one statement sent without BEGIN is a transaction of
    # its own, reading one snapshot, and a read's BEGIN and ROLLBACK (with SQLAlchemy's
    # transaction around them) cost more than a small SELECT
    reads_statements_alone = True

    def __init__(self, engine: Engine, url: URL, **options: Any) -> None:
        super().__init__(engine, url, **options)
        # an engine made by make_engine for writing, whose begin listener commit_at_driver
        # stands in for: its listeners are installed once, when it is made
        self._writes_at_driver = writes_at_driver(engine)
        self.commits_one_at_driver = self._writes_at_driver and not self.read_only

    # per Store (instance values once set; the class values are the starting state)
    _fts_rebuilds = 0  # the one in-place rebuild this Store may do
    _damaged: DatabaseCorrupt | None = None  # structural damage seen: no more writes

    def writer(self) -> Engine:
        # a write's transaction begins IMMEDIATE: it takes the write lock up front
        return self.engine.execution_options(**{BEGIN_MODE: "IMMEDIATE"})

    def commit_call(
        self,
        call: pg_pipelined.Call | DriverWrite,
        once: pg_faults.WriteOnce | None,
        writer: Callable[[], Connection],
        started: float,
    ) -> Any:
        # The unit of work's fixed cost through a Connection (its transaction object,
        # the begin and commit events, the store's commit steps) is several times what
        # SQLite's own BEGIN and COMMIT cost: a write that is statements alone is sent at
        # the driver of the same kept writer, under the same write lock, with the same
        # steps (commit_at_driver). Through a Connection wherever something would see the
        # difference: listeners on statements or transactions (tracing, tests that record
        # statements), an engine not made by make_engine for writing, a read-only store.
        if (
            not isinstance(call, DriverWrite)
            or self.read_only
            or not self._writes_at_driver
            or not writer_unwatched(self.engine)
        ):
            return pg_pipelined.NOT_RUN
        conn = writer()
        if conn.in_transaction():  # SQLAlchemy's to end first
            return pg_pipelined.NOT_RUN
        result = commit_at_driver(conn, call, started, readers_wait_s)
        return pg_pipelined.NOT_RUN if result is REFUSED else result

    def commit_one(self, conn: Connection, bound: tuple[str, Any], started: float) -> Any:
        # commit_call's checks (the store's own, read-only and make_engine's engine, were
        # made once: `commits_one_at_driver`) and commit_at_driver, without a DriverWrite
        if conn.in_transaction() or not writer_unwatched(self.engine):
            return pg_pipelined.NOT_RUN
        return commit_at_driver(conn, bound, started, readers_wait_s)

    def refuse_writes(self) -> None:
        if self._damaged is not None:
            raise DatabaseCorrupt(
                self._damaged.where, f"found by an earlier operation: {self._damaged.detail}"
            )

    def repairs_done(self) -> int:
        return self._fts_rebuilds

    def lock_error(self, exc: Exception, waited: float) -> StoreError | None:
        if not sqlite_busy(exc):
            return None
        try:
            holders = sqlite_lock_holders(Path(self.place))
        except Exception:  # noqa: BLE001 (naming them is best effort: no /proc, no os.major)
            holders = ""
        return DatabaseLocked(
            self.place,
            waited,
            holders or "which one could not be found out from here",
            "retry",
            what="a lock this call needed (another writer's, or in DELETE mode a reader's)",
        )

    def before_commit(self, conn: Connection, started: float) -> bool:
        # In DELETE mode a COMMIT waits for every reader to leave, holding SQLite's
        # PENDING lock meanwhile, so no new reader starts: the readers it waits for are
        # those already reading when this COMMIT began. A search ends at its time limit,
        # so a commit that waits that long (counted from this COMMIT: a search may have
        # started between two attempts, while no PENDING lock was held) outlasts every
        # search, however many overlap. Only a write that has already waited (an attempt
        # that met a lock) waits so: the common write sends nothing more, and the busy
        # timeout of other steps stays short (another writer's lock is waited out by the
        # retry policy, which releases what it holds).
        if time.monotonic() - started < BUSY_TIMEOUT_S or not readers_block_commits(conn):
            return False
        set_busy_timeout(conn, readers_wait_s())
        return True

    def after_commit(self, conn: Connection) -> None:
        try:
            set_busy_timeout(conn, BUSY_TIMEOUT_S)
        except DBAPIError as exc:  # a connection lost meanwhile is not reused
            log.debug("resetting the busy timeout failed: %s", exc)

    def start_read(self, conn: Connection) -> None:
        # Take the read lock now, under the retry policy: in DELETE mode a stream of
        # committing writers (this store's other threads included) can keep a reader out
        # for longer than one busy timeout.
        self.retry.run(lambda: take_read_lock(conn))

    # `Prepared.run_alone` itself (the statement in `self`'s place): no frame of its own
    # on every point read
    read_alone = staticmethod(Prepared.run_alone)  # type: ignore[assignment]

    def checkpoint(self, mode: str) -> None:
        super().checkpoint(mode)
        if self.read_only:
            return
        try:
            with self.engine.connect() as conn:
                conn.connection.driver_connection.execute(  # type: ignore[union-attr]
                    f"PRAGMA wal_checkpoint({mode})"
                )
        except Exception as exc:  # noqa: BLE001 (a checkpoint is best effort)
            log.debug("wal_checkpoint(%s) failed: %s", mode, exc)

    def typed_error(self, exc: Exception) -> StoreError | None:
        if not isinstance(exc, DBAPIError):
            return None
        return self._damage_error(exc) or self._unwritable_error(exc)

    def _damage_error(self, exc: DBAPIError) -> DatabaseCorrupt | None:
        """The DatabaseCorrupt an error stands for (remembering structural damage, which
        stops further writes), or None if it reports no damage."""
        kind = classify(exc)
        if kind is None or kind == "suspect_fts":
            return None
        error = DatabaseCorrupt(self.place, str(exc.orig), fts_only=kind == "fts")
        if kind == "structural":
            self._damaged = error
        return error

    def _unwritable_error(self, exc: DBAPIError) -> DatabaseNotWritable | None:
        """SQLite failing to open or write this file: the file or its directory became
        read-only, the disk is full, the process may not write files that large
        (RLIMIT_FSIZE), or a read-only open of a WAL-mode file cannot create the -shm file
        it needs. Raised after the rollback, so nothing was written."""
        orig = sqlite_error(exc)
        code = getattr(orig, "sqlite_errorcode", None)
        if orig is None or code is None:
            return None
        place = self.place
        directory = Path(place).parent
        if self.read_only:
            if code == sqlite3.SQLITE_READONLY:
                # a read-only connection refusing a statement that writes (one run inside
                # `with store.read()`; Store.write refuses before it starts)
                return ReadOnlyStore(place)
            if code & 0xFF == sqlite3.SQLITE_CANTOPEN:
                return wal_index_unavailable(Path(place), exc)
            return None
        if code & 0xFF == sqlite3.SQLITE_FULL or code in WRITE_IOERRS:
            hit = file_size_limit_hit(Path(place))
            if hit is not None:
                limit, size = hit
                return StorageFull(
                    f"cannot write the database {place} ({orig}): this process may not "
                    f"write a file larger than {limit:,} bytes (its file-size limit, `ulimit "
                    f"-f`) and the write needed more (the database file is {size:,} bytes); "
                    "nothing was written and the database is intact. Raise the limit "
                    "(`ulimit -f unlimited`), then retry"
                )
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

    def repaired_after(self, exc: DBAPIError, repairs_before: int) -> bool:
        """True if the FTS indexes were rebuilt (by this call or, since the write began,
        by another thread's); raises DatabaseCorrupt for damage it cannot repair; False
        if the error reports no damage."""
        if self.read_only:
            return False
        kind = classify(exc)
        if kind is None:
            return False
        place = self.place
        # under the write lock: this store's other writers wait for the diagnosis and the
        # rebuild instead of failing on the same damage meanwhile
        with self.write_lock:
            if self._fts_rebuilds > repairs_before:
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
            # FTS5's own lines (newer SQLite checks FTS5 in quick_check) are the damage the
            # rebuild below repairs; any other line is the b-trees'
            if btree_problems(problems):
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


dialect_named("sqlite").store = SQLiteStoreDialect
dialect_named("postgresql").store = PostgreSQLStoreDialect
