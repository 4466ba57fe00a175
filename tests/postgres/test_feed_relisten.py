"""A PostgreSQL follower LISTENs again after the server restarts (issue 35, item 9):
before, it polled for good. On a throwaway cluster (the shared server is never
restarted). The poll interval is far longer than the test waits, so a follower that
sees the change after the restart was woken by a notification."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator

import pytest
from helpers.pg_cluster import Cluster, throwaway_cluster

from hermes_store import migrate
from hermes_store.aio import AsyncStore
from hermes_store.contract import FEED_CHANNEL
from hermes_store.repositories.changes import Change, ChangeFeed
from hermes_store.repositories.messages import MessageRepository
from hermes_store.repositories.sessions import SessionRepository
from hermes_store.store import Store

POLL = 600.0  # never reached: only a notification wakes the follower in time
WAIT = 60.0


@pytest.fixture(scope="module")
def _module_cluster() -> Iterator[Cluster]:
    with throwaway_cluster() as c:
        migrate.upgrade(c.url("hermes"))
        yield c


@pytest.fixture
def cluster(_module_cluster: Cluster) -> Cluster:
    if not _module_cluster.is_running():
        _module_cluster.start()
    _module_cluster.fresh_database(template="hermes")
    return _module_cluster


def _listeners(cluster: Cluster) -> int:
    rows = cluster.admin(
        f"SELECT count(*) FROM pg_stat_activity WHERE query = 'LISTEN {FEED_CHANNEL}' "
        f"AND datname = '{cluster.database}'"
    )
    return int(rows[0][0])  # type: ignore[call-overload]


def _wait_for(condition: object, what: str) -> None:
    deadline = time.monotonic() + WAIT
    while not condition():  # type: ignore[operator]
        assert time.monotonic() < deadline, what
        time.sleep(0.05)


def _restart_then_append(cluster: Cluster, seen: list[Change]) -> None:
    _wait_for(lambda: _listeners(cluster) == 1, "the follower never listened")
    with Store(cluster.url()) as store:
        SessionRepository(store).create_session("s1", "cli")
    _wait_for(lambda: len(seen) == 1, "the follower missed the notification before the restart")
    cluster.restart()
    _wait_for(lambda: _listeners(cluster) == 1, "the follower never listened again")
    with Store(cluster.url()) as store:
        MessageRepository(store).append_message("s1", "user", "after the restart")
    _wait_for(lambda: len(seen) == 2, "no notification woke the follower after the restart")


def test_a_follower_listens_again_after_a_server_restart(cluster: Cluster) -> None:
    seen: list[Change] = []
    stop = threading.Event()
    errors: list[BaseException] = []

    def follow() -> None:
        try:
            with Store(cluster.url()) as store:
                for change in ChangeFeed(store).follow(0, poll_interval=POLL, stop=stop):
                    seen.append(change)
        except BaseException as exc:  # reported by the test
            errors.append(exc)

    follower = threading.Thread(target=follow, daemon=True)
    follower.start()
    try:
        _restart_then_append(cluster, seen)
    finally:
        stop.set()
        follower.join(timeout=30)
    assert not errors, errors
    assert [c.kind for c in seen] == ["session.created", "message.appended"]


def test_an_async_follower_listens_again_after_a_server_restart(cluster: Cluster) -> None:
    seen: list[Change] = []

    async def main() -> None:
        async with await AsyncStore.open(cluster.url()) as store:

            async def follow() -> None:
                async for change in store.changes(since=0, poll_interval=POLL):
                    seen.append(change)

            task = asyncio.create_task(follow())
            try:
                await asyncio.to_thread(_restart_then_append, cluster, seen)
            finally:
                task.cancel()
                await asyncio.gather(task, return_exceptions=True)

    asyncio.run(main())
    assert [c.kind for c in seen] == ["session.created", "message.appended"]
