"""The write and read path in each journal mode a state.db meets, in one run.

    python -m benchmarks.journal_modes [--size quick|10k|100k] [--iterations N]

Three copies of one generated database, each driven by a child process of its own (the
SQLite library is chosen once per process, hermes_store.sqlite.driver):

- DELETE, the standard library's SQLite (what a new file gets on a SQLite with the
  WAL-reset bug, 3.40 here): the baseline of the ratios;
- WAL, the standard library's SQLite (a file the original made WAL elsewhere);
- WAL, pysqlite3's bundled SQLite (the `sqlite` extra; skipped when not installed).

Rows: create a session, append one message, load a conversation, list 20 recent
sessions, each p50 / p99 in milliseconds, plus one row per mode for appends while another
process keeps a read open for 200 ms at a time (the writer waits in DELETE mode only).
`python -m benchmarks` prints this table too.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from . import corpus
from .raw_floor import bulk_load, connect, create_schema

VARIANTS: tuple[tuple[str, str, str], ...] = (
    ("DELETE, sqlite3", "delete", "sqlite3"),
    ("WAL, sqlite3", "wal", "sqlite3"),
    ("WAL, pysqlite3", "wal", "pysqlite3"),
)


def _percentiles(samples: list[float]) -> dict[str, float]:
    ordered = sorted(samples)
    p99 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]
    return {"p50_ms": statistics.median(ordered) * 1000, "p99_ms": p99 * 1000}


def _child(path: Path, iterations: int) -> dict[str, Any]:
    """Run in the child: the measurements on `path` with this process's driver."""
    from hermes_store.repositories.messages import MessageRepository
    from hermes_store.repositories.sessions import SessionRepository
    from hermes_store.sqlite import driver as sqlite_driver
    from hermes_store.store import Store

    results: dict[str, Any] = {"driver": sqlite_driver.current().sqlite_version_text}
    with Store(str(path)) as store:
        sessions, messages = SessionRepository(store), MessageRepository(store)
        with store.read() as conn:
            results["journal_mode"] = conn.exec_driver_sql("PRAGMA journal_mode").scalar()
            ids = [r[0] for r in conn.exec_driver_sql("SELECT id FROM sessions LIMIT 64")]

        def timed(fn: Any) -> dict[str, float]:
            for i in range(3):
                fn(-1 - i)
            samples = []
            for i in range(iterations):
                started = time.perf_counter()
                fn(i)
                samples.append(time.perf_counter() - started)
            return _percentiles(samples)

        results["create session"] = timed(
            lambda i: sessions.create_session(f"bench-{i}", "cli", model="hermes-4")
        )
        results["append one"] = timed(
            lambda i: messages.append_message(ids[i % len(ids)], "user", f"benchmark {i}")
        )
        results["get messages"] = timed(lambda i: messages.get_messages(ids[i % len(ids)]))
        results["list 20 recent sessions"] = timed(lambda i: sessions.list_sessions_rich(limit=20))
        results["append beside a reader"] = _beside_a_reader(path, messages, ids, iterations)
    return results


_READER = """
import sys, time
from hermes_store.store import Store
store = Store(sys.argv[1], read_only=True)
deadline = time.monotonic() + float(sys.argv[2])
print("reading", flush=True)
while time.monotonic() < deadline:
    with store.read() as conn:
        conn.exec_driver_sql("SELECT count(*) FROM messages").all()
        time.sleep(0.2)
    time.sleep(0.05)
store.close()
"""


def _beside_a_reader(
    path: Path, messages: Any, ids: list[str], iterations: int
) -> dict[str, float]:
    reader = subprocess.Popen(
        [sys.executable, "-c", _READER, str(path), "600"],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert reader.stdout is not None and reader.stdout.readline().strip() == "reading"
        samples = []
        for i in range(max(10, iterations // 10)):
            started = time.perf_counter()
            messages.append_message(ids[i % len(ids)], "user", f"beside {i}")
            samples.append(time.perf_counter() - started)
            time.sleep(0.01)
        return _percentiles(samples)
    finally:
        reader.kill()
        reader.wait()


def _pysqlite3_installed() -> bool:
    try:
        import pysqlite3  # type: ignore[import-untyped]  # noqa: F401
    except ImportError:
        return False
    return True


def run(directory: Path, base: Path, iterations: int) -> list[dict[str, Any]]:
    """One result per variant (skipped variants carry the reason)."""
    out: list[dict[str, Any]] = []
    for label, mode, driver in VARIANTS:
        if driver == "pysqlite3" and not _pysqlite3_installed():
            out.append({"variant": label, "skipped": "pysqlite3 not installed (the sqlite extra)"})
            continue
        copy = directory / f"journal-{mode}-{driver}.db"
        shutil.copyfile(base, copy)
        con = sqlite3.connect(str(copy), isolation_level=None)
        con.execute(f"PRAGMA journal_mode={mode}")
        con.close()
        env = {**os.environ, "HERMES_STORE_SQLITE_DRIVER": driver}
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "benchmarks.journal_modes",
                "--child",
                str(copy),
                "--iterations",
                str(iterations),
            ],
            capture_output=True,
            text=True,
            env=env,
            check=False,
        )
        if done.returncode != 0:
            raise SystemExit(f"journal-mode benchmark {label} failed:\n{done.stderr}")
        out.append({"variant": label, **json.loads(done.stdout.strip().splitlines()[-1])})
    return out


OPERATIONS = (
    "create session",
    "append one",
    "get messages",
    "list 20 recent sessions",
    "append beside a reader",
)


def print_table(results: list[dict[str, Any]]) -> None:
    measured = [r for r in results if "skipped" not in r]
    if not measured:
        return
    base = measured[0]
    print(f"\njournal modes (ratios against {base['variant']}, p50; p50 / p99 ms)")
    head = [
        "operation",
        *(r["variant"] + f" ({r['driver']}, {r['journal_mode']})" for r in measured),
    ]
    lines = []
    for op in OPERATIONS:
        cells = [op]
        for r in measured:
            ratio = r[op]["p50_ms"] / base[op]["p50_ms"]
            cells.append(f"{r[op]['p50_ms']:7.3f} / {r[op]['p99_ms']:7.3f}  {ratio:4.2f}x")
        lines.append(cells)
    widths = [max(len(row[i]) for row in (head, *lines)) for i in range(len(head))]
    print(" | ".join(c.ljust(w) for c, w in zip(head, widths, strict=True)))
    print("-+-".join("-" * w for w in widths))
    for cells in lines:
        print(" | ".join(c.ljust(w) for c, w in zip(cells, widths, strict=True)))
    for r in results:
        if "skipped" in r:
            print(f"{r['variant']}: skipped ({r['skipped']})")


def build_base(directory: Path, size: str, seed: int = 23) -> Path:
    sessions = corpus.generate(corpus.SIZES[size], seed=seed)
    base = directory / "journal-base.db"
    create_schema(base)
    conn = connect(base)
    bulk_load(conn, sessions)
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.close()
    return base


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.journal_modes", description=__doc__)
    parser.add_argument("--size", choices=tuple(corpus.SIZES), default="10k")
    parser.add_argument("--iterations", type=int, default=500)
    parser.add_argument("--child", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child is not None:
        print(json.dumps(_child(args.child, args.iterations)))
        return 0
    with tempfile.TemporaryDirectory(prefix="hermes-journal-") as tmp:
        base = build_base(Path(tmp), args.size)
        print_table(run(Path(tmp), base, args.iterations))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
