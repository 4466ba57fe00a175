"""hermes-store's own: the change feed records an UPDATE of a session only when it
changed a value.

hs0002's triggers `hermes_store_feed_session_update` (AFTER UPDATE OF the descriptive
columns, kind 'session.updated') and `hermes_store_feed_session_usage` (AFTER UPDATE OF
the token and cost totals, kind 'usage.updated') fired for every UPDATE naming one of
their columns, also one that set the values the row already held: the feed then said a
session changed when nothing had, and its row gave a commit that changed nothing a page
to write (on SQLite a journal and its fsyncs). Hermes sets several of these columns to
the value they hold on every turn. Each trigger now has a WHEN that is true only when at
least one of its own columns differs between the old and the new row, NULL-safe (SQLite
`IS NOT`, PostgreSQL `IS DISTINCT FROM`); its column list, kind, action and function are
as before. An UPDATE that leaves every one of a trigger's columns as it was records
nothing; one that changes any records one change, as before.

An UPDATE of messages or of `session_model_usage` rows still records every row it
names: on PostgreSQL those triggers run per statement (hs0006), whose WHEN cannot read
the rows, so skipping unchanged rows would join the old and new transition tables on
every updating statement; on SQLite a WHEN would have to list every column of the table
(a later revision adding one would have to extend it, or changes of that column would
go unrecorded).

No v23 object changes and `schema_version` stays 23.
"""

import importlib

from hermes_store._migrations import _ops
from hermes_store.contract import CHANGES_TABLE, FEED_OBJECT_PREFIX

revision = "hs0010"
down_revision = "hs0009"
branch_labels = None
depends_on = None

hs0002 = importlib.import_module("hermes_store._migrations.versions.hs0002_change_feed_and_turns")

#: (trigger name suffix as in hs0002, kind, the columns named by its UPDATE OF)
SESSION_UPDATE_CAPTURES = (
    ("session_update", "session.updated", hs0002.SESSION_COLUMNS),
    ("session_usage", "usage.updated", hs0002.USAGE_COLUMNS),
)
#: hs0002's per-row capture of a session (its body as redefined by hs0006)
PG_CAPTURE_SESSION = f"{FEED_OBJECT_PREFIX}capture_session"


def changed(columns: tuple[str, ...], *, postgresql: bool) -> str:
    """A condition true when at least one of `columns` differs between OLD and NEW,
    a NULL on one side and a value on the other counting as a difference."""
    different = "IS DISTINCT FROM" if postgresql else "IS NOT"
    return " OR ".join(f"OLD.{c} {different} NEW.{c}" for c in columns)


def _sqlite_trigger(name: str, kind: str, columns: tuple[str, ...], when: bool) -> str:
    # hs0002's statement, with the WHEN between the table and BEGIN
    condition = f" WHEN {changed(columns, postgresql=False)}" if when else ""
    return (
        f"CREATE TRIGGER IF NOT EXISTS {FEED_OBJECT_PREFIX}{name} AFTER UPDATE OF "
        f"{', '.join(columns)} ON sessions{condition} "
        f"BEGIN INSERT INTO {CHANGES_TABLE} (kind, session_id, message_id, at) "
        f"VALUES ('{kind}', NEW.id, NULL, {hs0002.SQLITE_NOW}); END"
    )


def _pg_trigger(name: str, kind: str, columns: tuple[str, ...], when: bool) -> str:
    condition = f"WHEN ({changed(columns, postgresql=True)}) " if when else ""
    return (
        f"CREATE TRIGGER {FEED_OBJECT_PREFIX}{name} AFTER UPDATE OF {', '.join(columns)} "
        f"ON sessions FOR EACH ROW {condition}EXECUTE FUNCTION {PG_CAPTURE_SESSION}('{kind}')"
    )


def _recreate(*, when: bool) -> None:
    postgresql = _ops.is_postgresql()
    for name, kind, columns in SESSION_UPDATE_CAPTURES:
        trigger = FEED_OBJECT_PREFIX + name
        if postgresql:
            _ops.execute(f"DROP TRIGGER IF EXISTS {trigger} ON sessions")
            _ops.execute(_pg_trigger(name, kind, columns, when))
        else:
            _ops.drop_triggers((trigger,))
            _ops.execute(_sqlite_trigger(name, kind, columns, when))


def upgrade() -> None:
    _recreate(when=True)


def downgrade() -> None:
    # hs0002's triggers: every UPDATE naming one of their columns is recorded again
    _recreate(when=False)
