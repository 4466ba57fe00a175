"""v5: cache/reasoning token counters and billing fields on sessions."""

from hermes_store._migrations import _ops

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None

COLUMNS = (
    ("cache_read_tokens", "INTEGER DEFAULT 0"),
    ("cache_write_tokens", "INTEGER DEFAULT 0"),
    ("reasoning_tokens", "INTEGER DEFAULT 0"),
    ("billing_provider", "TEXT"),
    ("billing_base_url", "TEXT"),
    ("billing_mode", "TEXT"),
    ("estimated_cost_usd", "REAL"),
    ("actual_cost_usd", "REAL"),
    ("cost_status", "TEXT"),
    ("cost_source", "TEXT"),
    ("pricing_version", "TEXT"),
)


def upgrade() -> None:
    _ops.add_columns("sessions", COLUMNS)
    _ops.set_version(5)


def downgrade() -> None:
    _ops.drop_columns(
        "sessions", {name: ("0" if "DEFAULT 0" in decl else None) for name, decl in COLUMNS}
    )
    _ops.lower_version(4)
