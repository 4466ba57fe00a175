"""v13: messages.observed."""

from hermes_store._migrations import _ops

revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None


def upgrade() -> None:
    _ops.add_column("messages", "observed", "INTEGER DEFAULT 0")
    _ops.set_version(13)


def downgrade() -> None:
    _ops.drop_columns("messages", {"observed": "0"})
    _ops.lower_version(12)
