"""hermes-store's own (PostgreSQL): the one-call append stamps a message that comes
without a time of its own after it holds the session's row lock.

`hermes_store_append_message` (hs0005) stored the time its caller read before sending
the call, so an append that waited for another writer's row lock was stamped before the
appends that committed during the wait: ids and timestamps disagreed across processes.
A NULL `p_timestamp` now stands for the server's clock read once the row lock is held
(epoch seconds, double precision, as the column has always held); a time the caller
gives is stored as given. Everything else in the function is as in hs0005. On one
server the stamps of appends to a session rise with their ids, whatever the clients'
clocks or the time between a client reading its clock and the server running the call
(a client's time moved on by the measured wait was tried: the client's work between
reading its clock and the call reaching the server, a few milliseconds under load, was
still left out). The server's clock is already the one PostgreSQL judges turn leases by.
SQLite is unchanged: its append reads the time under the write lock.

Downgrade with the writers stopped: a process that opened its store at hs0009 sends
NULL for a time it leaves to the function, which hs0005's function would store into a
NOT NULL column (every such append fails until the process restarts).

No v23 object changes and `schema_version` stays 23.
"""

import importlib

from hermes_store._migrations import _ops
from hermes_store.contract import APPEND_BUSY, APPEND_CLOSED, APPEND_FUNCTION, APPEND_MISSING

revision = "hs0009"
down_revision = "hs0008"
branch_labels = None
depends_on = None

#: The columns the function inserts after session_id, in its parameters' order, with
#: their PostgreSQL types, as in hs0005 (the function keeps its signature).
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
#: the inserted values: the timestamp read after the row lock where the caller gave none
_VALUES = ", ".join(
    "COALESCE(p_timestamp, EXTRACT(EPOCH FROM clock_timestamp())::float8)"
    if name == "timestamp"
    else f"p_{name}"
    for name, _kind in APPEND_COLUMNS
)
# The lease is judged as in hs0005: at the client's `p_at` plus the time this call
# waited for the session's row lock (leases are written by the clients' clocks).
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
    if _ops.is_postgresql():
        _ops.execute(PG_APPEND)


def downgrade() -> None:
    if _ops.is_postgresql():
        # hs0005's function, which stores the time its caller gives
        hs0005 = importlib.import_module("hermes_store._migrations.versions.hs0005_session_reads")
        _ops.execute(hs0005.PG_APPEND)
