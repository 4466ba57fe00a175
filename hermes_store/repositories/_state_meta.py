"""The one `state_meta` write: an upsert of one key, prepared once per dialect.

It lives apart from meta.py (MetaRepository) because it needs nothing of the Store:
search maintenance, which the Store's SQLite backend runs, writes its FTS markers with it
without importing the Store back."""

from __future__ import annotations

from collections.abc import Callable
from functools import cache
from typing import Any

from sqlalchemy import Connection, bindparam
from sqlalchemy.dialects import sqlite

from ..runtime.engine import Prepared
from ._dialect import PreparedUpsert
from ._tables import META, K
from .encoding import scrub

MetaValue = str | int | float | None


def _set_statement(insert: Callable[[Any], Any]) -> Any:
    stmt = insert(META).values(key=bindparam("key"), value=bindparam("value"))
    return stmt.on_conflict_do_update(index_elements=[K.key], set_={"value": stmt.excluded.value})


# Meta keys are written by every maintenance throttle, search top-up and FTS backfill
# step, so the upsert is prepared once per dialect.
_SET = PreparedUpsert(_set_statement)

#: The same upsert compiled for the sqlite3 driver (parameters: key, value), for code that
#: holds a raw connection, such as the Telegram tables' migration.
SQLITE_SET_SQL = str(_set_statement(sqlite.insert).compile(dialect=sqlite.dialect()))


@cache
def set_statement(insert: Callable[[Any], Any]) -> Prepared:
    """The upsert as one prepared statement of a dialect (parameters: key, value as
    `stored_text` gives it), `insert` its INSERT constructor: what a write of its own sends
    (`Store.write_one`)."""
    return Prepared(_set_statement(insert))


def stored_text(value: MetaValue) -> str | None:
    """`value` as it is stored."""
    # Every value is stored as text, as the original does (a float epoch becomes '1.5').
    return None if value is None else scrub(str(value))


def set_value(conn: Connection, key: str, value: MetaValue) -> None:
    """Upsert `key` in `conn`'s transaction: the one `state_meta` write."""
    _SET.run(conn, {"key": key, "value": stored_text(value)})
