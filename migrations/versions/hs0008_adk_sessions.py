"""hermes-store's own: the tables behind the Google ADK session service
(`hermes_store.integrations.adk`).

- `hermes_store_adk_sessions`: an ADK session keyed as ADK keys it (app_name, user_id,
  id), with its session-scoped state (a JSON object), its times and a revision that grows
  with every event appended (what stale-session detection compares). Its events are the
  messages of the hermes-store session `session_id` names, so they are searched, followed
  by the change feed and copied like any message; the row goes with that session
  (`ON DELETE CASCADE`), also when the original Hermes code deletes it.
- `hermes_store_adk_app_states`, `hermes_store_adk_user_states`: the state ADK shares
  between the sessions of an app (`app:` keys) and of a user (`user:` keys).

No v23 object changes and `schema_version` stays 23.
"""

from hermes_store._migrations import _ops
from hermes_store.contract import (
    ADK_APP_STATES_TABLE,
    ADK_SESSIONS_TABLE,
    ADK_USER_STATES_TABLE,
    TRASH_ROWS_TABLE,
)
from hermes_store.errors import MigrationError

revision = "hs0008"
down_revision = "hs0007"
branch_labels = None
depends_on = None

CREATE_SESSIONS = f"""CREATE TABLE IF NOT EXISTS {ADK_SESSIONS_TABLE} (
    app_name TEXT NOT NULL,
    user_id TEXT NOT NULL,
    id TEXT NOT NULL,
    session_id TEXT NOT NULL UNIQUE REFERENCES sessions(id) ON DELETE CASCADE,
    state TEXT NOT NULL,
    created_at REAL NOT NULL,
    updated_at REAL NOT NULL,
    revision INTEGER NOT NULL,
    PRIMARY KEY (app_name, user_id, id)
)"""
CREATE_APP_STATES = f"""CREATE TABLE IF NOT EXISTS {ADK_APP_STATES_TABLE} (
    app_name TEXT PRIMARY KEY,
    state TEXT NOT NULL,
    updated_at REAL NOT NULL
)"""
CREATE_USER_STATES = f"""CREATE TABLE IF NOT EXISTS {ADK_USER_STATES_TABLE} (
    app_name TEXT NOT NULL,
    user_id TEXT NOT NULL,
    state TEXT NOT NULL,
    updated_at REAL NOT NULL,
    PRIMARY KEY (app_name, user_id)
)"""
TABLES = (ADK_SESSIONS_TABLE, ADK_APP_STATES_TABLE, ADK_USER_STATES_TABLE)


def upgrade() -> None:
    for sql in (CREATE_SESSIONS, CREATE_APP_STATES, CREATE_USER_STATES):
        _ops.execute(sql)


def downgrade() -> None:
    # The state lives only here (the events stay messages): refuse rather than lose it.
    for table in TABLES:
        _ops.refuse_if_rows(table)
    # nor while the trash (hs0007) holds an ADK session: its restore needs this table
    if _ops.has_table(TRASH_ROWS_TABLE):
        held = _ops.scalar(
            f"SELECT COUNT(*) FROM {TRASH_ROWS_TABLE} "  # noqa: S608 (frozen names)
            f"WHERE table_name = '{ADK_SESSIONS_TABLE}'"
        )
        if held:
            raise MigrationError(
                f"downgrade would lose data: the trash ({TRASH_ROWS_TABLE}) holds {held} "
                f"row(s) of {ADK_SESSIONS_TABLE}, which a restore could not write back; "
                "restore or empty those trash entries first, or stay at this revision"
            )
    for table in TABLES:
        _ops.drop_table(table)
