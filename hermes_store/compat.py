"""`SessionDB`: a drop-in for the original Hermes v23 class, built on the repositories.

Translation only: every public method forwards to one repository method with the same
parameters, so there is one implementation of each behaviour. The forwarded methods are
declared in the class body (`create_session = _forward(SessionRepository.create_session)`,
called on the store's repository that defines it, `store.sessions`): type checkers and
IDEs see each one with its repository's signature, and `inspect.signature` and `help()`
show it too. Switching Hermes over is one import:

    from hermes_store.compat import SessionDB

Opening a writable handle adopts and upgrades the file exactly as `hermes-store upgrade`
does (after moving a zeroed file aside and, once per file and process, repairing a
malformed schema, as the original does); a legacy FTS index is converted and its
backfill deferred (search stays correct meanwhile; `hermes-store fts backfill` finishes
it) so that opening never blocks for minutes.

Hermes's own modules also reach inside the original: `db._conn` (a `sqlite3.Connection`),
`db._lock` and `db._execute_write(fn)`, and the module-level helpers below. On SQLite
they are real; on PostgreSQL they raise `SQLiteOnly`, naming what to use instead.
Differences from the original are listed in docs/compat.md.
"""

from __future__ import annotations

import functools
import logging
import os
import sqlite3
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any, Concatenate, ParamSpec, TypeVar

from sqlalchemy.engine import URL
from sqlalchemy.exc import OperationalError

from . import migrate
from .aio import DEFAULT_WORKERS, WorkerPool
from .config import (
    SCHEMA_VERSION,
    JournalPolicy,
    default_db_path,
    hermes_home,
    resolve_url,
    sqlite_path,
    sqlite_url,
)
from .errors import (
    CompressionSessionBusyError,
    CompressionSessionClosedError,
    DatabaseCorrupt,
    QueryTooComplex,
    SessionNotFound,
    SQLiteOnly,
    StoreClosed,
)
from .repositories.coordination import (
    CompressionLockRepository,
    GatewayRoutingRepository,
)
from .repositories.housekeeping import HousekeepingRepository
from .repositories.maintenance import MaintenanceRepository
from .repositories.messages import MessageRepository
from .repositories.meta import MetaRepository
from .repositories.search import SearchRepository
from .repositories.sessions import SessionRepository
from .repositories.telegram import TelegramTopicRepository
from .repositories.titles import TitleRepository, sanitize_title
from .repositories.usage import UsageRepository
from .repository_set import name_of
from .runtime.engine import apply_journal_mode, check_writable
from .runtime.engine import wal_reset_vulnerable as is_sqlite_wal_reset_vulnerable
from .search import sanitize_fts5_query
from .search.limits import SearchHits
from .sqlite import driver as sqlite_driver
from .sqlite import recovery as sqlite_recovery
from .sqlite.recovery import (
    is_malformed_db_error,
    is_zeroed_state_db,
    quarantine_zeroed_state_db,
    repair_state_db_schema,
)
from .sqlite.recovery import opens_cleanly as _db_opens_cleanly
from .store import Store

__all__ = [
    "AsyncSessionDB",
    "CompressionSessionBusyError",
    "CompressionSessionClosedError",
    "DEFAULT_DB_PATH",
    "_db_opens_cleanly",
    "FTS_STORAGE_VERSION",
    "SCHEMA_VERSION",
    "SessionDB",
    "apply_wal_with_fallback",
    "format_session_db_unavailable",
    "fts5_cjk_so_path",
    "load_fts5_cjk_extension",
    "get_last_init_error",
    "is_malformed_db_error",
    "is_sqlite_wal_reset_vulnerable",
    "is_zeroed_state_db",
    "preflight_db_writability",
    "quarantine_zeroed_state_db",
    "repair_state_db_schema",
    "workspace_key",
]

P = ParamSpec("P")
R = TypeVar("R")
T = TypeVar("T")

#: The default database at import time; a caller may point it elsewhere (Hermes's tests
#: do), and an untouched value follows `$HERMES_HOME` as it is when a handle opens.
DEFAULT_DB_PATH = _IMPORT_DEFAULT_DB_PATH = default_db_path()
MAX_TITLE_LENGTH = 100
#: The FTS layout version a settled v23 index records in `state_meta`.
FTS_STORAGE_VERSION = 1
#: Where the optional CJK tokenizer would be loaded from (hermes-store never loads it).
CJK_SO_ENV = "HERMES_FTS5_CJK_SO"
_last_init_error: str | None = None
#: Files this process already tried to repair at open (one attempt each, no loops).
_repair_attempted_paths: set[str] = set()
_repairs_lock = threading.Lock()

#: What to use instead of the original's SQLite internals, on other backends.
_INSTEAD = {
    "_conn": "the public methods, or SQL through `db.store.read()` (SQLAlchemy)",
    "_lock": "`db.store.write(fn)`, which serialises this process's writes itself",
    "_execute_write": "`db.store.write(fn)` (one transaction, retried on contention)",
}


def get_last_init_error() -> str | None:
    """The cause of the last failed open in this process (the original's helper)."""
    return _last_init_error


def _default_db_path() -> Path:
    if DEFAULT_DB_PATH != _IMPORT_DEFAULT_DB_PATH:
        return Path(DEFAULT_DB_PATH)
    return default_db_path()


def fts5_cjk_so_path() -> Path:
    """Where the original looks for its CJK bigram tokenizer (docs/reference/schema.md 5.4)."""
    configured = os.environ.get(CJK_SO_ENV)
    return Path(configured) if configured else hermes_home() / "lib" / "libfts5_cjk.so"


def load_fts5_cjk_extension(conn: sqlite3.Connection) -> bool:
    """Always False: hermes-store serves CJK queries from the trigram index and the LIKE
    scan, exactly as the original does without the tokenizer, and never loads it."""
    return False


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


def apply_wal_with_fallback(conn: sqlite3.Connection, *, db_label: str = "state.db") -> str:
    """WAL, or DELETE where the file system cannot do WAL; never downgrades a WAL file.
    Returns the mode in force ("wal" or "delete")."""
    return apply_journal_mode(conn, JournalPolicy(mode="wal"))


def preflight_db_writability(
    db_path: str | os.PathLike[str], *, db_label: str = "state.db"
) -> None:
    """Raise DatabaseNotWritable naming the path when the file or its directory cannot be
    written (`:memory:` and `file:` URIs are not files and are skipped)."""
    if str(db_path) == ":memory:" or str(db_path).startswith("file:"):
        return
    check_writable(Path(db_path))


log = logging.getLogger(__name__)


def _forward(
    method: Callable[Concatenate[Any, P], R],
    *,
    translate: Callable[[Exception], BaseException | None] | None = None,
    refused: tuple[type[Exception], Callable[[], R]] | None = None,
    on_result: Callable[[R], None] | None = None,
) -> Callable[Concatenate[SessionDB, P], R]:
    """A facade method calling `method` on the store's repository that defines it
    (`store.<name>`, from the declaration in repository_set.py), with its signature and
    docstring; `translate` turns a repository error into the one the original raises
    (None keeps the error as it is); `refused` is an error type the original never raises
    there and the answer it gives instead (logged as a warning); `on_result` sees each
    answer before it is returned."""
    repository = name_of(method)

    def call(self: SessionDB, /, *args: P.args, **kwargs: P.kwargs) -> R:
        try:
            result = method(getattr(self._store, repository), *args, **kwargs)
        except Exception as exc:
            if refused is not None and isinstance(exc, refused[0]):
                log.warning("%s: %s", method.__name__, exc)
                return refused[1]()
            translated = translate(exc) if translate is not None else None
            if translated is None:
                raise
            raise translated from exc
        if on_result is not None:
            on_result(result)
        return result

    functools.update_wrapper(call, method)
    call.__dict__["_hermes_forward"] = True
    return call


def _log_search_warnings(hits: SearchHits) -> None:
    for warning in hits.warnings:
        log.warning("search_messages: %s", warning)


def _foreign_key_error(exc: Exception) -> BaseException | None:
    # The original lets the foreign key speak for an unknown session; callers catch it.
    if isinstance(exc, SessionNotFound):
        return sqlite3.IntegrityError("FOREIGN KEY constraint failed")
    return None


def _malformed_schema(exc: BaseException) -> bool:
    """Whether an open failed on a malformed schema (the error, or its cause). Only that
    class is repaired at open: other damage ("database disk image is malformed", a failed
    quick_check) fails closed and leaves the file untouched, for `hermes-store check` and
    a restore."""
    seen: BaseException | None = exc
    while seen is not None:
        if "malformed database schema" in str(getattr(seen, "orig", None) or seen).lower():
            return True
        seen = seen.__cause__
    return False


def _claim_repair(path: Path) -> bool:
    """The one repair attempt per file and process (no repair loops)."""
    key = os.path.realpath(path)
    with _repairs_lock:
        if key in _repair_attempted_paths:
            return False
        _repair_attempted_paths.add(key)
        return True


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
            resolved = sqlite_url(Path(db_path) if db_path is not None else _default_db_path())
        path = sqlite_path(resolved)
        self.db_path = path
        self.read_only = read_only
        # `_conn` and the pool's proxy holding it, opened on first use
        self._raw: tuple[Any, sqlite3.Connection] | None = None
        self._raw_guard = threading.Lock()
        self._closed = False
        try:
            if not read_only:
                if path is not None:
                    path.parent.mkdir(parents=True, exist_ok=True)
                    self._quarantine_if_zeroed(path)
                self._upgrade(resolved, path)
            self._store = Store(resolved, read_only=read_only)
        except Exception as exc:
            _last_init_error = f"{type(exc).__name__}: {exc}"
            raise
        if path is not None:
            sqlite_recovery.hold(path)

    @staticmethod
    def _quarantine_if_zeroed(path: Path) -> None:
        """Step 3 of the original's open: a zeroed file is moved aside (keeping its bytes)
        and a fresh database created in its place; the explanation is recorded for
        `get_last_init_error()`."""
        global _last_init_error
        if not is_zeroed_state_db(path):
            return
        try:
            moved = quarantine_zeroed_state_db(path)
        except OSError as exc:
            raise DatabaseCorrupt(
                str(path), f"the file is zeroed (all NUL bytes) and could not be moved aside: {exc}"
            ) from exc
        if moved is not None:
            _last_init_error = (
                f"DatabaseCorrupt: {path} was zeroed (its header held only NUL bytes); it was "
                f"moved to {moved} and a fresh database was created"
            )

    @staticmethod
    def _upgrade(resolved: URL, path: Path | None) -> None:
        try:
            migrate.upgrade(resolved, defer_fts_backfill=True)
        except Exception as exc:
            if path is None or not _malformed_schema(exc) or not _claim_repair(path):
                raise
            if not repair_state_db_schema(path)["repaired"]:
                raise
            migrate.upgrade(resolved, defer_fts_backfill=True)

    # -- lifecycle -----------------------------------------------------------------------

    def close(self) -> None:
        """TRUNCATE checkpoint and close every connection, `_conn` included (idempotent)."""
        with self._raw_guard:
            if self._closed:
                return
            self._closed = True
            raw, self._raw = self._raw, None
        if raw is not None:
            raw[0].close()
        self._store.close()
        if self.db_path is not None:
            sqlite_recovery.release(self.db_path)

    @property
    def store(self) -> Store:
        return self._store

    # -- the original's internals ---------------------------------------------------------

    def _sqlite_only(self, feature: str) -> None:
        if not self._store.dialect.in_process:
            raise SQLiteOnly(f"SessionDB.{feature}", _INSTEAD[feature])

    @property
    def _conn(self) -> sqlite3.Connection | None:
        """A `sqlite3.Connection` to the same file, set up as the original sets up its own:
        `check_same_thread=False`, `sqlite3.Row` rows, autocommit with explicit
        transactions (`BEGIN IMMEDIATE` ... `COMMIT`), the store's journal mode, busy
        timeout and pragmas. Read-only for a read-only handle; None after `close()`."""
        self._sqlite_only("_conn")
        with self._raw_guard:
            if self._closed:
                return None
            if self._raw is None:
                raw = self._store.engine.raw_connection()
                driver = raw.driver_connection
                assert isinstance(driver, sqlite_driver.Connection)
                # never back into the pool: its row factory is the original's, not ours
                raw.detach()
                # the Row type of the driver that made the connection (pysqlite3's rows
                # cannot be built from another module's cursor)
                driver.row_factory = sqlite_driver.module_of(driver).Row
                self._raw = (raw, driver)
            return self._raw[1]

    @property
    def _lock(self) -> threading.Lock:
        """The lock this process's writes through this handle hold (the store's)."""
        self._sqlite_only("_lock")
        return self._store.write_lock

    def _execute_write(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        """Run `fn(self._conn)` in one BEGIN IMMEDIATE transaction under `_lock`, committed
        on return and rolled back on any error, retried whole (so `fn` may run again) on
        lock contention by the store's retry policy; returns what `fn` returns."""
        self._sqlite_only("_execute_write")
        conn = self._conn
        if conn is None:
            raise sqlite3.ProgrammingError("Cannot operate on a closed database.")

        def attempt() -> T:
            with self._store.write_lock:
                try:
                    conn.execute("BEGIN IMMEDIATE")
                    try:
                        result = fn(conn)
                        conn.commit()  # a no-op when `fn` committed itself
                    except BaseException:
                        conn.rollback()
                        raise
                except sqlite_driver.OperationalError as exc:
                    # in SQLAlchemy's wrapper, which is what the retry policy inspects
                    raise OperationalError(None, None, exc) from exc
            return result

        try:
            return self._store.retry.run(attempt)
        except OperationalError as exc:
            if isinstance(exc.orig, sqlite_driver.OperationalError):
                raise exc.orig from None
            raise

    # -- helpers that are static in the original ----------------------------------------

    sanitize_title = staticmethod(sanitize_title)
    _sanitize_fts5_query = staticmethod(sanitize_fts5_query)

    # -- search --------------------------------------------------------------------------

    # docs/reference/behaviour.md 6.2: the facade's search never raises on any input, so a query
    # beyond the search bounds (search/limits.py) finds nothing, as an unreadable one does
    # and a search that could not check every candidate says so in the log (the hits'
    # `warnings`), as the facade logs what it refuses
    search_messages = _forward(
        SearchRepository.search_messages,
        refused=(QueryTooComplex, SearchHits),
        on_result=_log_search_warnings,
    )

    # -- small helpers of the original ----------------------------------------------------

    # Applied synchronously: the original's background writer thread only exists to keep
    # accounting off the agent loop; here one short write does the same job.
    queue_token_counts = _forward(UsageRepository.update_token_counts)

    def flush_token_counts(self, timeout: float = 5.0) -> bool:
        return True  # nothing is ever queued (see queue_token_counts)

    def export_all(self, source: str | None = None) -> list[dict[str, Any]]:
        """Every session (most recent first) with its active messages, as a list like the
        original; `MaintenanceRepository.export_all` streams instead."""
        return list(self._store.maintenance.export_all(source=source))

    def __repr__(self) -> str:
        return f"SessionDB({str(self.db_path or self._store.url)!r})"

    # -- forwarded: sessions ----------------------------------------------------------------

    create_session = _forward(SessionRepository.create_session)
    ensure_session = _forward(SessionRepository.ensure_session)
    end_session = _forward(SessionRepository.end_session)
    reopen_session = _forward(SessionRepository.reopen_session)
    promote_to_session_reset = _forward(SessionRepository.promote_to_session_reset)
    get_session = _forward(SessionRepository.get_session)
    resolve_session_id = _forward(SessionRepository.resolve_session_id)
    update_system_prompt = _forward(SessionRepository.update_system_prompt)
    update_session_meta = _forward(SessionRepository.update_session_meta)
    update_session_model = _forward(SessionRepository.update_session_model)
    update_session_runtime_lock = _forward(SessionRepository.update_session_runtime_lock)
    update_session_billing_route = _forward(SessionRepository.update_session_billing_route)
    update_session_cwd = _forward(SessionRepository.update_session_cwd)
    backfill_repo_roots = _forward(SessionRepository.backfill_repo_roots)
    set_session_archived = _forward(SessionRepository.set_session_archived)
    set_session_pinned = _forward(SessionRepository.set_session_pinned)
    set_expiry_finalized = _forward(SessionRepository.set_expiry_finalized)
    record_compression_failure_cooldown = _forward(
        SessionRepository.record_compression_failure_cooldown
    )
    get_compression_failure_cooldown = _forward(SessionRepository.get_compression_failure_cooldown)
    clear_compression_failure_cooldown = _forward(
        SessionRepository.clear_compression_failure_cooldown
    )
    get_compression_fallback_streak = _forward(SessionRepository.get_compression_fallback_streak)
    set_compression_fallback_streak = _forward(SessionRepository.set_compression_fallback_streak)
    get_compression_ineffective_count = _forward(
        SessionRepository.get_compression_ineffective_count
    )
    set_compression_ineffective_count = _forward(
        SessionRepository.set_compression_ineffective_count
    )
    get_compression_tip = _forward(SessionRepository.get_compression_tip)
    get_compression_lineage = _forward(SessionRepository.get_compression_lineage)
    find_live_compression_child = _forward(SessionRepository.find_live_compression_child)
    get_session_delete_targets = _forward(SessionRepository.get_session_delete_targets)
    get_conversation_root = _forward(SessionRepository.get_conversation_root)
    resolve_resume_session_id = _forward(SessionRepository.resolve_resume_session_id)
    list_sessions_rich = _forward(SessionRepository.list_sessions_rich)
    search_sessions = _forward(SessionRepository.search_sessions)
    search_sessions_by_id = _forward(SessionRepository.search_sessions_by_id)
    session_count = _forward(SessionRepository.session_count)
    session_count_by_source = _forward(SessionRepository.session_count_by_source)
    get_session_rich_row = _forward(SessionRepository.get_session_rich_row)
    list_cron_job_runs = _forward(SessionRepository.list_cron_job_runs)
    distinct_session_cwds = _forward(SessionRepository.distinct_session_cwds)
    prune_empty_ghost_sessions = _forward(SessionRepository.prune_empty_ghost_sessions)
    finalize_orphaned_compression_sessions = _forward(
        SessionRepository.finalize_orphaned_compression_sessions
    )
    list_skill_scaffolded_sessions = _forward(SessionRepository.list_skill_scaffolded_sessions)
    get_first_assistant_text = _forward(SessionRepository.get_first_assistant_text)

    # -- forwarded: titles -------------------------------------------------------------------

    set_session_title = _forward(TitleRepository.set_session_title)
    set_auto_title_if_empty = _forward(TitleRepository.set_auto_title_if_empty)
    get_session_title = _forward(TitleRepository.get_session_title)
    get_session_by_title = _forward(TitleRepository.get_session_by_title)
    resolve_session_by_title = _forward(TitleRepository.resolve_session_by_title)
    get_next_title_in_lineage = _forward(TitleRepository.get_next_title_in_lineage)

    # -- forwarded: messages -----------------------------------------------------------------

    append_message = _forward(MessageRepository.append_message, translate=_foreign_key_error)
    replace_messages = _forward(MessageRepository.replace_messages)
    archive_and_compact = _forward(MessageRepository.archive_and_compact)
    set_latest_matching_message_display_kind = _forward(
        MessageRepository.set_latest_matching_message_display_kind
    )
    set_latest_user_api_content = _forward(MessageRepository.set_latest_user_api_content)
    rewind_to_message = _forward(MessageRepository.rewind_to_message)
    restore_rewound = _forward(MessageRepository.restore_rewound)
    clear_messages = _forward(MessageRepository.clear_messages)
    get_messages = _forward(MessageRepository.get_messages)
    get_messages_around = _forward(MessageRepository.get_messages_around)
    get_anchored_view = _forward(MessageRepository.get_anchored_view)
    list_recent_user_messages = _forward(MessageRepository.list_recent_user_messages)
    has_archived_messages = _forward(MessageRepository.has_archived_messages)
    has_platform_message_id = _forward(MessageRepository.has_platform_message_id)
    message_count = _forward(MessageRepository.message_count)
    get_messages_as_conversation = _forward(MessageRepository.get_messages_as_conversation)
    publish_compression_child = _forward(MessageRepository.publish_compression_child)
    get_resume_conversations = _forward(MessageRepository.get_resume_conversations)
    get_ancestor_display_prefix = _forward(MessageRepository.get_ancestor_display_prefix)

    # -- forwarded: usage and meta -----------------------------------------------------------

    update_token_counts = _forward(UsageRepository.update_token_counts)
    record_auxiliary_usage = _forward(UsageRepository.record_auxiliary_usage)
    get_meta = _forward(MetaRepository.get_meta)
    set_meta = _forward(MetaRepository.set_meta)

    # -- forwarded: compression locks, gateway routing and handoffs ---------------------------

    try_acquire_compression_lock = _forward(CompressionLockRepository.try_acquire)
    refresh_compression_lock = _forward(CompressionLockRepository.refresh)
    release_compression_lock = _forward(CompressionLockRepository.release)
    get_compression_lock_holder = _forward(CompressionLockRepository.get_holder)
    save_gateway_routing_entry = _forward(GatewayRoutingRepository.save_entry)
    replace_gateway_routing_entries = _forward(GatewayRoutingRepository.replace_entries)
    load_gateway_routing_entries = _forward(GatewayRoutingRepository.load_entries)
    delete_gateway_routing_entries = _forward(GatewayRoutingRepository.delete_entries)
    record_gateway_session_peer = _forward(GatewayRoutingRepository.record_gateway_session_peer)
    list_gateway_sessions = _forward(GatewayRoutingRepository.list_gateway_sessions)
    find_session_by_origin = _forward(GatewayRoutingRepository.find_session_by_origin)
    find_latest_gateway_session_for_peer = _forward(
        GatewayRoutingRepository.find_latest_gateway_session_for_peer
    )
    request_handoff = _forward(GatewayRoutingRepository.request_handoff)
    claim_handoff = _forward(GatewayRoutingRepository.claim_handoff)
    complete_handoff = _forward(GatewayRoutingRepository.complete_handoff)
    fail_handoff = _forward(GatewayRoutingRepository.fail_handoff)
    get_handoff_state = _forward(GatewayRoutingRepository.get_handoff_state)
    list_pending_handoffs = _forward(GatewayRoutingRepository.list_pending_handoffs)

    # -- forwarded: export, import, delete, prune, archive -----------------------------------

    export_session = _forward(MaintenanceRepository.export_session)
    export_session_lineage = _forward(MaintenanceRepository.export_session_lineage)
    import_sessions = _forward(MaintenanceRepository.import_sessions)
    delete_session = _forward(MaintenanceRepository.delete_session)
    delete_sessions = _forward(MaintenanceRepository.delete_sessions)
    delete_session_if_empty = _forward(MaintenanceRepository.delete_session_if_empty)
    count_empty_sessions = _forward(MaintenanceRepository.count_empty_sessions)
    delete_empty_sessions = _forward(MaintenanceRepository.delete_empty_sessions)

    prune_sessions = _forward(MaintenanceRepository.prune_sessions)
    list_prune_candidates = _forward(MaintenanceRepository.list_prune_candidates)
    archive_sessions = _forward(MaintenanceRepository.archive_sessions)

    archive_stale_sessions = _forward(MaintenanceRepository.archive_stale_sessions)

    # -- forwarded: housekeeping (search index upkeep, size, VACUUM, auto-prune) ---------------

    fts_rebuild_status = _forward(HousekeepingRepository.fts_rebuild_status)
    fts_rebuild_step = _forward(HousekeepingRepository.fts_rebuild_step)
    fts_cjk_rebuild_status = _forward(HousekeepingRepository.fts_cjk_rebuild_status)
    fts_cjk_rebuild_step = _forward(HousekeepingRepository.fts_cjk_rebuild_step)
    fts_optimize_available = _forward(HousekeepingRepository.fts_optimize_available)
    rebuild_fts = _forward(HousekeepingRepository.rebuild_fts)
    optimize_fts = _forward(HousekeepingRepository.optimize_fts)
    optimize_fts_storage = _forward(HousekeepingRepository.optimize_fts_storage)
    logical_size_bytes = _forward(HousekeepingRepository.logical_size_bytes)
    vacuum = _forward(HousekeepingRepository.vacuum)
    maybe_auto_prune_and_vacuum = _forward(HousekeepingRepository.maybe_auto_prune_and_vacuum)
    maybe_auto_archive = _forward(HousekeepingRepository.maybe_auto_archive)

    # -- forwarded: Telegram topic mode ------------------------------------------------------

    apply_telegram_topic_migration = _forward(
        TelegramTopicRepository.apply_telegram_topic_migration
    )
    enable_telegram_topic_mode = _forward(TelegramTopicRepository.enable_telegram_topic_mode)
    disable_telegram_topic_mode = _forward(TelegramTopicRepository.disable_telegram_topic_mode)
    is_telegram_topic_mode_enabled = _forward(
        TelegramTopicRepository.is_telegram_topic_mode_enabled
    )
    get_telegram_topic_binding = _forward(TelegramTopicRepository.get_telegram_topic_binding)
    list_telegram_topic_bindings_for_chat = _forward(
        TelegramTopicRepository.list_telegram_topic_bindings_for_chat
    )
    get_telegram_topic_binding_by_session = _forward(
        TelegramTopicRepository.get_telegram_topic_binding_by_session
    )
    delete_telegram_topic_binding = _forward(TelegramTopicRepository.delete_telegram_topic_binding)
    bind_telegram_topic = _forward(TelegramTopicRepository.bind_telegram_topic)
    is_telegram_session_linked_to_topic = _forward(
        TelegramTopicRepository.is_telegram_session_linked_to_topic
    )
    list_unlinked_telegram_sessions_for_user = _forward(
        TelegramTopicRepository.list_unlinked_telegram_sessions_for_user
    )


# A forwarded method is named after its facade attribute (the repository's may differ).
for _name, _value in vars(SessionDB).items():
    if getattr(_value, "_hermes_forward", False):
        _value.__name__ = _name
        _value.__qualname__ = f"SessionDB.{_name}"


class AsyncSessionDB:
    """Every callable attribute of the wrapped SessionDB as a coroutine run on worker
    threads of its own (`aio.WorkerPool`, as an AsyncStore runs its calls: never the event
    loop's default executor, which the application may need for other work); other
    attributes pass through. Calling `close()` through it also ends its workers once the
    calls already made are done.

    Args:
        db: the SessionDB whose methods are offered as coroutines.
        workers: at most this many calls run at once.
    """

    def __init__(self, db: SessionDB, workers: int = DEFAULT_WORKERS) -> None:
        self._db = db
        self._pool = WorkerPool(workers, "hermes-store-compat")

    def _closed(self) -> StoreClosed:
        return StoreClosed("this AsyncSessionDB was closed")

    def __getattr__(self, name: str) -> Any:
        value = getattr(self._db, name)
        if not callable(value):
            return value
        pool = self._pool

        @functools.wraps(value)
        async def call(*args: Any, **kwargs: Any) -> Any:
            try:
                return await pool.submit(functools.partial(value, *args, **kwargs), self._closed)
            finally:
                if name == "close":
                    pool.close()

        return call
