"""The change feed's edges (issue 35, items 4-7 and 16): bad trims and bounds refused
with typed errors, `since=0` after a trim, the feed on a file never upgraded to it, and
asyncio following on SQLite without psycopg; on both backends, SQLite in both journal
modes (the driver is the run's, HERMES_STORE_SQLITE_DRIVER)."""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest
from helpers.databases import JOURNAL_MODES, fixture_file, set_journal_mode
from helpers.postgres import pg_database

from hermes_store.aio import AsyncStore
from hermes_store.errors import InvalidInput, SchemaBehind
from hermes_store.repositories.changes import ChangeFeed
from hermes_store.repositories.messages import MessageRepository
from hermes_store.repositories.sessions import SessionRepository
from hermes_store.repositories.turns import TurnRepository
from hermes_store.store import Store


@pytest.fixture(params=[*(f"sqlite-{mode}" for mode in JOURNAL_MODES), "postgresql"])
def feed_url(request: pytest.FixtureRequest) -> Iterator[str]:
    if request.param == "postgresql":
        with pg_database(at_head=True) as url:
            yield url
        return
    url = str(request.getfixturevalue("fresh_db"))
    set_journal_mode(url.removeprefix("sqlite:///"), request.param.removeprefix("sqlite-"))
    yield url


def _nine_messages(store: Store) -> ChangeFeed:
    SessionRepository(store).create_session("s1", "cli")
    MessageRepository(store).append_messages("s1", [{"role": "user", "content": "a"}] * 9)
    return ChangeFeed(store)


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), float("-inf"), True, "1", 10**400])
def test_a_trim_by_an_unusable_time_is_refused_and_drops_nothing(
    feed_url: str, bad: object
) -> None:
    with Store(feed_url) as store:
        feed = _nine_messages(store)
        with pytest.raises(InvalidInput, match="older_than"):
            feed.trim(older_than=bad)  # type: ignore[arg-type]
        assert feed.oldest_cursor() == 0
        assert len(feed.changes(0)) == 10


@pytest.mark.parametrize("bad", [True, -1, 2**63, 10**30])
def test_a_trim_through_an_unusable_position_is_refused(feed_url: str, bad: object) -> None:
    with Store(feed_url) as store:
        feed = _nine_messages(store)
        with pytest.raises(InvalidInput, match="through"):
            feed.trim(through=bad)  # type: ignore[arg-type]
        assert len(feed.changes(0)) == 10


def test_since_zero_starts_at_the_oldest_change_kept_after_a_trim(feed_url: str) -> None:
    with Store(feed_url) as store:
        feed = _nine_messages(store)
        assert feed.trim(through=4) == 4
        assert [c.position for c in feed.changes(0)] == [5, 6, 7, 8, 9, 10]
        assert [c.position for c in feed.follow(0, idle_timeout=0)] == [5, 6, 7, 8, 9, 10]

        async def follow() -> list[int]:
            async with await AsyncStore.open(feed_url) as astore:
                return [c.position async for c in astore.changes(since=0, idle_timeout=0)]

        assert asyncio.run(follow()) == [5, 6, 7, 8, 9, 10]
        # a trim of everything: 0 still starts at whatever comes next
        feed.trim()
        assert feed.changes(0) == []
        MessageRepository(store).append_message("s1", "user", "b")
        assert [c.position for c in feed.changes(0)] == [11]


def test_out_of_range_feed_input_is_a_typed_error(feed_url: str) -> None:
    with Store(feed_url) as store:
        feed = _nine_messages(store)
        for since in (2**63, 2**64, 10**30):
            with pytest.raises(InvalidInput, match="2\\*\\*63"):
                feed.changes(since)
            with pytest.raises(InvalidInput, match="2\\*\\*63"):
                list(feed.follow(since, idle_timeout=0))
        with pytest.raises(InvalidInput, match="ahead of the feed"):
            feed.changes(2**63 - 1)
        for rows in (2**63, 0, True, 1.5):
            with pytest.raises(InvalidInput, match="retention"):
                feed.set_retention(rows)  # type: ignore[arg-type]
        for idle in ("x", float("nan"), -1, True, 10**400):
            with pytest.raises(InvalidInput, match="idle_timeout"):
                list(feed.follow(0, idle_timeout=idle))  # type: ignore[arg-type]

            async def follow(idle: object = idle) -> None:
                async for _ in feed.follow_async(0, idle_timeout=idle):  # type: ignore[arg-type]
                    pass

            with pytest.raises(InvalidInput, match="idle_timeout"):
                asyncio.run(follow())
        with pytest.raises(InvalidInput, match="poll interval"):
            list(feed.follow(0, poll_interval=float("nan"), idle_timeout=0))
        feed.set_retention(2**63 - 1)


@pytest.mark.parametrize("mode", JOURNAL_MODES)
def test_the_feed_and_turns_on_a_file_never_upgraded_name_the_upgrade(
    tmp_path: Path, mode: str
) -> None:
    """A state.db only the original wrote, opened read-only as docs/change-feed.md
    shows: SchemaBehind naming `hermes-store upgrade`, not "no such table"."""
    path = tmp_path / "state.db"
    shutil.copyfile(fixture_file(23), path)
    set_journal_mode(str(path), mode)
    with Store(str(path), read_only=True) as store:
        feed, turns = ChangeFeed(store), TurnRepository(store)
        calls = (
            lambda: feed.changes(0),
            lambda: list(feed.follow(0, idle_timeout=0)),
            feed.latest,
            feed.oldest_cursor,
            lambda: turns.current_turn("s1"),
        )
        for call in calls:
            with pytest.raises(SchemaBehind, match="hermes-store upgrade") as caught:
                call()
            assert any("hermes_store_" in item for item in caught.value.missing)

        async def follow() -> None:
            async with await AsyncStore.open(str(path), read_only=True) as astore:
                async for _ in astore.changes(since=0, idle_timeout=0):
                    pass

        with pytest.raises(SchemaBehind, match="hermes-store upgrade"):
            asyncio.run(follow())


NO_PSYCOPG = """
import sys
sys.modules["psycopg"] = None  # as on the default install, which lacks the driver
"""

FOLLOW = """
import asyncio, sys
from hermes_store.aio import AsyncStore

async def main(url):
    async with await AsyncStore.open(url) as store:
        await store.sessions.create_session("s1", "cli")
        await store.messages.append_message("s1", "user", "a")
        seen = [c.kind async for c in store.changes(since=0, poll_interval=0.01, idle_timeout=0.05)]
    print(",".join(seen))

asyncio.run(main(sys.argv[1]))
"""


@pytest.mark.parametrize("mode", JOURNAL_MODES)
def test_async_following_on_sqlite_needs_no_psycopg(
    fresh_db: str, tmp_path: Path, mode: str
) -> None:
    set_journal_mode(fresh_db.removeprefix("sqlite:///"), mode)
    shim = tmp_path / "shim"
    shim.mkdir()
    (shim / "sitecustomize.py").write_text(NO_PSYCOPG)
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(shim), os.environ.get("PYTHONPATH", "")]),
    }
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(FOLLOW), fresh_db],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["session.created,message.appended"]


@pytest.mark.parametrize("mode", ["wal", "delete"])
def test_turns_on_a_database_at_hs0005_name_the_upgrade(tmp_path: Path, mode: str) -> None:
    """A database an older hermes-store keeps at hs0005 (its turns table without the ttl
    column), opened read-only by this version: SchemaBehind naming the column and
    `hermes-store upgrade`, not "no such column"."""
    from hermes_store import migrate

    path = tmp_path / "state.db"
    migrate.upgrade(f"sqlite:///{path}", revision="hs0005", fts_min_pause=0)
    set_journal_mode(str(path), mode)
    with Store(str(path), read_only=True, check_schema=False) as store:
        with pytest.raises(SchemaBehind, match="hermes-store upgrade") as caught:
            TurnRepository(store).current_turn("s1")
    assert caught.value.missing == ["column hermes_store_turns.ttl"]
