"""Run `migrate.upgrade(url, fts_min_pause=0)` in its own process and print a JSON line:
total time, peak RSS, and the time of every write transaction (the Alembic upgrade and
each backfill / teardown step), by wrapping the functions that run them.

Usage: python -m benchmarks.upgrade_child PATH
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


def main(path: str) -> None:
    from alembic import command

    from hermes_store import migrate
    from hermes_store.search import maintenance

    baseline_kb = _peak_rss_kb()
    migration: list[float] = []
    steps: list[float] = []
    teardown: list[float] = []
    command.upgrade = _timed(command.upgrade, migration)  # type: ignore[assignment]
    maintenance.backfill_step = _timed(maintenance.backfill_step, steps)  # type: ignore[assignment]
    maintenance.teardown_step = _timed(maintenance.teardown_step, teardown)  # type: ignore[assignment]
    started = time.perf_counter()
    report = migrate.upgrade(path, fts_min_pause=0)
    total = time.perf_counter() - started
    peak_kb = _peak_rss_kb()
    writes = migration + steps + teardown
    print(
        json.dumps(
            {
                "total_s": total,
                "migration_txn_s": sum(migration),
                "backfill_steps": len(steps),
                "backfill_s": sum(steps),
                "teardown_steps": len(teardown),
                "teardown_s": sum(teardown),
                "longest_write_txn_s": max(writes) if writes else 0.0,
                "longest_backfill_step_s": max(steps) if steps else 0.0,
                "peak_rss_mb": peak_kb / 1024,
                "baseline_rss_mb": baseline_kb / 1024,
                "after": report.after,
                "adopted_from": report.adopted_from,
            }
        )
    )


if __name__ == "__main__":
    main(sys.argv[1])
