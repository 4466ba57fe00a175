"""hermes-store beside the session stores of two agent frameworks, on one workload.

    python -m benchmarks.peers [--chats 200] [--turns 3] [--json PATH]

The stores: hermes-store's `AsyncStore` (its thread pool), the OpenAI Agents SDK's
`SQLAlchemySession` and Google ADK's `DatabaseSessionService`, both on SQLAlchemy's
asyncio engine (psycopg's async driver on PostgreSQL, aiosqlite on SQLite), each on a
database of its own on the same server or in the same directory. They are optional
installs (`pip install -e '.[bench-peers]'`); a store that is not installed, or a
backend without its driver or server, gets a row saying so.

The workload, `--chats` chats at once on one event loop, each: create the session, then
per turn append the turn (the user's message and the answer), load the conversation,
and at the end list the 20 most recently updated sessions. Rows: appends (messages) per
second over the run and the p50 / p99 of each operation. Each store does it in its own
terms: hermes-store appends two messages in one `append_messages` call and loads
`get_messages_as_conversation`; the Agents SDK `add_items` the two items and
`get_items`; ADK appends two events (`append_event`, its unit) and `get_session`. The
Agents SDK has no listing, so its row lists its sessions table with the query such a
listing would send, through its own engine. A store that raises (ADK on SQLite can give
up with "database is locked" under 200 chats) is recorded as failed, with its error, and
the run goes on.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import statistics
import tempfile
import time
import uuid
from collections.abc import Awaitable
from pathlib import Path
from typing import Any, Protocol

from . import peers_left_out, postgres

OPERATIONS = ("create", "append turn", "load conversation", "list sessions")


class Peer(Protocol):
    name: str

    async def create(self, chat: str) -> Any: ...
    async def append_turn(self, handle: Any, user: str, answer: str) -> None: ...
    async def load(self, handle: Any) -> int: ...
    async def list_recent(self) -> int: ...
    async def close(self) -> None: ...


class HermesStore:
    name = "hermes-store (AsyncStore)"

    @classmethod
    async def open(cls, url: str) -> HermesStore:
        from hermes_store import migrate
        from hermes_store.aio import AsyncStore

        migrate.upgrade(url, fts_min_pause=0)
        peer = cls()
        peer.store = await AsyncStore.open(url)
        return peer

    store: Any

    async def create(self, chat: str) -> Any:
        await self.store.sessions.create_session(chat, "telegram")
        return chat

    async def append_turn(self, handle: Any, user: str, answer: str) -> None:
        await self.store.messages.append_messages(
            handle, [{"role": "user", "content": user}, {"role": "assistant", "content": answer}]
        )

    async def load(self, handle: Any) -> int:
        return len(await self.store.messages.get_messages_as_conversation(handle))

    async def list_recent(self) -> int:
        return len(await self.store.sessions.list_sessions_rich(limit=20))

    async def close(self) -> None:
        await self.store.aclose()


class AgentsSDK:
    name = "OpenAI Agents SDK (SQLAlchemySession)"

    @classmethod
    async def open(cls, url: str) -> AgentsSDK:
        from agents.extensions.memory.sqlalchemy_session import SQLAlchemySession
        from sqlalchemy.ext.asyncio import create_async_engine

        peer = cls()
        peer.session_cls = SQLAlchemySession
        peer.engine = create_async_engine(url, pool_size=5, max_overflow=10)
        # the tables once, as a deployment would; then every session without create_tables
        await SQLAlchemySession("warmup", engine=peer.engine, create_tables=True).get_items()
        return peer

    session_cls: Any
    engine: Any

    async def create(self, chat: str) -> Any:
        session = self.session_cls(chat, engine=self.engine)
        await session.get_items(limit=1)
        return session

    async def append_turn(self, handle: Any, user: str, answer: str) -> None:
        await handle.add_items(
            [{"role": "user", "content": user}, {"role": "assistant", "content": answer}]
        )

    async def load(self, handle: Any) -> int:
        return len(await handle.get_items())

    async def list_recent(self) -> int:
        from sqlalchemy import text

        async with self.engine.connect() as conn:
            rows = await conn.execute(
                text("SELECT session_id FROM agent_sessions ORDER BY updated_at DESC LIMIT 20")
            )
            return len(rows.all())

    async def close(self) -> None:
        await self.engine.dispose()


class GoogleADK:
    name = "Google ADK (DatabaseSessionService)"

    @classmethod
    async def open(cls, url: str) -> GoogleADK:
        from google.adk.events import Event
        from google.adk.sessions import DatabaseSessionService
        from google.genai import types

        peer = cls()
        peer.service = DatabaseSessionService(db_url=url, pool_size=5, max_overflow=10)
        peer.event, peer.types = Event, types
        return peer

    service: Any
    event: Any
    types: Any

    async def create(self, chat: str) -> Any:
        return await self.service.create_session(app_name="bench", user_id="u", session_id=chat)

    def _event(self, author: str, role: str, text: str) -> Any:
        content = self.types.Content(role=role, parts=[self.types.Part(text=text)])
        return self.event(author=author, content=content, invocation_id=uuid.uuid4().hex)

    async def append_turn(self, handle: Any, user: str, answer: str) -> None:
        await self.service.append_event(handle, self._event("user", "user", user))
        await self.service.append_event(handle, self._event("agent", "model", answer))

    async def load(self, handle: Any) -> int:
        session = await self.service.get_session(
            app_name="bench", user_id="u", session_id=handle.id
        )
        return len(session.events)

    async def list_recent(self) -> int:
        listed = await self.service.list_sessions(app_name="bench", user_id="u")
        recent = sorted(listed.sessions, key=lambda s: s.last_update_time, reverse=True)
        return len(recent[:20])

    async def close(self) -> None:
        await self.service.close()


PEERS: tuple[type, ...] = (HermesStore, AgentsSDK, GoogleADK)


def _pct(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(len(ordered) * q))] if ordered else 0.0


async def _timed(times: list[float], call: Awaitable[Any]) -> Any:
    started = time.perf_counter()
    result = await call
    times.append(time.perf_counter() - started)
    return result


async def _workload(peer: Any, chats: int, turns: int) -> dict[str, Any]:
    times: dict[str, list[float]] = {op: [] for op in OPERATIONS}

    async def chat(n: int) -> None:
        handle = await _timed(times["create"], peer.create(f"chat-{n}"))
        for turn in range(turns):
            await _timed(
                times["append turn"],
                peer.append_turn(handle, f"question {turn} from {n}", f"answer {turn} to {n}"),
            )
            loaded = await _timed(times["load conversation"], peer.load(handle))
            if loaded != 2 * (turn + 1):
                raise SystemExit(f"{peer.name}: chat {n} loaded {loaded} messages")
        await _timed(times["list sessions"], peer.list_recent())

    gc.collect()
    started = time.perf_counter()
    await asyncio.gather(*(chat(n) for n in range(chats)))
    wall = time.perf_counter() - started
    return {
        "wall_s": wall,
        "appends_per_s": chats * turns * 2 / wall,
        **{f"{op}_p50_ms": statistics.median(times[op]) * 1000 for op in OPERATIONS},
        **{f"{op}_p99_ms": _pct(times[op], 0.99) * 1000 for op in OPERATIONS},
    }


async def _run_peer(cls: Any, url: str, chats: int, turns: int) -> dict[str, Any]:
    peer = await cls.open(url)
    try:
        return await _workload(peer, chats, turns)
    finally:
        await peer.close()


def _async_url(backend: str, url: str, peer: type) -> str:
    """The URL each store takes: hermes-store its own; the peers SQLAlchemy's async ones."""
    if peer is HermesStore:
        return url
    if backend == "sqlite":
        return url.replace("sqlite:///", "sqlite+aiosqlite:///", 1)
    return url.replace("postgresql+psycopg://", "postgresql+psycopg_async://", 1)


def _missing(peer: type, backend: str) -> str | None:
    if peer is not HermesStore and (left_out := peers_left_out()):
        return left_out
    needs = {
        AgentsSDK: ("agents", "openai-agents"),
        GoogleADK: ("google.adk", "google-adk"),
    }
    wanted = [needs[peer]] if peer in needs else []
    if peer is not HermesStore:
        wanted.append(("greenlet", "greenlet"))
        if backend == "sqlite":
            wanted.append(("aiosqlite", "aiosqlite"))
    for module, package in wanted:
        try:
            __import__(module)
        except ImportError:
            return f"{package} is not installed (pip install -e '.[bench-peers]')"
    return None


def run(
    chats: int, turns: int, backends: tuple[str, ...] = ("postgresql", "sqlite")
) -> dict[str, Any]:
    rows: list[dict[str, Any]] = []
    skipped: dict[str, str] = {}
    failed: dict[str, str] = {}
    admin = postgres.admin_url()
    with tempfile.TemporaryDirectory(prefix="hermes-peers-") as tmp:
        for backend in backends:
            pg_missing = postgres.unavailable(admin) if backend == "postgresql" else None
            for peer in PEERS:
                label = f"{backend}, {peer.name}"
                why = pg_missing or _missing(peer, backend)
                if why:
                    skipped[label] = why
                    continue
                try:
                    if backend == "sqlite":
                        url = f"sqlite:///{Path(tmp) / (peer.__name__ + '.db')}"
                        result = asyncio.run(
                            _run_peer(peer, _async_url(backend, url, peer), chats, turns)
                        )
                    else:
                        with postgres.scratch_database(admin) as url:
                            result = asyncio.run(
                                _run_peer(peer, _async_url(backend, url, peer), chats, turns)
                            )
                except Exception as exc:  # noqa: BLE001 (a store that fails is recorded so)
                    failed[label] = f"{type(exc).__name__}: {str(exc).splitlines()[0]}"[:200]
                    print(f"  {label}: failed ({failed[label]})")
                    continue
                rows.append({"backend": backend, "store": peer.name, **result})
                print(f"  {label}: {result['appends_per_s']:.0f} appends/s")
    return {"chats": chats, "turns": turns, "rows": rows, "skipped": skipped, "failed": failed}


def print_table(result: dict[str, Any]) -> None:
    head = ("backend", "store", "appends/s", *(f"{op} p50/p99 ms" for op in OPERATIONS[1:]))
    lines = [
        (
            r["backend"],
            r["store"],
            f"{r['appends_per_s']:7.0f}",
            *(f"{r[f'{op}_p50_ms']:7.1f} / {r[f'{op}_p99_ms']:7.1f}" for op in OPERATIONS[1:]),
        )
        for r in result["rows"]
    ]
    widths = [max(len(x[i]) for x in (head, *lines)) for i in range(len(head))]

    def fmt(cells: tuple[str, ...]) -> str:
        return " | ".join(c.ljust(w) for c, w in zip(cells, widths, strict=True))

    print(
        f"agent-framework session stores ({result['chats']} chats at once, "
        f"{result['turns']} turns each)"
    )
    print(fmt(head))
    print("-+-".join("-" * w for w in widths))
    for line in lines:
        print(fmt(line))
    for label, why in result["skipped"].items():
        print(f"skipped {label}: {why}")
    for label, why in result.get("failed", {}).items():
        print(f"failed {label}: {why}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.peers", description=__doc__)
    parser.add_argument("--chats", type=int, default=200)
    parser.add_argument("--turns", type=int, default=3)
    parser.add_argument("--backends", default="postgresql,sqlite")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    result = run(args.chats, args.turns, tuple(args.backends.split(",")))
    print()
    print_table(result)
    if args.json:
        args.json.write_text(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
