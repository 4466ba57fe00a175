"""v14: compression_locks, and (14L) cwd, rewind/archive flags and messages.active.

Old reconciler builds added `active` without NOT NULL DEFAULT 1; the column cannot be
redeclared without rebuilding messages, so, like the original, NULLs are healed to 1.
"""

from hermes_store._migrations import _ops

revision = "0014"
down_revision = "0013"
branch_labels = None
depends_on = None

SESSIONS = (
    ("cwd", "TEXT"),
    ("rewind_count", "INTEGER NOT NULL DEFAULT 0"),
    ("archived", "INTEGER NOT NULL DEFAULT 0"),
)


def upgrade() -> None:
    _ops.execute(
        """CREATE TABLE IF NOT EXISTS compression_locks (
    session_id TEXT PRIMARY KEY,
    holder TEXT NOT NULL,
    acquired_at REAL NOT NULL,
    expires_at REAL NOT NULL
)"""
    )
    _ops.create_index(
        "CREATE INDEX IF NOT EXISTS idx_compression_locks_expires ON compression_locks(expires_at)"
    )
    _ops.add_columns("sessions", SESSIONS)
    if "active" in _ops.columns("messages"):
        # added without NOT NULL DEFAULT 1 by old reconcilers: heal its NULLs (a full scan
        # of messages, so only then; a column added here has no NULL to heal)
        _ops.execute("UPDATE messages SET active = 1 WHERE active IS NULL")
    else:
        _ops.add_column("messages", "active", "INTEGER NOT NULL DEFAULT 1")
    _ops.create_index(
        "CREATE INDEX IF NOT EXISTS idx_messages_session_active "
        "ON messages(session_id, active, timestamp)"
    )
    _ops.set_version(14)


def downgrade() -> None:
    _ops.drop_index("idx_messages_session_active")
    _ops.drop_columns("messages", {"active": "1"})
    _ops.drop_columns("sessions", {"cwd": None, "rewind_count": "0", "archived": "0"})
    _ops.refuse_if_rows("compression_locks")
    _ops.drop_index("idx_compression_locks_expires")
    _ops.drop_table("compression_locks")
    _ops.lower_version(13)
