"""The fixed cost of one-statement calls: a point read and a one-UPDATE write through
hermes-store's layers, against the raw driver in the same process and run.

    python -m benchmarks.point_calls [--drivers sqlite3,pysqlite3] [--samples 40]
                                     [--batch 200] [--json PATH]

One child process per SQLite driver (`HERMES_STORE_SQLITE_DRIVER`), on a fresh file at
head in the journal mode the store picks. Reads: the raw floor is what the original
Hermes `SessionDB` pays, a threading lock around `conn.execute(sql, params).fetchone()`
on a long-lived connection of the same driver; then `Store.read_one` of the same
statement, and the facade's `get_meta` and `get_handoff_state`. Writes: the raw floor
is a lock around BEGIN IMMEDIATE, one UPDATE, COMMIT; then `Store.write_one` of the
same UPDATE and the facade's `end_session`, each on an ended session (so no row
changes: the write path's own cost, not the change feed's). Each sample is the calling
thread's CPU time (`time.thread_time`) for `--batch` calls in a row, divided by it;
the paths run in rotation, sample by sample. Rows: CPU p50 in microseconds per call and
the ratio to the raw floor of its kind.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .stats import load_average

DRIVERS = ("sqlite3", "pysqlite3")
READ_SQL = "SELECT value FROM state_meta WHERE key = ?"
WRITE_SQL = "UPDATE sessions SET ended_at = ?, end_reason = ? WHERE id = ? AND ended_at IS NULL"


def _paths(directory: Path) -> tuple[dict[str, Callable[[], Any]], dict[str, str], Any]:
    """The timed calls by name, the floor each row is compared with, and what to close."""
    from sqlalchemy import text

    from hermes_store.compat import SessionDB
    from hermes_store.runtime.engine import Prepared, first_value

    db = SessionDB(directory / "state.db")
    store = db._store
    store.sessions.create_session("s1", "cli", model="m")
    store.sessions.end_session("s1", "done")
    store.meta.set_meta("k", "v")
    raw = store.engine.dialect.loaded_dbapi.connect(
        str(directory / "state.db"), check_same_thread=False, isolation_level=None
    )
    lock = threading.Lock()
    read = Prepared(text("SELECT value FROM state_meta WHERE key = :key"))
    write = Prepared(
        text(
            "UPDATE sessions SET ended_at = :at, end_reason = :reason "
            "WHERE id = :sid AND ended_at IS NULL"
        )
    )

    def raw_read() -> Any:
        with lock:
            row = raw.execute(READ_SQL, ("k",)).fetchone()
        return None if row is None else row[0]

    def raw_write() -> None:
        with lock:
            raw.execute("BEGIN IMMEDIATE")
            try:
                raw.execute(WRITE_SQL, (time.time(), "again", "s1"))
                raw.execute("COMMIT")
            except BaseException:
                raw.execute("ROLLBACK")
                raise

    paths: dict[str, Callable[[], Any]] = {
        "read: raw driver + lock": raw_read,
        "read: Store.read_one": lambda: store.read_one(read, {"key": "k"}, first_value),
        "read: facade get_meta": lambda: db.get_meta("k"),
        "read: facade get_handoff_state": lambda: db.get_handoff_state("s1"),
        "write: raw driver + lock": raw_write,
        "write: Store.write_one": lambda: store.write_one(
            write, {"at": time.time(), "reason": "again", "sid": "s1"}
        ),
        "write: facade end_session": lambda: db.end_session("s1", "again"),
    }
    floors = {
        name: ("read: raw driver + lock" if name.startswith("read") else "write: raw driver + lock")
        for name in paths
    }

    def close() -> None:
        raw.close()
        db.close()

    return paths, floors, close


def measure(samples: int, batch: int) -> dict[str, Any]:
    """Every path's per-call CPU p50 (µs) in this process's driver, and its ratio."""
    from hermes_store.sqlite import driver as sqlite_driver

    with tempfile.TemporaryDirectory() as tmp:
        paths, floors, close = _paths(Path(tmp))
        try:
            for fn in paths.values():  # warm caches, kept connections, compiled statements
                for _ in range(batch):
                    fn()
            cpu: dict[str, list[float]] = {name: [] for name in paths}
            gc.collect()
            for _ in range(samples):
                for name, fn in paths.items():
                    started = time.thread_time()
                    for _ in range(batch):
                        fn()
                    cpu[name].append((time.thread_time() - started) / batch * 1e6)
        finally:
            close()
    p50 = {name: statistics.median(values) for name, values in cpu.items()}
    chosen = sqlite_driver.current()
    return {
        "driver": chosen.name,
        "sqlite_version": chosen.sqlite_version_text,
        "rows": [
            {"path": name, "cpu_p50_us": p50[name], "ratio": p50[name] / p50[floors[name]]}
            for name in paths
        ],
        "samples": samples,
        "batch": batch,
        "load": load_average(),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--drivers", default=",".join(DRIVERS))
    parser.add_argument("--samples", type=int, default=40)
    parser.add_argument("--batch", type=int, default=200)
    parser.add_argument("--json", type=Path)
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        print(json.dumps(measure(args.samples, args.batch)))
        return 0
    results = []
    for driver in args.drivers.split(","):
        proc = subprocess.run(
            [sys.executable, "-m", "benchmarks.point_calls", "--child"]
            + ["--samples", str(args.samples), "--batch", str(args.batch)],
            env={**os.environ, "HERMES_STORE_SQLITE_DRIVER": driver},
            capture_output=True,
            text=True,
            check=False,
        )
        if proc.returncode != 0:
            print(f"{driver}: failed\n{proc.stderr}", file=sys.stderr)
            return 1
        result = json.loads(proc.stdout.strip().splitlines()[-1])
        results.append(result)
        print(
            f"\n{result['driver']} (SQLite {result['sqlite_version']}; CPU p50 per call, "
            f"{result['samples']} samples of {result['batch']} calls; load {result['load']:.1f})"
        )
        print(f"  {'path':34s} {'cpu us':>8s} {'ratio':>7s}")
        for row in result["rows"]:
            print(f"  {row['path']:34s} {row['cpu_p50_us']:8.2f} {row['ratio']:6.2f}x")
    if args.json:
        args.json.write_text(json.dumps({"point_calls": results}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
