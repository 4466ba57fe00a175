"""`export_session` reads the session's row and its active messages as two prepared
statements: on PostgreSQL the messages' read names their columns, so the generated search
vector (which the server renders as text for every row) is never fetched to be dropped;
the export's answer is the full row and the decoded messages, as before."""

from __future__ import annotations

from typing import Any

from sqlalchemy import event

from hermes_store.repositories.maintenance import MaintenanceRepository
from hermes_store.repositories.messages import MessageRepository
from hermes_store.repositories.sessions import SessionRepository
from hermes_store.store import Store


def _sent(store: Store, work: Any) -> tuple[Any, list[str]]:
    statements: list[str] = []

    def record(_conn: Any, _cursor: Any, statement: str, *_args: Any) -> None:
        statements.append(statement)

    event.listen(store.engine, "before_cursor_execute", record)
    try:
        return work(), statements
    finally:
        event.remove(store.engine, "before_cursor_execute", record)


def _filled(store: Store) -> None:
    SessionRepository(store).create_session("s1", source="cli", model="m")
    messages = MessageRepository(store)
    messages.append_message("s1", role="user", content="searchable words here")
    messages.append_message("s1", role="assistant", content="and an answer")


def test_postgres_export_never_fetches_the_search_vector(pg_fresh_db: str) -> None:
    with Store(pg_fresh_db) as store:
        _filled(store)
        exported, sent = _sent(store, lambda: MaintenanceRepository(store).export_session("s1"))
    assert exported is not None
    assert [m["content"] for m in exported["messages"]] == [
        "searchable words here",
        "and an answer",
    ]
    assert "search_vector" not in exported["messages"][0]
    reads_of_messages = [s for s in sent if "FROM messages" in s]
    assert reads_of_messages, sent
    assert all("*" not in s and "search_vector" not in s for s in reads_of_messages), sent


def test_export_answers_match_the_message_read(store: Store) -> None:
    _filled(store)
    exported = MaintenanceRepository(store).export_session("s1")
    assert exported is not None
    assert exported["messages"] == MessageRepository(store).get_messages("s1")
    session = SessionRepository(store).get_session("s1")
    assert session is not None
    assert {k: v for k, v in exported.items() if k != "messages"} == dict(session)
