"""v15: idx_sessions_source_id."""

from hermes_store._migrations import _ops

revision = "0015"
down_revision = "0014"
branch_labels = None
depends_on = None


def upgrade() -> None:
    _ops.create_index("CREATE INDEX IF NOT EXISTS idx_sessions_source_id ON sessions(source, id)")
    _ops.set_version(15)


def downgrade() -> None:
    _ops.drop_index("idx_sessions_source_id")
    _ops.lower_version(14)
