"""v10: a trigram FTS5 index for substring and CJK search (the v10 bump build's form:
external content over messages.content), filled from existing messages."""

from hermes_store._migrations import _fts_layouts as fts
from hermes_store._migrations import _ops, _pg_search
from hermes_store.contract import FTS_TRIGRAM_TABLE

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None


def upgrade() -> None:
    if _ops.is_postgresql():
        _ops.run_all(_pg_search.V10_TRIGRAM)
    elif not _ops.has_table(FTS_TRIGRAM_TABLE) and not _ops.fts_rebuilt_later():
        # (when 0023 follows in this transaction, 0011 would only demote this table again)
        _ops.drop_triggers(fts.TRIGRAM_TRIGGERS)
        _ops.run_all(fts.L1_TRIGRAM)
        if _ops.data_migration_due(10):
            _ops.execute(
                "INSERT INTO messages_fts_trigram(messages_fts_trigram) VALUES ('rebuild')"
            )
    _ops.set_version(10)


def downgrade() -> None:
    if _ops.is_postgresql():
        _ops.run_all(_pg_search.V10_TRIGRAM_DOWN)
        _ops.lower_version(9)
        return
    _ops.drop_triggers(fts.TRIGRAM_TRIGGERS)
    _ops.drop_table(FTS_TRIGRAM_TABLE)
    _ops.lower_version(9)
