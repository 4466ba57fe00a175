"""Opening and closing an AsyncStore without blocking the event loop (issue 27, items 2
and 3), and 200 chats calling it: every connect and statement runs off the loop's
thread, and the loop runs another task meanwhile (a monitor asking for a 1 ms sleep over
and over). How long the loop stalls is a figure, measured in benchmarks/ (loop_stall.py,
concurrent.py), never asserted here: it depends on the machine's load."""

from __future__ import annotations

import asyncio
import gc
import random
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
from sqlalchemy import Engine, event
from sqlalchemy.exc import OperationalError
from sqlalchemy.pool import Pool

from hermes_store import aio
from hermes_store.errors import DatabaseUnavailable, StoreClosed
from hermes_store.repositories.messages import MessageRepository
from hermes_store.runtime.retry import RetryPolicy
from hermes_store.store import Store

CHATS = 200


class LoopMonitor:
    """How late the loop wakes a task that sleeps 1 ms: each sample is one stall."""

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
        # A full collection of the test process's heap (whichever thread triggers it
        # holds the interpreter meanwhile) would be measured as a stall of the store's
        # making; start from a collected heap.
        gc.collect()
        self._task = asyncio.ensure_future(self._watch())

    async def stop(self) -> None:
        self._stop = True
        assert self._task is not None
        await self._task

    @property
    def worst(self) -> float:
        return max(self.stalls)

    @property
    def p99(self) -> float:
        ordered = sorted(self.stalls)
        return ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]


@contextmanager
def _database_threads() -> Iterator[list[int]]:
    """The threads that open a database connection or send a statement (any engine's)
    while the block runs: with the loop's thread not among them, the loop never waits
    for the database."""
    seen: list[int] = []

    def record(*_args: object) -> None:
        seen.append(threading.get_ident())

    event.listen(Pool, "connect", record)
    event.listen(Engine, "before_cursor_execute", record)
    try:
        yield seen
    finally:
        event.remove(Engine, "before_cursor_execute", record)
        event.remove(Pool, "connect", record)


def _watch_an_open(url: str) -> tuple[LoopMonitor, int]:
    """The loop's ticks while an AsyncStore on `url` opens and answers a call, and the
    loop's thread."""

    async def main() -> tuple[LoopMonitor, int]:
        monitor = LoopMonitor()
        monitor.start()
        await asyncio.sleep(0.01)  # the monitor is running before the open starts
        store = await aio.AsyncStore.open(url)
        await asyncio.sleep(0.01)
        await monitor.stop()
        try:
            assert await store.sessions.session_count() == 0
        finally:
            await store.aclose()
        return monitor, threading.get_ident()

    return asyncio.run(main())


def _assert_opens_without_blocking(url: str) -> None:
    """The open's connects and statements all run off the loop's thread, and the loop
    runs its other task meanwhile (how long it stalls is a figure:
    benchmarks/loop_stall.py, benchmarks/concurrent.py)."""
    with _database_threads() as threads:
        monitor, loop_thread = _watch_an_open(url)
    assert threads, "nothing was opened: the test would test nothing"
    assert loop_thread not in threads
    assert len(monitor.stalls) > 5


def test_opening_a_sqlite_file_does_not_block_the_loop(journal_db: str) -> None:
    _assert_opens_without_blocking(journal_db)  # in each journal mode


def test_opening_a_postgresql_database_does_not_block_the_loop(pg_fresh_db: str) -> None:
    _assert_opens_without_blocking(pg_fresh_db)


@contextmanager
def _silent_server() -> Iterator[int]:
    """A TCP port that completes the handshake (the kernel's backlog) and then says
    nothing, as a server behind a dead proxy or a filtering firewall does."""
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)
    try:
        yield int(listener.getsockname()[1])
    finally:
        listener.close()


def test_opening_against_a_silent_server_does_not_block_the_loop(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The connect to a server that never answers runs off the loop's thread, and the
    loop goes on running other tasks while it waits: every connect attempt is made in
    another thread, and the loop's ticker advances while one is under way. How long the
    loop stalls meanwhile is a figure (benchmarks/loop_stall.py), not asserted here."""
    psycopg = pytest.importorskip("psycopg")
    connect = psycopg.connect  # what the dialect calls
    attempts: list[tuple[int, int, int]] = []  # (thread, ticks before, ticks after)
    ticks = [0]

    def observed(*args: object, **kwargs: object) -> object:
        before = ticks[0]
        try:
            return connect(*args, **kwargs)
        finally:
            attempts.append((threading.get_ident(), before, ticks[0]))

    monkeypatch.setattr(psycopg, "connect", observed)
    with _silent_server() as port:
        url = f"postgresql://nobody@127.0.0.1:{port}/state?connect_timeout=2"

        async def main() -> int:
            stop = asyncio.Event()

            async def ticker() -> None:
                while not stop.is_set():
                    ticks[0] += 1
                    await asyncio.sleep(0)

            task = asyncio.ensure_future(ticker())
            with pytest.raises((DatabaseUnavailable, OperationalError)):
                await aio.AsyncStore.open(url, retry=RetryPolicy(server_budget_seconds=1.0))
            stop.set()
            await task
            return threading.get_ident()

        loop_thread = asyncio.run(main())
    assert attempts, "no connect was attempted: the test would test nothing"
    assert all(thread != loop_thread for thread, _, _ in attempts), attempts
    # the loop ran its other task while a connect waited for the silent server
    assert any(after > before for _, before, after in attempts), attempts


def test_cancelling_an_open_closes_the_store_it_makes(backend_url: str) -> None:
    async def main() -> None:
        opening = asyncio.ensure_future(aio.AsyncStore.open(backend_url))
        await asyncio.sleep(0)
        opening.cancel()
        with pytest.raises(asyncio.CancelledError):
            await opening

    asyncio.run(main())


def test_200_chats_leave_the_loop_responsive(backend_url: str) -> None:
    async def chat(store: aio.AsyncStore, n: int) -> None:
        session_id = f"chat-{n}"
        await store.sessions.create_session(session_id, "telegram")
        for turn in range(3):
            await store.messages.append_message(session_id, "user", f"question {turn}")
            await store.messages.get_messages_as_conversation(session_id)
            await store.messages.append_message(session_id, "assistant", f"answer {turn}")
        await store.sessions.list_sessions_rich(limit=20)

    async def main() -> tuple[LoopMonitor, int]:
        async with await aio.AsyncStore.open(backend_url) as store:
            monitor = LoopMonitor()
            monitor.start()
            await asyncio.gather(*(chat(store, n) for n in range(CHATS)))
            await monitor.stop()
            assert await store.messages.message_count() == CHATS * 6
        return monitor, threading.get_ident()

    with _database_threads() as threads:
        monitor, loop_thread = asyncio.run(main())
    # every statement on the store's worker threads, and the loop ran meanwhile (the
    # loop's stalls under 200 chats are benchmarks/concurrent.py's figure)
    assert len(threads) > CHATS * 6 and loop_thread not in threads
    assert len(monitor.stalls) > 50


def test_every_call_racing_aclose_completes_or_gets_store_closed(backend_url: str) -> None:
    rng = random.Random(3)

    async def main() -> list[object]:
        store = await aio.AsyncStore.open(backend_url)
        await store.sessions.create_session("s1", "cli")

        async def caller(n: int, delay: float) -> str:
            await asyncio.sleep(delay)
            try:
                await store.messages.append_message("s1", "user", f"m{n}")
            except StoreClosed:
                return "closed"
            return "stored"

        callers = [asyncio.ensure_future(caller(n, rng.uniform(0, 0.06))) for n in range(CHATS)]
        await asyncio.sleep(0.03)
        closing = [asyncio.ensure_future(store.aclose()) for _ in range(3)]
        # once the first close has run (it refuses new calls before its first await),
        # calls made are refused whatever the racing ones above met on a loaded machine
        await asyncio.sleep(0)
        late = [asyncio.ensure_future(caller(n, 0)) for n in range(CHATS, CHATS + 3)]
        outcomes: list[object] = list(await asyncio.gather(*callers, *late, return_exceptions=True))
        assert outcomes[-3:] == ["closed"] * 3
        await asyncio.gather(*closing)
        # after the close, every call is refused the same way
        for late in (store.messages.message_count("s1"), store.sessions.get_session("s1")):
            try:
                await late
            except StoreClosed as exc:
                outcomes.append(type(exc))
        return outcomes

    outcomes = asyncio.run(main())
    assert outcomes[-2:] == [StoreClosed, StoreClosed]
    outcomes = outcomes[:-2]
    assert set(outcomes) <= {"stored", "closed"}, [o for o in outcomes if not isinstance(o, str)]
    assert "closed" in outcomes
    with Store(backend_url) as store:
        assert MessageRepository(store).message_count("s1") == outcomes.count("stored")
