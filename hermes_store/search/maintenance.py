"""FTS maintenance on SQLite: the chunked, resumable backfill of the v23 indexes with the
original's marker protocol, the trash teardown, a full rebuild and the integrity check.

Protocol (spec/schema.md 5.3): while `fts_rebuild_high_water` (H) exists, a row is
indexed iff id <= `fts_rebuild_progress` (P) or id > H. A step claims the next range
inside BEGIN IMMEDIATE by re-reading P, indexes ids in (P, min(P + 500, H)] and moves P,
all in one transaction, so processes of the original (or a second hermes-store) can run
steps too, and a killed run resumes where it stopped.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from sqlalchemy import Connection, Engine, text
from sqlalchemy.exc import DBAPIError

from ..engine import write_connection
from ..retry import DEFAULT_RETRY, RetryPolicy
from ..sqlite_damage import classify
from .layout import HIGH_WATER, PROGRESS, fts_state

CHUNK_IDS = 500
FINISH_WINDOW = 1000

_UPSERT_META = (
    "INSERT INTO state_meta (key, value) VALUES (:k, :v) "
    "ON CONFLICT (key) DO UPDATE SET value = excluded.value"
)


@dataclass(frozen=True)
class Progress:
    phase: str  # "backfill", "teardown", "done"
    indexed: int
    total: int

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
            _finish(conn, high)
            return Progress("done", high, high)
        upper = min(progress + chunk, high)
        window = {"lo": progress, "hi": upper}
        conn.execute(
            text(
                "INSERT INTO messages_fts(rowid, content, tool_name, tool_calls) "
                "SELECT id, content, tool_name, tool_calls FROM messages "
                "WHERE id > :lo AND id <= :hi"
            ),
            window,
        )
        conn.execute(
            text(
                "INSERT INTO messages_fts_trigram(rowid, content, tool_name, tool_calls) "
                "SELECT id, content, tool_name, tool_calls FROM messages "
                "WHERE id > :lo AND id <= :hi AND role <> 'tool'"
            ),
            window,
        )
        conn.execute(text(_UPSERT_META), {"k": PROGRESS, "v": str(upper)})
        if upper >= high:
            _finish(conn, high)
            return Progress("done", high, high)
        return Progress("backfill", upper, high)


def _reset_indexes(conn: Connection) -> int:
    """Empty both indexes and mark every existing row pending; returns the new H."""
    conn.exec_driver_sql("INSERT INTO messages_fts(messages_fts) VALUES ('delete-all')")
    conn.exec_driver_sql(
        "INSERT INTO messages_fts_trigram(messages_fts_trigram) VALUES ('delete-all')"
    )
    high = int(conn.exec_driver_sql("SELECT COALESCE(MAX(id), 0) FROM messages").scalar() or 0)
    if high:
        conn.execute(text(_UPSERT_META), {"k": HIGH_WATER, "v": str(high)})
        conn.execute(text(_UPSERT_META), {"k": PROGRESS, "v": "0"})
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
        conn.execute(text(_UPSERT_META), {"k": "fts_cjk_stale", "v": "1"})
        for name in present:
            conn.exec_driver_sql(f'DROP TRIGGER IF EXISTS "{name}"')
        return True


def _finish(conn: Connection, high: int) -> None:
    """Index any row near H that neither the backfill nor a trigger indexed, then drop
    the markers (inside the caller's transaction)."""
    window = {"lo": high - FINISH_WINDOW, "hi": high + FINISH_WINDOW}
    conn.execute(
        text(
            "INSERT INTO messages_fts(rowid, content, tool_name, tool_calls) "
            "SELECT id, content, tool_name, tool_calls FROM messages "
            "WHERE id > :lo AND id <= :hi "
            "AND id NOT IN (SELECT id FROM messages_fts_docsize)"
        ),
        window,
    )
    conn.execute(
        text(
            "INSERT INTO messages_fts_trigram(rowid, content, tool_name, tool_calls) "
            "SELECT id, content, tool_name, tool_calls FROM messages "
            "WHERE id > :lo AND id <= :hi AND role <> 'tool' "
            "AND id NOT IN (SELECT id FROM messages_fts_trigram_docsize)"
        ),
        window,
    )
    conn.execute(
        text("DELETE FROM state_meta WHERE key IN (:h, :p)"), {"h": HIGH_WATER, "p": PROGRESS}
    )


def teardown_step(conn: Connection, chunk: int = CHUNK_IDS) -> bool:
    """Delete up to `chunk` rows of the first leftover `fts_v22_trash_*` table (dropping it
    once empty). Returns False when no trash is left."""
    with conn.begin():
        trash = fts_state(conn).trash_tables
        if not trash:
            return False
        table = trash[0]
        # Trash holds renamed FTS shadow tables; `_idx` and `_config` are WITHOUT ROWID,
        # so rows are addressed by their primary key where there is one.
        info = conn.exec_driver_sql(f'PRAGMA table_info("{table}")').mappings().all()
        pk = [f'"{r["name"]}"' for r in sorted(info, key=lambda r: r["pk"]) if r["pk"]]
        key = ", ".join(pk) if pk else "rowid"
        deleted = conn.exec_driver_sql(
            f'DELETE FROM "{table}" WHERE ({key}) IN '  # noqa: S608 (names from sqlite_master)
            f'(SELECT {key} FROM "{table}" LIMIT {int(chunk)})'
        ).rowcount
        if not deleted:
            conn.exec_driver_sql(f'DROP TABLE "{table}"')
        return True


def settle(conn: Connection) -> bool:
    """Stamp `fts_storage_version` = '1' once the v23 layout is complete."""
    with conn.begin():
        state = fts_state(conn)
        if state.layout != "v23" or state.backfill_pending or state.trash_tables:
            return False
        conn.execute(text(_UPSERT_META), {"k": "fts_storage_version", "v": "1"})
        conn.execute(text("DELETE FROM state_meta WHERE key = 'fts_optimize_available'"))
        return True


def run_backfill(
    engine: Engine,
    *,
    on_progress: ProgressCallback | None = None,
    min_pause: float = 0.2,
    pause_factor: float = 4.0,
    retry: RetryPolicy = DEFAULT_RETRY,
    max_steps: int | None = None,
) -> Progress:
    """Backfill, tear down trash, settle; returns the last progress (phase "done" when
    finished). Between steps it sleeps max(min_pause, pause_factor x step time), the
    original's throttle, so other writers get the lock. `max_steps` stops early."""
    steps = 0

    def step(work: Callable[[], Progress]) -> Progress:
        nonlocal steps
        started = time.monotonic()
        result = retry.run(work)
        steps += 1
        if on_progress is not None:
            on_progress(result)
        if result.phase != "done":
            time.sleep(max(min_pause, pause_factor * (time.monotonic() - started)))
        return result

    def out_of_steps() -> bool:
        return max_steps is not None and steps >= max_steps

    def teardown(conn: Connection) -> Progress:
        return Progress("teardown", 0, 0) if teardown_step(conn) else Progress("done", 0, 0)

    with write_connection(engine) as conn:
        last = Progress("backfill", 0, 0)
        while last.phase != "done":
            if out_of_steps():
                return last
            last = step(lambda: backfill_step(conn))
        finished = last
        while True:
            if out_of_steps():
                return Progress("teardown", finished.indexed, finished.total)
            if step(lambda: teardown(conn)).phase == "done":
                break
        retry.run(lambda: settle(conn))
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


def rebuild(engine: Engine, retry: RetryPolicy = DEFAULT_RETRY) -> None:
    """A full FTS5 'rebuild' of both indexes in one transaction (holds the write lock for
    as long as it takes: use it to repair, not on a busy gateway), then drop the markers."""

    def work(conn: Connection) -> None:
        with conn.begin():
            for table in _REBUILD:
                _rebuild_index(conn, table)
            conn.execute(
                text("DELETE FROM state_meta WHERE key IN (:h, :p)"),
                {"h": HIGH_WATER, "p": PROGRESS},
            )

    with write_connection(engine) as conn:
        retry.run(lambda: work(conn))
        while retry.run(lambda: teardown_step(conn)):
            pass
        retry.run(lambda: settle(conn))


def optimize_indexes(engine: Engine, retry: RetryPolicy = DEFAULT_RETRY) -> int:
    """FTS5 'optimize' on each index; returns how many were optimised."""

    def work(conn: Connection) -> int:
        with conn.begin():
            conn.exec_driver_sql("INSERT INTO messages_fts(messages_fts) VALUES ('optimize')")
            conn.exec_driver_sql(
                "INSERT INTO messages_fts_trigram(messages_fts_trigram) VALUES ('optimize')"
            )
        return 2

    with write_connection(engine) as conn:
        return retry.run(lambda: work(conn))


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
