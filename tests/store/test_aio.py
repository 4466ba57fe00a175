"""The asyncio layer: `AsyncStore` and its repositories, under many concurrent tasks, on
both backends."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from hermes_store import aio
from hermes_store.errors import SessionNotFound, StoreClosed
from hermes_store.repositories.messages import MessageRepository
from hermes_store.store import Store

TASKS = 40
MESSAGES_PER_TASK = 15


async def _conversation(store: aio.AsyncStore, n: int) -> list[int]:
    session_id = f"chat-{n}"
    await store.sessions.create_session(session_id, "telegram", model="hermes-4")
    ids = []
    for i in range(MESSAGES_PER_TASK):
        role = "user" if i % 2 == 0 else "assistant"
        ids.append(await store.messages.append_message(session_id, role, f"turn {i} of {n} zebu"))
        if i % 5 == 0:
            await store.sessions.list_sessions_rich(limit=5)
    await store.titles.set_session_title(session_id, f"conversation {n}")
    return ids


def test_many_concurrent_tasks_lose_nothing(backend_url: str) -> None:
    async def main() -> list[list[int]]:
        async with aio.AsyncStore(backend_url) as store:
            results = await asyncio.gather(*(_conversation(store, n) for n in range(TASKS)))
            counts = await asyncio.gather(
                *(store.messages.message_count(f"chat-{n}") for n in range(TASKS))
            )
            assert counts == [MESSAGES_PER_TASK] * TASKS
            hits = await store.search.search_messages("zebu", limit=1000)
            assert len(hits) == TASKS * MESSAGES_PER_TASK
            titles = await asyncio.gather(
                *(store.titles.get_session_title(f"chat-{n}") for n in range(TASKS))
            )
            assert titles == [f"conversation {n}" for n in range(TASKS)]
            return list(results)

    results = asyncio.run(main())
    all_ids = [i for ids in results for i in ids]
    assert len(set(all_ids)) == TASKS * MESSAGES_PER_TASK
    assert all(ids == sorted(ids) for ids in results)  # each conversation in order
    with Store(backend_url) as store:  # and really stored
        rows = MessageRepository(store).get_messages("chat-7")
        assert [r["content"] for r in rows] == [f"turn {i} of 7 zebu" for i in range(15)]


def test_errors_arrive_as_the_synchronous_ones(backend_url: str) -> None:
    async def main() -> None:
        async with aio.AsyncStore(backend_url) as store:
            with pytest.raises(SessionNotFound):
                await store.messages.append_message("ghost", "user", "hi")

    asyncio.run(main())


def test_closed_async_store_refuses_calls(backend_url: str) -> None:
    async def main() -> None:
        store = aio.AsyncStore(backend_url)
        await store.sessions.create_session("s", "cli")
        await store.aclose()
        await store.aclose()  # idempotent
        with pytest.raises(StoreClosed):
            await store.sessions.get_session("s")

    asyncio.run(main())


def test_type_checkers_see_the_signatures(tmp_path: Path) -> None:
    snippet = tmp_path / "use_aio.py"
    snippet.write_text(
        textwrap.dedent(
            """
            from hermes_store.aio import AsyncStore

            async def main(store: AsyncStore) -> None:
                count: int = await store.messages.message_count("s")
                title: int = await store.titles.get_session_title("s")
                await store.messages.append_message(42, "user")

            async def opened() -> None:
                await AsyncStore.open("state.db", read_only="yes")
                AsyncStore("state.db", workers=2, check_schema=False, journl=None)
            """
        )
    )
    result = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--no-incremental", str(snippet)],
        capture_output=True,
        text=True,
        cwd=Path(__file__).resolve().parents[2],
    )
    out = result.stdout
    assert result.returncode == 1, out
    assert 'Incompatible types in assignment (expression has type "str | None"' in out, out
    assert 'Argument 1 has incompatible type "int"; expected "str"' in out, out
    assert "use_aio.py:5" not in out, out  # the correct call is accepted
    # Store's keyword arguments, checked on AsyncStore and AsyncStore.open too
    assert 'use_aio.py:10: error: Argument "read_only" to "open" of "AsyncStore"' in out, out
    assert 'use_aio.py:11: error: Unexpected keyword argument "journl"' in out, out
