"""v21: async_delegations (written by Hermes' async delegation module), and (21L)
sessions.compression_fallback_streak and profile_name."""

from hermes_store._migrations import _ops

revision = "0021"
down_revision = "0020"
branch_labels = None
depends_on = None

CREATE = """CREATE TABLE IF NOT EXISTS async_delegations (
    delegation_id TEXT PRIMARY KEY,
    origin_session TEXT NOT NULL,
    origin_ui_session_id TEXT NOT NULL DEFAULT '',
    parent_session_id TEXT,
    state TEXT NOT NULL,
    dispatched_at REAL NOT NULL,
    completed_at REAL,
    updated_at REAL NOT NULL,
    event_json TEXT,
    result_json TEXT,
    delivery_state TEXT NOT NULL DEFAULT 'pending',
    delivery_attempts INTEGER NOT NULL DEFAULT 0,
    delivered_at REAL,
    owner_pid INTEGER,
    owner_started_at INTEGER,
    task_json TEXT,
    delivery_claim TEXT,
    delivery_claimed_at REAL
)"""

SESSIONS = (
    ("compression_fallback_streak", "INTEGER NOT NULL DEFAULT 0"),
    ("profile_name", "TEXT"),
)


def upgrade() -> None:
    _ops.execute(CREATE)
    _ops.create_index(
        "CREATE INDEX IF NOT EXISTS idx_async_delegations_delivery\n"
        "    ON async_delegations(delivery_state, completed_at)"
    )
    _ops.add_columns("sessions", SESSIONS)
    _ops.set_version(21)


def downgrade() -> None:
    _ops.drop_columns("sessions", {"compression_fallback_streak": "0", "profile_name": None})
    _ops.refuse_if_rows("async_delegations")
    _ops.drop_table("async_delegations")
    _ops.lower_version(20)
