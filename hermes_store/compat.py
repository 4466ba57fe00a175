"""`SessionDB`: a drop-in for the original Hermes v23 class, built on the repositories.

Translation only: every public method forwards to one repository method with the same
parameters (the signature and docstring are the repository's), so there is one
implementation of each behaviour. Switching Hermes over is one import:

    from hermes_store.compat import SessionDB

Opening a writable handle adopts and upgrades the file exactly as `hermes-store upgrade`
does; a legacy FTS index is converted and its backfill deferred (search stays correct
meanwhile; `hermes-store fts backfill` finishes it) so that opening never blocks for
minutes. Differences from the original are listed in docs/compat.md.
"""

from __future__ import annotations

import asyncio
import functools
import os
import sqlite3
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from sqlalchemy.engine import URL

from . import migrate
from .config import default_db_path, resolve_url, sqlite_path, sqlite_url
from .engine import wal_reset_vulnerable as is_sqlite_wal_reset_vulnerable
from .engine import write_connection
from .errors import CompressionSessionBusyError, CompressionSessionClosedError, SessionNotFound
from .repositories.coordination import (
    AsyncDelegationRepository,
    CompressionLockRepository,
    GatewayRoutingRepository,
)
from .repositories.maintenance import MaintenanceRepository
from .repositories.messages import MessageRepository
from .repositories.meta import MetaRepository
from .repositories.sessions import SessionRepository
from .repositories.telegram import TelegramTopicRepository
from .repositories.titles import TitleRepository, sanitize_title
from .repositories.usage import UsageRepository
from .search import sanitize_fts5_query, search_messages
from .search.maintenance import backfill_step, optimize_indexes
from .store import Store

__all__ = [
    "AsyncSessionDB",
    "CompressionSessionBusyError",
    "CompressionSessionClosedError",
    "DEFAULT_DB_PATH",
    "SessionDB",
    "get_last_init_error",
    "is_sqlite_wal_reset_vulnerable",
    "workspace_key",
]

DEFAULT_DB_PATH = default_db_path()
MAX_TITLE_LENGTH = 100
_last_init_error: str | None = None


def get_last_init_error() -> str | None:
    """The cause of the last failed open in this process (the original's helper)."""
    return _last_init_error


def format_session_db_unavailable(prefix: str = "Session database not available") -> str:
    cause = _last_init_error
    if not cause:
        return f"{prefix}."
    hint = ""
    if "locking protocol" in cause or "not authorized" in cause:
        hint = " (state.db may be on NFS/SMB/FUSE — see https://www.sqlite.org/wal.html)"
    return f"{prefix}: {cause}{hint}."


def workspace_key(row: dict[str, Any]) -> str | None:
    """`git_repo_root` if non-empty, else `cwd` if non-empty, else None."""
    for key in ("git_repo_root", "cwd"):
        value = row.get(key)
        if value:
            return str(value)
    return None


def _forward(repository: str, cls: type, name: str | None = None) -> Callable[..., Any]:
    """A facade method that calls `self.<repository>.<name>` with the same signature."""

    target = getattr(cls, name or "")
    method_name = target.__name__

    def method(self: SessionDB, *args: Any, **kwargs: Any) -> Any:
        return getattr(getattr(self, repository), method_name)(*args, **kwargs)

    functools.update_wrapper(method, target)
    return method


def _methods(repository: str, cls: type, names: dict[str, str]) -> dict[str, Callable[..., Any]]:
    return {facade: _forward(repository, cls, repo_name) for facade, repo_name in names.items()}


def _same(*names: str) -> dict[str, str]:
    return {n: n for n in names}


class SessionDB:
    """The original's public API on top of hermes-store's repositories."""

    def __init__(
        self,
        db_path: str | os.PathLike[str] | None = None,
        *,
        url: str | URL | None = None,
        read_only: bool = False,
    ) -> None:
        global _last_init_error
        if url is not None:
            resolved = resolve_url(url)
        else:
            resolved = sqlite_url(Path(db_path) if db_path is not None else default_db_path())
        path = sqlite_path(resolved)
        self.db_path = path
        self.read_only = read_only
        try:
            if not read_only:
                if path is not None:
                    path.parent.mkdir(parents=True, exist_ok=True)
                migrate.upgrade(resolved, defer_fts_backfill=True)
            self._store = Store(resolved, read_only=read_only)
        except Exception as exc:
            _last_init_error = f"{type(exc).__name__}: {exc}"
            raise
        store = self._store
        self._usage = UsageRepository(store)
        self._sessions = SessionRepository(store)
        self._titles = TitleRepository(store)
        self._messages = MessageRepository(store)
        self._meta = MetaRepository(store)
        self._locks = CompressionLockRepository(store)
        self._gateway = GatewayRoutingRepository(store)
        self._delegations = AsyncDelegationRepository(store)
        self._maintenance = MaintenanceRepository(store)
        self._telegram = TelegramTopicRepository(store)

    # -- lifecycle -----------------------------------------------------------------------

    def close(self) -> None:
        """TRUNCATE checkpoint and close every connection (idempotent)."""
        self._store.close()

    @property
    def store(self) -> Store:
        return self._store

    # -- helpers that are static in the original ----------------------------------------

    sanitize_title = staticmethod(sanitize_title)
    _sanitize_fts5_query = staticmethod(sanitize_fts5_query)

    # -- search --------------------------------------------------------------------------

    def search_messages(
        self,
        query: str,
        source_filter: list[str] | None = None,
        exclude_sources: list[str] | None = None,
        role_filter: list[str] | None = None,
        limit: int = 20,
        offset: int = 0,
        sort: str | None = None,
        include_inactive: bool = False,
    ) -> list[dict[str, Any]]:
        with self._store.read() as session:
            return search_messages(
                session.connection(),
                query,
                source_filter=source_filter,
                exclude_sources=exclude_sources,
                role_filter=role_filter,
                limit=limit,
                offset=offset,
                sort=sort,
                include_inactive=include_inactive,
            )

    # -- FTS maintenance -------------------------------------------------------------------

    def fts_rebuild_status(self) -> dict[str, Any] | None:
        state = migrate.current(self._store.url).fts
        if state is None or not state.high_water or state.high_water <= 0:
            return None
        return {
            "pending": True,
            "total": state.high_water,
            "indexed": state.progress or 0,
            "percent": state.percent,
        }

    def fts_rebuild_step(self) -> dict[str, Any] | None:
        """One chunk (<= 500 ids) of a pending backfill; the status afterwards, or None."""
        if not self.read_only:
            with write_connection(self._store.engine) as conn:
                self._store.retry.run(lambda: backfill_step(conn))
        return self.fts_rebuild_status()

    def rebuild_fts(self) -> int:
        migrate.rebuild_fts(self._store.url)
        return 2

    def optimize_fts_storage(
        self, progress_cb: Callable[[dict[str, Any]], None] | None = None, vacuum: bool = True
    ) -> dict[str, Any]:
        if self.read_only:
            return {"ok": False, "reason": "read_only"}

        def report(p: Any) -> None:
            if progress_cb is not None:
                progress_cb(
                    {"phase": p.phase, "percent": p.percent, "indexed": p.indexed, "total": p.total}
                )

        migrate.finish_fts(self._store.url, on_progress=report)
        vacuumed: bool | None = None
        if vacuum:
            try:
                with self._store.engine.connect() as conn:
                    conn.connection.driver_connection.execute("VACUUM")  # type: ignore[union-attr]
                vacuumed = True
            except Exception:  # noqa: BLE001 (the original reports instead of raising)
                vacuumed = False
            self._store.checkpoint("TRUNCATE")
        if progress_cb is not None:
            progress_cb({"phase": "done", "percent": 100, "indexed": 0, "total": 0})
        return {"ok": True, "vacuumed": vacuumed}

    # -- small helpers of the original ----------------------------------------------------

    def queue_token_counts(self, session_id: str, **kwargs: Any) -> None:
        """Applied synchronously: the original's background writer thread only exists to
        keep accounting off the agent loop; here one short write does the same job."""
        self._usage.update_token_counts(session_id, **kwargs)

    def flush_token_counts(self, timeout: float = 5.0) -> bool:
        return True  # nothing is ever queued (see queue_token_counts)

    def fts_optimize_available(self) -> bool:
        if self.read_only:
            return False
        state = migrate.current(self._store.url).fts
        return bool(
            state and (state.layout != "v23" or state.backfill_pending or state.trash_tables)
        )

    def logical_size_bytes(self) -> int | None:
        with self._store.read() as session:
            conn = session.connection()
            pages = conn.exec_driver_sql("PRAGMA page_count").scalar()
            size = conn.exec_driver_sql("PRAGMA page_size").scalar()
        return int(pages) * int(size) if pages is not None and size is not None else None

    def vacuum(self) -> int:
        """TRUNCATE checkpoint, then VACUUM (holds the write lock while it runs)."""
        self._store.checkpoint("TRUNCATE")
        with self._store.engine.connect() as conn:
            conn.connection.driver_connection.execute("VACUUM")  # type: ignore[union-attr]
        return 0

    def _throttled(self, key: str, min_interval_hours: float) -> bool:
        """True when `key` records a run less than the interval ago (a value that is not a
        number counts as no prior run, as in the original)."""
        try:
            last = float(self._meta.get_meta(key) or "")
        except ValueError:
            return False
        return time.time() - last < min_interval_hours * 3600

    def maybe_auto_prune_and_vacuum(
        self,
        retention_days: float = 90,
        min_interval_hours: float = 24,
        vacuum: bool = True,
        sessions_dir: str | os.PathLike[str] | None = None,
    ) -> dict[str, Any]:
        """Never raises: {"skipped", "pruned", "vacuumed"} (+ "error")."""
        result: dict[str, Any] = {"skipped": False, "pruned": 0, "vacuumed": False}
        try:
            if self._throttled("last_auto_prune", min_interval_hours):
                result["skipped"] = True
                return result
            result["pruned"] = self._maintenance.prune_sessions(
                older_than_days=retention_days,
                sessions_dir=None if sessions_dir is None else Path(sessions_dir),
            )
            if vacuum and result["pruned"]:
                self.vacuum()
                result["vacuumed"] = True
            self._meta.set_meta("last_auto_prune", str(time.time()))
        except Exception as exc:  # noqa: BLE001 (the original reports instead of raising)
            result["error"] = f"{type(exc).__name__}: {exc}"
        return result

    def maybe_auto_archive(
        self, idle_days: float = 3, min_interval_hours: float = 24, exclude_pinned: bool = True
    ) -> dict[str, Any]:
        """Never raises: {"skipped", "archived"} (+ "error")."""
        result: dict[str, Any] = {"skipped": False, "archived": 0}
        try:
            if self._throttled("last_auto_archive", min_interval_hours):
                result["skipped"] = True
                return result
            result["archived"] = self._maintenance.archive_stale_sessions(
                idle_days, exclude_pinned=exclude_pinned
            )
            self._meta.set_meta("last_auto_archive", str(time.time()))
        except Exception as exc:  # noqa: BLE001
            result["error"] = f"{type(exc).__name__}: {exc}"
        return result

    def optimize_fts(self) -> int:
        """FTS5 'optimize' on both indexes (holds the write lock while it merges)."""
        return optimize_indexes(self._store.engine)

    def export_all(self, source: str | None = None) -> list[dict[str, Any]]:
        """Every session (most recent first) with its active messages, as a list like the
        original; `MaintenanceRepository.export_all` streams instead."""
        return list(self._maintenance.export_all(source=source))

    def __repr__(self) -> str:
        return f"SessionDB({str(self.db_path or self._store.url)!r})"


# The forwarded methods, facade name -> repository method. Attached after the class so
# that each one carries its repository method's signature and docstring.
_FORWARDED: list[tuple[str, type, dict[str, str]]] = [
    (
        "_sessions",
        SessionRepository,
        _same(
            "create_session",
            "ensure_session",
            "end_session",
            "reopen_session",
            "promote_to_session_reset",
            "get_session",
            "resolve_session_id",
            "update_system_prompt",
            "update_session_meta",
            "update_session_model",
            "update_session_runtime_lock",
            "update_session_billing_route",
            "update_session_cwd",
            "backfill_repo_roots",
            "set_session_archived",
            "set_session_pinned",
            "set_expiry_finalized",
            "record_compression_failure_cooldown",
            "get_compression_failure_cooldown",
            "clear_compression_failure_cooldown",
            "get_compression_fallback_streak",
            "set_compression_fallback_streak",
            "get_compression_ineffective_count",
            "set_compression_ineffective_count",
            "get_compression_tip",
            "get_compression_lineage",
            "find_live_compression_child",
            "get_session_delete_targets",
            "get_conversation_root",
            "resolve_resume_session_id",
            "list_sessions_rich",
            "search_sessions",
            "session_count",
            "session_count_by_source",
            "get_session_rich_row",
            "search_sessions_by_id",
            "list_cron_job_runs",
            "distinct_session_cwds",
            "prune_empty_ghost_sessions",
            "finalize_orphaned_compression_sessions",
            "list_skill_scaffolded_sessions",
            "get_first_assistant_text",
        ),
    ),
    (
        "_titles",
        TitleRepository,
        _same(
            "set_session_title",
            "set_auto_title_if_empty",
            "get_session_title",
            "get_session_by_title",
            "resolve_session_by_title",
            "get_next_title_in_lineage",
        ),
    ),
    (
        "_messages",
        MessageRepository,
        _same(
            "replace_messages",
            "archive_and_compact",
            "set_latest_matching_message_display_kind",
            "set_latest_user_api_content",
            "rewind_to_message",
            "restore_rewound",
            "clear_messages",
            "get_messages",
            "get_messages_around",
            "get_anchored_view",
            "list_recent_user_messages",
            "has_archived_messages",
            "has_platform_message_id",
            "message_count",
            "get_messages_as_conversation",
            "publish_compression_child",
            "get_resume_conversations",
            "get_ancestor_display_prefix",
        ),
    ),
    ("_usage", UsageRepository, _same("update_token_counts", "record_auxiliary_usage")),
    ("_meta", MetaRepository, _same("get_meta", "set_meta")),
    (
        "_locks",
        CompressionLockRepository,
        {
            "try_acquire_compression_lock": "try_acquire",
            "refresh_compression_lock": "refresh",
            "release_compression_lock": "release",
            "get_compression_lock_holder": "get_holder",
        },
    ),
    (
        "_gateway",
        GatewayRoutingRepository,
        {
            "save_gateway_routing_entry": "save_entry",
            "replace_gateway_routing_entries": "replace_entries",
            "load_gateway_routing_entries": "load_entries",
            "delete_gateway_routing_entries": "delete_entries",
            **_same(
                "record_gateway_session_peer",
                "list_gateway_sessions",
                "find_session_by_origin",
                "find_latest_gateway_session_for_peer",
                "request_handoff",
                "claim_handoff",
                "complete_handoff",
                "fail_handoff",
                "get_handoff_state",
                "list_pending_handoffs",
            ),
        },
    ),
    (
        "_maintenance",
        MaintenanceRepository,
        _same(
            "export_session",
            "import_sessions",
            "delete_session",
            "delete_sessions",
            "count_empty_sessions",
            "delete_empty_sessions",
            "prune_sessions",
            "list_prune_candidates",
            "archive_stale_sessions",
            "export_session_lineage",
            "delete_session_if_empty",
            "archive_sessions",
        ),
    ),
]


@functools.wraps(MessageRepository.append_message)
def _append_message(self: SessionDB, *args: Any, **kwargs: Any) -> int:
    # The original lets the foreign key speak for an unknown session; callers catch it.
    try:
        return self._messages.append_message(*args, **kwargs)
    except SessionNotFound as exc:
        raise sqlite3.IntegrityError("FOREIGN KEY constraint failed") from exc


SessionDB.append_message = _append_message  # type: ignore[attr-defined]

_FORWARDED.append(
    (
        "_telegram",
        TelegramTopicRepository,
        _same(
            "apply_telegram_topic_migration",
            "enable_telegram_topic_mode",
            "disable_telegram_topic_mode",
            "is_telegram_topic_mode_enabled",
            "get_telegram_topic_binding",
            "list_telegram_topic_bindings_for_chat",
            "get_telegram_topic_binding_by_session",
            "delete_telegram_topic_binding",
            "bind_telegram_topic",
            "is_telegram_session_linked_to_topic",
            "list_unlinked_telegram_sessions_for_user",
        ),
    )
)

for _repository, _cls, _names in _FORWARDED:
    for _facade_name, _method in _methods(_repository, _cls, _names).items():
        setattr(SessionDB, _facade_name, _method)


class AsyncSessionDB:
    """Every callable attribute of the wrapped SessionDB as a coroutine run in a worker
    thread (`asyncio.to_thread`); other attributes pass through."""

    def __init__(self, db: SessionDB) -> None:
        self._db = db

    def __getattr__(self, name: str) -> Any:
        value = getattr(self._db, name)
        if not callable(value):
            return value

        @functools.wraps(value)
        async def call(*args: Any, **kwargs: Any) -> Any:
            return await asyncio.to_thread(value, *args, **kwargs)

        return call
