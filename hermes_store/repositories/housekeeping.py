"""Housekeeping: the search index's state and upkeep, the database's size, VACUUM, and the
throttled auto-prune / auto-archive the original runs at start-up (docs/reference/behaviour.md 9,
docs/reference/schema.md 5.3-5.5).

What differs between the backends lives here: SQLite has FTS5 indexes to backfill,
rebuild and optimise, and VACUUM runs on a connection outside any transaction under the
store's write lock; PostgreSQL's search column is generated (so there is never anything
to backfill or optimise) and its VACUUM needs an autocommit connection.
"""

from __future__ import annotations

import logging
import sqlite3
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from sqlalchemy import text

from .. import migrate
from ..runtime.engine import Prepared, all_tuples, first_value, write_connection
from ..search.layout import (
    STATE_CATALOG,
    STATE_META,
    FTSState,
    fts_state,
    has_state_meta,
    sqlite_state,
)
from ..search.maintenance import Progress, backfill_step, optimize_indexes
from ..sqlite import driver as sqlite_driver
from ._dialect import database_size
from .maintenance import MaintenanceRepository
from .meta import MetaRepository

if TYPE_CHECKING:
    from ..store import Store

log = logging.getLogger(__name__)

#: SQLite's size as `database_size` counts it, page_count x page_size, in one statement
#: (one snapshot): what `logical_size_bytes` sends as a read of its own.
_SQLITE_SIZE = Prepared(
    text("SELECT page_count * page_size FROM pragma_page_count(), pragma_page_size()")
)

#: What `optimize_fts_storage` reports where the search index needs no conversion.
NOTHING_TO_OPTIMIZE = "nothing_to_optimize"

ProgressReport = Callable[[dict[str, Any]], None]


class HousekeepingRepository:
    """The search index's state and upkeep, the database's size, VACUUM, and the throttled
    auto-prune / auto-archive the original runs at start-up.

    Args:
        store: the Store the repository works on.
    """

    def __init__(self, store: Store) -> None:
        self.store = store
        self._maintenance = MaintenanceRepository(store)
        self._meta = MetaRepository(store)

    @property
    def _fts5(self) -> bool:
        """The word index is FTS5 (SQLite): layouts, backfills, rebuilds, optimising."""
        return self.store.dialect.fts5

    # ------------------------------------------------------------------ search index

    def _fts(self) -> FTSState:
        return self.store.read(fts_state)

    def fts_rebuild_status(self) -> dict[str, Any] | None:
        """`{pending, total, indexed, percent}` while a chunked backfill is pending, else
        None (always None on PostgreSQL: its index is a generated column)."""
        state = self._fts()
        if not state.high_water or state.high_water <= 0:
            return None
        return {
            "pending": True,
            "total": state.high_water,
            "indexed": state.progress or 0,
            "percent": state.percent,
        }

    def fts_rebuild_step(self) -> dict[str, Any] | None:
        """One chunk (<= 500 ids) of a pending backfill; the status afterwards, or None."""
        if self._fts5 and not self.store.read_only:
            with write_connection(self.store.engine) as conn:
                self.store.retry.run(lambda: backfill_step(conn))
        return self.fts_rebuild_status()

    def fts_cjk_rebuild_status(self) -> dict[str, Any] | None:
        """Always None: hermes-store keeps no CJK bigram index (its tokenizer is not loaded),
        so there is never a CJK backfill to report."""
        return None

    def fts_cjk_rebuild_step(self) -> dict[str, Any] | None:
        """Nothing to do, for the same reason as `fts_cjk_rebuild_status`."""
        return None

    def fts_optimize_available(self) -> bool:
        """True when `optimize_fts_storage` has work: a legacy layout, a pending backfill or
        leftover `fts_v22_trash_*` tables (never on PostgreSQL or a read-only handle)."""
        if self.store.read_only or not self._fts5:
            return False
        # the catalog and the bookkeeping keys as two reads of their own, as the original
        # reads them: the answer is advisory, and a UI may poll it
        catalog = self.store.read_one(STATE_CATALOG, {}, all_tuples)
        meta = self.store.read_one(STATE_META, {}, all_tuples) if has_state_meta(catalog) else []
        state = sqlite_state(catalog, meta)
        return state.layout != "v23" or state.backfill_pending or bool(state.trash_tables)

    def rebuild_fts(self) -> int:
        """A full FTS5 'rebuild' of both indexes; how many were rebuilt (0 on PostgreSQL)."""
        self.store.require_writable()
        if not self._fts5:
            return 0
        migrate.rebuild_fts(self.store.url)
        return 2

    def optimize_fts(self) -> int:
        """FTS5 'optimize' on both indexes (holds the write lock while it merges); how many
        were optimised (0 on PostgreSQL)."""
        self.store.require_writable()
        if not self._fts5:
            return 0
        return optimize_indexes(self.store.engine, self.store.retry)

    def optimize_fts_storage(
        self, progress_cb: ProgressReport | None = None, vacuum: bool = True
    ) -> dict[str, Any]:
        """Finish the conversion to the v23 index layout (backfill, then teardown of the
        legacy tables), VACUUM if asked, and report `{ok, vacuumed}` (docs/reference/schema.md 5.5).

        PostgreSQL has no layout to convert: `{ok: True, vacuumed: None, reason:
        "nothing_to_optimize"}`, and nothing is changed.

        Args:
            progress_cb: called with progress reports as the job runs.
            vacuum: VACUUM afterwards (SQLite), giving the freed pages back.
        """
        if self.store.read_only:
            return {"ok": False, "reason": "read_only"}

        def report(phase: str, percent: int = 100, indexed: int = 0, total: int = 0) -> None:
            if progress_cb is not None:
                progress_cb(
                    {"phase": phase, "percent": percent, "indexed": indexed, "total": total}
                )

        if not self._fts5:
            report("done")
            return {"ok": True, "vacuumed": None, "reason": NOTHING_TO_OPTIMIZE}

        def forward(p: Progress) -> None:
            report(p.phase, p.percent, p.indexed, p.total)

        migrate.finish_fts(self.store.url, on_progress=forward)
        vacuumed: bool | None = None
        if vacuum:
            report("vacuum", 0)
            try:
                self._vacuum_sqlite()
                vacuumed = True
            except sqlite_driver.Error as exc:  # typically no room for the copy VACUUM writes
                log.warning("VACUUM after optimize_fts_storage failed: %s", exc)
                vacuumed = False
        report("done")
        return {"ok": True, "vacuumed": vacuumed}

    # ------------------------------------------------------------------ size, VACUUM

    def logical_size_bytes(self) -> int | None:
        """The database's size as the engine counts it: page_count x page_size on SQLite,
        pg_database_size on PostgreSQL."""
        if not self.store.dialect.in_process:
            return self.store.read(database_size)
        size = self.store.read_one(_SQLITE_SIZE, {}, first_value)
        return None if size is None else int(size)

    def vacuum(self) -> int:
        """FTS5 'optimize' (a failure is logged), then a TRUNCATE checkpoint and VACUUM under
        the store's write lock (a VACUUM error propagates); returns how many FTS indexes were
        optimised. On PostgreSQL a plain VACUUM, outside any transaction, and 0."""
        self.store.require_writable()
        if not self.store.dialect.in_process:
            with self.store.engine.connect() as conn:
                conn.execution_options(isolation_level="AUTOCOMMIT").exec_driver_sql("VACUUM")
            return 0
        optimized = 0
        try:
            optimized = self.optimize_fts()
        except Exception as exc:  # noqa: BLE001 (the original logs it and vacuums anyway)
            log.warning("FTS optimize before VACUUM failed: %s", exc)
        self._vacuum_sqlite()
        return optimized

    def _vacuum_sqlite(self) -> None:
        # This process's writers wait on the lock instead of failing on the database
        # lock VACUUM holds; other processes see "locked" and retry, as with the original.
        with self.store.write_lock:
            self.store.checkpoint("TRUNCATE")
            with self.store.engine.connect() as conn:
                # on the driver connection: SQLAlchemy would BEGIN first, and VACUUM
                # cannot run inside a transaction
                driver = cast(sqlite3.Connection, conn.connection.driver_connection)
                driver.execute("VACUUM")
        self.store.checkpoint("TRUNCATE")

    # ------------------------------------------------------------------ start-up upkeep

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
        sessions_dir: str | Path | None = None,
    ) -> dict[str, Any]:
        """Never raises: {"skipped", "pruned", "vacuumed"} (+ "error").

        Args:
            retention_days: delete ended sessions inactive for more than this many days.
            min_interval_hours: do nothing if the job last ran less than this many hours
                ago.
            vacuum: VACUUM afterwards (SQLite), giving the freed pages back.
            sessions_dir: where the sessions' files live; a deleted session's files are
                removed from it (None: none are).
        """
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
        """Never raises: {"skipped", "archived"} (+ "error").

        Args:
            idle_days: days without activity after which a session counts as stale.
            min_interval_hours: do nothing if the job last ran less than this many hours
                ago.
            exclude_pinned: leave pinned sessions alone.
        """
        result: dict[str, Any] = {"skipped": False, "archived": 0}
        try:
            if self._throttled("last_auto_archive", min_interval_hours):
                result["skipped"] = True
                return result
            result["archived"] = self._maintenance.archive_stale_sessions(
                idle_days, exclude_pinned=exclude_pinned
            )
            self._meta.set_meta("last_auto_archive", str(time.time()))
        except Exception as exc:  # noqa: BLE001 (the original reports instead of raising)
            result["error"] = f"{type(exc).__name__}: {exc}"
        return result
