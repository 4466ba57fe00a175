"""v3: sessions.title. No database was ever left at 3 (the v4 code ran it as a step)."""

from hermes_store._migrations import _ops

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    _ops.add_column("sessions", "title", "TEXT")
    _ops.set_version(3)


def downgrade() -> None:
    _ops.drop_columns("sessions", {"title": None})
    _ops.lower_version(2)
