"""Idempotent appends (issue 27, item 1): an append retried with its `idempotency_key`
returns the first call's ids and stores nothing new, on every layer (repository, facade,
asyncio), on both backends and across processes; the keys go with their session."""

from __future__ import annotations

import asyncio
import random
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from hermes_store import aio
from hermes_store.compat import AsyncSessionDB, SessionDB
from hermes_store.contract import IDEMPOTENCY_TABLE
from hermes_store.errors import InvalidInput, SessionNotFound
from hermes_store.repositories.maintenance import MaintenanceRepository
from hermes_store.repositories.messages import MessageRepository
from hermes_store.repositories.sessions import SessionRepository
from hermes_store.store import Store

APPENDS = 200


def _keys(raw_con, session_id: str) -> list[tuple[str, str]]:  # type: ignore[no-untyped-def]
    rows = raw_con.execute(
        f"SELECT key, message_ids FROM {IDEMPOTENCY_TABLE} WHERE session_id = ? ORDER BY key",
        (session_id,),
    ).fetchall()
    return [(str(r[0]), str(r[1])) for r in rows]


def test_a_retried_append_returns_the_first_id_and_stores_nothing(store, raw_con) -> None:  # type: ignore[no-untyped-def]
    SessionRepository(store).create_session("s1", "telegram")
    messages = MessageRepository(store)
    first = messages.append_message("s1", "user", "hello", idempotency_key="m-1")
    again = messages.append_message("s1", "user", "hello", idempotency_key="m-1")
    other = messages.append_message("s1", "user", "hello", idempotency_key="m-2")
    unkeyed = messages.append_message("s1", "user", "hello")
    assert again == first and other != first and unkeyed not in (first, other)
    assert [m["id"] for m in messages.get_messages("s1")] == [first, other, unkeyed]
    row = SessionRepository(store).get_session("s1")
    assert row is not None and row["message_count"] == 3
    assert _keys(raw_con, "s1") == [("m-1", f"[{first}]"), ("m-2", f"[{other}]")]


def test_a_retried_batch_returns_the_first_ids(store, raw_con) -> None:  # type: ignore[no-untyped-def]
    SessionRepository(store).create_session("s1", "cli")
    messages = MessageRepository(store)
    batch = [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}]
    ids = messages.append_messages("s1", batch, idempotency_key="turn-1")
    assert messages.append_messages("s1", batch, idempotency_key="turn-1") == ids
    assert messages.message_count("s1") == 2
    # the same key for another number of messages is the caller's mistake: refused
    with pytest.raises(InvalidInput, match="used for an append of 2 message"):
        messages.append_message("s1", "user", "q", idempotency_key="turn-1")
    assert messages.message_count("s1") == 2


def test_keys_are_per_session(store) -> None:  # type: ignore[no-untyped-def]
    sessions, messages = SessionRepository(store), MessageRepository(store)
    sessions.create_session("a", "cli")
    sessions.create_session("b", "cli")
    in_a = messages.append_message("a", "user", "x", idempotency_key="turn-1")
    in_b = messages.append_message("b", "user", "x", idempotency_key="turn-1")
    assert in_a != in_b
    assert messages.message_count("a") == messages.message_count("b") == 1


@pytest.mark.parametrize("bad", ["", 7, "k" * 201])
def test_unusable_keys_are_refused_before_writing(store, bad: object) -> None:  # type: ignore[no-untyped-def]
    SessionRepository(store).create_session("s1", "cli")
    messages = MessageRepository(store)
    with pytest.raises(InvalidInput, match="idempotency key"):
        messages.append_message("s1", "user", "x", idempotency_key=bad)  # type: ignore[arg-type]
    assert messages.message_count("s1") == 0


def test_a_key_is_answered_even_after_the_session_closed_by_compression(store) -> None:  # type: ignore[no-untyped-def]
    """The retry of an append that committed returns its id; a new append is refused."""
    sessions, messages = SessionRepository(store), MessageRepository(store)
    sessions.create_session("s1", "cli")
    first = messages.append_message("s1", "user", "x", idempotency_key="k")
    sessions.end_session("s1", "compression")
    assert messages.append_message("s1", "user", "x", idempotency_key="k") == first
    with pytest.raises(Exception, match="s1"):
        messages.append_message("s1", "user", "x", idempotency_key="k2")


def test_deleting_and_pruning_remove_the_keys(store, raw_con) -> None:  # type: ignore[no-untyped-def]
    sessions, messages = SessionRepository(store), MessageRepository(store)
    maintenance = MaintenanceRepository(store)
    for sid in ("gone", "pruned", "kept"):
        sessions.create_session(sid, "cli")
        messages.append_message(sid, "user", "x", idempotency_key=f"{sid}-1")
        messages.append_messages(sid, [{"role": "user", "content": "y"}], idempotency_key="b")
    assert maintenance.delete_session("gone")
    sessions.end_session("pruned", "user_exit")
    raw_con.execute("UPDATE sessions SET started_at = 1.0 WHERE id = 'pruned'")
    raw_con.execute("UPDATE messages SET timestamp = 1.0 WHERE session_id = 'pruned'")
    assert maintenance.prune_sessions(older_than_days=30) == 1
    assert _keys(raw_con, "gone") == [] and _keys(raw_con, "pruned") == []
    assert [k for k, _ in _keys(raw_con, "kept")] == ["b", "kept-1"]
    # a retry for a deleted session finds neither the key nor the session
    with pytest.raises(SessionNotFound):
        messages.append_message("gone", "user", "x", idempotency_key="gone-1")


def test_the_facade_and_its_async_form_take_the_key(tmp_path: Path) -> None:
    db = SessionDB(tmp_path / "state.db")
    try:
        db.create_session("s1", "cli")
        first = db.append_message("s1", "user", "hi", idempotency_key="k")
        assert db.append_message("s1", "user", "hi", idempotency_key="k") == first

        async def retry() -> int:
            result: int = await AsyncSessionDB(db).append_message(
                "s1", "user", "hi", idempotency_key="k"
            )
            return result

        assert asyncio.run(retry()) == first
        assert db.message_count("s1") == 1
    finally:
        db.close()


def test_cancelled_appends_retried_with_their_keys_are_stored_once(backend_url: str) -> None:
    """200 appends, each cancelled at a random point (queued, running, or already done)
    and then retried with its key until one attempt returns: every message exactly once,
    and every id a caller got is the id stored."""
    rng = random.Random(27)

    async def main() -> dict[int, int]:
        async with await aio.AsyncStore.open(backend_url) as store:
            for chat in range(10):
                await store.sessions.create_session(f"chat-{chat}", "telegram")

            async def append(n: int) -> int:
                session_id, key = f"chat-{n % 10}", f"m-{n}"
                call = store.messages.append_message(
                    session_id, "user", f"message {n}", idempotency_key=key
                )
                try:
                    return await asyncio.wait_for(call, rng.uniform(0, 0.02))
                except TimeoutError:
                    pass
                while True:  # what a service does after a timeout: retry with the key
                    try:
                        return await asyncio.wait_for(
                            store.messages.append_message(
                                session_id, "user", f"message {n}", idempotency_key=key
                            ),
                            rng.uniform(0.005, 0.5),
                        )
                    except TimeoutError:
                        continue

            got = await asyncio.gather(*(append(n) for n in range(APPENDS)))
            return dict(enumerate(got))

    got = asyncio.run(main())
    with Store(backend_url) as store:
        messages = MessageRepository(store)
        stored = {}
        for chat in range(10):
            for row in messages.get_messages(f"chat-{chat}"):
                stored.setdefault(row["content"], []).append(row["id"])
            row = SessionRepository(store).get_session(f"chat-{chat}")
            assert row is not None and row["message_count"] == APPENDS // 10
    assert {content: len(ids) for content, ids in stored.items()} == {
        f"message {n}": 1 for n in range(APPENDS)
    }
    assert all(stored[f"message {n}"] == [got[n]] for n in range(APPENDS))


_APPENDER = textwrap.dedent(
    """
    import sys
    from hermes_store.store import Store
    from hermes_store.repositories.messages import MessageRepository

    url, who = sys.argv[1], sys.argv[2]
    with Store(url) as store:
        messages = MessageRepository(store)
        ids = [
            messages.append_message("shared", "user", f"m{n}", idempotency_key=f"k{n}")
            for n in range(60)
        ]
        batch = messages.append_messages(
            "shared", [{"role": "user", "content": "b"}] * 3, idempotency_key="batch"
        )
    print(" ".join(map(str, ids + batch)))
    """
)


def test_two_processes_with_the_same_keys_store_each_message_once(backend_url: str) -> None:
    with Store(backend_url) as store:
        SessionRepository(store).create_session("shared", "cli")
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", _APPENDER, backend_url, str(who)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for who in range(3)
    ]
    outputs = []
    for proc in procs:
        out, err = proc.communicate(timeout=300)
        assert proc.returncode == 0, err
        outputs.append(out.split())
    assert outputs[0] == outputs[1] == outputs[2]  # every process got the same ids
    with Store(backend_url) as store:
        rows = MessageRepository(store).get_messages("shared")
        row = SessionRepository(store).get_session("shared")
    assert sorted(r["content"] for r in rows) == sorted([f"m{n}" for n in range(60)] + ["b"] * 3)
    assert [str(r["id"]) for r in rows] == sorted(outputs[0], key=int)
    assert row is not None and row["message_count"] == 63


@pytest.mark.parametrize("journal", ["wal", "delete", "postgresql"])
def test_a_key_never_answers_for_a_message_that_is_gone(  # type: ignore[no-untyped-def]
    request: pytest.FixtureRequest, journal: str
) -> None:
    """Issue 35 item 3: the session deleted by a connection that does not enforce
    foreign keys (the `sqlite3` shell's default; on PostgreSQL a restore-style
    `session_replication_role = replica`), the id made again: the old key must not
    return the deleted message's id, and the retry writes its message."""
    from helpers.databases import set_journal_mode
    from helpers.raw_sql import RawConnection

    if journal == "postgresql":
        url = request.getfixturevalue("pg_fresh_db")
    else:
        url = request.getfixturevalue("fresh_db")
        set_journal_mode(url.removeprefix("sqlite:///"), journal)
    with Store(url) as store:
        sessions, messages = SessionRepository(store), MessageRepository(store)
        sessions.create_session("s1", "cli")
        old = messages.append_message("s1", "user", "first", idempotency_key="k1")
        batch = messages.append_messages(
            "s1", [{"role": "user", "content": "b"}] * 2, idempotency_key="k2"
        )
        delete = [
            "DELETE FROM messages WHERE session_id = 's1'",
            "DELETE FROM sessions WHERE id = 's1'",
        ]
        count = f"SELECT count(*) FROM {IDEMPOTENCY_TABLE} WHERE session_id = 's1'"
        if journal == "postgresql":
            raw = RawConnection(url)
            try:
                raw.execute("SET session_replication_role = replica")
                for sql in delete:
                    raw.execute(sql)
                left = int(raw.execute(count).fetchone()[0])
            finally:
                raw.close()
        else:
            # another process, as the sqlite3 shell is (whose foreign_keys is off); this
            # one's driver may be another SQLite library, which must not share the file
            script = (
                "import sqlite3, sys; con = sqlite3.connect(sys.argv[1]); "
                f"con.executescript({';'.join(delete)!r}); "
                f"print(con.execute({count!r}).fetchone()[0]); con.close()"
            )
            path = url.removeprefix("sqlite:///")
            done = subprocess.run(
                [sys.executable, "-c", script, path],
                check=True, capture_output=True, text=True, timeout=60,
            )  # fmt: skip
            left = int(done.stdout)
        assert left == 2  # the keys outlived their session
        sessions.create_session("s1", "cli")
        new = messages.append_message("s1", "user", "again", idempotency_key="k1")
        again = messages.append_messages(
            "s1", [{"role": "user", "content": "c"}] * 2, idempotency_key="k2"
        )
        assert new != old and set(again).isdisjoint(batch)
        got = [(m["id"], m["content"]) for m in messages.get_messages("s1")]
        assert got == [(new, "again"), (again[0], "c"), (again[1], "c")]
        # the key now answers for the new message, and only for it
        assert messages.append_message("s1", "user", "again", idempotency_key="k1") == new
        assert len(messages.get_messages("s1")) == 3
        # one of a batch's two messages removed: answering would name the gone one,
        # writing again would repeat the other; refused, nothing written
        gone = f"DELETE FROM messages WHERE id = {again[1]}"
        store.write(lambda conn: conn.exec_driver_sql(gone))
        with pytest.raises(InvalidInput, match="removed since; nothing was written"):
            messages.append_messages(
                "s1", [{"role": "user", "content": "c"}] * 2, idempotency_key="k2"
            )
        assert [m["id"] for m in messages.get_messages("s1")] == [new, again[0]]
