"""Upgrading, inspecting and checking a database: the Alembic configuration built in code
(so it works from an installed wheel), adoption of files the original wrote, and the
post-migration FTS backfill."""

from __future__ import annotations

import functools
import importlib.util
import logging
import os
import random
import sqlite3
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, nullcontext, suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from alembic import command
from alembic.autogenerate import produce_migrations
from alembic.config import Config
from alembic.migration import MigrationContext
from alembic.operations import ops
from alembic.script import ScriptDirectory
from sqlalchemy import Connection, Engine, create_engine, func, inspect, select, table, text
from sqlalchemy.engine import URL
from sqlalchemy.exc import DBAPIError
from sqlalchemy.pool import NullPool

from .config import (
    SCHEMA_VERSION,
    JournalPolicy,
    hermes_home,
    resolve_url,
    shown_url,
    sqlite_path,
    where,
)
from .contract import (
    FTS_REBUILT_LATER_ATTR,
    HERMES_HOME_ATTR,
    MESSAGES_SESSION_ID_INDEX,
    OWN_TABLE_PREFIX,
    PG_SEARCH_COLUMNS,
    PG_SEARCH_INDEXES,
)
from .contract import PG_MIGRATION_LOCK as PG_MIGRATION_LOCK
from .contract import VERSION_TABLE as VERSION_TABLE
from .errors import (
    DatabaseCorrupt,
    NotAtHead,
    StorageFull,
    StoreError,
)
from .migration import adoption
from .migration.head import HEAD_REVISION, UPSTREAM_HEAD_REVISION
from .migration.read_only import (
    explained_connection_errors,
    judge_for_reading,
    place_of,
    read_only_engine,
    reading_engine,
    refuse_missing_file,
    require_readable,
    too_new_error,
    upgrade_command,
)
from .models import metadata
from .runtime.backends import dialect_for
from .runtime.engine import (
    check_writable,
    journal_choice,
    make_engine,
    unlock_on_connect,
    write_connection,
)
from .runtime.retry import RetryPolicy
from .runtime.waiting import (
    DEFAULT_WAIT_S,
    WAIT_REPORT_EVERY_S,
    LockWaiter,
    WaitCallback,
    WaitingRetry,
    pg_lock_holders,
    sqlite_lock_holders,
)
from .search import maintenance
from .search.layout import FTSState, fts_state
from .sqlite import driver as sqlite_driver
from .sqlite.damage import classify, quick_check, sqlite_error
from .sqlite.file import not_a_database_error, refuse_directory

log = logging.getLogger(__name__)

#: Opening waits out other processes' locks for this long, as the original's later builds
#: do (docs/reference/behaviour.md 16.2), instead of failing after one busy timeout.
OPEN_RETRY = RetryPolicy(budget_seconds=20.0)

#: The project's head: the upstream chain 0001..0023, then its own revisions.
HEAD = HEAD_REVISION

#: Config attributes a run shares with its caller: the shape the migration found once it
#: held the lock (what this process then did), and the LockWaiter for the PostgreSQL
#: migration lock.
LOCKED_SHAPE_ATTR = "hermes_locked_shape"
LOCK_WAITER_ATTR = "hermes_lock_waiter"


def script_location() -> str:
    """The migrations shipped in the wheel, or the checkout's top-level `migrations/`."""
    spec = importlib.util.find_spec("hermes_store._migrations")
    if spec is not None and spec.submodule_search_locations:
        return str(next(iter(spec.submodule_search_locations)))
    return str(Path(__file__).resolve().parent.parent / "migrations")


def make_config(connection: Connection | None = None, *, command_name: str = "") -> Config:
    cfg = Config()
    cfg.set_main_option("script_location", script_location())
    cfg.attributes["connection"] = connection
    cfg.attributes["hermes_command"] = command_name
    return cfg


# PG_SEARCH_COLUMNS / PG_SEARCH_INDEXES: what PostgreSQL has beyond the models, the
# search machinery that stands in for the FTS5 tables on SQLite. Exactly these names,
# nothing broader. MESSAGES_SESSION_ID_INDEX is the project's own index on a v23 table
# (revision hs0005), which no model declares.


def include_name(name: str | None, type_: str, parent_names: Any) -> bool:
    """Reflect only the tables the models own: FTS tables and their shadow tables, views,
    sqlite_sequence, the version table and tables of other modules stay invisible."""
    if type_ == "table":
        return name in metadata.tables
    if type_ == "column":
        return (parent_names.get("table_name"), name) not in PG_SEARCH_COLUMNS
    if type_ == "index":
        return name not in PG_SEARCH_INDEXES and name != MESSAGES_SESSION_ID_INDEX
    return True


def include_object(
    obj: Any, name: str | None, type_: str, reflected: bool, compare_to: Any
) -> bool:
    if type_ == "table":
        return name in metadata.tables
    if type_ == "column" and reflected:
        return (obj.table.name, name) not in PG_SEARCH_COLUMNS
    if type_ == "index" and reflected:
        return name not in PG_SEARCH_INDEXES and name != MESSAGES_SESSION_ID_INDEX
    return True


def drop_reflection_gaps(conn: Connection, upgrade_ops: ops.UpgradeOps) -> None:
    """Drop what autogenerate reports but is how the backend stores the models (see
    dialects: SQLite's PRAGMA gaps, PostgreSQL's identity)."""
    dialect_for(conn).migration.drop_reflection_gaps(conn, upgrade_ops)


def _tolerated(diff: Any, conn: Connection) -> bool:
    """Shapes the original leaves in real files and that must be kept, never "fixed":
    extra columns and indexes from short-lived or later builds (docs/reference/schema.md 10, rule
    13), and `messages.active` added without NOT NULL DEFAULT 1 by old reconcilers (its
    NULLs are healed; the declaration cannot change without rebuilding messages)."""
    if isinstance(diff, tuple) and diff[0] in ("remove_column", "remove_index"):
        return True
    if (
        isinstance(diff, list)
        and diff
        and all(
            isinstance(d, tuple)
            and d[0] in ("modify_nullable", "modify_default")
            and d[2] == "messages"
            and d[3] == "active"
            for d in diff
        )
    ):
        nulls = conn.exec_driver_sql("SELECT COUNT(*) FROM messages WHERE active IS NULL")
        return nulls.scalar() == 0
    return False


def _own_table_to_come(diff: Any) -> bool:
    """A table of hermes-store's own (or an index on one) that a database below the head
    does not have yet."""
    if not isinstance(diff, tuple) or diff[0] not in ("add_table", "add_index"):
        return False
    table = diff[1] if diff[0] == "add_table" else diff[1].table
    return str(table.name).startswith(OWN_TABLE_PREFIX)


def schema_drift(conn: Connection) -> list[Any]:
    """Differences between the models and the database, as autogenerate sees them."""
    ctx = MigrationContext.configure(
        conn,
        opts={
            "include_object": include_object,
            "include_name": include_name,
            "compare_type": True,
            "compare_server_default": True,
        },
    )
    script = produce_migrations(ctx, metadata)
    assert script.upgrade_ops is not None
    drop_reflection_gaps(conn, script.upgrade_ops)
    return list(script.upgrade_ops.as_diffs())


def process_revision_directives(
    context: MigrationContext, revision: Any, directives: list[Any]
) -> None:
    """Autogenerate hook (also used by `alembic check`): see drop_reflection_gaps."""
    for script in directives:
        for upgrade_ops in script.upgrade_ops_list:
            drop_reflection_gaps(context.bind, upgrade_ops)  # type: ignore[arg-type]


@functools.cache
def _at_or_after_upstream_head() -> frozenset[str]:
    """Revision 0023 (which gives the v23 FTS layout) and every revision after it."""
    script = ScriptDirectory.from_config(make_config())
    after = script.iterate_revisions(HEAD, UPSTREAM_HEAD_REVISION)  # 0023 itself excluded
    return frozenset({UPSTREAM_HEAD_REVISION, *(str(r.revision) for r in after if r is not None)})


def _reaches_fts_layout(destination: object) -> bool:
    """Whether an upgrade to `destination` passes revision 0023, which replaces every
    legacy FTS index (so the backfill and the trigger repair belong to that run)."""
    return destination in ("head", "heads") or destination in _at_or_after_upstream_head()


def _run_reaches_head(run: MigrationContext) -> bool:
    # check/current have no destination; only an upgrade through 0023 replaces legacy FTS
    return _reaches_fts_layout(run.opts.get("destination_rev"))


def _leave_nothing_at_base(connection: Connection, run: MigrationContext) -> None:
    """After a run that ended at base (a downgrade or a stamp), drop Alembic's version
    table, now empty: a database at base holds nothing of hermes-store's, so it reads as
    empty again and the next upgrade creates it afresh. `current` and `check` (no
    destination) never drop it."""
    if run.opts.get("destination_rev") is None:
        return
    if not inspect(connection).has_table(VERSION_TABLE):
        return
    rows = connection.execute(select(func.count()).select_from(table(VERSION_TABLE))).scalar()
    if not rows:
        connection.execute(text(f"DROP TABLE {VERSION_TABLE}"))


@contextmanager
def migration_run(
    connection: Connection, run: MigrationContext, cfg: Config, *, adopt: bool
) -> Iterator[None]:
    """One transaction around a whole Alembic run (the backend's: foreign keys checked
    before commit on SQLite, an advisory lock on PostgreSQL, waited for out loud). Refuses
    a newer database and one the backend does not migrate; stamps an adopted one. The
    shape found under the lock is left in `cfg.attributes[LOCKED_SHAPE_ATTR]`: another
    process may have migrated the database while this one waited."""
    dialect = dialect_for(connection)
    backend = dialect.migration
    # SQLite's BEGIN IMMEDIATE is waited for by the retry around the run; PostgreSQL's
    # advisory lock here
    waiting = nullcontext() if dialect.in_process else _pg_migration_lock(connection, cfg)
    with waiting, backend.migration_transaction(connection, run):
        shape = adoption.inspect_shape(connection)
        cfg.attributes[LOCKED_SHAPE_ATTR] = shape
        place = place_of(connection.engine.url)
        newer = too_new_error(shape.stored_version, shape.alembic_revision, HEAD, place)
        if newer is not None:
            raise newer
        backend.refuse(shape)
        cfg.attributes[FTS_REBUILT_LATER_ATTR] = dialect.fts5 and _run_reaches_head(run)
        if adopt and shape.kind == "legacy":
            _adopt(connection, run, shape)
        yield
        _leave_nothing_at_base(connection, run)


@contextmanager
def _pg_migration_lock(connection: Connection, cfg: Config) -> Iterator[None]:
    """Hold hermes-store's migration lock for the run, as a session lock taken before the
    run's transaction (whose own transaction-scoped lock on the same key is then granted
    at once): taken with pg_try_advisory_lock, polled, so that a wait for another
    process's upgrade is reported as it happens and ends after the waiter's budget with
    LockTimeout naming who holds it, rather than blocking silently."""
    waiter = cfg.attributes.get(LOCK_WAITER_ATTR)
    if not isinstance(waiter, LockWaiter):
        waiter = LockWaiter(place_of(connection.engine.url), DEFAULT_WAIT_S)
    engine = connection.engine
    waiter.find_holders = lambda: pg_lock_holders(engine, migration=True)
    waiter.what = "the migration lock"
    key = {"k": PG_MIGRATION_LOCK}
    while True:
        taken = connection.execute(text("SELECT pg_try_advisory_lock(:k)"), key).scalar()
        connection.commit()
        if taken:
            break
        waiter.blocked()
        if waiter.waited() >= waiter.budget:
            raise waiter.timeout()
        time.sleep(random.uniform(0.1, 0.3))
    try:
        yield
    finally:
        with suppress(DBAPIError):
            if connection.in_transaction():
                connection.rollback()
            connection.execute(text("SELECT pg_advisory_unlock(:k)"), key)
            connection.commit()


def _adopt(connection: Connection, run: MigrationContext, shape: adoption.DatabaseShape) -> None:
    if shape.stored_version is None:
        # The original's rule for a file without a version row: write 23 and run no data
        # migration; the structural revisions still add what is missing.
        connection.exec_driver_sql(
            "CREATE TABLE IF NOT EXISTS schema_version (version INTEGER NOT NULL)"
        )
        connection.execute(
            text("INSERT INTO schema_version (version) VALUES (:v)"), {"v": SCHEMA_VERSION}
        )
    stamp = adoption.revision_id(shape.stamp_revision or 0)
    log.info(
        "adopting a database written by Hermes (schema_version %s) at revision %s",
        shape.stored_version,
        stamp or "base",
    )
    if stamp is not None:
        assert run.script is not None  # env.py's context always has one
        run.stamp(run.script, stamp)


def _look_before_opening(url: URL, *, backfilling: bool) -> None:
    """Look before opening for writing, so that a refused file is not even touched: refuse
    a newer database, and a damaged one when this run would rewrite much of it (a
    migration or the FTS backfill). `PRAGMA quick_check` reads the whole file, so a file
    already at head with a settled index (every open of the facade) is not checked."""
    path = sqlite_path(url)
    if path is None or not path.exists():
        return
    refuse_directory(path)
    if path.stat().st_size == 0:
        return
    # Opening for writing would refuse an unwritable file or directory: say so now, naming
    # the path, rather than fail looking (a read-only look at a WAL file needs a -shm file
    # it cannot create in a read-only directory: "unable to open database file").
    check_writable(path)
    # A plain connection, without the engine's pragmas (no journal-mode change, no chmod):
    # read-write (the file and directory are writable, checked above), because only such
    # a connection removes the -wal/-shm files it creates when it closes.
    engine = unlock_on_connect(
        create_engine(
            URL.create("sqlite", database=str(path)),
            poolclass=NullPool,
            module=sqlite_driver.current().module,  # one SQLite library per process
        ),
        path,
    )

    def look() -> tuple[adoption.DatabaseShape, list[str]]:
        with engine.connect() as conn:
            shape = adoption.inspect_shape(conn)
            at_head = shape.alembic_revision == HEAD and shape.stored_version == SCHEMA_VERSION
            pending = shape.kind != "empty" and backfilling and fts_state(conn).backfill_pending
            problems = []
            newer = too_new_error(shape.stored_version, shape.alembic_revision, HEAD, "")
            if newer is None and (not at_head or pending):
                problems = quick_check(conn)
            conn.rollback()
            return shape, problems

    try:
        # under the retry policy: in DELETE mode a stream of writers (processes opening
        # the facade while others append) can keep this reader out past one busy timeout
        shape, problems = OPEN_RETRY.run(look)
    except DBAPIError as exc:
        if classify(exc) in (None, "suspect_fts"):
            raise
        raise not_a_database_error(path, exc.orig) or DatabaseCorrupt(
            str(path), str(exc.orig)
        ) from exc
    finally:
        engine.dispose()
    newer = too_new_error(shape.stored_version, shape.alembic_revision, HEAD, str(path))
    if newer is not None:
        raise newer
    if problems and problems != ["ok"]:
        shown = "; ".join(problems[:3]) + (" ..." if len(problems) > 3 else "")
        raise DatabaseCorrupt(str(path), f"quick_check: {shown}")


@dataclass
class UpgradeReport:
    before: str | None
    after: str | None
    adopted_from: int | None
    fts: FTSState | None
    #: the database did not exist (or was empty) and this run created it
    created: bool = False
    #: where: the file's path, or the URL without its password
    location: str = ""
    #: the revisions this run applied, oldest first (an adopted file's stamp excluded)
    revisions: tuple[str, ...] = ()
    migration_s: float = 0.0
    #: the FTS backfill and teardown of this run (None when it did not run)
    backfill: maintenance.BackfillStats | None = None
    backfill_s: float = 0.0
    total_s: float = 0.0
    #: another process migrated the database while this one waited for the lock: this
    #: run found it at `after` and applied nothing
    migrated_by_other: bool = False


def _applied(start: str | None, end: str | None) -> tuple[str, ...]:
    """The revisions after `start` up to `end`, oldest first."""
    if end is None or start == end:
        return ()
    script = ScriptDirectory.from_config(make_config())
    try:
        walked = [r.revision for r in script.iterate_revisions(end, start)]
    except Exception:  # noqa: BLE001 (a downgrade or an unknown revision: nothing applied)
        return ()
    return tuple(reversed([str(r) for r in walked if r is not None]))


def _at_head(shape: adoption.DatabaseShape) -> bool:
    return shape.alembic_revision == HEAD and shape.stored_version == SCHEMA_VERSION


def lock_waiter(
    url: URL,
    engine: Engine | None,
    wait: float = DEFAULT_WAIT_S,
    on_wait: WaitCallback | None = None,
    *,
    every: float | None = None,
) -> LockWaiter:
    """The LockWaiter of a command writing to the database at `url`: it names who holds
    the lock (/proc/locks for a SQLite file, pg_stat_activity on PostgreSQL)."""
    path = sqlite_path(url)
    if path is not None:
        holders = lambda: sqlite_lock_holders(path)  # noqa: E731
    elif engine is not None:
        holders = lambda: pg_lock_holders(engine, migration=False)  # noqa: E731
    else:
        holders = None
    return LockWaiter(
        place_of(url),
        wait,
        on_wait=on_wait,
        holders=holders,
        every=WAIT_REPORT_EVERY_S if every is None else every,
        typed=on_wait is not None,
    )


#: An I/O error of SQLite is taken for a full disk when its file system has less room
#: than this (SQLite reports a -shm file it cannot grow as a bare "disk I/O error").
FULL_DISK_MARGIN = 1 << 20


def storage_error(exc: BaseException, url: URL, then: str) -> StoreError | None:
    """StorageFull when SQLite ran out of disk for the database at `url` (SQLITE_FULL, or
    an I/O error while its file system is all but full): what failed was rolled back,
    what committed before stays, and `then` is what to run once there is room."""
    orig = sqlite_error(exc)
    code = getattr(orig, "sqlite_errorcode", None)
    path = sqlite_path(url)
    if orig is None or path is None:
        return None
    try:
        stat = os.statvfs(path.parent)
        free = stat.f_bavail * stat.f_frsize
    except OSError:
        free = None
    full = code is not None and code & 0xFF == sqlite3.SQLITE_FULL
    io_error = (code is not None and code & 0xFF == sqlite3.SQLITE_IOERR) or (
        code is None and "disk I/O error" in str(orig)
    )
    if not (full or (io_error and free is not None and free < FULL_DISK_MARGIN)):
        return None
    room = "" if free is None else f", {free:,} bytes free"
    return StorageFull(
        f"the disk holding the database {path} is full ({orig}{room}); what needed the space "
        "was rolled back and the database is intact. Free some space, then run: "
        f"{then}"
    )


@contextmanager
def _typed_storage_errors(url: URL, then: str) -> Iterator[None]:
    try:
        yield
    except DBAPIError as exc:
        typed = storage_error(exc, url, then)
        if typed is None:
            raise
        raise typed from exc


def upgrade(
    url: str | URL | None = None,
    *,
    revision: str = "head",
    defer_fts_backfill: bool = False,
    on_progress: maintenance.ProgressCallback | None = None,
    fts_min_pause: float | None = None,
    fts_pacing: maintenance.Pacing | None = None,
    wait: float = DEFAULT_WAIT_S,
    on_wait: WaitCallback | None = None,
    wait_report_every: float | None = None,
    before_writing: Callable[[], None] | None = None,
) -> UpgradeReport:
    """Create, adopt or upgrade the database at `url`, then (unless deferred) finish the
    chunked FTS backfill, sharing the write lock by `fts_pacing` (default
    maintenance.DEFAULT_PACING; `fts_min_pause` asks for the original's fixed throttle
    instead). Running it twice changes nothing.

    A lock another process holds (SQLite's write lock, PostgreSQL's migration lock) is
    waited for up to `wait` seconds per step; with `on_wait`, each wait is reported to it
    as it happens and one that runs out ends in LockTimeout (without, SQLite's "database
    is locked" is raised as the driver reports it, as the facade's callers expect). The
    report says what this run did: when another process migrated the database while this
    one waited, `migrated_by_other`. `before_writing` runs once the file has been looked
    at (a newer, damaged or unwritable file is refused first) and before it is opened for
    writing: the command's backup."""
    started = time.monotonic()
    resolved = resolve_url(url)
    again = f"{upgrade_command(resolved)} (it continues where it stopped)"
    with explained_connection_errors(resolved), _typed_storage_errors(resolved, again):
        _look_before_opening(
            resolved, backfilling=not defer_fts_backfill and _reaches_fts_layout(revision)
        )
        if before_writing is not None:
            before_writing()
        engine = make_engine(resolved)
    dialect = dialect_for(engine)
    backend = dialect.migration
    waiter = lock_waiter(resolved, engine, wait, on_wait, every=wait_report_every)
    policy = WaitingRetry.for_waiter(waiter)
    locked: list[adoption.DatabaseShape] = []
    try:

        def inspect() -> adoption.DatabaseShape:
            with engine.connect() as conn:  # deferred: looking takes no write lock
                backend.probe_search(conn)
                found = adoption.inspect_shape(conn)
                conn.rollback()
            return found

        def migrate() -> None:
            with write_connection(engine) as conn:
                cfg = make_config(conn, command_name="upgrade")
                cfg.attributes[HERMES_HOME_ATTR] = _hermes_home_for(resolved)
                cfg.attributes[LOCK_WAITER_ATTR] = waiter
                try:
                    command.upgrade(cfg, revision)
                finally:
                    found = cfg.attributes.get(LOCKED_SHAPE_ATTR)
                    if isinstance(found, adoption.DatabaseShape):
                        locked[:] = [found]

        def repair_triggers() -> None:
            with engine.connect() as conn:
                if maintenance.restore_missing_triggers(conn):
                    log.warning("FTS triggers were missing: recreated; re-indexing in chunks")
                if maintenance.detach_cjk_triggers(conn):
                    log.warning(
                        "messages_fts_cjk needs the cjk_unicode61 tokenizer, which hermes-store "
                        "does not load: marked it stale and detached its triggers"
                    )

        # Every step is one transaction that either commits whole or changes nothing, so
        # each is retried alone while other processes keep the file busy.
        with _typed_storage_errors(resolved, again):
            with explained_connection_errors(resolved):
                shape = OPEN_RETRY.run(inspect)
            migration_started = time.monotonic()
            if not (_at_head(shape) and revision in ("head", HEAD)):
                policy.run(migrate)
            migration_s = time.monotonic() - migration_started
            if _reaches_fts_layout(revision) and dialect.fts5:
                policy.run(repair_triggers)
            backfill: maintenance.BackfillStats | None = None
            backfill_started = time.monotonic()
            if dialect.fts5 and not defer_fts_backfill and _reaches_fts_layout(revision):
                backfill = maintenance.BackfillStats()
                maintenance.run_backfill(
                    engine,
                    on_progress=on_progress,
                    pacing=fts_pacing,
                    min_pause=fts_min_pause,
                    stats=backfill,
                    retry=policy,
                )
            backfill_s = time.monotonic() - backfill_started

            def look() -> tuple[str | None, FTSState]:
                with engine.connect() as conn:
                    return _alembic_revision(conn), fts_state(conn)

            after, state = OPEN_RETRY.run(look)
    finally:
        engine.dispose()
    # What this run did is what it found once it held the lock, which another process
    # may have released only after migrating the database itself.
    ran = locked[0] if locked else shape
    by_other = bool(locked) and not _at_head(shape) and _at_head(ran)
    legacy = ran.kind == "legacy"
    start = adoption.revision_id(ran.stamp_revision or 0) if legacy else ran.alembic_revision
    path = sqlite_path(resolved)
    return UpgradeReport(
        before=shape.alembic_revision,
        after=after,
        adopted_from=ran.stored_version if legacy else None,
        fts=state,
        created=ran.kind == "empty",
        location=str(path) if path is not None else shown_url(resolved),
        revisions=() if by_other else _applied(start, after),
        migration_s=migration_s,
        backfill=backfill,
        backfill_s=backfill_s if backfill is not None else 0.0,
        total_s=time.monotonic() - started,
        migrated_by_other=by_other,
    )


def _hermes_home_for(url: URL) -> str:
    """The Hermes home a database belongs to: the directory of a `state.db` (profiles keep
    theirs under profiles/<name>/), else $HERMES_HOME. Revision 0018 reads the gateway's
    sessions.json from there, so one profile's file never fills another's rows."""
    path = sqlite_path(url)
    if path is not None and path.name == "state.db":
        return str(path.parent)
    return str(hermes_home())


def downgrade(url: str | URL | None, revision: str) -> None:
    engine = make_engine(resolve_url(url))
    try:
        with write_connection(engine) as conn:
            command.downgrade(make_config(conn, command_name="downgrade"), revision)
    finally:
        engine.dispose()


def _alembic_revision(conn: Connection) -> str | None:
    return MigrationContext.configure(
        conn, opts={"version_table": VERSION_TABLE}
    ).get_current_revision()


@dataclass
class Status:
    url: str
    kind: str
    alembic_revision: str | None
    head: str
    schema_version: int | None
    stamp_revision: int | None
    missing: dict[int, list[str]]
    fts: FTSState | None
    error: str | None = None  # set when the file is too damaged to say what it holds
    #: the repositories read it as it is: its shape is head, whether or not hermes-store
    #: adopted it (a state.db the original v23 code wrote)
    readable: bool = False

    @property
    def at_head(self) -> bool:
        return self.alembic_revision == HEAD and self.schema_version == SCHEMA_VERSION

    @property
    def head_shaped(self) -> bool:
        """At head, or a file the original wrote at schema version 23 that hermes-store
        has not adopted: nothing to upgrade (`hermes-store upgrade` only records it)."""
        return self.at_head or (self.kind == "legacy" and self.readable)

    def as_dict(self) -> dict[str, Any]:
        return {
            "url": self.url,
            "kind": self.kind,
            "alembic_revision": self.alembic_revision,
            "head": self.head,
            "at_head": self.at_head,
            "readable_as_is": self.readable,
            "schema_version": self.schema_version,
            "adopt_at_revision": self.stamp_revision,
            "missing": {str(k): v for k, v in self.missing.items()},
            "error": self.error,
            "fts": None
            if self.fts is None
            else {
                "layout": self.fts.layout,
                "triggers": self.fts.triggers,
                "backfill_pending": self.fts.backfill_pending,
                "indexed": self.fts.progress,
                "total": self.fts.high_water,
                "percent": self.fts.percent,
                "trash_tables": list(self.fts.trash_tables),
                "fts_storage_version": self.fts.storage_version,
            },
        }


def current(url: str | URL | None = None) -> Status:
    """What the database at `url` holds and where it stands, read without writing to it.
    A database newer than this code is refused (SchemaTooNew), as every command does."""
    resolved = resolve_url(url)
    again = "the same command again"
    with explained_connection_errors(resolved), _typed_storage_errors(resolved, again):
        engine = reading_engine(resolved, refuse_empty=False)
        try:
            with engine.connect() as conn:
                shape = adoption.inspect_shape(conn)
                verdict = judge_for_reading(conn, HEAD)
                state = fts_state(conn) if shape.kind != "empty" else None
        except DBAPIError as exc:
            if classify(exc) in (None, "suspect_fts"):
                raise
            raise DatabaseCorrupt(where(resolved), str(exc.orig)) from exc
        finally:
            engine.dispose()
    newer = too_new_error(shape.stored_version, shape.alembic_revision, HEAD, place_of(resolved))
    if newer is not None:
        raise newer
    return Status(
        url=shown_url(resolved),
        kind=shape.kind,
        alembic_revision=shape.alembic_revision,
        head=HEAD,
        schema_version=shape.stored_version,
        stamp_revision=shape.stamp_revision,
        missing=shape.missing,
        fts=state,
        readable=verdict.readable,
    )


@dataclass(frozen=True)
class SQLiteStorage:
    """Which SQLite drives a file here, its journal mode now, and the one it gets (and why)
    when hermes-store next writes to it."""

    driver: str
    sqlite_version: str
    driver_reason: str
    journal_mode: str
    journal_mode_on_write: str
    journal_reason: str
    #: "yes (SQLCipher <version>)" for a file opened with its key, else "no"
    encrypted: str = "no"

    def as_dict(self) -> dict[str, str]:
        return dict(vars(self))


def sqlite_storage(conn: Connection) -> SQLiteStorage:
    """The SQLiteStorage of the file `conn` (a connection of this process's driver) reads."""
    driver = sqlite_driver.current()
    mode = str(conn.exec_driver_sql("PRAGMA journal_mode").scalar()).lower()
    choice = journal_choice(mode, JournalPolicy.from_env(), driver.sqlite_version, driver.name)
    return SQLiteStorage(
        driver=driver.name,
        sqlite_version=driver.sqlite_version_text,
        driver_reason=driver.reason,
        journal_mode=mode,
        journal_mode_on_write=choice.mode,
        journal_reason=choice.reason,
        encrypted=_encrypted(conn) if driver.encrypts else "no",
    )


def _encrypted(conn: Connection) -> str:
    """Whether the SQLCipher connection `conn` reads its file with a key."""
    if str(conn.exec_driver_sql("PRAGMA cipher_status").scalar()) != "1":
        return "no"
    return f"yes (SQLCipher {conn.exec_driver_sql('PRAGMA cipher_version').scalar()})"


@dataclass
class CheckReport:
    status: Status
    quick_check: list[str]
    fts_errors: list[str]
    schema_drift: list[str] = field(default_factory=list)
    tolerated: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)  # what could not be checked, and why
    #: SQLite: the library this process drives and the journal mode the file has and gets
    storage: SQLiteStorage | None = None

    @property
    def ok(self) -> bool:
        fts_ok = not self.fts_errors
        return (
            self.status.head_shaped
            and self.quick_check == ["ok"]
            and fts_ok
            and not self.schema_drift
            and not self.errors
        )


def unfinished_fts_work(state: FTSState, url: URL) -> list[str]:
    """What an upgrade left of the FTS conversion (a backfill, legacy tables to tear
    down), with the command that finishes it; [] when nothing is left."""
    left = []
    if state.backfill_pending:
        left.append(f"FTS backfill pending ({state.percent}%)")
    if state.trash_tables:
        left.append(
            f"{len(state.trash_tables)} legacy FTS table(s) ({state.trash_tables[0]}, ...) "
            "left to tear down"
        )
    if not left:
        return []
    return [f"{', then '.join(left)}: run `hermes-store fts backfill --url '{place_of(url)}'`"]


def check(url: str | URL | None = None) -> CheckReport:
    """At head? `PRAGMA quick_check`; FTS integrity-check (rank=1) and what an upgrade left
    of the FTS conversion; models vs database. Reads only (the FTS integrity-check, an
    FTS5 command written as an INSERT, runs on a plain connection that may write and is
    rolled back). Damage is reported, never raised: whatever can still be checked is."""
    resolved = resolve_url(url)
    try:
        status = current(resolved)
    except DatabaseCorrupt as exc:
        status = Status(
            url=shown_url(resolved),
            kind="unreadable",
            alembic_revision=None,
            head=HEAD,
            schema_version=None,
            stamp_revision=None,
            missing={},
            fts=None,
            error=exc.detail,
        )
    with _typed_storage_errors(resolved, "the same command again"):
        engine = reading_engine(resolved, refuse_empty=False)
    quick: list[str] = []  # stays empty (not ok) if it never ran
    fts_errors: list[str] = []
    drift: list[str] = []
    tolerated: list[str] = []
    errors = [] if status.error is None else [f"database: {status.error}"]
    storage = None
    try:
        with engine.connect() as conn:
            # (PostgreSQL checks its pages itself: checksums, amcheck)
            quick = dialect_for(conn).migration.integrity(conn)
            conn.rollback()
            if sqlite_path(resolved) is not None and quick == ["ok"]:
                storage = sqlite_storage(conn)
                conn.rollback()
            if status.fts is not None and status.fts.layout not in ("none", "tsvector"):
                fts_errors = unfinished_fts_work(status.fts, resolved)
                if not status.fts.backfill_pending:
                    checked, why_not = _fts_integrity(resolved)
                    fts_errors = checked + fts_errors
                    if why_not:
                        errors.append(why_not)
            if status.kind == "managed" or status.head_shaped:
                for d in schema_drift(conn):
                    if status.alembic_revision != HEAD and _own_table_to_come(d):
                        continue  # the upgrade that records the head creates it
                    (tolerated if _tolerated(d, conn) else drift).append(repr(d))
            conn.rollback()
    except DBAPIError as exc:
        if classify(exc) in (None, "suspect_fts"):
            raise
        if not quick:  # the connection could not even be opened
            quick = [f"could not run: {exc.orig}"]
        errors.append(f"stopped checking: {exc.orig}")
    finally:
        engine.dispose()
    return CheckReport(
        status=status,
        quick_check=quick,
        fts_errors=fts_errors,
        schema_drift=drift,
        tolerated=tolerated,
        errors=errors,
        storage=storage,
    )


def _fts_integrity(url: URL) -> tuple[list[str], str | None]:
    """The FTS5 integrity-check of both indexes, and why it could not run (or None).

    It is an FTS5 command written as an INSERT, which SQLite refuses on a read-only
    connection although it changes nothing: it runs on a plain connection that may write
    (no pragmas, no journal-mode change, no chmod) and is rolled back; as the file's last
    connection that one also removes the -wal/-shm files it created."""
    path = sqlite_path(url)
    if path is None:
        return [], None
    if not os.access(path, os.W_OK) or not os.access(path.parent, os.W_OK | os.X_OK):
        return [], (
            f"FTS integrity not checked: its FTS5 command needs write access to {path} and "
            "its directory (it changes nothing); run check as a user who may write them"
        )
    engine = unlock_on_connect(
        create_engine(
            URL.create("sqlite", database=str(path)),
            poolclass=NullPool,
            module=sqlite_driver.current().module,
        ),
        path,
    )
    try:
        with engine.connect() as conn:
            errors = maintenance.integrity_errors(conn)
            conn.rollback()
        return errors, None
    finally:
        engine.dispose()


def heads() -> tuple[str, ...]:
    return tuple(ScriptDirectory.from_config(make_config()).get_heads())


def finish_fts(
    url: str | URL | None = None,
    *,
    on_progress: maintenance.ProgressCallback | None = None,
    min_pause: float | None = None,
    pacing: maintenance.Pacing | None = None,
    stats: maintenance.BackfillStats | None = None,
) -> maintenance.Progress:
    """Finish a pending chunked backfill and teardown (maintenance.run_backfill)."""
    resolved = resolve_url(url)
    again = f"hermes-store fts backfill --url '{place_of(resolved)}' (it resumes)"
    with _typed_storage_errors(resolved, again):
        engine = open_engine_at_head(resolved)
        try:
            return maintenance.run_backfill(
                engine, on_progress=on_progress, pacing=pacing, min_pause=min_pause, stats=stats
            )
        finally:
            engine.dispose()


def rebuild_fts(url: str | URL | None = None) -> None:
    engine = open_engine_at_head(url)
    try:
        maintenance.rebuild(engine)
    finally:
        engine.dispose()


def open_engine_at_head(url: str | URL | None = None, *, read_only: bool = False) -> Engine:
    """An engine for a database the repositories can serve, else the typed refusal that
    says what to do (SchemaTooNew, SchemaBehind with what is missing, NotAtHead). Reading
    (`read_only`) takes any database whose shape is head, adopted or not, and leaves it
    as it was; writing needs a database hermes-store has adopted."""
    resolved = resolve_url(url)
    if read_only:
        return read_only_engine(resolved)
    with explained_connection_errors(resolved):
        refuse_missing_file(resolved)
        engine = make_engine(resolved)
        try:
            with engine.connect() as conn:
                verdict = require_readable(conn, resolved, HEAD)
                conn.rollback()
            if not verdict.adopted:
                raise NotAtHead(
                    f"the database {place_of(resolved)} has the shape of schema_version "
                    f"{SCHEMA_VERSION} but hermes-store has not adopted it; adopt it with: "
                    f"{upgrade_command(resolved)}"
                )
            if verdict.revision != HEAD:
                raise NotAtHead(
                    f"the database {place_of(resolved)} is at revision {verdict.revision}, "
                    f"not {HEAD}; upgrade it first: {upgrade_command(resolved)}"
                )
        except BaseException:
            engine.dispose()
            raise
    return engine
