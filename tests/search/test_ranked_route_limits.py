"""The SQLite ranked routes (the word index, the trigram index) send their LIMITs
written into the statement: SQLite takes several times as long over a statement holding
a bound LIMIT, which a search that finds nothing pays four times. Their results stay
those of the page asked for. A real file, no mocks."""

from __future__ import annotations

import re
from typing import Any

from sqlalchemy import event

from hermes_store.repositories.messages import MessageRepository
from hermes_store.repositories.search import SearchRepository
from hermes_store.repositories.sessions import SessionRepository
from hermes_store.store import Store


def test_ranked_routes_send_no_bound_limit(sqlite_store: Store) -> None:
    SessionRepository(sqlite_store).create_session("s", "cli")
    messages = MessageRepository(sqlite_store)
    ids = [messages.append_message("s", "user", f"deploy number {n}") for n in range(5)]
    search = SearchRepository(sqlite_store)
    statements: list[str] = []

    def record(conn: Any, cursor: Any, statement: str, *rest: Any) -> None:
        statements.append(" ".join(statement.split()))

    event.listen(sqlite_store.engine, "before_cursor_execute", record)
    try:
        assert list(search.search_messages("zqxjv")) == []  # the word index, then trigrams
        page = [hit["id"] for hit in search.search_messages("deploy", limit=2, offset=1)]
        newest = [hit["id"] for hit in search.search_messages("deploy", sort="newest", limit=3)]
    finally:
        event.remove(sqlite_store.engine, "before_cursor_execute", record)
    assert len(page) == 2 and set(page) <= set(ids)
    assert newest == ids[::-1][:3]
    ranked = [s for s in statements if "messages_fts" in s and " MATCH " in s and "LIMIT" in s]
    assert len(ranked) >= 5, statements
    assert not [s for s in ranked if re.search(r"LIMIT \?", s)], ranked
