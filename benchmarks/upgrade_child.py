"""The two processes of the upgrade rows, each run as `python -m benchmarks.upgrade_child`.

Upgrade (default): `migrate.upgrade(PATH)` as `hermes-store upgrade` runs it, and a JSON
line: total time, peak RSS, and the time of every write transaction, by wrapping the
functions that run them: the migration transaction (from its BEGIN IMMEDIATE to the return
of `command.upgrade`, which commits it), each backfill step, each teardown step and the
small ones around them (trigger repair, CJK detach, settle); and how often the backfill
paused to let other writers in (alone / shared regime, maintenance.Pacing).

    python -m benchmarks.upgrade_child PATH [--pacing default|unpaced|original]

`default` is what a user gets; `unpaced` measures the work alone (no pause at all);
`original` is the original's throttle, max(0.2 s, 4 x step) after every step.

Appender (`--append`): a stand-in for a running Hermes, written here after the original's
v23 write path (docs/reference/behaviour.md 16.1): one sqlite3 connection with a 1 s busy timeout,
each append one BEGIN IMMEDIATE transaction (a message row, the session's counter),
retried up to 15 times with 20-150 ms random sleeps on "locked"/"busy", a PASSIVE
checkpoint every 50 writes. It appends every INTERVAL seconds until STOP_FILE exists and
prints a JSON line: every append's latency (first attempt to commit) and the failures.

    python -m benchmarks.upgrade_child --append PATH INTERVAL STOP_FILE
"""

from __future__ import annotations

import json
import random
import resource
import sqlite3
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

PACINGS = ("default", "unpaced", "original")
ATTEMPTS = 15


def _timed(fn: Callable[..., Any], log: list[float]) -> Callable[..., Any]:
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        started = time.perf_counter()
        try:
            return fn(*args, **kwargs)
        finally:
            log.append(time.perf_counter() - started)

    return wrapper


def _peak_rss_kb() -> int:
    """This process's RSS high-water mark. VmHWM, not ru_maxrss: on Linux ru_maxrss
    survives exec, so it would report the (large) benchmark parent that forked us."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


def quantile(samples: list[float], q: float) -> float:
    if not samples:
        return 0.0
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


def upgrade(path: str, pacing_name: str = "default") -> dict[str, Any]:
    from alembic import command
    from sqlalchemy import event
    from sqlalchemy.engine import Connection

    from hermes_store import migrate
    from hermes_store.search import maintenance

    pacing = {
        "default": maintenance.DEFAULT_PACING,
        "unpaced": maintenance.Pacing.unpaced(),
        "original": maintenance.Pacing.fixed(0.2, 4.0),
    }[pacing_name]
    baseline_kb = _peak_rss_kb()
    migration: list[float] = []
    steps: list[float] = []
    teardown: list[float] = []
    other: list[float] = []
    begins: list[float] = []

    @event.listens_for(Connection, "begin")
    def _on_begin(conn: Connection) -> None:
        begins.append(time.perf_counter())

    run_upgrade = command.upgrade

    def migration_txn(*args: Any, **kwargs: Any) -> Any:
        called = time.perf_counter()
        mark = len(begins)
        try:
            return run_upgrade(*args, **kwargs)
        finally:
            # from the transaction's BEGIN (after the scripts were loaded) to its COMMIT
            start = begins[mark] if len(begins) > mark else called
            migration.append(time.perf_counter() - start)

    command.upgrade = migration_txn  # type: ignore[assignment]
    maintenance.backfill_step = _timed(maintenance.backfill_step, steps)  # type: ignore[assignment]
    maintenance.teardown_step = _timed(maintenance.teardown_step, teardown)  # type: ignore[assignment]
    for name in ("settle", "restore_missing_triggers", "detach_cjk_triggers"):
        setattr(maintenance, name, _timed(getattr(maintenance, name), other))
    started = time.perf_counter()
    cpu_started = time.process_time()
    report = migrate.upgrade(path, fts_pacing=pacing)
    total = time.perf_counter() - started
    cpu = time.process_time() - cpu_started
    peak_kb = _peak_rss_kb()
    stats = report.backfill or maintenance.BackfillStats()
    kinds = {"migration": migration, "backfill": steps, "teardown": teardown, "other": other}
    longest_kind, longest = max(
        ((kind, max(log)) for kind, log in kinds.items() if log),
        key=lambda item: item[1],
        default=("none", 0.0),
    )
    return {
        "pacing": pacing_name,
        "total_s": total,
        "cpu_s": cpu,
        "migration_txn_s": sum(migration),
        "backfill_steps": len(steps),
        "backfill_s": sum(steps),
        "teardown_steps": len(teardown),
        "teardown_s": sum(teardown),
        "other_txns": len(other),
        "other_s": sum(other),
        "pauses": stats.pauses,
        "shared_pauses": stats.shared_pauses,
        "paused_s": stats.paused_s,
        "foreign_commits_seen": stats.foreign_commits,
        "rows_indexed": stats.rows_indexed,
        "revisions_applied": len(report.revisions),
        "longest_write_txn_s": longest,
        "longest_write_txn_kind": longest_kind,
        "longest_backfill_step_s": max(steps) if steps else 0.0,
        "longest_teardown_step_s": max(teardown) if teardown else 0.0,
        "backfill_step_p50_s": quantile(steps, 0.5),
        "backfill_step_p99_s": quantile(steps, 0.99),
        "teardown_step_p50_s": quantile(teardown, 0.5),
        "teardown_step_p99_s": quantile(teardown, 0.99),
        "peak_rss_mb": peak_kb / 1024,
        "baseline_rss_mb": baseline_kb / 1024,
        "after": report.after,
        "adopted_from": report.adopted_from,
    }


def _is_lock_error(exc: sqlite3.OperationalError) -> bool:
    text = str(exc).lower()
    return "locked" in text or "busy" in text


def append(path: str, interval: float, stop_file: str) -> dict[str, Any]:
    """The appender loop (see the module docstring). Prints "ready" once it has appended
    once, so the parent starts the upgrade beside a writer that is already running."""
    con = sqlite3.connect(path, timeout=1.0, isolation_level=None)
    session = con.execute("SELECT id FROM sessions ORDER BY id LIMIT 1").fetchone()[0]
    latencies: list[float] = []
    retried = 0
    failures: list[str] = []
    rng = random.Random(16)
    stop = Path(stop_file)
    tick = time.monotonic()
    writes = 0
    while not stop.exists():
        started = time.perf_counter()
        for attempt in range(1, ATTEMPTS + 1):
            try:
                con.execute("BEGIN IMMEDIATE")
                con.execute(
                    "INSERT INTO messages (session_id, role, content, timestamp) "
                    "VALUES (?, 'user', ?, ?)",
                    (session, f"appended while upgrading, number {writes}", time.time()),
                )
                con.execute(
                    "UPDATE sessions SET message_count = message_count + 1 WHERE id = ?",
                    (session,),
                )
                con.execute("COMMIT")
                break
            except sqlite3.OperationalError as exc:
                if con.in_transaction:
                    con.execute("ROLLBACK")
                if not _is_lock_error(exc):
                    raise
                if attempt == ATTEMPTS:
                    failures.append(str(exc))
                    break
                retried += 1
                time.sleep(rng.uniform(0.020, 0.150))
        latencies.append(time.perf_counter() - started)
        writes += 1
        if writes == 1:
            print("ready", flush=True)
        if writes % 50 == 0:
            try:
                con.execute("PRAGMA wal_checkpoint(PASSIVE)")
            except sqlite3.OperationalError:
                pass  # the original logs and goes on
        tick += interval
        time.sleep(max(0.0, tick - time.monotonic()))
        tick = max(tick, time.monotonic() - interval)  # no burst to catch up after a wait
    con.close()
    return {
        "interval_s": interval,
        "appends": len(latencies),
        "failures": len(failures),
        "failure_errors": sorted(set(failures)),
        "retried_attempts": retried,
        "latency_p50_s": quantile(latencies, 0.5),
        "latency_p99_s": quantile(latencies, 0.99),
        "latency_max_s": max(latencies, default=0.0),
        "over_250ms": sum(1 for x in latencies if x > 0.250),
    }


def main(argv: list[str]) -> None:
    if argv and argv[0] == "--append":
        path, interval, stop_file = argv[1], float(argv[2]), argv[3]
        print(json.dumps(append(path, interval, stop_file)))
        return
    pacing = "default"
    if "--pacing" in argv:
        pacing = argv[argv.index("--pacing") + 1]
    if pacing not in PACINGS:
        raise SystemExit(f"unknown pacing {pacing!r}; known: {PACINGS}")
    print(json.dumps(upgrade(argv[0], pacing)))


if __name__ == "__main__":
    main(sys.argv[1:])
