"""v8: sessions.api_call_count."""

from hermes_store._migrations import _ops

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None


def upgrade() -> None:
    _ops.add_column("sessions", "api_call_count", "INTEGER DEFAULT 0")
    _ops.set_version(8)


def downgrade() -> None:
    _ops.drop_columns("sessions", {"api_call_count": "0"})
    _ops.lower_version(7)
