"""Prepared statements: a Core statement compiled once per dialect, run at the driver.

The hot calls (an append, loading a conversation, a listing) send a handful of small
statements each. Through `Connection.execute` every one of them pays SQLAlchemy's cache
key generation, execution context and result wrapping, about 15-25 us, where SQLite
itself answers in 1-5 us. A `Prepared` keeps the statement written once as a Core
construct (so the SQL still comes from the models' tables and the per-dialect compilers)
but compiles it a single time per dialect and then:

- on a database in the process (SQLite: the dialect's `in_process`, backends.py),
  executes the compiled string on the driver connection of the unit of work's
  connection, inside its transaction (`engine.driver_run`: errors raised as
  SQLAlchemy's, cursor-execute listeners still called);
- on a server (PostgreSQL), hands the compiled string to `Connection.exec_driver_sql`,
  which keeps SQLAlchemy's disconnect handling and events (a network round trip dwarfs
  the difference there).

Only statements with plain bound parameters can be prepared: no expanding IN lists and no
literal-execute parameters, which must be rendered per call (`Prepared` refuses them when
it compiles). Constants inside the statement keep the values they were built with.
Results come back as plain tuples; `dicts` pairs them with the cursor's column names.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from sqlalchemy import Connection, CursorResult
from sqlalchemy.engine import Dialect
from sqlalchemy.sql import Executable
from sqlalchemy.sql.compiler import Compiled

from .backends import NAMES, dialect_named
from .engine import driver_run

T = TypeVar("T")
Params = Mapping[str, Any]
_NO_PARAMS: dict[str, Any] = {}


class _Compiled:
    __slots__ = ("sql", "names", "defaults", "positional", "at_driver")

    def __init__(self, compiled: Compiled, dialect: Dialect) -> None:
        if "POSTCOMPILE" in compiled.string:
            raise ValueError(
                "a statement with expanding or literal-execute parameters cannot be "
                f"prepared: {compiled.string[:200]}"
            )
        self.sql = compiled.string
        self.positional = bool(dialect.positional)
        # a dialect hermes-store does not run on is only ever compiled for (`Prepared.sql`)
        self.at_driver = dialect.name in NAMES and dialect_named(dialect.name).in_process
        self.names: tuple[str, ...] = tuple(getattr(compiled, "positiontup", None) or ())
        # Values the statement was built with (constants); a parameter declared without a
        # value must be given by every call, so a misspelt name fails instead of binding NULL
        names = getattr(compiled, "bind_names", {})
        self.defaults: dict[str, Any] = {
            name: bind.effective_value for bind, name in names.items() if not bind.required
        }

    def bind(self, params: Params) -> Any:
        if self.positional:
            if not self.defaults:
                return tuple(params[name] for name in self.names)
            return tuple(
                params[name] if name in params else self.defaults[name] for name in self.names
            )
        if not self.defaults:
            return params
        return {**self.defaults, **params}


class Prepared:
    """A Core statement compiled once per dialect and run at the driver."""

    __slots__ = ("statement", "_by_dialect")

    def __init__(self, statement: Executable) -> None:
        self.statement = statement
        self._by_dialect: dict[str, _Compiled] = {}

    def _compiled(self, dialect: Dialect) -> _Compiled:
        found = self._by_dialect.get(dialect.name)
        if found is None:
            compiled = self.statement.compile(dialect=dialect)  # type: ignore[attr-defined]
            found = self._by_dialect[dialect.name] = _Compiled(compiled, dialect)
        return found

    def sql(self, dialect: Dialect) -> str:
        """The statement as `dialect` receives it."""
        return self._compiled(dialect).sql

    def _execute(self, conn: Connection, params: Params, consume: Callable[[Any], T]) -> T:
        """Execute once and give `consume` the DBAPI cursor (SQLite) or SQLAlchemy
        result (PostgreSQL); both offer fetchone, fetchall, rowcount and close."""
        compiled = self._compiled(conn.dialect)
        bound = compiled.bind(params)
        if compiled.at_driver:
            return driver_run(conn, compiled.sql, bound, consume)
        return consume(conn.exec_driver_sql(compiled.sql, bound))

    def rows(self, conn: Connection, params: Params = _NO_PARAMS) -> list[tuple[Any, ...]]:
        return self._execute(conn, params, _all_tuples)

    def first(self, conn: Connection, params: Params = _NO_PARAMS) -> tuple[Any, ...] | None:
        return self._execute(conn, params, _first_tuple)

    def scalar(self, conn: Connection, params: Params = _NO_PARAMS) -> Any:
        row = self.first(conn, params)
        return None if row is None else row[0]

    def dicts(self, conn: Connection, params: Params = _NO_PARAMS) -> list[dict[str, Any]]:
        """Every row as a dict keyed by the result's column names."""
        return self._execute(conn, params, _all_dicts)

    def run(self, conn: Connection, params: Params = _NO_PARAMS) -> int:
        """Execute a data-changing statement; the number of rows it changed."""
        return self._execute(conn, params, _rowcount)


def _driver_rows(cursor: Any) -> tuple[list[Any], list[str]]:
    """Every row as the driver returns it (a tuple), and the column names. From a
    SQLAlchemy result (PostgreSQL) the rows come from its DB-API cursor: a statement
    compiled here declares no result types, so SQLAlchemy would only wrap each row."""
    if isinstance(cursor, CursorResult):
        raw = cursor.cursor
        if raw is None or raw.description is None:
            return [], []
        names = [column[0] for column in raw.description]
        rows = list(raw.fetchall())
        cursor.close()
        return rows, names
    return cursor.fetchall(), [column[0] for column in cursor.description or ()]


def _all_tuples(cursor: Any) -> list[tuple[Any, ...]]:
    rows, _names = _driver_rows(cursor)
    if not rows or type(rows[0]) is tuple:  # both drivers' rows already are
        return rows
    return [tuple(row) for row in rows]


def _first_tuple(cursor: Any) -> tuple[Any, ...] | None:
    row = cursor.fetchone()
    cursor.close()
    return None if row is None else tuple(row)


def _all_dicts(cursor: Any) -> list[dict[str, Any]]:
    rows, names = _driver_rows(cursor)
    return [dict(zip(names, row, strict=True)) for row in rows]


def _rowcount(cursor: Any) -> int:
    return int(cursor.rowcount)
