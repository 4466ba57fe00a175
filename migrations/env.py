"""Alembic environment for hermes-store.

The engine comes from hermes_store.engine (same pragmas, explicit BEGIN IMMEDIATE). A run
is one transaction: foreign keys are switched off on the driver connection before BEGIN
(a PRAGMA inside a transaction does nothing), every revision runs, foreign keys are
checked, and only then is anything committed. A second process that starts an upgrade
meanwhile waits on the write lock and then finds the database at head.

URL: `-x url=...`, else HERMES_STORE_URL, else $HERMES_HOME/state.db.
"""

from __future__ import annotations

from alembic import context
from sqlalchemy import Connection

from hermes_store import migrate
from hermes_store.engine import make_engine, write_connection
from hermes_store.models import metadata

config = context.config


def _command() -> str:
    named = config.attributes.get("hermes_command")
    if named:
        return str(named)
    cmd_opts = config.cmd_opts
    cmd = getattr(cmd_opts, "cmd", None)
    if cmd:
        return str(getattr(cmd[0], "__name__", ""))
    return ""


def _run(connection: Connection) -> None:
    command = _command()
    context.configure(
        connection=connection,
        target_metadata=metadata,
        version_table=migrate.VERSION_TABLE,
        include_object=migrate.include_object,
        include_name=migrate.include_name,
        transactional_ddl=True,
        transaction_per_migration=False,
        compare_type=True,
        compare_server_default=True,
        process_revision_directives=migrate.process_revision_directives,
    )
    run = context.get_context()
    with migrate.migration_run(connection, run, config, adopt=command == "upgrade"):
        context.run_migrations()


def run_migrations_online() -> None:
    connection = config.attributes.get("connection")
    if connection is not None:
        _run(connection)
        return
    url = context.get_x_argument(as_dictionary=True).get("url")
    engine = make_engine(url)
    try:
        with write_connection(engine) as conn:
            _run(conn)
    finally:
        engine.dispose()


if context.is_offline_mode():
    raise SystemExit("hermes-store migrations run online only (they inspect the database)")
run_migrations_online()
