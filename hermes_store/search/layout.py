"""Which FTS layout a SQLite database has (docs/reference/schema.md section 6.2)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Connection, bindparam, column, func, or_, select, table, text

from ..contract import (
    FTS_BASE_TRIGGERS,
    FTS_CJK_TABLE,
    FTS_TABLE,
    FTS_TRASH_PREFIX,
    FTS_TRIGGERS,
    FTS_TRIGRAM_TABLE,
    FTS_TRIGRAM_VIEW,
    META_FTS_HIGH_WATER,
    META_FTS_PROGRESS,
    META_FTS_STORAGE_VERSION,
)
from ..runtime.backends import dialect_for
from ..runtime.engine import Prepared

HIGH_WATER = META_FTS_HIGH_WATER
PROGRESS = META_FTS_PROGRESS


def _sql(conn: Connection, name: str) -> str | None:
    value = conn.execute(
        text("SELECT sql FROM sqlite_master WHERE name = :n"), {"n": name}
    ).scalar()
    return None if value is None else str(value)


def _meta(conn: Connection, key: str) -> str | None:
    # a file the original wrote may predate state_meta (read as it is, before adoption)
    if dialect_for(conn).shared_with_the_original and _sql(conn, "state_meta") is None:
        return None
    value = conn.execute(text("SELECT value FROM state_meta WHERE key = :k"), {"k": key}).scalar()
    return None if value is None else str(value)


#: The catalog objects `fts_state` looks at: the FTS tables, view and triggers, the CJK
#: table, state_meta, and the trash tables (by their prefix, compared case-sensitively as
#: Python's startswith does). Only their rows are returned: the whole catalog holds the
#: CREATE text of every table, index and trigger.
_STATE_OBJECTS = (
    FTS_TABLE,
    FTS_TRIGRAM_TABLE,
    FTS_TRIGRAM_VIEW,
    *FTS_TRIGGERS,
    FTS_CJK_TABLE,
    "state_meta",
)
_MASTER = table("sqlite_master", column("type"), column("name"), column("sql"))
#: The catalog rows (type, name, sql) of those objects, one statement.
STATE_CATALOG = Prepared(
    select(_MASTER.c.type, _MASTER.c.name, _MASTER.c.sql).where(
        or_(
            _MASTER.c.name.in_([bindparam(f"o{i}", n) for i, n in enumerate(_STATE_OBJECTS)]),
            func.substr(_MASTER.c.name, 1, len(FTS_TRASH_PREFIX)) == FTS_TRASH_PREFIX,
        )
    )
)
#: The FTS bookkeeping keys of state_meta (key, value), one statement.
STATE_META = Prepared(
    text("SELECT key, value FROM state_meta WHERE key IN (:high, :progress, :version)").bindparams(
        high=HIGH_WATER, progress=PROGRESS, version=META_FTS_STORAGE_VERSION
    )
)


@dataclass(frozen=True)
class FTSState:
    layout: str  # "none", "L1", "L1+trigram", "L2", "L3", "hybrid", "v23"
    triggers: int
    high_water: int | None
    progress: int | None
    trash_tables: tuple[str, ...]
    storage_version: str | None
    has_cjk: bool

    @property
    def backfill_pending(self) -> bool:
        return self.high_water is not None

    @property
    def percent(self) -> int:
        if not self.high_water:
            return 100
        return min(100, int(100 * (self.progress or 0) / self.high_water))

    def describe(self) -> str:
        parts = [f"layout {self.layout}", f"{self.triggers}/6 triggers"]
        if self.backfill_pending:
            parts.append(
                f"backfill pending: {self.progress or 0}/{self.high_water} ids ({self.percent}%)"
            )
        if self.trash_tables:
            parts.append(f"{len(self.trash_tables)} trash table(s) to tear down")
        if self.storage_version:
            parts.append(f"fts_storage_version {self.storage_version}")
        return ", ".join(parts)


def _int(value: str | None) -> int | None:
    try:
        return None if value is None else int(value)
    except ValueError:
        return None


def _options(sql: str) -> str:
    return "".join(sql.split())


def classify(conn: Connection) -> str:
    """The layout of a SQLite file's FTS objects, by docs/reference/schema.md 6.2: "v23" only
    when the whole v23 layout is there, a legacy layout by its release's marks, "hybrid"
    for any mixture no release wrote as such. Revisions 0011 and 0023 decide with the
    frozen copy in migrations/_fts_layouts.py (`layout`); tests/search/test_fts_layout_detector.py
    keeps the two in agreement."""
    return _classify(lambda name: _sql(conn, name))


def _classify(sql_of: Callable[[str], str | None]) -> str:
    """`classify` on `sql_of(name)`, the `sqlite_master.sql` of an object (None: absent)."""
    base = sql_of(FTS_TABLE)
    if base is None:
        return "none"
    trigram = sql_of(FTS_TRIGRAM_TABLE)
    options = _options(base)
    external = "content=messages" in options or "content='messages'" in options
    if "tool_name" in base:
        through_view = trigram is not None and FTS_TRIGRAM_VIEW in trigram
        if external and through_view and sql_of(FTS_TRIGRAM_VIEW) is not None:
            return "v23"
        return "hybrid"
    if external:
        if trigram is None:
            return "L1"
        if "content=" in _options(trigram):
            return "L1+trigram"
        return "hybrid"  # the original v23 code's result on a pre-v10 file
    if "content=" in options:
        return "hybrid"  # an external table over something else: no release wrote it
    delete = sql_of(FTS_BASE_TRIGGERS[1]) or ""
    if "'delete'" in delete:
        return "L2"
    if "DELETE FROM messages_fts" in delete:  # L3: a plain DELETE of the row
        return "L3"
    return "hybrid"  # inline tables whose delete trigger is gone or foreign


def fts_state(conn: Connection) -> FTSState:
    if not dialect_for(conn).fts5:
        # generated tsvector + pg_trgm: nothing to backfill, no triggers to count
        return FTSState(
            layout="tsvector",
            triggers=0,
            high_water=None,
            progress=None,
            trash_tables=(),
            storage_version=_meta(conn, META_FTS_STORAGE_VERSION),
            has_cjk=False,
        )
    # the catalog in one read, the three state_meta keys in a second
    catalog = STATE_CATALOG.rows(conn)
    meta = STATE_META.rows(conn) if has_state_meta(catalog) else []
    return sqlite_state(catalog, meta)


def has_state_meta(catalog: list[tuple[Any, ...]]) -> bool:
    """Whether the rows of STATE_CATALOG show a state_meta table (a file the original
    wrote may predate it), which STATE_META reads."""
    return any(name == "state_meta" for _t, name, _s in catalog)


def sqlite_state(catalog: list[tuple[Any, ...]], meta_rows: list[tuple[Any, ...]]) -> FTSState:
    """A SQLite file's FTS state from the rows of STATE_CATALOG and STATE_META."""
    sql_by_name = {str(name): None if sql is None else str(sql) for _t, name, sql in catalog}
    triggers = {str(name) for kind, name, _s in catalog if kind == "trigger"}
    tables = sorted(str(name) for kind, name, _s in catalog if kind == "table")
    meta = {str(k): str(v) for k, v in meta_rows if v is not None}
    return FTSState(
        layout=_classify(sql_by_name.get),
        triggers=len(set(FTS_TRIGGERS) & triggers),
        high_water=_int(meta.get(HIGH_WATER)),
        progress=_int(meta.get(PROGRESS)),
        trash_tables=tuple(t for t in tables if t.startswith(FTS_TRASH_PREFIX)),
        storage_version=meta.get(META_FTS_STORAGE_VERSION),
        has_cjk=sql_by_name.get(FTS_CJK_TABLE) is not None,
    )
