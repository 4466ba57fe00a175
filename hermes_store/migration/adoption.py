"""Recognising a database the original Hermes code wrote, by its shape.

One upstream version number shipped with several shapes (docs/reference/history.md section 5), and
real files carry extra columns from short-lived builds. So the number alone does not say
where a file stands on the revision chain. The rule used here: a file is stamped at the
highest revision r <= its `schema_version` such that everything revisions 1..r create is
present in the form they create it; revisions r+1..23 then add what is missing (they are
add-if-missing) and run the data migrations the original would run (those are gated by
the stored number, so a v20 file is not re-seeded). Unknown tables and columns are never
touched.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from sqlalchemy import Connection, Select, column, select, table, text

from ..config import SCHEMA_VERSION
from ..contract import FTS_TABLE
from ..contract import VERSION_TABLE as VERSION_TABLE
from ..runtime.backends import dialect_for
from ..search.layout import classify
from .dialects import MigrationDialect
from .inventory import INVENTORY as INVENTORY


@dataclass
class DatabaseShape:
    """What an unmanaged or managed database looks like from the outside."""

    kind: str  # "empty", "managed", "legacy", "foreign"
    stored_version: int | None
    alembic_revision: str | None
    stamp_revision: int | None = None
    missing: dict[int, list[str]] = field(default_factory=dict)
    extra_tables: list[str] = field(default_factory=list)

    @property
    def too_new(self) -> bool:
        return self.stored_version is not None and self.stored_version > SCHEMA_VERSION


class _Probe:
    def __init__(self, conn: Connection) -> None:
        self.conn = conn
        self.backend: MigrationDialect = dialect_for(conn).migration
        self._columns: dict[str, dict[str, tuple[int, int]]] = {}
        self.tables, self.indexes = self.backend.catalogue(conn)

    def columns(self, table: str) -> dict[str, tuple[int, int]]:
        if table not in self._columns:
            self._columns[table] = self.backend.column_flags(self.conn, table)
        return self._columns[table]

    def primary_key(self, table: str) -> str:
        cols = sorted((pk, name) for name, (_, pk) in self.columns(table).items() if pk)
        return ",".join(name for _, name in cols)

    def has(self, kind: str, table: str, name: str) -> bool:
        if kind == "table":
            return table in self.tables
        if kind == "absent":
            return table not in self.tables
        if table and table not in self.tables:
            return False
        if kind == "column":
            return name in self.columns(table)
        if kind == "not_null":
            return self.columns(table).get(name, (0, 0))[0] == 1
        if kind == "index":
            return name in self.indexes
        if kind == "primary_key":
            return self.primary_key(table) == name
        if kind == "fts":
            layout = classify(self.conn)
            triggers = self.conn.execute(
                text(
                    "SELECT COUNT(*) FROM sqlite_master WHERE type = 'trigger' "
                    "AND name LIKE 'messages\\_fts\\_%' ESCAPE '\\' "
                    "AND name NOT LIKE 'messages\\_fts\\_cjk\\_%' ESCAPE '\\'"
                )
            ).scalar()
            if name == "v23":
                return layout == "v23" and triggers == 6
            return layout in ("L3", "v23")
        raise ValueError(kind)


#: The Alembic revision a database is at (its version table has no model).
_STORED_REVISION: Select[tuple[str]] = select(column("version_num")).select_from(
    table(VERSION_TABLE)
)


def _read_alembic_revision(conn: Connection, probe: _Probe) -> str | None:
    if VERSION_TABLE not in probe.tables:
        return None
    value = conn.execute(_STORED_REVISION).scalar()
    return None if value is None else str(value)


def inspect_shape(conn: Connection) -> DatabaseShape:
    """Classify the database behind `conn` without changing it. On PostgreSQL only "empty",
    "managed" and "foreign" occur in practice: the original never wrote there."""
    probe = _Probe(conn)
    stored: int | None = None
    if "schema_version" in probe.tables:
        value = conn.execute(text("SELECT MAX(version) FROM schema_version")).scalar()
        stored = int(value) if value is not None else None
    revision = _read_alembic_revision(conn, probe)
    user_tables = {t for t in probe.tables if not t.startswith("sqlite_")}
    known = {t for items in INVENTORY.values() for kind, t, _ in items if kind == "table"}
    shape = DatabaseShape(
        kind="empty",
        stored_version=stored,
        alembic_revision=revision,
        extra_tables=sorted(
            t for t in user_tables - known - {VERSION_TABLE} if not t.startswith(FTS_TABLE)
        ),
    )
    if revision is not None:
        shape.kind = "managed"
        return shape
    if not user_tables - {VERSION_TABLE}:
        return shape
    if "sessions" not in probe.tables or "messages" not in probe.tables:
        shape.kind = "foreign"
        return shape
    shape.kind = "legacy"
    ceiling = min(stored or 0, SCHEMA_VERSION)
    stamp = 0
    complete = True
    for version in sorted(INVENTORY):
        missing = [
            f"{kind} {table}.{name}".replace(" .", " ").rstrip(".")
            for kind, table, name in INVENTORY[version]
            if not probe.has(kind, table, name)
        ]
        if missing:
            shape.missing[version] = missing
            complete = False
        if complete and version <= ceiling:
            stamp = version
    shape.stamp_revision = stamp
    return shape


def revision_id(version: int) -> str | None:
    return None if version == 0 else f"{version:04d}"
