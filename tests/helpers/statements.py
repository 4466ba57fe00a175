"""What SQLAlchemy builds and what a store sends, recorded around a block: the tests that
pin statements built once, and how many statements a call sends. Only SQLAlchemy's
constructors are counted; the database is real."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, TypeVar

import pytest
from sqlalchemy import Connection, event
from sqlalchemy.sql import compiler
from sqlalchemy.sql.selectable import Select

from hermes_store.runtime.retry import RetryPolicy
from hermes_store.store import Store

T = TypeVar("T")

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


class Traced:
    """Every statement SQLite starts on the store's connections opened from now on (the
    driver's trace callback), triggers' statements left out."""

    def __init__(self, store: Store) -> None:
        self.statements: list[str] = []
        event.listen(store.engine, "connect", self._trace)
        store.dispose()  # every connection from here on is opened, and traced, anew

    def _trace(self, dbapi_conn: Any, _record: Any) -> None:
        def record(statement: str) -> None:
            collapsed = " ".join(statement.split())
            if not collapsed.startswith("--") and (
                not self.statements or self.statements[-1] != collapsed
            ):
                self.statements.append(collapsed)

        dbapi_conn.set_trace_callback(record)


@dataclass(frozen=True)
class RecordingRetry(RetryPolicy):
    """The default policy, recording which of its entry points each call goes through."""

    calls: list[str] = field(default_factory=list, compare=False)

    def run(self, unit_of_work: Callable[[], T], **options: Any) -> T:
        self.calls.append("run")
        return super().run(unit_of_work, **options)

    def resume(
        self, failed: BaseException, unit_of_work: Callable[[], T], started: float, **options: Any
    ) -> T:
        self.calls.append(f"resume {type(failed).__name__}")
        return super().resume(failed, unit_of_work, started, **options)
