"""Run `migrate.upgrade(url, fts_min_pause=0)` in its own process and print a JSON line:
total time, peak RSS, and the time of every write transaction, by wrapping the functions
that run them: the migration transaction (from its BEGIN IMMEDIATE to the return of
`command.upgrade`, which commits it), each backfill step, each teardown step and the small
ones around them (trigger repair, CJK detach, settle).

Usage: python -m benchmarks.upgrade_child PATH [--throttle]

Without --throttle the backfill runs with pause_factor=0, so the total is the work itself;
hermes-store's default throttle (like the original's) sleeps max(min_pause, 4 x step) after
every step to let other writers in, which would make the total about five times the work.
"""

from __future__ import annotations

import json
import resource
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any


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


def _quantile(samples: list[float], q: float) -> float:
    if not samples:
        return 0.0
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


def main(path: str, throttle: bool = False) -> None:
    from alembic import command
    from sqlalchemy import event
    from sqlalchemy.engine import Connection

    from hermes_store import migrate
    from hermes_store.search import maintenance

    baseline_kb = _peak_rss_kb()
    migration: list[float] = []
    steps: list[float] = []
    teardown: list[float] = []
    other: list[float] = []
    begins: list[float] = []

    @event.listens_for(Connection, "begin")
    def _on_begin(conn: Connection) -> None:
        begins.append(time.perf_counter())

    upgrade = command.upgrade

    def migration_txn(*args: Any, **kwargs: Any) -> Any:
        called = time.perf_counter()
        mark = len(begins)
        try:
            return upgrade(*args, **kwargs)
        finally:
            # from the transaction's BEGIN (after the scripts were loaded) to its COMMIT
            start = begins[mark] if len(begins) > mark else called
            migration.append(time.perf_counter() - start)

    command.upgrade = migration_txn  # type: ignore[assignment]
    maintenance.backfill_step = _timed(maintenance.backfill_step, steps)  # type: ignore[assignment]
    maintenance.teardown_step = _timed(maintenance.teardown_step, teardown)  # type: ignore[assignment]
    for name in ("settle", "restore_missing_triggers", "detach_cjk_triggers"):
        setattr(maintenance, name, _timed(getattr(maintenance, name), other))
    if not throttle:
        run_backfill = maintenance.run_backfill

        def unthrottled(*args: Any, **kwargs: Any) -> Any:
            kwargs["pause_factor"] = 0.0
            return run_backfill(*args, **kwargs)

        maintenance.run_backfill = unthrottled  # type: ignore[assignment]
    started = time.perf_counter()
    report = migrate.upgrade(path, fts_min_pause=0)
    total = time.perf_counter() - started
    peak_kb = _peak_rss_kb()
    kinds = {"migration": migration, "backfill": steps, "teardown": teardown, "other": other}
    longest_kind, longest = max(
        ((kind, max(log)) for kind, log in kinds.items() if log),
        key=lambda item: item[1],
        default=("none", 0.0),
    )
    print(
        json.dumps(
            {
                "total_s": total,
                "migration_txn_s": sum(migration),
                "backfill_steps": len(steps),
                "backfill_s": sum(steps),
                "teardown_steps": len(teardown),
                "teardown_s": sum(teardown),
                "other_txns": len(other),
                "other_s": sum(other),
                "longest_write_txn_s": longest,
                "longest_write_txn_kind": longest_kind,
                "longest_backfill_step_s": max(steps) if steps else 0.0,
                "longest_teardown_step_s": max(teardown) if teardown else 0.0,
                "backfill_step_p50_s": _quantile(steps, 0.5),
                "backfill_step_p99_s": _quantile(steps, 0.99),
                "teardown_step_p50_s": _quantile(teardown, 0.5),
                "teardown_step_p99_s": _quantile(teardown, 0.99),
                "peak_rss_mb": peak_kb / 1024,
                "baseline_rss_mb": baseline_kb / 1024,
                "throttled": throttle,
                "after": report.after,
                "adopted_from": report.adopted_from,
            }
        )
    )


if __name__ == "__main__":
    main(sys.argv[1], throttle="--throttle" in sys.argv[2:])
