"""Adopting databases the original Hermes code wrote, at every stored schema version,
plus the odd shapes real files have (docs/reference/history.md sections 2, 3 and 5)."""

from __future__ import annotations

import json
import os
import sqlite3
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from hermes_store import migrate
from hermes_store.errors import DatabaseNotWritable, SchemaTooNew
from hermes_store.runtime.engine import wal_reset_vulnerable

A = "20260301_091500_a1b2c3"  # cli, Chinese text, titled 数据库迁移 plan (v4+)
B = "20260302_140000_7e1e9a"  # telegram, Kyoto
C = "20260303_080000_c0ffee"  # compression parent
C2 = "20260303_083012_c0ffe2"  # compression child
D = "20260304_020000_c7a01d"  # cron, untitled
SESSIONS = {A, B, C, C2, D}
QUERIES = ("refactor", "迁移", "Kyoto")


def delegate_tags(con: sqlite3.Connection) -> dict[str, str]:
    return {
        sid: tag
        for sid, tag in con.execute(
            "SELECT id, json_extract(model_config, '$._delegate_from') FROM sessions "
            "WHERE json_valid(COALESCE(model_config, '{}')) "
            "AND json_extract(model_config, '$._delegate_from') IS NOT NULL"
        )
    }


@dataclass
class Adopted:
    version: int
    path: Path
    url: str
    expected: dict[str, Any]
    status_before: migrate.Status
    report: migrate.UpgradeReport
    model_config_before: dict[str, str | None]
    tags_before: dict[str, str]


@pytest.fixture
def adopted(fixture_version, legacy_db, legacy_json, db) -> Adopted:
    path = legacy_db(fixture_version)
    url = db.url_for(path)
    expected = legacy_json(fixture_version)
    con = db.raw(path)
    try:
        model_config = dict(con.execute("SELECT id, model_config FROM sessions"))
        tags = delegate_tags(con)
    finally:
        con.close()
    status = migrate.current(url)
    report = migrate.upgrade(url, fts_min_pause=0)
    return Adopted(fixture_version, path, url, expected, status, report, model_config, tags)


# ------------------------------------------------------------------ every fixture


def test_status_before_adoption(fixture_version, legacy_db, db):
    path = legacy_db(fixture_version)
    before = db.sha256_file(path)
    status = migrate.current(db.url_for(path))
    assert status.kind == "legacy"
    assert status.alembic_revision is None
    assert status.schema_version == fixture_version
    assert status.stamp_revision is not None
    assert 1 <= status.stamp_revision <= fixture_version
    assert not status.at_head
    assert db.sha256_file(path) == before, "migrate.current must not change the file"


def test_upgrade_reaches_head_and_checks_clean(adopted):
    assert adopted.status_before.kind == "legacy"
    assert adopted.report.adopted_from == adopted.version
    assert adopted.report.after == migrate.HEAD
    status = migrate.current(adopted.url)
    assert status.kind == "managed"
    assert status.at_head
    assert status.schema_version == 23
    assert status.fts is not None
    assert status.fts.layout == "v23"
    assert status.fts.storage_version == "1"
    assert not status.fts.backfill_pending
    report = migrate.check(adopted.url)
    assert report.quick_check == ["ok"]
    assert report.fts_errors == []
    assert report.schema_drift == []
    assert report.ok


def test_state_after_adoption(adopted, db):
    con = db.raw(adopted.path)
    try:
        assert con.execute("SELECT version FROM schema_version").fetchall() == [(23,)]
        meta = dict(con.execute("SELECT key, value FROM state_meta"))
        assert meta.get("fts_storage_version") == "1"
        for key in ("fts_rebuild_high_water", "fts_rebuild_progress", "fts_optimize_available"):
            assert key not in meta
    finally:
        con.close()


def test_contents_unchanged(adopted, db):
    counts = adopted.expected["counts"]
    con = db.raw(adopted.path)
    try:
        assert con.execute("SELECT COUNT(*) FROM sessions").fetchone()[0] == counts["sessions"]
        assert con.execute("SELECT COUNT(*) FROM messages").fetchone()[0] == counts["messages"]
        assert sorted(
            t for (t,) in con.execute("SELECT title FROM sessions WHERE title IS NOT NULL")
        ) == sorted(counts["titles"])
        assert (
            con.execute("SELECT COUNT(*) FROM messages WHERE tool_calls IS NOT NULL").fetchone()[0]
            == counts["messages_with_tool_calls"]
        )
        assert (
            con.execute("SELECT COUNT(*) FROM messages WHERE role = 'tool'").fetchone()[0]
            == counts["tool_messages"]
        )
        rows = {
            r[0]: r
            for r in con.execute(
                "SELECT id, title, source, parent_session_id, end_reason, input_tokens, "
                "output_tokens, message_count, tool_call_count FROM sessions"
            )
        }
        assert set(rows) == set(counts["per_session"])
        for sid, want in counts["per_session"].items():
            _, title, source, parent, end_reason, tin, tout, mcount, tcount = rows[sid]
            got_messages = con.execute(
                "SELECT COUNT(*) FROM messages WHERE session_id = ?", (sid,)
            ).fetchone()[0]
            roles = dict(
                con.execute(
                    "SELECT role, COUNT(*) FROM messages WHERE session_id = ? GROUP BY role",
                    (sid,),
                )
            )
            assert got_messages == want["messages"], sid
            assert roles == want["roles"], sid
            assert db.role_content_sha256(con, sid) == want["role_content_sha256"], sid
            assert title == want["title"], sid
            assert source == want["source"], sid
            assert parent == want["parent_session_id"], sid
            assert end_reason == want["end_reason"], sid
            assert tin == want["input_tokens"], sid
            assert tout == want["output_tokens"], sid
            assert mcount == want["message_count_column"], sid
            assert tcount == want["tool_call_count_column"], sid
        ids = [i for (i,) in con.execute("SELECT id FROM messages ORDER BY id")]
        assert ids == list(range(1, counts["messages"] + 1))
        assert con.execute("SELECT COUNT(*) FROM messages WHERE active IS NULL").fetchone() == (0,)
    finally:
        con.close()


def test_delegate_tagging(adopted, db):
    con = db.raw(adopted.path)
    try:
        tags = delegate_tags(con)
        after = dict(con.execute("SELECT id, model_config FROM sessions"))
    finally:
        con.close()
    if adopted.version in (1, 2):
        expected = {A: "__orphaned__", B: "__orphaned__", D: "__orphaned__"}
    elif adopted.version <= 15:
        expected = {D: "__orphaned__"}
    else:  # the v16 block does not run on a v16+ file
        expected = adopted.tags_before
    assert tags == expected
    assert C2 not in tags, "the compression child must not be tagged"
    for sid, before in adopted.model_config_before.items():
        if sid in expected and sid not in adopted.tags_before:
            assert json.loads(after[sid]) == {
                **json.loads(before or "{}"),
                "_delegate_from": expected[sid],
            }, sid
        else:
            assert after[sid] == before, f"{sid}: model_config changed"


def test_usage_seeding(adopted, db):
    con = db.raw(adopted.path)
    try:
        rows = con.execute(
            "SELECT u.session_id, u.task, u.input_tokens, u.output_tokens, "
            "s.input_tokens, s.output_tokens, u.model, COALESCE(s.model, 'unknown') "
            "FROM session_model_usage u JOIN sessions s ON s.id = u.session_id"
        ).fetchall()
    finally:
        con.close()
    if adopted.version >= 20:
        assert rows, "the original wrote usage rows from v20 on"
        return
    assert len(rows) == 5
    assert {r[0] for r in rows} == SESSIONS
    for sid, task, u_in, u_out, s_in, s_out, model, s_model in rows:
        assert task == "", sid
        assert (u_in, u_out) == (s_in, s_out), sid
        assert model == s_model, sid


def _session_ids(hits: list[Any]) -> list[str]:
    ids = set()
    for hit in hits:
        ids.add(hit["session_id"] if isinstance(hit, dict) else hit.session_id)
    return sorted(ids)


def test_search_api_finds_known_words(adopted, db):
    search = pytest.importorskip("hermes_store.search")
    if not hasattr(search, "search_messages"):
        pytest.skip("hermes_store.search.search_messages is not written yet")
    expected = adopted.expected["search_messages_via_original_api"]
    engine = db.plain_engine(adopted.url)
    try:
        with engine.connect() as conn:
            for query in QUERIES:
                got = _session_ids(search.search_messages(conn, query, limit=50))
                assert got == sorted(expected[query]), query
    finally:
        engine.dispose()


def test_fts_index_finds_known_words(adopted, db):
    """The same probes answered straight from the FTS5 tables (independent of the search
    module): the word index for Latin words, the trigram index for a 3-character CJK
    word, and, as the original does for 2 CJK characters, a LIKE scan."""
    expected = adopted.expected["search_messages_via_original_api"]
    con = db.raw(adopted.path)
    try:

        def fts(table: str, match: str) -> list[str]:
            return sorted(
                {
                    s
                    for (s,) in con.execute(
                        f"SELECT m.session_id FROM {table} JOIN messages m "  # noqa: S608
                        f"ON m.id = {table}.rowid WHERE {table} MATCH ?",
                        (match,),
                    )
                }
            )

        assert fts("messages_fts", "refactor") == sorted(expected["refactor"])
        assert fts("messages_fts", "Kyoto") == sorted(expected["Kyoto"])
        assert fts("messages_fts_trigram", '"数据库"') == [A]
        assert sorted(
            {
                s
                for (s,) in con.execute(
                    "SELECT session_id FROM messages WHERE content LIKE '%迁移%'"
                )
            }
        ) == sorted(expected["迁移"])
        # tool rows are in the word index but never in the trigram index
        tool_ids = {i for (i,) in con.execute("SELECT id FROM messages WHERE role = 'tool'")}
        trigram_ids = {i for (i,) in con.execute("SELECT rowid FROM messages_fts_trigram_docsize")}
        word_ids = {i for (i,) in con.execute("SELECT rowid FROM messages_fts_docsize")}
        all_ids = {i for (i,) in con.execute("SELECT id FROM messages")}
        assert word_ids == all_ids
        assert trigram_ids == all_ids - tool_ids
    finally:
        con.close()


def test_upgrade_twice_changes_nothing(fixture_version, legacy_db, db):
    path = legacy_db(fixture_version)
    url = db.url_for(path)
    migrate.upgrade(url, fts_min_pause=0)
    schema, rows = db.snapshot(path), db.dump(path)
    report = migrate.upgrade(url, fts_min_pause=0)
    assert report.before == migrate.HEAD and report.after == migrate.HEAD
    assert db.snapshot(path) == schema
    after = db.dump(path)
    assert after.keys() == rows.keys()
    for table in rows:
        assert after[table] == rows[table], f"table {table} changed on the second upgrade"


# ------------------------------------------------------------------ odd shapes


@pytest.mark.parametrize("version", [1, 11, 22])
def test_unknown_table_and_column_survive(version, legacy_db, db):
    path = legacy_db(version)
    con = db.raw(path)
    try:
        con.execute("CREATE TABLE my_plugin(x)")
        con.execute("INSERT INTO my_plugin VALUES ('keep me')")
        con.execute("ALTER TABLE sessions ADD COLUMN icon TEXT")
        con.execute("UPDATE sessions SET icon = '🐙' WHERE id = ?", (A,))
    finally:
        con.close()
    migrate.upgrade(db.url_for(path), fts_min_pause=0)
    assert migrate.current(db.url_for(path)).at_head
    con = db.raw(path)
    try:
        assert con.execute("SELECT x FROM my_plugin").fetchall() == [("keep me",)]
        assert dict(con.execute("SELECT id, icon FROM sessions")) == {
            A: "🐙",
            B: None,
            C: None,
            C2: None,
            D: None,
        }
    finally:
        con.close()


def test_check_tolerates_transient_extra_column(legacy_db, db):
    path = legacy_db(22)
    con = db.raw(path)
    try:
        con.execute("ALTER TABLE sessions ADD COLUMN icon TEXT")
    finally:
        con.close()
    migrate.upgrade(db.url_for(path), fts_min_pause=0)
    report = migrate.check(db.url_for(path))
    assert report.ok, report.schema_drift


def _set_version(con: sqlite3.Connection, version: int) -> None:
    con.execute("UPDATE schema_version SET version = ?", (version,))


def test_schema_too_new_is_refused_untouched(legacy_db, db):
    path = legacy_db(23)
    con = db.raw(path)
    try:
        _set_version(con, 24)
    finally:
        con.close()
    before = db.sha256_file(path)
    with pytest.raises(SchemaTooNew) as info:
        migrate.upgrade(db.url_for(path), fts_min_pause=0)
    message = str(info.value)
    assert "24" in message and "23" in message
    assert info.value.found == 24 and info.value.supported == 23
    assert db.sha256_file(path) == before
    con = db.raw(path)
    try:
        assert con.execute("SELECT version FROM schema_version").fetchall() == [(24,)]
        assert "hermes_store_version" not in {
            n for (n,) in con.execute("SELECT name FROM sqlite_master")
        }
    finally:
        con.close()


def test_schema_too_new_leaves_no_wal_file(legacy_db, db):
    path = legacy_db(23)
    con = db.raw(path)
    try:
        _set_version(con, 24)
    finally:
        con.close()
    assert not Path(str(path) + "-wal").exists()
    with pytest.raises(SchemaTooNew):
        migrate.upgrade(db.url_for(path), fts_min_pause=0)
    leftovers = sorted(p.name for p in path.parent.iterdir() if p.name.startswith(path.name))
    assert leftovers == [path.name]


def _delete_mode_copy(legacy_db, db, version: int = 22) -> Path:
    path = legacy_db(version)
    con = db.raw(path)
    try:
        assert con.execute("PRAGMA journal_mode=DELETE").fetchone() == ("delete",)
    finally:
        con.close()
    return path


def test_delete_mode_copy_upgrades(legacy_db, legacy_json, db):
    path = _delete_mode_copy(legacy_db, db)
    migrate.upgrade(db.url_for(path), fts_min_pause=0)
    assert migrate.check(db.url_for(path)).ok
    con = db.raw(path)
    try:
        mode = con.execute("PRAGMA journal_mode").fetchone()[0]
        assert con.execute("SELECT COUNT(*) FROM messages").fetchone()[0] == 64
    finally:
        con.close()
    assert mode == ("delete" if wal_reset_vulnerable() else "wal")
    assert not Path(str(path) + "-journal").exists()


@pytest.mark.skipif(
    hasattr(os, "geteuid") and os.geteuid() == 0,
    reason="running as root: file modes do not stop root from writing",
)
def test_read_only_file_is_refused(legacy_db, db):
    path = _delete_mode_copy(legacy_db, db)
    os.chmod(path, 0o444)
    before = db.sha256_file(path)
    with pytest.raises(DatabaseNotWritable) as info:
        migrate.upgrade(db.url_for(path), fts_min_pause=0)
    assert str(path) in str(info.value)
    assert db.sha256_file(path) == before


def test_unwritable_location_is_refused(tmp_path, db):
    """Works as root too: a path below a regular file can never be created."""
    blocker = tmp_path / "not_a_directory"
    blocker.write_text("x")
    target = blocker / "state.db"
    with pytest.raises(DatabaseNotWritable) as info:
        migrate.upgrade(db.url_for(target), fts_min_pause=0)
    assert str(blocker) in str(info.value)
    assert blocker.read_text() == "x"


FIRST_FORM_USAGE = """CREATE TABLE session_model_usage (
    session_id TEXT NOT NULL REFERENCES sessions(id),
    model TEXT NOT NULL,
    billing_provider TEXT NOT NULL DEFAULT '',
    billing_base_url TEXT,
    api_call_count INTEGER NOT NULL DEFAULT 0,
    input_tokens INTEGER NOT NULL DEFAULT 0,
    output_tokens INTEGER NOT NULL DEFAULT 0,
    cache_read_tokens INTEGER NOT NULL DEFAULT 0,
    cache_write_tokens INTEGER NOT NULL DEFAULT 0,
    reasoning_tokens INTEGER NOT NULL DEFAULT 0,
    estimated_cost_usd REAL NOT NULL DEFAULT 0,
    first_seen REAL,
    last_seen REAL,
    PRIMARY KEY (session_id, model, billing_provider)
)"""

V22_KEY = ["session_id", "model", "billing_provider", "billing_base_url", "billing_mode", "task"]


def _usage_key(con: sqlite3.Connection) -> list[str]:
    cols = [r for r in con.execute("PRAGMA table_info(session_model_usage)") if r[5]]
    return [r[1] for r in sorted(cols, key=lambda r: r[5])]


def test_v20_bump_build_usage_table_is_kept(legacy_db, db):
    path = legacy_db(19)
    con = db.raw(path)
    try:
        con.execute(FIRST_FORM_USAGE)
        con.execute(
            "INSERT INTO session_model_usage (session_id, model, billing_provider, "
            "billing_base_url, api_call_count, input_tokens, output_tokens, "
            "estimated_cost_usd, first_seen, last_seen) "
            "VALUES (?, 'anthropic/claude-sonnet-4', 'openrouter', NULL, "
            "3, 111, 22, 0.5, 1.0, 2.0)",
            (A,),
        )
        _set_version(con, 20)
    finally:
        con.close()
    migrate.upgrade(db.url_for(path), fts_min_pause=0)
    assert migrate.check(db.url_for(path)).ok
    con = db.raw(path)
    try:
        rows = con.execute(
            "SELECT session_id, model, billing_provider, billing_base_url, billing_mode, task, "
            "api_call_count, input_tokens, output_tokens, estimated_cost_usd, first_seen, "
            "last_seen FROM session_model_usage"
        ).fetchall()
        key = _usage_key(con)
    finally:
        con.close()
    # stored version 20: the v20 seeding does not run again, only the kept row is there
    assert rows == [
        (A, "anthropic/claude-sonnet-4", "openrouter", "", "", "", 3, 111, 22, 0.5, 1.0, 2.0)
    ]
    assert key == V22_KEY


V20_LAST_FORM = """CREATE TABLE session_model_usage_v21 (
    session_id TEXT NOT NULL REFERENCES sessions(id) ON DELETE CASCADE,
    model TEXT NOT NULL,
    billing_provider TEXT NOT NULL DEFAULT '',
    billing_base_url TEXT NOT NULL DEFAULT '',
    billing_mode TEXT NOT NULL DEFAULT '',
    api_call_count INTEGER NOT NULL DEFAULT 0,
    input_tokens INTEGER NOT NULL DEFAULT 0,
    output_tokens INTEGER NOT NULL DEFAULT 0,
    cache_read_tokens INTEGER NOT NULL DEFAULT 0,
    cache_write_tokens INTEGER NOT NULL DEFAULT 0,
    reasoning_tokens INTEGER NOT NULL DEFAULT 0,
    estimated_cost_usd REAL NOT NULL DEFAULT 0,
    actual_cost_usd REAL NOT NULL DEFAULT 0,
    cost_status TEXT,
    cost_source TEXT,
    first_seen REAL,
    last_seen REAL,
    PRIMARY KEY (session_id, model, billing_provider, billing_base_url, billing_mode)
)"""


def test_stranded_v21_usage_rows_are_merged(legacy_db, db):
    path = legacy_db(22)
    con = db.raw(path)
    try:
        before = con.execute(
            "SELECT session_id, model, billing_provider, billing_base_url, billing_mode, "
            "input_tokens FROM session_model_usage WHERE session_id = ?",
            (B,),
        ).fetchone()
        assert before is not None
        count_before = con.execute("SELECT COUNT(*) FROM session_model_usage").fetchone()[0]
        con.execute(V20_LAST_FORM)
        con.execute(
            "INSERT INTO session_model_usage_v21 (session_id, model, billing_provider, "
            "billing_base_url, billing_mode, api_call_count, input_tokens, output_tokens, "
            "estimated_cost_usd, cost_status, first_seen, last_seen) "
            "VALUES (?, 'stranded/model-x', 'openrouter', 'https://x.example/v1', 'api', "
            "2, 700, 70, 0.25, 'estimated', 10.0, 20.0)",
            (D,),
        )
        # a row whose key collides with a live row: its counters are added
        con.execute(
            "INSERT INTO session_model_usage_v21 (session_id, model, billing_provider, "
            "billing_base_url, billing_mode, input_tokens) VALUES (?, ?, ?, ?, ?, 7)",
            before[:5],
        )
    finally:
        con.close()
    migrate.upgrade(db.url_for(path), fts_min_pause=0)
    assert migrate.check(db.url_for(path)).ok
    con = db.raw(path)
    try:
        names = {n for (n,) in con.execute("SELECT name FROM sqlite_master")}
        assert "session_model_usage_v21" not in names
        assert con.execute("SELECT COUNT(*) FROM session_model_usage").fetchone()[0] == (
            count_before + 1
        )
        stranded = con.execute(
            "SELECT billing_provider, billing_base_url, billing_mode, task, api_call_count, "
            "input_tokens, output_tokens, estimated_cost_usd, cost_status, first_seen, last_seen "
            "FROM session_model_usage WHERE session_id = ? AND model = 'stranded/model-x'",
            (D,),
        ).fetchall()
        assert stranded == [
            (
                "openrouter",
                "https://x.example/v1",
                "api",
                "",
                2,
                700,
                70,
                0.25,
                "estimated",
                10.0,
                20.0,
            )
        ]
        merged = con.execute(
            "SELECT input_tokens FROM session_model_usage WHERE session_id = ? AND model = ? "
            "AND billing_provider = ? AND billing_base_url = ? AND billing_mode = ? "
            "AND task = ''",
            before[:5],
        ).fetchone()
        assert merged == (before[5] + 7,)
    finally:
        con.close()


def test_gateway_routing_keyed_by_session_key_is_healed(legacy_db, db):
    path = legacy_db(22)
    rows = [
        ("agent:main:telegram:dm:42", json.dumps({"session_id": B}), 100.0),
        ("agent:main:cli", json.dumps({"session_id": A}), 200.0),
    ]
    con = db.raw(path)
    try:
        con.execute("DROP TABLE gateway_routing")
        con.execute(
            "CREATE TABLE gateway_routing (session_key TEXT PRIMARY KEY, "
            "entry_json TEXT NOT NULL, updated_at REAL NOT NULL)"
        )
        con.executemany("INSERT INTO gateway_routing VALUES (?, ?, ?)", rows)
    finally:
        con.close()
    assert migrate.current(db.url_for(path)).stamp_revision == 18
    migrate.upgrade(db.url_for(path), fts_min_pause=0)
    assert migrate.check(db.url_for(path)).ok
    con = db.raw(path)
    try:
        key = [
            r[1]
            for r in sorted(
                (r for r in con.execute("PRAGMA table_info(gateway_routing)") if r[5]),
                key=lambda r: r[5],
            )
        ]
        assert key == ["scope", "session_key"]
        got = sorted(
            con.execute("SELECT scope, session_key, entry_json, updated_at FROM gateway_routing")
        )
        assert got == sorted(("", *r) for r in rows)
        names = {n for (n,) in con.execute("SELECT name FROM sqlite_master")}
        assert "gateway_routing_legacy_pk" not in names
    finally:
        con.close()


def _nullable_active_v13(legacy_db, db) -> Path:
    path = legacy_db(13)
    con = db.raw(path)
    try:
        con.execute("ALTER TABLE messages ADD COLUMN active INTEGER")
        _set_version(con, 14)
        assert con.execute("SELECT COUNT(*) FROM messages WHERE active IS NULL").fetchone() == (64,)
    finally:
        con.close()
    return path


def test_nullable_active_is_healed(legacy_db, db):
    path = _nullable_active_v13(legacy_db, db)
    migrate.upgrade(db.url_for(path), fts_min_pause=0)
    assert migrate.current(db.url_for(path)).at_head
    con = db.raw(path)
    try:
        assert con.execute("SELECT COUNT(*) FROM messages WHERE active IS NULL").fetchone() == (0,)
        assert con.execute("SELECT COUNT(*) FROM messages WHERE active = 1").fetchone() == (64,)
    finally:
        con.close()


def test_check_tolerates_healed_nullable_active(legacy_db, db):
    path = _nullable_active_v13(legacy_db, db)
    migrate.upgrade(db.url_for(path), fts_min_pause=0)
    report = migrate.check(db.url_for(path))
    assert report.ok, report.schema_drift


def test_v18_gateway_metadata_backfill_from_sessions_json(legacy_db, hermes_home, db):
    """docs/reference/history.md 2, v18: fill only NULL columns from
    $HERMES_HOME/sessions/sessions.json."""
    (hermes_home / "sessions").mkdir()
    origin = {"chat_id": "111", "thread_id": "7", "platform": "telegram"}
    (hermes_home / "sessions" / "sessions.json").write_text(
        json.dumps(
            {
                "_meta": {"session_id": C},  # keys starting with _ are skipped
                "agent:main:telegram:dm:987654321": {
                    "session_id": B,
                    "display_name": "Trip chat",
                    "chat_type": "group",
                    "origin": origin,
                    "memory_flushed": True,
                },
                "agent:main:cli": {"session_id": A, "session_key": "explicit-key"},
                "agent:main:ghost": {"session_id": "no-such-session"},
            }
        ),
        encoding="utf-8",
    )
    path = legacy_db(17)
    migrate.upgrade(db.url_for(path), fts_min_pause=0)
    con = db.raw(path)
    try:
        rows = {
            r[0]: r[1:]
            for r in con.execute(
                "SELECT id, session_key, chat_id, chat_type, thread_id, display_name, "
                "origin_json, expiry_finalized FROM sessions"
            )
        }
    finally:
        con.close()
    key, chat_id, chat_type, thread_id, display, origin_json, finalized = rows[B]
    # existing values are never overwritten; NULL ones are filled
    assert (key, chat_id, chat_type) == ("agent:main:telegram:dm:987654321", "987654321", "dm")
    assert thread_id == "7"
    assert display == "Trip chat"
    assert json.loads(origin_json) == origin
    assert finalized == 1
    assert rows[A][0] == "explicit-key"
    assert rows[A][4:] == (None, None, 0)
    assert rows[C] == (None, None, None, None, None, None, 0)
