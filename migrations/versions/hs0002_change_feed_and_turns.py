"""hermes-store's own: the change feed (hermes_store_changes and its triggers, the v1
views) and turn leases (hermes_store_turns).

No v23 table changes shape and `schema_version` stays 23. What the original sees on the
same file are triggers on `sessions`, `messages` and `session_model_usage` that insert one
row into `hermes_store_changes` per changed row, so writes of the original Hermes code
are in the feed as well as hermes-store's; and two views it never reads.

Order: SQLite has one writer at a time, so an AUTOINCREMENT position taken inside the
write transaction is in commit order. On PostgreSQL transactions commit in another order
than they take identity values, so the triggers write to `hermes_store_changes_pending`
and a constraint trigger deferred to commit moves a transaction's rows into the feed,
numbering them after the counter row it locks: the lock is held until the commit is
visible, so a reader who sees position n sees every position below it. The same step
sends a NOTIFY on FEED_CHANNEL with the last position.

Retention: whenever a position crosses a multiple of FEED_TRIM_EVERY, the changes older
than the newest `retention_rows` are deleted and `trimmed_through` moves up, in the same
transaction; cursors below it have expired.

The views name their columns, so a later revision that rebuilds `messages` or `sessions`
must recreate them (SQLite keeps a view that no longer compiles); a different column
list is a new view version beside this one.
"""

from hermes_store._migrations import _ops
from hermes_store.contract import (
    CHANGES_PENDING_TABLE,
    CHANGES_TABLE,
    FEED_CHANNEL,
    FEED_LAST_POSITION,
    FEED_OBJECT_PREFIX,
    FEED_RETENTION_ROWS,
    FEED_STATE_TABLE,
    FEED_TRIM_EVERY,
    FEED_TRIMMED_THROUGH,
    MESSAGES_VIEW_V1,
    SESSIONS_VIEW_V1,
    TURNS_TABLE,
)

revision = "hs0002"
down_revision = "hs0001"
branch_labels = None
depends_on = None

DEFAULT_RETENTION_ROWS = 1_000_000

# The columns of a session that describe it; the token and cost totals are usage, and
# message_count / tool_call_count follow from the message events.
SESSION_COLUMNS = (
    "source", "user_id", "session_key", "chat_id", "chat_type", "thread_id",
    "display_name", "origin_json", "expiry_finalized", "model", "model_config",
    "system_prompt", "parent_session_id", "started_at", "ended_at", "end_reason", "cwd",
    "git_branch", "git_repo_root", "billing_provider", "billing_base_url", "billing_mode",
    "title", "handoff_state", "handoff_platform", "handoff_error",
    "compression_failure_cooldown_until", "compression_failure_error",
    "compression_fallback_streak", "compression_ineffective_count", "profile_name",
    "rewind_count", "archived", "pinned",
)  # fmt: skip
USAGE_COLUMNS = (
    "input_tokens", "output_tokens", "cache_read_tokens", "cache_write_tokens",
    "reasoning_tokens", "estimated_cost_usd", "actual_cost_usd", "cost_status",
    "cost_source", "pricing_version", "api_call_count",
)  # fmt: skip

CREATE_CHANGES = f"""CREATE TABLE IF NOT EXISTS {CHANGES_TABLE} (
    position INTEGER PRIMARY KEY{{autoincrement}},
    kind TEXT NOT NULL,
    session_id TEXT NOT NULL,
    message_id INTEGER,
    at REAL NOT NULL
)"""
CREATE_STATE = f"""CREATE TABLE IF NOT EXISTS {FEED_STATE_TABLE} (
    name TEXT PRIMARY KEY,
    value INTEGER NOT NULL
)"""
# No foreign key to sessions: a token must keep growing for a session id that is deleted
# and made again, and a turn may be taken before its session's first row exists.
CREATE_TURNS = f"""CREATE TABLE IF NOT EXISTS {TURNS_TABLE} (
    session_id TEXT PRIMARY KEY,
    holder TEXT,
    token INTEGER NOT NULL,
    expires_at REAL NOT NULL
)"""
SEED_STATE = (
    f"INSERT INTO {FEED_STATE_TABLE} (name, value) VALUES "
    f"('{FEED_LAST_POSITION}', 0), ('{FEED_TRIMMED_THROUGH}', 0), "
    f"('{FEED_RETENTION_ROWS}', {DEFAULT_RETENTION_ROWS}) ON CONFLICT (name) DO NOTHING"
)

VIEW_SESSIONS = f"""CREATE VIEW {SESSIONS_VIEW_V1} AS SELECT
    id AS session_id, source, user_id, title, model, parent_session_id, started_at,
    ended_at, end_reason, message_count, tool_call_count, input_tokens, output_tokens,
    cache_read_tokens, cache_write_tokens, reasoning_tokens, estimated_cost_usd,
    actual_cost_usd, archived, pinned, cwd
FROM sessions"""
VIEW_MESSAGES = f"""CREATE VIEW {MESSAGES_VIEW_V1} AS SELECT
    id AS message_id, session_id, role, content, tool_name, tool_calls, tool_call_id,
    "timestamp", token_count, finish_reason, active, compacted
FROM messages"""

# (trigger name suffix, table, event, kind, row, the session id, the message id)
CAPTURES = (
    ("session_insert", "sessions", "INSERT", "session.created", "NEW", "id", None),
    ("session_update", "sessions", f"UPDATE OF {', '.join(SESSION_COLUMNS)}",
     "session.updated", "NEW", "id", None),
    ("session_usage", "sessions", f"UPDATE OF {', '.join(USAGE_COLUMNS)}",
     "usage.updated", "NEW", "id", None),
    ("session_delete", "sessions", "DELETE", "session.deleted", "OLD", "id", None),
    ("message_insert", "messages", "INSERT", "message.appended", "NEW", "session_id", "id"),
    ("message_update", "messages", "UPDATE", "message.updated", "NEW", "session_id", "id"),
    ("message_delete", "messages", "DELETE", "message.deleted", "OLD", "session_id", "id"),
    ("usage_insert", "session_model_usage", "INSERT", "usage.updated", "NEW", "session_id",
     None),
    ("usage_update", "session_model_usage", "UPDATE", "usage.updated", "NEW", "session_id",
     None),
)  # fmt: skip
TRIGGERS = tuple(FEED_OBJECT_PREFIX + c[0] for c in CAPTURES)
SQLITE_RETENTION_TRIGGER = FEED_OBJECT_PREFIX + "retention"
SQLITE_NOW = "((julianday('now') - 2440587.5) * 86400.0)"


def _sqlite_upgrade() -> None:
    for name, table, event, kind, row, session_col, message_col in CAPTURES:
        message = f"{row}.{message_col}" if message_col else "NULL"
        _ops.execute(
            f"CREATE TRIGGER IF NOT EXISTS {FEED_OBJECT_PREFIX}{name} AFTER {event} ON {table} "
            f"BEGIN INSERT INTO {CHANGES_TABLE} (kind, session_id, message_id, at) "
            f"VALUES ('{kind}', {row}.{session_col}, {message}, {SQLITE_NOW}); END"
        )
    _ops.execute(
        f"CREATE TRIGGER IF NOT EXISTS {SQLITE_RETENTION_TRIGGER} AFTER INSERT ON "
        f"{CHANGES_TABLE} WHEN NEW.position % {FEED_TRIM_EVERY} = 0 BEGIN "
        f"UPDATE {FEED_STATE_TABLE} SET value = MAX(value, NEW.position - (SELECT value FROM "
        f"{FEED_STATE_TABLE} WHERE name = '{FEED_RETENTION_ROWS}')) "
        f"WHERE name = '{FEED_TRIMMED_THROUGH}'; "
        f"DELETE FROM {CHANGES_TABLE} WHERE position <= (SELECT value FROM {FEED_STATE_TABLE} "
        f"WHERE name = '{FEED_TRIMMED_THROUGH}'); END"
    )


PG_CAPTURE_FUNCTIONS = {
    # one function per (row, session column, message column)
    f"{FEED_OBJECT_PREFIX}capture_session": "{row}.id, NULL",
    f"{FEED_OBJECT_PREFIX}capture_message": "{row}.session_id, {row}.id",
    f"{FEED_OBJECT_PREFIX}capture_usage": "{row}.session_id, NULL",
}
PG_STAMP_FUNCTION = FEED_OBJECT_PREFIX + "stamp"
PG_STAMP_TRIGGER = FEED_OBJECT_PREFIX + "stamp"


def _pg_capture(values: str) -> str:
    insert = (
        f"INSERT INTO {CHANGES_PENDING_TABLE} (kind, session_id, message_id, at) "
        "VALUES (TG_ARGV[0], {values}, EXTRACT(EPOCH FROM clock_timestamp()))"
    )
    new = insert.replace("{values}", values.replace("{row}", "NEW"))
    old = insert.replace("{values}", values.replace("{row}", "OLD"))
    return (
        "RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
        f"IF TG_OP = 'DELETE' THEN {old}; ELSE {new}; END IF; RETURN NULL; END $$"
    )


# Runs at commit, once per pending row; the first call of a transaction moves all of its
# rows, the others find theirs gone. The counter row's lock orders the commits.
PG_STAMP = f"""CREATE OR REPLACE FUNCTION {PG_STAMP_FUNCTION}() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    base BIGINT;
    moved BIGINT;
    keep BIGINT;
BEGIN
    IF NOT EXISTS (SELECT 1 FROM {CHANGES_PENDING_TABLE} WHERE id = NEW.id) THEN
        RETURN NULL;
    END IF;
    SELECT value INTO base FROM {FEED_STATE_TABLE}
        WHERE name = '{FEED_LAST_POSITION}' FOR UPDATE;
    WITH gone AS (
        DELETE FROM {CHANGES_PENDING_TABLE} RETURNING id, kind, session_id, message_id, at
    )
    INSERT INTO {CHANGES_TABLE} (position, kind, session_id, message_id, at)
    SELECT base + row_number() OVER (ORDER BY id), kind, session_id, message_id, at FROM gone;
    GET DIAGNOSTICS moved = ROW_COUNT;
    UPDATE {FEED_STATE_TABLE} SET value = base + moved WHERE name = '{FEED_LAST_POSITION}';
    IF (base + moved) / {FEED_TRIM_EVERY} > base / {FEED_TRIM_EVERY} THEN
        SELECT value INTO keep FROM {FEED_STATE_TABLE} WHERE name = '{FEED_RETENTION_ROWS}';
        UPDATE {FEED_STATE_TABLE} SET value = GREATEST(value, base + moved - keep)
            WHERE name = '{FEED_TRIMMED_THROUGH}';
        DELETE FROM {CHANGES_TABLE} WHERE position <= base + moved - keep;
    END IF;
    PERFORM pg_notify('{FEED_CHANNEL}', (base + moved)::text);
    RETURN NULL;
END $$"""


# SQLite never writes through a view without INSTEAD OF triggers; PostgreSQL writes
# through a simple view, so there an INSTEAD OF trigger refuses it.
PG_READ_ONLY_FUNCTION = FEED_OBJECT_PREFIX + "read_only_view"
PG_READ_ONLY = f"""CREATE OR REPLACE FUNCTION {PG_READ_ONLY_FUNCTION}() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'the view % is read-only: write through hermes-store', TG_TABLE_NAME
        USING ERRCODE = 'object_not_in_prerequisite_state';
END $$"""


def _pg_upgrade() -> None:
    _ops.execute(PG_READ_ONLY)
    for view in (SESSIONS_VIEW_V1, MESSAGES_VIEW_V1):
        _ops.execute(
            f"CREATE TRIGGER {view}_read_only INSTEAD OF INSERT OR UPDATE OR DELETE ON {view} "
            f"FOR EACH ROW EXECUTE FUNCTION {PG_READ_ONLY_FUNCTION}()"
        )
    _ops.execute(
        f"""CREATE TABLE IF NOT EXISTS {CHANGES_PENDING_TABLE} (
            id BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
            kind TEXT NOT NULL,
            session_id TEXT NOT NULL,
            message_id BIGINT,
            at DOUBLE PRECISION NOT NULL
        )"""
    )
    for function, values in PG_CAPTURE_FUNCTIONS.items():
        _ops.execute(f"CREATE OR REPLACE FUNCTION {function}() {_pg_capture(values)}")
    function_of = {
        "sessions": f"{FEED_OBJECT_PREFIX}capture_session",
        "messages": f"{FEED_OBJECT_PREFIX}capture_message",
        "session_model_usage": f"{FEED_OBJECT_PREFIX}capture_usage",
    }
    for name, table, event, kind, _row, _s, _m in CAPTURES:
        trigger = FEED_OBJECT_PREFIX + name
        _ops.execute(f"DROP TRIGGER IF EXISTS {trigger} ON {table}")
        _ops.execute(
            f"CREATE TRIGGER {trigger} AFTER {event} ON {table} FOR EACH ROW "
            f"EXECUTE FUNCTION {function_of[table]}('{kind}')"
        )
    _ops.execute(PG_STAMP)
    _ops.execute(f"DROP TRIGGER IF EXISTS {PG_STAMP_TRIGGER} ON {CHANGES_PENDING_TABLE}")
    _ops.execute(
        f"CREATE CONSTRAINT TRIGGER {PG_STAMP_TRIGGER} AFTER INSERT ON {CHANGES_PENDING_TABLE} "
        f"DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION {PG_STAMP_FUNCTION}()"
    )


def upgrade() -> None:
    postgresql = _ops.is_postgresql()
    _ops.execute(CREATE_CHANGES.format(autoincrement="" if postgresql else " AUTOINCREMENT"))
    _ops.execute(CREATE_STATE)
    _ops.execute(SEED_STATE)
    _ops.execute(CREATE_TURNS)
    for view, sql in ((SESSIONS_VIEW_V1, VIEW_SESSIONS), (MESSAGES_VIEW_V1, VIEW_MESSAGES)):
        _ops.execute(f"DROP VIEW IF EXISTS {view}")
        _ops.execute(sql)
    if postgresql:
        _pg_upgrade()
    else:
        _sqlite_upgrade()


def downgrade() -> None:
    # The feed and the leases are the project's own: dropping them loses no session data.
    if _ops.is_postgresql():
        for _name, table, *_ in CAPTURES:
            _ops.execute(f"DROP TRIGGER IF EXISTS {FEED_OBJECT_PREFIX}{_name} ON {table}")
        _ops.execute(f"DROP TABLE IF EXISTS {CHANGES_PENDING_TABLE}")
        for view in (SESSIONS_VIEW_V1, MESSAGES_VIEW_V1):
            _ops.execute(f"DROP VIEW IF EXISTS {view}")
        for function in (*PG_CAPTURE_FUNCTIONS, PG_STAMP_FUNCTION, PG_READ_ONLY_FUNCTION):
            _ops.execute(f"DROP FUNCTION IF EXISTS {function}()")
    else:
        _ops.drop_triggers((*TRIGGERS, SQLITE_RETENTION_TRIGGER))
    for view in (SESSIONS_VIEW_V1, MESSAGES_VIEW_V1):
        _ops.execute(f"DROP VIEW IF EXISTS {view}")
    for table in (TURNS_TABLE, FEED_STATE_TABLE, CHANGES_TABLE):
        _ops.drop_table(table)
