"""Small SQL helpers every repository uses: row counts, IN-list chunks, shared aliases,
caseless substring tests and LIKE escaping."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from functools import cache
from typing import Any, TypeVar, cast

from sqlalchemy import (
    TEXT,
    ColumnElement,
    CursorResult,
    FromClause,
    Select,
    Table,
    func,
    literal_column,
    or_,
    select,
)
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.sql.selectable import NamedFromClause

from ..errors import LockTimeout, ReadOnlyStore, StoreBusy
from ._dialect import position_of

T = TypeVar("T")

#: Ids per IN-list, and per write transaction of the chunked deletes and prunes. SQLite
#: builds before 3.32 allow 999 bound variables per statement, and a statement often
#: binds a few values besides the list; 500 also keeps one transaction of a prune short
#: (about as long as one chunk of the FTS backfill), so other writers are not held off.
IN_CHUNK = 500


def rowcount(result: Any) -> int:
    """The number of rows a data-changing statement touched."""
    return int(cast(CursorResult[Any], result).rowcount)


def chunks(values: Sequence[T], size: int = IN_CHUNK) -> Iterator[list[T]]:
    for start in range(0, len(values), size):
        yield list(values[start : start + size])


def all_columns(table: FromClause) -> Select[Any]:
    """`SELECT *` from `table`: columns this code does not know (added by a newer Hermes
    or a fork) come back too, where selecting the model's columns would drop them."""
    return select(literal_column("*")).select_from(table)


@cache
def alias(table: Table, name: str) -> NamedFromClause:
    """One shared alias per name. Building an alias proxies every column of its table
    (about fifty for sessions), which cost a listing more than running its SQL; aliases
    are immutable, so statements can share them. Give a name only to one use per scope:
    a subquery auto-correlates an alias that its enclosing query also selects from."""
    return table.alias(name)


def escape_like(value: str) -> str:
    """`value` as a literal inside a LIKE pattern with `ESCAPE '\\'`."""
    return value.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")


def contains_caseless(
    haystack: ColumnElement[Any], needle: ColumnElement[Any]
) -> ColumnElement[bool]:
    """Case-insensitive substring test without LIKE, so `%` and `_` in the needle are
    literal. Both sides go through SQL lower() so they fold the same way."""
    return position_of(func.lower(haystack), func.lower(needle)) > 0


def path_under(
    column: ColumnElement[Any], base: Any, head_length: Any, heads: Sequence[Any]
) -> ColumnElement[bool]:
    """`column` equals `base` or starts with one of `heads` (`base` plus a separator),
    compared by prefix instead of LIKE: paths are case-sensitive and may hold `%`/`_`.
    The values may be bound parameters, so the statement can be prepared once."""
    return or_(column == base, func.substr(column, 1, head_length, type_=TEXT()).in_(heads))


def path_prefix_values(prefix: str) -> tuple[str, int, tuple[str, str]]:
    """(base, head length, heads) for `path_under`: `/` and `\\` both separate."""
    base = prefix.rstrip("/\\")
    return base, len(base) + 1, (base + "/", base + "\\")


#: What an advisory write (a compression lock, a cooldown, a handoff read) logs and
#: survives instead of failing the turn, as the original does: the database's refusals,
#: a lock held past the retry, a pool that stayed busy, a read-only store.
ADVISORY_FAILURES = (SQLAlchemyError, ReadOnlyStore, LockTimeout, StoreBusy)
