"""Plain SQL on either backend, bypassing hermes-store, for seeding and checking."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any


def to_pyformat(sql: str, *, named: bool) -> str:
    """SQLite's placeholders (`?`, or `:name` with a dict) as psycopg's (`%s`,
    `%(name)s`), outside string literals and quoted identifiers only; a literal `%`
    doubled. A `::` cast is left alone."""
    out: list[str] = []
    quote: str | None = None
    i = 0
    while i < len(sql):
        char = sql[i]
        if quote is not None:
            out.append("%%" if char == "%" else char)
            if char == quote:
                quote = None
            i += 1
            continue
        if char in ("'", '"'):
            quote = char
            out.append(char)
        elif char == "%":
            out.append("%%")
        elif char == "?" and not named:
            out.append("%s")
        elif char == ":" and named and sql[i + 1 : i + 2] == ":":
            out.append("::")
            i += 1
        elif char == ":" and named and (sql[i + 1 : i + 2].isalpha() or sql[i + 1 : i + 2] == "_"):
            end = i + 1
            while end < len(sql) and (sql[end].isalnum() or sql[end] == "_"):
                end += 1
            out.append(f"%({sql[i + 1 : end]})s")
            i = end
            continue
        else:
            out.append(char)
        i += 1
    return "".join(out)


class RawRow(dict[str, Any]):
    """A result row readable by name and by position, like sqlite3.Row."""

    def __getitem__(self, key: Any) -> Any:
        if isinstance(key, int | slice):
            return list(self.values())[key]
        return super().__getitem__(key)

    def __iter__(self) -> Iterator[Any]:  # type: ignore[override]
        return iter(list(self.values()))  # tuple(row) gives the values, as sqlite3.Row

    def __eq__(self, other: object) -> bool:
        if isinstance(other, tuple):
            return tuple(self.values()) == other
        return super().__eq__(other)

    __hash__ = None  # type: ignore[assignment]


class RawConnection:
    """Plain SQL on either backend, bypassing hermes-store (for seeding and checking):
    `?` placeholders, autocommit, rows as RawRow. On PostgreSQL text goes through the
    same NUL escape the models apply, so the tests see what the repositories see."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.dialect = "sqlite" if url.startswith("sqlite") else "postgresql"
        if self.dialect == "sqlite":
            # the SQLite library the stores of this process use: two copies of SQLite in
            # one process break each other's POSIX locks on a shared file (a reader
            # through the other one sees stale pages or a disk I/O error in WAL mode)
            from hermes_store.sqlite.driver import current

            self._con: Any = current().connect(
                url.removeprefix("sqlite:///"), isolation_level=None, timeout=5
            )
            self._con.execute("PRAGMA foreign_keys=ON")
        else:
            import psycopg
            from sqlalchemy.engine import make_url

            u = make_url(url)
            from hermes_store.runtime.engine import install_pg_text_adapters

            self._con = psycopg.connect(
                host=u.host, port=u.port or 5432, user=u.username, dbname=u.database,
                autocommit=True,
            )
            install_pg_text_adapters(self._con)

    def execute(self, sql: str, params: Any = ()) -> RawCursor:
        if self.dialect == "sqlite":
            return RawCursor(self._con.execute(sql, params), self.dialect)
        sql = to_pyformat(sql, named=isinstance(params, dict))
        returning = bool(re.match(r"\s*INSERT INTO messages\b", sql, re.I)) and (
            "RETURNING" not in sql.upper()
        )
        cur = self._con.cursor()
        cur.execute(sql + (" RETURNING id" if returning else ""), params)
        result = RawCursor(cur, self.dialect)
        if returning:
            # sqlite3's lastrowid, for the one table whose ids tests use
            result.lastrowid = cur.fetchone()[0]
        return result

    def executemany(self, sql: str, rows: Any) -> None:
        for row in rows:
            self.execute(sql, row)

    def close(self) -> None:
        self._con.close()


class RawCursor:
    def __init__(self, cursor: Any, dialect: str) -> None:
        self._cursor = cursor
        self._dialect = dialect
        self.rowcount = cursor.rowcount
        self.lastrowid = getattr(cursor, "lastrowid", None)

    def _row(self, values: Any) -> RawRow | None:
        if values is None:
            return None
        names = [d[0] for d in self._cursor.description]
        return RawRow(zip(names, values, strict=True))

    def fetchone(self) -> RawRow | None:
        if self._cursor.description is None:
            return None
        return self._row(self._cursor.fetchone())

    def fetchall(self) -> list[RawRow]:
        if self._cursor.description is None:
            return []
        return [r for r in (self._row(v) for v in self._cursor.fetchall()) if r is not None]

    def __iter__(self) -> Iterator[RawRow]:
        return iter(self.fetchall())


