"""v2: messages.finish_reason."""

from hermes_store._migrations import _ops

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    _ops.add_column("messages", "finish_reason", "TEXT")
    _ops.set_version(2)


def downgrade() -> None:
    _ops.drop_columns("messages", {"finish_reason": None})
    _ops.lower_version(1)
