"""v19: the gateway_routing table, (19L) idx_messages_active_null and
messages.effect_disposition.

The key must be exactly (scope, session_key). A pre-release table keyed by session_key
alone, or the `gateway_routing_legacy_pk` left by an interrupted heal of the original,
is merged in with scope '' and the newest row winning a collision.
"""

from hermes_store._migrations import _ops

revision = "0019"
down_revision = "0018"
branch_labels = None
depends_on = None

LEGACY = "gateway_routing_legacy_pk"

CREATE = """CREATE TABLE IF NOT EXISTS gateway_routing (
    scope TEXT NOT NULL DEFAULT '',
    session_key TEXT NOT NULL,
    entry_json TEXT NOT NULL,
    updated_at REAL NOT NULL,
    PRIMARY KEY (scope, session_key)
)"""


def _merge_legacy() -> None:
    scope = "COALESCE(scope, '')" if "scope" in _ops.columns(LEGACY) else "''"
    _ops.execute(
        f"""INSERT INTO gateway_routing (scope, session_key, entry_json, updated_at)
SELECT {scope}, session_key, entry_json, updated_at FROM {LEGACY}
WHERE session_key IS NOT NULL AND entry_json IS NOT NULL
ORDER BY updated_at
ON CONFLICT (scope, session_key) DO UPDATE SET
    entry_json = excluded.entry_json, updated_at = excluded.updated_at
WHERE excluded.updated_at >= gateway_routing.updated_at"""  # noqa: S608 (frozen names)
    )
    _ops.drop_table(LEGACY)


def upgrade() -> None:
    if _ops.has_table("gateway_routing") and _ops.primary_key("gateway_routing") != [
        "scope",
        "session_key",
    ]:
        if _ops.has_table(LEGACY):
            _ops.execute("ALTER TABLE gateway_routing RENAME TO _hermes_gateway_routing_old")
            _ops.execute(CREATE)
            _merge_legacy()
            _ops.execute(f"ALTER TABLE _hermes_gateway_routing_old RENAME TO {LEGACY}")
        else:
            _ops.execute(f"ALTER TABLE gateway_routing RENAME TO {LEGACY}")
    _ops.execute(CREATE)
    if _ops.has_table(LEGACY):
        _merge_legacy()
    _ops.add_column("messages", "effect_disposition", "TEXT")
    _ops.create_index(
        "CREATE INDEX IF NOT EXISTS idx_messages_active_null\n"
        "    ON messages(active) WHERE active IS NULL"
    )
    _ops.set_version(19)


def downgrade() -> None:
    _ops.drop_index("idx_messages_active_null")
    _ops.drop_columns("messages", {"effect_disposition": None})
    _ops.refuse_if_rows("gateway_routing")
    _ops.drop_table("gateway_routing")
    _ops.lower_version(18)
