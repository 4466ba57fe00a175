"""hermes-store's own: what the per-turn reads walk instead of sorting or scanning.

- `hermes_store_messages_session_id` on messages(session_id, id): a conversation is read
  in id order, and the newest messages newest first, straight from this index (the v23
  indexes order a session's rows by timestamp, so a load sorted them all).
- `hermes_store_session_activity`: each session's last activity (its newest message's
  timestamp, else when it started), indexed, so a listing by last activity walks the
  most recently active sessions first instead of reading every session. Kept by
  triggers on `sessions` and `messages`, so the original Hermes code's writes keep it
  true as well: every trigger recomputes the value from the rows (`MAX(timestamp)` is
  one probe of the v23 index on (session_id, timestamp)), never adjusts it.
- On PostgreSQL, `hermes_store_append_message`: one append (the session's row lock, the
  compression lease, the session checks, the insert and the counters) in one call, which
  returns the new id and the transaction's marker for the commit-outcome check, so an
  append is BEGIN, this call and COMMIT instead of seven round trips.

No v23 object changes and `schema_version` stays 23; the snapshot comparison with the
reference schema leaves `hermes_store_*` objects out.
"""

from hermes_store._migrations import _ops
from hermes_store.contract import (
    ACTIVITY_INDEX,
    ACTIVITY_OBJECT_PREFIX,
    ACTIVITY_TABLE,
    APPEND_BUSY,
    APPEND_CLOSED,
    APPEND_FUNCTION,
    APPEND_MISSING,
    MESSAGES_SESSION_ID_INDEX,
)

revision = "hs0005"
down_revision = "hs0003"
branch_labels = None
depends_on = None

CREATE_INDEX = (
    f"CREATE INDEX IF NOT EXISTS {MESSAGES_SESSION_ID_INDEX} ON messages (session_id, id)"
)
CREATE_ACTIVITY = f"""CREATE TABLE IF NOT EXISTS {ACTIVITY_TABLE} (
    session_id TEXT PRIMARY KEY,
    last_active REAL NOT NULL
)"""
CREATE_ACTIVITY_INDEX = (
    f"CREATE INDEX IF NOT EXISTS {ACTIVITY_INDEX} ON {ACTIVITY_TABLE} (last_active)"
)


def _last_active(session_id: str) -> str:
    """The last activity of the session `session_id` (an SQL expression) names."""
    return (
        f"COALESCE((SELECT MAX(timestamp) FROM messages WHERE session_id = {session_id}),"
        f" (SELECT started_at FROM sessions WHERE id = {session_id}))"
    )


BACKFILL = (
    f"INSERT INTO {ACTIVITY_TABLE} (session_id, last_active)"
    f" SELECT s.id, {_last_active('s.id')} FROM sessions AS s"
)


def _refresh(session_id: str) -> str:
    return (
        f"UPDATE {ACTIVITY_TABLE} SET last_active = {_last_active(session_id)}"
        f" WHERE session_id = {session_id}"
    )


# --------------------------------------------------------------------------- SQLite

# A DELETE, then a plain INSERT: an outer statement's conflict clause (the original's
# INSERT OR IGNORE into sessions) overrides one given inside a trigger.
_INSERT_NEW = (
    f"INSERT INTO {ACTIVITY_TABLE} (session_id, last_active)"
    f" VALUES (NEW.id, {_last_active('NEW.id')});"
)
#: (name, event, body): the statements each trigger runs, OLD/NEW as SQLite names them.
SQLITE_TRIGGERS = (
    (
        "session_added",
        "AFTER INSERT ON sessions",
        f"DELETE FROM {ACTIVITY_TABLE} WHERE session_id = NEW.id; {_INSERT_NEW}",
    ),
    (
        "session_moved",
        "AFTER UPDATE OF id, started_at ON sessions",
        f"DELETE FROM {ACTIVITY_TABLE} WHERE session_id IN (OLD.id, NEW.id); {_INSERT_NEW}",
    ),
    (
        "session_deleted",
        "AFTER DELETE ON sessions",
        f"DELETE FROM {ACTIVITY_TABLE} WHERE session_id = OLD.id;",
    ),
    ("message_added", "AFTER INSERT ON messages", _refresh("NEW.session_id") + ";"),
    ("message_deleted", "AFTER DELETE ON messages", _refresh("OLD.session_id") + ";"),
    (
        "message_moved",
        "AFTER UPDATE OF session_id, timestamp ON messages",
        _refresh("OLD.session_id") + "; " + _refresh("NEW.session_id") + ";",
    ),
)


def _sqlite_upgrade() -> None:
    for name, event, body in SQLITE_TRIGGERS:
        _ops.execute(
            f"CREATE TRIGGER IF NOT EXISTS {ACTIVITY_OBJECT_PREFIX}{name} {event} "
            f"BEGIN {body} END"
        )


# --------------------------------------------------------------------------- PostgreSQL

PG_REFRESH_FUNCTION = ACTIVITY_OBJECT_PREFIX + "refresh"
PG_SESSIONS_FUNCTION = ACTIVITY_OBJECT_PREFIX + "sessions"
PG_MESSAGES_FUNCTION = ACTIVITY_OBJECT_PREFIX + "messages"
PG_REFRESH = f"""CREATE OR REPLACE FUNCTION {PG_REFRESH_FUNCTION}(sid text) RETURNS void
LANGUAGE sql AS $$
INSERT INTO {ACTIVITY_TABLE} (session_id, last_active)
SELECT s.id, {_last_active("s.id")} FROM sessions AS s WHERE s.id = sid
ON CONFLICT (session_id) DO UPDATE SET last_active = EXCLUDED.last_active
$$"""
PG_SESSIONS = f"""CREATE OR REPLACE FUNCTION {PG_SESSIONS_FUNCTION}() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP <> 'INSERT' THEN
        DELETE FROM {ACTIVITY_TABLE} WHERE session_id = OLD.id;
    END IF;
    IF TG_OP <> 'DELETE' THEN
        PERFORM {PG_REFRESH_FUNCTION}(NEW.id);
    END IF;
    RETURN NULL;
END
$$"""
PG_MESSAGES = f"""CREATE OR REPLACE FUNCTION {PG_MESSAGES_FUNCTION}() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP <> 'INSERT' THEN
        UPDATE {ACTIVITY_TABLE} SET last_active = {_last_active("OLD.session_id")}
        WHERE session_id = OLD.session_id;
    END IF;
    IF TG_OP <> 'DELETE' THEN
        UPDATE {ACTIVITY_TABLE} SET last_active = {_last_active("NEW.session_id")}
        WHERE session_id = NEW.session_id;
    END IF;
    RETURN NULL;
END
$$"""
# Deletes are handled once per statement: until the statement's transaction ends, the
# rows it deleted stay in idx_messages_session, so a per-row MAX(timestamp) would walk
# back over every row the statement already removed (quadratic in a session's size).
PG_MESSAGES_GONE_FUNCTION = ACTIVITY_OBJECT_PREFIX + "messages_gone"
PG_MESSAGES_GONE = f"""CREATE OR REPLACE FUNCTION {PG_MESSAGES_GONE_FUNCTION}()
RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    UPDATE {ACTIVITY_TABLE} AS a SET last_active = {_last_active("a.session_id")}
    WHERE a.session_id IN (SELECT DISTINCT gone.session_id FROM gone);
    RETURN NULL;
END
$$"""
#: (name, event, function, level)
PG_TRIGGERS = (
    ("session_added", "AFTER INSERT ON sessions", PG_SESSIONS_FUNCTION, "FOR EACH ROW"),
    (
        "session_moved",
        "AFTER UPDATE OF id, started_at ON sessions",
        PG_SESSIONS_FUNCTION,
        "FOR EACH ROW",
    ),
    ("session_deleted", "AFTER DELETE ON sessions", PG_SESSIONS_FUNCTION, "FOR EACH ROW"),
    ("message_added", "AFTER INSERT ON messages", PG_MESSAGES_FUNCTION, "FOR EACH ROW"),
    (
        "message_deleted",
        "AFTER DELETE ON messages",
        PG_MESSAGES_GONE_FUNCTION,
        "REFERENCING OLD TABLE AS gone FOR EACH STATEMENT",
    ),
    (
        "message_moved",
        "AFTER UPDATE OF session_id, timestamp ON messages",
        PG_MESSAGES_FUNCTION,
        "FOR EACH ROW",
    ),
)
PG_FUNCTIONS = (
    PG_MESSAGES_GONE_FUNCTION,
    PG_MESSAGES_FUNCTION,
    PG_SESSIONS_FUNCTION,
    PG_REFRESH_FUNCTION,
)


def _pg_upgrade() -> None:
    for sql in (PG_REFRESH, PG_SESSIONS, PG_MESSAGES, PG_MESSAGES_GONE):
        _ops.execute(sql)
    for name, event, function, level in PG_TRIGGERS:
        table = event.rsplit(" ", 1)[1]
        _ops.execute(f"DROP TRIGGER IF EXISTS {ACTIVITY_OBJECT_PREFIX}{name} ON {table}")
        _ops.execute(
            f"CREATE TRIGGER {ACTIVITY_OBJECT_PREFIX}{name} {event} {level} "
            f"EXECUTE FUNCTION {function}()"
        )


# --------------------------------------------------------------------------- one-call append

#: The columns the function inserts after session_id, in its parameters' order, with
#: their PostgreSQL types (as the v23 tables declare them there).
APPEND_COLUMNS = (
    ("role", "text"), ("content", "text"), ("tool_call_id", "text"), ("tool_calls", "text"),
    ("tool_name", "text"), ("effect_disposition", "text"),
    ("timestamp", "double precision"), ("token_count", "bigint"), ("finish_reason", "text"),
    ("reasoning", "text"), ("reasoning_content", "text"), ("reasoning_details", "text"),
    ("codex_reasoning_items", "text"), ("codex_message_items", "text"),
    ("platform_message_id", "text"), ("observed", "bigint"), ("active", "bigint"),
    ("compacted", "bigint"), ("api_content", "text"), ("display_kind", "text"),
    ("display_metadata", "text"),
)  # fmt: skip
_PARAMETERS = ", ".join(f"p_{name} {kind}" for name, kind in APPEND_COLUMNS)
_INSERTED = ", ".join(f'"{name}"' for name, _kind in APPEND_COLUMNS)
_VALUES = ", ".join(f"p_{name}" for name, _kind in APPEND_COLUMNS)
# Raised for the three refusals, told apart by their SQLSTATE (class HS: hermes-store's).
# The lease is judged at the client's `p_at` plus the time this call waited for the
# session's row lock, as an append that took the lock first and then read the clock.
PG_APPEND = f"""CREATE OR REPLACE FUNCTION {APPEND_FUNCTION}(
    p_session_id text, p_holder text, p_at double precision, p_tool_calls_added bigint,
    {_PARAMETERS}
) RETURNS TABLE (new_id bigint, transaction_id text, backend_pid integer, server_started text)
LANGUAGE plpgsql AS $$
DECLARE
    found_session boolean;
    session_ended_at double precision;
    session_end_reason text;
    lease_holder text;
    inserted bigint;
BEGIN
    SELECT s.ended_at, s.end_reason INTO session_ended_at, session_end_reason
    FROM sessions AS s WHERE s.id = p_session_id FOR UPDATE;
    found_session := FOUND;
    SELECT l.holder INTO lease_holder FROM compression_locks AS l
    WHERE l.session_id = p_session_id AND l.expires_at >
        p_at + EXTRACT(EPOCH FROM clock_timestamp() - statement_timestamp())::float8;
    IF lease_holder IS NOT NULL AND lease_holder IS DISTINCT FROM p_holder THEN
        RAISE EXCEPTION 'session % is being compressed by another writer', p_session_id
            USING ERRCODE = '{APPEND_BUSY}';
    END IF;
    IF NOT found_session THEN
        RAISE EXCEPTION 'session % not found', p_session_id USING ERRCODE = '{APPEND_MISSING}';
    END IF;
    IF session_ended_at IS NOT NULL AND session_end_reason = 'compression' THEN
        RAISE EXCEPTION 'session % was closed by compression', p_session_id
            USING ERRCODE = '{APPEND_CLOSED}';
    END IF;
    INSERT INTO messages (session_id, {_INSERTED}) VALUES (p_session_id, {_VALUES})
    RETURNING id INTO inserted;
    UPDATE sessions SET message_count = COALESCE(message_count, 0) + 1,
        tool_call_count = COALESCE(tool_call_count, 0) + p_tool_calls_added
    WHERE id = p_session_id;
    RETURN QUERY SELECT inserted, pg_current_xact_id_if_assigned()::text, pg_backend_pid(),
        pg_postmaster_start_time()::text;
END
$$"""


def upgrade() -> None:
    _ops.execute(CREATE_INDEX)
    _ops.execute(CREATE_ACTIVITY)
    if _ops.scalar(f"SELECT 1 FROM {ACTIVITY_TABLE} LIMIT 1") is None:
        _ops.execute(BACKFILL)
    _ops.execute(CREATE_ACTIVITY_INDEX)
    if _ops.is_postgresql():
        _pg_upgrade()
        _ops.execute(PG_APPEND)
    else:
        _sqlite_upgrade()


def downgrade() -> None:
    if _ops.is_postgresql():
        for name, event, _function, _level in PG_TRIGGERS:
            table = event.rsplit(" ", 1)[1]
            _ops.execute(f"DROP TRIGGER IF EXISTS {ACTIVITY_OBJECT_PREFIX}{name} ON {table}")
        for function in (*PG_FUNCTIONS, APPEND_FUNCTION):
            _ops.execute(f"DROP FUNCTION IF EXISTS {function}")
    else:
        _ops.drop_triggers(ACTIVITY_OBJECT_PREFIX + name for name, _e, _b in SQLITE_TRIGGERS)
    # derived from sessions and messages: dropping it loses nothing
    _ops.drop_table(ACTIVITY_TABLE)
    _ops.drop_index(MESSAGES_SESSION_ID_INDEX)
