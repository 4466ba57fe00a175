"""What one SQLite append costs, part by part.

    python -m benchmarks.append_parts [--appends 2000] [--json PATH]

On a file at head (this process's SQLite driver, the journal mode it gives new files)
with 100 sessions, in rotation call by call:

- `append_message`, the repository call;
- the statements it sends (recorded from it), replayed on the raw driver connection,
  each timed on its own: BEGIN IMMEDIATE, the INSERT (which checks the session, its
  state and its compression lease itself), the counters' UPDATE, COMMIT;
- the same replay on copies of the file without one group of triggers each: the v23
  FTS5 indexes' (`messages_fts*`), the change feed's (`hermes_store_feed_*`) and the
  session activity's (`hermes_store_activity_*`), so that a group's cost is the
  difference from the full replay: in the statements' time before COMMIT (where
  triggers run) and in the whole replay (which adds the fsync, noisy on a shared disk).

The repository call minus the full replay is hermes-store's Python (encoding, the unit
of work, SQLAlchemy's share). Each part is also timed in CPU time (time.thread_time),
which other processes on a shared machine disturb less than the wall clock; the fsync's
wait is in the wall clock only. Never run in CI.
"""

from __future__ import annotations

import argparse
import gc
import json
import shutil
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from .stats import load_average

STATEMENT_NAMES = {"SELECT": "session and lease", "INSERT": "INSERT", "UPDATE": "UPDATE counters"}
TRIGGER_GROUPS = {
    "v23 FTS5 triggers": "messages_fts%",
    "change-feed triggers": "hermes_store_feed_%",
    "activity triggers": "hermes_store_activity_%",
}
SESSIONS = 100


def _record_append(url: str) -> list[tuple[str, Any]]:
    """The statements (and parameters) one append_message sends after BEGIN."""
    from sqlalchemy import event

    from hermes_store.repositories.messages import MessageRepository
    from hermes_store.store import Store

    store = Store(url)
    seen: list[tuple[str, Any]] = []

    def record(conn: Any, cursor: Any, statement: str, params: Any, *rest: Any) -> None:
        seen.append((statement, params))

    event.listen(store.engine, "before_cursor_execute", record)
    MessageRepository(store).append_message("s0", "user", "recorded")
    store.close()
    return [(sql, params) for sql, params in seen if not sql.startswith("BEGIN")]


def run(appends: int) -> dict[str, Any]:
    from hermes_store import migrate
    from hermes_store.repositories.messages import MessageRepository
    from hermes_store.repositories.sessions import SessionRepository
    from hermes_store.sqlite import driver as sqlite_driver
    from hermes_store.store import Store

    driver = sqlite_driver.current()
    with tempfile.TemporaryDirectory(prefix="hermes-append-parts-") as tmp:
        base = Path(tmp) / "base.db"
        url = f"sqlite:///{base}"
        migrate.upgrade(url, fts_min_pause=0)
        with Store(url) as store:
            for i in range(SESSIONS):
                SessionRepository(store).create_session(f"s{i}", "cli")
        statements = _record_append(url)
        steps_named = (
            "BEGIN IMMEDIATE",
            *(
                STATEMENT_NAMES.get(sql.split(None, 1)[0].upper(), sql[:20])
                for sql, _ in statements
            ),
            "COMMIT",
        )
        copies: dict[str, Path] = {"full replay": Path(tmp) / "replay.db"}
        for group in TRIGGER_GROUPS:
            copies[f"replay without {group}"] = Path(tmp) / f"{len(copies)}.db"
        for path in copies.values():
            shutil.copyfile(base, path)
        raw: dict[str, Any] = {}
        for (name, path), pattern in zip(
            copies.items(), (None, *TRIGGER_GROUPS.values()), strict=True
        ):
            conn = driver.connect(str(path), isolation_level=None, check_same_thread=False)
            conn.execute("PRAGMA foreign_keys=ON")
            conn.execute("PRAGMA recursive_triggers=ON")
            if pattern is not None:
                names = [
                    r[0]
                    for r in conn.execute(
                        "SELECT name FROM sqlite_master WHERE type = 'trigger' AND name LIKE ?",
                        (pattern,),
                    )
                ]
                for trigger in names:
                    conn.execute(f'DROP TRIGGER "{trigger}"')
            raw[name] = conn
        store = Store(url)
        repo = MessageRepository(store)
        mode = store.engine.connect().exec_driver_sql("PRAGMA journal_mode").scalar()
        samples: dict[str, list[float]] = {"append_message": [], **{n: [] for n in raw}}
        cpu: dict[str, list[float]] = {"append_message": [], "full replay": []}
        # the statements' time before COMMIT: triggers run there, the fsync does not
        inside: dict[str, list[float]] = {n: [] for n in raw}
        steps: list[list[float]] = [[] for _ in steps_named]

        def replay(conn: Any, n: int, timed: bool) -> float:
            sid = f"s{n % SESSIONS}"
            marks = [time.perf_counter()]
            conn.execute("BEGIN IMMEDIATE")
            marks.append(time.perf_counter())
            for sql, params in statements:
                bound = tuple(sid if p == "s0" else p for p in params)
                conn.execute(sql, bound).fetchall()
                marks.append(time.perf_counter())
            conn.execute("COMMIT")
            marks.append(time.perf_counter())
            if timed:
                for i, (a, b) in enumerate(zip(marks, marks[1:], strict=False)):
                    steps[i].append(b - a)
            return marks[-2] - marks[0]

        gc.collect()
        for n in range(-20, appends):
            started, spent = time.perf_counter(), time.thread_time()
            repo.append_message(f"s{n % SESSIONS}", "user", f"message {n}")
            if n >= 0:
                samples["append_message"].append(time.perf_counter() - started)
                cpu["append_message"].append(time.thread_time() - spent)
            for name, conn in raw.items():
                started, spent = time.perf_counter(), time.thread_time()
                before_commit = replay(conn, n, timed=n >= 0 and name == "full replay")
                if n >= 0:
                    samples[name].append(time.perf_counter() - started)
                    inside[name].append(before_commit)
                    if name in cpu:
                        cpu[name].append(time.thread_time() - spent)
        store.close()
        for conn in raw.values():
            conn.close()
    p50 = {name: statistics.median(t) * 1e6 for name, t in samples.items()}
    rows = {"append_message (the repository call)": p50["append_message"]}
    rows["of which hermes-store's Python"] = p50["append_message"] - p50["full replay"]
    rows["the statements replayed"] = p50["full replay"]
    for step, taken in zip(steps_named, steps, strict=True):
        rows[f"  {step}"] = statistics.median(taken) * 1e6
    within = {name: statistics.median(t) * 1e6 for name, t in inside.items()}
    rows["  the statements before COMMIT"] = within["full replay"]
    for group in TRIGGER_GROUPS:
        # the statements' time without them; the whole replay's difference also holds
        # the pages they add to the COMMIT's write
        rows[f"    of which {group}"] = within["full replay"] - within[f"replay without {group}"]
        rows[f"    {group}, whole replay"] = p50["full replay"] - p50[f"replay without {group}"]
    cpu_p50 = {name: statistics.median(t) * 1e6 for name, t in cpu.items()}
    return {
        "driver": f"{driver.name} (SQLite {driver.sqlite_version_text}, {mode})",
        "appends": appends,
        "p50_us": rows,
        "cpu_p50_us": {
            "append_message (the repository call)": cpu_p50["append_message"],
            "of which hermes-store's Python": cpu_p50["append_message"] - cpu_p50["full replay"],
            "the statements replayed": cpu_p50["full replay"],
        },
        "statements": [sql for sql, _params in statements],
        "load": load_average(),
    }


def print_table(result: dict[str, Any]) -> None:
    print(
        f"one SQLite append, part by part: {result['driver']}, {result['appends']} appends, "
        f"p50 in microseconds (load {result['load']:.1f})"
    )
    for part, us in result["p50_us"].items():
        print(f"  {part:<45} {us:8.1f}")
    print("CPU time (thread_time), p50 in microseconds")
    for part, us in result["cpu_p50_us"].items():
        print(f"  {part:<45} {us:8.1f}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.append_parts", description=__doc__)
    parser.add_argument("--appends", type=int, default=2000)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    result = run(args.appends)
    print_table(result)
    if args.json:
        args.json.write_text(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
