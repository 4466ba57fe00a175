"""The asyncio face of each repository: `AsyncStore`'s repositories, whose methods are
the synchronous repositories' methods as coroutines with the same parameters and typed
results, run on the AsyncStore's worker threads (on the Store's own repository,
`store.sync.<name>`).

Generated from the declaration in hermes_store/repository_set.py by
`python -m hermes_store._generate`: do not edit by hand (a test regenerates it and fails
when it differs).
"""

from __future__ import annotations

from .repositories.changes import ChangeFeed
from .repositories.coordination import (
    AsyncDelegationRepository,
    CompressionLockRepository,
    GatewayRoutingRepository,
)
from .repositories.housekeeping import HousekeepingRepository
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
from .repository_set import AsyncRepository, awaitable, repository

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
    "AsyncTags",
    "AsyncTelegramTopics",
    "AsyncTitles",
    "AsyncTrash",
    "AsyncTurns",
    "AsyncUsage",
]


class AsyncSessions(AsyncRepository[SessionRepository]):
    """`SessionRepository`'s methods as coroutines."""

    _name = "sessions"
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


class AsyncTitles(AsyncRepository[TitleRepository]):
    """`TitleRepository`'s methods as coroutines."""

    _name = "titles"
    set_session_title = awaitable(TitleRepository.set_session_title)
    set_auto_title_if_empty = awaitable(TitleRepository.set_auto_title_if_empty)
    get_session_title = awaitable(TitleRepository.get_session_title)
    get_session_by_title = awaitable(TitleRepository.get_session_by_title)
    resolve_session_by_title = awaitable(TitleRepository.resolve_session_by_title)
    get_next_title_in_lineage = awaitable(TitleRepository.get_next_title_in_lineage)


class AsyncMessages(AsyncRepository[MessageRepository]):
    """`MessageRepository`'s methods as coroutines."""

    _name = "messages"
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


class AsyncUsage(AsyncRepository[UsageRepository]):
    """`UsageRepository`'s methods as coroutines."""

    _name = "usage"
    update_token_counts = awaitable(UsageRepository.update_token_counts)
    record_auxiliary_usage = awaitable(UsageRepository.record_auxiliary_usage)
    usage_by_model = awaitable(UsageRepository.usage_by_model)
    usage_by_day = awaitable(UsageRepository.usage_by_day)
    usage_by_model_and_day = awaitable(UsageRepository.usage_by_model_and_day)
    message_activity_by_day = awaitable(UsageRepository.message_activity_by_day)


class AsyncMeta(AsyncRepository[MetaRepository]):
    """`MetaRepository`'s methods as coroutines."""

    _name = "meta"
    get_meta = awaitable(MetaRepository.get_meta)
    set_meta = awaitable(MetaRepository.set_meta)
    delete_meta = awaitable(MetaRepository.delete_meta)
    list_meta_prefix = awaitable(MetaRepository.list_meta_prefix)


class AsyncSearch(AsyncRepository[SearchRepository]):
    """`SearchRepository`'s methods as coroutines."""

    _name = "search"
    search_messages = awaitable(SearchRepository.search_messages)


class AsyncMaintenance(AsyncRepository[MaintenanceRepository]):
    """`MaintenanceRepository`'s methods as coroutines."""

    _name = "maintenance"
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


class AsyncHousekeeping(AsyncRepository[HousekeepingRepository]):
    """`HousekeepingRepository`'s methods as coroutines."""

    _name = "housekeeping"
    fts_rebuild_status = awaitable(HousekeepingRepository.fts_rebuild_status)
    fts_rebuild_step = awaitable(HousekeepingRepository.fts_rebuild_step)
    fts_cjk_rebuild_status = awaitable(HousekeepingRepository.fts_cjk_rebuild_status)
    fts_cjk_rebuild_step = awaitable(HousekeepingRepository.fts_cjk_rebuild_step)
    fts_optimize_available = awaitable(HousekeepingRepository.fts_optimize_available)
    rebuild_fts = awaitable(HousekeepingRepository.rebuild_fts)
    optimize_fts = awaitable(HousekeepingRepository.optimize_fts)
    optimize_fts_storage = awaitable(HousekeepingRepository.optimize_fts_storage)
    logical_size_bytes = awaitable(HousekeepingRepository.logical_size_bytes)
    vacuum = awaitable(HousekeepingRepository.vacuum)
    maybe_auto_prune_and_vacuum = awaitable(HousekeepingRepository.maybe_auto_prune_and_vacuum)
    maybe_auto_archive = awaitable(HousekeepingRepository.maybe_auto_archive)


class AsyncCompressionLocks(AsyncRepository[CompressionLockRepository]):
    """`CompressionLockRepository`'s methods as coroutines."""

    _name = "compression_locks"
    try_acquire = awaitable(CompressionLockRepository.try_acquire)
    refresh = awaitable(CompressionLockRepository.refresh)
    release = awaitable(CompressionLockRepository.release)
    get_holder = awaitable(CompressionLockRepository.get_holder)


class AsyncGatewayRouting(AsyncRepository[GatewayRoutingRepository]):
    """`GatewayRoutingRepository`'s methods as coroutines."""

    _name = "gateway_routing"
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


class AsyncDelegations(AsyncRepository[AsyncDelegationRepository]):
    """`AsyncDelegationRepository`'s methods as coroutines."""

    _name = "delegations"
    get = awaitable(AsyncDelegationRepository.get)
    list_by_state = awaitable(AsyncDelegationRepository.list_by_state)
    count_by_state = awaitable(AsyncDelegationRepository.count_by_state)


class AsyncTelegramTopics(AsyncRepository[TelegramTopicRepository]):
    """`TelegramTopicRepository`'s methods as coroutines."""

    _name = "telegram_topics"
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


class AsyncChangeFeed(AsyncRepository[ChangeFeed]):
    """`ChangeFeed`'s methods as coroutines."""

    _name = "feed"
    changes = awaitable(ChangeFeed.changes)
    latest = awaitable(ChangeFeed.latest)
    oldest_cursor = awaitable(ChangeFeed.oldest_cursor)
    trim = awaitable(ChangeFeed.trim)
    set_retention = awaitable(ChangeFeed.set_retention)


class AsyncTurns(AsyncRepository[TurnRepository]):
    """`TurnRepository`'s methods as coroutines."""

    _name = "turns"
    acquire_turn = awaitable(TurnRepository.acquire_turn)
    renew_turn = awaitable(TurnRepository.renew_turn)
    release_turn = awaitable(TurnRepository.release_turn)
    current_turn = awaitable(TurnRepository.current_turn)


class AsyncTrash(AsyncRepository[TrashRepository]):
    """`TrashRepository`'s methods as coroutines."""

    _name = "trash"
    trash_session = awaitable(TrashRepository.trash_session)
    restore_session = awaitable(TrashRepository.restore_session)
    list_trash = awaitable(TrashRepository.list_trash)
    empty_trash = awaitable(TrashRepository.empty_trash)
    trash_size = awaitable(TrashRepository.trash_size)


class AsyncTags(AsyncRepository[TagRepository]):
    """`TagRepository`'s methods as coroutines."""

    _name = "tags"
    add_tags = awaitable(TagRepository.add_tags)
    remove_tags = awaitable(TagRepository.remove_tags)
    set_tags = awaitable(TagRepository.set_tags)
    get_tags = awaitable(TagRepository.get_tags)
    list_tags = awaitable(TagRepository.list_tags)
    sessions_with_tag = awaitable(TagRepository.sessions_with_tag)


class AsyncRedaction(AsyncRepository[RedactionRepository]):
    """`RedactionRepository`'s methods as coroutines."""

    _name = "redactor"
    redaction_cursor = awaitable(RedactionRepository.redaction_cursor)
    redact_stored = awaitable(RedactionRepository.redact_stored)


class AsyncSpace(AsyncRepository[SpaceRepository]):
    """`SpaceRepository`'s methods as coroutines."""

    _name = "space"
    space_report = awaitable(SpaceRepository.space_report)


class AsyncRepositories:
    """The repositories of an `AsyncStore`, each built on first use: the `Store`'s
    (`Repositories`), with their methods as coroutines."""

    sessions = repository(AsyncSessions)
    """`SessionRepository`'s methods as coroutines (`AsyncSessions`)."""
    titles = repository(AsyncTitles)
    """`TitleRepository`'s methods as coroutines (`AsyncTitles`)."""
    messages = repository(AsyncMessages)
    """`MessageRepository`'s methods as coroutines (`AsyncMessages`)."""
    usage = repository(AsyncUsage)
    """`UsageRepository`'s methods as coroutines (`AsyncUsage`)."""
    meta = repository(AsyncMeta)
    """`MetaRepository`'s methods as coroutines (`AsyncMeta`)."""
    search = repository(AsyncSearch)
    """`SearchRepository`'s methods as coroutines (`AsyncSearch`)."""
    maintenance = repository(AsyncMaintenance)
    """`MaintenanceRepository`'s methods as coroutines (`AsyncMaintenance`)."""
    housekeeping = repository(AsyncHousekeeping)
    """`HousekeepingRepository`'s methods as coroutines (`AsyncHousekeeping`)."""
    compression_locks = repository(AsyncCompressionLocks)
    """`CompressionLockRepository`'s methods as coroutines (`AsyncCompressionLocks`)."""
    gateway_routing = repository(AsyncGatewayRouting)
    """`GatewayRoutingRepository`'s methods as coroutines (`AsyncGatewayRouting`)."""
    delegations = repository(AsyncDelegations)
    """`AsyncDelegationRepository`'s methods as coroutines (`AsyncDelegations`)."""
    telegram_topics = repository(AsyncTelegramTopics)
    """`TelegramTopicRepository`'s methods as coroutines (`AsyncTelegramTopics`)."""
    feed = repository(AsyncChangeFeed)
    """`ChangeFeed`'s methods as coroutines (`AsyncChangeFeed`)."""
    turns = repository(AsyncTurns)
    """`TurnRepository`'s methods as coroutines (`AsyncTurns`)."""
    trash = repository(AsyncTrash)
    """`TrashRepository`'s methods as coroutines (`AsyncTrash`)."""
    tags = repository(AsyncTags)
    """`TagRepository`'s methods as coroutines (`AsyncTags`)."""
    redaction = repository(AsyncRedaction)
    """`RedactionRepository`'s methods as coroutines (`AsyncRedaction`)."""
    space = repository(AsyncSpace)
    """`SpaceRepository`'s methods as coroutines (`AsyncSpace`)."""
