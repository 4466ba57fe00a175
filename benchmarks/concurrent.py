"""Concurrent chats on `AsyncStore`: the thread pool it ships against a native asyncio path
on PostgreSQL (benchmarks/native.py), with SQLite's thread pool for reference.

    python -m benchmarks.concurrent [--chats 200,1000] [--turns 3] [--json PATH]

Every chat is one task on one event loop, all started at once: it creates its session,
then for each turn appends the user's message, loads the conversation (the agent's
format) and appends the answer, and at the end lists the 20 most recent sessions. Rows:
per mode and number of chats, appends per second over the run, the p50 / p99 of every
call (a chat's wait for one answer, creating its session included), of a turn (its three
calls, as a chat sees them once it has started) and of the event loop's stalls (how late
a task asking for a 1 ms sleep wakes). Each row has a database of its own (a fresh file,
a fresh PostgreSQL database).

The rows "writes not serialised" drop a process-wide write lock on PostgreSQL
(benchmarks/native.py says how) to show what it costs each path. A Store's PostgreSQL
writes take none any more (row locks keep them apart), so for the thread pool both rows
run the same code; the native path serialises unless told not to.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import statistics
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from . import postgres

MODES = (
    ("sqlite", "thread pool"),
    ("postgresql", "thread pool"),
    ("postgresql", "native"),
    ("postgresql", "thread pool, writes not serialised"),
    ("postgresql", "native, writes not serialised"),
)


class LoopMonitor:
    """How late the loop wakes a task that sleeps 1 ms."""

    def __init__(self) -> None:
        self.stalls: list[float] = []
        self._stop = False
        self._task: asyncio.Task[None] | None = None

    async def _watch(self) -> None:
        while not self._stop:
            asked = time.perf_counter()
            await asyncio.sleep(0.001)
            self.stalls.append(time.perf_counter() - asked - 0.001)

    def start(self) -> None:
        self._task = asyncio.ensure_future(self._watch())

    async def stop(self) -> None:
        self._stop = True
        if self._task is not None:
            await self._task


def _pct(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(len(ordered) * q))] if ordered else 0.0


async def _timed(calls: list[float], call: Awaitable[Any]) -> None:
    started = time.perf_counter()
    await call
    calls.append(time.perf_counter() - started)


async def _chat(
    store: Any, n: int, turns: int, turn_times: list[float], calls: list[float]
) -> None:
    session_id = f"chat-{n}"
    await _timed(calls, store.sessions.create_session(session_id, "telegram", chat_id=str(n)))
    for turn in range(turns):
        started = time.perf_counter()
        user, answer = f"question {turn} from {n}", f"answer {turn} to {n}"
        await _timed(calls, store.messages.append_message(session_id, "user", user))
        await _timed(calls, store.messages.get_messages_as_conversation(session_id))
        await _timed(calls, store.messages.append_message(session_id, "assistant", answer))
        turn_times.append(time.perf_counter() - started)
    await _timed(calls, store.sessions.list_sessions_rich(limit=20))


async def _run_chats(
    open_store: Callable[[], Awaitable[Any]], chats: int, turns: int
) -> dict[str, float]:
    store = await open_store()
    try:
        await _chat(store, -1, 1, [], [])  # connections and statement caches warm
        turn_times: list[float] = []
        calls: list[float] = []
        monitor = LoopMonitor()
        gc.collect()
        monitor.start()
        started = time.perf_counter()
        await asyncio.gather(*(_chat(store, n, turns, turn_times, calls) for n in range(chats)))
        wall = time.perf_counter() - started
        await monitor.stop()
        stored = await store.messages.message_count()
        if stored != chats * turns * 2 + 2:
            raise SystemExit(f"{stored} messages stored, expected {chats * turns * 2 + 2}")
    finally:
        await store.aclose()
    return {
        "wall_s": wall,
        "appends_per_s": chats * turns * 2 / wall,
        "turn_p50_ms": statistics.median(turn_times) * 1000,
        "turn_p99_ms": _pct(turn_times, 0.99) * 1000,
        "call_p50_ms": statistics.median(calls) * 1000,
        "call_p99_ms": _pct(calls, 0.99) * 1000,
        "loop_stall_p99_ms": _pct(monitor.stalls, 0.99) * 1000,
    }


def _opener(backend: str, mode: str, url: str) -> Callable[[], Awaitable[Any]]:
    from hermes_store.aio import AsyncStore

    if mode == "thread pool":
        return lambda: AsyncStore.open(url)
    # Every other mode needs native.py, whose asyncio engine needs greenlet.
    from .native import NativeAsyncStore, without_write_lock

    if mode.startswith("thread pool"):

        async def unserialised() -> AsyncStore:
            store = await AsyncStore.open(url)
            without_write_lock(store.sync)
            return store

        return unserialised
    serialise = mode == "native"
    return lambda: NativeAsyncStore.open_native(url, serialise_writes=serialise)


def _fresh_sqlite(directory: Path, name: str) -> str:
    from hermes_store import migrate

    path = directory / f"{name}.db"
    migrate.upgrade(str(path), fts_min_pause=0)
    return str(path)


def run(
    chats_list: list[int], turns: int, modes: tuple[tuple[str, str], ...] = MODES
) -> dict[str, Any]:
    """Each of `modes` (every one by default) for each number of chats; PostgreSQL rows
    are skipped (with the reason) without a server or without the native path's
    dependencies."""
    rows: list[dict[str, Any]] = []
    skipped: dict[str, str] = {}
    admin = postgres.admin_url()
    pg_missing = postgres.unavailable(admin)
    try:
        import greenlet  # noqa: F401
    except ImportError:
        native_missing: str | None = "greenlet is not installed (pip install greenlet)"
    else:
        native_missing = None
    with tempfile.TemporaryDirectory(prefix="hermes-chats-") as tmp:
        for chats in chats_list:
            for backend, mode in modes:
                label = f"{backend}, {mode}"
                if backend == "postgresql" and pg_missing:
                    skipped[label] = pg_missing
                    continue
                if mode != "thread pool" and native_missing:
                    skipped[label] = native_missing
                    continue
                if backend == "sqlite":
                    url = _fresh_sqlite(Path(tmp), f"{mode.replace(' ', '_')}_{chats}")
                    result = asyncio.run(_run_chats(_opener(backend, mode, url), chats, turns))
                else:
                    from hermes_store import migrate

                    with postgres.scratch_database(admin) as url:
                        migrate.upgrade(url)
                        result = asyncio.run(_run_chats(_opener(backend, mode, url), chats, turns))
                rows.append({"backend": backend, "mode": mode, "chats": chats, **result})
                print(f"  {chats} chats, {label}: {result['appends_per_s']:.0f} appends/s")
    return {"turns": turns, "rows": rows, "skipped": skipped}


def print_table(result: dict[str, Any]) -> None:
    head = (
        "chats",
        "backend, path",
        "appends/s",
        "call p50 / p99 ms",
        "turn p50 / p99 ms",
        "loop stall p99 ms",
    )
    lines = [
        (
            str(r["chats"]),
            f"{r['backend']}, {r['mode']}",
            f"{r['appends_per_s']:8.0f}",
            f"{r['call_p50_ms']:8.1f} / {r['call_p99_ms']:8.1f}",
            f"{r['turn_p50_ms']:8.1f} / {r['turn_p99_ms']:8.1f}",
            f"{r['loop_stall_p99_ms']:6.2f}",
        )
        for r in result["rows"]
    ]
    widths = [max(len(x[i]) for x in (head, *lines)) for i in range(len(head))]

    def fmt(cells: tuple[str, ...]) -> str:
        return " | ".join(c.ljust(w) for c, w in zip(cells, widths, strict=True))

    print(f"concurrent chats ({result['turns']} turns each: append, load, append)")
    print(fmt(head))
    print("-+-".join("-" * w for w in widths))
    for line in lines:
        print(fmt(line))
    for label, why in result["skipped"].items():
        print(f"skipped {label}: {why}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.concurrent", description=__doc__)
    parser.add_argument("--chats", default="200,1000", help="comma-separated chat counts")
    parser.add_argument("--turns", type=int, default=3)
    parser.add_argument(
        "--modes",
        help="the rows to run, as 'backend:path' separated by commas (default: all of "
        + ", ".join(f"{b}:{m}" for b, m in MODES)
        + ")",
    )
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    modes: tuple[tuple[str, str], ...] = MODES
    if args.modes:
        asked = [tuple(part.strip().split(":", 1)) for part in args.modes.split(",")]
        unknown = [":".join(m) for m in asked if m not in MODES]
        if unknown:
            parser.error(f"unknown modes: {', '.join(unknown)}")
        modes = tuple((m[0], m[1]) for m in asked)
    result = run([int(c) for c in args.chats.split(",")], args.turns, modes)
    print()
    print_table(result)
    if args.json:
        args.json.write_text(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
