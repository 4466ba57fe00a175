"""Opening and closing a Store: a database that is not at head (or not there) is refused
with NotAtHead and nothing is left behind; a closed store refuses every operation."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from hermes_store import migrate
from hermes_store.errors import NotADatabaseFile, NotAtHead, SchemaBehind, StoreClosed
from hermes_store.repositories.messages import MessageRepository
from hermes_store.repositories.search import SearchRepository
from hermes_store.repositories.sessions import SessionRepository
from hermes_store.store import Store


def test_missing_file_is_refused_and_nothing_is_created(tmp_path: Path) -> None:
    target = tmp_path / "nope" / "typo.db"
    with pytest.raises(NotAtHead, match="hermes-store upgrade --url") as info:
        Store(str(target))
    assert str(target) in str(info.value)
    assert not target.exists()
    assert not target.parent.exists()


def test_empty_file_is_refused_and_left_empty(tmp_path: Path) -> None:
    folder = tmp_path / "data"
    folder.mkdir()
    target = folder / "empty.db"
    target.touch()
    with pytest.raises(NotAtHead):
        Store(str(target))
    assert target.stat().st_size == 0
    assert sorted(p.name for p in folder.iterdir()) == ["empty.db"]


def test_directory_is_refused_by_name(tmp_path: Path) -> None:
    with pytest.raises(NotADatabaseFile, match="is a directory"):
        Store(str(tmp_path))


@pytest.mark.parametrize("read_only", [False, True])
def test_legacy_file_before_its_upgrade_is_refused_untouched(legacy_db, read_only: bool) -> None:  # type: ignore[no-untyped-def]
    db = legacy_db(22)
    before = db.read_bytes()
    with pytest.raises(SchemaBehind, match="older than this hermes-store.*hermes-store upgrade"):
        Store(str(db), read_only=read_only)
    assert db.read_bytes() == before
    migrate.upgrade(str(db), fts_min_pause=0)
    with Store(str(db), read_only=read_only) as store:
        assert SessionRepository(store).session_count(include_archived=True) > 0


def test_postgresql_database_without_schema_is_refused(pg_url: str) -> None:
    with pytest.raises(NotAtHead, match="no hermes-store database.*hermes-store upgrade"):
        Store(pg_url)


def test_closed_store_refuses_every_operation(backend_url: str) -> None:
    store = Store(backend_url)
    sessions, messages = SessionRepository(store), MessageRepository(store)
    sessions.create_session("s1", "cli")
    messages.append_message("s1", "user", "before close")
    store.close()
    with pytest.raises(StoreClosed):
        messages.append_message("s1", "user", "after close")
    with pytest.raises(StoreClosed):
        sessions.get_session("s1")
    with pytest.raises(StoreClosed):
        SearchRepository(store).search_messages("close")
    store.close()  # idempotent
    with Store(backend_url) as again:
        assert [m["content"] for m in MessageRepository(again).get_messages("s1")] == [
            "before close"
        ]


def test_search_repository_finds_by_query_alone(backend_url: str) -> None:
    with Store(backend_url) as store:
        SessionRepository(store).create_session("trip", "telegram")
        MessageRepository(store).append_message("trip", "user", "flights to Kyoto in April")
        hits = SearchRepository(store).search_messages("kyoto")
        assert [h["session_id"] for h in hits] == ["trip"]
        assert ">>>Kyoto<<<" in hits[0]["snippet"]


def test_upgrade_then_open_on_sqlite_sees_head(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    migrate.upgrade(str(path), fts_min_pause=0)
    with Store(str(path)):
        pass
    version = sqlite3.connect(path).execute("SELECT version FROM schema_version").fetchone()
    assert version == (23,)
