"""v7: messages.reasoning_content and (7L) the state_meta table.

Builds that once used 7 for api_call_count left databases at 7 without
reasoning_content (#14097); add-if-missing covers them.
"""

from hermes_store._migrations import _ops

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None


def upgrade() -> None:
    _ops.add_column("messages", "reasoning_content", "TEXT")
    _ops.execute(
        """CREATE TABLE IF NOT EXISTS state_meta (
    key TEXT PRIMARY KEY,
    value TEXT
)"""
    )
    _ops.set_version(7)


def downgrade() -> None:
    _ops.refuse_if_rows("state_meta")
    _ops.drop_table("state_meta")
    _ops.drop_columns("messages", {"reasoning_content": None})
    _ops.lower_version(6)
