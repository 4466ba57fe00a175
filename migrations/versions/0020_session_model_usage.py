"""v20: session_model_usage (the final 20L form: five-column key, ON DELETE CASCADE),
seeded with one row per session that has token counts.

A first-form table (v20 bump build: three-column key, nullable base URL) is rebuilt.
"""

from hermes_store._migrations import _ops

revision = "0020"
down_revision = "0019"
branch_labels = None
depends_on = None

CREATE = """CREATE TABLE IF NOT EXISTS session_model_usage (
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
INDEXES = (
    "CREATE INDEX IF NOT EXISTS idx_session_model_usage_session ON session_model_usage(session_id)",
    "CREATE INDEX IF NOT EXISTS idx_session_model_usage_model ON session_model_usage(model)",
)
FIRST_FORM_KEY = ["session_id", "model", "billing_provider"]

SEED = """
INSERT INTO session_model_usage (
    session_id, model, billing_provider, billing_base_url, billing_mode,
    api_call_count, input_tokens, output_tokens, cache_read_tokens, cache_write_tokens,
    reasoning_tokens, estimated_cost_usd, actual_cost_usd, cost_status, cost_source,
    first_seen, last_seen)
SELECT id, COALESCE(model, 'unknown'), COALESCE(billing_provider, ''),
       COALESCE(billing_base_url, ''), COALESCE(billing_mode, ''),
       COALESCE(api_call_count, 0), COALESCE(input_tokens, 0), COALESCE(output_tokens, 0),
       COALESCE(cache_read_tokens, 0), COALESCE(cache_write_tokens, 0),
       COALESCE(reasoning_tokens, 0), COALESCE(estimated_cost_usd, 0),
       COALESCE(actual_cost_usd, 0), cost_status, cost_source,
       started_at, COALESCE(ended_at, started_at)
FROM sessions
WHERE COALESCE(input_tokens, 0) + COALESCE(output_tokens, 0) + COALESCE(cache_read_tokens, 0)
      + COALESCE(cache_write_tokens, 0) + COALESCE(reasoning_tokens, 0) > 0
ON CONFLICT DO NOTHING
"""


def upgrade() -> None:
    if _ops.has_table("session_model_usage") and (
        _ops.primary_key("session_model_usage") == FIRST_FORM_KEY
    ):
        _ops.execute("ALTER TABLE session_model_usage RENAME TO _hermes_usage_first_form")
        _ops.execute(CREATE)
        _ops.merge_usage_rows("_hermes_usage_first_form", with_task=False)
        _ops.drop_table("_hermes_usage_first_form")
    _ops.execute(CREATE)
    _ops.run_all(INDEXES)
    if _ops.data_migration_due(20):
        _ops.execute(SEED)
    _ops.set_version(20)


def downgrade() -> None:
    _ops.refuse_if_rows("session_model_usage")
    _ops.drop_table("session_model_usage")
    _ops.lower_version(19)
