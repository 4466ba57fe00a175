"""An asyncio face for gateway services: `AsyncStore` and its repositories, whose methods
are the synchronous repositories' methods as coroutines, with the same parameters and
typed results. Open one store per service and share it between tasks:

    store = await AsyncStore.open("~/.hermes/state.db")
    try:
        await store.sessions.create_session("s1", "telegram")
        await store.messages.append_message("s1", "user", "hello", idempotency_key="m-1")
        hits = await store.search.search_messages("hello")
    finally:
        await store.aclose()

The database drivers hermes-store runs on (sqlite3, psycopg's blocking API) block, so
every call runs in a worker thread of the store's own pool (never the event loop's
default executor, which the application may need for other work), and `open` builds
the engine and checks the schema in a thread too. A call keeps every promise of the
synchronous one: a write is one retried transaction, concurrent writers are serialised
by the Store, and many tasks may call at once. The async repositories are written out in
hermes_store/aio_repositories.py (generated from the declaration of the repositories,
hermes_store/repository_set.py), so editors and type checkers see each method's
signature and result.

Cancellation: a call cancelled (or timed out) while it waits for a worker never runs. A
call a worker has started runs to its end (a transaction is never cut in the middle)
and its caller gets CancelledError without knowing whether it committed: give appends an
`idempotency_key` and retry them with it, and the retry returns the first call's ids
without storing anything again. Closing: calls made once `aclose()` has begun raise
StoreClosed; calls made before it finish first.
"""

from __future__ import annotations

import asyncio
import queue
import threading
from collections.abc import AsyncIterator, Callable
from typing import Any, TypeVar, Unpack

from sqlalchemy.engine import URL

from .aio_repositories import (
    AsyncChangeFeed,
    AsyncCompressionLocks,
    AsyncDelegations,
    AsyncGatewayRouting,
    AsyncHousekeeping,
    AsyncMaintenance,
    AsyncMessages,
    AsyncMeta,
    AsyncRedaction,
    AsyncRepositories,
    AsyncSearch,
    AsyncSessions,
    AsyncSpace,
    AsyncTags,
    AsyncTelegramTopics,
    AsyncTitles,
    AsyncTrash,
    AsyncTurns,
    AsyncUsage,
)
from .config import where
from .errors import StoreClosed
from .repositories.changes import DEFAULT_BATCH, DEFAULT_POLL_INTERVAL, Change
from .repository_set import awaitable
from .store import Store, StoreOptions

#: AsyncStore, and the async repositories (generated in aio_repositories.py) under the
#: names callers import them by.
__all__ = [
    "AsyncChangeFeed",
    "AsyncCompressionLocks",
    "AsyncDelegations",
    "AsyncGatewayRouting",
    "AsyncHousekeeping",
    "AsyncMaintenance",
    "AsyncMessages",
    "AsyncMeta",
    "AsyncRedaction",
    "AsyncRepositories",
    "AsyncSearch",
    "AsyncSessions",
    "AsyncSpace",
    "AsyncStore",
    "AsyncTags",
    "AsyncTelegramTopics",
    "AsyncTitles",
    "AsyncTrash",
    "AsyncTurns",
    "AsyncUsage",
    "WorkerPool",
    "awaitable",
]

T = TypeVar("T")

#: Worker threads per AsyncStore: the Store's pooled connections (5) plus its overflow
#: allowance, so a burst of calls queues here rather than on the connection pool.
DEFAULT_WORKERS = 8


class _Call(asyncio.Future[Any]):
    """A blocking call on its way through the pool: waiting for a worker, then running.
    Cancelling it while it waits drops it there and then, in the same step as the
    cancellation (a worker takes a call under the pool's lock, so it either started
    before or never starts); a started call is left to finish."""

    def __init__(self, work: Callable[[], Any], pool: WorkerPool, loop: asyncio.AbstractEventLoop):
        super().__init__(loop=loop)
        self.work = work
        self.pool = pool
        self.started = False
        self.dropped = False

    def cancel(self, msg: Any | None = None) -> bool:
        with self.pool.lock:
            if not self.started:
                self.dropped = True
        return super().cancel(msg=msg)

    def settle(self, result: Any, error: BaseException | None) -> None:
        """On the loop: hand over what the worker got, unless the caller gave up."""
        if self.done():
            return
        if error is not None:
            self.set_exception(error)
        else:
            self.set_result(result)


class WorkerPool:
    """Worker threads serving one store's calls in order of arrival, started as calls
    need them (up to `workers`). Unlike an executor behind `run_in_executor`, whose
    futures learn of a cancellation one loop step later (when a free worker may already
    have taken the call), a call here is dropped as it is cancelled."""

    def __init__(self, workers: int, name: str) -> None:
        if workers < 1:
            raise ValueError(f"an AsyncStore needs at least one worker, not {workers}")
        self.lock = threading.Lock()
        self._queue: queue.SimpleQueue[_Call | None] = queue.SimpleQueue()
        self._workers = workers
        self._name = name
        self._threads: list[threading.Thread] = []
        self._idle = 0
        self._closed = False

    def submit(self, work: Callable[[], Any], closed: Callable[[], StoreClosed]) -> _Call:
        call = _Call(work, self, asyncio.get_running_loop())
        with self.lock:
            if self._closed:
                raise closed()
            if self._idle == 0 and len(self._threads) < self._workers:
                thread = threading.Thread(
                    target=self._serve,
                    name=f"{self._name}-{len(self._threads)}",
                    # a worker never keeps the interpreter alive: an abandoned transaction
                    # is rolled back by the database
                    daemon=True,
                )
                self._threads.append(thread)
                thread.start()
            self._queue.put(call)
        return call

    def _serve(self) -> None:
        while True:
            with self.lock:
                self._idle += 1
            call = self._queue.get()
            with self.lock:
                self._idle -= 1
                if call is None:
                    return
                if call.dropped:
                    continue
                call.started = True
            result: Any = None
            error: BaseException | None = None
            try:
                result = call.work()
            except BaseException as exc:  # noqa: BLE001 (handed to the caller as it is)
                error = exc
            try:
                call.get_loop().call_soon_threadsafe(call.settle, result, error)
            except RuntimeError:  # the caller's loop has closed: nobody is waiting
                pass

    def close(self) -> list[threading.Thread]:
        """Take no more calls; the workers stop once the calls already queued are done.
        Returns the threads to join."""
        with self.lock:
            if not self._closed:
                self._closed = True
                for _ in self._threads:
                    self._queue.put(None)
            return list(self._threads)


async def _off_loop(work: Callable[[], T], abandon: Callable[[T], object] | None = None) -> T:
    """`work()` in a thread of its own, awaited without blocking the loop. If the caller
    is cancelled meanwhile, what `work` returns is handed to `abandon` (in that thread)."""
    loop = asyncio.get_running_loop()
    done: asyncio.Future[T] = loop.create_future()

    def settle(result: T | None, error: BaseException | None) -> None:
        if done.cancelled():
            if error is None and abandon is not None:
                threading.Thread(target=abandon, args=(result,), daemon=True).start()
            return
        if error is not None:
            done.set_exception(error)
        else:
            done.set_result(result)  # type: ignore[arg-type]

    def run() -> None:
        result: T | None = None
        error: BaseException | None = None
        try:
            result = work()
        except BaseException as exc:  # noqa: BLE001 (handed to the caller as it is)
            error = exc
        try:
            loop.call_soon_threadsafe(settle, result, error)
        except RuntimeError:  # the loop has closed: nobody is waiting
            if error is None and abandon is not None:
                abandon(result)  # type: ignore[arg-type]

    threading.Thread(target=run, name="hermes-store-off-loop", daemon=True).start()
    return await done


class AsyncStore(AsyncRepositories):
    """A `Store` for asyncio code, with its repositories as attributes, named as the
    Store's (`AsyncRepositories`: `store.sessions`, `store.messages`, ...), whose methods
    are coroutines. Open it with `await AsyncStore.open(url)` (the engine is built and the
    schema checked off the event loop) and close it with `await store.aclose()`, or
    `async with` either form; `AsyncStore(url)` opens on the calling thread.

    Args:
        url: the database, as `Store`'s `url`.
        workers: worker threads for the blocking calls.
        store: an open `Store` to serve instead of opening one from `url` (the other
            keyword arguments are then unused); `aclose` closes it.
        options: `Store`'s keyword arguments (`StoreOptions`: retry, checkpoint_every,
            journal, read_only, engine, check_schema, redaction, key), documented there.

    Attributes:
        sync: the synchronous `Store` underneath.
    """

    def __init__(
        self,
        url: str | URL | None = None,
        *,
        workers: int = DEFAULT_WORKERS,
        store: Store | None = None,
        **options: Unpack[StoreOptions],
    ) -> None:
        self.sync = Store(url, **options) if store is None else store
        self._pool = WorkerPool(workers, "hermes-store")
        self._closing: asyncio.Future[None] | None = None

    @classmethod
    async def open(
        cls,
        url: str | URL | None = None,
        *,
        workers: int = DEFAULT_WORKERS,
        **options: Unpack[StoreOptions],
    ) -> AsyncStore:
        """Open the store without blocking the event loop: the engine, the first
        connection and the schema check (which may wait for a server, up to its
        `connect_timeout` and the retry budget) run in a thread. Cancelling the open
        closes the store once it exists.

        Args:
            url: the database, as `Store`'s `url`.
            workers: worker threads for the blocking calls.
            options: `Store`'s keyword arguments (`StoreOptions`), documented there.
        """
        store = await _off_loop(lambda: Store(url, **options), abandon=Store.close)
        return cls(store=store, workers=workers)

    def _closed_error(self) -> StoreClosed:
        return StoreClosed(
            f"the async store for {where(self.sync.url)} is closed; open a new AsyncStore"
        )

    async def run(self, call: Callable[[], T]) -> T:
        """Run a blocking call on the store's worker threads (StoreClosed once `aclose()`
        has begun).

        Args:
            call: a blocking callable taking no arguments.
        """
        result: T = await self._pool.submit(call, self._closed_error)
        return result

    async def aclose(self) -> None:
        """Refuse new calls (StoreClosed), let the calls made before finish, then close
        the store (a TRUNCATE checkpoint on SQLite), all off the event loop; idempotent,
        and a second caller waits for the first one's close."""
        if self._closing is None:
            threads = self._pool.close()

            def finish() -> None:
                for thread in threads:
                    thread.join()
                self.sync.close()

            self._closing = asyncio.ensure_future(_off_loop(finish))
        await asyncio.shield(self._closing)

    def changes(
        self,
        since: int = 0,
        *,
        poll_interval: float = DEFAULT_POLL_INTERVAL,
        batch: int = DEFAULT_BATCH,
        idle_timeout: float | None = None,
    ) -> AsyncIterator[Change]:
        """Follow the change feed: `async for change in store.changes(since=cursor)`
        yields every change after `cursor` as it commits (pushed by LISTEN/NOTIFY on
        PostgreSQL, polled every `poll_interval` seconds on SQLite), until the loop is
        left or cancelled, or nothing new came for `idle_timeout` seconds. Store
        `change.position` of the last change handled and resume from it.

        Args:
            since: the cursor to resume from (a change's `position`; 0 from the oldest kept).
            poll_interval: seconds between polls where nothing pushes news (SQLite), and
                the longest wait for a missed notification on PostgreSQL.
            batch: at most this many changes are read at a time.
            idle_timeout: stop after this many seconds without news (None: never).
        """
        return self.sync.feed.follow_async(
            since,
            poll_interval=poll_interval,
            batch=batch,
            idle_timeout=idle_timeout,
            run=self.run,
        )

    async def __aenter__(self) -> AsyncStore:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()
