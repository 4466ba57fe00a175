"""The change feed (issue 26): every committed change once, in commit order, across
writer processes and a follower that restarts from its cursor; writes of the original
(plain sqlite3) in it too; retention and expired cursors; the v1 views; following on the
sync and async layers, pushed by NOTIFY on PostgreSQL."""

from __future__ import annotations

import asyncio
import json
import multiprocessing
import random
import sqlite3
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from helpers import feed_workers
from helpers.databases import JOURNAL_MODES, journal_mode, set_journal_mode
from helpers.postgres import pg_database
from sqlalchemy import create_engine, text
from sqlalchemy.exc import DBAPIError
from sqlalchemy.pool import NullPool

from hermes_store import contract
from hermes_store.aio import AsyncStore
from hermes_store.config import JOURNAL_ENV
from hermes_store.errors import ChangeCursorExpired, InvalidInput
from hermes_store.migration.copy import copy_database
from hermes_store.repositories.changes import KINDS, Change, ChangeFeed
from hermes_store.repositories.messages import MessageRepository
from hermes_store.repositories.sessions import SessionRepository
from hermes_store.repositories.titles import TitleRepository
from hermes_store.repositories.turns import TurnRepository
from hermes_store.repositories.usage import UsageRepository
from hermes_store.store import Store

WRITERS = 8


@pytest.fixture(params=[*(f"sqlite-{mode}" for mode in JOURNAL_MODES), "postgresql"])
def feed_url(request: pytest.FixtureRequest) -> Iterator[str]:
    """A database at head: SQLite in each journal mode (a DELETE-mode reader blocks the
    writers, a WAL one does not), then PostgreSQL."""
    if request.param == "postgresql":
        with pg_database(at_head=True) as url:
            yield url
        return
    url = str(request.getfixturevalue("fresh_db"))
    mode = request.param.removeprefix("sqlite-")
    # kept for the writer processes too: a fixed SQLite would switch a DELETE file to WAL
    request.getfixturevalue("monkeypatch").setenv(JOURNAL_ENV, mode)
    set_journal_mode(url.removeprefix("sqlite:///"), mode)
    yield url


def test_writer_processes_and_a_restarting_follower_see_every_change_once_in_commit_order(
    feed_url: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """8 writer processes; a follower process killed (SIGKILL) at random points and
    started again, resuming from the cursor it persisted; at the end it catches up and
    stops. What it handled is every change, each once, in position order; positions
    follow each writer's commit order."""
    rng = random.Random(26)
    spawn = multiprocessing.get_context("spawn")
    reports = [tmp_path / f"writer{i}.json" for i in range(WRITERS)]
    log = tmp_path / "follower.log"
    writers = [
        spawn.Process(
            target=feed_workers.write, args=(feed_url, i, 40, rng.randint(0, 10**6), str(r))
        )
        for i, r in enumerate(reports)
    ]
    # beside the restarting one, a follower that stays at the head, polling fast: the
    # one that would miss a change committed after a higher position was seen
    steady: list[Change] = []
    stop = threading.Event()

    def follow_steadily() -> None:
        with Store(feed_url) as store:
            feed = ChangeFeed(store)
            steady.extend(feed.follow(0, poll_interval=0.002, stop=stop))
            # what committed between its last read and the stop (after the cursor only)
            steady.extend(feed.changes(steady[-1].position if steady else 0, limit=10_000))

    steady_thread = threading.Thread(target=follow_steadily)
    steady_thread.start()
    for w in writers:
        w.start()
    kills = 0
    while any(w.is_alive() for w in writers):
        follower = spawn.Process(
            target=feed_workers.follow, args=(feed_url, str(log), rng.randint(0, 10**6), None)
        )
        follower.start()
        time.sleep(rng.uniform(0.5, 2.5))
        follower.kill()
        follower.join()
        kills += 1
    for w in writers:
        w.join(timeout=300)
        assert w.exitcode == 0, f"a writer failed (exit code {w.exitcode})"
    last = spawn.Process(target=feed_workers.follow, args=(feed_url, str(log), 1, 1.0))
    last.start()
    last.join(timeout=120)
    assert last.exitcode == 0
    assert kills >= 1
    stop.set()
    steady_thread.join(timeout=30)

    handled = [line.split() for line in log.read_text(encoding="utf-8").splitlines()]
    positions = [int(p) for p, *_ in handled]
    assert positions == sorted(set(positions)), "a change repeated or out of order"
    with Store(feed_url) as store:
        everything = ChangeFeed(store).changes(0, limit=10_000)
        with store.read() as conn:
            message_ids = sorted(int(r[0]) for r in conn.execute(text("SELECT id FROM messages")))
    # nothing missed, nothing added
    assert handled == [
        [str(c.position), c.kind, c.session_id, str(c.message_id)] for c in everything
    ]
    assert steady == everything, "the steady follower missed or repeated a change"
    seen = everything
    appended = [c.message_id for c in seen if c.kind == "message.appended"]
    assert sorted(appended) == message_ids and len(set(appended)) == len(appended)
    assert {c.session_id for c in seen if c.kind == "session.created"} == {
        f"w{i}" for i in range(WRITERS)
    }
    # commit order: each writer's appends appear in the order its commits returned
    for i, report in enumerate(reports):
        sid = f"w{i}"
        committed = json.loads(report.read_text(encoding="utf-8"))
        mine = [c for c in seen if c.session_id == sid]
        assert [c.message_id for c in mine if c.kind == "message.appended"] == committed
        assert mine[0].kind == "session.created"
    backend = request.node.callspec.params["feed_url"]
    if backend.startswith("sqlite-"):  # the writers kept the mode the test set
        assert journal_mode(feed_url.removeprefix("sqlite:///")) == backend.removeprefix("sqlite-")


def test_a_write_by_plain_sqlite3_shows_in_the_feed(fresh_db: str) -> None:
    """The original Hermes code writes the file with sqlite3 and knows nothing of the
    feed: its inserts, updates and deletes are in it, by the triggers."""
    path = fresh_db.removeprefix("sqlite:///")
    with Store(fresh_db) as store:
        start = ChangeFeed(store).latest()
    con = sqlite3.connect(path, isolation_level=None)
    try:
        con.execute("BEGIN IMMEDIATE")
        con.execute("INSERT INTO sessions (id, source, started_at) VALUES ('orig', 'cli', 1.0)")
        con.execute(
            "INSERT INTO messages (session_id, role, content, timestamp) "
            "VALUES ('orig', 'user', 'hello', 2.0)"
        )
        con.execute("UPDATE sessions SET message_count = 1 WHERE id = 'orig'")
        con.execute("COMMIT")
        con.execute("UPDATE sessions SET title = 'from the original' WHERE id = 'orig'")
        con.execute("UPDATE sessions SET input_tokens = 10 WHERE id = 'orig'")
        con.execute(
            "INSERT INTO session_model_usage (session_id, model, billing_provider, "
            "billing_base_url, billing_mode, task, first_seen, last_seen) "
            "VALUES ('orig', 'm', '', '', '', '', 1.0, 1.0)"
        )
        con.execute("UPDATE messages SET content = 'hello!' WHERE session_id = 'orig'")
        mid = con.execute("SELECT id FROM messages WHERE session_id = 'orig'").fetchone()[0]
        con.execute("DELETE FROM messages WHERE session_id = 'orig'")
        con.execute("DELETE FROM sessions WHERE id = 'orig'")
    finally:
        con.close()
    with Store(fresh_db) as store:
        got = [(c.kind, c.session_id, c.message_id) for c in ChangeFeed(store).changes(start)]
    assert got == [
        ("session.created", "orig", None),
        ("message.appended", "orig", mid),
        ("session.updated", "orig", None),
        ("usage.updated", "orig", None),
        ("usage.updated", "orig", None),
        ("message.updated", "orig", mid),
        ("message.deleted", "orig", mid),
        ("session.deleted", "orig", None),
    ]
    assert {k for k, _, _ in got} == set(KINDS)


def test_the_repositories_writes_are_in_the_feed(backend_url: str) -> None:
    with Store(backend_url) as store:
        feed = ChangeFeed(store)
        sessions, messages = SessionRepository(store), MessageRepository(store)
        sessions.create_session("s1", "cli")
        ids = messages.append_messages("s1", [{"role": "user", "content": "a"}] * 2)
        TitleRepository(store).set_session_title("s1", "one")
        UsageRepository(store).update_token_counts("s1", input_tokens=5, model="m")
        sessions.update_system_prompt("s1", "p")
        got = [(c.kind, c.message_id) for c in feed.changes(0)]
        # the appends add no session.updated for the counters they bump
        assert got[:4] == [
            ("session.created", None),
            ("message.appended", ids[0]),
            ("message.appended", ids[1]),
            ("session.updated", None),
        ]
        assert ("usage.updated", None) in got[4:]
        assert got[-1] == ("session.updated", None)
        assert feed.latest() == len(got)


def test_paging_and_typed_errors(backend_url: str) -> None:
    with Store(backend_url) as store:
        feed = ChangeFeed(store)
        assert feed.changes(0) == [] and feed.latest() == 0
        SessionRepository(store).create_session("s1", "cli")
        MessageRepository(store).append_messages("s1", [{"role": "user", "content": "a"}] * 9)
        pages, cursor = [], 0
        while page := feed.changes(cursor, limit=4):
            pages.append([c.position for c in page])
            cursor = page[-1].cursor
        assert pages == [[1, 2, 3, 4], [5, 6, 7, 8], [9, 10]]
        assert feed.changes(10) == []
        with pytest.raises(InvalidInput, match="ahead of the feed"):
            feed.changes(11)
        for bad in (-1, "3", 1.5, True):
            with pytest.raises(InvalidInput):
                feed.changes(bad)  # type: ignore[arg-type]
        with pytest.raises(InvalidInput):
            feed.changes(0, limit=0)
        with pytest.raises(InvalidInput):
            list(feed.follow(0, poll_interval=0))
        # a tool follows with a store that never writes
        with Store(backend_url, read_only=True) as reader:
            assert ChangeFeed(reader).changes(0, limit=100) == feed.changes(0, limit=100)


def test_trimmed_cursors_expire(backend_url: str) -> None:
    with Store(backend_url) as store:
        feed = ChangeFeed(store)
        SessionRepository(store).create_session("s1", "cli")
        MessageRepository(store).append_messages("s1", [{"role": "user", "content": "a"}] * 9)
        assert feed.trim(through=4) == 4
        with pytest.raises(ChangeCursorExpired) as caught:
            feed.changes(3)
        assert caught.value.cursor == 3 and caught.value.oldest == 4
        assert [c.position for c in feed.changes(4)] == [5, 6, 7, 8, 9, 10]
        assert feed.oldest_cursor() == 4
        # by age: everything made before now goes, the cursor at the newest still resumes
        assert feed.trim(older_than=time.time() + 1) == 10
        assert feed.changes(10) == [] and feed.latest() == 10
        with pytest.raises(ChangeCursorExpired):
            list(feed.follow(9, idle_timeout=0.1))
        MessageRepository(store).append_message("s1", "user", "b")
        assert [c.position for c in feed.changes(10)] == [11]


def test_the_triggers_keep_the_feed_bounded(backend_url: str) -> None:
    """Retention runs inside the writes (also the original's): past every
    FEED_TRIM_EVERY positions, changes older than the newest `retention_rows` go."""
    with Store(backend_url) as store:
        feed = ChangeFeed(store)
        feed.set_retention(50)
        SessionRepository(store).create_session("s1", "cli")
        rows = [{"role": "user", "content": "a"}] * 700
        MessageRepository(store).append_messages("s1", rows)
        assert feed.oldest_cursor() == 0
        MessageRepository(store).append_messages("s1", rows)  # crosses position 1000
        trimmed = feed.oldest_cursor()
        assert trimmed > 0
        kept = feed.changes(trimmed, limit=10_000)
        assert kept[0].position == trimmed + 1 and kept[-1].position == 1401
        assert len(kept) >= 50
        with pytest.raises(ChangeCursorExpired):
            feed.changes(1)
        assert feed.changes(0, limit=10_000) == kept  # 0: from the oldest kept


def test_the_v1_views_read_sessions_and_messages(backend_url: str) -> None:
    with Store(backend_url) as store:
        SessionRepository(store).create_session("s1", "cli")
        TitleRepository(store).set_session_title("s1", "hello")
        mid = MessageRepository(store).append_message("s1", "user", "hi")
        with store.read() as conn:
            session = conn.execute(
                text(f"SELECT session_id, title, message_count FROM {contract.SESSIONS_VIEW_V1}")
            ).all()
            message = conn.execute(
                text(
                    f"SELECT message_id, session_id, role, content, active "
                    f"FROM {contract.MESSAGES_VIEW_V1}"
                )
            ).all()
    assert [tuple(r) for r in session] == [("s1", "hello", 1)]
    assert [tuple(r) for r in message] == [(mid, "s1", "user", "hi", 1)]
    # read-only on both backends (PostgreSQL would write through a simple view)
    engine = create_engine(backend_url, poolclass=NullPool)
    try:
        for view, column in (
            (contract.SESSIONS_VIEW_V1, "title"),
            (contract.MESSAGES_VIEW_V1, "content"),
        ):
            with engine.connect() as conn, pytest.raises(DBAPIError):
                conn.execute(text(f"UPDATE {view} SET {column} = 'changed'"))
            with engine.connect() as conn, pytest.raises(DBAPIError):
                conn.execute(text(f"DELETE FROM {view}"))
    finally:
        engine.dispose()
    with Store(backend_url) as store:
        assert TitleRepository(store).get_session_title("s1") == "hello"


def test_following_is_pushed_by_notify_on_postgresql(pg_fresh_db: str) -> None:
    """With a poll interval far longer than the wait, only a NOTIFY can wake it."""
    with Store(pg_fresh_db) as store:
        SessionRepository(store).create_session("s1", "cli")
        feed = ChangeFeed(store)
        start = feed.latest()
        stop = threading.Event()
        got: list[tuple[Change, float]] = []

        def follow() -> None:
            for change in feed.follow(start, poll_interval=60, stop=stop):
                got.append((change, time.monotonic()))
                stop.set()
                return

        thread = threading.Thread(target=follow)
        thread.start()
        time.sleep(1.0)  # the follower is waiting by now
        sent = time.monotonic()
        MessageRepository(store).append_message("s1", "user", "ping")
        thread.join(timeout=20)
        assert got, "the follower was not woken"
        change, at = got[0]
        assert change.kind == "message.appended" and at - sent < 5


def test_async_for_change_in_store_changes(backend_url: str) -> None:
    async def main() -> list[Change]:
        async with await AsyncStore.open(backend_url) as store:
            await store.sessions.create_session("s1", "cli")
            cursor = await store.feed.latest()
            seen: list[Change] = []

            async def follow() -> None:
                # a poll interval far past the test's wait on PostgreSQL (NOTIFY wakes it)
                interval = 60.0 if backend_url.startswith("postgresql") else 0.05
                async for change in store.changes(since=cursor, poll_interval=interval):
                    seen.append(change)
                    if len(seen) == 3:
                        return

            task = asyncio.create_task(follow())
            await asyncio.sleep(0.5)
            await store.messages.append_message("s1", "user", "a")
            await store.messages.append_messages("s1", [{"role": "user", "content": "b"}] * 2)
            await asyncio.wait_for(task, timeout=20)
            return seen

    seen = asyncio.run(main())
    assert [c.kind for c in seen] == ["message.appended"] * 3
    assert [c.position for c in seen] == sorted(c.position for c in seen)


def test_a_copy_leaves_the_feed_behind_and_carries_the_turns(fresh_db: str, tmp_path: Path) -> None:
    with Store(fresh_db) as store:
        SessionRepository(store).create_session("s1", "cli")
        token = TurnRepository(store).acquire_turn("s1", "a", 60)
        MessageRepository(store).append_message("s1", "user", "a", turn_token=token)
    target = f"sqlite:///{tmp_path / 'copy.db'}"
    report = copy_database(fresh_db, target)
    assert report.ok, report
    assert report.copied[contract.TURNS_TABLE] == 1
    assert not contract.NOT_COPIED_TABLES & set(report.copied)
    assert not any(t in report.not_copied for t in contract.NOT_COPIED_TABLES)
    with Store(target) as copied:
        # the target's own feed: its triggers saw the copy's inserts
        kinds = [c.kind for c in ChangeFeed(copied).changes(0)]
        assert kinds == ["session.created", "message.appended"]
        turn = TurnRepository(copied).current_turn("s1")
        assert turn is not None and turn.token == token


def test_the_pending_table_is_empty_after_every_commit(pg_fresh_db: str) -> None:
    engine = create_engine(pg_fresh_db, poolclass=NullPool)
    try:
        with Store(pg_fresh_db) as store:
            SessionRepository(store).create_session("s1", "cli")
            MessageRepository(store).append_messages("s1", [{"role": "user", "content": "a"}] * 5)
        with engine.connect() as conn:
            pending = conn.execute(
                text(f"SELECT COUNT(*) FROM {contract.CHANGES_PENDING_TABLE}")
            ).scalar()
            last = conn.execute(
                text(
                    f"SELECT value FROM {contract.FEED_STATE_TABLE} "
                    f"WHERE name = '{contract.FEED_LAST_POSITION}'"
                )
            ).scalar()
        assert pending == 0 and last == 6
    finally:
        engine.dispose()


def test_a_follower_ends_soon_after_stop_is_set(backend_url: str) -> None:
    with Store(backend_url) as store:
        feed = ChangeFeed(store)
        stop = threading.Event()
        ended: list[float] = []

        def follow() -> None:
            for _ in feed.follow(0, poll_interval=60, stop=stop):
                pass
            ended.append(time.monotonic())

        thread = threading.Thread(target=follow)
        thread.start()
        time.sleep(0.5)
        asked = time.monotonic()
        stop.set()
        thread.join(timeout=10)
        assert ended and ended[0] - asked < 2
