"""v6: reasoning columns on messages."""

from hermes_store._migrations import _ops

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None

COLUMNS = (
    ("reasoning", "TEXT"),
    ("reasoning_details", "TEXT"),
    ("codex_reasoning_items", "TEXT"),
)


def upgrade() -> None:
    _ops.add_columns("messages", COLUMNS)
    _ops.set_version(6)


def downgrade() -> None:
    _ops.drop_columns("messages", {name: None for name, _ in COLUMNS})
    _ops.lower_version(5)
