"""Small idempotent building blocks the revisions share.

Every structural step is add-if-missing, because one upstream version number shipped with
several shapes (docs/reference/history.md section 5): a revision must work whether the item it adds
is already there or not. Data migrations are gated by the upstream `schema_version`
number, exactly as the original gates them. Nothing here imports the ORM models.

One tree serves both dialects. The frozen SQL is written in SQLite's words; what differs
on PostgreSQL (column types of CREATE TABLE / ADD COLUMN, the catalogue questions) is
answered by the backend's class in `_dialects`. Everything FTS5 is SQLite-only: a
revision that touches FTS5 takes its PostgreSQL branch from `_pg_search`.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

import sqlalchemy as sa
from alembic import op

from hermes_store._migrations._dialects import Ops, for_connection
from hermes_store.contract import (
    FTS5_SHADOW_SUFFIXES,
    FTS_REBUILT_LATER_ATTR,
    FTS_TRASH_PREFIX,
    HERMES_HOME_ATTR,
)
from hermes_store.errors import MigrationError


def bind() -> sa.Connection:
    return op.get_bind()


def dialect() -> Ops:
    return for_connection(bind())


def is_postgresql() -> bool:
    return dialect().name == "postgresql"


def execute(sql: str, params: dict[str, object] | None = None) -> sa.CursorResult[object]:
    return bind().execute(sa.text(dialect().render(sql)), params or {})


def scalar(sql: str, params: dict[str, object] | None = None) -> object:
    return execute(sql, params).scalar()


def has_table(name: str) -> bool:
    return dialect().has_table(bind(), name)


def object_sql(name: str) -> str | None:
    """The CREATE statement SQLite keeps for an object (None on PostgreSQL)."""
    return dialect().object_sql(bind(), name)


def columns(table: str) -> dict[str, dict[str, object]]:
    """name -> {"name", "notnull", "pk"} (the PRAGMA table_info fields used here)."""
    return dialect().columns(bind(), table)


def primary_key(table: str) -> list[str]:
    cols = sorted((c for c in columns(table).values() if c["pk"]), key=lambda c: int(c["pk"]))  # type: ignore[call-overload]
    return [str(c["name"]) for c in cols]


def has_index(name: str) -> bool:
    return dialect().has_index(bind(), name)


def add_column(table: str, name: str, decl: str) -> None:
    """`ALTER TABLE ... ADD COLUMN` unless the column exists (in whatever form)."""
    if name not in columns(table):
        execute(f'ALTER TABLE "{table}" ADD COLUMN "{name}" {decl}')


def add_columns(table: str, decls: Iterable[tuple[str, str]]) -> None:
    for name, decl in decls:
        add_column(table, name, decl)


def create_index(sql: str) -> None:
    """`sql` must be a `CREATE [UNIQUE] INDEX IF NOT EXISTS` statement."""
    execute(sql)


def drop_index(name: str) -> None:
    execute(f'DROP INDEX IF EXISTS "{name}"')


def drop_columns(table: str, defaults: dict[str, str | None]) -> None:
    """Drop columns for a downgrade, refusing if any row holds a value worth keeping.

    `defaults` maps each column to the SQL literal of its default (None: NULL), which is
    the only value a downgrade may throw away.
    """
    present = columns(table)
    for name, default in defaults.items():
        if name not in present:
            continue
        keep = f'"{name}" IS NOT NULL'
        if default is not None:
            keep += f' AND "{name}" <> {default}'
        rows = scalar(f'SELECT COUNT(*) FROM "{table}" WHERE {keep}')  # noqa: S608 (frozen names)
        if rows:
            raise MigrationError(
                f"downgrade would lose data: {rows} row(s) of {table}.{name} hold values; "
                f"export them first (hermes-store sessions export) or stay at this revision"
            )
    for name in defaults:
        if name in present:
            execute(f'ALTER TABLE "{table}" DROP COLUMN "{name}"')


def refuse_if_rows(table: str) -> None:
    if has_table(table):
        rows = scalar(f'SELECT COUNT(*) FROM "{table}"')  # noqa: S608 (frozen names)
        if rows:
            raise MigrationError(
                f"downgrade would lose data: table {table} holds {rows} row(s); "
                f"export them first or stay at this revision"
            )


def drop_table(name: str) -> None:
    execute(f'DROP TABLE IF EXISTS "{name}"')


def stored_version() -> int:
    """The upstream number in `schema_version`, 0 when there is none yet."""
    if not has_table("schema_version"):
        return 0
    value = scalar("SELECT MAX(version) FROM schema_version")
    return int(value) if value is not None else 0  # type: ignore[call-overload]


def data_migration_due(version: int) -> bool:
    """True when the original would run the data block of `version` (stored < version)."""
    return stored_version() < version


def set_version(version: int) -> None:
    """Raise `schema_version` to `version` (never lower it: adopted files may be ahead)."""
    if scalar("SELECT COUNT(*) FROM schema_version") == 0:
        execute("INSERT INTO schema_version (version) VALUES (:v)", {"v": version})
    else:
        execute("UPDATE schema_version SET version = :v WHERE version < :v", {"v": version})


def lower_version(version: int) -> None:
    """For downgrades: set every row (the original updates without WHERE)."""
    execute("UPDATE schema_version SET version = :v", {"v": version})


def fts_rebuilt_later() -> bool:
    """True when this run goes on to revision 0023, which replaces every legacy FTS index:
    an intermediate layout then need not be filled (that would hold the write lock for
    minutes on a large file, only to be thrown away)."""
    ctx = op.get_context()
    config = ctx.config
    return bool(config is not None and config.attributes.get(FTS_REBUILT_LATER_ATTR))


def hermes_home() -> Path:
    """Where this database's gateway files live (set by hermes_store.migrate), else the
    process's $HERMES_HOME."""
    config = op.get_context().config
    home = config.attributes.get(HERMES_HOME_ATTR) if config is not None else None
    if home:
        return Path(str(home))
    from hermes_store.config import hermes_home as default_home

    return default_home()


def drop_triggers(names: Iterable[str]) -> None:
    for name in names:
        execute(f'DROP TRIGGER IF EXISTS "{name}"')


def run_all(statements: Iterable[str]) -> None:
    for sql in statements:
        execute(sql)


USAGE_COUNTERS = (
    "api_call_count",
    "input_tokens",
    "output_tokens",
    "cache_read_tokens",
    "cache_write_tokens",
    "reasoning_tokens",
    "estimated_cost_usd",
    "actual_cost_usd",
)


def merge_usage_rows(source: str, *, with_task: bool) -> None:
    """Add the rows of `source` (any historical form of session_model_usage) into the
    live table: NULL keys become '' (the v20 bump build stored NULL base URLs, which broke
    the original's own v22 copy), counters of colliding keys are summed, first_seen keeps
    the earliest, last_seen the latest. Rows of sessions that no longer exist cannot be
    kept under the foreign key and are reported."""
    present = columns(source)

    def col(name: str, default: str) -> str:
        return f'COALESCE("{name}", {default})' if name in present else default

    keys = ["session_id", "model", "billing_provider", "billing_base_url", "billing_mode"]
    exprs = [
        '"session_id"',
        col("model", "'unknown'"),
        col("billing_provider", "''"),
        col("billing_base_url", "''"),
        col("billing_mode", "''"),
    ]
    if with_task:
        keys.append("task")
        exprs.append(col("task", "''"))
    counters = [c for c in USAGE_COUNTERS]
    exprs += [col(c, "0") for c in counters]
    extras = [c for c in ("cost_status", "cost_source", "first_seen", "last_seen")]
    exprs += [f'"{c}"' if c in present else "NULL" for c in extras]
    target = keys + counters + extras
    orphans = scalar(
        f'SELECT COUNT(*) FROM "{source}" WHERE session_id NOT IN (SELECT id FROM sessions)'  # noqa: S608
    )
    if orphans:
        import logging

        logging.getLogger("hermes_store.migrations").warning(
            "%s: %d usage row(s) of deleted sessions not carried over", source, orphans
        )
    least, greatest = dialect().least, dialect().greatest
    t = "session_model_usage"
    updates = [f"{c} = {t}.{c} + excluded.{c}" for c in counters]
    updates += [
        f"cost_status = COALESCE(excluded.cost_status, {t}.cost_status)",
        f"cost_source = COALESCE(excluded.cost_source, {t}.cost_source)",
        f"first_seen = COALESCE({least}({t}.first_seen, excluded.first_seen), {t}.first_seen, "
        "excluded.first_seen)",
        f"last_seen = COALESCE({greatest}({t}.last_seen, excluded.last_seen), {t}.last_seen, "
        "excluded.last_seen)",
    ]
    execute(
        f"INSERT INTO session_model_usage ({', '.join(target)}) "  # noqa: S608 (frozen names)
        f'SELECT {", ".join(exprs)} FROM "{source}" '
        f"WHERE session_id IN (SELECT id FROM sessions) "
        f"ON CONFLICT ({', '.join(keys)}) DO UPDATE SET {', '.join(updates)}"
    )


def set_meta(key: str, value: str) -> None:
    execute(
        "INSERT INTO state_meta (key, value) VALUES (:k, :v) "
        "ON CONFLICT (key) DO UPDATE SET value = excluded.value",
        {"k": key, "v": value},
    )


def delete_meta(*keys: str) -> None:
    for key in keys:
        execute("DELETE FROM state_meta WHERE key = :k", {"k": key})


def get_meta(key: str) -> str | None:
    value = scalar("SELECT value FROM state_meta WHERE key = :k", {"k": key})
    return None if value is None else str(value)


def has_trigger(name: str) -> bool:
    return dialect().has_trigger(bind(), name)


def _free_trash_name(shadow: str) -> str:
    """`fts_v22_trash_<shadow>`, or with a numeric suffix when an earlier, unfinished
    demotion left a table of that name (every `fts_v22_trash_*` table is torn down)."""
    name = f"{FTS_TRASH_PREFIX}{shadow}"
    number = 1
    while has_table(name):
        number += 1
        name = f"{FTS_TRASH_PREFIX}{shadow}_{number}"
    return name


def demote_fts_tables(names: Iterable[str]) -> list[str]:
    """Take FTS5 virtual tables out of the schema in O(1), inside the caller's transaction:
    the original's demotion (docs/reference/schema.md 5.5 step 2). A `DROP TABLE` of a large FTS
    table frees every page of its shadow tables while holding the write lock, for as long
    as that takes on a multi-gigabyte index (#65798; docs/benchmarks.md); instead the
    virtual table's `sqlite_master` row is deleted under `PRAGMA writable_schema`, and its
    shadow tables, now plain tables, are renamed to `fts_v22_trash_<name>`. The chunked
    teardown (hermes_store.search.maintenance, at most 500 rows per write transaction)
    empties and drops them later.

    Before that, a SAVEPOINT makes FTS5 flush what it still holds in memory for this
    transaction (pending index data, the totals record); otherwise it would write that at
    COMMIT through the old table names, which by then belong to the new tables.
    `writable_schema=RESET` switches editing off and reloads this connection's schema; the
    renames and CREATEs that follow bump the schema cookie, so other connections reload
    theirs. Where SQLite refuses to edit `sqlite_master` (SQLITE_DBCONFIG_DEFENSIVE), the
    tables are dropped instead: slow, but the same result. Returns the trash tables made.
    """
    virtual = [
        name
        for name in names
        if (object_sql(name) or "").lstrip().upper().startswith("CREATE VIRTUAL TABLE")
    ]
    if not virtual:
        return []
    # which shadow tables exist depends on the options: `_content` only for inline
    # tables, `_docsize` unless columnsize=0
    shadows = [
        f"{name}_{suffix}"
        for name in virtual
        for suffix in FTS5_SHADOW_SUFFIXES
        if has_table(f"{name}_{suffix}")
    ]
    execute("SAVEPOINT hermes_fts_demote")
    execute("RELEASE hermes_fts_demote")
    marks = ", ".join(f"'{name}'" for name in virtual)
    try:
        execute("PRAGMA writable_schema=ON")
        try:
            execute(
                f"DELETE FROM sqlite_master WHERE type = 'table' AND name IN ({marks})"  # noqa: S608
            )
        finally:
            execute("PRAGMA writable_schema=RESET")
    except sa.exc.OperationalError as exc:
        import logging

        logging.getLogger("hermes_store.migrations").warning(
            "cannot edit sqlite_master here (%s): dropping %s instead (holds the write lock "
            "for as long as freeing their pages takes)",
            getattr(exc, "orig", exc),
            ", ".join(virtual),
        )
        for name in virtual:
            drop_table(name)
        return []
    trash = []
    for shadow in shadows:
        target = _free_trash_name(shadow)
        execute(f'ALTER TABLE "{shadow}" RENAME TO "{target}"')
        trash.append(target)
    return trash


def trash_tables() -> list[str]:
    return dialect().trash_tables(bind())
