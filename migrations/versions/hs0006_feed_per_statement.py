"""hermes-store's own: turn leases bounded by what their grant asked, and (PostgreSQL)
the change feed captured per statement.

- `hermes_store_turns.ttl`: the seconds the last grant or renewal asked for. A process
  whose clock runs ahead writes an expiry that far ahead; a lease is judged to expire at
  most `ttl` seconds after it is read, so such a lease ends within its ttl of the first
  contender seeing it (which writes the bound back). NULL on leases granted before this
  revision: those are bounded by the longest ttl a grant may ask (86,400 s).

No v23 object changes and `schema_version` stays 23.
"""

from hermes_store._migrations import _ops
from hermes_store.contract import TURNS_TABLE, TURNS_TTL_COLUMN

revision = "hs0006"
down_revision = "hs0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    real = "DOUBLE PRECISION" if _ops.is_postgresql() else "REAL"
    _ops.add_column(TURNS_TABLE, TURNS_TTL_COLUMN, real)


def downgrade() -> None:
    # the bound only shortens leases; dropping it loses no session data
    if TURNS_TTL_COLUMN in _ops.columns(TURNS_TABLE):
        _ops.execute(f'ALTER TABLE "{TURNS_TABLE}" DROP COLUMN "{TURNS_TTL_COLUMN}"')
