"""Alembic environment for hermes-store.

The engine comes from hermes_store.runtime.engine (same pragmas, explicit BEGIN IMMEDIATE). A run
is one transaction: foreign keys are switched off on the driver connection before BEGIN
(a PRAGMA inside a transaction does nothing), every revision runs, foreign keys are
checked, and only then is anything committed. A second process that starts an upgrade
meanwhile waits on the write lock and then finds the database at head.

URL: `-x url=...`, else HERMES_STORE_URL, else $HERMES_HOME/state.db.

Logging: run by the `alembic` command (a config file), the file's logging sections are
loaded, so the revisions applied are logged as Alembic users expect, and the run ends by
saying what is left to do (the FTS backfill). Run from Python (`hermes-store upgrade`,
`migrate.upgrade`: a Config built in code, no file), the caller's logging is left alone.
"""

from __future__ import annotations

import logging
from logging.config import fileConfig

from alembic import context
from sqlalchemy import Connection, Engine

from hermes_store import migrate
from hermes_store.config import resolve_url, sqlite_path
from hermes_store.models import metadata
from hermes_store.runtime.engine import make_engine, write_connection
from hermes_store.search.layout import fts_state

config = context.config
if config.config_file_name is not None:
    fileConfig(config.config_file_name, disable_existing_loggers=False)
log = logging.getLogger("hermes_store.migrate")


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
        _say_what_is_left(engine)
    finally:
        engine.dispose()


def _say_what_is_left(engine: Engine) -> None:
    """The alembic command migrates only: the chunked FTS backfill that `hermes-store
    upgrade` runs next is left, and `hermes-store check` fails until it is done."""
    if engine.dialect.name != "sqlite":
        return
    with engine.connect() as conn:  # deferred: looking takes no write lock
        state = fts_state(conn)
        conn.rollback()
    if state.layout != "v23" or not (state.backfill_pending or state.trash_tables):
        return
    path = sqlite_path(engine.url)
    where = str(path) if path is not None else str(resolve_url(engine.url))
    left = []
    if state.backfill_pending:
        left.append(
            f"{(state.high_water or 0) - (state.progress or 0)} message ids to index "
            f"(search scans them with LIKE until then)"
        )
    if state.trash_tables:
        left.append(f"{len(state.trash_tables)} legacy FTS tables to remove")
    log.warning(
        "the full-text index is not finished: %s; finish it with: "
        "hermes-store fts backfill --url '%s'",
        ", ".join(left),
        where,
    )


if context.is_offline_mode():
    raise SystemExit("hermes-store migrations run online only (they inspect the database)")
run_migrations_online()
