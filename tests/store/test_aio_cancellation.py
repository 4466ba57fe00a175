"""Cancelling AsyncStore calls (issue 27, item 1): a call cancelled while it waits for a
worker never runs, on both backends."""

from __future__ import annotations

import asyncio
import threading

from hermes_store import aio
from hermes_store.repositories.messages import MessageRepository
from hermes_store.store import Store

QUEUED = 200


def test_calls_cancelled_while_queued_store_nothing(backend_url: str) -> None:
    """One worker, held by a call that waits on an event; 200 appends queue behind it.
    In one step of the loop every append is cancelled and then the worker is freed: the
    worker must find each of them cancelled, whichever it reaches first."""
    release = threading.Event()

    async def main() -> list[BaseException | int]:
        store = aio.AsyncStore(backend_url, workers=1)
        try:
            await store.sessions.create_session("s1", "telegram")
            holder = asyncio.ensure_future(store.run(release.wait))
            appends = [
                asyncio.ensure_future(store.messages.append_message("s1", "user", f"m{n}"))
                for n in range(QUEUED)
            ]
            for _ in range(5):  # every append reaches the queue
                await asyncio.sleep(0)
            for task in appends:
                task.cancel()
            release.set()
            await holder
            outcomes = await asyncio.gather(*appends, return_exceptions=True)
            # the store still serves calls after the cancellations
            assert await store.messages.message_count("s1") == 0
            return outcomes
        finally:
            release.set()
            await store.aclose()

    outcomes = asyncio.run(main())
    assert all(isinstance(o, asyncio.CancelledError) for o in outcomes), outcomes
    with Store(backend_url) as store:
        assert MessageRepository(store).message_count("s1") == 0


def test_a_running_call_finishes_when_its_caller_is_cancelled(backend_url: str) -> None:
    """A started call is never cut in the middle: its transaction commits, and the store
    keeps serving calls (a retry with its key would find it,
    tests/repositories/test_idempotency.py)."""
    started, release = threading.Event(), threading.Event()

    async def main() -> None:
        async with await aio.AsyncStore.open(backend_url, workers=1) as store:
            await store.sessions.create_session("s1", "cli")
            messages = MessageRepository(store.sync)

            def slow_append() -> int:
                started.set()
                release.wait()
                return messages.append_message("s1", "user", "kept", idempotency_key="k")

            task = asyncio.ensure_future(store.run(slow_append))
            while not started.is_set():
                await asyncio.sleep(0.001)
            task.cancel()
            release.set()
            try:
                await task
            except asyncio.CancelledError:
                pass
            first = await store.messages.append_message("s1", "user", "kept", idempotency_key="k")
            assert await store.messages.message_count("s1") == 1
            assert [m["id"] for m in await store.messages.get_messages("s1")] == [first]

    asyncio.run(main())
