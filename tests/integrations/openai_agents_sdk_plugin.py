"""A pytest plugin that runs the OpenAI Agents SDK's own session tests, unchanged, on
hermes-store: loaded with `-p openai_agents_sdk_plugin` into a pytest run of the SDK's
test files (tests/integrations/openai_agents_sdk.py starts that run), it puts
`HermesSession` in place of the SDK's `SQLiteSession` and `SQLAlchemySession` before any
test module imports them.

The stand-ins keep the SDK classes' constructors, so each test builds them as it always
does; what they store goes through `HermesSession` into a hermes-store database:

- `HERMES_STORE_SDK_BACKEND=sqlite` (the default): the SQLite file the test names (its
  `db_path`, or a `sqlite+aiosqlite:///FILE` URL), created at head from a template; an
  in-memory database becomes a file of its own in a temporary directory.
- `HERMES_STORE_SDK_BACKEND=postgresql`: a database of its own on the test server
  (tests/helpers/postgres.py) for each file or URL the test names.

Sessions the test makes on the same file share one store, as the SDK's share one file.
Every store is closed when the test ends, and its PostgreSQL databases are emptied for
the next test (all but the schema's version rows and the change feed), then dropped when
the run ends.
`HERMES_STORE_SDK_REPORT=FILE` receives each test's outcome and whether it made one of
the stand-ins (JSON), which tests/integrations/openai_agents_sdk.py counts.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import agents
import agents.memory
import agents.memory.sqlite_session
import pytest
from agents.memory import SessionSettings
from agents.memory.session_settings import coerce_session_settings

from hermes_store import migrate
from hermes_store.integrations.openai_agents import HermesSession
from hermes_store.store import Store

BACKEND = os.environ.get("HERMES_STORE_SDK_BACKEND", "sqlite")
if BACKEND not in ("sqlite", "postgresql"):
    raise pytest.UsageError(f"HERMES_STORE_SDK_BACKEND must be sqlite or postgresql: {BACKEND}")

_workdir = Path(tempfile.mkdtemp(prefix="hermes-sdk-"))
_template: Path | None = None
#: The stores of the running test, by the file or URL it named.
_stores: dict[str, Store] = {}
#: Every PostgreSQL database made, those the running test uses, and those emptied for
#: the next test (a database per test would cost a CREATE and a DROP DATABASE each).
_pg_databases: list[str] = []
_pg_used: list[str] = []
_pg_free: list[str] = []
#: What emptying a database leaves: the schema's version and meta rows, and the change
#: feed (whose positions its state rows refer to; no SDK test reads it).
_PG_KEPT = (
    "hermes_store_version", "schema_version", "state_meta",
    "hermes_store_changes", "hermes_store_changes_pending", "hermes_store_feed_state",
)  # fmt: skip
_made_in_test = False


def _sqlite_template() -> Path:
    """A SQLite file at head, copied for each new database (faster than migrating each)."""
    global _template
    if _template is None:
        _template = _workdir / "template.db"
        migrate.upgrade(f"sqlite:///{_template}", fts_min_pause=0)
    return _template


def _store_for(key: str | None) -> Store:
    """The running test's store for the database named `key` (None: a new one)."""
    global _made_in_test
    _made_in_test = True
    if key is not None and key in _stores:
        return _stores[key]
    if BACKEND == "postgresql":
        from helpers.postgres import _admin_execute, _head_template, _pg_url, require_pg

        require_pg()
        if _pg_free:
            name = _pg_free.pop()
        else:
            name = f"hs_sdk_{os.getpid()}_{len(_pg_databases)}"
            _admin_execute(f'CREATE DATABASE "{name}" TEMPLATE "{_head_template()}"')
            _pg_databases.append(name)
        _pg_used.append(name)
        store = Store(_pg_url(name))
    else:
        path = Path(key) if key is not None else Path(tempfile.mkdtemp(dir=_workdir)) / "m.db"
        if not path.exists():
            path.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(_sqlite_template(), path)
        store = Store(str(path))
    _stores[key if key is not None else f"memory-{id(store)}"] = store
    return store


def _settings(value: SessionSettings | dict[str, Any] | None) -> SessionSettings:
    """The settings as the SDK's own sessions read them (a dict checked field by field)."""
    if value is None:
        return SessionSettings()
    return coerce_session_settings(value)


class _Closable(HermesSession):
    """`close()` as the SDK's sessions have it: every later call is refused."""

    closed_message = "session is closed"

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._closed = False

    def close(self) -> None:
        self._closed = True

    async def _run(self, work: Any) -> Any:
        if self._closed:
            raise RuntimeError(self.closed_message)
        return await super()._run(work)

    async def add_items(self, items: Any) -> None:
        if self._closed:  # also for an empty list, which writes nothing
            raise RuntimeError(self.closed_message)
        await super().add_items(items)


class SQLiteSessionOnHermes(_Closable):
    """`SQLiteSession`'s constructor, on a hermes-store database."""

    closed_message = "SQLiteSession is closed"

    def __init__(
        self,
        session_id: str,
        db_path: str | Path = ":memory:",
        sessions_table: str = "agent_sessions",
        messages_table: str = "agent_messages",
        session_settings: SessionSettings | dict[str, Any] | None = None,
    ) -> None:
        memory = str(db_path) == ":memory:"
        key = None if memory else str(Path(db_path).expanduser().resolve())
        super().__init__(session_id, _store_for(key), session_settings=_settings(session_settings))
        self.db_path = db_path
        self.sessions_table = sessions_table
        self.messages_table = messages_table


class SQLAlchemySessionOnHermes(_Closable):
    """`SQLAlchemySession`'s constructor and `from_url`, on a hermes-store database (the
    engine it is given is kept, for the test to dispose of, and never used)."""

    def __init__(
        self,
        session_id: str,
        *,
        engine: Any,
        create_tables: bool = False,
        sessions_table: str = "agent_sessions",
        messages_table: str = "agent_messages",
        session_settings: SessionSettings | dict[str, Any] | None = None,
        ensure_ascii: bool = True,
    ) -> None:
        database = engine.url.database
        key = None if database in (None, "", ":memory:") else str(Path(database).resolve())
        if key is None:
            key = f"engine-{id(engine)}"  # one in-memory database per engine, as there
        super().__init__(session_id, _store_for(key), session_settings=_settings(session_settings))
        self.engine = engine
        self.sessions_table = sessions_table
        self.messages_table = messages_table

    @classmethod
    def from_url(
        cls,
        session_id: str,
        *,
        url: str,
        engine_kwargs: dict[str, Any] | None = None,
        session_settings: SessionSettings | dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> SQLAlchemySessionOnHermes:
        from sqlalchemy.ext.asyncio import create_async_engine

        engine = create_async_engine(url, **(engine_kwargs or {}))
        return cls(session_id, engine=engine, session_settings=session_settings, **kwargs)


def _install() -> None:
    for module in (agents, agents.memory, agents.memory.sqlite_session):
        module.SQLiteSession = SQLiteSessionOnHermes  # type: ignore[attr-defined]
    try:
        import agents.extensions.memory as extensions
        import agents.extensions.memory.sqlalchemy_session as sqlalchemy_session
    except ImportError:  # the SDK's sqlalchemy extra is missing: its tests skip
        return
    for module in (extensions, sqlalchemy_session):
        module.SQLAlchemySession = SQLAlchemySessionOnHermes  # type: ignore[attr-defined]


_install()


@pytest.fixture(autouse=True)
def _hermes_stores() -> Iterator[None]:
    """Close the test's stores and drop its PostgreSQL databases when it ends."""
    global _made_in_test
    _made_in_test = False
    yield
    for store in _stores.values():
        store.close()
    _stores.clear()
    for name in _pg_used:
        _empty(name)
        _pg_free.append(name)
    _pg_used.clear()


def _empty(name: str) -> None:
    """Delete every row a test can have written to the PostgreSQL database `name`."""
    from helpers.postgres import _pg_url
    from sqlalchemy import create_engine, text
    from sqlalchemy.pool import NullPool

    engine = create_engine(_pg_url(name), poolclass=NullPool)
    try:
        with engine.begin() as conn:
            tables = conn.execute(
                text("SELECT tablename FROM pg_tables WHERE schemaname = 'public'")
            ).scalars()
            emptied = sorted(set(tables) - set(_PG_KEPT))
            conn.execute(text(f"TRUNCATE {', '.join(emptied)} CASCADE"))
    finally:
        engine.dispose()


_report: dict[str, dict[str, Any]] = {}


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    report = yield
    entry = _report.setdefault(item.nodeid, {"outcome": "passed", "hermes": False})
    entry["hermes"] = entry["hermes"] or _made_in_test
    if report.failed:
        entry["outcome"] = "failed"
        crash = getattr(report.longrepr, "reprcrash", None)
        entry.setdefault("error", crash.message.splitlines()[0] if crash else str(report.longrepr))
    elif report.skipped and entry["outcome"] != "failed":
        entry["outcome"] = "skipped"
    return report


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    target = os.environ.get("HERMES_STORE_SDK_REPORT")
    if target:
        Path(target).write_text(json.dumps(_report, indent=1, sort_keys=True), encoding="utf-8")
    from helpers.postgres import _admin_execute, _pg_state

    for name in _pg_databases:
        _admin_execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    template = _pg_state.get("template")
    if template:
        _admin_execute(f'DROP DATABASE IF EXISTS "{template}" WITH (FORCE)')
    shutil.rmtree(_workdir, ignore_errors=True)
