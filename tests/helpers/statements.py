"""What SQLAlchemy builds and what a store sends, recorded around a block: the tests that
pin statements built once, and how many statements a call sends. Only SQLAlchemy's
constructors are counted; the database is real."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from sqlalchemy import event
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
