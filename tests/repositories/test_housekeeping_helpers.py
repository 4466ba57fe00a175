"""The v23 helpers added last (docs/reference/behaviour.md 2, 4.2, 7.2, 8 and 9): ghost and orphan
clean-up, /skill re-titling helpers, resume conversations, lineage export, conditional
delete and filtered archiving. Real database files, no mocks; one test per rule."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import event, update

from hermes_store import migrate
from hermes_store.compat import SessionDB
from hermes_store.repositories.maintenance import MaintenanceRepository
from hermes_store.repositories.messages import MessageRepository
from hermes_store.repositories.sessions import SESSIONS, SessionRepository
from hermes_store.store import Store

DAY = 86400.0
NOW = time.time()
OLD = NOW - 200 * DAY
SKILL = '[IMPORTANT: The user has invoked the "pdf" skill.]\n...body...'

FIX_ROOT = "20260303_080000_c0ffee"
FIX_CHILD = "20260303_083012_c0ffe2"


class Repos:
    def __init__(self, store: Store) -> None:
        self.store = store
        self.sessions = SessionRepository(store)
        self.messages = MessageRepository(store)
        self.maintenance = MaintenanceRepository(store)

    def make(self, sid: str, *, source: str = "cli", **values: Any) -> str:
        parent = values.pop("parent_session_id", None)
        self.sessions.create_session(sid, source, parent_session_id=parent)
        if values:
            self.put(sid, **values)
        return sid

    def put(self, sid: str, **values: Any) -> None:
        statement = update(SESSIONS).where(SESSIONS.c.id == sid).values(**values)
        self.store.write(lambda s: s.execute(statement))

    def say(self, sid: str, role: str, content: Any, ts: float | None = None) -> None:
        self.messages.append_message(sid, role, content, timestamp=ts)

    def row(self, sid: str) -> dict[str, Any] | None:
        return self.sessions.get_session(sid)


@pytest.fixture
def r(fresh_db: str) -> Iterator[Repos]:
    store = Store(fresh_db)
    yield Repos(store)
    store.close()


@pytest.fixture
def v23(legacy_db: Callable[..., Path], db: Any) -> Iterator[Repos]:
    url = db.url_for(legacy_db(23))
    migrate.upgrade(url, fts_min_pause=0)
    store = Store(url)
    yield Repos(store)
    store.close()


def ended(at: float = OLD, reason: str = "user_exit") -> dict[str, Any]:
    return {"started_at": at, "ended_at": at + 60, "end_reason": reason}


# --------------------------------------------------------------------------- section 2


def test_prune_empty_ghost_sessions_deletes_only_old_ended_untitled_empty_tui_rows(
    r: Repos, tmp_path: Path
) -> None:
    ghost = r.make("ghost", source="tui", **ended())
    r.make("titled", source="tui", title="kept", **ended())
    r.make("open", source="tui", started_at=OLD)
    r.make("recent", source="tui", **ended(NOW - 3600))
    r.make("cli", source="cli", **ended())
    r.make("talked", source="tui", **ended())
    r.say("talked", "user", "hi")
    r.make("child", source="cli", parent_session_id=ghost)
    sessions_dir = tmp_path / "sessions"
    sessions_dir.mkdir()
    (sessions_dir / "ghost.jsonl").write_text("{}")

    assert r.sessions.prune_empty_ghost_sessions(sessions_dir=sessions_dir) == 1
    assert r.row("ghost") is None
    for kept in ("titled", "open", "recent", "cli", "talked"):
        assert r.row(kept) is not None
    assert r.row("child")["parent_session_id"] is None  # type: ignore[index]
    assert not (sessions_dir / "ghost.jsonl").exists()


def test_finalize_orphaned_compression_sessions_ends_stale_unused_continuations(
    r: Repos,
) -> None:
    r.make("root", **ended(reason="compression"))
    r.make("branch_root", **ended(reason="user_exit"))
    specs: dict[str, dict[str, Any]] = {
        "orphan": {"parent_session_id": "root"},
        "called": {"parent_session_id": "root", "api_call_count": 3},
        "recent": {"parent_session_id": "root", "started_at": NOW - DAY},
        "empty": {"parent_session_id": "root", "talk": False},
        "other_parent": {"parent_session_id": "branch_root"},
        "no_parent": {},
    }
    for sid, spec in specs.items():
        talk = spec.pop("talk", True)
        r.make(sid, **{"started_at": NOW - 8 * DAY, **spec})
        if talk:
            r.say(sid, "user", "pending prompt")

    assert r.sessions.finalize_orphaned_compression_sessions() == 1
    orphan = r.row("orphan")
    assert orphan is not None
    assert orphan["end_reason"] == "orphaned_compression"
    assert orphan["ended_at"] == pytest.approx(time.time(), abs=60)
    for sid in ("called", "recent", "empty", "other_parent", "no_parent"):
        assert r.row(sid)["ended_at"] is None  # type: ignore[index]
    assert r.sessions.finalize_orphaned_compression_sessions() == 0  # already ended


# --------------------------------------------------------------------------- section 7.2


def test_list_skill_scaffolded_sessions_lists_titled_skill_first_turns_newest_first(
    r: Repos,
) -> None:
    for i, sid in enumerate(("old_skill", "new_skill")):
        r.make(sid, started_at=OLD + i, title=f"Skill {i}")
        r.say(sid, "user", SKILL + f" {i}", ts=OLD + i)
    r.make("untitled_skill", started_at=OLD + 5)
    r.say("untitled_skill", "user", SKILL)
    r.make("later_skill", started_at=OLD + 6, title="Plain")
    r.say("later_skill", "user", "plain question", ts=OLD + 6)
    r.say("later_skill", "user", SKILL, ts=OLD + 7)

    rows = r.sessions.list_skill_scaffolded_sessions()
    assert rows == [
        {"id": "new_skill", "title": "Skill 1", "content": SKILL + " 1"},
        {"id": "old_skill", "title": "Skill 0", "content": SKILL + " 0"},
    ]
    assert [row["id"] for row in r.sessions.list_skill_scaffolded_sessions(limit=1)] == [
        "new_skill"
    ]


def test_get_first_assistant_text_is_the_earliest_text_reply_or_empty(r: Repos) -> None:
    r.make("s")
    r.say("s", "user", "q", ts=OLD)
    r.say("s", "assistant", "second", ts=OLD + 2)
    r.say("s", "assistant", "first", ts=OLD + 1)
    r.make("structured")
    r.say("structured", "assistant", [{"type": "text", "text": "x"}], ts=OLD)

    assert r.sessions.get_first_assistant_text("s") == "first"
    assert r.sessions.get_first_assistant_text("structured") == ""
    assert r.sessions.get_first_assistant_text("unknown") == ""


# --------------------------------------------------------------------------- section 4.2


def test_get_resume_conversations_splits_model_and_display_history(r: Repos) -> None:
    r.make("root")
    r.say("root", "user", "first question")
    r.say("root", "assistant", "first answer")
    r.say("root", "user", "pending")
    r.put("root", **ended(reason="compression"))
    r.make("tip", parent_session_id="root")
    r.say("tip", "user", "pending")  # replayed across the boundary
    r.say("tip", "user", "and more")  # two user turns in a row

    model, display = r.messages.get_resume_conversations("tip")
    assert [m["content"] for m in model] == ["pending\n\nand more"]
    assert [m["content"] for m in display] == [
        "first question",
        "first answer",
        "pending",
        "and more",
    ]
    assert model == r.messages.get_messages_as_conversation("tip", repair_alternation=True)
    assert display == r.messages.get_messages_as_conversation("tip", include_ancestors=True)


def test_get_resume_conversations_matches_the_conversation_readers_on_v23(v23: Repos) -> None:
    model, display = v23.messages.get_resume_conversations(FIX_CHILD)
    m = v23.messages
    assert model == m.get_messages_as_conversation(FIX_CHILD, repair_alternation=True)
    assert display == m.get_messages_as_conversation(FIX_CHILD, include_ancestors=True)
    assert len(display) > len(model) > 0


def test_get_ancestor_display_prefix_is_the_ancestors_rows_only(r: Repos) -> None:
    r.make("root")
    r.say("root", "user", "q")
    r.say("root", "assistant", "a")
    r.put("root", **ended(reason="compression"))
    r.make("tip", parent_session_id="root")
    r.say("tip", "user", "next")

    prefix = r.messages.get_ancestor_display_prefix("tip")
    assert [(m["role"], m["content"]) for m in prefix] == [("user", "q"), ("assistant", "a")]
    assert r.messages.get_ancestor_display_prefix("root") == []
    assert r.messages.get_ancestor_display_prefix("unknown") == []


def test_get_ancestor_display_prefix_reads_no_row_of_the_session_itself(r: Repos) -> None:
    r.make("root")
    r.say("root", "user", "q")
    r.make("mid", parent_session_id="root")
    r.say("mid", "user", "q2")
    r.make("tip", parent_session_id="mid")
    r.say("tip", "user", "next")
    sent: list[tuple[str, Any]] = []

    def record(conn: Any, cursor: Any, statement: str, parameters: Any, *rest: Any) -> None:
        sent.append((" ".join(statement.split()), parameters))

    event.listen(r.store.engine, "before_cursor_execute", record)
    try:
        assert len(r.messages.get_ancestor_display_prefix("tip")) == 2
        with_parents = list(sent)
        sent.clear()
        assert r.messages.get_ancestor_display_prefix("root") == []
    finally:
        event.remove(r.store.engine, "before_cursor_execute", record)

    def message_reads(statements: list[tuple[str, Any]]) -> list[Any]:
        return [params for text, params in statements if "FROM messages" in text]

    # one read per ancestor, none for the session's own transcript
    assert len(message_reads(with_parents)) == 2
    assert not any("tip" in str(params) for params in message_reads(with_parents))
    assert message_reads(sent) == []


# --------------------------------------------------------------------------- section 8


def test_export_session_lineage_merges_the_compression_chain_on_v23(v23: Repos) -> None:
    exported = v23.maintenance.export_session_lineage(FIX_ROOT)
    assert exported is not None
    assert exported["lineage_session_ids"] == [FIX_ROOT, FIX_CHILD]
    segments = exported["segments"]
    assert [seg["id"] for seg in segments] == [FIX_ROOT, FIX_CHILD]
    assert segments[0] == v23.maintenance.export_session(FIX_ROOT)
    assert exported["id"] == FIX_CHILD
    assert exported["title"] == "Refactor auth-module #2"
    assert exported["messages"] == segments[0]["messages"] + segments[1]["messages"]
    assert exported["message_count"] == len(exported["messages"]) == 18 + 10
    assert v23.maintenance.export_session_lineage(FIX_CHILD) == exported
    assert v23.maintenance.export_session_lineage("unknown") is None


# --------------------------------------------------------------------------- section 9


def test_delete_session_if_empty_requires_untitled_no_messages_no_children(
    r: Repos, tmp_path: Path
) -> None:
    r.make("empty")
    r.make("titled", title="t")
    r.make("talked")
    r.say("talked", "user", "hi")
    r.make("parent")
    r.make("kid", parent_session_id="parent")
    (tmp_path / "empty.json").write_text("{}")

    assert r.maintenance.delete_session_if_empty("empty", sessions_dir=tmp_path) is True
    assert r.row("empty") is None
    assert not (tmp_path / "empty.json").exists()
    for sid in ("titled", "talked", "parent", "unknown", ""):
        assert r.maintenance.delete_session_if_empty(sid) is False
    for sid in ("titled", "talked", "parent"):
        assert r.row(sid) is not None


def test_archive_sessions_archives_prune_candidates_lineage_wide(r: Repos) -> None:
    r.make("old", **ended())
    r.make("root", **ended(reason="compression"))
    r.make("tip", parent_session_id="root", started_at=OLD + 120)  # open: not a candidate
    r.make("recent", **ended(NOW - DAY))
    r.make("open_old", started_at=OLD)
    r.make("already", archived=1, **ended())
    r.make("cron_old", source="cron", **ended())

    assert r.maintenance.archive_sessions(older_than_days=90, source="cli") == 2
    archived = {sid for sid in ("old", "root", "tip") if r.row(sid)["archived"]}  # type: ignore[index]
    assert archived == {"old", "root", "tip"}
    for sid in ("recent", "open_old", "cron_old"):
        assert r.row(sid)["archived"] == 0  # type: ignore[index]
    assert r.maintenance.archive_sessions(older_than_days=90) == 1  # cron_old; not "already"
    assert r.maintenance.archive_sessions() == 1  # recent: no implicit age bound
    with pytest.raises(TypeError):
        r.maintenance.archive_sessions(colour="red")


def test_the_facade_forwards_the_new_methods(fresh_db: str) -> None:
    db = SessionDB(url=fresh_db)
    try:
        db.create_session("s", "cli")
        db.end_session("s", "user_exit")
        assert db.get_resume_conversations("s") == ([], [])
        assert db.get_ancestor_display_prefix("s") == []
        assert db.list_skill_scaffolded_sessions() == []
        assert db.get_first_assistant_text("s") == ""
        assert db.prune_empty_ghost_sessions() == 0
        assert db.finalize_orphaned_compression_sessions() == 0
        assert db.export_session_lineage("s")["lineage_session_ids"] == ["s"]
        assert db.archive_sessions(source="cli") == 1
        assert db.delete_session_if_empty("s") is True
    finally:
        db.close()
