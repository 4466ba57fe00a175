"""v4: the partial unique index on non-NULL titles.

Old builds could write duplicate titles; as in the original, the newest row (largest
rowid) keeps a duplicated title and the others are cleared before the index is created.
"""

import logging

from hermes_store._migrations import _ops

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None

log = logging.getLogger("hermes_store.migrations")

# PostgreSQL has no rowid; its rows are never older than hermes-store, so the larger
# id (then the later start) stands for "newest" there.
CLEAR_OLDER_DUPLICATES_PG = """
UPDATE sessions SET title = NULL
WHERE title IS NOT NULL
  AND EXISTS (SELECT 1 FROM sessions AS newer
              WHERE newer.title = sessions.title
                AND (newer.started_at, newer.id) > (sessions.started_at, sessions.id))
"""
CLEAR_OLDER_DUPLICATES = """
UPDATE sessions SET title = NULL
WHERE title IS NOT NULL
  AND EXISTS (SELECT 1 FROM sessions AS newer
              WHERE newer.title = sessions.title AND newer.rowid > sessions.rowid)
"""


def upgrade() -> None:
    if not _ops.has_index("idx_sessions_title_unique"):
        clear = CLEAR_OLDER_DUPLICATES_PG if _ops.is_postgresql() else CLEAR_OLDER_DUPLICATES
        cleared = _ops.execute(clear).rowcount
        if cleared:
            log.warning("cleared %d duplicate session title(s) (the newest kept each)", cleared)
        _ops.create_index(
            "CREATE UNIQUE INDEX IF NOT EXISTS idx_sessions_title_unique "
            "ON sessions(title) WHERE title IS NOT NULL"
        )
    _ops.set_version(4)


def downgrade() -> None:
    _ops.drop_index("idx_sessions_title_unique")
    _ops.lower_version(3)
