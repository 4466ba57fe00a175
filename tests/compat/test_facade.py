"""The SessionDB facade: a drop-in for the original's public API, on real files."""

from __future__ import annotations

import inspect
import sqlite3
from pathlib import Path

import pytest
from helpers.databases import sqlite_connect

from hermes_store import migrate
from hermes_store.compat import (
    CompressionSessionClosedError,
    SessionDB,
    format_session_db_unavailable,
    get_last_init_error,
)

# Public methods of the original v23 SessionDB that the facade provides, with the
# parameter names (in order) the original declares (docs/reference/behaviour.md).
ORIGINAL_SIGNATURES = {
    "create_session": ["session_id", "source"],
    "end_session": ["session_id", "end_reason"],
    "append_message": [
        "session_id",
        "role",
        "content",
        "tool_name",
        "tool_calls",
        "tool_call_id",
        "token_count",
        "finish_reason",
        "reasoning",
        "reasoning_content",
        "reasoning_details",
        "codex_reasoning_items",
        "codex_message_items",
        "platform_message_id",
        "observed",
        "effect_disposition",
        "timestamp",
        "api_content",
        "display_kind",
        "display_metadata",
        "compression_lock_holder",
    ],
    "get_messages": ["session_id", "include_inactive", "limit", "offset"],
    "search_messages": [
        "query",
        "source_filter",
        "exclude_sources",
        "role_filter",
        "limit",
        "offset",
        "sort",
        "include_inactive",
    ],
    "set_session_title": ["session_id", "title"],
    "update_token_counts": [
        "session_id",
        "input_tokens",
        "output_tokens",
        "model",
        "cache_read_tokens",
        "cache_write_tokens",
        "reasoning_tokens",
        "estimated_cost_usd",
        "actual_cost_usd",
        "cost_status",
        "cost_source",
        "pricing_version",
        "billing_provider",
        "billing_base_url",
        "billing_mode",
        "api_call_count",
        "absolute",
    ],
    "try_acquire_compression_lock": ["session_id", "holder", "ttl_seconds"],
    "save_gateway_routing_entry": ["session_key", "entry_json"],
    "get_meta": ["key"],
    "export_session": ["session_id"],
    "delete_session": ["session_id", "sessions_dir", "expected_delete_ids"],
}


@pytest.mark.parametrize("name", sorted(ORIGINAL_SIGNATURES))
def test_signatures_match_the_original(name: str) -> None:
    params = [p for p in inspect.signature(getattr(SessionDB, name)).parameters if p != "self"]
    expected = ORIGINAL_SIGNATURES[name]
    assert params[: len(expected)] == expected


def test_default_path_is_under_hermes_home(hermes_home: Path) -> None:
    db = SessionDB()
    try:
        assert db.db_path == hermes_home / "state.db"
        assert (hermes_home / "state.db").exists()
    finally:
        db.close()


def test_opening_a_legacy_file_adopts_and_upgrades_it(legacy_db) -> None:  # type: ignore[no-untyped-def]
    path = legacy_db(11)
    db = SessionDB(path)
    try:
        assert migrate.current(path).at_head
        assert db.get_session_title("20260302_140000_7e1e9a") == "Weekend trip — Kyoto 🍁"
        hits = db.search_messages("Kyoto")
        assert {h["session_id"] for h in hits} == {"20260302_140000_7e1e9a"}
        assert len(db.get_messages("20260301_091500_a1b2c3")) == 14
    finally:
        db.close()


def test_round_trip_through_the_facade(tmp_path: Path) -> None:
    db = SessionDB(tmp_path / "state.db")
    try:
        assert db.create_session("s1", "cli", model="m") == "s1"
        first = db.append_message("s1", "user", "please refactor the parser")
        second = db.append_message("s1", "assistant", "done", tool_calls=[{"id": "a"}])
        assert second > first
        row = db.get_session("s1")
        assert row is not None and row["message_count"] == 2 and row["tool_call_count"] == 1
        assert [m["content"] for m in db.get_messages("s1")] == [
            "please refactor the parser",
            "done",
        ]
        db.end_session("s1", "user_exit")
        db.end_session("s1", "other")
        assert db.get_session("s1")["end_reason"] == "user_exit"  # type: ignore[index]
        db.update_token_counts("s1", input_tokens=200, output_tokens=100)
        db.update_token_counts("s1", input_tokens=100, output_tokens=50)
        row = db.get_session("s1")
        assert row is not None and (row["input_tokens"], row["output_tokens"]) == (300, 150)
        db.set_meta("k", "v")
        assert db.get_meta("k") == "v"
        assert db.get_session("missing") is None
        size = db.logical_size_bytes()
        assert size is not None and size % 4096 == 0 and size >= 4096
    finally:
        db.close()


def test_title_errors_keep_the_original_types_and_texts(tmp_path: Path) -> None:
    db = SessionDB(tmp_path / "state.db")
    try:
        db.create_session("a", "cli")
        db.create_session("b", "cli")
        assert db.set_session_title("a", "shared")
        with pytest.raises(ValueError, match="Title 'shared' is already in use by session a"):
            db.set_session_title("b", "shared")
        with pytest.raises(ValueError, match="too long"):
            db.set_session_title("b", "x" * 101)
        assert db.get_session_title("b") is None
    finally:
        db.close()


def test_compression_closed_session_refuses_messages(tmp_path: Path) -> None:
    db = SessionDB(tmp_path / "state.db")
    try:
        db.create_session("p", "cli")
        db.end_session("p", "compression")
        with pytest.raises(RuntimeError) as caught:
            db.append_message("p", "user", "late")
        assert isinstance(caught.value, CompressionSessionClosedError)
        assert "closed by compression" in str(caught.value)
        assert db.get_messages("p") == []
    finally:
        db.close()


def test_read_only_handle_cannot_write_and_changes_nothing(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    SessionDB(path).close()
    before = path.read_bytes()
    db = SessionDB(path, read_only=True)
    try:
        with pytest.raises(Exception, match="readonly|read-only"):
            db.create_session("x", "cli")
        assert db.get_session("x") is None
    finally:
        db.close()
    assert path.read_bytes() == before


def test_a_newer_database_is_refused_and_the_cause_is_kept(legacy_db) -> None:  # type: ignore[no-untyped-def]
    path = legacy_db(23)
    con = sqlite3.connect(path)
    con.execute("UPDATE schema_version SET version = 30")
    con.commit()
    con.close()
    with pytest.raises(Exception, match="30"):
        SessionDB(path)
    assert "SchemaTooNew" in (get_last_init_error() or "")
    assert format_session_db_unavailable().startswith("Session database not available: ")


def test_facade_methods_carry_the_repository_docstrings() -> None:
    from hermes_store.repositories.messages import MessageRepository

    assert SessionDB.append_message.__doc__ == MessageRepository.append_message.__doc__


def test_auto_prune_is_throttled_and_never_raises(tmp_path: Path) -> None:
    db = SessionDB(tmp_path / "state.db")
    try:
        db.create_session("old", "cli")
        db.append_message("old", "user", "ancient history")
        db.end_session("old", "user_exit")
        # through the store's own SQLite library: another library in this process would
        # drop the store's locks when it closed the file
        con = sqlite_connect(tmp_path / "state.db")
        con.execute("UPDATE sessions SET started_at = 1000, ended_at = 1001")
        con.execute("UPDATE messages SET timestamp = 1000")
        con.commit()
        con.close()
        first = db.maybe_auto_prune_and_vacuum(retention_days=90)
        assert first["skipped"] is False and first["pruned"] == 1 and first["vacuumed"] is True
        assert db.get_session("old") is None
        assert db.maybe_auto_prune_and_vacuum()["skipped"] is True
        db.set_meta("last_auto_prune", "not a number")
        assert db.maybe_auto_prune_and_vacuum()["skipped"] is False
        assert db.optimize_fts() == 2
        assert db.search_messages("ancient") == []
    finally:
        db.close()


def test_workspace_key() -> None:
    from hermes_store.compat import workspace_key

    assert workspace_key({"git_repo_root": "/r", "cwd": "/r/x"}) == "/r"
    assert workspace_key({"git_repo_root": "", "cwd": "/c"}) == "/c"
    assert workspace_key({"git_repo_root": None, "cwd": ""}) is None


def test_unknown_session_raises_the_originals_integrity_error(tmp_path: Path) -> None:
    db = SessionDB(tmp_path / "state.db")
    try:
        with pytest.raises(sqlite3.IntegrityError):
            db.append_message("nobody", "user", "hi")
        assert db.message_count() == 0
    finally:
        db.close()


def test_telegram_topic_methods_through_the_facade(tmp_path: Path) -> None:
    db = SessionDB(tmp_path / "state.db")
    try:
        assert db.is_telegram_topic_mode_enabled("c1") is False  # tables not created yet
        db.create_session("t1", "telegram", user_id="u1")
        db.bind_telegram_topic(
            chat_id="c1", thread_id="7", user_id="u1", session_key="k", session_id="t1"
        )
        assert db.is_telegram_session_linked_to_topic("t1")
        with pytest.raises(ValueError, match="already linked to another Telegram topic"):
            db.bind_telegram_topic(
                chat_id="c1", thread_id="8", user_id="u1", session_key="k", session_id="t1"
            )
    finally:
        db.close()


def test_async_wrapper_and_rebuild_step(legacy_db) -> None:  # type: ignore[no-untyped-def]
    import asyncio

    from hermes_store.compat import AsyncSessionDB

    path = legacy_db(22)
    db = SessionDB(path)  # a legacy index: converted, backfill deferred
    try:
        status = db.fts_rebuild_status()
        assert status is not None and status["pending"] and status["indexed"] == 0
        assert db.fts_rebuild_step() is None  # 64 ids: one chunk finishes it

        async def main() -> list[dict[str, object]]:
            adb = AsyncSessionDB(db)
            assert adb.read_only is False
            return await adb.search_messages("Kyoto")  # type: ignore[no-any-return]

        hits = asyncio.run(main())
        assert {h["session_id"] for h in hits} == {"20260302_140000_7e1e9a"}
    finally:
        db.close()
