"""Session tags (issue 39 item 2): set, removed and listed through the repositories and
AsyncStore; `list_sessions_rich(tags=)` and `search_messages(tags=)` filter by them;
they go with a deleted session, and survive export/import, the trash and a copy to
PostgreSQL. Bad input gets a typed error."""

from __future__ import annotations

import asyncio
import io
import json

import pytest
from helpers.raw_sql import RawConnection

from hermes_store import AsyncStore
from hermes_store.errors import InvalidInput, SessionNotFound
from hermes_store.migration import copy as hcopy
from hermes_store.repositories.maintenance import ImportSource, MaintenanceRepository
from hermes_store.repositories.messages import MessageRepository
from hermes_store.repositories.search import SearchRepository
from hermes_store.repositories.sessions import SessionRepository
from hermes_store.repositories.tags import TagRepository
from hermes_store.repositories.trash import TrashRepository
from hermes_store.store import Store


def _tag_rows(url: str) -> list[tuple[str, str]]:
    con = RawConnection(url)
    try:
        rows = con.execute("SELECT session_id, tag FROM hermes_store_session_tags")
        return sorted((str(r[0]), str(r[1])) for r in rows)
    finally:
        con.close()


def test_add_remove_set_and_list(backend_url: str) -> None:
    with Store(backend_url) as store:
        SessionRepository(store).create_session("a", "cli")
        SessionRepository(store).create_session("b", "cli")
        tags = TagRepository(store)
        assert tags.get_tags("a") == []
        assert tags.add_tags("a", ["work", " urgent ", "work", "Ünïcode 標籤"]) == [
            "urgent",
            "work",
            "Ünïcode 標籤",
        ]
        assert tags.add_tags("a", ["work"]) == ["urgent", "work", "Ünïcode 標籤"]
        assert tags.remove_tags("a", ["urgent", "absent"]) == ["work", "Ünïcode 標籤"]
        assert tags.set_tags("b", ["work", "home"]) == ["home", "work"]
        assert tags.list_tags() == [("home", 1), ("work", 2), ("Ünïcode 標籤", 1)]
        assert tags.sessions_with_tag("work") == ["a", "b"]
        assert tags.set_tags("b", []) == []
        assert _tag_rows(backend_url) == [("a", "work"), ("a", "Ünïcode 標籤")]


def test_bad_input_is_refused_with_typed_errors(backend_url: str) -> None:
    with Store(backend_url) as store:
        SessionRepository(store).create_session("a", "cli")
        tags = TagRepository(store)
        for bad in ("", "   ", "x" * 101, "nul\x00byte", "new\nline", "\ud800", 7):
            with pytest.raises(InvalidInput):
                tags.add_tags("a", [bad])  # type: ignore[list-item]
        with pytest.raises(InvalidInput):
            tags.add_tags("a", "work")  # a lone string, not a list
        with pytest.raises(SessionNotFound):
            tags.add_tags("missing", ["work"])
        with pytest.raises(SessionNotFound):
            tags.get_tags("missing")
        with pytest.raises(InvalidInput):
            SessionRepository(store).list_sessions_rich(tags=[""])
        with pytest.raises(InvalidInput):
            SearchRepository(store).search_messages("x", tags=["a\x00"])
        # a lone string would be read as its characters (w, o, r, k) and find nothing
        with pytest.raises(InvalidInput, match="list of strings"):
            SessionRepository(store).list_sessions_rich(tags="work")  # type: ignore[arg-type]
        with pytest.raises(InvalidInput, match="list of strings"):
            SearchRepository(store).search_messages("x", tags="work")  # type: ignore[arg-type]
        assert tags.add_tags("a", ["x" * 100]) == ["x" * 100]
        assert _tag_rows(backend_url) == [("a", "x" * 100)]


def test_listing_and_search_filter_by_every_tag_given(backend_url: str) -> None:
    with Store(backend_url) as store:
        sessions, messages, tags = (
            SessionRepository(store),
            MessageRepository(store),
            TagRepository(store),
        )
        for sid in ("a", "b", "c"):
            sessions.create_session(sid, "cli")
            messages.append_message(sid, "user", f"walrus in {sid}")
        tags.add_tags("a", ["work", "urgent"])
        tags.add_tags("b", ["work"])
        listed = lambda *t: {r["id"] for r in sessions.list_sessions_rich(tags=list(t))}  # noqa: E731
        assert listed("work") == {"a", "b"}
        assert listed("work", "urgent") == {"a"}
        assert listed("nothing") == set()
        assert {r["id"] for r in sessions.list_sessions_rich()} == {"a", "b", "c"}
        search = SearchRepository(store)
        found = lambda *t: {h["session_id"] for h in search.search_messages("walrus", tags=list(t))}  # noqa: E731
        assert found("work") == {"a", "b"}
        assert found("work", "urgent") == {"a"}
        assert found("nothing") == set()
        literal = {h["session_id"] for h in search.search_messages("alrus", tags=["urgent"])}
        assert literal == {"a"}


def test_tags_go_with_a_deleted_session_and_survive_the_trash(backend_url: str) -> None:
    with Store(backend_url) as store:
        SessionRepository(store).create_session("a", "cli")
        SessionRepository(store).create_session("b", "cli")
        TagRepository(store).add_tags("a", ["keep"])
        TagRepository(store).add_tags("b", ["gone"])
        assert MaintenanceRepository(store).delete_session("b")
        assert _tag_rows(backend_url) == [("a", "keep")]
        TrashRepository(store).trash_session("a")
        assert _tag_rows(backend_url) == []
        TrashRepository(store).restore_session("a")
        assert TagRepository(store).get_tags("a") == ["keep"]


def test_tags_survive_export_and_import(backend_url: str, fresh_db: str) -> None:
    with Store(backend_url) as store:
        SessionRepository(store).create_session("a", "cli")
        SessionRepository(store).create_session("plain", "cli")
        MessageRepository(store).append_message("a", "user", "hi")
        TagRepository(store).add_tags("a", ["work", "z"])
        repo = MaintenanceRepository(store)
        exported = repo.export_session("a")
        assert exported is not None and exported["tags"] == ["work", "z"]
        plain = repo.export_session("plain")
        assert plain is not None and "tags" not in plain  # the original's shape, untouched
        lines = [json.dumps(e) for e in repo.export_all()]
    target = fresh_db if backend_url.startswith("postgresql") else fresh_db + "-other"
    if target.endswith("-other"):
        from hermes_store import migrate

        migrate.upgrade(target)
    with Store(target) as store:
        source = ImportSource.from_file(io.BytesIO("\n".join(lines).encode()), "export.jsonl")
        report = MaintenanceRepository(store).import_each(source)
        assert report.ok and report.imported == 2
        assert TagRepository(store).get_tags("a") == ["work", "z"]
        assert TagRepository(store).get_tags("plain") == []
        bad = ImportSource.from_file(
            io.BytesIO(json.dumps({"id": "t", "source": "cli", "tags": [""]}).encode()), "b.json"
        )
        refused = MaintenanceRepository(store).import_each(bad)
        assert not refused.ok and "tags" in refused.errors[0]["error"]


def test_tags_and_the_trash_survive_a_copy_to_postgresql(fresh_db: str, pg_url: str) -> None:
    with Store(fresh_db) as store:
        SessionRepository(store).create_session("a", "cli")
        SessionRepository(store).create_session("gone", "cli")
        MessageRepository(store).append_message("gone", "user", "in the bin")
        TagRepository(store).add_tags("a", ["work", "home"])
        TagRepository(store).add_tags("gone", ["bin"])
        TrashRepository(store).trash_session("gone")
    report = hcopy.copy_database(fresh_db, pg_url)
    assert report.ok
    with Store(pg_url) as store:
        assert TagRepository(store).get_tags("a") == ["home", "work"]
        assert [e.session_id for e in TrashRepository(store).list_trash()] == ["gone"]
        TrashRepository(store).restore_session("gone")
        assert TagRepository(store).get_tags("gone") == ["bin"]
        assert MessageRepository(store).message_count("gone") == 1


def test_async_store_tags(backend_url: str) -> None:
    async def main() -> None:
        async with await AsyncStore.open(backend_url) as store:
            await store.sessions.create_session("s", "cli")
            assert await store.tags.add_tags("s", ["b", "a"]) == ["a", "b"]
            assert await store.tags.remove_tags("s", ["a"]) == ["b"]
            assert await store.tags.sessions_with_tag("b") == ["s"]
            rows = await store.sessions.list_sessions_rich(tags=["b"])
            assert [r["id"] for r in rows] == ["s"]

    asyncio.run(main())


def test_a_database_never_upgraded_says_so(legacy_db) -> None:  # type: ignore[no-untyped-def]
    """A `state.db` only the original wrote, opened read-only: a tag filter, the tags and
    the trash are refused naming the upgrade, and exports keep working without tags."""
    from hermes_store.errors import SchemaBehind

    path = legacy_db(23)
    with Store(str(path), read_only=True) as store:
        first = SessionRepository(store).list_sessions_rich(limit=1)[0]["id"]
        with pytest.raises(SchemaBehind, match="hermes-store upgrade") as behind:
            SessionRepository(store).list_sessions_rich(tags=["x"])
        assert str(path) in str(behind.value)
        with pytest.raises(SchemaBehind):
            SearchRepository(store).search_messages("hello", tags=["x"])
        with pytest.raises(SchemaBehind):
            TagRepository(store).get_tags(first)
        with pytest.raises(SchemaBehind):
            TrashRepository(store).list_trash()
        exported = MaintenanceRepository(store).export_session(first)
        assert exported is not None and "tags" not in exported
