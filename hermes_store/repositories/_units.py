"""Repository methods made from query functions: a read that needs nothing of its
repository but the store is written once, where the query is, and the repository
method takes its signature and docstring from it (so the facade, which is typed from
the repositories, and `help()` show the query's own parameters)."""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, Concatenate, ParamSpec, Protocol, TypeVar

from sqlalchemy import Connection

if TYPE_CHECKING:
    from ..store import Store


P = ParamSpec("P")
T = TypeVar("T")


class HasStore(Protocol):
    store: Store


def read_method(
    query: Callable[Concatenate[Connection, P], T],
    *,
    options: Mapping[str, Any] | None = None,
    doc: str | None = None,
) -> Callable[Concatenate[HasStore, P], T]:
    """A method running `query(conn, ...)` as one `self.store.read`: retried as a whole
    through PostgreSQL server faults, so `query` must only read. `options`: execution
    options set on the unit's connection (which the unit closes) before `query` runs.
    `doc`: the method's docstring (default: `query`'s)."""

    def run(conn: Connection, args: Any, kwargs: Any) -> T:
        return query(conn.execution_options(**options) if options else conn, *args, **kwargs)

    def method(self: HasStore, /, *args: P.args, **kwargs: P.kwargs) -> T:
        return self.store.read(lambda conn: run(conn, args, kwargs))

    signature = inspect.signature(query)
    _conn, *parameters = signature.parameters.values()
    this = inspect.Parameter("self", inspect.Parameter.POSITIONAL_OR_KEYWORD)
    method.__signature__ = signature.replace(parameters=[this, *parameters])  # type: ignore[attr-defined]
    method.__name__ = query.__name__
    method.__qualname__ = query.__name__
    # the signature's annotations are `query`'s, so they resolve in its module
    method.__module__ = query.__module__
    method.__doc__ = doc or query.__doc__
    return method
