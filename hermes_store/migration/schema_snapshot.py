"""A normalised description of a SQLite schema, for golden-schema tests and `check`.

Column order, the text layout of CREATE statements and the order of rows in
sqlite_master are not part of the contract (docs/reference/README.md 2, rule 1); names,
declared types, NOT NULL, defaults, keys, foreign keys, index columns/order/uniqueness/
partial conditions, views, triggers and FTS definitions are.

The project's own tables (`hermes_store_*`: the Alembic version table, hs0001's keys) are
outside that contract, so a snapshot leaves them out unless asked for (`own_tables=True`;
the version table, which holds bookkeeping rather than a shape, always stays out).
"""

from __future__ import annotations

import difflib
import json
import re
from typing import Any

from sqlalchemy import Connection, text

from ..contract import OWN_TABLE_PREFIX, VERSION_TABLE
from ..runtime.backends import dialect_for


def normalise_sql(sql: str) -> str:
    sql = re.sub(r"/\*.*?\*/", " ", sql, flags=re.S)
    sql = re.sub(r"\s+", " ", sql).strip()
    sql = re.sub(r"\(\s+", "(", sql)
    sql = re.sub(r"\s+\)", ")", sql)
    sql = re.sub(r"\s*,\s*", ", ", sql)
    return sql.rstrip(";")


def _left_out(table: str, own_tables: bool, name: str = "") -> bool:
    """Whether objects of `table` (or an object itself, by `name`: the feed's triggers on
    the v23 tables and its views) stay out of a snapshot."""
    if table == VERSION_TABLE:
        return True
    own = table.startswith(OWN_TABLE_PREFIX) or name.startswith(OWN_TABLE_PREFIX)
    return not own_tables and own


def snapshot(conn: Connection, *, own_tables: bool = False) -> dict[str, Any]:
    rows = conn.exec_driver_sql(
        "SELECT type, name, tbl_name, sql FROM sqlite_master ORDER BY type, name"
    ).all()
    tables: dict[str, Any] = {}
    virtual: dict[str, str] = {}
    indexes: dict[str, Any] = {}
    views: dict[str, str] = {}
    triggers: dict[str, str] = {}
    for kind, name, table, sql in rows:
        if name.startswith("sqlite_") and kind != "index" or _left_out(table, own_tables, name):
            continue
        if kind == "table" and sql and sql.upper().startswith("CREATE VIRTUAL TABLE"):
            virtual[name] = normalise_sql(sql)
        elif kind == "table":
            tables[name] = _table(conn, name, sql or "")
        elif kind == "index":
            indexes[name] = _index(conn, name, table, sql)
        elif kind == "view":
            views[name] = normalise_sql(sql)
        elif kind == "trigger":
            triggers[name] = normalise_sql(sql)
    return {
        "tables": tables,
        "virtual_tables": virtual,
        "indexes": indexes,
        "views": views,
        "triggers": triggers,
    }


def _table(conn: Connection, name: str, sql: str) -> dict[str, Any]:
    cols = conn.exec_driver_sql(f'PRAGMA table_info("{name}")').mappings().all()
    fks = conn.exec_driver_sql(f'PRAGMA foreign_key_list("{name}")').mappings().all()
    return {
        "columns": {
            str(c["name"]): {
                "type": str(c["type"]).upper(),
                "notnull": int(c["notnull"]),
                "default": c["dflt_value"],
                "pk": int(c["pk"]),
            }
            for c in cols
        },
        "foreign_keys": sorted(
            f"{f['from']} -> {f['table']}({f['to']}) ON DELETE {f['on_delete']} "
            f"ON UPDATE {f['on_update']}"
            for f in fks
        ),
        "autoincrement": "AUTOINCREMENT" in sql.upper(),
    }


def _index(conn: Connection, name: str, table: str, sql: str | None) -> dict[str, Any]:
    info = conn.exec_driver_sql(f'PRAGMA index_xinfo("{name}")').mappings().all()
    key = [f"{r['name']}{' DESC' if r['desc'] else ''}" for r in info if r["key"]]
    unique = conn.exec_driver_sql(f'PRAGMA index_list("{table}")').mappings().all()
    is_unique = next((int(r["unique"]) for r in unique if r["name"] == name), 0)
    where = None
    if sql and re.search(r"\bWHERE\b", sql, flags=re.I):
        where = normalise_sql(re.split(r"\bWHERE\b", sql, maxsplit=1, flags=re.I)[1])
    return {"table": table, "columns": key, "unique": is_unique, "where": where}


def diff(expected: dict[str, Any], actual: dict[str, Any]) -> str:
    """A readable unified diff of two snapshots ('' when equal)."""
    a = json.dumps(expected, indent=1, sort_keys=True, ensure_ascii=False).splitlines()
    b = json.dumps(actual, indent=1, sort_keys=True, ensure_ascii=False).splitlines()
    return "\n".join(difflib.unified_diff(a, b, "expected", "actual", lineterm=""))


# --------------------------------------------------------------------------- text dumps
# The head schema of each dialect as committed text (tests/migrations/schema/*_head.sql), so that a
# change of the schema shows in review as a diff. Deterministic: objects by kind and
# name, columns by name (their order is not part of the contract), SQL normalised.


def dump_text(conn: Connection, *, own_tables: bool = False) -> str:
    """The schema behind `conn` as text: DDL-like, one object per block."""
    dialect = dialect_for(conn)
    if dialect.system_catalogues:
        blocks = _pg_blocks(conn, own_tables)
    else:
        blocks = _sqlite_blocks(snapshot(conn, own_tables=own_tables))
    left_out = VERSION_TABLE if own_tables else f"{OWN_TABLE_PREFIX}* tables"
    header = f"-- hermes-store schema ({dialect.name}), without {left_out}\n"
    return header + "\n".join(f"{block}\n" for block in blocks)


def _sqlite_blocks(snap: dict[str, Any]) -> list[str]:
    blocks = []
    for name, info in sorted(snap["tables"].items()):
        lines = []
        for col, c in sorted(info["columns"].items()):
            decl = f"    {col} {c['type']}".rstrip()
            if c["notnull"]:
                decl += " NOT NULL"
            if c["default"] is not None:
                decl += f" DEFAULT {c['default']}"
            lines.append(decl)
        keys = sorted((c["pk"], col) for col, c in info["columns"].items() if c["pk"])
        if keys:
            pk = ", ".join(col for _, col in keys)
            autoincrement = " AUTOINCREMENT" if info["autoincrement"] else ""
            lines.append(f"    PRIMARY KEY ({pk}){autoincrement}")
        lines += [f"    FOREIGN KEY {fk}" for fk in info["foreign_keys"]]
        blocks.append(f"CREATE TABLE {name} (\n" + ",\n".join(lines) + "\n);")
    for name, ix in sorted(snap["indexes"].items()):
        unique = "UNIQUE " if ix["unique"] else ""
        where = f" WHERE {ix['where']}" if ix["where"] else ""
        columns = ", ".join(ix["columns"])
        blocks.append(f"CREATE {unique}INDEX {name} ON {ix['table']} ({columns}){where};")
    for kind in ("virtual_tables", "views", "triggers"):
        blocks += [f"{sql};" for _, sql in sorted(snap[kind].items())]
    return blocks


def _pg_rows(conn: Connection, sql: str, **params: object) -> list[Any]:
    return list(conn.execute(text(sql), params))


def _pg_blocks(conn: Connection, own_tables: bool) -> list[str]:
    schema = str(conn.execute(text("SELECT current_schema()")).scalar())

    def local(sql: str) -> str:
        return normalise_sql(sql.replace(f"{schema}.", ""))

    blocks = [
        f"CREATE EXTENSION {name};"
        for (name,) in _pg_rows(
            conn, "SELECT extname FROM pg_extension WHERE extname <> 'plpgsql' ORDER BY 1"
        )
    ]
    tables = _pg_rows(
        conn,
        "SELECT c.oid, c.relname FROM pg_class c WHERE c.relkind IN ('r', 'p') "
        "AND c.relnamespace = current_schema()::regnamespace AND c.relname <> :version "
        "AND (:own OR left(c.relname, length(:prefix)) <> :prefix) ORDER BY c.relname",
        version=VERSION_TABLE,
        own=own_tables,
        prefix=OWN_TABLE_PREFIX,
    )
    for oid, name in tables:
        lines = []
        for col, type_, notnull, default, identity, generated in _pg_rows(
            conn,
            "SELECT a.attname, format_type(a.atttypid, a.atttypmod), a.attnotnull, "
            "pg_get_expr(d.adbin, d.adrelid), a.attidentity, a.attgenerated "
            "FROM pg_attribute a LEFT JOIN pg_attrdef d "
            "ON d.adrelid = a.attrelid AND d.adnum = a.attnum "
            "WHERE a.attrelid = :oid AND a.attnum > 0 AND NOT a.attisdropped "
            "ORDER BY a.attname",
            oid=oid,
        ):
            decl = f"    {col} {type_}"
            if generated:
                decl += f" GENERATED ALWAYS AS ({local(str(default))}) STORED"
            elif default is not None:
                decl += f" DEFAULT {local(str(default))}"
            if identity:
                decl += " GENERATED " + ("ALWAYS" if identity == "a" else "BY DEFAULT")
                decl += " AS IDENTITY"
            if notnull:
                decl += " NOT NULL"
            lines.append(decl)
        lines += [
            f"    CONSTRAINT {con} {local(definition)}"
            for con, definition in _pg_rows(
                conn,
                "SELECT conname, pg_get_constraintdef(oid) FROM pg_constraint "
                "WHERE conrelid = :oid ORDER BY conname",
                oid=oid,
            )
        ]
        blocks.append(f"CREATE TABLE {name} (\n" + ",\n".join(lines) + "\n);")
    blocks += [
        f"{local(definition)};"
        for (definition,) in _pg_rows(
            conn,
            "SELECT indexdef FROM pg_indexes WHERE schemaname = current_schema() "
            "AND tablename <> :version "
            "AND (:own OR left(tablename, length(:prefix)) <> :prefix) ORDER BY indexname",
            version=VERSION_TABLE,
            own=own_tables,
            prefix=OWN_TABLE_PREFIX,
        )
    ]
    blocks += [
        f"CREATE VIEW {name} AS {local(definition)}"
        for name, definition in _pg_rows(
            conn,
            "SELECT viewname, definition FROM pg_views WHERE schemaname = current_schema() "
            "AND (:own OR left(viewname, length(:prefix)) <> :prefix) ORDER BY viewname",
            own=own_tables,
            prefix=OWN_TABLE_PREFIX,
        )
    ]
    blocks += [
        f"{local(definition)};"
        for (definition,) in _pg_rows(
            conn,
            "SELECT pg_get_triggerdef(t.oid) FROM pg_trigger t JOIN pg_class c "
            "ON c.oid = t.tgrelid WHERE NOT t.tgisinternal "
            "AND c.relnamespace = current_schema()::regnamespace "
            "AND (:own OR left(t.tgname::text, length(:prefix)) <> :prefix) "
            "AND (:own OR left(c.relname::text, length(:prefix)) <> :prefix) ORDER BY t.tgname",
            own=own_tables,
            prefix=OWN_TABLE_PREFIX,
        )
    ]
    # functions of the schema's own; the members of an extension (pg_trgm's) are the
    # extension's. Their bodies stay as written (whitespace matters inside them).
    blocks += [
        definition.strip().replace(f"{schema}.", "")
        for (definition,) in _pg_rows(
            conn,
            "SELECT pg_get_functiondef(p.oid) FROM pg_proc p "
            "WHERE p.pronamespace = current_schema()::regnamespace AND NOT EXISTS ("
            "SELECT 1 FROM pg_depend d WHERE d.classid = 'pg_proc'::regclass "
            "AND d.objid = p.oid AND d.deptype = 'e') "
            "AND (:own OR left(p.proname::text, length(:prefix)) <> :prefix) ORDER BY p.proname",
            own=own_tables,
            prefix=OWN_TABLE_PREFIX,
        )
    ]
    return blocks
