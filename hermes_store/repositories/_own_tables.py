"""The refusal of a call that needs hermes-store's own tables (the feed's, the turns')
on a database that was never upgraded to them, such as a `state.db` only the original
Hermes wrote, opened with `read_only=True`: a typed error naming the upgrade, instead of
the driver's "no such table"."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, TypeVar

from sqlalchemy import Connection, inspect
from sqlalchemy.exc import DBAPIError

from ..errors import SchemaBehind
from ..migration.read_only import place_of, upgrade_command

if TYPE_CHECKING:
    from ..store import Store

T = TypeVar("T")


def _missing(store: Store, tables: Sequence[str]) -> list[str]:
    """What of `tables` (each "table" or "table.column") the database lacks."""

    def present(conn: Connection) -> set[str]:
        inspector = inspect(conn)
        found: set[str] = set()
        for table in inspector.get_table_names():
            found.add(table)
            if any(wanted.startswith(f"{table}.") for wanted in tables):
                found.update(f"{table}.{c['name']}" for c in inspector.get_columns(table))
        return found

    try:
        found = store.read(present)
    except DBAPIError:
        return []
    return [wanted for wanted in tables if wanted not in found]


def needing(store: Store, tables: Sequence[str], what: str, work: Callable[[], T]) -> T:
    """`work()`, or SchemaBehind naming `hermes-store upgrade` when it failed because the
    database lacks one of `tables` ("table", or "table.column" for a column a later
    revision added). Looked up only after a failure: a call that works costs nothing
    more."""
    try:
        return work()
    except DBAPIError as exc:
        missing = _missing(store, tables)
        if not missing:
            raise
        raise SchemaBehind(
            place_of(store.url),
            f"{what} needs hermes-store's own tables, which this database was never upgraded to",
            [f"column {m}" if "." in m else f"table {m}" for m in missing],
            upgrade_command(store.url),
        ) from exc
