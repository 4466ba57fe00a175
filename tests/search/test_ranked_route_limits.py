"""The SQLite ranked routes (the word index, the trigram index) send a first page's
LIMITs written into the statement: SQLite takes several times as long over a statement
holding a bound LIMIT, which a search that finds nothing pays four times. A later page
binds its size, so paging does not build a statement per offset. Their results stay
those of the page asked for. A real file, no mocks."""

from __future__ import annotations

import re
from typing import Any

from sqlalchemy import event

from hermes_store.repositories.messages import MessageRepository
from hermes_store.repositories.search import SearchRepository
from hermes_store.repositories.sessions import SessionRepository
from hermes_store.store import Store


def test_first_pages_send_no_bound_limit_and_later_pages_share_one_statement(
    sqlite_store: Store,
) -> None:
    SessionRepository(sqlite_store).create_session("s", "cli")
    messages = MessageRepository(sqlite_store)
    ids = [messages.append_message("s", "user", f"deploy number {n}") for n in range(8)]
    search = SearchRepository(sqlite_store)
    statements: list[str] = []

    def record(conn: Any, cursor: Any, statement: str, *rest: Any) -> None:
        statements.append(" ".join(statement.split()))

    def ranked_sent(run: Any) -> tuple[Any, list[str]]:
        statements.clear()
        event.listen(sqlite_store.engine, "before_cursor_execute", record)
        try:
            answer = run()
        finally:
            event.remove(sqlite_store.engine, "before_cursor_execute", record)
        return answer, [
            s for s in statements if "messages_fts" in s and " MATCH " in s and "LIMIT" in s
        ]

    # a search that finds nothing, the first page, the newest: sizes written in
    none, first_sent = ranked_sent(lambda: list(search.search_messages("zqxjv")))
    first, page_sent = ranked_sent(lambda: search.search_messages("deploy", limit=2))
    newest, newest_sent = ranked_sent(
        lambda: search.search_messages("deploy", sort="newest", limit=3)
    )
    assert none == [] and len(first) == 2
    assert [hit["id"] for hit in newest] == ids[::-1][:3]
    written = first_sent + page_sent + newest_sent
    assert len(written) >= 4, written
    assert not [s for s in written if re.search(r"LIMIT \?", s)], written
    # later pages: one statement whatever the offset (the page size bound)
    second, second_sent = ranked_sent(lambda: search.search_messages("deploy", limit=2, offset=2))
    third, third_sent = ranked_sent(lambda: search.search_messages("deploy", limit=2, offset=4))
    assert second_sent and second_sent == third_sent
    found = [hit["id"] for hit in (*first, *second, *third)]
    assert len(set(found)) == 6 and set(found) <= set(ids)
