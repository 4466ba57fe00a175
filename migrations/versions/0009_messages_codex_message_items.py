"""v9: messages.codex_message_items."""

from hermes_store._migrations import _ops

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None


def upgrade() -> None:
    _ops.add_column("messages", "codex_message_items", "TEXT")
    _ops.set_version(9)


def downgrade() -> None:
    _ops.drop_columns("messages", {"codex_message_items": None})
    _ops.lower_version(8)
