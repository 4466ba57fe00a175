"""hermes-store's own: hermes_store_idempotency_keys, the keys of appends made with an
`idempotency_key` (a retried append returns the first call's ids and stores nothing).

The first revision of the project's own after the upstream chain. It touches no v23
table and writes no `schema_version` (that number stays the upstream 23): the original
ignores a table it does not know, and deletes the rows here with their session through
the foreign key's cascade, as it does `session_model_usage`'s.
"""

from hermes_store._migrations import _ops
from hermes_store.contract import IDEMPOTENCY_TABLE

revision = "hs0001"
down_revision = "0023"
branch_labels = None
depends_on = None

# (session_id, key) is the key: keys are the caller's, so one chat's "turn-1" never
# answers for another's; the key's first column also serves the cascade's lookups.
CREATE = f"""CREATE TABLE IF NOT EXISTS {IDEMPOTENCY_TABLE} (
    session_id TEXT NOT NULL REFERENCES sessions(id) ON DELETE CASCADE,
    key TEXT NOT NULL,
    message_ids TEXT NOT NULL,
    created_at REAL NOT NULL,
    PRIMARY KEY (session_id, key)
)"""


def upgrade() -> None:
    _ops.execute(CREATE)


def downgrade() -> None:
    # The keys only let retries find their first call; dropping them loses no message.
    _ops.drop_table(IDEMPOTENCY_TABLE)
