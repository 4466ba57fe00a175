"""Which FTS layout a SQLite database has (spec/schema.md section 6.2)."""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import Connection, text

HIGH_WATER = "fts_rebuild_high_water"
PROGRESS = "fts_rebuild_progress"
TRIGGERS = (
    "messages_fts_insert",
    "messages_fts_delete",
    "messages_fts_update",
    "messages_fts_trigram_insert",
    "messages_fts_trigram_delete",
    "messages_fts_trigram_update",
)


def _sql(conn: Connection, name: str) -> str | None:
    value = conn.execute(
        text("SELECT sql FROM sqlite_master WHERE name = :n"), {"n": name}
    ).scalar()
    return None if value is None else str(value)


def _meta(conn: Connection, key: str) -> str | None:
    if conn.dialect.name == "sqlite" and _sql(conn, "state_meta") is None:
        return None
    value = conn.execute(text("SELECT value FROM state_meta WHERE key = :k"), {"k": key}).scalar()
    return None if value is None else str(value)


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
    def optimizable(self) -> bool:
        """True when `optimize-storage` has work: a legacy layout to convert, a backfill
        to finish or demoted tables to tear down (never on PostgreSQL, whose generated
        column is kept current by construction)."""
        if self.layout == "tsvector":
            return False
        return self.layout != "v23" or self.backfill_pending or bool(self.trash_tables)

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


def classify(conn: Connection) -> str:
    base = _sql(conn, "messages_fts")
    trigram = _sql(conn, "messages_fts_trigram")
    if base is None:
        return "none"
    view = _sql(conn, "messages_fts_trigram_src")
    if "tool_name" in base:
        if trigram and "messages_fts_trigram_src" in trigram and view:
            return "v23"
        return "hybrid"
    compact = base.replace(" ", "")
    external = "content=messages" in compact or "content='messages'" in compact
    if external:
        if trigram is None:
            return "L1"
        if "content=" in trigram.replace(" ", ""):
            return "L1+trigram"
        return "hybrid"  # the original v23 code's result on a pre-v10 file
    delete = _sql(conn, "messages_fts_delete") or ""
    return "L2" if "'delete'" in delete else "L3"


def fts_state(conn: Connection) -> FTSState:
    if conn.dialect.name == "postgresql":
        # generated tsvector + pg_trgm: nothing to backfill, no triggers to count
        return FTSState(
            layout="tsvector",
            triggers=0,
            high_water=None,
            progress=None,
            trash_tables=(),
            storage_version=_meta(conn, "fts_storage_version"),
            has_cjk=False,
        )
    trigger_count = conn.execute(
        text(
            "SELECT COUNT(*) FROM sqlite_master WHERE type = 'trigger' AND name IN "
            "('messages_fts_insert', 'messages_fts_delete', 'messages_fts_update', "
            "'messages_fts_trigram_insert', 'messages_fts_trigram_delete', "
            "'messages_fts_trigram_update')"
        )
    ).scalar()
    trash = conn.execute(
        text(
            "SELECT name FROM sqlite_master WHERE type = 'table' "
            "AND name LIKE 'fts\\_v22\\_trash\\_%' ESCAPE '\\' ORDER BY name"
        )
    ).scalars()
    return FTSState(
        layout=classify(conn),
        triggers=int(trigger_count or 0),
        high_water=_int(_meta(conn, HIGH_WATER)),
        progress=_int(_meta(conn, PROGRESS)),
        trash_tables=tuple(str(t) for t in trash),
        storage_version=_meta(conn, "fts_storage_version"),
        has_cjk=_sql(conn, "messages_fts_cjk") is not None,
    )
