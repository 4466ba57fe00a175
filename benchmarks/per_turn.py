"""The per-turn calls of an agent, hermes-store beside the agent frameworks' stores.

    python -m benchmarks.per_turn [--iterations 200] [--backends sqlite,postgresql]
                                  [--json PATH]

One thread; the stores are called in rotation, call by call (store A, B, C, A, B, C ...,
the first store of each round moving on by one), so that load on the shared machine
hits every store alike; each row gives every store's p50 / p95 and hermes-store's ratio
to the best peer's p50. Rows:

- append one message to one of 100 sessions, in turn;
- load a 100-message and a 1,000-message conversation;
- the newest 20 messages of the 1,000;
- append one message into the 1,000-message session.

Stores, each on a database of its own (a file in one directory, or a database on the
same PostgreSQL server):

- hermes-store: `MessageRepository.append_message`, `get_messages_as_conversation` and
  `get_newest_messages`, on SQLite through each driver (the standard library's `sqlite3`,
  in the journal mode its SQLite is given, and `pysqlite3`'s fixed SQLite in WAL; one
  child process per driver, since a process drives SQLite through one library) and on
  PostgreSQL;
- the OpenAI Agents SDK: `SQLiteSession` (SQLite only) and `SQLAlchemySession`
  (aiosqlite, psycopg's async driver): `add_items`, `get_items`, `get_items(limit=20)`;
  and beside them the same calls on hermes-store's adapter of the SDK's `Session`
  (`hermes_store.integrations.openai_agents.HermesSession` on an `AsyncStore`, SQLite
  and PostgreSQL), whose p50 is also given as a ratio to the best of the SDK's own two;
- Google ADK's `DatabaseSessionService`: `append_event`, `get_session` (with
  `num_recent_events=20` for the newest 20), and the same calls on hermes-store's ADK
  session service (`hermes_store.integrations.adk.HermesSessionService`, the `adk` extra);
- LangGraph's checkpoint savers (`SqliteSaver`, `PostgresSaver`) storing the conversation
  as LangGraph does, a list of langchain-core messages in a checkpoint's `messages`
  channel: an append is a `put` of the list with the new message (the list kept in
  memory, as a running graph holds it), a load a `get_tuple`, the newest 20 a
  `get_tuple` sliced, since a checkpoint is read whole.

The async stores are driven through one event loop in the same thread
(`run_until_complete` per call). A peer that is not installed is listed as skipped; one
that raises is recorded as failed with its error and left out of the rest of that row.
The peers are optional (`pip install -e '.[bench-peers]'`). Never run in CI.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import json
import os
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from . import peers_left_out, postgres
from .stats import load_average, percentiles

ROWS = (
    "append one (100 sessions)",
    "load a 100-message conversation",
    "load a 1,000-message conversation",
    "newest 20 of 1,000",
    "append into a 1,000-message session",
)
SMALL_SESSIONS = 100
NEWEST = 20
HERMES = "hermes-store"
HERMES_ADK = f"{HERMES} ADK HermesSessionService"
_WORDS = (
    "the connection pool was exhausted while the migration ran so we retried the batch "
    "with a smaller chunk size and the rebase went through after the lock was released"
).split()


def text_of(n: int) -> str:
    """A message of about 200 characters, different for every n."""
    words = [_WORDS[(n * 7 + i * 3) % len(_WORDS)] for i in range(36)]
    return f"{n}: " + " ".join(words)


def role_of(n: int) -> str:
    return "user" if n % 2 == 0 else "assistant"


class Store:
    """What the benchmark asks of a store; `expected` checks a load's length."""

    name = ""

    def setup(self, small: list[str], hundred: str, thousand: str) -> None:
        raise NotImplementedError

    def append(self, session: str, n: int) -> None:
        raise NotImplementedError

    def load(self, session: str) -> int:
        raise NotImplementedError

    def newest(self, session: str, count: int) -> int:
        raise NotImplementedError

    def close(self) -> None:
        pass


class _Looped(Store):
    """An async store, driven through one event loop in this thread."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()

    def run(self, coro: Any) -> Any:
        return self.loop.run_until_complete(coro)

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.run(self.aclose())
        self.loop.close()

    async def aclose(self) -> None:
        pass


class HermesStore(Store):
    def __init__(self, url: str, label: str) -> None:
        from hermes_store import migrate
        from hermes_store.repositories.messages import MessageRepository
        from hermes_store.repositories.sessions import SessionRepository
        from hermes_store.store import Store as HStore

        self.name = f"{HERMES} ({label})"
        migrate.upgrade(url, fts_min_pause=0)
        self.store = HStore(url)
        self.messages = MessageRepository(self.store)
        self.sessions = SessionRepository(self.store)
        # the newest-N call, where this version of hermes-store has it
        self.newest_call = getattr(self.messages, "get_newest_messages", None)

    def setup(self, small: list[str], hundred: str, thousand: str) -> None:
        for sid in [*small, hundred, thousand]:
            self.sessions.create_session(sid, "cli")
        for sid, count in ((hundred, 100), (thousand, 1000)):
            batch = [{"role": role_of(n), "content": text_of(n)} for n in range(count)]
            self.messages.append_messages(sid, batch)

    def append(self, session: str, n: int) -> None:
        self.messages.append_message(session, role_of(n), text_of(n))

    def load(self, session: str) -> int:
        return len(self.messages.get_messages_as_conversation(session))

    def newest(self, session: str, count: int) -> int:
        if self.newest_call is not None:
            return len(self.newest_call(session, count))
        # before get_newest_messages: the count, then the page at its end
        total = self.messages.message_count(session)
        return len(self.messages.get_messages(session, limit=count, offset=total - count))

    def close(self) -> None:
        self.store.close()


def _item(n: int) -> dict[str, Any]:
    return {"role": role_of(n), "content": text_of(n)}


class AgentsSQLiteSession(_Looped):
    name = "Agents SDK SQLiteSession"

    def __init__(self, path: Path) -> None:
        super().__init__()
        from agents.memory import SQLiteSession

        self.cls = SQLiteSession
        self.path = path
        self.sessions: dict[str, Any] = {}

    def _session(self, sid: str) -> Any:
        found = self.sessions.get(sid)
        if found is None:
            found = self.sessions[sid] = self.cls(sid, self.path)
        return found

    def setup(self, small: list[str], hundred: str, thousand: str) -> None:
        for sid in small:
            self._session(sid)
        for sid, count in ((hundred, 100), (thousand, 1000)):
            self.run(self._session(sid).add_items([_item(n) for n in range(count)]))

    def append(self, session: str, n: int) -> None:
        self.run(self._session(session).add_items([_item(n)]))

    def load(self, session: str) -> int:
        return len(self.run(self._session(session).get_items()))

    def newest(self, session: str, count: int) -> int:
        return len(self.run(self._session(session).get_items(limit=count)))

    async def aclose(self) -> None:
        for session in self.sessions.values():
            session.close()


class AgentsHermesSession(_Looped):
    """hermes-store's adapter of the SDK's `Session`, on an `AsyncStore`, called as the
    SDK's sessions are."""

    # not "hermes-store ...": the rows' hermes-store entry is the repositories' own
    name = "HermesSession (Agents SDK Session on hermes-store)"

    def __init__(self, url: str) -> None:
        super().__init__()
        from hermes_store import migrate
        from hermes_store.aio import AsyncStore
        from hermes_store.integrations.openai_agents import HermesSession

        migrate.upgrade(url, fts_min_pause=0)
        self.store = self.run(AsyncStore.open(url))
        self.cls = HermesSession
        self.sessions: dict[str, Any] = {}

    def _session(self, sid: str) -> Any:
        found = self.sessions.get(sid)
        if found is None:
            found = self.sessions[sid] = self.cls(sid, self.store)
        return found

    def setup(self, small: list[str], hundred: str, thousand: str) -> None:
        # the sessions exist before the first turn, as they do for the other stores
        for sid in small:
            self.run(self.store.sessions.ensure_session(sid, "openai-agents"))
        for sid, count in ((hundred, 100), (thousand, 1000)):
            self.run(self._session(sid).add_items([_item(n) for n in range(count)]))

    def append(self, session: str, n: int) -> None:
        self.run(self._session(session).add_items([_item(n)]))

    def load(self, session: str) -> int:
        return len(self.run(self._session(session).get_items()))

    def newest(self, session: str, count: int) -> int:
        return len(self.run(self._session(session).get_items(limit=count)))

    async def aclose(self) -> None:
        await self.store.aclose()


ADAPTER = AgentsHermesSession.name


class AgentsSQLAlchemySession(_Looped):
    name = "Agents SDK SQLAlchemySession"

    def __init__(self, url: str) -> None:
        super().__init__()
        from agents.extensions.memory.sqlalchemy_session import SQLAlchemySession
        from sqlalchemy.ext.asyncio import create_async_engine

        self.cls = SQLAlchemySession
        self.engine = create_async_engine(url)
        self.sessions: dict[str, Any] = {}
        # the tables once, as a deployment would
        self.run(SQLAlchemySession("warmup", engine=self.engine, create_tables=True).get_items())

    def _session(self, sid: str) -> Any:
        found = self.sessions.get(sid)
        if found is None:
            found = self.sessions[sid] = self.cls(sid, engine=self.engine)
        return found

    def setup(self, small: list[str], hundred: str, thousand: str) -> None:
        for sid in small:
            self.run(self._session(sid).get_items(limit=1))
        for sid, count in ((hundred, 100), (thousand, 1000)):
            self.run(self._session(sid).add_items([_item(n) for n in range(count)]))

    def append(self, session: str, n: int) -> None:
        self.run(self._session(session).add_items([_item(n)]))

    def load(self, session: str) -> int:
        return len(self.run(self._session(session).get_items()))

    def newest(self, session: str, count: int) -> int:
        return len(self.run(self._session(session).get_items(limit=count)))

    async def aclose(self) -> None:
        await self.engine.dispose()


class GoogleADK(_Looped):
    name = "Google ADK DatabaseSessionService"

    def __init__(self, url: str, service: Any = None) -> None:
        super().__init__()
        from google.adk.events import Event
        from google.adk.sessions import DatabaseSessionService
        from google.adk.sessions.base_session_service import GetSessionConfig
        from google.genai import types

        self.service = DatabaseSessionService(db_url=url) if service is None else service
        self.event, self.types, self.config = Event, types, GetSessionConfig
        self.handles: dict[str, Any] = {}

    def _event(self, n: int) -> Any:
        role = "user" if n % 2 == 0 else "model"
        content = self.types.Content(role=role, parts=[self.types.Part(text=text_of(n))])
        author = "user" if n % 2 == 0 else "agent"
        return self.event(author=author, content=content, invocation_id=uuid.uuid4().hex)

    def setup(self, small: list[str], hundred: str, thousand: str) -> None:
        for sid in [*small, hundred, thousand]:
            self.handles[sid] = self.run(
                self.service.create_session(app_name="bench", user_id="u", session_id=sid)
            )
        for sid, count in ((hundred, 100), (thousand, 1000)):
            for n in range(count):
                self.run(self.service.append_event(self.handles[sid], self._event(n)))

    def append(self, session: str, n: int) -> None:
        self.run(self.service.append_event(self.handles[session], self._event(n)))

    def _get(self, session: str, config: Any = None) -> Any:
        return self.run(
            self.service.get_session(
                app_name="bench", user_id="u", session_id=session, config=config
            )
        )

    def load(self, session: str) -> int:
        return len(self._get(session).events)

    def newest(self, session: str, count: int) -> int:
        return len(self._get(session, self.config(num_recent_events=count)).events)

    async def aclose(self) -> None:
        await self.service.close()


def _hermes_adk(url: str) -> GoogleADK:
    """The ADK calls on hermes-store's ADK session service, on a database at head."""
    from hermes_store import migrate
    from hermes_store.integrations.adk import HermesSessionService

    migrate.upgrade(url, fts_min_pause=0)
    store = GoogleADK(url, HermesSessionService(url))
    store.name = HERMES_ADK
    return store


class LangGraphSaver(Store):
    """A LangGraph checkpoint saver holding each conversation as a graph would: the list
    of messages in the `messages` channel of the thread's newest checkpoint."""

    def __init__(self, name: str, saver: Any, closing: contextlib.ExitStack) -> None:
        from langchain_core.messages import AIMessage, HumanMessage
        from langgraph.checkpoint.base import empty_checkpoint

        self.name = name
        self.saver = saver
        self.closing = closing
        self.kinds = (HumanMessage, AIMessage)
        self.empty_checkpoint = empty_checkpoint
        self.threads: dict[str, list[Any]] = {}
        self.steps: dict[str, int] = {}

    def _message(self, n: int) -> Any:
        return self.kinds[n % 2](content=text_of(n))

    def _put(self, thread: str, messages: list[Any]) -> None:
        step = self.steps.get(thread, 0) + 1
        self.steps[thread] = step
        checkpoint = self.empty_checkpoint()
        checkpoint["channel_values"] = {"messages": messages}
        checkpoint["channel_versions"] = {"messages": step}
        config = {"configurable": {"thread_id": thread, "checkpoint_ns": ""}}
        self.saver.put(config, checkpoint, {"source": "loop", "step": step}, {"messages": step})

    def setup(self, small: list[str], hundred: str, thousand: str) -> None:
        for sid in small:
            self.threads[sid] = []
        for sid, count in ((hundred, 100), (thousand, 1000)):
            self.threads[sid] = [self._message(n) for n in range(count)]
            self._put(sid, self.threads[sid])

    def append(self, session: str, n: int) -> None:
        messages = self.threads[session]
        messages.append(self._message(n))
        self._put(session, messages)

    def _messages(self, session: str) -> list[Any]:
        config = {"configurable": {"thread_id": session, "checkpoint_ns": ""}}
        found = self.saver.get_tuple(config)
        return [] if found is None else list(found.checkpoint["channel_values"]["messages"])

    def load(self, session: str) -> int:
        return len(self._messages(session))

    def newest(self, session: str, count: int) -> int:
        return len(self._messages(session)[-count:])

    def close(self) -> None:
        self.closing.close()


def _langgraph_sqlite(path: Path) -> LangGraphSaver:
    from langgraph.checkpoint.sqlite import SqliteSaver

    closing = contextlib.ExitStack()
    saver = closing.enter_context(SqliteSaver.from_conn_string(str(path)))
    saver.setup()
    return LangGraphSaver("LangGraph SqliteSaver", saver, closing)


def _langgraph_postgres(url: str) -> LangGraphSaver:
    from langgraph.checkpoint.postgres import PostgresSaver

    closing = contextlib.ExitStack()
    plain = url.replace("postgresql+psycopg://", "postgresql://", 1)
    saver = closing.enter_context(PostgresSaver.from_conn_string(plain))
    saver.setup()
    return LangGraphSaver("LangGraph PostgresSaver", saver, closing)


#: Peer name -> (module that must import, package to install).
NEEDS = {
    AgentsHermesSession.name: ("agents", "openai-agents"),
    "Agents SDK SQLiteSession": ("agents", "openai-agents"),
    "Agents SDK SQLAlchemySession": ("agents", "openai-agents"),
    "Google ADK DatabaseSessionService": ("google.adk", "google-adk"),
    HERMES_ADK: ("google.adk", "google-adk"),
    "LangGraph SqliteSaver": ("langgraph.checkpoint.sqlite", "langgraph-checkpoint-sqlite"),
    "LangGraph PostgresSaver": ("langgraph.checkpoint.postgres", "langgraph-checkpoint-postgres"),
}


def _missing(name: str, backend: str) -> str | None:
    if left_out := peers_left_out():
        return left_out
    wanted = [NEEDS[name]]
    if "SQLAlchemy" in name or "ADK" in name:
        wanted.append(("greenlet", "greenlet"))
        wanted.append(("aiosqlite", "aiosqlite") if backend == "sqlite" else ("psycopg", "psycopg"))
    for module, package in wanted:
        try:
            __import__(module)
        except ImportError:
            return f"{package} is not installed (pip install -e '.[bench-peers]')"
    return None


def _failure(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"[:200]


def measure(stores: list[Store], iterations: int, failed: dict[str, str]) -> list[dict[str, Any]]:
    """Every row, the stores called in rotation; a store that raises is dropped from the
    row (and, during setup, from every row) with its error in `failed`."""
    small = [f"small-{i}" for i in range(SMALL_SESSIONS)]
    hundred, thousand = "hundred", "thousand"
    live: list[Store] = []
    for store in stores:
        try:
            store.setup(small, hundred, thousand)
            live.append(store)
        except Exception as exc:  # noqa: BLE001 (a peer that fails is recorded as failed)
            failed[store.name] = f"setup: {_failure(exc)}"
    rows: list[dict[str, Any]] = []
    counter = iter(range(10**9))
    calls: dict[str, tuple[Callable[[Store, int], Any], int | None]] = {
        ROWS[0]: (lambda s, i: s.append(small[i % SMALL_SESSIONS], next(counter)), None),
        ROWS[1]: (lambda s, i: s.load(hundred), 100),
        ROWS[2]: (lambda s, i: s.load(thousand), 1000),
        ROWS[3]: (lambda s, i: s.newest(thousand, NEWEST), NEWEST),
        ROWS[4]: (lambda s, i: s.append(thousand, next(counter)), None),
    }
    for row, (call, expected) in calls.items():
        samples: dict[str, list[float]] = {s.name: [] for s in live}
        row_failed: dict[str, str] = {}
        in_row = list(live)
        gc.collect()
        warmup = 3
        for i in range(-warmup, iterations):
            shift = i % len(in_row) if in_row else 0
            for store in in_row[shift:] + in_row[:shift]:
                started = time.perf_counter()
                try:
                    got = call(store, i)
                except Exception as exc:  # noqa: BLE001
                    row_failed[store.name] = _failure(exc)
                    continue
                elapsed = time.perf_counter() - started
                if expected is not None and got != expected:
                    row_failed[store.name] = f"returned {got} messages, not {expected}"
                elif i >= 0:
                    samples[store.name].append(elapsed)
            in_row = [s for s in in_row if s.name not in row_failed]
        results = {}
        for name, taken in samples.items():
            if name in row_failed or not taken:
                continue
            p50, p95 = percentiles(taken)
            results[name] = {"p50_ms": p50, "p95_ms": p95, "n": len(taken)}
        rows.append(
            {"row": row, "stores": results, "failed": row_failed, "load": load_average()}
        )
    return rows


@contextlib.contextmanager
def _closing_all(stores: list[Store]) -> Iterator[None]:
    try:
        yield
    finally:
        for store in stores:
            with contextlib.suppress(Exception):
                store.close()


def _open(factory: Callable[[], Store], name: str, failed: dict[str, str]) -> Store | None:
    try:
        return factory()
    except Exception as exc:  # noqa: BLE001
        failed[name] = f"open: {_failure(exc)}"
        return None


def run_sqlite(iterations: int, directory: Path) -> dict[str, Any]:
    """The SQLite column for this process's driver (HERMES_STORE_SQLITE_DRIVER)."""
    from hermes_store.sqlite import driver as sqlite_driver

    driver = sqlite_driver.current()
    skipped: dict[str, str] = {}
    failed: dict[str, str] = {}
    stores: list[Store] = []
    hermes_url = f"sqlite:///{directory / 'hermes.db'}"
    hermes = _open(lambda: HermesStore(hermes_url, "sqlite"), HERMES, failed)
    label = "sqlite"
    if isinstance(hermes, HermesStore):
        with hermes.store.engine.connect() as conn:
            mode = conn.exec_driver_sql("PRAGMA journal_mode").scalar()
        label = f"{driver.name}, SQLite {'.'.join(map(str, driver.sqlite_version))}, {mode}"
        hermes.name = f"{HERMES} ({label})"
        stores.append(hermes)
    factories: dict[str, Callable[[], Store]] = {
        AgentsHermesSession.name: lambda: AgentsHermesSession(
            f"sqlite:///{directory / 'hermes_agents.db'}"
        ),
        "Agents SDK SQLiteSession": lambda: AgentsSQLiteSession(directory / "sdk.db"),
        "Agents SDK SQLAlchemySession": lambda: AgentsSQLAlchemySession(
            f"sqlite+aiosqlite:///{directory / 'sdk_sqlalchemy.db'}"
        ),
        "Google ADK DatabaseSessionService": lambda: GoogleADK(
            f"sqlite+aiosqlite:///{directory / 'adk.db'}"
        ),
        HERMES_ADK: lambda: _hermes_adk(f"sqlite:///{directory / 'hermes_adk.db'}"),
        "LangGraph SqliteSaver": lambda: _langgraph_sqlite(directory / "langgraph.db"),
    }
    for name, factory in factories.items():
        why = _missing(name, "sqlite")
        if why:
            skipped[name] = why
            continue
        found = _open(factory, name, failed)
        if found is not None:
            stores.append(found)
    with _closing_all(stores):
        rows = measure(stores, iterations, failed)
    return {"backend": f"SQLite ({label})", "rows": rows, "skipped": skipped, "failed": failed}


def run_postgresql(iterations: int) -> dict[str, Any]:
    admin = postgres.admin_url()
    why = postgres.unavailable(admin)
    if why:
        return {"backend": "PostgreSQL", "rows": [], "skipped": {"all": why}, "failed": {}}
    skipped: dict[str, str] = {}
    failed: dict[str, str] = {}
    stores: list[Store] = []
    with contextlib.ExitStack() as databases:

        def database(suffix: str) -> str:
            return databases.enter_context(postgres.scratch_database(admin, f"_turn_{suffix}"))

        def async_url(suffix: str) -> str:
            return database(suffix).replace(
                "postgresql+psycopg://", "postgresql+psycopg_async://", 1
            )

        hermes = _open(lambda: HermesStore(database("hermes"), "PostgreSQL"), HERMES, failed)
        if hermes is not None:
            stores.append(hermes)
        factories: dict[str, Callable[[], Store]] = {
            AgentsHermesSession.name: lambda: AgentsHermesSession(database("hermes_agents")),
            "Agents SDK SQLAlchemySession": lambda: AgentsSQLAlchemySession(async_url("sdk")),
            "Google ADK DatabaseSessionService": lambda: GoogleADK(async_url("adk")),
            HERMES_ADK: lambda: _hermes_adk(database("hermes_adk")),
            "LangGraph PostgresSaver": lambda: _langgraph_postgres(database("langgraph")),
        }
        for name, factory in factories.items():
            missing = _missing(name, "postgresql")
            if missing:
                skipped[name] = missing
                continue
            found = _open(factory, name, failed)
            if found is not None:
                stores.append(found)
        with _closing_all(stores):
            rows = measure(stores, iterations, failed)
    return {"backend": "PostgreSQL", "rows": rows, "skipped": skipped, "failed": failed}


def _sqlite_in_child(driver: str, iterations: int) -> dict[str, Any]:
    """The SQLite column of one driver, from a child process that drives only it."""
    with tempfile.TemporaryDirectory(prefix="hermes-turn-") as tmp:
        out = Path(tmp) / "result.json"
        env = {**os.environ, "HERMES_STORE_SQLITE_DRIVER": driver}
        command = [
            sys.executable, "-m", "benchmarks.per_turn", "--child-sqlite", str(out),
            "--iterations", str(iterations),
        ]  # fmt: skip
        done = subprocess.run(command, env=env, cwd=Path(__file__).parent.parent, check=False)
        if done.returncode != 0 or not out.exists():
            why = f"the child process for {driver} exited with {done.returncode}"
            return {"backend": f"SQLite ({driver})", "rows": [], "skipped": {"all": why}}
        result: dict[str, Any] = json.loads(out.read_text())
        return result


def run(iterations: int, backends: tuple[str, ...] = ("sqlite", "postgresql")) -> dict[str, Any]:
    columns = []
    if "sqlite" in backends:
        for driver in ("pysqlite3", "sqlite3"):
            print(f"  per-turn calls: SQLite through {driver}")
            columns.append(_sqlite_in_child(driver, iterations))
    if "postgresql" in backends:
        print("  per-turn calls: PostgreSQL")
        columns.append(run_postgresql(iterations))
    return {"iterations": iterations, "columns": columns}


def _best_peer(stores: dict[str, Any], prefix: str = "") -> tuple[str, float] | None:
    peers = [
        (name, r["p50_ms"])
        for name, r in stores.items()
        if not name.startswith(HERMES) and name != ADAPTER and name.startswith(prefix)
    ]
    return min(peers, key=lambda p: p[1]) if peers else None


def _adapter_ratio(stores: dict[str, Any]) -> str:
    """The Agents SDK adapter's p50 against the best of the SDK's own sessions."""
    adapter = stores.get(ADAPTER)
    best = _best_peer(stores, "Agents SDK")
    if adapter is None or best is None:
        return ""
    return f"; the adapter {adapter['p50_ms'] / best[1]:.2f}x the SDK's best ({best[0]})"


def print_table(result: dict[str, Any]) -> None:
    print(
        f"per-turn calls, one thread, stores in rotation call by call "
        f"({result['iterations']} calls each; p50 / p95 ms)"
    )
    for column in result["columns"]:
        print(f"\n{column['backend']}")
        for label, why in column.get("skipped", {}).items():
            print(f"  skipped {label}: {why}")
        for label, why in column.get("failed", {}).items():
            print(f"  failed {label}: {why}")
        for row in column["rows"]:
            stores = row["stores"]
            hermes = next((r for n, r in stores.items() if n.startswith(HERMES)), None)
            best = _best_peer(stores)
            ratio = ""
            if hermes is not None and best is not None:
                ratio = f"{hermes['p50_ms'] / best[1]:.2f}x the best peer ({best[0]})"
            ratio += _adapter_ratio(stores)
            print(f"  {row['row']}: {ratio} (load {row['load']:.1f})")
            for name, r in sorted(stores.items(), key=lambda x: x[1]["p50_ms"]):
                print(f"    {r['p50_ms']:8.2f} / {r['p95_ms']:8.2f}  {name}")
            for name, why in row["failed"].items():
                print(f"    failed    {name}: {why}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.per_turn", description=__doc__)
    parser.add_argument("--iterations", type=int, default=200)
    parser.add_argument("--backends", default="sqlite,postgresql")
    parser.add_argument("--json", type=Path)
    parser.add_argument("--child-sqlite", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child_sqlite:
        with tempfile.TemporaryDirectory(prefix="hermes-turn-") as tmp:
            column = run_sqlite(args.iterations, Path(tmp))
        args.child_sqlite.write_text(json.dumps(column))
        return 0
    result = run(args.iterations, tuple(args.backends.split(",")))
    print()
    print_table(result)
    if args.json:
        args.json.write_text(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
