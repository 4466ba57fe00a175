"""`schema_version` (the upstream version number) and `state_meta` (string key/value)."""

from __future__ import annotations

from sqlalchemy import Column, Table
from sqlalchemy.orm import Mapped, mapped_column

from .base import Base, Integer_, Text_

# A rowid table without a primary key, so it is a Core table rather than a mapped class.
schema_version = Table(
    "schema_version",
    Base.metadata,
    Column(
        "version",
        Integer_,
        nullable=False,
        doc="The upstream schema version number (23 at head); one row.",
    ),
)


class StateMeta(Base):
    """A row of `state_meta`: string key/value bookkeeping (FTS markers, maintenance
    throttles, other Hermes modules' keys), see docs/reference/schema.md 7."""

    __tablename__ = "state_meta"

    key: Mapped[str] = mapped_column(
        Text_,
        primary_key=True,
        doc="Key (`fts_storage_version`, `last_auto_prune`, ...); unknown keys are kept.",
    )
    value: Mapped[str | None] = mapped_column(Text_, doc="Value, always text.")
