"""Rewinding, restoring, clearing and setting the API content of the newest user row
run statements built once: a repeat call on other rows builds and compiles nothing, and
setting the API content is one UPDATE that finds the row and compares its content, as
the original's is. Real databases (SQLite, then PostgreSQL), no mocks; SQLAlchemy's
constructors are only counted."""

from __future__ import annotations

from typing import Any

import pytest
from helpers.statements import built, sent
from sqlalchemy.sql import compiler
from sqlalchemy.sql.dml import Delete, Update
from sqlalchemy.sql.selectable import Select

from hermes_store.repositories.messages import MessageRepository
from hermes_store.repositories.sessions import SessionRepository
from hermes_store.store import Store

#: What an edit's statements are built from: its SELECTs, UPDATEs, DELETEs and their compilers.
EDITS = (compiler.SQLCompiler, Select, Update, Delete)




def _session(store: Store, sid: str) -> list[int]:
    SessionRepository(store).create_session(sid, "cli")
    repo = MessageRepository(store)
    return [
        repo.append_message(sid, role, content)
        for role, content in [("user", "q1"), ("assistant", "a1"), ("user", "q2"), ("tool", "t")]
    ]


def test_rewind_restore_clear_and_api_content_build_and_compile_once(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    repo = MessageRepository(store)
    first, second = _session(store, "a"), _session(store, "b")

    def calls(sid: str, ids: list[int]) -> tuple[Any, ...]:
        rewound = repo.rewind_to_message(sid, ids[2])
        return (
            rewound["rewound_count"],
            rewound["new_head_id"] == ids[1],
            rewound["target_message"]["content"],
            repo.restore_rewound(sid, ids[2]),
            repo.set_latest_user_api_content(sid, "q2", "sent q2"),
            repo.set_latest_user_api_content(sid, "q1", "not the newest"),
            repo.clear_messages(sid),
        )

    assert calls("a", first) == (2, True, "q2", 2, 1, 0, None)
    with built(monkeypatch, EDITS) as names:
        again = calls("b", second)
    assert names == []
    assert again == (2, True, "q2", 2, 1, 0, None)
    assert repo.message_count("a") == repo.message_count("b") == 0


def test_setting_the_api_content_is_one_statement(store: Store) -> None:
    repo = MessageRepository(store)
    ids = _session(store, "a")
    with sent(store) as statements:
        assert repo.set_latest_user_api_content("a", "q2", "sent") == 1
        assert repo.set_latest_user_api_content("a", "q1", "sent") == 0  # not the newest
        assert repo.set_latest_user_api_content("missing", "q2", "sent") == 0
    # (PostgreSQL's writes also ask for their transaction's id, for the commit-outcome check)
    assert len([s for s in statements if "messages" in s]) == 3, statements
    rows = {m["id"]: m.get("api_content") for m in repo.get_messages("a")}
    assert rows[ids[2]] == "sent" and rows[ids[0]] is None
    # list content is compared as it is stored (JSON text)
    parts = [{"type": "text", "text": "q3"}]
    newest = repo.append_message("a", "user", parts)
    assert repo.set_latest_user_api_content("a", parts, "sent parts") == 1
    assert repo.set_latest_user_api_content("a", [{"type": "text", "text": "q4"}], "x") == 0
    assert {m["id"]: m.get("api_content") for m in repo.get_messages("a")}[newest] == "sent parts"
