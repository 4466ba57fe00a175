"""LIMIT and OFFSET values as both backends take them.

The original binds a caller's limit straight into SQLite's `LIMIT ?`, where a negative
value means no limit and a negative OFFSET counts as 0; PostgreSQL refuses both, and
both refuse a number beyond 64 bits. Every repository method that pages turns its
arguments into these values first, so a negative or huge limit gives the same rows on
SQLite and on PostgreSQL.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import BigInteger, BindParameter, ColumnElement, bindparam, literal, literal_column

#: The largest LIMIT / OFFSET either backend accepts (a signed 64-bit integer); no table
#: holds that many rows, so a larger limit is no limit.
MAX_ROWS = 2**63 - 1

#: The largest LIMIT a statement has written into its SQL rather than bound (`written`).
#: SQLite (3.53) prepares a statement again each time a value is bound to its LIMIT, which
#: costs about as much as the rest of a small read; a statement is therefore built per
#: limit for the page sizes callers use, each kept in a bounded cache, and a larger (or
#: no) limit is bound, so that a caller paging with ever-new sizes does not fill a cache
#: with statements it will not send again. Each written limit is a SQL text of its own in
#: the driver's statement cache (128 per connection, shared with the appends' INSERT) and
#: SQLAlchemy's compiled cache: only the small page sizes callers use are written.
MAX_WRITTEN = 100

#: OFFSET 0 written in: SQLAlchemy binds a 0 OFFSET on SQLite when a statement has none.
NO_OFFSET: ColumnElement[Any] = literal_column("0")


def row_limit(limit: Any) -> int | None:
    """None (no limit) for None and for a negative limit, else the limit (at most
    MAX_ROWS)."""
    if limit is None:
        return None
    value = int(limit)
    return None if value < 0 else min(value, MAX_ROWS)


def bound_limit(limit: Any) -> int:
    """`row_limit` for a statement that always has a LIMIT: no limit is MAX_ROWS."""
    value = row_limit(limit)
    return MAX_ROWS if value is None else value


def row_offset(offset: Any) -> int:
    """0 for None and for a negative offset, else the offset (at most MAX_ROWS)."""
    if not offset:
        return 0
    return min(max(0, int(offset)), MAX_ROWS)


def limit_clause(limit: Any) -> ColumnElement[Any] | None:
    """`row_limit` for `Select.limit`: None, the value written into the SQL (at most
    MAX_WRITTEN), or the value bound as a 64-bit integer (a plain int is bound as
    INTEGER, which PostgreSQL takes as 32 bits)."""
    value = row_limit(limit)
    return None if value is None else _written_or_bound(value)


def _written_or_bound(value: int) -> ColumnElement[Any]:
    """A LIMIT's value: written in where small (`written`; SQLAlchemy keeps one compiled
    form per value in its bounded cache), else bound."""
    if written(value) is not None:
        return literal_column(str(value))
    return literal(value, BigInteger())


def offset_clause(offset: Any) -> BindParameter[Any]:
    """`row_offset` for `Select.offset`, bound as a 64-bit integer."""
    return literal(row_offset(offset), BigInteger())


def row_count(count: Any) -> int:
    """A count that is never "no limit" (a window either side of a message): a negative
    count is 0, a huge one MAX_ROWS."""
    return min(max(0, int(count)), MAX_ROWS)


def written(limit: int) -> int | None:
    """`limit`, an int as `bound_limit` returns it, where it is written into the SQL (at
    most MAX_WRITTEN); None where it is bound."""
    if type(limit) is not int:  # only ever an int is rendered as SQL
        raise TypeError(f"a limit written into SQL must be an int, not {type(limit).__name__}")
    return limit if limit <= MAX_WRITTEN else None


def limit_of(limit: int | None, name: str = "limit") -> ColumnElement[Any]:
    """For `Select.limit`: `limit` (a `written` value) written into the SQL, or, for
    None, the parameter `name` bound as a 64-bit integer."""
    if limit is None:
        return bindparam(name, type_=BigInteger)
    if type(limit) is not int or not 0 <= limit <= MAX_WRITTEN:
        raise ValueError(f"not a limit to write into SQL: {limit!r}")
    return literal_column(str(limit))
