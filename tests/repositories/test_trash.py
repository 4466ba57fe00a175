"""The trash (issue 39 item 1): a trashed session leaves the v23 tables (the original and
search no longer see it) with its descendants, messages, usage rows and tags, and a
restore brings every row back with the same ids and values, on SQLite in both journal
modes and on PostgreSQL. Title collisions, a lost parent, a reused id, expiry and bad
input behave as docs/trash-and-tags.md says."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from helpers.raw_sql import RawConnection

from hermes_store import AsyncStore
from hermes_store.compat import SessionDB
from hermes_store.errors import InvalidInput, RestoreConflict, SessionNotFound
from hermes_store.repositories.changes import ChangeFeed
from hermes_store.repositories.maintenance import MaintenanceRepository
from hermes_store.repositories.messages import MessageRepository
from hermes_store.repositories.search import SearchRepository
from hermes_store.repositories.sessions import SessionRepository
from hermes_store.repositories.tags import TagRepository
from hermes_store.repositories.titles import TitleRepository
from hermes_store.repositories.trash import TrashRepository
from hermes_store.repositories.usage import UsageRepository
from hermes_store.store import Store

TREE = ("root", "child", "delegate", "grandchild")


def _url(request: pytest.FixtureRequest, journal: str) -> str:
    from helpers.databases import set_journal_mode

    if journal == "postgresql":
        return str(request.getfixturevalue("pg_fresh_db"))
    url = str(request.getfixturevalue("fresh_db"))
    set_journal_mode(url.removeprefix("sqlite:///"), journal)
    return url


def _raw(url: str, sql: str) -> list[tuple[Any, ...]]:
    con = RawConnection(url)
    try:
        return [tuple(r.values()) for r in con.execute(sql)]
    finally:
        con.close()


def _v23_rows(url: str) -> dict[str, list[tuple[Any, ...]]]:
    """Every row of the tables the trash moves, all columns, in a fixed order (the
    PostgreSQL search column left out: it is generated from the content)."""
    message_columns = ", ".join(c for c in _columns(url, "messages") if c != "search_vector")
    return {
        "sessions": _raw(url, "SELECT * FROM sessions ORDER BY id"),
        "messages": _raw(url, f"SELECT {message_columns} FROM messages ORDER BY id"),  # noqa: S608
        "usage": _raw(url, "SELECT * FROM session_model_usage ORDER BY session_id, model"),
        "tags": _raw(url, "SELECT * FROM hermes_store_session_tags ORDER BY session_id, tag"),
        "keys": _raw(url, "SELECT * FROM hermes_store_idempotency_keys ORDER BY session_id, key"),
        "adk": _raw(url, "SELECT * FROM hermes_store_adk_sessions ORDER BY session_id"),
        # derived by triggers; a restore writes it once, as they would
        "activity": _raw(url, "SELECT * FROM hermes_store_session_activity ORDER BY session_id"),
    }


def _columns(url: str, table: str) -> list[str]:
    if url.startswith("sqlite"):
        return [str(r[1]) for r in _raw(url, f"PRAGMA table_info({table})")]
    return [
        str(r[0])
        for r in _raw(
            url,
            "SELECT column_name FROM information_schema.columns WHERE table_name = "
            f"'{table}' AND table_schema = current_schema() ORDER BY ordinal_position",
        )
    ]


def _build_tree(store: Store) -> None:
    sessions, messages = SessionRepository(store), MessageRepository(store)
    sessions.create_session("root", "cli", model="m1")
    sessions.create_session("child", "cli", parent_session_id="root")
    sessions.create_session(
        "delegate", "cli", parent_session_id="root", model_config={"_delegate_from": "root"}
    )
    sessions.create_session("grandchild", "cli", parent_session_id="child")
    sessions.create_session("bystander", "cli")
    TitleRepository(store).set_session_title("root", "Zebra plans")
    for sid in (*TREE, "bystander"):
        messages.append_message(sid, "user", f"zebra note from {sid}")
        messages.append_message(
            sid,
            "assistant",
            [{"type": "text", "text": f"structured {sid}"}],
            tool_calls=[{"id": "c1", "function": {"name": "f", "arguments": "{}"}}],
        )
    messages.append_message("root", "user", "nul \x00 and 1.5e-300", idempotency_key="k1")
    UsageRepository(store).update_token_counts(
        "root", input_tokens=10, output_tokens=3, model="m1", estimated_cost_usd=0.125
    )
    TagRepository(store).add_tags("root", ["work", "zebra"])
    TagRepository(store).add_tags("grandchild", ["deep"])
    # the row Google ADK's session service (hermes_store.integrations.adk) keeps for a
    # session whose messages are its events
    store.write(
        lambda conn: conn.exec_driver_sql(
            "INSERT INTO hermes_store_adk_sessions (app_name, user_id, id, session_id, state,"
            " created_at, updated_at, revision) VALUES ('app', 'u1', 'adk-1', 'child',"
            " '{\"k\": 1}', 1.5, 2.5, 3)"
        )
    )


@pytest.mark.parametrize("journal", ["wal", "delete", "postgresql"])
def test_trash_then_restore_is_exact(request: pytest.FixtureRequest, journal: str) -> None:
    url = _url(request, journal)
    with Store(url) as store:
        _build_tree(store)
        before = _v23_rows(url)
        search = SearchRepository(store)
        assert {h["session_id"] for h in search.search_messages("zebra", limit=50)} == {
            *TREE,
            "bystander",
        }
        cursor = ChangeFeed(store).latest()

        entry = TrashRepository(store).trash_session("root")
        assert (entry.session_id, entry.sessions, entry.messages) == ("root", 4, 9)
        assert entry.title == "Zebra plans"
        # gone from every v23 table, as a raw query (what the original runs) sees them
        for table, column in (("sessions", "id"), ("messages", "session_id")):
            left = {r[0] for r in _raw(url, f"SELECT {column} FROM {table}")}  # noqa: S608
            assert left == {"bystander"}, table
        assert _raw(url, "SELECT session_id FROM session_model_usage") == []
        assert _raw(url, "SELECT * FROM hermes_store_session_tags") == []
        assert _raw(url, "SELECT * FROM hermes_store_idempotency_keys") == []
        assert _raw(url, "SELECT * FROM hermes_store_adk_sessions") == []
        # search does not find it; the feed reports deletes
        assert {h["session_id"] for h in search.search_messages("zebra", limit=50)} == {"bystander"}
        kinds = {(c.kind, c.session_id) for c in ChangeFeed(store).changes(cursor)}
        assert {("session.deleted", sid) for sid in TREE} <= kinds
        assert ("message.deleted", "root") in kinds
        with pytest.raises(SessionNotFound):
            TagRepository(store).get_tags("root")
        assert [e.session_id for e in TrashRepository(store).list_trash()] == ["root"]

        cursor = ChangeFeed(store).latest()
        report = TrashRepository(store).restore_session("root")
        assert report.sessions[0] == "root" and set(report.sessions) == set(TREE)
        assert report.messages == 9 and report.retitled == {} and report.detached_from is None
        assert _v23_rows(url) == before
        assert {h["session_id"] for h in search.search_messages("zebra", limit=50)} == {
            *TREE,
            "bystander",
        }
        assert search.search_messages("structured grandchild")[0]["session_id"] == "grandchild"
        kinds = {(c.kind, c.session_id) for c in ChangeFeed(store).changes(cursor)}
        assert {("session.created", sid) for sid in TREE} <= kinds
        assert ("message.appended", "root") in kinds
        assert TrashRepository(store).list_trash() == []
        # the idempotency key answers the retry with the restored id again
        again = MessageRepository(store).append_message(
            "root", "user", "nul \x00 and 1.5e-300", idempotency_key="k1"
        )
        assert again == max(r[0] for r in before["messages"] if r[1] == "root")


def test_restore_titles_parents_and_reused_ids(backend_url: str) -> None:
    with Store(backend_url) as store:
        sessions, titles, trash = (
            SessionRepository(store),
            TitleRepository(store),
            TrashRepository(store),
        )
        sessions.create_session("a", "cli")
        titles.set_session_title("a", "Plans")
        trash.trash_session("a")
        # another session takes the title: the restored one is renamed, numbered if need be
        sessions.create_session("b", "cli")
        titles.set_session_title("b", "Plans")
        sessions.create_session("c", "cli")
        titles.set_session_title("c", "Plans (restored)")
        report = trash.restore_session("a")
        assert report.retitled == {"a": "Plans (restored 2)"}
        assert titles.get_session_title("a") == "Plans (restored 2)"

        # a child trashed on its own, its parent then deleted for good: a root again
        sessions.create_session("p", "cli")
        sessions.create_session("kid", "cli", parent_session_id="p")
        trash.trash_session("kid")
        assert MaintenanceRepository(store).delete_session("p")
        report = trash.restore_session("kid")
        assert report.detached_from == "p"
        assert (sessions.get_session("kid") or {})["parent_session_id"] is None

        # a child trashed on its own, its parent still live: linked to it again
        sessions.create_session("kid2", "cli", parent_session_id="a")
        trash.trash_session("kid2")
        report = trash.restore_session("kid2")
        assert report.detached_from is None
        assert (sessions.get_session("kid2") or {})["parent_session_id"] == "a"

        # a live session took the id meanwhile: refused, nothing changes
        trash.trash_session("b")
        sessions.create_session("b", "telegram")
        with pytest.raises(RestoreConflict) as conflict:
            trash.restore_session("b")
        assert conflict.value.taken == ["b"]
        assert (sessions.get_session("b") or {})["source"] == "telegram"
        assert [e.session_id for e in trash.list_trash()] == ["b"]


def test_expiry_emptying_and_bad_input(backend_url: str) -> None:
    with Store(backend_url) as store:
        sessions, trash = SessionRepository(store), TrashRepository(store)
        for sid in ("old", "new"):
            sessions.create_session(sid, "cli")
            MessageRepository(store).append_message(sid, "user", "x")
        trash.trash_session("old", keep_days=0)
        trash.trash_session("new")
        assert trash.empty_trash(expired_only=True) == 1
        assert [e.session_id for e in trash.list_trash()] == ["new"]
        with pytest.raises(SessionNotFound):
            trash.restore_session("old")
        with pytest.raises(SessionNotFound):
            trash.trash_session("never")
        with pytest.raises(SessionNotFound):
            trash.trash_session("")
        with pytest.raises(SessionNotFound):
            trash.empty_trash(session_id="never")
        for bad in (-1, float("nan"), float("inf"), "30", True, 10**9):
            with pytest.raises(InvalidInput):
                trash.trash_session("new", keep_days=bad)  # type: ignore[arg-type]
        assert trash.trash_size() == (1, 2)
        assert trash.empty_trash() == 1
        assert trash.list_trash() == [] and trash.trash_size() == (0, 0)


def test_a_large_session_moves_and_comes_back_whole(backend_url: str) -> None:
    with Store(backend_url) as store:
        SessionRepository(store).create_session("big", "cli")
        batch = [{"role": "user", "content": f"line {i} quokka"} for i in range(500)]
        for _ in range(20):
            MessageRepository(store).append_messages("big", batch)
        ids = [r[0] for r in _raw(backend_url, "SELECT id FROM messages ORDER BY id")]
        assert len(ids) == 10_000
        entry = TrashRepository(store).trash_session("big")
        assert entry.messages == 10_000
        assert _raw(backend_url, "SELECT COUNT(*) FROM messages") == [(0,)]
        TrashRepository(store).restore_session("big")
        assert [r[0] for r in _raw(backend_url, "SELECT id FROM messages ORDER BY id")] == ids
        hits = SearchRepository(store).search_messages("quokka", limit=5)
        assert len(hits) == 5


def test_a_restore_with_a_policy_on_writes_the_messages_back_redacted(
    backend_url: str,
) -> None:
    """Restored messages keep their old ids, below `redact`'s cursor, where a resumed run
    never looks: a store with a policy on redacts them as it writes them back (content,
    structured tool calls, display metadata), and search finds only the markers."""
    from hermes_store.redaction import RedactionPolicy
    from hermes_store.repositories.redaction import RedactionRepository

    aws = "AKIAIOSFODNN7EXAMPLE"
    with Store(backend_url, redaction=RedactionPolicy.off()) as store:
        SessionRepository(store).create_session("s1", "cli")
        MessageRepository(store).append_message(
            "s1",
            "assistant",
            f"deploy with {aws}",
            tool_calls=[{"function": {"arguments": f'{{"key": "{aws}"}}'}}],
            display_metadata={"item": {"text": aws}},
        )
        TrashRepository(store).trash_session("s1")
    with Store(backend_url, redaction=RedactionPolicy()) as store:
        # a run over the live rows, as before a restore: its cursor passes the old id
        RedactionRepository(store).redact_stored(apply=True)
        report = TrashRepository(store).restore_session("s1")
        assert report.messages == 1
        [message] = MessageRepository(store).get_messages("s1")
        assert SearchRepository(store).search_messages(aws) == []
    assert message["content"] == "deploy with [REDACTED:aws-access-key]"
    assert message["tool_calls"][0]["function"]["arguments"] == (
        '{"key": "[REDACTED:aws-access-key]"}'
    )
    assert message["display_metadata"] == {"item": {"text": "[REDACTED:aws-access-key]"}}
    stored = _raw(backend_url, "SELECT content, tool_calls, display_metadata FROM messages")
    assert aws not in repr(stored)


def test_a_restore_without_a_policy_writes_the_messages_back_as_they_were(
    fresh_db: str,
) -> None:
    aws = "AKIAIOSFODNN7EXAMPLE"
    with Store(fresh_db) as store:
        SessionRepository(store).create_session("s1", "cli")
        MessageRepository(store).append_message("s1", "user", f"deploy with {aws}")
        TrashRepository(store).trash_session("s1")
        TrashRepository(store).restore_session("s1")
    assert _raw(fresh_db, "SELECT content FROM messages") == [(f"deploy with {aws}",)]


def test_the_facade_delete_session_still_deletes_for_good(fresh_db: str) -> None:
    with Store(fresh_db) as store:
        SessionRepository(store).create_session("s", "cli")
        TagRepository(store).add_tags("s", ["t"])
    db = SessionDB(fresh_db.removeprefix("sqlite:///"))
    try:
        assert db.delete_session("s")
    finally:
        db.close()
    with Store(fresh_db) as store:
        assert TrashRepository(store).list_trash() == []
    assert _raw(fresh_db, "SELECT * FROM hermes_store_session_tags") == []


def test_async_store_trash(backend_url: str) -> None:
    async def main() -> None:
        async with await AsyncStore.open(backend_url) as store:
            await store.sessions.create_session("s", "cli")
            entry = await store.trash.trash_session("s", keep_days=1)
            assert [e.id for e in await store.trash.list_trash()] == [entry.id]
            report = await store.trash.restore_session("s")
            assert report.sessions == ["s"]
            assert await store.trash.empty_trash() == 0

    asyncio.run(main())


def test_columns_the_models_do_not_know_survive_trash_and_restore(backend_url: str) -> None:
    """A newer Hermes or a fork added columns to messages and sessions: their values are
    kept in the trash and written back by the restore."""
    with Store(backend_url) as store:
        SessionRepository(store).create_session("forked", "cli")
        MessageRepository(store).append_message("forked", "user", "kept whole")
    for sql in (
        "ALTER TABLE sessions ADD COLUMN fork_flag INTEGER",
        "ALTER TABLE messages ADD COLUMN fork_note TEXT",
        "UPDATE sessions SET fork_flag = 7 WHERE id = 'forked'",
        "UPDATE messages SET fork_note = 'from the fork' WHERE session_id = 'forked'",
    ):
        _raw_write(backend_url, sql)
    with Store(backend_url) as store:
        TrashRepository(store).trash_session("forked")
        assert _raw(backend_url, "SELECT fork_flag FROM sessions") == []
        TrashRepository(store).restore_session("forked")
    assert _raw(backend_url, "SELECT fork_flag FROM sessions WHERE id = 'forked'") == [(7,)]
    assert _raw(backend_url, "SELECT fork_note, content FROM messages") == [
        ("from the fork", "kept whole")
    ]


def _raw_write(url: str, sql: str) -> None:
    con = RawConnection(url)
    try:
        con.execute(sql)
    finally:
        con.close()


def test_a_telegram_topic_binding_goes_into_the_trash_and_back(backend_url: str) -> None:
    from hermes_store.repositories.telegram import TelegramTopicRepository

    with Store(backend_url) as store:
        sessions, trash = SessionRepository(store), TrashRepository(store)
        topics = TelegramTopicRepository(store)
        for sid in ("dm", "dm2", "other"):
            sessions.create_session(sid, "telegram")
        bound = topics.bind_telegram_topic(
            chat_id=1, thread_id=2, user_id=3, session_key="agent:main:telegram:dm:1",
            session_id="dm",
        )  # fmt: skip
        trash.trash_session("dm")
        assert topics.get_telegram_topic_binding(1, 2) is None  # cascaded with its session
        report = trash.restore_session("dm")
        assert report.topic_bindings_skipped == []
        assert topics.get_telegram_topic_binding(1, 2) == bound

        # the topic was bound to another session meanwhile: that binding stays, the
        # restored session comes back unbound and the report names the topic
        topics.bind_telegram_topic(
            chat_id=1, thread_id=5, user_id=3, session_key="k5", session_id="dm2"
        )
        trash.trash_session("dm2")
        topics.bind_telegram_topic(
            chat_id=1, thread_id=5, user_id=3, session_key="k5", session_id="other"
        )
        report = trash.restore_session("dm2")
        assert report.topic_bindings_skipped == [("1", "5")]
        assert (topics.get_telegram_topic_binding(1, 5) or {})["session_id"] == "other"
        assert topics.get_telegram_topic_binding_by_session("dm2") is None
        assert sessions.get_session("dm2") is not None


def test_other_restore_conflicts_are_refused_with_nothing_written(backend_url: str) -> None:
    """A Google ADK session re-created with the trashed one's (app, user, id), or a
    message that holds a trashed message's id: RestoreConflict, nothing restored."""
    adk_row = (
        "INSERT INTO hermes_store_adk_sessions (app_name, user_id, id, session_id, state,"
        " created_at, updated_at, revision) VALUES ('app', 'u1', 'adk-1', '{sid}', '{{}}',"
        " 1.5, 2.5, 1)"
    )
    with Store(backend_url) as store:
        sessions, trash = SessionRepository(store), TrashRepository(store)
        for sid in ("adk", "again", "texts", "other"):
            sessions.create_session(sid, "cli")
        store.write(lambda conn: conn.exec_driver_sql(adk_row.format(sid="adk")))
        MessageRepository(store).append_message("adk", "user", "one")
        trash.trash_session("adk")
        # the ADK app found no session under that id and created it again
        store.write(lambda conn: conn.exec_driver_sql(adk_row.format(sid="again")))
        with pytest.raises(RestoreConflict, match="adk-1") as conflict:
            trash.restore_session("adk")
        assert conflict.value.session_id == "adk"
        assert sessions.get_session("adk") is None
        assert [e.session_id for e in trash.list_trash()] == ["adk"]
        assert _raw(backend_url, "SELECT session_id FROM hermes_store_adk_sessions") == [("again",)]

        taken = MessageRepository(store).append_message("texts", "user", "mine")
        trash.trash_session("texts")
        _raw_write(
            backend_url,
            "INSERT INTO messages (id, session_id, role, content, timestamp) "
            f"VALUES ({taken}, 'other', 'user', 'holds the id', 1.0)",
        )
        with pytest.raises(RestoreConflict):
            trash.restore_session("texts")
        assert sessions.get_session("texts") is None
        assert {e.session_id for e in trash.list_trash()} == {"adk", "texts"}
        assert _raw(backend_url, f"SELECT session_id FROM messages WHERE id = {taken}") == [  # noqa: S608
            ("other",)
        ]


def test_the_trash_before_hs0008_and_hs0008_s_downgrade(backend_url: str) -> None:
    """At hs0007 (no ADK table) the trash says which upgrade it needs; a downgrade of
    hs0008 refuses while the trash holds a Google ADK session, which it could not restore
    without the table."""
    from hermes_store import migrate
    from hermes_store.errors import MigrationError, SchemaBehind

    migrate.downgrade(backend_url, "hs0007")
    with Store(backend_url, check_schema=False) as store:
        SessionRepository(store).create_session("s", "cli")
        with pytest.raises(SchemaBehind, match="hermes_store_adk_sessions"):
            TrashRepository(store).trash_session("s")
        assert SessionRepository(store).get_session("s") is not None
    migrate.upgrade(backend_url)
    with Store(backend_url) as store:
        store.write(
            lambda conn: conn.exec_driver_sql(
                "INSERT INTO hermes_store_adk_sessions (app_name, user_id, id, session_id,"
                " state, created_at, updated_at, revision) VALUES ('app', 'u1', 'a', 's',"
                " '{}', 1.5, 2.5, 1)"
            )
        )
        TrashRepository(store).trash_session("s")
    with pytest.raises(MigrationError, match="downgrade would lose data.*trash"):
        migrate.downgrade(backend_url, "hs0007")
    assert migrate.current(backend_url).alembic_revision == migrate.HEAD
    with Store(backend_url) as store:
        assert TrashRepository(store).restore_session("s").sessions == ["s"]


def test_trashing_reads_a_large_session_in_batches(backend_url: str) -> None:
    """A session's rows are streamed into the trash a batch at a time: the Python memory
    the move needs stays well under the session's size (6,000 messages of 10 KB)."""
    import tracemalloc

    from sqlalchemy import text

    bulk = "x" * 10_000
    with Store(backend_url) as store:
        SessionRepository(store).create_session("big", "cli")
        store.write(
            lambda conn: conn.execute(
                text(
                    "INSERT INTO messages (session_id, role, content, timestamp, reasoning) "
                    "VALUES ('big', 'assistant', 'r', :t, :r)"
                ),
                [{"t": float(i), "r": bulk} for i in range(6000)],
            )
        )
        tracemalloc.start()
        try:
            entry = TrashRepository(store).trash_session("big")
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
        assert entry.messages == 6000
        assert peak < 35_000_000, peak  # the session's text alone is 60 MB
        TrashRepository(store).restore_session("big")
        assert _raw(backend_url, "SELECT count(*), min(length(reasoning)) FROM messages") == [
            (6000, 10_000)
        ]
