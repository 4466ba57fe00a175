"""FTS maintenance on SQLite: the chunked, resumable backfill of the v23 indexes with the
original's marker protocol, the trash teardown, a full rebuild and the integrity check.

Protocol (docs/reference/schema.md 5.3): while `fts_rebuild_high_water` (H) exists, a row is
indexed iff id <= `fts_rebuild_progress` (P) or id > H. A step claims the next range
inside BEGIN IMMEDIATE by re-reading P, indexes ids in (P, min(P + 500, H)] and moves P,
all in one transaction, so processes of the original (or a second hermes-store) can run
steps too, and a killed run resumes where it stopped.

Sharing the write lock (`Pacing`): every step is its own short transaction, and between
steps the loop leaves the lock free long enough for a waiting writer to take it. A writer
waiting on SQLite's busy handler is invisible to the lock holder, so the loop goes by
what it can see: `PRAGMA data_version` changes when another connection has committed.
Nobody else committed lately: steps run back to back for up to `hold` seconds, then the
lock is left free for `gap` seconds (the *alone* regime: fast, and still sure to let in a
writer that arrives, by the busy handler's schedule noted above `Regime`). Somebody did:
a pause after (about) every step, as long as the step (the *shared* regime), until
`quiet` seconds pass without another commit.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from contextlib import suppress
from dataclasses import dataclass

from sqlalchemy import (
    Connection,
    Delete,
    Engine,
    Insert,
    bindparam,
    column,
    delete,
    insert,
    literal_column,
    select,
    text,
    tuple_,
)
from sqlalchemy import table as core_table
from sqlalchemy.exc import DBAPIError

from ..repositories._state_meta import set_value
from ..runtime.engine import write_connection
from ..runtime.retry import DEFAULT_RETRY, RetryPolicy
from ..sqlite import driver as sqlite_driver
from ..sqlite.damage import classify
from .layout import HIGH_WATER, PROGRESS, fts_state

CHUNK_IDS = 500
FINISH_WINDOW = 1000


@dataclass(frozen=True)
class Progress:
    """Where a run is. backfill: ids indexed (P) of H; teardown: legacy tables removed of
    those there were when it began; done: the backfill's final P and H."""

    phase: str  # "backfill", "teardown", "done"
    indexed: int
    total: int
    rows: int = 0  # messages this step added to the word index

    @property
    def percent(self) -> int:
        return 100 if not self.total else min(100, int(100 * self.indexed / self.total))


ProgressCallback = Callable[[Progress], None]


def _meta_int(conn: Connection, key: str) -> int | None:
    value = conn.execute(text("SELECT value FROM state_meta WHERE key = :k"), {"k": key}).scalar()
    try:
        return None if value is None else int(value)
    except ValueError:
        return None


def backfill_step(conn: Connection, chunk: int = CHUNK_IDS) -> Progress:
    """One write transaction of the backfill. `conn` must begin IMMEDIATE."""
    with conn.begin():
        high = _meta_int(conn, HIGH_WATER)
        if high is None:
            return Progress("done", 0, 0)
        progress = _meta_int(conn, PROGRESS)
        if progress is None:
            # H without P: nobody knows which rows below H are indexed, and indexing one
            # twice corrupts an external-content index; start over from empty indexes.
            high = _reset_indexes(conn)
            progress = 0
            if not high:
                return Progress("done", 0, 0)
        if progress >= high:
            return Progress("done", high, high, _finish(conn, high))
        upper = min(progress + chunk, high)
        window = {"lo": progress, "hi": upper}
        rows = _index_window(conn, window, only_missing=False)
        set_value(conn, PROGRESS, upper)
        if upper >= high:
            return Progress("done", high, high, rows + _finish(conn, high))
        return Progress("backfill", upper, high, rows)


def _reset_indexes(conn: Connection) -> int:
    """Empty both indexes and mark every existing row pending; returns the new H."""
    conn.exec_driver_sql("INSERT INTO messages_fts(messages_fts) VALUES ('delete-all')")
    conn.exec_driver_sql(
        "INSERT INTO messages_fts_trigram(messages_fts_trigram) VALUES ('delete-all')"
    )
    high = int(conn.exec_driver_sql("SELECT COALESCE(MAX(id), 0) FROM messages").scalar() or 0)
    if high:
        set_value(conn, HIGH_WATER, high)
        set_value(conn, PROGRESS, 0)
    else:
        conn.execute(
            text("DELETE FROM state_meta WHERE key IN (:h, :p)"),
            {"h": HIGH_WATER, "p": PROGRESS},
        )
    return high


def restore_missing_triggers(conn: Connection) -> bool:
    """An original process on an SQLite without FTS5 drops the six triggers, after which
    new rows go unindexed. Recreate them from the frozen v23 DDL and re-index from
    scratch in chunks (the indexes may miss rows). Returns True if it acted."""
    from .._migrations._fts_layouts import ALL_TRIGGERS, V23

    with conn.begin():
        state = fts_state(conn)
        if state.layout != "v23" or state.triggers == len(ALL_TRIGGERS):
            return False
        for name in ALL_TRIGGERS:
            conn.exec_driver_sql(f'DROP TRIGGER IF EXISTS "{name}"')
        for statement in V23:
            if statement.startswith("CREATE TRIGGER"):
                conn.exec_driver_sql(statement)
        _reset_indexes(conn)
        return True


CJK_TRIGGERS = ("messages_fts_cjk_insert", "messages_fts_cjk_delete", "messages_fts_cjk_update")


def detach_cjk_triggers(conn: Connection) -> bool:
    """hermes-store does not load the cjk_unicode61 tokenizer, and while the original's CJK
    triggers exist every INSERT into messages fails without it. Do what the original does
    on a connection without the tokenizer: mark the CJK index stale, then drop its
    triggers (the table itself is left alone; never query it). Returns True if it acted."""
    with conn.begin():
        present = (
            conn.execute(
                text(
                    "SELECT name FROM sqlite_master WHERE type = 'trigger' "
                    "AND name IN ('messages_fts_cjk_insert', 'messages_fts_cjk_delete', "
                    "'messages_fts_cjk_update')"
                )
            )
            .scalars()
            .all()
        )
        if not present:
            return False
        set_value(conn, "fts_cjk_stale", "1")
        for name in present:
            conn.exec_driver_sql(f'DROP TRIGGER IF EXISTS "{name}"')
        return True


#: Each FTS5 index and the shadow table listing the rows it holds.
_DOCSIZE = {
    "messages_fts": "messages_fts_docsize",
    "messages_fts_trigram": "messages_fts_trigram_docsize",
}
_TEXT_COLUMNS = ("content", "tool_name", "tool_calls")


def _index_statement(name: str, only_missing: bool) -> Insert:
    """Index the messages of an id window (`:lo` < id <= `:hi`) into the index `name`;
    the trigram index takes non-tool rows only, as its triggers do. `only_missing` skips
    rows the index already holds (indexing one twice corrupts an external-content
    index)."""
    index = core_table(name, column("rowid"), *(column(c) for c in _TEXT_COLUMNS))
    messages = core_table(
        "messages", column("id"), column("role"), *(column(c) for c in _TEXT_COLUMNS)
    )
    window = [messages.c.id > bindparam("lo"), messages.c.id <= bindparam("hi")]
    if name == "messages_fts_trigram":
        window.append(messages.c.role != literal_column("'tool'"))
    if only_missing:
        held = core_table(_DOCSIZE[name], column("id"))
        window.append(messages.c.id.not_in(select(held.c.id)))
    rows = select(messages.c.id, *(messages.c[c] for c in _TEXT_COLUMNS)).where(*window)
    return insert(index).from_select(["rowid", *_TEXT_COLUMNS], rows)


_INDEX_WINDOW = {
    (name, only_missing): _index_statement(name, only_missing)
    for name in _DOCSIZE
    for only_missing in (False, True)
}


def _index_window(conn: Connection, window: dict[str, int], *, only_missing: bool) -> int:
    """Index an id window into both indexes; how many rows the word index took."""
    rows = conn.execute(_INDEX_WINDOW["messages_fts", only_missing], window).rowcount
    conn.execute(_INDEX_WINDOW["messages_fts_trigram", only_missing], window)
    return int(rows)


def _finish(conn: Connection, high: int) -> int:
    """Index any row near H that neither the backfill nor a trigger indexed, then drop
    the markers (inside the caller's transaction). Returns how many it indexed."""
    window = {"lo": high - FINISH_WINDOW, "hi": high + FINISH_WINDOW}
    rows = _index_window(conn, window, only_missing=True)
    conn.execute(
        text("DELETE FROM state_meta WHERE key IN (:h, :p)"), {"h": HIGH_WATER, "p": PROGRESS}
    )
    return max(0, rows)


def teardown_step(conn: Connection, chunk: int = CHUNK_IDS) -> str:
    """Delete up to `chunk` rows of the first leftover `fts_v22_trash_*` table, or drop it
    once empty. Returns what it did ("deleted", "dropped"), or "" when no trash is left."""
    with conn.begin():
        # the first trash table only (fts_state's dozen lookups would cost more than
        # deleting 500 small rows; one table per step, as the original)
        table = conn.execute(
            text(
                "SELECT name FROM sqlite_master WHERE type = 'table' "
                "AND name LIKE 'fts\\_v22\\_trash\\_%' ESCAPE '\\' ORDER BY name LIMIT 1"
            )
        ).scalar()
        if table is None:
            return ""
        # Trash holds renamed FTS shadow tables; `_idx` and `_config` are WITHOUT ROWID,
        # so rows are addressed by their primary key where there is one.
        info = conn.exec_driver_sql(f'PRAGMA table_info("{table}")').mappings().all()
        pk = [str(r["name"]) for r in sorted(info, key=lambda r: r["pk"]) if r["pk"]]
        deleted = conn.execute(_delete_some(table, pk or ["rowid"]), {"chunk": int(chunk)}).rowcount
        if deleted:
            return "deleted"
        conn.exec_driver_sql(f'DROP TABLE "{table}"')
        return "dropped"


def _delete_some(name: str, key: list[str]) -> Delete:
    """Delete :chunk rows of the trash table `name` (a name from sqlite_master), each
    addressed by `key`: its primary key's columns, or rowid."""
    trash = core_table(name, *(column(c) for c in key))
    chosen = select(*trash.c).limit(bindparam("chunk")).correlate(None)
    return delete(trash).where(tuple_(*trash.c).in_(chosen))


def settle(conn: Connection) -> bool:
    """Stamp `fts_storage_version` = '1' once the v23 layout is complete."""
    with conn.begin():
        state = fts_state(conn)
        if state.layout != "v23" or state.backfill_pending or state.trash_tables:
            return False
        set_value(conn, "fts_storage_version", "1")
        conn.execute(text("DELETE FROM state_meta WHERE key = 'fts_optimize_available'"))
        return True


# What the pauses are sized by: SQLite's default busy handler (what a 1 s `timeout`
# installs, in the original's writers and in hermes-store's) re-tries a lock 1, 3, 8, 18,
# 33, 53, 78, 103, 128, 178, 228 ms after its first attempt failed, then every 100 ms
# until the timeout. A writer that starts waiting while a step runs thus re-tries at most
# 25 ms apart for its first 128 ms: a free window of 20-25 ms that opens within ~100 ms
# of its arrival is all but sure to be seen.


@dataclass(frozen=True)
class Regime:
    """Steps run back to back while the time held since the last pause plus one more step
    stays within `hold` seconds; then the lock is left free for max(`gap`, `factor` x the
    time held) seconds."""

    hold: float
    gap: float
    factor: float = 0.0

    def pause(self, held: float, next_step: float) -> float | None:
        """The pause due now, or None to run the next step at once."""
        if held + next_step <= self.hold:
            return None
        return max(self.gap, self.factor * held)


@dataclass(frozen=True)
class Pacing:
    """How the chunked loops share the write lock (see the module docstring).

    alone: at most ~100 ms held, then 20 ms free. A writer arriving meanwhile is at most
    ~100 ms into its wait when the lock comes free, so it re-tries at least every 25 ms
    (the busy handler's schedule, above) and one of its polls lands in the free 20 ms
    four times in five; else in the next pause, ~120 ms later, long before its 1 s
    timeout: it never fails, and its commit switches the loop to `shared`.
    shared: steps run back to back only while that holds the lock for at most 25 ms (the
    small teardown steps; a backfill step is longer), then the lock is free as long as it
    was held (at least 50 ms), so a writer waits for at most one step plus one of its
    polls; the run goes at about half speed until `quiet` seconds pass without another
    connection's commit.
    """

    alone: Regime = Regime(hold=0.100, gap=0.020)
    shared: Regime = Regime(hold=0.025, gap=0.050, factor=1.0)
    quiet: float = 3.0

    @classmethod
    def fixed(cls, min_pause: float, factor: float = 4.0) -> Pacing:
        """The original's throttle: after every step sleep max(min_pause, factor x step),
        whoever else uses the file."""
        regime = Regime(hold=0.0, gap=min_pause, factor=factor)
        return cls(alone=regime, shared=regime, quiet=0.0)

    @classmethod
    def unpaced(cls) -> Pacing:
        """No pause at all: only for a file no other process can be using."""
        regime = Regime(hold=math.inf, gap=0.0)
        return cls(alone=regime, shared=regime, quiet=0.0)


DEFAULT_PACING = Pacing()


@dataclass
class BackfillStats:
    """What one run of the backfill loop did (filled in as it goes)."""

    backfill_steps: int = 0
    rows_indexed: int = 0
    teardown_steps: int = 0
    tables_removed: int = 0
    pauses: int = 0
    shared_pauses: int = 0  # pauses taken in the shared regime
    paused_s: float = 0.0
    foreign_commits: int = 0  # times another connection was seen to have committed


class _Pacer:
    """Decides, after each step, whether to pause and for how long."""

    def __init__(self, conn: Connection, pacing: Pacing, stats: BackfillStats) -> None:
        self._driver = conn.connection.driver_connection
        self._pacing = pacing
        self._stats = stats
        self._version = self._data_version()
        self._last_foreign = -math.inf
        self._held = 0.0

    def _data_version(self) -> int | None:
        # on the driver, outside any transaction: through SQLAlchemy it would autobegin
        # (BEGIN IMMEDIATE on this connection) just to read a counter
        if self._driver is None:
            return None
        return int(self._driver.execute("PRAGMA data_version").fetchone()[0])

    def after(self, step_s: float) -> None:
        now = time.monotonic()
        version = self._data_version()
        if version != self._version:
            self._version = version
            self._last_foreign = now
            self._stats.foreign_commits += 1
        shared = now - self._last_foreign < self._pacing.quiet
        regime = self._pacing.shared if shared else self._pacing.alone
        self._held += step_s
        pause = regime.pause(self._held, step_s)
        if pause is None:
            return
        self._held = 0.0
        if pause <= 0:
            return
        self._stats.pauses += 1
        self._stats.shared_pauses += shared
        self._stats.paused_s += pause
        time.sleep(pause)


def _wal_sync_normal(conn: Connection) -> Callable[[], None]:
    """In WAL mode, commit this connection's steps without an fsync each (synchronous
    NORMAL, SQLite's advice for WAL): a power cut can then undo only the last few steps,
    which markers and index undo together, and the loop redoes. Returns the undo."""
    driver = conn.connection.driver_connection
    if driver is None or str(driver.execute("PRAGMA journal_mode").fetchone()[0]) != "wal":
        return lambda: None
    before = int(driver.execute("PRAGMA synchronous").fetchone()[0])
    if before <= 1:
        return lambda: None
    driver.execute("PRAGMA synchronous=NORMAL")
    return lambda: driver.execute(f"PRAGMA synchronous={before}")


def _trash_count(conn: Connection) -> int:
    with conn.begin():
        return int(
            conn.execute(
                text(
                    "SELECT COUNT(*) FROM sqlite_master WHERE type = 'table' "
                    "AND name LIKE 'fts\\_v22\\_trash\\_%' ESCAPE '\\'"
                )
            ).scalar()
            or 0
        )


def run_backfill(
    engine: Engine,
    *,
    on_progress: ProgressCallback | None = None,
    pacing: Pacing | None = None,
    min_pause: float | None = None,
    pause_factor: float = 4.0,
    retry: RetryPolicy = DEFAULT_RETRY,
    max_steps: int | None = None,
    stats: BackfillStats | None = None,
) -> Progress:
    """Backfill, tear down trash, settle; returns the last progress (phase "done" when
    finished). Between steps it shares the write lock by `pacing` (DEFAULT_PACING);
    `min_pause` instead asks for the original's fixed throttle, max(min_pause,
    pause_factor x step). `max_steps` stops early; `stats` is filled in as it goes."""
    if pacing is None:
        pacing = DEFAULT_PACING if min_pause is None else Pacing.fixed(min_pause, pause_factor)
    stats = stats if stats is not None else BackfillStats()
    steps = 0

    with write_connection(engine) as conn:
        pacer = _Pacer(conn, pacing, stats)
        restore_sync = _wal_sync_normal(conn)

        def step(work: Callable[[], Progress]) -> Progress:
            nonlocal steps
            started = time.monotonic()
            result = retry.run(work)
            took = time.monotonic() - started
            steps += 1
            if on_progress is not None:
                on_progress(result)
            if result.phase != "done":
                pacer.after(took)
            return result

        def out_of_steps() -> bool:
            return max_steps is not None and steps >= max_steps

        def backfill() -> Progress:
            result = backfill_step(conn)
            stats.backfill_steps += 1
            stats.rows_indexed += result.rows
            return result

        try:
            last = Progress("backfill", 0, 0)
            while last.phase != "done":
                if out_of_steps():
                    return last
                last = step(backfill)
            finished = last
            trash = retry.run(lambda: _trash_count(conn))
            removed = 0

            def teardown() -> Progress:
                nonlocal removed
                did = teardown_step(conn)
                if not did:
                    return Progress("done", finished.indexed, finished.total)
                stats.teardown_steps += 1
                if did == "dropped":
                    removed += 1
                    stats.tables_removed += 1
                return Progress("teardown", removed, max(trash, removed))

            while trash:
                if out_of_steps():
                    return Progress("teardown", removed, trash)
                if step(teardown).phase == "done":
                    break
            retry.run(lambda: settle(conn))
        finally:
            # a connection broken mid-run is closed next anyway: keep the real error
            with suppress(DBAPIError, *sqlite_driver.Error):
                restore_sync()
    return finished


_REBUILD = {
    "messages_fts": "INSERT INTO messages_fts(messages_fts) VALUES ('rebuild')",
    "messages_fts_trigram": "INSERT INTO messages_fts_trigram(messages_fts_trigram) "
    "VALUES ('rebuild')",
}
_STRUCTURE_ROWID = 10  # FTS5 keeps the index's structure record at this id of `_data`
_RESET = {
    "messages_fts": (
        "INSERT OR REPLACE INTO messages_fts_data(id, block) VALUES (:id, :block)",
        "INSERT OR REPLACE INTO messages_fts_config(k, v) VALUES ('version', :version)",
    ),
    "messages_fts_trigram": (
        "INSERT OR REPLACE INTO messages_fts_trigram_data(id, block) VALUES (:id, :block)",
        "INSERT OR REPLACE INTO messages_fts_trigram_config(k, v) VALUES ('version', :version)",
    ),
}


def _empty_index_records(conn: Connection) -> dict[str, object]:
    """The structure record and format version of an empty FTS5 index, as this SQLite
    writes them (taken from a throwaway temp table rather than spelled out here, so they
    always match the linked library)."""
    conn.exec_driver_sql("CREATE VIRTUAL TABLE temp._hermes_empty_fts5 USING fts5(x)")
    try:
        block = conn.execute(
            text("SELECT block FROM temp._hermes_empty_fts5_data WHERE id = :id"),
            {"id": _STRUCTURE_ROWID},
        ).scalar()
        version = conn.exec_driver_sql(
            "SELECT v FROM temp._hermes_empty_fts5_config WHERE k = 'version'"
        ).scalar()
    finally:
        conn.exec_driver_sql("DROP TABLE temp._hermes_empty_fts5")
    return {"id": _STRUCTURE_ROWID, "block": block, "version": version}


def _rebuild_index(conn: Connection, table: str) -> None:
    """FTS5 'rebuild' of one index. FTS5 cannot open an index whose structure record or
    format version is garbage, so not even 'rebuild' runs on it; then those two records
    are reset to an empty index's first ('rebuild' empties the index before refilling
    it, so nothing of the old index survives either way)."""
    try:
        with conn.begin_nested():
            conn.exec_driver_sql(_REBUILD[table])
        return
    except DBAPIError as exc:
        if classify(exc) != "fts":
            raise
    records = _empty_index_records(conn)
    for statement in _RESET[table]:
        conn.execute(text(statement), records)
    conn.exec_driver_sql(_REBUILD[table])


def _rebuild_both(conn: Connection) -> None:
    with conn.begin():
        for table in _REBUILD:
            _rebuild_index(conn, table)
        conn.execute(
            text("DELETE FROM state_meta WHERE key IN (:h, :p)"),
            {"h": HIGH_WATER, "p": PROGRESS},
        )


def rebuild(engine: Engine, retry: RetryPolicy = DEFAULT_RETRY) -> None:
    """A full FTS5 'rebuild' of both indexes in one transaction (holds the write lock for
    as long as it takes: use it to repair, not on a busy gateway), then drop the markers."""
    with write_connection(engine) as conn:
        retry.run(lambda: _rebuild_both(conn))
        while retry.run(lambda: teardown_step(conn)):
            pass
        retry.run(lambda: settle(conn))


def _optimize_both(conn: Connection) -> int:
    with conn.begin():
        conn.exec_driver_sql("INSERT INTO messages_fts(messages_fts) VALUES ('optimize')")
        conn.exec_driver_sql(
            "INSERT INTO messages_fts_trigram(messages_fts_trigram) VALUES ('optimize')"
        )
    return 2


def optimize_indexes(engine: Engine, retry: RetryPolicy = DEFAULT_RETRY) -> int:
    """FTS5 'optimize' on each index; returns how many were optimised."""
    with write_connection(engine) as conn:
        return retry.run(lambda: _optimize_both(conn))


def integrity_errors(conn: Connection) -> list[str]:
    """FTS5 integrity-check with rank=1 (also compares the index with its content table)
    on both indexes; returns one line per failing index."""
    errors = []
    checks = {
        "messages_fts": "INSERT INTO messages_fts(messages_fts, rank) "
        "VALUES ('integrity-check', 1)",
        "messages_fts_trigram": "INSERT INTO messages_fts_trigram(messages_fts_trigram, rank) "
        "VALUES ('integrity-check', 1)",
    }
    for table, statement in checks.items():
        try:
            with conn.begin_nested() if conn.in_transaction() else conn.begin():
                conn.exec_driver_sql(statement)
        except Exception as exc:  # noqa: BLE001 (any failure is the report)
            errors.append(f"{table}: {exc.__class__.__name__}: {getattr(exc, 'orig', exc)}")
    return errors
