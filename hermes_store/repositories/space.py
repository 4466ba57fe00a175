"""Where the space goes: `SpaceRepository.space_report`, behind `hermes-store stats
--space` (docs/space.md).

Objects (tables, indexes, FTS indexes):
- SQLite with the `dbstat` virtual table compiled in (the standard library's build has
  it): the bytes of the pages of each b-tree, exact (`method` "dbstat"). dbstat visits
  every page of the file once, so it costs one read of the file.
- SQLite without it (pysqlite3's build): an estimate (`method` "estimate"): each b-tree's
  rows (counted on its smallest index) times the size of a sample of its rows, scaled so
  that the estimates add up to the file's used pages.
- PostgreSQL: pg_total_relation_size, pg_relation_size and pg_indexes_size (`method`
  "postgresql"), read from the catalog without touching the rows.
An FTS5 index is reported as one object, the sum of its shadow tables; on PostgreSQL the
word and trigram indexes of search (contract.PG_SEARCH_INDEXES) are of kind "fts".

The largest sessions (bytes of their messages' text columns) and the largest tool
outputs (rows with role 'tool', by the bytes of their content) have no index or
statistic to answer from, so they are found by a scan of `messages`, newest ids first,
in windows of ids, bounded by `scan_seconds`: the report says how many rows it covered
and whether the scan was complete. On SQLite a value's bytes are `octet_length` (SQLite
3.43+; `length(CAST(x AS BLOB))` before); on PostgreSQL `pg_column_size`, the stored
(possibly compressed) size, which is read from the TOAST pointer without fetching the
value.
"""

from __future__ import annotations

import heapq
import time
from typing import TYPE_CHECKING, TypedDict

from sqlalchemy import (
    ColumnElement,
    Connection,
    TableClause,
    bindparam,
    func,
    literal_column,
    quoted_name,
    select,
    text,
)

from ..contract import FTS5_SHADOW_SUFFIXES, PG_SEARCH_INDEXES
from ..errors import InvalidInput
from ..runtime.backends import dialect_for
from ._sql import all_columns
from ._tables import M

if TYPE_CHECKING:
    from ..store import Store

#: Rows of `messages` a scan window spans (by id).
SCAN_WINDOW = 20_000
DEFAULT_TOP = 10
DEFAULT_SCAN_SECONDS = 10.0
#: Rows sampled per b-tree for the estimate without dbstat.
SAMPLE_ROWS = 256
#: The text columns whose bytes make a message's size.
SIZED_COLUMNS = (
    "content",
    "tool_calls",
    "reasoning",
    "reasoning_content",
    "reasoning_details",
    "codex_reasoning_items",
    "codex_message_items",
    "api_content",
    "display_metadata",
)


class SpaceObject(TypedDict):
    """A table, an index or an FTS index, and the bytes it takes."""

    name: str
    kind: str  # "table", "index" or "fts"
    table: str  # the table it belongs to (itself for a table)
    bytes: int


class SessionSpace(TypedDict):
    session_id: str
    messages: int
    bytes: int


class ToolOutputSpace(TypedDict):
    message_id: int
    session_id: str
    tool_name: str | None
    bytes: int


class ScanCoverage(TypedDict):
    """What the scan for the largest sessions and tool outputs covered."""

    rows_scanned: int
    from_id: int | None  # the lowest message id scanned
    to_id: int | None  # the highest
    complete: bool
    seconds: float
    limit_seconds: float | None  # how long the scan was allowed (None: no limit)


class SpaceReport(TypedDict):
    method: str  # "dbstat", "estimate" or "postgresql"
    database_bytes: int | None
    free_bytes: int | None  # SQLite: pages on the freelist (VACUUM returns them)
    objects: list[SpaceObject]
    largest_sessions: list[SessionSpace]
    largest_tool_outputs: list[ToolOutputSpace]
    scan: ScanCoverage


# --------------------------------------------------------------------------- SQLite


def _quoted(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _sqlite_owners(conn: Connection) -> dict[str, tuple[str, str, str]]:
    """b-tree name -> (reported name, kind, table), FTS shadow tables folded into their
    index."""
    schema = conn.exec_driver_sql("SELECT type, name, tbl_name, sql FROM sqlite_master").all()
    fts = {
        str(name)
        for kind, name, _tbl, sql in schema
        if kind == "table" and sql and str(sql).upper().startswith("CREATE VIRTUAL TABLE")
    }
    shadow = {f"{vt}_{suffix}": vt for vt in fts for suffix in FTS5_SHADOW_SUFFIXES}
    owners: dict[str, tuple[str, str, str]] = {}
    for kind, name, tbl, _sql in schema:
        name, tbl = str(name), str(tbl)
        if name in fts:
            continue
        if tbl in shadow:
            owners[name] = (shadow[tbl], "fts", "messages")
        elif kind == "table":
            owners[name] = (name, "table", name)
        elif kind == "index":
            owners[name] = (name, "index", tbl)
    owners["sqlite_schema"] = owners["sqlite_master"] = ("sqlite_schema", "table", "sqlite_schema")
    return owners


def _tree(name: str) -> TableClause:
    """A table named in sqlite_master, its name always quoted (as `_quoted` does)."""
    return TableClause(quoted_name(name, True))


def _has_dbstat(conn: Connection) -> bool:
    options = {str(r[0]) for r in conn.exec_driver_sql("PRAGMA compile_options").all()}
    return "ENABLE_DBSTAT_VTAB" in options


def _octets(conn: Connection, expression: str) -> str:
    version = str(conn.exec_driver_sql("SELECT sqlite_version()").scalar())
    major, minor = (int(p) for p in version.split(".")[:2])
    if (major, minor) >= (3, 43):
        return f"octet_length({expression})"
    return f"length(CAST({expression} AS BLOB))"


def _dbstat_sizes(conn: Connection) -> dict[str, int]:
    rows = conn.exec_driver_sql("SELECT name, pgsize FROM dbstat WHERE aggregate = TRUE").all()
    return {str(name): int(size or 0) for name, size in rows}


def _estimated_sizes(conn: Connection, used: int) -> dict[str, int]:
    """Each b-tree's rows times its sampled row size, scaled to the used pages."""
    trees = conn.exec_driver_sql(
        "SELECT type, name, tbl_name FROM sqlite_master WHERE rootpage > 0"
    ).all()
    raw: dict[str, float] = {}
    rows_of: dict[str, int] = {}
    for kind, name, tbl in trees:
        name, tbl = str(name), str(tbl)
        if tbl not in rows_of:
            rows_of[tbl] = int(
                conn.execute(select(func.count()).select_from(_tree(tbl))).scalar() or 0
            )
        if kind == "table":
            columns = [
                str(r[1]) for r in conn.exec_driver_sql(f"PRAGMA table_info({_quoted(name)})")
            ]
            per_row_extra = 8.0  # the rowid and the cell header
        else:
            columns = [
                str(r[2])
                for r in conn.exec_driver_sql(f"PRAGMA index_info({_quoted(name)})")
                if r[2]
            ]
            per_row_extra = 8.0
        if not columns:
            raw[name] = rows_of[tbl] * per_row_extra
            continue
        sizes = " + ".join(f"coalesce({_octets(conn, _quoted(c))}, 0)" for c in columns)
        rows = all_columns(_tree(tbl)).limit(SAMPLE_ROWS).subquery()
        sample = conn.execute(select(func.avg(literal_column(sizes))).select_from(rows)).scalar()
        raw[name] = rows_of[tbl] * (float(sample or 0) + per_row_extra)
    total = sum(raw.values())
    scale = used / total if total > 0 else 0.0
    return {name: round(size * scale) for name, size in raw.items()}


def _sqlite_objects(conn: Connection) -> tuple[str, int | None, int | None, list[SpaceObject]]:
    page_size = int(conn.exec_driver_sql("PRAGMA page_size").scalar() or 0)
    pages = int(conn.exec_driver_sql("PRAGMA page_count").scalar() or 0)
    free = int(conn.exec_driver_sql("PRAGMA freelist_count").scalar() or 0)
    if _has_dbstat(conn):
        method, sizes = "dbstat", _dbstat_sizes(conn)
    else:
        # the schema's own page is not sampled: it is one of the used pages
        method, sizes = "estimate", _estimated_sizes(conn, (pages - free - 1) * page_size)
        sizes["sqlite_schema"] = page_size
    owners = _sqlite_owners(conn)
    merged: dict[str, SpaceObject] = {}
    for tree, size in sizes.items():
        name, kind, table = owners.get(tree, (tree, "table", tree))
        found = merged.setdefault(name, {"name": name, "kind": kind, "table": table, "bytes": 0})
        found["bytes"] += size
    return method, pages * page_size, free * page_size, list(merged.values())


# --------------------------------------------------------------------------- PostgreSQL

_PG_TABLES = text(
    """SELECT c.relname, pg_total_relation_size(c.oid) - pg_indexes_size(c.oid)
FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE n.nspname = current_schema() AND c.relkind IN ('r', 'p', 'm')"""
)
_PG_INDEXES = text(
    """SELECT i.relname, t.relname, pg_relation_size(i.oid)
FROM pg_index x
JOIN pg_class i ON i.oid = x.indexrelid
JOIN pg_class t ON t.oid = x.indrelid
JOIN pg_namespace n ON n.oid = t.relnamespace
WHERE n.nspname = current_schema()"""
)


def _pg_objects(conn: Connection) -> tuple[str, int | None, int | None, list[SpaceObject]]:
    objects: list[SpaceObject] = [
        {"name": str(name), "kind": "table", "table": str(name), "bytes": int(size or 0)}
        for name, size in conn.execute(_PG_TABLES).all()
    ]
    for name, table, size in conn.execute(_PG_INDEXES).all():
        kind = "fts" if str(name) in PG_SEARCH_INDEXES else "index"
        objects.append({"name": str(name), "kind": kind, "table": str(table), "bytes": int(size)})
    total = conn.execute(text("SELECT pg_database_size(current_database())")).scalar()
    return "postgresql", None if total is None else int(total), None, objects


# --------------------------------------------------------------------------- the scan


def _row_bytes(conn: Connection) -> tuple[str, str]:
    """(SQL of a message's bytes, SQL of its content's bytes)."""
    if dialect_for(conn).system_catalogues:
        size = "coalesce(pg_column_size({}), 0)"
    else:
        size = "coalesce(" + _octets(conn, "{}") + ", 0)"
    return " + ".join(size.format(c) for c in SIZED_COLUMNS), size.format("content")


def _scan(
    conn: Connection, top: int, scan_seconds: float | None
) -> tuple[list[SessionSpace], list[ToolOutputSpace], ScanCoverage]:
    started = time.monotonic()
    low, high = conn.execute(select(func.min(M.id), func.max(M.id))).one()
    # the size expressions are this dialect's functions over the fixed SIZED_COLUMNS
    row_sql, content_sql = _row_bytes(conn)
    row_bytes: ColumnElement[int] = literal_column(row_sql)
    content_bytes: ColumnElement[int] = literal_column(content_sql)
    window = (M.id > bindparam("lo"), M.id <= bindparam("hi"))
    per_session = (
        select(M.session_id, func.count(), func.sum(row_bytes))
        .where(*window)
        .group_by(M.session_id)
    )
    size = content_bytes.label("size")
    tool_outputs = (
        select(M.id, M.session_id, M.tool_name, size)
        .where(*window, M.role == "tool")
        .order_by(size.desc())
        .limit(bindparam("top"))
    )
    sessions: dict[str, list[int]] = {}
    outputs: list[tuple[int, int, str, str | None]] = []  # a min-heap of the largest
    scanned = 0
    hi = None if high is None else int(high)
    lowest = None
    complete = hi is None
    while hi is not None and hi >= int(low):
        lo = hi - SCAN_WINDOW
        params = {"lo": lo, "hi": hi, "top": top}
        for sid, count, size in conn.execute(per_session, params).all():
            found = sessions.setdefault(str(sid), [0, 0])
            found[0] += int(count)
            found[1] += int(size or 0)
            scanned += int(count)
        for mid, sid, tool, size in conn.execute(tool_outputs, params).all():
            item = (int(size or 0), int(mid), str(sid), None if tool is None else str(tool))
            if len(outputs) < top:
                heapq.heappush(outputs, item)
            elif item > outputs[0]:
                heapq.heapreplace(outputs, item)
        lowest = max(lo + 1, int(low))
        hi = lo
        if hi < int(low):
            complete = True
        elif scan_seconds is not None and time.monotonic() - started >= scan_seconds:
            break
    largest = heapq.nlargest(top, sessions.items(), key=lambda kv: (kv[1][1], kv[0]))
    coverage: ScanCoverage = {
        "rows_scanned": scanned,
        "from_id": lowest,
        "to_id": None if high is None else int(high),
        "complete": complete,
        "seconds": round(time.monotonic() - started, 3),
        "limit_seconds": scan_seconds,
    }
    return (
        [{"session_id": sid, "messages": c, "bytes": b} for sid, (c, b) in largest],
        [
            {"message_id": mid, "session_id": sid, "tool_name": tool, "bytes": size}
            for size, mid, sid, tool in sorted(outputs, reverse=True)
        ],
        coverage,
    )


def space_report(
    conn: Connection, top: int = DEFAULT_TOP, scan_seconds: float | None = DEFAULT_SCAN_SECONDS
) -> SpaceReport:
    """The bytes of each table, index and FTS index, the `top` largest sessions and tool
    outputs (docs/space.md). The scan for the largest ones stops after `scan_seconds`
    (None: it reads every message) and says how far it got.

    Args:
        top: how many of the largest sessions and tool outputs to list.
        scan_seconds: how long the scan of messages may take (None: no limit).
    """
    if isinstance(top, bool) or not isinstance(top, int) or top < 1:
        raise InvalidInput(f"top must be a whole number >= 1, not {top!r}")
    if scan_seconds is not None and (
        isinstance(scan_seconds, bool)
        or not isinstance(scan_seconds, int | float)
        or not 0 <= scan_seconds < float("inf")
    ):
        raise InvalidInput(f"scan_seconds must be a number >= 0, not {scan_seconds!r}")
    if dialect_for(conn).system_catalogues:
        method, total, free, objects = _pg_objects(conn)
    else:
        method, total, free, objects = _sqlite_objects(conn)
    objects.sort(key=lambda o: (-o["bytes"], o["name"]))
    sessions, outputs, coverage = _scan(conn, top, scan_seconds)
    return {
        "method": method,
        "database_bytes": total,
        "free_bytes": free,
        "objects": objects,
        "largest_sessions": sessions,
        "largest_tool_outputs": outputs,
        "scan": coverage,
    }


class SpaceRepository:
    """Where the space of a database goes (one read, never a write).

    Args:
        store: the Store the repository works on.
    """

    def __init__(self, store: Store) -> None:
        self.store = store

    def space_report(
        self, *, top: int = DEFAULT_TOP, scan_seconds: float | None = DEFAULT_SCAN_SECONDS
    ) -> SpaceReport:
        """The bytes of each table, index and FTS index, the `top` largest sessions and
        tool outputs, in one read (docs/space.md). The scan for the largest ones stops
        after `scan_seconds` (None: no limit) and `scan` says how far it got.

        Args:
            top: how many of the largest sessions and tool outputs to list.
            scan_seconds: how long the scan of messages may take (None: no limit).
        """
        return self.store.read(lambda conn: space_report(conn, top, scan_seconds))
