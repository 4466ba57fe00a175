"""Recognising a database the original Hermes code wrote, by its shape.

One upstream version number shipped with several shapes (spec/history.md section 5), and
real files carry extra columns from short-lived builds. So the number alone does not say
where a file stands on the revision chain. The rule used here: a file is stamped at the
highest revision r <= its `schema_version` such that everything revisions 1..r create is
present in the form they create it; revisions r+1..23 then add what is missing (they are
add-if-missing) and run the data migrations the original would run (those are gated by
the stored number, so a v20 file is not re-seeded). Unknown tables and columns are never
touched.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from sqlalchemy import Connection, text

from .config import SCHEMA_VERSION
from .contract import FTS_TABLE, FTS_TRIGRAM_TABLE
from .contract import VERSION_TABLE as VERSION_TABLE
from .dialects import backend_for
from .search.layout import classify

_S, _M = "sessions", "messages"

# What each upstream version adds, as (kind, table, name). "column" items name a column
# of a table; "table" and "index" items name the object. Frozen facts of spec/history.md.
INVENTORY: dict[int, tuple[tuple[str, str, str], ...]] = {
    1: (
        ("table", "schema_version", ""),
        ("table", _S, ""),
        ("table", _M, ""),
        *(
            ("column", _S, c)
            for c in (
                "id",
                "source",
                "user_id",
                "model",
                "model_config",
                "system_prompt",
                "parent_session_id",
                "started_at",
                "ended_at",
                "end_reason",
                "message_count",
                "tool_call_count",
                "input_tokens",
                "output_tokens",
            )
        ),
        *(
            ("column", _M, c)
            for c in (
                "id",
                "session_id",
                "role",
                "content",
                "tool_call_id",
                "tool_calls",
                "tool_name",
                "timestamp",
                "token_count",
            )
        ),
        ("index", _S, "idx_sessions_source"),
        ("index", _S, "idx_sessions_parent"),
        ("index", _S, "idx_sessions_started"),
        ("index", _M, "idx_messages_session"),
        ("table", FTS_TABLE, ""),
    ),
    2: (("column", _M, "finish_reason"),),
    3: (("column", _S, "title"),),
    4: (("index", _S, "idx_sessions_title_unique"),),
    5: tuple(
        ("column", _S, c)
        for c in (
            "cache_read_tokens",
            "cache_write_tokens",
            "reasoning_tokens",
            "billing_provider",
            "billing_base_url",
            "billing_mode",
            "estimated_cost_usd",
            "actual_cost_usd",
            "cost_status",
            "cost_source",
            "pricing_version",
        )
    ),
    6: tuple(
        ("column", _M, c) for c in ("reasoning", "reasoning_details", "codex_reasoning_items")
    ),
    7: (("column", _M, "reasoning_content"), ("table", "state_meta", "")),
    8: (("column", _S, "api_call_count"),),
    9: (("column", _M, "codex_message_items"),),
    10: (("table", FTS_TRIGRAM_TABLE, ""),),
    11: (
        *(("column", _S, c) for c in ("handoff_state", "handoff_platform", "handoff_error")),
        ("fts", "", "L3 or newer"),
    ),
    12: (("column", _M, "platform_message_id"), ("index", _M, "idx_messages_platform_msg_id")),
    13: (("column", _M, "observed"),),
    14: (
        ("table", "compression_locks", ""),
        ("index", "compression_locks", "idx_compression_locks_expires"),
        *(("column", _S, c) for c in ("cwd", "rewind_count", "archived")),
        ("column", _M, "active"),
        ("not_null", _M, "active"),
        ("index", _M, "idx_messages_session_active"),
    ),
    15: (("index", _S, "idx_sessions_source_id"),),
    16: (
        ("column", _M, "compacted"),
        ("column", _S, "git_branch"),
        ("column", _S, "git_repo_root"),
    ),
    17: (
        *(
            ("column", _S, c)
            for c in (
                "session_key",
                "chat_id",
                "chat_type",
                "thread_id",
                "compression_failure_cooldown_until",
                "compression_failure_error",
            )
        ),
        ("index", _S, "idx_sessions_session_key"),
        ("index", _S, "idx_sessions_gateway_peer"),
        ("index", _S, "idx_sessions_handoff_state"),
    ),
    18: tuple(("column", _S, c) for c in ("display_name", "origin_json", "expiry_finalized")),
    19: (
        ("table", "gateway_routing", ""),
        ("primary_key", "gateway_routing", "scope,session_key"),
        ("absent", "gateway_routing_legacy_pk", ""),
        ("column", _M, "effect_disposition"),
        ("index", _M, "idx_messages_active_null"),
    ),
    20: (
        ("table", "session_model_usage", ""),
        ("column", "session_model_usage", "billing_mode"),
        ("column", "session_model_usage", "actual_cost_usd"),
        ("column", "session_model_usage", "cost_status"),
        ("column", "session_model_usage", "cost_source"),
        ("index", "session_model_usage", "idx_session_model_usage_session"),
        ("index", "session_model_usage", "idx_session_model_usage_model"),
    ),
    21: (
        ("table", "async_delegations", ""),
        ("index", "async_delegations", "idx_async_delegations_delivery"),
        ("column", _S, "compression_fallback_streak"),
        ("column", _S, "profile_name"),
    ),
    22: (
        (
            "primary_key",
            "session_model_usage",
            "session_id,model,billing_provider,billing_base_url,billing_mode,task",
        ),
        ("absent", "session_model_usage_v21", ""),
        ("absent", "session_model_usage_legacy_pk", ""),
        ("column", _M, "api_content"),
    ),
    23: (
        ("fts", "", "v23"),
        ("column", _S, "compression_ineffective_count"),
        ("column", _S, "pinned"),
        ("column", _M, "display_kind"),
        ("column", _M, "display_metadata"),
    ),
}


@dataclass
class DatabaseShape:
    """What an unmanaged or managed database looks like from the outside."""

    kind: str  # "empty", "managed", "legacy", "foreign"
    stored_version: int | None
    alembic_revision: str | None
    stamp_revision: int | None = None
    missing: dict[int, list[str]] = field(default_factory=dict)
    extra_tables: list[str] = field(default_factory=list)

    @property
    def too_new(self) -> bool:
        return self.stored_version is not None and self.stored_version > SCHEMA_VERSION


class _Probe:
    def __init__(self, conn: Connection) -> None:
        self.conn = conn
        self.backend = backend_for(conn)
        self._columns: dict[str, dict[str, tuple[int, int]]] = {}
        self.tables, self.indexes = self.backend.catalogue(conn)

    def columns(self, table: str) -> dict[str, tuple[int, int]]:
        if table not in self._columns:
            self._columns[table] = self.backend.column_flags(self.conn, table)
        return self._columns[table]

    def primary_key(self, table: str) -> str:
        cols = sorted((pk, name) for name, (_, pk) in self.columns(table).items() if pk)
        return ",".join(name for _, name in cols)

    def has(self, kind: str, table: str, name: str) -> bool:
        if kind == "table":
            return table in self.tables
        if kind == "absent":
            return table not in self.tables
        if table and table not in self.tables:
            return False
        if kind == "column":
            return name in self.columns(table)
        if kind == "not_null":
            return self.columns(table).get(name, (0, 0))[0] == 1
        if kind == "index":
            return name in self.indexes
        if kind == "primary_key":
            return self.primary_key(table) == name
        if kind == "fts":
            layout = classify(self.conn)
            triggers = self.conn.execute(
                text(
                    "SELECT COUNT(*) FROM sqlite_master WHERE type = 'trigger' "
                    "AND name LIKE 'messages\\_fts\\_%' ESCAPE '\\' "
                    "AND name NOT LIKE 'messages\\_fts\\_cjk\\_%' ESCAPE '\\'"
                )
            ).scalar()
            if name == "v23":
                return layout == "v23" and triggers == 6
            return layout in ("L3", "v23")
        raise ValueError(kind)


def _read_alembic_revision(conn: Connection, probe: _Probe) -> str | None:
    if VERSION_TABLE not in probe.tables:
        return None
    value = conn.execute(text(f"SELECT version_num FROM {VERSION_TABLE}")).scalar()  # noqa: S608
    return None if value is None else str(value)


def inspect_shape(conn: Connection) -> DatabaseShape:
    """Classify the database behind `conn` without changing it. On PostgreSQL only "empty",
    "managed" and "foreign" occur in practice: the original never wrote there."""
    probe = _Probe(conn)
    stored: int | None = None
    if "schema_version" in probe.tables:
        value = conn.execute(text("SELECT MAX(version) FROM schema_version")).scalar()
        stored = int(value) if value is not None else None
    revision = _read_alembic_revision(conn, probe)
    user_tables = {t for t in probe.tables if not t.startswith("sqlite_")}
    known = {t for items in INVENTORY.values() for kind, t, _ in items if kind == "table"}
    shape = DatabaseShape(
        kind="empty",
        stored_version=stored,
        alembic_revision=revision,
        extra_tables=sorted(
            t for t in user_tables - known - {VERSION_TABLE} if not t.startswith(FTS_TABLE)
        ),
    )
    if revision is not None:
        shape.kind = "managed"
        return shape
    if not user_tables - {VERSION_TABLE}:
        return shape
    if "sessions" not in probe.tables or "messages" not in probe.tables:
        shape.kind = "foreign"
        return shape
    shape.kind = "legacy"
    ceiling = min(stored or 0, SCHEMA_VERSION)
    stamp = 0
    complete = True
    for version in sorted(INVENTORY):
        missing = [
            f"{kind} {table}.{name}".replace(" .", " ").rstrip(".")
            for kind, table, name in INVENTORY[version]
            if not probe.has(kind, table, name)
        ]
        if missing:
            shape.missing[version] = missing
            complete = False
        if complete and version <= ceiling:
            stamp = version
    shape.stamp_revision = stamp
    return shape


def revision_id(version: int) -> str | None:
    return None if version == 0 else f"{version:04d}"
