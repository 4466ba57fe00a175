"""v1: schema_version, sessions, messages, their indexes and the L1 FTS5 index (on
PostgreSQL: the generated tsvector column over content and its GIN index)."""

from hermes_store._migrations import _fts_layouts as fts
from hermes_store._migrations import _ops, _pg_search
from hermes_store.contract import FTS_TABLE, FTS_TRIGRAM_TABLE

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None

TABLES = (
    """CREATE TABLE IF NOT EXISTS schema_version (
    version INTEGER NOT NULL
)""",
    """CREATE TABLE IF NOT EXISTS sessions (
    id TEXT PRIMARY KEY,
    source TEXT NOT NULL,
    user_id TEXT,
    model TEXT,
    model_config TEXT,
    system_prompt TEXT,
    parent_session_id TEXT,
    started_at REAL NOT NULL,
    ended_at REAL,
    end_reason TEXT,
    message_count INTEGER DEFAULT 0,
    tool_call_count INTEGER DEFAULT 0,
    input_tokens INTEGER DEFAULT 0,
    output_tokens INTEGER DEFAULT 0,
    FOREIGN KEY (parent_session_id) REFERENCES sessions(id)
)""",
    """CREATE TABLE IF NOT EXISTS messages (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    session_id TEXT NOT NULL REFERENCES sessions(id),
    role TEXT NOT NULL,
    content TEXT,
    tool_call_id TEXT,
    tool_calls TEXT,
    tool_name TEXT,
    timestamp REAL NOT NULL,
    token_count INTEGER
)""",
)

INDEXES = (
    "CREATE INDEX IF NOT EXISTS idx_sessions_source ON sessions(source)",
    "CREATE INDEX IF NOT EXISTS idx_sessions_parent ON sessions(parent_session_id)",
    "CREATE INDEX IF NOT EXISTS idx_sessions_started ON sessions(started_at DESC)",
    "CREATE INDEX IF NOT EXISTS idx_messages_session ON messages(session_id, timestamp)",
)


def upgrade() -> None:
    _ops.run_all(TABLES)
    _ops.run_all(INDEXES)
    if _ops.is_postgresql():
        _ops.run_all(_pg_search.V1)
    elif not _ops.has_table(FTS_TABLE) and not _ops.fts_rebuilt_later():
        # When 0023 follows in this transaction it creates the v23 index itself: an L1
        # index made here would only be demoted by 0011, leaving fts_v22_trash_* tables
        # in a database that never held a legacy index.
        _ops.drop_triggers(fts.BASE_TRIGGERS)
        _ops.run_all(fts.L1_BASE)
        _ops.execute("INSERT INTO messages_fts(messages_fts) VALUES ('rebuild')")
    _ops.set_version(1)


def downgrade() -> None:
    for table in ("messages", "sessions"):
        _ops.refuse_if_rows(table)
    if _ops.is_postgresql():
        for table in ("messages", "sessions", "schema_version"):
            _ops.drop_table(table)
        return
    _ops.drop_triggers(fts.ALL_TRIGGERS)
    _ops.execute(f"DROP VIEW IF EXISTS {fts.TRIGRAM_VIEW}")
    for table in (FTS_TRIGRAM_TABLE, FTS_TABLE, "messages", "sessions", "schema_version"):
        _ops.drop_table(table)
    # what is left of a demoted legacy index is hermes-store's too; base holds nothing
    for table in _ops.trash_tables():
        _ops.drop_table(table)
