"""`schema_version` (the upstream version number) and `state_meta` (string key/value)."""

from __future__ import annotations

from sqlalchemy import Column, Table
from sqlalchemy.orm import Mapped, mapped_column

from .base import Base, Integer_, Text_

# A rowid table without a primary key, so it is a Core table rather than a mapped class.
schema_version = Table(
    "schema_version",
    Base.metadata,
    Column("version", Integer_, nullable=False),
)


class StateMeta(Base):
    __tablename__ = "state_meta"

    key: Mapped[str] = mapped_column(Text_, primary_key=True)
    value: Mapped[str | None] = mapped_column(Text_)
