"""v23: FTS storage layout 1 (external content over content, tool_name and tool_calls;
a trigram index over non-tool rows through a view; triggers gated by the rebuild
markers), and (23L) compression_ineffective_count, pinned, display_kind and
display_metadata.

A legacy index is replaced inside this transaction by empty v23 tables plus the markers
`fts_rebuild_high_water` = MAX(id) and `fts_rebuild_progress` = 0: the O(1) half of the
original's `optimize-storage`. The legacy tables are not dropped here (a DROP frees every
page of a possibly multi-gigabyte index under the write lock): they are demoted, their
`sqlite_master` rows deleted and their shadow tables renamed to `fts_v22_trash_*`
(`_ops.demote_fts_tables`). The backfill and the teardown of that trash run afterwards
in chunks of at most 500 ids / rows per write transaction (`hermes-store fts backfill`,
or the end of `hermes-store upgrade`), so other processes keep writing meanwhile. Until
the backfill finishes, new rows are indexed live by the gated triggers and search tops
up the pending range with a LIKE scan, exactly as the original does.
"""

from hermes_store._migrations import _fts_layouts as fts
from hermes_store._migrations import _ops, _pg_search
from hermes_store.contract import (
    FTS_CJK_TABLE,
    FTS_CJK_TRIGGERS,
    FTS_TABLE,
    FTS_TRIGRAM_TABLE,
    META_FTS_CJK_STALE,
    META_FTS_OPTIMIZE_AVAILABLE,
    META_FTS_STORAGE_VERSION,
)
from hermes_store.contract import META_FTS_HIGH_WATER as HIGH_WATER
from hermes_store.contract import META_FTS_PROGRESS as PROGRESS
from hermes_store.errors import MigrationError

revision = "0023"
down_revision = "0022"
branch_labels = None
depends_on = None


SESSIONS = (
    ("compression_ineffective_count", "INTEGER NOT NULL DEFAULT 0"),
    ("pinned", "INTEGER NOT NULL DEFAULT 0"),
)
MESSAGES = (("display_kind", "TEXT"), ("display_metadata", "TEXT"))


def _v23_tables_present() -> bool:
    return fts.layout(_ops.object_sql) == "v23"


def _start_backfill() -> None:
    """Mark every existing row as not yet indexed; rows written from now on are above H."""
    high_water = _ops.scalar("SELECT COALESCE(MAX(id), 0) FROM messages")
    if high_water:
        _ops.set_meta(HIGH_WATER, str(high_water))
        _ops.set_meta(PROGRESS, "0")
    else:
        _ops.delete_meta(HIGH_WATER, PROGRESS)


def _replace_legacy_layout() -> None:
    _ops.drop_triggers(fts.ALL_TRIGGERS)
    _ops.execute(f"DROP VIEW IF EXISTS {fts.TRIGRAM_VIEW}")
    _ops.demote_fts_tables((FTS_TABLE, FTS_TRIGRAM_TABLE))
    _ops.drop_table(FTS_TRIGRAM_TABLE)  # only a non-FTS table of that name is left
    _ops.drop_table(FTS_TABLE)
    _ops.run_all(fts.V23)
    _start_backfill()
    _ops.delete_meta(META_FTS_OPTIMIZE_AVAILABLE)


def _repair_v23_layout() -> None:
    """v23 tables whose triggers went missing (or markers half-written) may miss rows:
    empty both indexes and backfill them again rather than trust them."""
    missing = [name for name in fts.ALL_TRIGGERS if not _ops.has_trigger(name)]
    pending_without_progress = _ops.get_meta(HIGH_WATER) is not None and (
        _ops.get_meta(PROGRESS) is None
    )
    if not missing and not pending_without_progress:
        return
    _ops.drop_triggers(fts.ALL_TRIGGERS)
    _ops.run_all(s for s in fts.V23 if s.startswith("CREATE TRIGGER"))
    _ops.execute("INSERT INTO messages_fts(messages_fts) VALUES ('delete-all')")
    _ops.execute("INSERT INTO messages_fts_trigram(messages_fts_trigram) VALUES ('delete-all')")
    _start_backfill()


def upgrade() -> None:
    _ops.add_columns("sessions", SESSIONS)
    _ops.add_columns("messages", MESSAGES)
    if _ops.is_postgresql():
        _ops.run_all(_pg_search.V23_TRIGRAM)
        _ops.set_meta(META_FTS_STORAGE_VERSION, "1")
        _ops.set_version(23)
        return
    if _ops.has_table(FTS_CJK_TABLE):
        # hermes-store does not load the cjk_unicode61 tokenizer; without it every INSERT
        # into messages would fail. Do what the original does: mark stale, then detach.
        _ops.set_meta(META_FTS_CJK_STALE, "1")
        _ops.drop_triggers(FTS_CJK_TRIGGERS)
    if _v23_tables_present():
        _repair_v23_layout()
    else:
        _replace_legacy_layout()
    if _ops.get_meta(HIGH_WATER) is None and not _ops.trash_tables():
        _ops.set_meta(META_FTS_STORAGE_VERSION, "1")
        _ops.delete_meta(META_FTS_OPTIMIZE_AVAILABLE)
    _ops.set_version(23)


def downgrade() -> None:
    if _ops.has_table(FTS_CJK_TABLE):
        raise MigrationError(
            "downgrade below 0023 is not possible while messages_fts_cjk exists "
            "(the optional CJK index of the v23 layout)"
        )
    _ops.drop_columns("sessions", {name: "0" for name, _ in SESSIONS})
    _ops.drop_columns("messages", {name: None for name, _ in MESSAGES})
    if _ops.is_postgresql():
        _ops.run_all(_pg_search.V23_TRIGRAM_DOWN)
        _ops.delete_meta(META_FTS_STORAGE_VERSION)
        _ops.lower_version(22)
        return
    _ops.drop_triggers(fts.ALL_TRIGGERS)
    _ops.execute(f"DROP VIEW IF EXISTS {fts.TRIGRAM_VIEW}")
    _ops.drop_table(FTS_TRIGRAM_TABLE)
    _ops.drop_table(FTS_TABLE)
    _ops.run_all(fts.L3)
    _ops.run_all(fts.L3_BACKFILL)
    _ops.delete_meta(META_FTS_STORAGE_VERSION, HIGH_WATER, PROGRESS, META_FTS_OPTIMIZE_AVAILABLE)
    _ops.lower_version(22)
