"""A normalised description of a SQLite schema, for golden-schema tests and `check`.

Column order, the text layout of CREATE statements and the order of rows in
sqlite_master are not part of the contract (spec/README.md, Authority 1); names,
declared types, NOT NULL, defaults, keys, foreign keys, index columns/order/uniqueness/
partial conditions, views, triggers and FTS definitions are.
"""

from __future__ import annotations

import difflib
import json
import re
from typing import Any

from sqlalchemy import Connection

from .adoption import VERSION_TABLE


def normalise_sql(sql: str) -> str:
    sql = re.sub(r"/\*.*?\*/", " ", sql, flags=re.S)
    sql = re.sub(r"\s+", " ", sql).strip()
    sql = re.sub(r"\(\s+", "(", sql)
    sql = re.sub(r"\s+\)", ")", sql)
    sql = re.sub(r"\s*,\s*", ", ", sql)
    return sql.rstrip(";")


def snapshot(conn: Connection) -> dict[str, Any]:
    rows = conn.exec_driver_sql(
        "SELECT type, name, tbl_name, sql FROM sqlite_master ORDER BY type, name"
    ).all()
    tables: dict[str, Any] = {}
    virtual: dict[str, str] = {}
    indexes: dict[str, Any] = {}
    views: dict[str, str] = {}
    triggers: dict[str, str] = {}
    for kind, name, table, sql in rows:
        if name.startswith("sqlite_") and kind != "index" or name == VERSION_TABLE:
            continue
        if kind == "table" and sql and sql.upper().startswith("CREATE VIRTUAL TABLE"):
            virtual[name] = normalise_sql(sql)
        elif kind == "table":
            tables[name] = _table(conn, name, sql or "")
        elif kind == "index":
            if table == VERSION_TABLE:
                continue
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
