"""hermes-store's own: the trash (sessions moved out of the live tables until restored or
emptied) and session tags.

- `hermes_store_trash`: one row per trashed session tree (a session with its
  descendants), with when it was trashed and when a prune may empty it.
- `hermes_store_trash_rows`: the trashed rows of sessions, messages, usage, tags and
  idempotency keys, one JSON object each, in the order a restore inserts them; they go
  with their entry (ON DELETE CASCADE). Kept as JSON text rather than shadow copies of the
  v23 tables, so that the trash needs no revision when upstream adds a column.
- `hermes_store_session_tags`: (session_id, tag), any number per session; the rows go
  with their session (ON DELETE CASCADE), also when the original Hermes deletes it.

No v23 object changes and `schema_version` stays 23: the original ignores these tables,
and a trashed session is not in its tables at all.
"""

from hermes_store._migrations import _ops
from hermes_store.contract import (
    TAGS_TABLE,
    TAGS_TAG_INDEX,
    TRASH_EXPIRES_INDEX,
    TRASH_ROWS_TABLE,
    TRASH_SESSION_INDEX,
    TRASH_TABLE,
)

revision = "hs0007"
down_revision = "hs0006"
branch_labels = None
depends_on = None

CREATE_TRASH = f"""CREATE TABLE IF NOT EXISTS {TRASH_TABLE} (
    id TEXT NOT NULL PRIMARY KEY,
    session_id TEXT NOT NULL,
    title TEXT,
    source TEXT,
    sessions INTEGER NOT NULL,
    messages INTEGER NOT NULL,
    trashed_at REAL NOT NULL,
    expires_at REAL NOT NULL
)"""
CREATE_TRASH_ROWS = f"""CREATE TABLE IF NOT EXISTS {TRASH_ROWS_TABLE} (
    trash_id TEXT NOT NULL REFERENCES {TRASH_TABLE}(id) ON DELETE CASCADE,
    seq INTEGER NOT NULL,
    table_name TEXT NOT NULL,
    data TEXT NOT NULL,
    PRIMARY KEY (trash_id, seq)
)"""
# (session_id, tag) is the key: the key's first column serves a session's tags and the
# cascade; the index on (tag, session_id) serves the --tag filters.
CREATE_TAGS = f"""CREATE TABLE IF NOT EXISTS {TAGS_TABLE} (
    session_id TEXT NOT NULL REFERENCES sessions(id) ON DELETE CASCADE,
    tag TEXT NOT NULL,
    PRIMARY KEY (session_id, tag)
)"""
INDEXES = (
    f"CREATE INDEX IF NOT EXISTS {TRASH_EXPIRES_INDEX} ON {TRASH_TABLE} (expires_at)",
    f"CREATE INDEX IF NOT EXISTS {TRASH_SESSION_INDEX} ON {TRASH_TABLE} (session_id)",
    f"CREATE INDEX IF NOT EXISTS {TAGS_TAG_INDEX} ON {TAGS_TABLE} (tag, session_id)",
)


def upgrade() -> None:
    _ops.execute(CREATE_TRASH)
    _ops.execute(CREATE_TRASH_ROWS)
    _ops.execute(CREATE_TAGS)
    for statement in INDEXES:
        _ops.create_index(statement)


def downgrade() -> None:
    # A downgrade refuses to drop trashed sessions (restore or empty them first) and
    # tags, which people typed and no other table holds (remove them first).
    _ops.refuse_if_rows(TRASH_TABLE)
    _ops.refuse_if_rows(TAGS_TABLE)
    _ops.drop_table(TRASH_ROWS_TABLE)
    _ops.drop_table(TRASH_TABLE)
    _ops.drop_table(TAGS_TABLE)
