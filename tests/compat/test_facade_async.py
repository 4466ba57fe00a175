"""compat.AsyncSessionDB runs the facade's calls on worker threads of its own, as an
AsyncStore does: never on the event loop's default executor, which the application may
need for other work."""

from __future__ import annotations

import asyncio
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from hermes_store.compat import AsyncSessionDB, SessionDB
from hermes_store.errors import StoreClosed


class _RefusingExecutor(ThreadPoolExecutor):
    def submit(self, *args: object, **kwargs: object):  # type: ignore[no-untyped-def, override]
        raise AssertionError("the loop's default executor was used")


def test_calls_run_on_its_own_workers_not_the_default_executor(tmp_path: Path) -> None:
    db = SessionDB(tmp_path / "state.db")

    def where() -> str:
        return threading.current_thread().name

    db.where = where  # type: ignore[attr-defined]  # a callable attribute, as the methods are

    async def main() -> tuple[str, int]:
        asyncio.get_running_loop().set_default_executor(_RefusingExecutor())
        adb = AsyncSessionDB(db)
        await adb.create_session("s1", "cli")
        await adb.append_message("s1", "user", "hi")
        name = await adb.where()
        count = await adb.message_count("s1")
        await adb.close()
        with pytest.raises(StoreClosed):
            await adb.message_count("s1")
        return name, count

    name, count = asyncio.run(main())
    assert name.startswith("hermes-store-compat") and count == 1
