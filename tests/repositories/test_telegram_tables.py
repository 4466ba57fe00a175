"""The Telegram topic tables have one definition (repositories/telegram.py): the
original's raw SQLite DDL and the Core `TABLES` that copy and PostgreSQL use must describe
the same columns, keys and defaults."""

from __future__ import annotations

import sqlite3

from sqlalchemy.dialects import sqlite

from hermes_store.repositories import telegram


def _raw_columns(table: str) -> dict[str, tuple[str, int, str | None, int]]:
    con = sqlite3.connect(":memory:")
    con.execute("CREATE TABLE sessions (id TEXT PRIMARY KEY)")
    con.execute(telegram.MODE_DDL)
    con.execute(telegram.BINDINGS_DDL)
    rows = con.execute(f"PRAGMA table_info('{table}')").fetchall()
    con.close()
    # cid, name, type, notnull, dflt_value, pk
    return {r[1]: (r[2].upper(), r[3] or r[5] > 0, r[4], r[5]) for r in rows}


def _core_columns(table: str) -> dict[str, tuple[str, int, str | None, int]]:
    core = next(t for t in telegram.TABLES if t.name == table)
    keys = [c.name for c in core.primary_key.columns]
    out = {}
    for c in core.columns:
        default = None if c.server_default is None else str(c.server_default.arg.text)  # type: ignore[attr-defined]
        kind = c.type.compile(dialect=sqlite.dialect())
        pk = keys.index(c.name) + 1 if c.name in keys else 0
        out[c.name] = (kind, int(not c.nullable or pk > 0), default, pk)
    return out


def test_the_raw_ddl_and_the_core_tables_agree() -> None:
    for table in (telegram.MODE_TABLE, telegram.BINDINGS_TABLE):
        assert _raw_columns(table) == _core_columns(table), table


def test_the_bindings_foreign_key_cascades_in_both() -> None:
    (fk,) = telegram.BINDINGS.foreign_keys
    assert (fk.target_fullname, fk.ondelete) == ("sessions.id", "CASCADE")
    assert "REFERENCES sessions(id) ON DELETE CASCADE" in telegram.BINDINGS_DDL
    assert "ON DELETE CASCADE" in telegram.POSTGRESQL_DDL[1]
