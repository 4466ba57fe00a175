"""The per-turn hot path (issue 37): loads read only the columns they return and walk the
index messages(session_id, id); the newest N messages come from one indexed read; a
PostgreSQL append is one call and its writes are not serialised in the process; a
SQLite append sends the fewest statements; hermes_store_session_activity stays true
under any writer's SQL, and a listing by last activity walks it to the same page the
full statement gives. Mechanisms only: speed is measured in benchmarks/per_turn.py."""

from __future__ import annotations

import asyncio
import random
import threading
import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Any

import pytest
from helpers.statements import sent
from sqlalchemy import create_engine, insert, make_url, text
from sqlalchemy.pool import NullPool

from hermes_store.aio import AsyncStore
from hermes_store.contract import ACTIVITY_TABLE, APPEND_FUNCTION, MESSAGES_SESSION_ID_INDEX
from hermes_store.errors import InvalidInput
from hermes_store.repositories._tables import SESSIONS
from hermes_store.repositories.listing import (
    ListingFilters,
    PageShape,
    list_page,
    page_params,
    page_statement,
    rich_rows,
)
from hermes_store.repositories.messages import MessageRepository
from hermes_store.repositories.sessions import SessionRepository
from hermes_store.store import Store


def recorded(store: Store) -> AbstractContextManager[list[str]]:
    """Every statement the store's engine sends meanwhile (BEGIN included on SQLite)."""
    return sent(store, transactions=True)


def make_session(store: Store, sid: str, started_at: float | None = None, **cols: Any) -> str:
    values = {"id": sid, "source": "cli", "started_at": started_at or time.time(), **cols}
    store.write(lambda conn: conn.execute(insert(SESSIONS).values(**values)))
    return sid


def fill(repo: MessageRepository, sid: str, count: int) -> list[int]:
    return repo.append_messages(
        sid,
        [{"role": "user" if n % 2 == 0 else "assistant", "content": f"m{n}"} for n in range(count)],
    )


# --------------------------------------------------------------------------- loads


def test_loads_never_read_the_search_vector(store: Store) -> None:
    """A conversation reads its columns only; get_messages and the newest N read every
    column of the table but, on PostgreSQL, the generated search vector."""
    repo = MessageRepository(store)
    make_session(store, "s1")
    fill(repo, "s1", 4)
    with recorded(store) as statements:
        conversation = repo.get_messages_as_conversation("s1")
        full = repo.get_messages("s1")
        newest = repo.get_newest_messages("s1", 2)
    reads = [s for s in statements if "FROM messages" in s]
    assert len(reads) == 3, statements
    assert all("search_vector" not in s for s in reads), reads
    assert "*" not in reads[0] and "token_count" not in reads[0], reads[0]
    if store.dialect == "postgresql":
        assert all("*" not in s for s in reads), reads
    assert [m["content"] for m in conversation] == ["m0", "m1", "m2", "m3"]
    assert len(full[0]) == 23 and full[2:] == newest


@pytest.mark.sqlite_only
def test_session_reads_walk_the_session_index(store: Store) -> None:
    """The loads and the newest N walk messages(session_id, id): no temporary B-tree
    sorts a session's rows."""
    repo = MessageRepository(store)
    for sid in ("s1", "s2"):
        make_session(store, sid)
        fill(repo, sid, 30)
    store.write(lambda conn: conn.exec_driver_sql("ANALYZE"))
    with recorded(store) as statements:
        repo.get_messages_as_conversation("s1")
        repo.get_messages("s1")
        repo.get_messages("s1", include_inactive=True)
        repo.get_newest_messages("s1", 5)
    reads = [s for s in statements if "FROM messages" in s]
    assert len(reads) == 4
    with store.read() as conn:
        for sql in reads:
            params = ["s1"] + [1] * (sql.count("?") - 1)
            plan = " ".join(
                r[-1] for r in conn.exec_driver_sql("EXPLAIN QUERY PLAN " + sql, tuple(params))
            )
            assert MESSAGES_SESSION_ID_INDEX in plan and "TEMP B-TREE" not in plan, (sql, plan)


def test_newest_messages_in_conversation_order(store: Store) -> None:
    repo = MessageRepository(store)
    make_session(store, "s1")
    ids = fill(repo, "s1", 12)
    repo.rewind_to_message("s1", ids[10])  # the last two rows become inactive
    everything = repo.get_messages("s1", include_inactive=True)
    active = repo.get_messages("s1")
    assert repo.get_newest_messages("s1", 3) == active[-3:]
    assert [m["id"] for m in repo.get_newest_messages("s1", 3)] == ids[7:10]
    assert repo.get_newest_messages("s1", 3, include_inactive=True) == everything[-3:]
    assert repo.get_newest_messages("s1", 100) == active
    assert repo.get_newest_messages("s1", -1) == active  # a negative limit: all of them
    assert repo.get_newest_messages("s1", 0) == []
    assert repo.get_newest_messages("nope", 5) == []
    with recorded(store) as statements:
        repo.get_newest_messages("s1", 3)
    assert len([s for s in statements if "messages" in s]) == 1, statements  # no count first


def test_newest_messages_of_chosen_columns(store: Store) -> None:
    """`columns` reads only the columns named (the SELECT names them, nothing else),
    decoded as whole rows are; a name that is not a column of messages is InvalidInput."""
    SessionRepository(store).create_session("s1", "cli")
    repo = MessageRepository(store)
    repo.append_message("s1", "user", "hello", display_metadata={"k": [1, "x"]})
    repo.append_message("s1", "tool", "out", tool_call_id="c1")
    whole = repo.get_newest_messages("s1", -1)
    wanted = ("role", "content", "tool_call_id", "display_metadata")
    with recorded(store) as statements:
        chosen = repo.get_newest_messages("s1", -1, columns=wanted)
    reads = [s for s in statements if "FROM messages" in s]
    assert len(reads) == 1 and "tool_calls" not in reads[0] and "*" not in reads[0], reads
    assert chosen == [{name: row[name] for name in wanted} for row in whole]
    assert chosen[0]["display_metadata"] == {"k": [1, "x"]}
    assert repo.get_newest_messages("s1", 1, columns=["content", "content"]) == [
        {"content": "out"}
    ]
    for bad in (["content", "no_such_column"], ["search_vector"], [], "content"):
        with pytest.raises(InvalidInput):
            repo.get_newest_messages("s1", 1, columns=bad)


def test_async_store_has_the_newest_messages(backend_url: str) -> None:
    async def main() -> list[Any]:
        async with await AsyncStore.open(backend_url) as store:
            await store.sessions.create_session("s1", "cli")
            await store.messages.append_messages(
                "s1", [{"role": "user", "content": f"m{n}"} for n in range(5)]
            )
            return await store.messages.get_newest_messages("s1", 2)

    assert [m["content"] for m in asyncio.run(main())] == ["m3", "m4"]


# --------------------------------------------------------------------------- appends


def test_a_sqlite_append_sends_three_statements(sqlite_store: Store) -> None:
    """BEGIN IMMEDIATE, the insert that checks the session and its lease itself, the
    counters."""
    repo = MessageRepository(sqlite_store)
    make_session(sqlite_store, "s1")
    repo.append_message("s1", "user", "warm")
    with recorded(sqlite_store) as statements:
        repo.append_message("s1", "user", "hello")
    assert len(statements) == 3, statements
    assert statements[0] == "BEGIN IMMEDIATE"
    assert statements[1].startswith("INSERT INTO messages") and "FROM sessions" in statements[1]
    assert statements[2].startswith("UPDATE sessions")


def test_a_postgresql_append_is_one_call(pg_fresh_db: str) -> None:
    """The function does the checks, the insert and the counters and returns the marker
    the commit-outcome check needs: no statement besides it, no ping."""
    with Store(pg_fresh_db) as store:
        repo = MessageRepository(store)
        make_session(store, "s1")
        repo.append_message("s1", "user", "warm")
        with recorded(store) as statements:
            mid = repo.append_message("s1", "assistant", "hello", tool_calls=[{"id": "c"}])
        assert len(statements) == 1 and APPEND_FUNCTION in statements[0], statements
        session = SessionRepository(store).get_session("s1")
        assert session is not None
        assert (session["message_count"], session["tool_call_count"]) == (2, 1)
        assert repo.get_messages("s1")[-1]["id"] == mid


def test_postgresql_writes_are_not_serialised_in_the_process(pg_fresh_db: str) -> None:
    """A write waiting inside its transaction does not hold up another session's write
    of the same Store (row locks keep apart what must be)."""
    with Store(pg_fresh_db) as store:
        repo = MessageRepository(store)
        for sid in ("a", "b"):
            make_session(store, sid)
        inside, release = threading.Event(), threading.Event()

        def slow(conn: Any) -> None:
            conn.execute(text("UPDATE sessions SET title = 'slow' WHERE id = 'a'"))
            inside.set()
            assert release.wait(30)

        holder = threading.Thread(target=store.write, args=(slow,))
        holder.start()
        try:
            assert inside.wait(30)
            done: list[int] = []
            other = threading.Thread(
                target=lambda: done.append(repo.append_message("b", "user", "x"))
            )
            other.start()
            other.join(20)
            assert done, "the second write waited for the first one's transaction"
        finally:
            release.set()
            holder.join(30)


def test_a_read_block_gets_past_a_dropped_connection(pg_fresh_db: str) -> None:
    """Without a ping per checkout, a `with store.read()` block (which cannot be run
    again) still never starts on a connection the server dropped."""
    with Store(pg_fresh_db) as store:
        make_session(store, "s1")
        with store.read() as conn:
            pid = conn.execute(text("SELECT pg_backend_pid()")).scalar_one()
        admin = create_engine(make_url(pg_fresh_db), poolclass=NullPool)
        with admin.connect() as conn:
            conn.execute(text("SELECT pg_terminate_backend(:pid)"), {"pid": pid})
            conn.commit()
        admin.dispose()
        with store.read() as conn:
            assert conn.execute(text("SELECT count(*) FROM sessions")).scalar_one() == 1
        assert MessageRepository(store).append_message("s1", "user", "after") > 0


# --------------------------------------------------------------------------- activity


def _activity(store: Store) -> dict[str, float]:
    with store.read() as conn:
        kept = dict(
            conn.execute(text(f"SELECT session_id, last_active FROM {ACTIVITY_TABLE}")).all()
        )
        expected = dict(
            conn.execute(
                text(
                    "SELECT s.id, COALESCE((SELECT MAX(m.timestamp) FROM messages AS m"
                    " WHERE m.session_id = s.id), s.started_at) FROM sessions AS s"
                )
            ).all()
        )
    assert kept == expected
    return kept


def test_activity_is_kept_true_by_any_writer(store: Store) -> None:
    """Plain SQL, as the original Hermes code writes: inserts, a message moved and
    re-timed, deletes, a session re-dated and deleted."""
    run: Callable[[str], None] = lambda sql: store.write(lambda conn: conn.execute(text(sql)))  # noqa: E731
    run("INSERT INTO sessions (id, source, started_at) VALUES ('a', 'cli', 100), ('b', 'cli', 200)")
    assert _activity(store) == {"a": 100, "b": 200}
    run(
        "INSERT INTO messages (session_id, role, content, timestamp, active) VALUES"
        " ('a', 'user', 'x', 150, 1), ('a', 'user', 'y', 90, 1), ('b', 'user', 'z', 50, 1)"
    )
    assert _activity(store) == {"a": 150, "b": 50}  # b's message is older than its start
    run("UPDATE messages SET timestamp = 300 WHERE content = 'y'")
    run("UPDATE messages SET session_id = 'b' WHERE content = 'x'")
    assert _activity(store) == {"a": 300, "b": 150}
    run("DELETE FROM messages WHERE content = 'y'")
    run("UPDATE sessions SET started_at = 120 WHERE id = 'a'")
    assert _activity(store) == {"a": 120, "b": 150}
    MessageRepository(store).clear_messages("b")
    assert _activity(store) == {"a": 120, "b": 200}
    run("DELETE FROM sessions WHERE id = 'b'")
    assert _activity(store) == {"a": 120}


# --------------------------------------------------------------------------- listing


def _full_statement_page(
    store: Store, filters: ListingFilters, limit: int, offset: int
) -> list[Any]:
    shape = PageShape(
        filters=filters.shape(),
        compact=True,
        by_chain_activity=True,
        id_query=False,
        search_query=False,
        squashed_query=False,
        limited=True,
        pinned_only=False,
    )
    params = page_params(filters, limit, offset, "", "")
    return store.read(lambda conn: rich_rows(conn, page_statement(shape), params))


def test_listing_by_activity_walks_to_the_full_statement_s_page(store: Store) -> None:
    """Compression chains (whose newest activity may be a continuation's), branches,
    archived rows, ties of activity: every page the walk gives is the full statement's."""
    rng = random.Random(37)
    sessions = SessionRepository(store)
    messages = MessageRepository(store)
    ids = []
    for n in range(150):
        sid = f"s{n:03d}"
        parent = rng.choice(ids) if ids and rng.random() < 0.3 else None
        cols: dict[str, Any] = {"source": rng.choice(["cli", "telegram"])}
        if parent is not None:
            cols["parent_session_id"] = parent
            if rng.random() < 0.3:
                cols["model_config"] = '{"_branch_from": "x"}'
        if rng.random() < 0.1:
            cols["archived"] = 1
        make_session(store, sid, started_at=1000 + rng.choice(range(100)), **cols)
        if parent is not None and rng.random() < 0.7:
            store.write(
                lambda conn, p=parent: conn.execute(
                    text(
                        "UPDATE sessions SET ended_at = 1, end_reason = 'compression' WHERE id = :p"
                    ),
                    {"p": p},
                )
            )
        ids.append(sid)
        if rng.random() < 0.6:
            messages.append_message(sid, "user", "hi", timestamp=2000 + rng.choice(range(300)))
    for filters in (
        ListingFilters(),
        ListingFilters(source="telegram"),
        ListingFilters(include_archived=True),
        ListingFilters(listable_only=False),
    ):
        for limit, offset in ((20, 0), (5, 0), (20, 20), (10, 95), (200, 0)):
            walked = store.read(
                lambda conn, f=filters, lim=limit, off=offset: list_page(
                    conn,
                    f,
                    limit=lim,
                    offset=off,
                    compact=True,
                    by_chain_activity=True,
                    id_query=None,
                    search_query=None,
                    include_pinned=False,
                    project_tips=False,
                )
            )
            full = _full_statement_page(store, filters, limit, offset)
            assert [r["id"] for r in walked] == [r["id"] for r in full], (filters, limit, offset)
            assert walked == full
    listed = sessions.list_sessions_rich(order_by_last_active=True, limit=20)
    assert len(listed) == 20
