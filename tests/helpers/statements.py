"""What SQLAlchemy builds and what a store sends, recorded around a block: the tests that
pin statements built once, and how many statements a call sends. Only SQLAlchemy's
constructors are counted; the database is real."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from sqlalchemy import Connection, event
from sqlalchemy.sql import compiler
from sqlalchemy.sql.selectable import Select

from hermes_store.store import Store

#: What `built` counts unless told: SELECT constructs and SQL compilers.
SELECTS_AND_COMPILERS: tuple[type, ...] = (compiler.SQLCompiler, Select)


@contextmanager
def built(
    monkeypatch: pytest.MonkeyPatch, classes: tuple[type, ...] = SELECTS_AND_COMPILERS
) -> Iterator[list[str]]:
    """The class name of every instance of `classes` SQLAlchemy builds meanwhile."""
    names: list[str] = []

    def counted(cls: Any) -> None:
        original = cls.__init__

        def counting(self: Any, *args: Any, **kwargs: Any) -> None:
            names.append(type(self).__name__)
            original(self, *args, **kwargs)

        patch.setattr(cls, "__init__", counting)

    with monkeypatch.context() as patch:
        for cls in classes:
            counted(cls)
        yield names


@contextmanager
def sent(store: Store, *, transactions: bool = False) -> Iterator[list[str]]:
    """Every statement the store's engine sends meanwhile, whitespace collapsed; BEGIN,
    COMMIT and ROLLBACK left out unless `transactions`."""
    statements: list[str] = []

    def record(conn: Any, cursor: Any, statement: str, *rest: Any) -> None:
        if transactions or statement.split()[0].upper() not in {"BEGIN", "COMMIT", "ROLLBACK"}:
            statements.append(" ".join(statement.split()))

    event.listen(store.engine, "before_cursor_execute", record)
    try:
        yield statements
    finally:
        event.remove(store.engine, "before_cursor_execute", record)


def variables_held_to(store: Store, limit: int = 999) -> list[int]:
    """Hold `store`'s statements to SQLite's historic 999-variable limit (these builds
    allow far more): where the driver's connections have `setlimit` (the standard
    library's), SQLite itself refuses a statement past it, as it does for users of such a
    build; on every driver (pysqlite3 has no `setlimit`), the returned list gets the
    number of variables each statement the store sends binds, for the test to hold to
    `limit`. Connections opened before the call keep no limit: dispose the store's pool
    first where it has any."""
    bound: list[int] = []

    @event.listens_for(store.engine, "connect")
    def _limit(dbapi_conn: Any, _record: Any) -> None:
        if hasattr(dbapi_conn, "setlimit"):
            dbapi_conn.setlimit(sqlite3.SQLITE_LIMIT_VARIABLE_NUMBER, limit)

    @event.listens_for(store.engine, "before_cursor_execute")
    def _count(
        conn: Any, cursor: Any, statement: str, parameters: Any, context: Any, many: bool
    ) -> None:
        rows = parameters if many else [parameters]
        bound.extend(len(row) for row in rows if row is not None)

    return bound


def counted_begins(monkeypatch: pytest.MonkeyPatch, store: Store) -> list[Connection]:
    """The Connections of `store`'s pool SQLAlchemy begins a transaction on, from now on
    (a thread another test left running may begin on its own store meanwhile)."""
    begun: list[Connection] = []
    begin = Connection.begin

    def counted(self: Connection) -> Any:
        if self.engine.pool is store.engine.pool:
            begun.append(self)
        return begin(self)

    monkeypatch.setattr(Connection, "begin", counted)
    return begun
