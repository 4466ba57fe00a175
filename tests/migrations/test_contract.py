"""hermes_store/contract.py: the names shared by the runtime and the revisions, frozen.

The values are pinned here as shipped (a change must be a new constant and a revision,
never an edit); the reference database holds the SQLite names; the migrations give
PostgreSQL the search names; and the modules that import the contract do not spell its
values again."""

from __future__ import annotations

import ast
import sqlite3
from pathlib import Path

import pytest
from sqlalchemy import create_engine, inspect
from sqlalchemy.pool import NullPool

from hermes_store import contract

REPO_ROOT = Path(__file__).resolve().parents[2]

SHIPPED = {
    "VERSION_TABLE": "hermes_store_version",
    "OWN_TABLE_PREFIX": "hermes_store_",
    "IDEMPOTENCY_TABLE": "hermes_store_idempotency_keys",
    "CHANGES_TABLE": "hermes_store_changes",
    "CHANGES_PENDING_TABLE": "hermes_store_changes_pending",
    "FEED_STATE_TABLE": "hermes_store_feed_state",
    "FEED_LAST_POSITION": "last_position",
    "FEED_TRIMMED_THROUGH": "trimmed_through",
    "FEED_RETENTION_ROWS": "retention_rows",
    "FEED_TRIM_EVERY": 1000,
    "FEED_CHANNEL": "hermes_store_changes",
    "FEED_OBJECT_PREFIX": "hermes_store_feed_",
    "SESSIONS_VIEW_V1": "hermes_store_v1_sessions",
    "MESSAGES_VIEW_V1": "hermes_store_v1_messages",
    "TURNS_TABLE": "hermes_store_turns",
    "LOCAL_TABLES": frozenset(
        {"hermes_store_changes", "hermes_store_changes_pending", "hermes_store_feed_state"}
    ),
    "MESSAGES_SESSION_ID_INDEX": "hermes_store_messages_session_id",
    "ACTIVITY_TABLE": "hermes_store_session_activity",
    "ACTIVITY_INDEX": "hermes_store_session_activity_last_active",
    "ACTIVITY_OBJECT_PREFIX": "hermes_store_activity_",
    "APPEND_FUNCTION": "hermes_store_append_message",
    "APPEND_BUSY": "HS001",
    "APPEND_MISSING": "HS002",
    "APPEND_CLOSED": "HS003",
    "TURNS_TTL_COLUMN": "ttl",
    "FEED_STAMP_TRIGGER": "hermes_store_feed_stamp",
    "FEED_PENDING_STAMPS_COLUMN": "stamps",
    "TRASH_TABLE": "hermes_store_trash",
    "TRASH_EXPIRES_INDEX": "hermes_store_trash_expires_at",
    "TRASH_SESSION_INDEX": "hermes_store_trash_session_id",
    "TRASH_ROWS_TABLE": "hermes_store_trash_rows",
    "TAGS_TABLE": "hermes_store_session_tags",
    "TAGS_TAG_INDEX": "hermes_store_session_tags_tag",
    "ADK_SESSIONS_TABLE": "hermes_store_adk_sessions",
    "ADK_APP_STATES_TABLE": "hermes_store_adk_app_states",
    "ADK_USER_STATES_TABLE": "hermes_store_adk_user_states",
    "ADK_EVENT_KIND": "adk_event",
    "NOT_COPIED_TABLES": frozenset(
        {
            "hermes_store_changes",
            "hermes_store_changes_pending",
            "hermes_store_feed_state",
            "hermes_store_session_activity",
        }
    ),
    "FTS_REBUILT_LATER_ATTR": "hermes_fts_rebuilt_later",
    "HERMES_HOME_ATTR": "hermes_home",
    "PG_MIGRATION_LOCK": 0x6865726D65736D67,
    "FTS_TABLE": "messages_fts",
    "FTS_TRIGRAM_TABLE": "messages_fts_trigram",
    "FTS_TRIGRAM_VIEW": "messages_fts_trigram_src",
    "FTS_CJK_TABLE": "messages_fts_cjk",
    "FTS_BASE_TRIGGERS": ("messages_fts_insert", "messages_fts_delete", "messages_fts_update"),
    "FTS_TRIGRAM_TRIGGERS": (
        "messages_fts_trigram_insert",
        "messages_fts_trigram_delete",
        "messages_fts_trigram_update",
    ),
    "FTS_TRIGGERS": (
        "messages_fts_insert",
        "messages_fts_delete",
        "messages_fts_update",
        "messages_fts_trigram_insert",
        "messages_fts_trigram_delete",
        "messages_fts_trigram_update",
    ),
    "FTS_CJK_TRIGGERS": (
        "messages_fts_cjk_insert",
        "messages_fts_cjk_delete",
        "messages_fts_cjk_update",
    ),
    "FTS5_SHADOW_SUFFIXES": ("data", "idx", "content", "docsize", "config"),
    "FTS_TRASH_PREFIX": "fts_v22_trash_",
    "META_FTS_HIGH_WATER": "fts_rebuild_high_water",
    "META_FTS_PROGRESS": "fts_rebuild_progress",
    "META_FTS_STORAGE_VERSION": "fts_storage_version",
    "META_FTS_OPTIMIZE_AVAILABLE": "fts_optimize_available",
    "META_FTS_CJK_STALE": "fts_cjk_stale",
    "META_FTS_LOCAL_KEYS": frozenset(
        {
            "fts_rebuild_high_water",
            "fts_rebuild_progress",
            "fts_storage_version",
            "fts_optimize_available",
            "fts_cjk_stale",
        }
    ),
    "PG_SEARCH_VECTOR_COLUMN": "search_vector",
    "PG_SEARCH_VECTOR_INDEX": "idx_messages_search_vector",
    "PG_CONTENT_TRGM_INDEX": "idx_messages_content_trgm",
    "PG_TRGM_INDEX": "idx_messages_trgm",
    "PG_WORD_INDEX_CHARS": 100_000,
    "PG_WORD_PUNCTUATION": "[!-/:-@\\[-`{-~]+",
    "PG_JSON_OBJECT_FUNCTION": "hermes_json_object",
    "PG_SEARCH_COLUMNS": frozenset({("messages", "search_vector")}),
    "PG_SEARCH_INDEXES": frozenset(
        {"idx_messages_search_vector", "idx_messages_content_trgm", "idx_messages_trgm"}
    ),
}


def test_shipped_values_never_change():
    current = {name: getattr(contract, name) for name in dir(contract) if name.isupper()}
    changed = {n: (v, current.get(n)) for n, v in SHIPPED.items() if current.get(n) != v}
    assert not changed, (
        f"hermes_store/contract.py is immutable once shipped; these changed: {changed}. "
        "Restore them; a new name is a new constant plus a revision that moves to it."
    )
    added = sorted(set(current) - set(SHIPPED))
    assert not added, f"pin the new constants {added} in SHIPPED here once they ship"


def test_the_reference_database_holds_the_sqlite_names(legacy_db):
    con = sqlite3.connect(f"file:{legacy_db(23)}?mode=ro", uri=True)
    try:
        names = {r[0]: r[1] for r in con.execute("SELECT name, type FROM sqlite_master")}
    finally:
        con.close()
    assert names[contract.FTS_TABLE] == names[contract.FTS_TRIGRAM_TABLE] == "table"
    assert names[contract.FTS_TRIGRAM_VIEW] == "view"
    assert {names[t] for t in contract.FTS_TRIGGERS} == {"trigger"}
    for suffix in ("data", "idx", "docsize", "config"):
        assert f"{contract.FTS_TABLE}_{suffix}" in names


def test_postgresql_has_the_search_names(pg_fresh_db):
    engine = create_engine(pg_fresh_db, poolclass=NullPool)
    try:
        with engine.connect() as conn:
            insp = inspect(conn)
            columns = {c["name"] for c in insp.get_columns("messages")}
            indexes = {i["name"] for i in insp.get_indexes("messages")}
            version_table = insp.has_table(contract.VERSION_TABLE)
    finally:
        engine.dispose()
    assert contract.PG_SEARCH_VECTOR_COLUMN in columns
    at_head = {contract.PG_SEARCH_VECTOR_INDEX, contract.PG_TRGM_INDEX}
    assert at_head <= indexes
    assert contract.PG_CONTENT_TRGM_INDEX not in indexes  # replaced by revision 0023
    assert version_table


# Modules that take these names from the contract (the frozen DDL in _fts_layouts.py and
# _pg_search.py writes them inside statements, which is not a copy of the constant).
IMPORTERS = [
    "hermes_store/migrate.py",
    "hermes_store/migration/adoption.py",
    "hermes_store/migration/copy.py",
    "hermes_store/migration/schema_snapshot.py",
    "hermes_store/search/layout.py",
    "hermes_store/repositories/_dialect.py",
    *sorted(
        str(p.relative_to(REPO_ROOT))
        for p in (REPO_ROOT / "migrations").rglob("*.py")
    ),
]
DISTINCT = {
    value
    for name, value in SHIPPED.items()
    if isinstance(value, str) and name not in ("FTS_TABLE", "HERMES_HOME_ATTR")
} | {"search_vector", "hermes_store_version"}


@pytest.mark.parametrize("relative", IMPORTERS)
def test_importers_do_not_spell_the_values_again(relative):
    tree = ast.parse((REPO_ROOT / relative).read_text(encoding="utf-8"))
    # keys of a dict literal name fields of an output (a JSON report), not the objects
    keys = {id(k) for node in ast.walk(tree) if isinstance(node, ast.Dict) for k in node.keys}
    spelled = sorted(
        {
            node.value
            for node in ast.walk(tree)
            if isinstance(node, ast.Constant) and node.value in DISTINCT and id(node) not in keys
        }
    )
    assert not spelled, f"{relative} spells {spelled}: import them from hermes_store.contract"
