"""Small idempotent building blocks the revisions share.

Every structural step is add-if-missing, because one upstream version number shipped with
several shapes (spec/history.md section 5): a revision must work whether the item it adds
is already there or not. Data migrations are gated by the upstream `schema_version`
number, exactly as the original gates them. Nothing here imports the ORM models.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

import sqlalchemy as sa
from alembic import op

from hermes_store.errors import MigrationError

FTS_ATTR = "hermes_fts_rebuilt_later"
HOME_ATTR = "hermes_home"


def bind() -> sa.Connection:
    return op.get_bind()


def execute(sql: str, params: dict[str, object] | None = None) -> sa.CursorResult[object]:
    return bind().execute(sa.text(sql), params or {})


def scalar(sql: str, params: dict[str, object] | None = None) -> object:
    return execute(sql, params).scalar()


def has_table(name: str) -> bool:
    return (
        scalar(
            "SELECT 1 FROM sqlite_master WHERE type IN ('table', 'view') AND name = :n",
            {"n": name},
        )
        is not None
    )


def object_sql(name: str) -> str | None:
    value = scalar("SELECT sql FROM sqlite_master WHERE name = :n", {"n": name})
    return None if value is None else str(value)


def columns(table: str) -> dict[str, dict[str, object]]:
    rows = execute(f'PRAGMA table_info("{table}")').mappings().all()
    return {str(r["name"]): dict(r) for r in rows}


def primary_key(table: str) -> list[str]:
    cols = sorted((c for c in columns(table).values() if c["pk"]), key=lambda c: int(c["pk"]))  # type: ignore[call-overload]
    return [str(c["name"]) for c in cols]


def has_index(name: str) -> bool:
    return (
        scalar("SELECT 1 FROM sqlite_master WHERE type = 'index' AND name = :n", {"n": name})
        is not None
    )


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
            keep += f' AND "{name}" IS NOT {default}'
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
    return bool(config is not None and config.attributes.get(FTS_ATTR))


def hermes_home() -> Path:
    """Where this database's gateway files live (set by hermes_store.migrate), else the
    process's $HERMES_HOME."""
    config = op.get_context().config
    home = config.attributes.get(HOME_ATTR) if config is not None else None
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
    updates = [f"{c} = {c} + excluded.{c}" for c in counters]
    updates += [
        "cost_status = COALESCE(excluded.cost_status, cost_status)",
        "cost_source = COALESCE(excluded.cost_source, cost_source)",
        "first_seen = COALESCE(MIN(first_seen, excluded.first_seen), first_seen, "
        "excluded.first_seen)",
        "last_seen = COALESCE(MAX(last_seen, excluded.last_seen), last_seen, excluded.last_seen)",
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
    return (
        scalar("SELECT 1 FROM sqlite_master WHERE type = 'trigger' AND name = :n", {"n": name})
        is not None
    )


def trash_tables() -> list[str]:
    rows = execute(
        "SELECT name FROM sqlite_master WHERE type = 'table' AND name LIKE 'fts\\_v22\\_trash\\_%' "
        "ESCAPE '\\'"
    ).scalars()
    return [str(r) for r in rows]
