"""v22: `task` joins the primary key of session_model_usage (main loop = ''), and (22L)
messages.api_content.

Unlike the original's copy, this one coalesces NULL keys, so the rows of a v20-bump-build
database are kept; usage rows stranded in `session_model_usage_v21` by the original's
failed rebuild (or in `session_model_usage_legacy_pk`) are merged back.
"""

from hermes_store._migrations import _ops

revision = "0022"
down_revision = "0021"
branch_labels = None
depends_on = None

CREATE_V22 = """CREATE TABLE IF NOT EXISTS session_model_usage (
    session_id TEXT NOT NULL REFERENCES sessions(id) ON DELETE CASCADE,
    model TEXT NOT NULL,
    billing_provider TEXT NOT NULL DEFAULT '',
    billing_base_url TEXT NOT NULL DEFAULT '',
    billing_mode TEXT NOT NULL DEFAULT '',
    task TEXT NOT NULL DEFAULT '',
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
    PRIMARY KEY (session_id, model, billing_provider, billing_base_url, billing_mode, task)
)"""
CREATE_V20 = """CREATE TABLE session_model_usage (
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
DEBRIS = ("session_model_usage_v21", "session_model_usage_legacy_pk")
OLD = "_hermes_usage_before_task"


def upgrade() -> None:
    _ops.add_column("messages", "api_content", "TEXT")
    if _ops.has_table("session_model_usage") and "task" not in _ops.primary_key(
        "session_model_usage"
    ):
        _ops.execute(f"ALTER TABLE session_model_usage RENAME TO {OLD}")
        _ops.execute(CREATE_V22)
        _ops.merge_usage_rows(OLD, with_task=True)
        _ops.drop_table(OLD)
    _ops.execute(CREATE_V22)
    for table in DEBRIS:
        if _ops.has_table(table):
            _ops.merge_usage_rows(table, with_task=True)
            _ops.drop_table(table)
    _ops.run_all(INDEXES)
    _ops.set_version(22)


def downgrade() -> None:
    tasked = _ops.scalar("SELECT COUNT(*) FROM session_model_usage WHERE task <> ''")
    if tasked:
        from hermes_store.errors import MigrationError

        raise MigrationError(
            f"downgrade would lose data: {tasked} usage row(s) belong to auxiliary tasks, "
            "which the v21 key cannot hold; stay at this revision"
        )
    _ops.execute(f"ALTER TABLE session_model_usage RENAME TO {OLD}")
    _ops.execute(CREATE_V20)
    _ops.merge_usage_rows(OLD, with_task=False)
    _ops.drop_table(OLD)
    _ops.run_all(INDEXES)
    _ops.drop_columns("messages", {"api_content": None})
    _ops.lower_version(21)
