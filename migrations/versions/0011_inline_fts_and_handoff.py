"""v11: both FTS indexes re-created inline over content, tool name and tool calls (L3,
whose delete triggers work, #16751), and (11L) the handoff columns on sessions."""

from hermes_store._migrations import _fts_layouts as fts
from hermes_store._migrations import _ops, _pg_search
from hermes_store.contract import FTS_TABLE, FTS_TRIGRAM_TABLE

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None

HANDOFF = (("handoff_state", "TEXT"), ("handoff_platform", "TEXT"), ("handoff_error", "TEXT"))


def _layout_is_l3_or_newer() -> bool:
    # L3 already, or the v23 layout (never go back to an older one)
    return fts.layout(_ops.object_sql) in ("L3", "v23")


def upgrade() -> None:
    _ops.add_columns("sessions", HANDOFF)
    if _ops.is_postgresql():
        _ops.run_all(_pg_search.V11)
    elif not _layout_is_l3_or_newer():
        _ops.drop_triggers(fts.ALL_TRIGGERS)
        if _ops.fts_rebuilt_later():
            # 0023 replaces the index in this same transaction: demote the old tables in
            # O(1) (torn down in chunks afterwards) rather than DROP a large L1 index under
            # the write lock, and leave the intermediate L3 tables out (0023 would only
            # demote them again); nothing between here and 0023 touches FTS.
            _ops.demote_fts_tables((FTS_TABLE, FTS_TRIGRAM_TABLE))
            _ops.drop_table(FTS_TRIGRAM_TABLE)
            _ops.drop_table(FTS_TABLE)
        else:
            _ops.drop_table(FTS_TRIGRAM_TABLE)
            _ops.drop_table(FTS_TABLE)
            _ops.run_all(fts.L3)
            _ops.run_all(fts.L3_BACKFILL)
    _ops.set_version(11)


def downgrade() -> None:
    _ops.drop_columns("sessions", {name: None for name, _ in HANDOFF})
    if _ops.is_postgresql():
        _ops.run_all(_pg_search.V11_DOWN)
        _ops.lower_version(10)
        return
    _ops.drop_triggers(fts.ALL_TRIGGERS)
    _ops.drop_table(FTS_TRIGRAM_TABLE)
    _ops.drop_table(FTS_TABLE)
    _ops.run_all(fts.L1_BASE)
    _ops.run_all(fts.L1_TRIGRAM)
    _ops.execute("INSERT INTO messages_fts(messages_fts) VALUES ('rebuild')")
    _ops.execute("INSERT INTO messages_fts_trigram(messages_fts_trigram) VALUES ('rebuild')")
    _ops.lower_version(10)
