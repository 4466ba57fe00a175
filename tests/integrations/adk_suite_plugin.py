"""A pytest plugin that runs Google ADK's own session-service tests, unchanged, against
hermes_store.integrations.adk.HermesSessionService (tests/integrations/test_adk_suite.py
starts the run; docs/adk.md#adks-own-tests says how to run it by hand).

ADK's tests/unittests/sessions/test_session_service.py builds its services in one
function, `get_session_service(service_type, tmp_path)`: its `session_service` fixture is
parametrised over the service types, and the tests about stale sessions call it with
`SessionServiceType.DATABASE` themselves. This plugin replaces that function in the
collected module so that DATABASE gives a HermesSessionService on a database of its own
(a fresh SQLite file, or a fresh PostgreSQL database cloned from one at head), and
deselects what is not about the service under test: the other service types' variants
(ADK's in-memory and SQLite services) and the tests that build or mock ADK's own
DatabaseSessionService by name (its engine options, its SQLAlchemy sessions, its table
setup). What was deselected, and why, is printed at the end of the run.

HERMES_STORE_ADK_BACKEND picks the backend: `sqlite` (default) or `postgresql` (the
test server of tests/helpers/postgres.py, HERMES_STORE_TEST_PG).
"""

from __future__ import annotations

import asyncio
import enum
import inspect
import os
import shutil
import tempfile
from collections import Counter
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import pytest

from hermes_store import migrate
from hermes_store.integrations.adk import HermesSessionService

BACKEND_ENV = "HERMES_STORE_ADK_BACKEND"
#: The fixture ADK's module parametrises over its service types, and the one type whose
#: variants run on hermes-store.
FIXTURE = "session_service"
REPLACED_TYPE = "DATABASE"

_KEY: pytest.StashKey[_Run] = pytest.StashKey()


class _Run:
    """The databases and services of one run, and what was deselected."""

    def __init__(self, backend: str) -> None:
        self.backend = backend
        self.cleanup = ExitStack()
        self.scratch = Path(tempfile.mkdtemp(prefix="adk-hermes-"))
        self.cleanup.callback(shutil.rmtree, self.scratch, True)
        self.template: Path | None = None
        self.services: list[HermesSessionService] = []
        self.deselected: Counter[str] = Counter()

    def database(self) -> str:
        """The URL of a new database at head, of its own."""
        if self.backend == "postgresql":
            from helpers.postgres import pg_database

            return self.cleanup.enter_context(pg_database(at_head=True))
        if self.template is None:
            self.template = self.scratch / "template.db"
            migrate.upgrade(f"sqlite:///{self.template}", fts_min_pause=0)
        path = Path(tempfile.mkdtemp(dir=self.scratch)) / "state.db"
        shutil.copyfile(self.template, path)
        return f"sqlite:///{path}"

    def service(self) -> HermesSessionService:
        service = HermesSessionService(self.database())
        self.services.append(service)
        return service

    def close_services(self) -> None:
        """Close what the test left open (ADK's teardown closes only its own class)."""
        for service in self.services:
            if service.store._closing is None:  # not closed by the test itself
                asyncio.run(service.close())
        self.services.clear()


def _is_replaced(value: object) -> bool:
    return isinstance(value, enum.Enum) and value.name == REPLACED_TYPE


def _replace_factory(module: Any, run: _Run) -> None:
    original = module.get_session_service
    if getattr(original, "hermes_store", False):
        return

    def get_session_service(service_type: Any = None, tmp_path: Any = None) -> Any:
        if _is_replaced(service_type):
            return run.service()
        return original(service_type, tmp_path)

    get_session_service.hermes_store = True  # type: ignore[attr-defined]
    module.get_session_service = get_session_service


def _why_deselected(item: pytest.Item) -> str | None:
    """None for a test of the service under test, else why it is left out."""
    callspec = getattr(item, "callspec", None)
    if callspec is not None and FIXTURE in callspec.params:
        param = callspec.params[FIXTURE]
        return None if _is_replaced(param) else f"another service type ({param.name})"
    function = getattr(item, "function", None)
    source = inspect.getsource(function) if function is not None else ""
    if f"SessionServiceType.{REPLACED_TYPE}" in source and "get_session_service(" in source:
        return None
    return "about ADK's own classes (not the session_service fixture)"


def pytest_configure(config: pytest.Config) -> None:
    backend = os.environ.get(BACKEND_ENV, "sqlite")
    if backend not in ("sqlite", "postgresql"):
        raise pytest.UsageError(f"{BACKEND_ENV} must be sqlite or postgresql, not {backend!r}")
    config.stash[_KEY] = _Run(backend)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    run = config.stash[_KEY]
    kept: list[pytest.Item] = []
    dropped: list[pytest.Item] = []
    for item in items:
        module = getattr(item, "module", None)
        if module is None or not hasattr(module, "get_session_service"):
            raise pytest.UsageError(
                f"{item.nodeid}: not ADK's session service tests (no get_session_service)"
            )
        _replace_factory(module, run)
        why = _why_deselected(item)
        if why is None:
            kept.append(item)
        else:
            run.deselected[why] += 1
            dropped.append(item)
    if dropped:
        config.hook.pytest_deselected(items=dropped)
    items[:] = kept


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_teardown(item: pytest.Item) -> Any:
    yield
    item.config.stash[_KEY].close_services()


def pytest_terminal_summary(terminalreporter: Any, config: pytest.Config) -> None:
    run = config.stash[_KEY]
    terminalreporter.write_line(f"hermes-store backend: {run.backend}")
    for why, count in sorted(run.deselected.items()):
        terminalreporter.write_line(f"deselected {count}: {why}")


def pytest_unconfigure(config: pytest.Config) -> None:
    run = config.stash.get(_KEY, None)
    if run is not None:
        run.close_services()
        run.cleanup.close()
