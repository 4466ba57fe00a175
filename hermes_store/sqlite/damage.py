"""Telling SQLite's damage reports apart (SQLite only; PostgreSQL checks its own pages).

SQLite's result codes carry the distinction: FTS5 reports damage of its own records as
SQLITE_CORRUPT_VTAB, while damage the b-tree layer finds (any table, an FTS shadow table
included) is plain SQLITE_CORRUPT or one of its other extended codes, and a destroyed
file header is SQLITE_NOTADB. One FTS5 failure looks like neither: when its structure
record is lost, FTS5 writes a segment over one that exists and reports the bare
SQLITE_CONSTRAINT, a code ordinary tables never return (theirs always carry an extended
code: UNIQUE, PRIMARYKEY, NOTNULL, ...). That one is only a suspicion and needs the FTS
integrity-check to confirm it. A garbage FTS5 format version is SQLITE_ERROR with its own
text ("invalid fts5 file format ... run 'rebuild'").
"""

from __future__ import annotations

import sqlite3
from typing import Literal

from sqlalchemy import Connection
from sqlalchemy.exc import DBAPIError

from . import driver as sqlite_driver

Damage = Literal["fts", "structural", "suspect_fts"]

_MESSAGES = ("database disk image is malformed", "file is not a database")


def sqlite_error(exc: BaseException) -> Exception | None:
    """The SQLite error (of either driver) behind `exc`, or None."""
    orig = exc.orig if isinstance(exc, DBAPIError) else exc
    return orig if isinstance(orig, sqlite_driver.Error) else None


def classify(exc: BaseException) -> Damage | None:
    """What kind of damage an error reports, or None if it reports none."""
    orig = sqlite_error(exc)
    if orig is None:
        return None
    code = getattr(orig, "sqlite_errorcode", None)
    text = str(orig).lower()
    if (
        code == sqlite3.SQLITE_CORRUPT_VTAB
        or ("fts5" in text and "corrupt" in text)
        # FTS5 cannot even open the table when its structure record or its format
        # version is garbage
        or text.startswith("vtable constructor failed: messages_fts")
        or text.startswith("invalid fts5 file format")
    ):
        return "fts"
    if code == sqlite3.SQLITE_CONSTRAINT and text == "constraint failed":
        # a bare constraint error, naming no constraint: what FTS5 raises when its shadow
        # tables disagree with the content (drivers that report extended result codes
        # give the named ones other codes; pysqlite3 reports 19 for all of them)
        return "suspect_fts"
    if code is not None and code & 0xFF in (sqlite3.SQLITE_CORRUPT, sqlite3.SQLITE_NOTADB):
        return "structural"
    if any(m in text for m in _MESSAGES):
        return "structural"
    return None


def quick_check(conn: Connection, limit: int = 20) -> list[str]:
    """`PRAGMA quick_check`'s report (["ok"] when healthy). On some damage (a destroyed
    leaf, a destroyed header) the pragma fails instead of reporting; that failure is then
    the report, since it is exactly what is wrong."""
    try:
        rows = conn.exec_driver_sql(f"PRAGMA quick_check({int(limit)})").all()
    except DBAPIError as exc:
        if classify(exc) is None:
            raise
        return [f"failed: {exc.orig}"]
    return [str(r[0]) for r in rows]


#: How quick_check's report names FTS5's own damage: newer SQLite (3.44+) runs FTS5's
#: integrity check inside quick_check ("fts5: corrupt structure record for table ..."),
#: and a pragma that fails on a garbage FTS5 format version says so.
_FTS5_REPORT = ("fts5:", "failed: invalid fts5 file format", "failed: vtable constructor failed")


def btree_problems(report: list[str]) -> list[str]:
    """The lines of a quick_check report that describe damage to the file's b-trees:
    neither "ok" nor FTS5's own report on its index (which a rebuild of the index
    repairs)."""
    return [
        line for line in report if line != "ok" and not line.lower().startswith(_FTS5_REPORT)
    ]
