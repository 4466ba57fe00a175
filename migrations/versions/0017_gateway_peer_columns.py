"""v17: the gateway routing identity on sessions, its indexes, and (17L) the compression
failure cooldown columns and idx_sessions_handoff_state."""

from hermes_store._migrations import _ops

revision = "0017"
down_revision = "0016"
branch_labels = None
depends_on = None

COLUMNS = (
    ("session_key", "TEXT"),
    ("chat_id", "TEXT"),
    ("chat_type", "TEXT"),
    ("thread_id", "TEXT"),
    ("compression_failure_cooldown_until", "REAL"),
    ("compression_failure_error", "TEXT"),
)
INDEXES = {
    "idx_sessions_session_key": "CREATE INDEX IF NOT EXISTS idx_sessions_session_key\n"
    "    ON sessions(session_key, started_at DESC)",
    "idx_sessions_gateway_peer": "CREATE INDEX IF NOT EXISTS idx_sessions_gateway_peer\n"
    "    ON sessions(source, user_id, chat_id, chat_type, thread_id, started_at DESC)",
    "idx_sessions_handoff_state": "CREATE INDEX IF NOT EXISTS idx_sessions_handoff_state\n"
    "    ON sessions(handoff_state, started_at)",
}


def upgrade() -> None:
    _ops.add_columns("sessions", COLUMNS)
    _ops.run_all(INDEXES.values())
    _ops.set_version(17)


def downgrade() -> None:
    for name in INDEXES:
        _ops.drop_index(name)
    _ops.drop_columns("sessions", {name: None for name, _ in COLUMNS})
    _ops.lower_version(16)
