"""hermes-store's own: turn leases bounded by what their grant asked, and (PostgreSQL)
the change feed captured per statement.

- `hermes_store_turns.ttl`: the seconds the last grant or renewal asked for. A process
  whose clock runs ahead writes an expiry that far ahead; a lease is judged to expire at
  most `ttl` seconds after it is read, so such a lease ends within its ttl of the first
  contender seeing it (which writes the bound back). NULL on leases granted before this
  revision: those are bounded by the longest ttl a grant may ask (86,400 s).
- PostgreSQL: the feed's capture triggers on inserts and deletes of sessions, messages
  and usage rows, and on updates of messages and usage rows, run once per statement and
  read the statement's rows from its transition table (one INSERT ... SELECT), instead
  of once per row. The updates of a session's columns stay per row: a trigger with a
  column list (UPDATE OF ...) cannot have a transition table. The first change a
  statement captures is marked (`stamps`, a new column of the pending table), and only
  a marked row queues the deferred numbering trigger (a constraint trigger's WHEN is
  judged at once, so the other rows queue nothing): the work at commit is per statement
  too. The pending table becomes UNLOGGED: its rows never outlive their transaction.
  Positions, kinds and the commit order are as in hs0002; SQLite is unchanged (one
  writer, AUTOINCREMENT).

No v23 object changes and `schema_version` stays 23.
"""

from hermes_store._migrations import _ops
from hermes_store.contract import (
    CHANGES_PENDING_TABLE,
    CHANGES_TABLE,
    FEED_CHANNEL,
    FEED_LAST_POSITION,
    FEED_OBJECT_PREFIX,
    FEED_PENDING_STAMPS_COLUMN,
    FEED_RETENTION_ROWS,
    FEED_STAMP_TRIGGER,
    FEED_STATE_TABLE,
    FEED_TRIM_EVERY,
    FEED_TRIMMED_THROUGH,
    TURNS_TABLE,
    TURNS_TTL_COLUMN,
)

revision = "hs0006"
down_revision = "hs0005"
branch_labels = None
depends_on = None

STAMPS = FEED_PENDING_STAMPS_COLUMN
AT = "EXTRACT(EPOCH FROM clock_timestamp())"
PENDING_COLUMNS = f"{CHANGES_PENDING_TABLE} (kind, session_id, message_id, at, {STAMPS})"

# (function, the session id and message id of a row, the order of a statement's rows:
# message ids grow in the order rows are inserted; sessions and usage rows keep the
# order the statement wrote them in, as the transition table holds them (per-row
# triggers and SQLite capture them in that order))
ROW_FUNCTIONS = {
    f"{FEED_OBJECT_PREFIX}capture_session_rows": ("id, NULL", None),
    f"{FEED_OBJECT_PREFIX}capture_message_rows": ("session_id, id", "id"),
    f"{FEED_OBJECT_PREFIX}capture_usage_rows": ("session_id, NULL", None),
}
# (trigger name suffix as in hs0002, table, event, kind, transition table, function)
STATEMENT_CAPTURES = (
    ("session_insert", "sessions", "INSERT", "session.created", "NEW",
     f"{FEED_OBJECT_PREFIX}capture_session_rows"),
    ("session_delete", "sessions", "DELETE", "session.deleted", "OLD",
     f"{FEED_OBJECT_PREFIX}capture_session_rows"),
    ("message_insert", "messages", "INSERT", "message.appended", "NEW",
     f"{FEED_OBJECT_PREFIX}capture_message_rows"),
    ("message_update", "messages", "UPDATE", "message.updated", "NEW",
     f"{FEED_OBJECT_PREFIX}capture_message_rows"),
    ("message_delete", "messages", "DELETE", "message.deleted", "OLD",
     f"{FEED_OBJECT_PREFIX}capture_message_rows"),
    ("usage_insert", "session_model_usage", "INSERT", "usage.updated", "NEW",
     f"{FEED_OBJECT_PREFIX}capture_usage_rows"),
    ("usage_update", "session_model_usage", "UPDATE", "usage.updated", "NEW",
     f"{FEED_OBJECT_PREFIX}capture_usage_rows"),
)  # fmt: skip
# hs0002's per-row capture of sessions, kept for the UPDATE OF triggers (column lists)
ROW_CAPTURE_SESSION = f"{FEED_OBJECT_PREFIX}capture_session"
STAMP_FUNCTION = f"{FEED_OBJECT_PREFIX}stamp"


def _statement_function(values: str, order: str | None) -> str:
    window, ordered = ("()", "") if order is None else (f"(ORDER BY {order})", f" ORDER BY {order}")

    def capture(rows: str) -> str:
        return (
            f"INSERT INTO {PENDING_COLUMNS} SELECT TG_ARGV[0], {values}, {AT}, "  # noqa: S608
            f"row_number() OVER {window} = 1 FROM {rows}{ordered}"
        )

    return (
        "RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
        f"IF TG_OP = 'DELETE' THEN {capture('hs_old')}; ELSE {capture('hs_new')}; END IF; "
        "RETURN NULL; END $$"
    )


# hs0002's row capture of a session (UPDATE OF ...: one row per call), marked
ROW_SESSION = (
    f"CREATE OR REPLACE FUNCTION {ROW_CAPTURE_SESSION}() RETURNS trigger LANGUAGE plpgsql "
    f"AS $$ BEGIN INSERT INTO {PENDING_COLUMNS} VALUES (TG_ARGV[0], NEW.id, NULL, {AT}, "
    "true); RETURN NULL; END $$"
)

# Runs at commit, once per marked row (one per capturing statement); the first call of
# a transaction moves all of its rows, the others find their row gone. The counter
# row's lock orders the commits.
STAMP = f"""CREATE OR REPLACE FUNCTION {STAMP_FUNCTION}() RETURNS trigger
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


def _pg_upgrade() -> None:
    # Rows live there only inside their transaction (the numbering at commit moves them
    # into the feed), so the table needs no WAL: a crash loses only rows whose
    # transaction never committed. The feed itself stays logged.
    _ops.execute(f"ALTER TABLE {CHANGES_PENDING_TABLE} SET UNLOGGED")
    _ops.add_column(CHANGES_PENDING_TABLE, STAMPS, "BOOLEAN NOT NULL DEFAULT false")
    for function, (values, order) in ROW_FUNCTIONS.items():
        _ops.execute(
            f"CREATE OR REPLACE FUNCTION {function}() {_statement_function(values, order)}"
        )
    _ops.execute(ROW_SESSION)
    _ops.execute(STAMP)
    for name, table, event, kind, side, function in STATEMENT_CAPTURES:
        trigger = FEED_OBJECT_PREFIX + name
        _ops.execute(f"DROP TRIGGER IF EXISTS {trigger} ON {table}")
        _ops.execute(
            f"CREATE TRIGGER {trigger} AFTER {event} ON {table} "
            f"REFERENCING {side} TABLE AS hs_{side.lower()} FOR EACH STATEMENT "
            f"EXECUTE FUNCTION {function}('{kind}')"
        )
    _ops.execute(f"DROP TRIGGER IF EXISTS {FEED_STAMP_TRIGGER} ON {CHANGES_PENDING_TABLE}")
    _ops.execute(
        f"CREATE CONSTRAINT TRIGGER {FEED_STAMP_TRIGGER} AFTER INSERT ON "
        f"{CHANGES_PENDING_TABLE} DEFERRABLE INITIALLY DEFERRED FOR EACH ROW "
        f"WHEN (NEW.{STAMPS}) EXECUTE FUNCTION {STAMP_FUNCTION}()"
    )


def _pg_downgrade() -> None:
    import importlib

    _ops.execute(f"ALTER TABLE {CHANGES_PENDING_TABLE} SET LOGGED")

    hs0002 = importlib.import_module(
        "hermes_store._migrations.versions.hs0002_change_feed_and_turns"
    )
    for function, values in hs0002.PG_CAPTURE_FUNCTIONS.items():
        _ops.execute(f"CREATE OR REPLACE FUNCTION {function}() {hs0002._pg_capture(values)}")
    function_of = {
        "sessions": f"{FEED_OBJECT_PREFIX}capture_session",
        "messages": f"{FEED_OBJECT_PREFIX}capture_message",
        "session_model_usage": f"{FEED_OBJECT_PREFIX}capture_usage",
    }
    for name, table, event, kind, *_ in STATEMENT_CAPTURES:
        trigger = FEED_OBJECT_PREFIX + name
        _ops.execute(f"DROP TRIGGER IF EXISTS {trigger} ON {table}")
        _ops.execute(
            f"CREATE TRIGGER {trigger} AFTER {event} ON {table} FOR EACH ROW "
            f"EXECUTE FUNCTION {function_of[table]}('{kind}')"
        )
    _ops.execute(hs0002.PG_STAMP)
    _ops.execute(f"DROP TRIGGER IF EXISTS {FEED_STAMP_TRIGGER} ON {CHANGES_PENDING_TABLE}")
    _ops.execute(
        f"CREATE CONSTRAINT TRIGGER {FEED_STAMP_TRIGGER} AFTER INSERT ON "
        f"{CHANGES_PENDING_TABLE} DEFERRABLE INITIALLY DEFERRED FOR EACH ROW "
        f"EXECUTE FUNCTION {STAMP_FUNCTION}()"
    )
    for function in ROW_FUNCTIONS:
        _ops.execute(f"DROP FUNCTION IF EXISTS {function}()")
    _ops.execute(f"ALTER TABLE {CHANGES_PENDING_TABLE} DROP COLUMN IF EXISTS {STAMPS}")


def upgrade() -> None:
    real = "DOUBLE PRECISION" if _ops.is_postgresql() else "REAL"
    _ops.add_column(TURNS_TABLE, TURNS_TTL_COLUMN, real)
    if _ops.is_postgresql():
        _pg_upgrade()


def downgrade() -> None:
    if _ops.is_postgresql():
        _pg_downgrade()
    # the bound only shortens leases; dropping it loses no session data
    if TURNS_TTL_COLUMN in _ops.columns(TURNS_TABLE):
        _ops.execute(f'ALTER TABLE "{TURNS_TABLE}" DROP COLUMN "{TURNS_TTL_COLUMN}"')
