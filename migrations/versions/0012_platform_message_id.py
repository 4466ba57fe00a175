"""v12: messages.platform_message_id and its partial index."""

from hermes_store._migrations import _ops

revision = "0012"
down_revision = "0011"
branch_labels = None
depends_on = None


def upgrade() -> None:
    _ops.add_column("messages", "platform_message_id", "TEXT")
    _ops.create_index(
        "CREATE INDEX IF NOT EXISTS idx_messages_platform_msg_id "
        "ON messages(session_id, platform_message_id) WHERE platform_message_id IS NOT NULL"
    )
    _ops.set_version(12)


def downgrade() -> None:
    _ops.drop_index("idx_messages_platform_msg_id")
    _ops.drop_columns("messages", {"platform_message_id": None})
    _ops.lower_version(11)
