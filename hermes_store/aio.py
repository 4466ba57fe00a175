"""An asyncio face for gateway services: `AsyncStore` and its repositories, whose methods
are the synchronous repositories' methods as coroutines, with the same parameters and
typed results.

    async with AsyncStore("~/.hermes/state.db") as store:
        await store.sessions.create_session("s1", "telegram")
        await store.messages.append_message("s1", "user", "hello")
        hits = await store.search.search_messages("hello")

The database drivers hermes-store runs on (sqlite3, psycopg's blocking API) block, so
every call runs in a worker thread of the store's own pool (never the event loop's
default executor, which the application may need for other work). A call keeps every
promise of the synchronous one: a write is one retried transaction, concurrent writers
are serialised by the Store, and many tasks may call at once. Each method is declared on
its class (below), so editors and type checkers see its signature and result.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable, Coroutine
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Concatenate, Generic, ParamSpec, TypeVar, overload

from sqlalchemy.engine import URL

from .repositories.coordination import (
    AsyncDelegationRepository,
    CompressionLockRepository,
    GatewayRoutingRepository,
)
from .repositories.maintenance import MaintenanceRepository
from .repositories.messages import MessageRepository
from .repositories.meta import MetaRepository
from .repositories.search import SearchRepository
from .repositories.sessions import SessionRepository
from .repositories.telegram import TelegramTopicRepository
from .repositories.titles import TitleRepository
from .repositories.usage import UsageRepository
from .store import Store

P = ParamSpec("P")
T = TypeVar("T")
R = TypeVar("R")

#: Worker threads per AsyncStore: the Store's pooled connections (5) plus its overflow
#: allowance, so a burst of calls queues here rather than on the connection pool.
DEFAULT_WORKERS = 8


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
    """A `Store` for asyncio code, with its repositories as attributes. Use it as
    `async with AsyncStore(url) as store:` or call `await store.aclose()`; arguments are
    those of `Store`, plus `workers` (threads serving calls)."""

    def __init__(
        self,
        url: str | URL | None = None,
        *,
        workers: int = DEFAULT_WORKERS,
        store: Store | None = None,
        **store_options: Any,
    ) -> None:
        self.sync = store if store is not None else Store(url, **store_options)
        self._executor = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="hermes-store")
        self._closed = False
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

    async def run(self, call: Callable[[], T]) -> T:
        """Run a blocking call on the store's worker threads."""
        if self._closed:
            self.sync.check_open()
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._executor, call)

    async def aclose(self) -> None:
        """Wait for calls in flight, then close the store (a TRUNCATE checkpoint on
        SQLite); idempotent."""
        if self._closed:
            return
        self._closed = True
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(None, self._executor.shutdown)
        await loop.run_in_executor(None, self.sync.close)

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
    clear_messages = awaitable(MessageRepository.clear_messages)
    publish_compression_child = awaitable(MessageRepository.publish_compression_child)
    get_messages = awaitable(MessageRepository.get_messages)
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
