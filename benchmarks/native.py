"""A native asyncio path for PostgreSQL, measured against AsyncStore's thread pool
(benchmarks/concurrent.py): SQLAlchemy's asyncio engine over psycopg's async driver, with
the same repositories and the same `Store` running inside SQLAlchemy's greenlet bridge
(`greenlet_spawn`), so every call sends the same statements in the same transactions as
the thread pool does, without a thread.

What it needs that the thread pool does not: the Store's write lock, a `threading.Lock`,
would block the event loop's one thread while another greenlet holds it across a
network wait, so it is replaced by a lock the greenlets wait on through the loop. With
`serialise_writes=False` there is no lock at all: PostgreSQL's row locks (the
repositories take them, `lock_session`) are what keep two writers of one session apart,
as they do between processes. The retry policy's pauses still sleep (they happen only
on server faults, which these runs do not provoke).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any, TypeVar

from sqlalchemy import event
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine
from sqlalchemy.util import await_only, greenlet_spawn

from hermes_store import aio
from hermes_store.config import resolve_url
from hermes_store.runtime.engine import PG_CONNECTION_DEFAULTS, install_pg_text_adapters
from hermes_store.store import Store

T = TypeVar("T")


class _LoopLock:
    """The Store's write lock for code running in greenlets on the loop's thread."""

    def __init__(self) -> None:
        self._lock = asyncio.Lock()

    def acquire(self, blocking: bool = True, timeout: float = -1) -> bool:
        await_only(self._lock.acquire())
        return True

    def release(self) -> None:
        self._lock.release()

    def __enter__(self) -> _LoopLock:
        self.acquire()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


class _NoLock(_LoopLock):
    def __init__(self) -> None:
        pass

    def acquire(self, blocking: bool = True, timeout: float = -1) -> bool:
        return True

    def release(self) -> None:
        pass


def without_write_lock(store: Store) -> None:
    """Let this PostgreSQL store's writes run side by side (row locks still apply)."""
    assert store.dialect == "postgresql"
    store._write_lock = _NoLock()  # type: ignore[assignment]
    store._runtime.write_lock = store._write_lock


def async_engine(url: str) -> AsyncEngine:
    """The asyncio engine with the connection settings `make_engine` gives PostgreSQL."""
    resolved = resolve_url(url).set(drivername="postgresql+psycopg_async")
    connect_args: dict[str, Any] = {"application_name": "hermes-store-native"}
    connect_args.update(
        {k: v for k, v in PG_CONNECTION_DEFAULTS.items() if k not in resolved.query}
    )
    engine = create_async_engine(
        resolved,
        connect_args=connect_args,
        pool_size=5,
        max_overflow=10,
        pool_pre_ping=True,
        isolation_level="READ COMMITTED",
    )

    @event.listens_for(engine.sync_engine, "connect")
    def _on_connect(dbapi_conn: Any, _record: Any) -> None:
        install_pg_text_adapters(dbapi_conn.driver_connection)

    return engine


class NativeAsyncStore(aio.AsyncStore):
    """AsyncStore's repositories, each call run in a greenlet on the event loop."""

    engine: AsyncEngine

    @classmethod
    async def open_native(cls, url: str, *, serialise_writes: bool = True) -> NativeAsyncStore:
        engine = async_engine(url)
        store = await greenlet_spawn(lambda: Store(url, engine=engine.sync_engine))
        lock = _LoopLock() if serialise_writes else _NoLock()
        store._write_lock = lock  # type: ignore[assignment]
        store._runtime.write_lock = lock  # type: ignore[assignment]
        opened = cls(store=store, workers=1)
        opened.engine = engine
        return opened

    async def run(self, call: Callable[[], T]) -> T:
        result: T = await greenlet_spawn(call)
        return result

    async def aclose(self) -> None:
        await greenlet_spawn(self.sync.close)
        await self.engine.dispose()
        await super().aclose()
