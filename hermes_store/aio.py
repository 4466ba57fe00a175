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
by the Store, and many tasks may call at once. Each method is declared on its class
(below), so editors and type checkers see its signature and result.

Cancellation: a call cancelled (or timed out) while it waits for a worker never runs. A
call a worker has started runs to its end (a transaction is never cut in the middle)
and its caller gets CancelledError without knowing whether it committed: give appends an
`idempotency_key` and retry them with it, and the retry returns the first call's ids
without storing anything again. Closing: calls made once `aclose()` has begun raise
StoreClosed; calls made before it finish first.
"""

from __future__ import annotations

import asyncio
import functools
import queue
import threading
from collections.abc import AsyncIterator, Callable, Coroutine
from typing import Any, Concatenate, Generic, ParamSpec, TypeVar, overload

from sqlalchemy import Engine
from sqlalchemy.engine import URL

from .config import JournalPolicy
from .encryption import Key, KeySource
from .errors import StoreClosed
from .redaction import RedactionPolicy
from .repositories.changes import DEFAULT_BATCH, DEFAULT_POLL_INTERVAL, Change, ChangeFeed
from .repositories.coordination import (
    AsyncDelegationRepository,
    CompressionLockRepository,
    GatewayRoutingRepository,
)
from .repositories.maintenance import MaintenanceRepository
from .repositories.messages import MessageRepository
from .repositories.meta import MetaRepository
from .repositories.redaction import RedactionRepository
from .repositories.search import SearchRepository
from .repositories.sessions import SessionRepository
from .repositories.space import SpaceRepository
from .repositories.tags import TagRepository
from .repositories.telegram import TelegramTopicRepository
from .repositories.titles import TitleRepository
from .repositories.trash import TrashRepository
from .repositories.turns import TurnRepository
from .repositories.usage import UsageRepository
from .retry import DEFAULT_RETRY, RetryPolicy
from .sqlite_damage import where
from .store import CHECKPOINT_EVERY, Store

P = ParamSpec("P")
T = TypeVar("T")
R = TypeVar("R")

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


class _AsyncRepository(Generic[R]):
    _repository: Callable[[Store], R]

    def __init__(self, store: AsyncStore) -> None:
        self._store = store
        self._sync: R = self._repository(store.sync)


class awaitable(Generic[P, T]):  # noqa: N801 (used like a decorator, as `property` is)
    """A synchronous repository method, offered as a coroutine method of an async
    repository; it runs in the store's worker threads."""

    def __init__(self, method: Callable[Concatenate[Any, P], T]) -> None:
        self.method = method
        functools.update_wrapper(self, method)  # type: ignore[arg-type]

    @overload
    def __get__(self, instance: None, owner: type[Any]) -> awaitable[P, T]: ...

    @overload
    def __get__(
        self, instance: _AsyncRepository[Any], owner: type[Any]
    ) -> Callable[P, Coroutine[Any, Any, T]]: ...

    def __get__(self, instance: _AsyncRepository[Any] | None, owner: type[Any]) -> Any:
        if instance is None:
            return self
        method = self.method
        bound = instance._sync
        store = instance._store

        @functools.wraps(method)
        async def call(*args: P.args, **kwargs: P.kwargs) -> T:
            return await store.run(functools.partial(method, bound, *args, **kwargs))

        return call


class AsyncStore:
    """A `Store` for asyncio code, with its repositories as attributes. Open it with
    `await AsyncStore.open(url)` (the engine is built and the schema checked off the
    event loop) and close it with `await store.aclose()`, or `async with` either form;
    `AsyncStore(url)` opens on the calling thread. The keyword arguments are `Store`'s,
    plus `workers` (threads serving calls).

    Args:
        url: a database URL or a SQLite path (default: $HERMES_STORE_URL, else
            $HERMES_HOME/state.db).
        workers: worker threads for the blocking calls.
        store: an open `Store` to serve instead of opening one from `url` (the other
            keyword arguments are then unused); `aclose` closes it.
        retry: how lock contention and transient server faults are retried.
        checkpoint_every: on SQLite, a PASSIVE WAL checkpoint after this many writes (0:
            never).
        journal: how the SQLite file's journal mode is chosen (None: the default policy).
        read_only: open for reading only: every write is refused and the file is left as it
            is.
        engine: an engine to use instead of building one from `url` (its owner disposes of
            it).
        check_schema: refuse a database that is missing or not at head when opening (False
            skips the check).
        redaction: the secrets replaced in every message written (None: from the
            environment, off unless `HERMES_STORE_REDACT` is set; docs/redaction.md).
        key: the SQLite file's encryption key, or a callable returning it (as `Store`'s;
            docs/encryption.md).

    Attributes:
        sync: the synchronous `Store` underneath.
        sessions: `SessionRepository`'s methods as coroutines (`AsyncSessions`).
        titles: `TitleRepository`'s (`AsyncTitles`).
        messages: `MessageRepository`'s (`AsyncMessages`).
        usage: `UsageRepository`'s (`AsyncUsage`).
        meta: `MetaRepository`'s (`AsyncMeta`).
        search: `SearchRepository`'s (`AsyncSearch`).
        maintenance: `MaintenanceRepository`'s (`AsyncMaintenance`).
        compression_locks: `CompressionLockRepository`'s (`AsyncCompressionLocks`).
        gateway_routing: `GatewayRoutingRepository`'s (`AsyncGatewayRouting`).
        delegations: `AsyncDelegationRepository`'s (`AsyncDelegations`).
        telegram_topics: `TelegramTopicRepository`'s (`AsyncTelegramTopics`).
        feed: `ChangeFeed`'s (`AsyncChangeFeed`); `changes()` follows the feed.
        turns: `TurnRepository`'s (`AsyncTurns`).
        trash: `TrashRepository`'s (`AsyncTrash`).
        tags: `TagRepository`'s (`AsyncTags`).
        redaction: `RedactionRepository`'s with the store's policy (`AsyncRedaction`).
        space: `SpaceRepository`'s (`AsyncSpace`).
    """

    def __init__(
        self,
        url: str | URL | None = None,
        *,
        workers: int = DEFAULT_WORKERS,
        store: Store | None = None,
        retry: RetryPolicy = DEFAULT_RETRY,
        checkpoint_every: int = CHECKPOINT_EVERY,
        journal: JournalPolicy | None = None,
        read_only: bool = False,
        engine: Engine | None = None,
        check_schema: bool = True,
        redaction: RedactionPolicy | None = None,
        key: KeySource | Key | None = None,
    ) -> None:
        if store is None:
            store = Store(
                url,
                retry=retry,
                checkpoint_every=checkpoint_every,
                journal=journal,
                read_only=read_only,
                engine=engine,
                check_schema=check_schema,
                redaction=redaction,
                key=key,
            )
        self.sync = store
        self._pool = WorkerPool(workers, "hermes-store")
        self._closing: asyncio.Future[None] | None = None
        self.sessions = AsyncSessions(self)
        self.titles = AsyncTitles(self)
        self.messages = AsyncMessages(self)
        self.usage = AsyncUsage(self)
        self.meta = AsyncMeta(self)
        self.search = AsyncSearch(self)
        self.maintenance = AsyncMaintenance(self)
        self.compression_locks = AsyncCompressionLocks(self)
        self.gateway_routing = AsyncGatewayRouting(self)
        self.delegations = AsyncDelegations(self)
        self.telegram_topics = AsyncTelegramTopics(self)
        self.feed = AsyncChangeFeed(self)
        self.turns = AsyncTurns(self)
        self.trash = AsyncTrash(self)
        self.tags = AsyncTags(self)
        self.redaction = AsyncRedaction(self)
        self.space = AsyncSpace(self)

    @classmethod
    async def open(
        cls,
        url: str | URL | None = None,
        *,
        workers: int = DEFAULT_WORKERS,
        retry: RetryPolicy = DEFAULT_RETRY,
        checkpoint_every: int = CHECKPOINT_EVERY,
        journal: JournalPolicy | None = None,
        read_only: bool = False,
        engine: Engine | None = None,
        check_schema: bool = True,
        redaction: RedactionPolicy | None = None,
        key: KeySource | Key | None = None,
    ) -> AsyncStore:
        """Open the store without blocking the event loop: the engine, the first
        connection and the schema check (which may wait for a server, up to its
        `connect_timeout` and the retry budget) run in a thread. Cancelling the open
        closes the store once it exists.

        Args:
            url: a database URL or a SQLite path (default: $HERMES_STORE_URL, else
                $HERMES_HOME/state.db).
            workers: worker threads for the blocking calls.
            retry: how lock contention and transient server faults are retried.
            checkpoint_every: on SQLite, a PASSIVE WAL checkpoint after this many writes (0:
                never).
            journal: how the SQLite file's journal mode is chosen (None: the default
                policy).
            read_only: open for reading only: every write is refused and the file is left as
                it is.
            engine: an engine to use instead of building one from `url` (its owner disposes
                of it).
            check_schema: refuse a database that is missing or not at head when opening
                (False skips the check).
            redaction: the secrets replaced in every message written (None: from the
                environment; docs/redaction.md).
            key: the SQLite file's encryption key, or a callable returning it (as
                `Store`'s; docs/encryption.md).
        """
        store = await _off_loop(
            lambda: Store(
                url,
                retry=retry,
                checkpoint_every=checkpoint_every,
                journal=journal,
                read_only=read_only,
                engine=engine,
                check_schema=check_schema,
                redaction=redaction,
                key=key,
            ),
            abandon=Store.close,
        )
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
        return self.feed._sync.follow_async(
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


class AsyncSessions(_AsyncRepository[SessionRepository]):
    """`SessionRepository`'s methods as coroutines."""

    _repository = SessionRepository
    create_session = awaitable(SessionRepository.create_session)
    ensure_session = awaitable(SessionRepository.ensure_session)
    end_session = awaitable(SessionRepository.end_session)
    reopen_session = awaitable(SessionRepository.reopen_session)
    promote_to_session_reset = awaitable(SessionRepository.promote_to_session_reset)
    prune_empty_ghost_sessions = awaitable(SessionRepository.prune_empty_ghost_sessions)
    finalize_orphaned_compression_sessions = awaitable(
        SessionRepository.finalize_orphaned_compression_sessions
    )
    get_session = awaitable(SessionRepository.get_session)
    resolve_session_id = awaitable(SessionRepository.resolve_session_id)
    session_ids_with_prefix = awaitable(SessionRepository.session_ids_with_prefix)
    update_system_prompt = awaitable(SessionRepository.update_system_prompt)
    update_session_meta = awaitable(SessionRepository.update_session_meta)
    update_session_model = awaitable(SessionRepository.update_session_model)
    update_session_runtime_lock = awaitable(SessionRepository.update_session_runtime_lock)
    update_session_billing_route = awaitable(SessionRepository.update_session_billing_route)
    update_session_cwd = awaitable(SessionRepository.update_session_cwd)
    backfill_repo_roots = awaitable(SessionRepository.backfill_repo_roots)
    set_session_archived = awaitable(SessionRepository.set_session_archived)
    set_session_pinned = awaitable(SessionRepository.set_session_pinned)
    set_expiry_finalized = awaitable(SessionRepository.set_expiry_finalized)
    record_compression_failure_cooldown = awaitable(
        SessionRepository.record_compression_failure_cooldown
    )
    get_compression_failure_cooldown = awaitable(SessionRepository.get_compression_failure_cooldown)
    clear_compression_failure_cooldown = awaitable(
        SessionRepository.clear_compression_failure_cooldown
    )
    get_compression_fallback_streak = awaitable(SessionRepository.get_compression_fallback_streak)
    set_compression_fallback_streak = awaitable(SessionRepository.set_compression_fallback_streak)
    get_compression_ineffective_count = awaitable(
        SessionRepository.get_compression_ineffective_count
    )
    set_compression_ineffective_count = awaitable(
        SessionRepository.set_compression_ineffective_count
    )
    get_compression_tip = awaitable(SessionRepository.get_compression_tip)
    get_compression_lineage = awaitable(SessionRepository.get_compression_lineage)
    find_live_compression_child = awaitable(SessionRepository.find_live_compression_child)
    get_session_delete_targets = awaitable(SessionRepository.get_session_delete_targets)
    ancestors = awaitable(SessionRepository.ancestors)
    descendants = awaitable(SessionRepository.descendants)
    get_conversation_root = awaitable(SessionRepository.get_conversation_root)
    resolve_resume_session_id = awaitable(SessionRepository.resolve_resume_session_id)
    list_sessions_rich = awaitable(SessionRepository.list_sessions_rich)
    get_session_rich_row = awaitable(SessionRepository.get_session_rich_row)
    search_sessions_by_id = awaitable(SessionRepository.search_sessions_by_id)
    search_sessions = awaitable(SessionRepository.search_sessions)
    session_count = awaitable(SessionRepository.session_count)
    session_count_by_source = awaitable(SessionRepository.session_count_by_source)
    list_cron_job_runs = awaitable(SessionRepository.list_cron_job_runs)
    distinct_session_cwds = awaitable(SessionRepository.distinct_session_cwds)
    list_skill_scaffolded_sessions = awaitable(SessionRepository.list_skill_scaffolded_sessions)
    get_first_assistant_text = awaitable(SessionRepository.get_first_assistant_text)


class AsyncTitles(_AsyncRepository[TitleRepository]):
    """`TitleRepository`'s methods as coroutines."""

    _repository = TitleRepository
    set_session_title = awaitable(TitleRepository.set_session_title)
    set_auto_title_if_empty = awaitable(TitleRepository.set_auto_title_if_empty)
    get_session_title = awaitable(TitleRepository.get_session_title)
    get_session_by_title = awaitable(TitleRepository.get_session_by_title)
    resolve_session_by_title = awaitable(TitleRepository.resolve_session_by_title)
    get_next_title_in_lineage = awaitable(TitleRepository.get_next_title_in_lineage)


class AsyncMessages(_AsyncRepository[MessageRepository]):
    """`MessageRepository`'s methods as coroutines."""

    _repository = MessageRepository
    append_message = awaitable(MessageRepository.append_message)
    append_messages = awaitable(MessageRepository.append_messages)
    replace_messages = awaitable(MessageRepository.replace_messages)
    archive_and_compact = awaitable(MessageRepository.archive_and_compact)
    set_latest_matching_message_display_kind = awaitable(
        MessageRepository.set_latest_matching_message_display_kind
    )
    set_latest_user_api_content = awaitable(MessageRepository.set_latest_user_api_content)
    rewind_to_message = awaitable(MessageRepository.rewind_to_message)
    restore_rewound = awaitable(MessageRepository.restore_rewound)
    pop_newest_message = awaitable(MessageRepository.pop_newest_message)
    clear_messages = awaitable(MessageRepository.clear_messages)
    publish_compression_child = awaitable(MessageRepository.publish_compression_child)
    get_messages = awaitable(MessageRepository.get_messages)
    get_newest_messages = awaitable(MessageRepository.get_newest_messages)
    get_messages_around = awaitable(MessageRepository.get_messages_around)
    get_anchored_view = awaitable(MessageRepository.get_anchored_view)
    list_recent_user_messages = awaitable(MessageRepository.list_recent_user_messages)
    has_archived_messages = awaitable(MessageRepository.has_archived_messages)
    has_platform_message_id = awaitable(MessageRepository.has_platform_message_id)
    message_count = awaitable(MessageRepository.message_count)
    get_messages_as_conversation = awaitable(MessageRepository.get_messages_as_conversation)
    get_resume_conversations = awaitable(MessageRepository.get_resume_conversations)
    get_ancestor_display_prefix = awaitable(MessageRepository.get_ancestor_display_prefix)


class AsyncUsage(_AsyncRepository[UsageRepository]):
    """`UsageRepository`'s methods as coroutines."""

    _repository = UsageRepository
    update_token_counts = awaitable(UsageRepository.update_token_counts)
    record_auxiliary_usage = awaitable(UsageRepository.record_auxiliary_usage)
    usage_by_model = awaitable(UsageRepository.usage_by_model)
    usage_by_day = awaitable(UsageRepository.usage_by_day)
    usage_by_model_and_day = awaitable(UsageRepository.usage_by_model_and_day)
    message_activity_by_day = awaitable(UsageRepository.message_activity_by_day)


class AsyncMeta(_AsyncRepository[MetaRepository]):
    """`MetaRepository`'s methods as coroutines."""

    _repository = MetaRepository
    get_meta = awaitable(MetaRepository.get_meta)
    set_meta = awaitable(MetaRepository.set_meta)
    delete_meta = awaitable(MetaRepository.delete_meta)
    list_meta_prefix = awaitable(MetaRepository.list_meta_prefix)


class AsyncSearch(_AsyncRepository[SearchRepository]):
    """`SearchRepository`'s methods as coroutines."""

    _repository = SearchRepository
    search_messages = awaitable(SearchRepository.search_messages)


class AsyncMaintenance(_AsyncRepository[MaintenanceRepository]):
    """`MaintenanceRepository`'s methods as coroutines."""

    _repository = MaintenanceRepository
    export_session = awaitable(MaintenanceRepository.export_session)
    export_session_lineage = awaitable(MaintenanceRepository.export_session_lineage)
    import_sessions = awaitable(MaintenanceRepository.import_sessions)
    import_each = awaitable(MaintenanceRepository.import_each)
    delete_session = awaitable(MaintenanceRepository.delete_session)
    delete_session_if_empty = awaitable(MaintenanceRepository.delete_session_if_empty)
    delete_sessions = awaitable(MaintenanceRepository.delete_sessions)
    prune_sessions = awaitable(MaintenanceRepository.prune_sessions)
    list_prune_candidates = awaitable(MaintenanceRepository.list_prune_candidates)
    archive_sessions = awaitable(MaintenanceRepository.archive_sessions)
    count_empty_sessions = awaitable(MaintenanceRepository.count_empty_sessions)
    delete_empty_sessions = awaitable(MaintenanceRepository.delete_empty_sessions)
    archive_stale_sessions = awaitable(MaintenanceRepository.archive_stale_sessions)


class AsyncCompressionLocks(_AsyncRepository[CompressionLockRepository]):
    """`CompressionLockRepository`'s methods as coroutines."""

    _repository = CompressionLockRepository
    try_acquire = awaitable(CompressionLockRepository.try_acquire)
    refresh = awaitable(CompressionLockRepository.refresh)
    release = awaitable(CompressionLockRepository.release)
    get_holder = awaitable(CompressionLockRepository.get_holder)


class AsyncGatewayRouting(_AsyncRepository[GatewayRoutingRepository]):
    """`GatewayRoutingRepository`'s methods as coroutines."""

    _repository = GatewayRoutingRepository
    save_entry = awaitable(GatewayRoutingRepository.save_entry)
    replace_entries = awaitable(GatewayRoutingRepository.replace_entries)
    load_entries = awaitable(GatewayRoutingRepository.load_entries)
    delete_entries = awaitable(GatewayRoutingRepository.delete_entries)
    record_gateway_session_peer = awaitable(GatewayRoutingRepository.record_gateway_session_peer)
    list_gateway_sessions = awaitable(GatewayRoutingRepository.list_gateway_sessions)
    find_session_by_origin = awaitable(GatewayRoutingRepository.find_session_by_origin)
    find_latest_gateway_session_for_peer = awaitable(
        GatewayRoutingRepository.find_latest_gateway_session_for_peer
    )
    request_handoff = awaitable(GatewayRoutingRepository.request_handoff)
    claim_handoff = awaitable(GatewayRoutingRepository.claim_handoff)
    complete_handoff = awaitable(GatewayRoutingRepository.complete_handoff)
    fail_handoff = awaitable(GatewayRoutingRepository.fail_handoff)
    get_handoff_state = awaitable(GatewayRoutingRepository.get_handoff_state)
    list_pending_handoffs = awaitable(GatewayRoutingRepository.list_pending_handoffs)


class AsyncDelegations(_AsyncRepository[AsyncDelegationRepository]):
    """`AsyncDelegationRepository`'s methods as coroutines."""

    _repository = AsyncDelegationRepository
    get = awaitable(AsyncDelegationRepository.get)
    list_by_state = awaitable(AsyncDelegationRepository.list_by_state)
    count_by_state = awaitable(AsyncDelegationRepository.count_by_state)


class AsyncTelegramTopics(_AsyncRepository[TelegramTopicRepository]):
    """`TelegramTopicRepository`'s methods as coroutines."""

    _repository = TelegramTopicRepository
    apply_telegram_topic_migration = awaitable(
        TelegramTopicRepository.apply_telegram_topic_migration
    )
    enable_telegram_topic_mode = awaitable(TelegramTopicRepository.enable_telegram_topic_mode)
    disable_telegram_topic_mode = awaitable(TelegramTopicRepository.disable_telegram_topic_mode)
    is_telegram_topic_mode_enabled = awaitable(
        TelegramTopicRepository.is_telegram_topic_mode_enabled
    )
    get_telegram_topic_binding = awaitable(TelegramTopicRepository.get_telegram_topic_binding)
    get_telegram_topic_binding_by_session = awaitable(
        TelegramTopicRepository.get_telegram_topic_binding_by_session
    )
    list_telegram_topic_bindings_for_chat = awaitable(
        TelegramTopicRepository.list_telegram_topic_bindings_for_chat
    )
    is_telegram_session_linked_to_topic = awaitable(
        TelegramTopicRepository.is_telegram_session_linked_to_topic
    )
    delete_telegram_topic_binding = awaitable(TelegramTopicRepository.delete_telegram_topic_binding)
    bind_telegram_topic = awaitable(TelegramTopicRepository.bind_telegram_topic)
    list_unlinked_telegram_sessions_for_user = awaitable(
        TelegramTopicRepository.list_unlinked_telegram_sessions_for_user
    )


class AsyncChangeFeed(_AsyncRepository[ChangeFeed]):
    """`ChangeFeed`'s methods as coroutines (following is `AsyncStore.changes`)."""

    _repository = ChangeFeed
    changes = awaitable(ChangeFeed.changes)
    latest = awaitable(ChangeFeed.latest)
    oldest_cursor = awaitable(ChangeFeed.oldest_cursor)
    trim = awaitable(ChangeFeed.trim)
    set_retention = awaitable(ChangeFeed.set_retention)


class AsyncTurns(_AsyncRepository[TurnRepository]):
    """`TurnRepository`'s methods as coroutines."""

    _repository = TurnRepository
    acquire_turn = awaitable(TurnRepository.acquire_turn)
    renew_turn = awaitable(TurnRepository.renew_turn)
    release_turn = awaitable(TurnRepository.release_turn)
    current_turn = awaitable(TurnRepository.current_turn)


class AsyncTrash(_AsyncRepository[TrashRepository]):
    """`TrashRepository`'s methods as coroutines."""

    _repository = TrashRepository
    trash_session = awaitable(TrashRepository.trash_session)
    restore_session = awaitable(TrashRepository.restore_session)
    list_trash = awaitable(TrashRepository.list_trash)
    empty_trash = awaitable(TrashRepository.empty_trash)
    trash_size = awaitable(TrashRepository.trash_size)


class AsyncTags(_AsyncRepository[TagRepository]):
    """`TagRepository`'s methods as coroutines."""

    _repository = TagRepository
    add_tags = awaitable(TagRepository.add_tags)
    remove_tags = awaitable(TagRepository.remove_tags)
    set_tags = awaitable(TagRepository.set_tags)
    get_tags = awaitable(TagRepository.get_tags)
    list_tags = awaitable(TagRepository.list_tags)
    sessions_with_tag = awaitable(TagRepository.sessions_with_tag)


class AsyncRedaction(_AsyncRepository[RedactionRepository]):
    """`RedactionRepository`'s methods as coroutines, with the store's own policy."""

    _repository = RedactionRepository
    redact_stored = awaitable(RedactionRepository.redact_stored)
    redaction_cursor = awaitable(RedactionRepository.redaction_cursor)


class AsyncSpace(_AsyncRepository[SpaceRepository]):
    """`SpaceRepository`'s methods as coroutines."""

    _repository = SpaceRepository
    space_report = awaitable(SpaceRepository.space_report)
