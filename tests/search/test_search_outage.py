"""A PostgreSQL server that goes away during a search (issue 28, item 6): every search is
one read unit, retried whole on a fresh connection, so a restart or a terminated
backend costs the caller a wait, never an error and never a wrong answer.

Every test here runs against a throwaway cluster of its own (tests/helpers/pg_cluster.py),
which it restarts or whose backends it terminates; never the shared server on 5432.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from helpers.pg_cluster import Cluster, throwaway_cluster
from sqlalchemy import event, text
from sqlalchemy.exc import OperationalError

from hermes_store import migrate
from hermes_store.repositories.messages import MessageRepository
from hermes_store.repositories.search import SearchRepository
from hermes_store.repositories.sessions import SessionRepository
from hermes_store.store import Store

#: One query per route (docs/search.md), each with hits.
QUERIES: dict[str, tuple[str, dict[str, Any]]] = {
    "word": ("kyoto", {}),
    "phrase": ('"connection pool"', {}),
    "prefix": ("deploy*", {}),
    "or": ("kyoto OR osaka", {}),
    "literal": ("src/main.py", {}),
    "literal+word": ("rm -rf docker", {}),
    # the original's reading of this one is valid FTS5 (`"main_loop" docker`), so the
    # second tier sends a statement of its own
    "literal+word tiers": ("main_loop docker", {}),
    "literal newest": ("src/main.py", {"sort": "newest"}),
    "cjk trigram": ("记忆断裂", {}),
    "cjk like": ("通信", {}),
    "trigram retry": ("youer", {}),
    "word filtered": ("kyoto", {"role_filter": ["user"], "source_filter": ["cli"]}),
}

TEXTS = [
    ("user", "flights to Kyoto in spring"),
    ("assistant", "Kyoto and Osaka are close by train"),
    ("user", "the connection pool is exhausted again"),
    ("assistant", "deploy the deployment to staging"),
    ("user", "edit src/main.py around line 40"),
    ("assistant", "src and main and py, but not the path"),
    ("user", "never run rm -rf on docker volumes"),
    ("assistant", "rm the docker image, then rf"),
    ("user", "聊天记录，记忆断裂问题复现了"),
    ("assistant", "节点之间的通信中断了"),
    ("user", "修改youer服务端的配置"),
    ("user", "restart the main_loop in docker"),
    ("assistant", "the main loop of docker compose"),
]


@pytest.fixture(scope="module")
def _module_cluster() -> Iterator[Cluster]:
    with throwaway_cluster() as c:
        url = c.url("hermes")
        migrate.upgrade(url)
        with Store(url) as store:
            SessionRepository(store).create_session("s", "cli")
            messages = MessageRepository(store)
            for role, content in TEXTS:
                messages.append_message("s", role, content)
        yield c


@pytest.fixture
def cluster(_module_cluster: Cluster) -> Cluster:
    """The module's cluster, running, with a copy of the searched database of its own."""
    if not _module_cluster.is_running():
        _module_cluster.start()
    _module_cluster.fresh_database(template="hermes")
    return _module_cluster


def _ids(hits: list[dict[str, Any]]) -> list[int]:
    return [int(h["id"]) for h in hits]


def _expected(store: Store) -> dict[str, list[int]]:
    search = SearchRepository(store)
    expected = {name: _ids(search.search_messages(q, **o)) for name, (q, o) in QUERIES.items()}
    assert all(expected.values()), f"a route found nothing, the test tests nothing: {expected}"
    return expected


def _statements_of(store: Store, name: str) -> int:
    """How many statements the search `name` sends (BEGIN and the rest of the read unit
    included)."""
    seen: list[str] = []

    def count(*_: Any) -> None:
        seen.append("x")

    event.listen(store.engine, "before_cursor_execute", count)
    try:
        query, options = QUERIES[name]
        SearchRepository(store).search_messages(query, **options)
    finally:
        event.remove(store.engine, "before_cursor_execute", count)
    return len(seen)


class _TerminateAt:
    """A `before_cursor_execute` listener that terminates the connection's server backend
    just before the k-th statement it sees (once)."""

    def __init__(self, cluster: Cluster, k: int) -> None:
        self.cluster = cluster
        self.k = k
        self.sent = 0
        self.done = False

    def __call__(self, conn: Any, *_: Any) -> None:
        self.sent += 1
        if self.sent == self.k and not self.done:
            pid = conn.connection.driver_connection.info.backend_pid
            self.cluster.admin(f"SELECT pg_terminate_backend({pid})")
            self.done = True


@pytest.mark.parametrize("name", list(QUERIES))
def test_a_backend_terminated_at_any_statement_of_a_search(cluster: Cluster, name: str) -> None:
    """The search's server backend is terminated just before its k-th statement, for
    every k: the statement meets a dead connection (what a restart does to a search in
    flight, at a chosen point). The search returns the hits it returns undisturbed."""
    query, options = QUERIES[name]
    with Store(cluster.url()) as store:
        expected = _expected(store)[name]
        statements = _statements_of(store, name)
        assert statements >= 1
        for k in range(1, statements + 1):
            kill = _TerminateAt(cluster, k)
            event.listen(store.engine, "before_cursor_execute", kill)
            try:
                hits = SearchRepository(store).search_messages(query, **options)
            finally:
                event.remove(store.engine, "before_cursor_execute", kill)
            assert kill.done, f"statement {k} of {statements} was never sent"
            assert _ids(hits) == expected, (name, k)


@pytest.mark.parametrize("mode", ["fast", "immediate"])
def test_searches_in_a_loop_survive_server_restarts(cluster: Cluster, mode: str) -> None:
    """Three threads search in a loop, every route in turn, while the server restarts
    three times (`mode`): no search raises, every one returns the hits it returns on a quiet
    server, and searching goes on after each restart."""
    with Store(cluster.url()) as store:
        expected = _expected(store)
        search = SearchRepository(store)
        stop = threading.Event()
        errors: list[BaseException] = []
        wrong: list[tuple[str, list[int]]] = []
        done: list[float] = []
        lock = threading.Lock()

        def loop(offset: int) -> None:
            names = list(QUERIES)
            n = offset
            while not stop.is_set():
                name = names[n % len(names)]
                n += 1
                query, options = QUERIES[name]
                try:
                    got = _ids(search.search_messages(query, **options))
                except Exception as exc:  # noqa: BLE001 (counted: none may escape)
                    with lock:
                        errors.append(exc)
                    continue
                with lock:
                    if got != expected[name]:
                        wrong.append((name, got))
                    done.append(time.monotonic())

        threads = [threading.Thread(target=loop, args=(i * 4,)) for i in range(3)]
        for t in threads:
            t.start()
        restarted: list[float] = []
        try:
            for _ in range(3):
                time.sleep(0.5)
                cluster.restart(mode)
                restarted.append(time.monotonic())
            time.sleep(1.0)
        finally:
            stop.set()
            for t in threads:
                t.join(timeout=120)
        assert not errors, f"errors reached the searchers: {errors[:3]!r}"
        assert not wrong, f"wrong answers: {wrong[:3]}"
        for at in restarted:
            assert sum(1 for d in done if d > at) >= len(QUERIES), "no searches after a restart"


def test_a_read_that_goes_on_after_losing_its_connection_is_retried(cluster: Cluster) -> None:
    """A unit of work that swallows the error of a lost connection and sends another
    statement meets SQLAlchemy's PendingRollbackError (the connection was invalidated):
    a lost connection too, so `Store.read` runs the unit again on a fresh one."""
    with Store(cluster.url()) as store:
        attempts: list[int] = []

        def work(conn: Any) -> int:
            attempts.append(len(attempts))
            if len(attempts) == 1:
                pid = conn.connection.driver_connection.info.backend_pid
                cluster.admin(f"SELECT pg_terminate_backend({pid})")
                with pytest.raises(OperationalError):
                    conn.execute(text("SELECT 1"))
            return int(conn.execute(text("SELECT count(*) FROM messages")).scalar_one())

        assert store.read(work) == len(TEXTS)
        assert attempts == [0, 1]


def test_a_block_that_goes_on_after_losing_its_connection_gets_a_typed_error(
    pg_fresh_db: str,
) -> None:
    """Code inside `with store.read()` (which cannot be run again) that catches the first
    error and sends another statement on the lost connection gets DatabaseUnavailable, as
    the first statement did, not SQLAlchemy's PendingRollbackError."""
    from sqlalchemy import text
    from sqlalchemy.exc import DBAPIError

    from hermes_store.errors import DatabaseUnavailable

    with Store(pg_fresh_db) as store:
        with pytest.raises(DatabaseUnavailable), store.read() as conn:
            pid = conn.execute(text("SELECT pg_backend_pid()")).scalar_one()
            with Store(pg_fresh_db) as other, other.read() as killer:
                killer.execute(text("SELECT pg_terminate_backend(:pid)"), {"pid": pid})
            try:
                conn.execute(text("SELECT 1"))
            except DBAPIError:
                pass
            conn.execute(text("SELECT 1"))
        assert store.read(lambda c: c.execute(text("SELECT 1")).scalar_one()) == 1


def test_the_search_command_waits_for_a_server_that_comes_back(cluster: Cluster) -> None:
    """`hermes-store search` runs as one retried read of a store: started while the server
    is down, it finds its hits once the server is back, within the retry budget."""
    import subprocess
    import sys

    url = cluster.url("hermes")
    cluster.stop("fast")
    try:
        search = subprocess.Popen(
            [sys.executable, "-m", "hermes_store.cli", "search", "kyoto", "--url", url],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        time.sleep(2.0)
    finally:
        cluster.start()
    out, err = search.communicate(timeout=60)
    assert search.returncode == 0, err
    assert "kyoto" in out.lower()
