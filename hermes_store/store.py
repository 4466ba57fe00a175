"""Store: an engine plus units of work.

`store.write(fn)` runs `fn(conn)` in one BEGIN IMMEDIATE transaction (row locks and
READ COMMITTED on PostgreSQL), retried as a whole by the store's RetryPolicy on lock
contention, so `fn` must not have side effects outside the database. Every 50th
successful write runs a PASSIVE WAL checkpoint; `close()` runs a TRUNCATE checkpoint.
`store.read()` gives a Connection in a deferred transaction that never takes the write
lock. On PostgreSQL writes take no process-wide lock: the row locks the repositories take
keep apart the writes that must not interleave.

Units of work get a SQLAlchemy Core `Connection`, not an ORM `Session`: a Session costs
about 0.1 ms per unit of work in its own bookkeeping, which is most of what a listing or
an append costs in SQLite itself, and the repositories only ever send Core statements.
ORM users bind a Session to the connection they are given (`orm.Session(bind=conn)`).

What differs per dialect (the writer connection, damage and the FTS repair on SQLite,
an unanswered COMMIT on PostgreSQL, checkpoints) is the dialect's `store` part
(`StoreDialect`, runtime/store_backends.py); the store resolves its dialect (runtime/backends.py)
once, when it opens, as `store.dialect`. This module is written once for both.
"""

from __future__ import annotations

import logging
import os
import threading
import time
import weakref
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from pathlib import Path
from typing import Any, TypedDict, TypeVar, overload

from sqlalchemy import Connection, Engine
from sqlalchemy.engine import URL
from sqlalchemy.exc import DBAPIError, PendingRollbackError
from sqlalchemy.exc import TimeoutError as PoolTimeout
from sqlalchemy.pool import QueuePool

from .config import SCHEMA_VERSION, JournalPolicy, resolve_url, sqlite_path, where
from .errors import (
    InvalidInput,
    NotAtHead,
    ReadOnlyStore,
    StoreBusy,
    StoreClosed,
)
from .migration.head import HEAD_REVISION
from .migration.read_only import (
    explained_connection_errors,
    leave_no_companions,
    refuse_missing_file,
    require_readable,
)
from .postgresql.pipelined import NOT_RUN, Call
from .redaction import RedactionPolicy
from .repository_set import Repositories
from .runtime.backends import Dialect, dialect_for
from .runtime.engine import DriverWrite, Params, Prepared, make_engine
from .runtime.retry import DEFAULT_RETRY, RETRIED, RetryPolicy
from .runtime.store_backends import StoreDialect
from .sqlite.encryption import Key, KeyRegistration, KeySource, forget_key, register_key

log = logging.getLogger(__name__)

T = TypeVar("T")

CHECKPOINT_EVERY = 50
#: How many idle connections a store keeps for its reads (on SQLite, beside the pool's).
KEPT_READERS = 4


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


class StoreOptions(TypedDict, total=False):
    """`Store`'s keyword arguments, for what opens a Store for its caller (`AsyncStore`,
    `AsyncStore.open`); each is documented on `Store`."""

    retry: RetryPolicy
    checkpoint_every: int
    journal: JournalPolicy | None
    read_only: bool
    engine: Engine | None
    check_schema: bool
    redaction: RedactionPolicy | None
    key: KeySource | Key | None


class Store(Repositories):
    """A database opened for the repositories: one engine, its pooled connections, and
    units of work (`read`, `write`) run under the retry policy; what differs per dialect is
    its dialect's (`store.dialect`, resolved once when it opens; the run-time part is
    runtime/store_backends.py's). Its repositories are attributes, built on first use
    (`store.sessions`, `store.messages`, ...: `Repositories`).

    Args:
        url: a database URL or a SQLite path (default: $HERMES_STORE_URL, else
            $HERMES_HOME/state.db).
        retry: how lock contention and transient server faults are retried.
        checkpoint_every: on SQLite, a PASSIVE WAL checkpoint after this many writes (0:
            never).
        journal: how the SQLite file's journal mode is chosen (None: the default policy).
        read_only: open for reading only: every write is refused with ReadOnlyStore (a
            DatabaseNotWritable) and the file is left as it is.
        engine: an engine to use instead of building one from `url` (its owner disposes of
            it).
        check_schema: refuse a database that is missing or not at head when opening (False
            skips the check).
        redaction: the secrets replaced in every message this store writes (None: from
            the environment, `HERMES_STORE_REDACT`, off unless set; docs/redaction.md).
        key: the SQLite file's encryption key (SQLCipher, the `encryption` extra): a
            passphrase, 32 raw bytes, or a callable returning either, called for each new
            connection; used for every connection this process opens to the file until the
            store closes (docs/encryption.md). None: `HERMES_STORE_KEY` or
            `HERMES_STORE_KEY_FILE`, else no key.
    """

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
        redaction: RedactionPolicy | None = None,
        key: KeySource | Key | None = None,
    ) -> None:
        self.url = resolve_url(url)
        #: what every message write replaces before storing (docs/redaction.md)
        self.redaction = RedactionPolicy.from_env() if redaction is None else redaction
        self.read_only = read_only
        self._closed = False
        self._key = self._register_key(key)
        try:
            if check_schema and engine is None:
                # NotAtHead before anything is created: opening a SQLite path that holds
                # no database would leave an empty file (and its directory) behind
                refuse_missing_file(self.url)
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
            path = sqlite_path(self.url)
            if read_only and engine is None and path is not None:
                # reading leaves the file as it was, without -wal/-shm it did not have
                leave_no_companions(self.engine, path)
            self._write_lock = threading.Lock()
            self._count_lock = threading.Lock()
            #: What differs between SQLite and PostgreSQL (runtime/backends.py), picked once here
            self.dialect: Dialect = dialect_for(self.engine)
            self._runtime: StoreDialect = self.dialect.store(
                self.engine, self.url, read_only=read_only, retry=retry, write_lock=self._write_lock
            )
            # SQLite's writes begin IMMEDIATE (an execution option its begin listener
            # reads); a server's check out of the engine itself, whose connections then
            # carry no per-store options to look through at every event point
            self._writer = self._runtime.writer()
            self._write_conn: Connection | None = None
            # reads' connections kept between reads (`_reader`), most recent last; only
            # on an engine the store built, whose pool has room for them beside the others
            self._keeps_readers = engine is None and self._runtime.keeps_reader_connections
            self._idle_readers: list[Connection] = []
            # what a Connection of the engine starts with (`_release_reader`)
            self._engine_options = self.engine.get_execution_options()
            # one-statement reads without a transaction around them (`read_one`): on kept
            # readers of a writable store whose dialect runs a statement as its own
            self._reads_alone = (
                self._keeps_readers and not read_only and self._runtime.reads_statements_alone
            )
            self._read_alone = self._runtime.read_alone
            # `write_one`'s first attempt made at the driver of the kept writer (SQLite,
            # an engine of make_engine's, a writable store)
            self._one_at_driver = self._runtime.commits_one_at_driver
            _OPEN_STORES.add(self)
            self._writes = 0
            if check_schema:
                try:
                    self._require_head()
                except BaseException:
                    self.dispose()
                    raise
        except BaseException:
            # a store that does not open leaves no key behind for this process's others
            self._forget_key()
            raise

    def _register_key(self, key: KeySource | Key | None) -> tuple[Path, KeyRegistration] | None:
        if key is None:
            return None
        path = sqlite_path(self.url)
        if path is None:
            raise InvalidInput(
                "key= encrypts a SQLite file; on PostgreSQL the server encrypts its disk and "
                "the connection takes TLS (sslmode=verify-full in the URL): docs/encryption.md"
            )
        return path, register_key(path, key)

    def _forget_key(self) -> None:
        """Take back this store's own key registration (once)."""
        if self._key is not None:
            forget_key(*self._key)
            self._key = None

    def _require_head(self) -> None:
        """Refuse a database the repositories cannot serve, with what to do: a newer one
        (upgrade hermes-store), an older one (what it lacks, and the upgrade command), one
        that is not there. A read-only store reads any database whose shape is head, also
        one hermes-store has not adopted (a live state.db of Hermes v23); writing needs
        the adoption that `hermes-store upgrade` records."""
        with explained_connection_errors(self.url):
            with self._typed_errors(), _ReadTransaction(self) as conn:
                verdict = require_readable(conn, self.url, HEAD_REVISION)
        if self.read_only or verdict.revision == HEAD_REVISION:
            return
        place = where(self.url)
        if not verdict.adopted:
            raise NotAtHead(
                f"the database {place} has the shape of schema_version {SCHEMA_VERSION} but "
                "hermes-store has not adopted it, so it is not opened for writing; adopt it "
                f"with: hermes-store upgrade --url '{place}' (it records the revision and adds "
                "hermes-store's own tables; the v23 tables stay as they are), or open it "
                "with read_only=True"
            )
        raise NotAtHead(
            f"the database {place} is at revision {verdict.revision}, not {HEAD_REVISION}, so it "
            "is "
            "not opened for writing; upgrade it first: hermes-store "
            f"upgrade --url '{place}', or open it with read_only=True"
        )

    def check_open(self) -> None:
        """Raise StoreClosed once `close()` has run."""
        if self._closed:
            raise StoreClosed(f"the store for {where(self.url)} is closed; open a new Store")

    def require_writable(self) -> None:
        """Raise ReadOnlyStore on a store opened with `read_only=True`: every write, also
        one that bypasses `write` (VACUUM, an FTS merge), is refused before a connection
        is taken, so the error is the same on both backends, both SQLite drivers and
        journal modes (the drivers would each word their own refusal)."""
        if self.read_only:
            raise ReadOnlyStore(where(self.url))

    @property
    def _server(self) -> str | None:
        return self._runtime.server

    @property
    def write_lock(self) -> threading.Lock:
        """The lock this store's writes hold on SQLite (one writer at a time in the
        process); work that must not interleave with them, such as VACUUM, holds it too.
        On PostgreSQL writes do not take it: row locks keep them apart."""
        return self._write_lock

    def _writer_connection(self) -> Connection:
        """The connection a write goes through: kept between writes (under the write
        lock) where the backend says so, else checked out per write; a connection a
        restart or a pooler left half-dead fails the attempt, which is retried."""
        if not self._runtime.keeps_writer_connection:
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

    def write(
        self,
        work: Callable[[Connection], T],
        *,
        call: Callable[[], Call | DriverWrite | None] | None = None,
    ) -> T:
        """Run `work` in one write transaction, retried as a unit on lock contention.

        Args:
            work: a function of one Connection; it runs in one transaction.
            call: `work` as the dialect's kind of call, made afresh for each attempt (None
                from it: this attempt runs `work`). On PostgreSQL one statement whose
                first row is its whole answer (postgresql/pipelined.py's `Call`): an
                attempt with no earlier COMMIT in doubt sends it on a pooled driver
                connection, without a SQLAlchemy Connection. On SQLite statements whose
                first one's first row holds the answer (runtime/engine.py's
                `DriverWrite`; with its `rowcount`, the answer is how many rows the first
                changed), sent at the driver of the kept writer connection
                without SQLAlchemy's transaction; no row back (a refusal) has the attempt
                run `work`, which says why. `work` runs instead wherever that cannot be done.
        """
        self.check_open()
        self.require_writable()
        return self._write(work, call, time.monotonic())

    def _write(
        self,
        work: Callable[[Connection], T],
        call: Callable[[], Call | DriverWrite | None] | None,
        started: float,
        failed: Exception | None = None,
        repairs: int | None = None,
    ) -> T:
        """`write` once the store is known open and writable; `started`: when the write
        began. `failed`: the error its first attempt, made by the caller (`write_one`),
        ended with, the repairs mark (`repairs_done`) taken before it in `repairs`: the
        write goes on as though that attempt had been made here."""
        # PostgreSQL: a retry after a COMMIT that got no answer first asks the server
        # whether it was applied (pg_faults), so the work is never applied twice
        once = self._runtime.write_once()

        lock = self._write_lock if self._runtime.serialises_writes else nullcontext()

        def attempt() -> tuple[T, int]:
            with lock:
                if call is not None and (once is None or not once.in_doubt):
                    made = call()
                    if made is not None:
                        result = self._runtime.commit_call(
                            made, once, self._writer_connection, started
                        )
                        if result is not NOT_RUN:
                            return result, self._counted()
                conn = self._writer_connection()
                changed = False
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
                        changed = self._runtime.before_commit(conn, started)
                finally:
                    if changed:
                        self._runtime.after_commit(conn)
                    if not self._runtime.keeps_writer_connection:
                        conn.close()  # back to the pool
                return result, self._counted()

        def run(first: BaseException | None = None) -> tuple[T, int]:
            # the policy's `run`, its first attempt made here (or by the caller, which
            # failed with `first`): entered only on a failure
            if first is None:
                begun = time.monotonic()
                try:
                    return attempt()
                except RETRIED as exc:
                    first = exc
            else:
                begun = started
            in_doubt = None if once is None else lambda: once.in_doubt
            # an error that is not retried is raised again at once
            return self.retry.resume(first, attempt, begun, server=self._server, in_doubt=in_doubt)

        if failed is None:
            self._runtime.refuse_writes()
            repairs = self._runtime.repairs_done()
        assert repairs is not None
        try:  # `_typed_errors`, spelt out: every write passes here
            try:
                result, writes = run(failed)
            except DBAPIError as exc:
                if not self._runtime.repaired_after(exc, repairs):
                    raise
                result, writes = run()
        except _TYPED_SOURCES as exc:
            typed = self._typed(exc, started)
            if typed is None:
                raise
            raise typed from exc
        if self.checkpoint_every and writes % self.checkpoint_every == 0:
            self.checkpoint("PASSIVE")
        return result

    def _counted(self) -> int:
        """One more committed write; the count. Where writes are serialised the caller
        holds the write lock, which already keeps counts from being lost; else the
        count's own lock does."""
        if self._runtime.serialises_writes:
            self._writes += 1
            return self._writes
        with self._count_lock:  # concurrent writers must not lose counts
            self._writes += 1
            return self._writes

    def write_one(self, statement: Prepared, params: Params) -> int:
        """Run one prepared data-changing statement (an UPDATE, say) as a write of its
        own; how many rows it changed (triggers' changes not counted). On SQLite its
        first attempt is sent at the driver of the kept writer (`commit_at_driver`'s
        steps) where it can be, and a failed one goes on under the retry policy as in
        `write`; elsewhere, and wherever that cannot be done (something listens to the
        engine's statements, say), it runs as `write(work)` would, with the same retries
        and typed errors.

        Args:
            statement: the statement, with plain bound parameters.
            params: its parameters by name.
        """

        if self._one_at_driver:
            # SQLite: the first attempt made here, at the driver of the kept writer, with
            # nothing per call but what the write needs (no unit of work, no closures, no
            # DriverWrite); a failure goes on in `_write` as a failed first attempt would
            if self._closed:
                self.check_open()
            runtime = self._runtime
            runtime.refuse_writes()
            repairs = runtime.repairs_done()
            # bound before the lock: the statement stamps nothing of its own
            bound = statement.bound(self.engine.dialect, params)
            started = time.monotonic()
            failed: Exception | None = None
            rows: Any = NOT_RUN
            with self._write_lock:
                try:
                    rows = runtime.commit_one(self._writer_connection(), bound, started)
                    if rows is not NOT_RUN:
                        writes = self._counted()
                except Exception as exc:  # noqa: BLE001 (handed on to `_write`, which raises it)
                    failed = exc
            if failed is None:
                if rows is NOT_RUN:  # something watches the writes: through a Connection
                    return self.write(lambda conn: statement.run(conn, params))
                if self.checkpoint_every and writes % self.checkpoint_every == 0:
                    self.checkpoint("PASSIVE")
                return int(rows)
            write = DriverWrite(lambda: (bound,), rowcount=True)
            return self._write(
                lambda conn: statement.run(conn, params),
                lambda: write,
                started,
                failed,
                repairs,
            )

        def work(conn: Connection) -> int:
            return statement.run(conn, params)

        if not self.dialect.in_process:
            return self.write(work)
        # SQLite where write_one cannot write at the driver itself (read-only, an engine
        # not of make_engine's): `write`, which refuses or writes through a Connection
        dialect = self.engine.dialect
        write = DriverWrite(lambda: (statement.bound(dialect, params),), rowcount=True)
        return self.write(work, call=lambda: write)

    @contextmanager
    def _typed_errors(self, started: float | None = None) -> Iterator[None]:
        """`_typed` as a context: driver errors that mean something to a caller leave as
        hermes-store's typed errors; others as they are. `started`: when the unit of work
        began (default: now)."""
        started = time.monotonic() if started is None else started
        try:
            yield
        except _TYPED_SOURCES as exc:
            typed = self._typed(exc, started)
            if typed is None:
                raise
            raise typed from exc

    def _typed(self, exc: BaseException, started: float) -> Exception | None:
        """The typed error a driver error that means something to a caller stands for (damage,
        a full disk, a read-only file, an unencodable id, a lock held past the whole retry, a
        pool whose every connection stayed busy), None for others; `started`: when the unit
        of work began."""
        if isinstance(exc, DBAPIError | PendingRollbackError):
            # PendingRollbackError: a statement sent after the connection was lost (code
            # inside a `with store.read()` block that went on after the first error)
            return self._runtime.typed_error(exc) or self._runtime.lock_error(
                exc, time.monotonic() - started
            )
        if isinstance(exc, PoolTimeout):
            pool = self.engine.pool
            # QueuePool's: its size and how many it may open past it
            size = int(getattr(pool, "size", lambda: 0)()) + max(
                0, int(getattr(pool, "_max_overflow", 0))
            )
            return StoreBusy(where(self.url), time.monotonic() - started, size)
        if isinstance(exc, UnicodeEncodeError):
            return _surrogate_error(exc)
        return None

    @overload
    def read(self) -> AbstractContextManager[Connection]: ...

    @overload
    def read(self, work: Callable[[Connection], T]) -> T: ...

    def read(self, work: Callable[[Connection], T] | None = None) -> Any:
        """`with store.read() as conn:` a Connection for reading, whose deferred
        transaction ends when the block does; on PostgreSQL getting its connection is
        retried through server faults, a fault inside the block raises DatabaseUnavailable.
        `store.read(work)` runs `work(conn)` the same way, retried as a whole (so `work`
        must have no side effects outside the database), and returns what it returns.

        Args:
            work: a function of one Connection, run in one read transaction; without it, a
                context manager that yields the Connection.
        """
        self.check_open()
        if work is None:
            return self._read_block()
        started = time.monotonic()

        def attempt() -> T:
            # the read lock is taken by the work's first statement: a lock it meets fails
            # the attempt, which the retry policy runs again as a whole
            with _ReadTransaction(self, vet=False, lock_first=False) as conn:
                return work(conn)

        return self._retried_read(attempt, started)

    def read_one(
        self,
        statement: Prepared | Callable[[Connection], Prepared],
        params: Params,
        consume: Callable[[Any], T],
    ) -> T:
        """Run one prepared statement as a read and return what `consume` makes of its
        cursor (runtime/engine.py's `all_dicts`, `all_tuples`, `first_tuple`, or a function
        of the same kind, which must read every row it wants), under the retry policy and
        with the typed errors of `read`.

        Where the dialect runs a statement as a transaction of its own (SQLite, whose
        driver is in autocommit) it is sent on a kept reader connection with no BEGIN and
        no ROLLBACK around it: one statement reads one consistent snapshot anyway. Else (a
        server, a read-only store, whose read begins by getting past a crashed writer's
        journal, or a store over a caller's engine, whose connections may not be in
        autocommit) it runs as `read(work)` would.

        Args:
            statement: the statement, with plain bound parameters; or a function of the
                read's connection that picks it, where it depends on what the database
                holds (it may read the catalogue, inside the read's transaction, only
                where a read has one: on a server).
            params: its parameters by name.
            consume: a function of the cursor (a SQLAlchemy result on a server).
        """
        if not self._reads_alone:
            return self.read(lambda conn: _picked(statement, conn).execute(conn, params, consume))
        if self._closed:
            self.check_open()
        started = time.monotonic()
        idle = self._idle_readers
        if idle and isinstance(statement, Prepared):
            # The common case, with nothing per call but the read: a kept reader and a
            # statement already picked. Its first attempt is made here, without the retry
            # policy's frames and closures; a failure goes on into the policy (`resume`)
            # as a failed first attempt would.
            try:
                conn = idle.pop()  # atomic: no two threads get one connection
            except IndexError:  # another thread took the last one meanwhile
                pass
            else:
                try:
                    result = self._read_alone(statement, conn, params, consume)
                except BaseException as exc:
                    self._release_reader(conn, clean=False)
                    failed = exc
                else:
                    # `_release_reader`'s checks, the common case's first: nothing but the
                    # driver connection under `conn` was used, so it is as it was when
                    # kept unless a statement listener (which gets `conn`) changed it,
                    # by setting options or running a statement that began a transaction
                    if (
                        len(idle) < KEPT_READERS
                        and not self._closed
                        and conn.get_execution_options() is self._engine_options
                        and not conn.invalidated
                        and not conn.in_transaction()
                    ):
                        idle.append(conn)
                        if self._closed or len(idle) > KEPT_READERS:  # see _release_reader
                            self._trim_idle_readers()
                    else:
                        self._release_reader(conn, clean=not conn.in_transaction())
                    return result
                return self._retried_read(
                    self._read_one_attempt(statement, params, consume), started, failed
                )
        return self._retried_read(self._read_one_attempt(statement, params, consume), started)

    def _read_one_attempt(
        self,
        statement: Prepared | Callable[[Connection], Prepared],
        params: Params,
        consume: Callable[[Any], T],
    ) -> Callable[[], T]:
        """One attempt of `read_one` on a store that reads statements alone, for the
        retry policy."""
        runtime = self._runtime

        def attempt() -> T:
            conn = self._reader(vet=False)
            clean = False
            try:
                result = runtime.read_alone(_picked(statement, conn), conn, params, consume)
                # a picker that read through the Connection began SQLAlchemy's
                # transaction (the driver's was rolled back before the statement): such a
                # connection goes back to the pool, which ends it, instead of being kept
                clean = not conn.in_transaction()
                return result
            finally:
                self._release_reader(conn, clean)

        return attempt

    def _retried_read(
        self, attempt: Callable[[], T], started: float, failed: BaseException | None = None
    ) -> T:
        """`attempt` run under the retry policy, a driver error it ends with typed;
        `failed`: the error a first attempt made by the caller ended with."""
        try:
            if failed is None:
                return self.retry.run(attempt, server=self._server)
            return self.retry.resume(failed, attempt, started, server=self._server)
        except _TYPED_SOURCES as exc:
            typed = self._typed(exc, started)
            if typed is None:
                raise
            raise typed from exc

    @contextmanager
    def _read_block(self) -> Iterator[Connection]:
        with self._typed_errors(), _ReadTransaction(self, vet=True) as conn:
            yield conn

    def _vetted_connection(self) -> Connection:
        conn = self.engine.connect()
        try:
            self._runtime.vet_for_block(conn)
        except BaseException:
            conn.close()
            raise
        return conn

    def _reader(self, vet: bool) -> Connection:
        """A connection for one read: the one the last read left (a single-threaded
        caller keeps reusing one, as the pool's LIFO order would give it) or one checked
        out, under the retry policy: a new SQLite connection reads the journal mode, which
        a committing writer can lock; a PostgreSQL server may be restarting. A block
        (`vet`) has a checked-out connection tried first, since the block cannot be run
        again."""
        if self._idle_readers:
            try:
                return self._idle_readers.pop()  # atomic: no two threads get one connection
            except IndexError:  # another thread took the last one meanwhile
                pass
        connect = self._vetted_connection if vet else self.engine.connect
        return self.retry.run(connect, server=self._server)

    def _release_reader(self, conn: Connection, clean: bool) -> None:
        """After a read: keep its connection for the next one, if the read ended cleanly
        (a failed read's connection goes back to the pool, which resets it) and fewer than
        KEPT_READERS wait, else give it back to the pool."""
        if (
            clean
            and self._keeps_readers
            and not self._closed
            and not conn.invalidated
            and len(self._idle_readers) < KEPT_READERS
            # options a read set on its Connection (in place) would reach the next reads
            # (the same object where none were set: no comparison of their items)
            and (
                (options := conn.get_execution_options()) is self._engine_options
                or options == self.engine.get_execution_options()
            )
        ):
            self._idle_readers.append(conn)
            self._trim_idle_readers()
            return
        conn.close()

    def _trim_idle_readers(self) -> None:
        """After a connection was added to the kept readers: all closed if `close()` ran
        meanwhile (it may have missed it), else those past KEPT_READERS (threads that
        finish together may all pass the length check)."""
        if self._closed:
            self._close_idle_readers()
        while len(self._idle_readers) > KEPT_READERS:
            try:
                surplus = self._idle_readers.pop(0)
            except IndexError:
                break
            surplus.close()

    def _close_idle_readers(self) -> None:
        while self._idle_readers:
            try:
                conn = self._idle_readers.pop()
            except IndexError:
                return
            conn.close()

    def checkpoint(self, mode: str = "PASSIVE") -> None:
        """SQLite: `PRAGMA wal_checkpoint(mode)`, best effort; nothing on a server.

        Args:
            mode: the WAL checkpoint mode: PASSIVE, FULL, RESTART or TRUNCATE.
        """
        self._runtime.checkpoint(mode)

    @property
    def writes(self) -> int:
        """How many write units of work this store has committed."""
        return self._writes

    def dispose(self) -> None:
        """Close the connections the store holds idle (its reads' and its pool's), without
        a checkpoint or closing the store: its next call connects again. What a command
        that only read does before it exits, leaving the file as it found it."""
        self._close_idle_readers()
        self.engine.dispose()

    def close(self) -> None:
        """Close the store: drop the writer connection, checkpoint (TRUNCATE on SQLite) and
        dispose of the engine; idempotent."""
        if self._closed:
            return
        self._closed = True
        self._close_idle_readers()
        with self._write_lock:
            self._discard_writer_connection()
        self.checkpoint("TRUNCATE")
        self.engine.dispose()
        self._forget_key()

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


#: Every store not yet collected, for `_after_fork_in_child`.
_OPEN_STORES: weakref.WeakSet[Store] = weakref.WeakSet()
#: Connections a forked child inherited: held, never used or closed, so that neither the
#: child's garbage collector nor the pool's reset touches the parent's database handles.
_LEFT_BY_PARENT: list[Any] = []


def _after_fork_in_child() -> None:
    """A child process must not use the connections its parent opened (SQLite forbids a
    handle across fork; a server's socket would carry two processes' traffic): every
    store forgets its kept connections and its engine's pool, so the child opens its own
    (SQLAlchemy's `dispose(close=False)`, which leaves the parent's connections alone)."""
    for store in list(_OPEN_STORES):
        _LEFT_BY_PARENT.append((store._idle_readers, store._write_conn))
        store._idle_readers = []
        store._write_conn = None
        store.engine.dispose(close=False)


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


def _picked(statement: Prepared | Callable[[Connection], Prepared], conn: Connection) -> Prepared:
    return statement if isinstance(statement, Prepared) else statement(conn)


#: What `Store._typed` may turn into a typed error.
_TYPED_SOURCES = (DBAPIError, PendingRollbackError, PoolTimeout, UnicodeEncodeError)


class _ReadTransaction:
    """`with _ReadTransaction(store) as conn:` one read's transaction on a connection of
    the store's (`Store._reader`), rolled back at the end (a read has nothing to commit;
    rolling back also ends a transaction that an error inside it, a damaged FTS index say,
    left unusable), the connection then kept or given back (`Store._release_reader`).
    `lock_first`: the read's first step (the read lock on SQLite) is taken as it begins,
    under the retry policy; False for a read retried as a whole. A class, not a
    generator: it is entered once per read."""

    __slots__ = ("store", "vet", "lock_first", "conn")

    def __init__(self, store: Store, vet: bool = False, lock_first: bool = True) -> None:
        self.store = store
        self.vet = vet
        self.lock_first = lock_first

    def __enter__(self) -> Connection:
        store = self.store
        conn = self.conn = store._reader(self.vet)
        try:
            if not conn.in_transaction():  # vetting began it
                conn.begin()
            if self.lock_first and store._runtime.locks_reads:
                store._runtime.start_read(conn)
        except BaseException:
            self._end(clean=False)
            raise
        return conn

    def __exit__(self, kind: type[BaseException] | None, *_exc: object) -> None:
        self._end(clean=kind is None)

    def _end(self, clean: bool) -> None:
        conn = self.conn
        try:
            conn.rollback()
        except BaseException:
            clean = False
            raise
        finally:
            self.store._release_reader(conn, clean)
