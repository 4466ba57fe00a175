"""The facade beside the original: `hermes_store.compat.SessionDB` against Hermes's own
v23 `SessionDB` (`hermes_state.py`), operation by operation, on the same SQLite library.

    python -m benchmarks.facade --original DIR [--iterations 200] [--quick]
                                [--drivers sqlite3,pysqlite3] [--json PATH]
                                [--only NAME[,NAME]]
    HERMES_ORIGINAL=DIR python -m benchmarks.facade

DIR holds the original's `hermes_state.py` and the modules of its repository it imports
(docs/benchmarks.md, "The facade beside the original", says how to export them). The
original is an optional baseline: hermes-store never imports it, and without it this
prints how to get it and exits 0.

One child process per SQLite library (the standard library's `sqlite3`, and `pysqlite3`,
which the original is pointed at by importing it under the name `sqlite3`); in each, the
original and the facade each open a file of their own in one directory, in the same
journal mode (the one the original picks for that SQLite: DELETE where the library has
the WAL-reset bug, WAL otherwise; the facade is given it through
`HERMES_STORE_JOURNAL_MODE`). Both get the same data, written through their own public
API: 100 sessions of 1,000 messages (`--quick`: 20 of 100). Then every operation below is
called on both in rotation, call by call (original, facade, facade, original, ...), on
the same arguments; each row gives both sides' p50 / p95 wall-clock milliseconds, the
p50 CPU time of the calling thread (`time.thread_time`, less sensitive to the other
processes on a shared machine) and the facade's ratios. An operation that needs a fresh
target (a session to delete, a conversation to clear) gets it from an untimed step
before each call.
"""

from __future__ import annotations

import argparse
import gc
import importlib
import json
import logging
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .per_turn import role_of, text_of
from .stats import load_average, percentiles

ENV = "HERMES_ORIGINAL"
HOW_TO_GET = f"""\
facade beside the original: skipped (no original given).
  It needs the original Hermes v23 `hermes_state.py` and the modules of its repository it
  imports, in a directory outside this project (never committed here): from a clone of
  NousResearch/hermes-agent, take the last commit on main whose SCHEMA_VERSION is 23
  (5b751dc0ad, 2026-07-29; docs/reference/README.md) and export hermes_state*.py,
  hermes_constants.py and the agent/ and hermes_cli/ modules they import (the list is
  tests/fixtures/legacy/state_v23.json "modules_used_from_same_commit"), e.g.
      git archive 5b751dc0ad | tar -x -C /path/to/original
  then run:  python -m benchmarks.facade --original /path/to/original
  (or set {ENV}=/path/to/original)."""

SESSIONS = 100
MESSAGES = 1000
QUICK_SESSIONS, QUICK_MESSAGES = 20, 100
SIDES = ("original", "facade")


def sid(i: int) -> str:
    return f"s{i % SESSIONS:03d}"


@dataclass
class Side:
    """One SessionDB and what the operations need to know about its data (message ids
    differ between the two files)."""

    name: str
    db: Any
    first_ids: dict[str, int] = field(default_factory=dict)
    user_ids: dict[str, int] = field(default_factory=dict)
    counter: int = 0

    def fresh(self, prefix: str) -> str:
        self.counter += 1
        return f"{prefix}-{self.counter}"


@dataclass
class Op:
    """`call(side, i, prepared)` timed; `prepare(side, i)` and `after(side, i, prepared)`
    run untimed around it."""

    name: str
    call: Callable[[Side, int, Any], Any]
    prepare: Callable[[Side, int], Any] | None = None
    after: Callable[[Side, int, Any], None] | None = None


def _messages(count: int, start: int = 0) -> list[dict[str, Any]]:
    return [{"role": role_of(n), "content": text_of(n)} for n in range(start, start + count)]


def _scratch(side: Side, count: int = 20) -> str:
    """A new session with `count` messages, for an operation that consumes one."""
    new = side.fresh("scratch")
    side.db.create_session(new, "cli")
    for n in range(count):
        side.db.append_message(new, role_of(n), text_of(n))
    return new


def _mid(side: Side, i: int) -> int:
    """A message in the middle of session `sid(i)`."""
    return side.first_ids[sid(i)] + side.first_ids["__per_session__"] // 2


def operations() -> list[Op]:
    """Every public operation of the original that the facade offers and that a per-call
    timing means something for (see SKIPPED for the others)."""
    big_page = 20

    def reads(name: str, fn: Callable[[Any, int], Any]) -> Op:
        return Op(name, lambda s, i, _: fn(s.db, i))

    ops = [
        # -- messages: writes
        Op("append_message", lambda s, i, _: s.db.append_message(sid(i), role_of(i), text_of(i))),
        Op(
            "append_message (tool call)",
            lambda s, i, _: s.db.append_message(
                sid(i),
                "assistant",
                None,
                tool_calls=[
                    {
                        "id": f"c{i}",
                        "type": "function",
                        "function": {"name": "ls", "arguments": "{}"},
                    }
                ],
            ),
        ),  # fmt: skip
        Op(
            "replace_messages (20)",
            lambda s, i, p: s.db.replace_messages(p, _messages(20, i)),
            prepare=lambda s, i: _scratch(s, 5),
        ),
        Op(
            "clear_messages (20)",
            lambda s, i, p: s.db.clear_messages(p),
            prepare=lambda s, i: _scratch(s),
        ),  # fmt: skip
        Op(
            "rewind_to_message + restore_rewound",
            lambda s, i, _: (
                s.db.rewind_to_message(sid(i), s.user_ids[sid(i)]),
                s.db.restore_rewound(sid(i), s.user_ids[sid(i)]),
            ),
        ),
        Op(
            "set_latest_user_api_content",
            lambda s, i, _: s.db.set_latest_user_api_content(
                sid(i), text_of(s.user_ids["__n__"]), f"api {i}"
            ),
        ),
        # -- messages: reads
        reads("get_messages (1,000)", lambda db, i: db.get_messages(sid(i))),
        Op(
            "get_messages (newest 20 by offset)",
            lambda s, i, _: s.db.get_messages(
                sid(i), limit=big_page, offset=s.first_ids["__per_session__"] - big_page
            ),
        ),
        reads(
            "get_messages_as_conversation", lambda db, i: db.get_messages_as_conversation(sid(i))
        ),
        Op("get_messages_around", lambda s, i, _: s.db.get_messages_around(sid(i), _mid(s, i))),
        Op("get_anchored_view", lambda s, i, _: s.db.get_anchored_view(sid(i), _mid(s, i))),
        reads("get_resume_conversations", lambda db, i: db.get_resume_conversations(sid(i))),
        reads("get_ancestor_display_prefix", lambda db, i: db.get_ancestor_display_prefix(sid(i))),
        reads("list_recent_user_messages", lambda db, i: db.list_recent_user_messages(sid(i))),
        reads("message_count (session)", lambda db, i: db.message_count(sid(i))),
        reads("message_count (all)", lambda db, i: db.message_count()),
        reads("has_archived_messages", lambda db, i: db.has_archived_messages(sid(i))),
        reads("has_platform_message_id", lambda db, i: db.has_platform_message_id(sid(i), "p1")),
        reads("get_first_assistant_text", lambda db, i: db.get_first_assistant_text(sid(i))),
        # -- sessions: writes
        Op("create_session", lambda s, i, _: s.db.create_session(s.fresh("new"), "cli")),
        reads("ensure_session (exists)", lambda db, i: db.ensure_session(sid(i), "cli")),
        reads("end_session", lambda db, i: db.end_session(sid(i), "user_exit")),
        reads("reopen_session", lambda db, i: db.reopen_session(sid(i))),
        reads("update_system_prompt", lambda db, i: db.update_system_prompt(sid(i), f"p {i}")),
        reads(
            "update_session_meta",
            lambda db, i: db.update_session_meta(sid(i), json.dumps({"t": i}), "model-a"),
        ),
        reads("update_session_model", lambda db, i: db.update_session_model(sid(i), "model-b")),
        reads("update_session_cwd", lambda db, i: db.update_session_cwd(sid(i), f"/w/{i % 7}")),
        reads(
            "update_token_counts",
            lambda db, i: db.update_token_counts(sid(i), 100, 50, "model-a", 10, 5),
        ),
        reads("set_session_archived", lambda db, i: db.set_session_archived(sid(i), i % 2 == 0)),
        reads("set_session_pinned", lambda db, i: db.set_session_pinned(sid(i), i % 2 == 0)),
        Op(
            "set_session_title",
            lambda s, i, _: s.db.set_session_title(sid(i), f"{sid(i)} title {i}"),
            after=lambda s, i, _: s.db.set_session_title(sid(i), f"title {sid(i)}"),
        ),
        reads("set_auto_title_if_empty", lambda db, i: db.set_auto_title_if_empty(sid(i), "x")),
        reads(
            "set_compression_fallback_streak",
            lambda db, i: db.set_compression_fallback_streak(sid(i), i % 3),
        ),
        reads("set_meta", lambda db, i: db.set_meta("bench", str(i))),
        Op(
            "delete_session (20 messages)",
            lambda s, i, p: s.db.delete_session(p),
            prepare=lambda s, i: _scratch(s),
        ),
        # -- sessions: reads
        reads("get_session", lambda db, i: db.get_session(sid(i))),
        reads("resolve_session_id", lambda db, i: db.resolve_session_id(sid(i))),
        reads("get_session_title", lambda db, i: db.get_session_title(sid(i))),
        reads("get_session_by_title", lambda db, i: db.get_session_by_title(f"title {sid(i)}")),
        reads(
            "resolve_session_by_title", lambda db, i: db.resolve_session_by_title(f"title {sid(i)}")
        ),
        reads(
            "get_next_title_in_lineage",
            lambda db, i: db.get_next_title_in_lineage(f"title {sid(i)}"),
        ),
        reads("get_session_rich_row", lambda db, i: db.get_session_rich_row(sid(i))),
        reads("list_sessions_rich (20)", lambda db, i: db.list_sessions_rich(limit=20)),
        reads("search_sessions (20)", lambda db, i: db.search_sessions(limit=20)),
        reads("search_sessions_by_id", lambda db, i: db.search_sessions_by_id(sid(i)[:3])),
        reads("session_count", lambda db, i: db.session_count()),
        reads("session_count_by_source", lambda db, i: db.session_count_by_source()),
        reads("distinct_session_cwds", lambda db, i: db.distinct_session_cwds()),
        reads("get_compression_tip", lambda db, i: db.get_compression_tip(sid(i))),
        reads("get_compression_lineage", lambda db, i: db.get_compression_lineage(sid(i))),
        reads("get_conversation_root", lambda db, i: db.get_conversation_root(sid(i))),
        reads("resolve_resume_session_id", lambda db, i: db.resolve_resume_session_id(sid(i))),
        reads("get_session_delete_targets", lambda db, i: db.get_session_delete_targets(sid(i))),
        reads("find_live_compression_child", lambda db, i: db.find_live_compression_child(sid(i))),
        reads(
            "get_compression_fallback_streak",
            lambda db, i: db.get_compression_fallback_streak(sid(i)),
        ),
        reads(
            "get_compression_failure_cooldown",
            lambda db, i: db.get_compression_failure_cooldown(sid(i)),
        ),
        reads("get_meta", lambda db, i: db.get_meta("bench")),
        reads("export_session (1,000)", lambda db, i: db.export_session(sid(i))),
        reads("count_empty_sessions", lambda db, i: db.count_empty_sessions()),
        reads("list_skill_scaffolded_sessions", lambda db, i: db.list_skill_scaffolded_sessions()),
        reads("list_cron_job_runs", lambda db, i: db.list_cron_job_runs("job-1")),
        # -- search
        reads("search_messages (word)", lambda db, i: db.search_messages("migration")),
        reads("search_messages (phrase)", lambda db, i: db.search_messages('"connection pool"')),
        reads("search_messages (prefix*)", lambda db, i: db.search_messages("rebas*")),
        reads("search_messages (zero hits)", lambda db, i: db.search_messages("zqxjv")),
        # -- compression locks, gateway routing, handoffs, Telegram topics
        Op(
            "try_acquire + release_compression_lock",
            lambda s, i, _: (
                s.db.try_acquire_compression_lock(sid(i), "bench"),
                s.db.release_compression_lock(sid(i), "bench"),
            ),
        ),
        reads("get_compression_lock_holder", lambda db, i: db.get_compression_lock_holder(sid(i))),
        reads(
            "save_gateway_routing_entry",
            lambda db, i: db.save_gateway_routing_entry(f"k{i % 50}", json.dumps({"s": sid(i)})),
        ),
        reads("load_gateway_routing_entries", lambda db, i: db.load_gateway_routing_entries()),
        reads(
            "record_gateway_session_peer",
            lambda db, i: db.record_gateway_session_peer(
                sid(i), source="telegram", user_id=f"u{i % 10}", chat_id="c1"
            ),
        ),
        reads(
            "find_latest_gateway_session_for_peer",
            lambda db, i: db.find_latest_gateway_session_for_peer(
                source="telegram", user_id=f"u{i % 10}"
            ),
        ),
        reads("list_gateway_sessions", lambda db, i: db.list_gateway_sessions()),
        reads(
            "find_session_by_origin",
            lambda db, i: db.find_session_by_origin(platform="telegram", chat_id="c1"),
        ),
        reads("get_handoff_state", lambda db, i: db.get_handoff_state(sid(i))),
        reads("list_pending_handoffs", lambda db, i: db.list_pending_handoffs()),
        reads(
            "is_telegram_topic_mode_enabled",
            lambda db, i: db.is_telegram_topic_mode_enabled(chat_id="c1", user_id="u1"),
        ),
        reads(
            "get_telegram_topic_binding_by_session",
            lambda db, i: db.get_telegram_topic_binding_by_session(session_id=sid(i)),
        ),
        reads("logical_size_bytes", lambda db, i: db.logical_size_bytes()),
        reads("fts_optimize_available", lambda db, i: db.fts_optimize_available()),
    ]
    return ops


#: Public operations left out, and why.
SKIPPED = {
    "queue_token_counts / flush_token_counts": "the original queues to a writer thread "
    "(the facade writes at once): update_token_counts is the row that compares the write",
    "vacuum, rebuild_fts, optimize_fts, optimize_fts_storage, fts_*_step, "
    "maybe_auto_prune_and_vacuum, maybe_auto_archive, prune_sessions, archive_sessions, "
    "archive_stale_sessions, delete_empty_sessions, prune_empty_ghost_sessions, "
    "export_all, import_sessions": "maintenance over the whole file, not a per-call cost",
}


def _fill(side: Side, sessions: int, messages: int) -> None:
    """The same data on both sides, through each side's own public API."""
    db = side.db
    for k in range(sessions):
        s = f"s{k:03d}"
        db.create_session(s, "cli", model="model-a")
        db.set_session_title(s, f"title {s}")
        db.replace_messages(s, _messages(messages))
        rows = db.get_messages(s)
        side.first_ids[s] = rows[0]["id"]
        last_user = max(r["id"] for r in rows if r["role"] == "user")
        side.user_ids[s] = last_user
    side.first_ids["__per_session__"] = messages
    # the content of the newest user message of every session (they are built alike)
    side.user_ids["__n__"] = max(n for n in range(messages) if role_of(n) == "user")


def measure(sides: list[Side], ops: list[Op], iterations: int) -> list[dict[str, Any]]:
    rows = []
    for op in ops:
        wall: dict[str, list[float]] = {s.name: [] for s in sides}
        cpu: dict[str, list[float]] = {s.name: [] for s in sides}
        failed: dict[str, str] = {}
        gc.collect()
        for i in range(-3, iterations):
            order = sides if i % 2 == 0 else sides[::-1]
            for side in order:
                if side.name in failed:
                    continue
                n = i if i >= 0 else SESSIONS + i
                try:
                    prepared = op.prepare(side, n) if op.prepare else None
                    c0, w0 = time.thread_time(), time.perf_counter()
                    op.call(side, n, prepared)
                    w1, c1 = time.perf_counter(), time.thread_time()
                    if op.after:
                        op.after(side, n, prepared)
                except Exception as exc:  # noqa: BLE001 (recorded, the row goes on)
                    failed[side.name] = f"{type(exc).__name__}: {exc}"[:200]
                    continue
                if i >= 0:
                    wall[side.name].append(w1 - w0)
                    cpu[side.name].append(c1 - c0)
        row: dict[str, Any] = {"operation": op.name, "failed": failed, "load": load_average()}
        for name in wall:
            if wall[name]:
                p50, p95 = percentiles(wall[name])
                c50, _ = percentiles(cpu[name])
                row[name] = {"p50_ms": p50, "p95_ms": p95, "cpu_p50_ms": c50, "n": len(wall[name])}
        if "original" in row and "facade" in row:
            o, f = row["original"], row["facade"]
            row["ratio_p50"] = f["p50_ms"] / o["p50_ms"] if o["p50_ms"] else float("inf")
            row["ratio_cpu"] = (
                f["cpu_p50_ms"] / o["cpu_p50_ms"] if o["cpu_p50_ms"] else float("inf")
            )
        rows.append(row)
    return rows


def _name_sqlite3(module: Any) -> None:
    """`import sqlite3` gives `module` from now on, in this child process, which runs
    only the one SQLite library: how the original, which imports the standard library's
    module by name (some of its modules inside functions, at their first call), is
    pointed at pysqlite3. Nothing of the original is imported beyond what
    `hermes_state` imports: DIR may hold its whole repository, whose scripts and plugins
    must not run here."""
    sys.modules["sqlite3"] = module


def load_original(directory: Path, driver: str) -> Any:
    """The original `hermes_state` module from `directory`, on `driver`."""
    sys.path.insert(0, str(directory))
    if driver == "sqlite3":
        return importlib.import_module("hermes_state")
    pysqlite3 = importlib.import_module("pysqlite3.dbapi2")
    _name_sqlite3(pysqlite3)
    module = importlib.import_module("hermes_state")
    if module.sqlite3 is not pysqlite3:
        raise RuntimeError("the original could not be pointed at pysqlite3")
    return module


def selected(only: tuple[str, ...] = ()) -> list[Op]:
    """The operations named in `only` (all of them when it is empty)."""
    ops = operations()
    if not only:
        return ops
    unknown = set(only) - {op.name for op in ops}
    if unknown:
        raise SystemExit(f"unknown operation(s): {', '.join(sorted(unknown))}")
    return [op for op in ops if op.name in only]


def run_child(
    original: Path, driver: str, iterations: int, quick: bool, only: tuple[str, ...] = ()
) -> dict[str, Any]:
    """Both sides on this process's SQLite library (the parent set the environment)."""
    global SESSIONS
    sessions, messages = (QUICK_SESSIONS, QUICK_MESSAGES) if quick else (SESSIONS, MESSAGES)
    SESSIONS = sessions
    ops = selected(only)
    with tempfile.TemporaryDirectory(prefix="hermes-facade-") as tmp:
        directory = Path(tmp)
        os.environ["HERMES_HOME"] = str(directory / "home")
        logging.getLogger("hermes_state").setLevel(logging.ERROR)
        # hermes-store first: it picks its own driver, and must not meet the name
        # `sqlite3` bound to pysqlite3 for the original
        from hermes_store.compat import SessionDB

        hermes_state = load_original(original, driver)
        original_db = hermes_state.SessionDB(db_path=directory / "original.db")
        mode = original_db._conn.execute("PRAGMA journal_mode").fetchone()[0].lower()
        version = original_db._conn.execute("SELECT sqlite_version()").fetchone()[0]
        os.environ["HERMES_STORE_JOURNAL_MODE"] = mode
        facade_db = SessionDB(directory / "facade.db")
        facade_mode = facade_db.store.read(
            lambda conn: str(conn.exec_driver_sql("PRAGMA journal_mode").scalar()).lower()
        )
        if facade_mode != mode:
            raise RuntimeError(f"journal modes differ: original {mode}, facade {facade_mode}")
        sides = [Side("original", original_db), Side("facade", facade_db)]
        started = time.perf_counter()
        for side in sides:
            _fill(side, sessions, messages)
        filled = time.perf_counter() - started
        try:
            rows = measure(sides, ops, iterations)
        finally:
            facade_db.close()
            original_db.close()
    return {
        "driver": driver,
        "sqlite": version,
        "journal_mode": mode,
        "sessions": sessions,
        "messages_per_session": messages,
        "fill_s": filled,
        "iterations": iterations,
        "rows": rows,
    }


def _in_child(
    original: Path, driver: str, iterations: int, quick: bool, only: tuple[str, ...] = ()
) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="hermes-facade-out-") as tmp:
        out = Path(tmp) / "result.json"
        env = {**os.environ, "HERMES_STORE_SQLITE_DRIVER": driver}
        command = [
            sys.executable, "-m", "benchmarks.facade", "--original", str(original),
            "--child", driver, str(out), "--iterations", str(iterations),
            *(["--quick"] if quick else []), *(["--only", ",".join(only)] if only else []),
        ]  # fmt: skip
        done = subprocess.run(command, env=env, cwd=Path(__file__).parent.parent, check=False)
        if done.returncode != 0 or not out.exists():
            return {"driver": driver, "skipped": f"the child process exited {done.returncode}"}
        result: dict[str, Any] = json.loads(out.read_text())
        return result


def original_from(given: Path | str | None) -> Path | None:
    """The directory holding the original's hermes_state.py (argument, else $HERMES_ORIGINAL),
    or None."""
    value = given or os.environ.get(ENV) or None
    return Path(value) if value else None


def run(
    original: Path,
    iterations: int,
    quick: bool = False,
    drivers: tuple[str, ...] = ("sqlite3", "pysqlite3"),
    only: tuple[str, ...] = (),
) -> dict[str, Any]:
    selected(only)  # an unknown name stops here, before any child starts
    columns = []
    for driver in drivers:
        print(f"  facade beside the original: SQLite through {driver}")
        columns.append(_in_child(original, driver, iterations, quick, only))
    return {"original": str(original), "iterations": iterations, "columns": columns}


def print_table(result: dict[str, Any]) -> None:
    print(
        f"the facade beside the original, in rotation call by call ({result['iterations']} calls "
        "each; p50 / p95 ms wall clock, p50 ms CPU; facade/original)"
    )
    for column in result["columns"]:
        if "skipped" in column:
            print(f"\n{column['driver']}: skipped: {column['skipped']}")
            continue
        print(
            f"\n{column['driver']} (SQLite {column['sqlite']}, {column['journal_mode']}; "
            f"{column['sessions']} sessions of {column['messages_per_session']} messages)"
        )
        print(
            f"  {'operation':44} {'original':>17} {'facade':>17} {'cpu o':>7} {'cpu f':>7}"
            f" {'wall':>6} {'cpu':>6} load"
        )
        for row in column["rows"]:
            if "ratio_p50" not in row:
                print(f"  {row['operation']:44} failed: {row['failed']}")
                continue
            o, f = row["original"], row["facade"]
            print(
                f"  {row['operation']:44} {o['p50_ms']:7.3f} /{o['p95_ms']:8.3f}"
                f" {f['p50_ms']:7.3f} /{f['p95_ms']:8.3f} {o['cpu_p50_ms']:7.3f}"
                f" {f['cpu_p50_ms']:7.3f} {row['ratio_p50']:5.2f}x {row['ratio_cpu']:5.2f}x"
                f" {row['load']:.1f}"
            )
        slower = [r for r in column["rows"] if r.get("ratio_cpu", 0) > 1.05]
        print(f"  facade above the original by >5% CPU: {len(slower)} of {len(column['rows'])}")
    for name, why in SKIPPED.items():
        print(f"  not measured: {name}: {why}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.facade", description=__doc__)
    parser.add_argument("--original", type=Path, help=f"the original's directory (or ${ENV})")
    parser.add_argument("--iterations", type=int, default=100)
    parser.add_argument("--quick", action="store_true", help="20 sessions of 100 messages")
    parser.add_argument("--drivers", default="sqlite3,pysqlite3")
    parser.add_argument("--json", type=Path)
    parser.add_argument(
        "--only", default="", help="NAME[,NAME]: only these operations (names as in the table)"
    )
    parser.add_argument("--child", nargs=2, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    only = tuple(name.strip() for name in args.only.split(",") if name.strip())
    original = original_from(args.original)
    if original is None:
        print(HOW_TO_GET)
        return 0
    if not (original / "hermes_state.py").is_file():
        print(f"facade beside the original: skipped: no hermes_state.py in {original}")
        print(HOW_TO_GET)
        return 0
    if args.child:
        driver, out = args.child
        column = run_child(original.resolve(), driver, args.iterations, args.quick, only)
        Path(out).write_text(json.dumps(column))
        return 0
    result = run(
        original.resolve(), args.iterations, args.quick, tuple(args.drivers.split(",")), only
    )
    print()
    print_table(result)
    if args.json:
        args.json.write_text(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
