"""Declarative base and the column types of the upstream schema.

The original declares TEXT, INTEGER and REAL literally, and `PRAGMA table_info` shows the
declared type, so the generic String/Float/Boolean types (VARCHAR, FLOAT, BOOLEAN) would
differ. PostgreSQL's REAL is four bytes and would lose epoch seconds, hence the variant.
"""

from __future__ import annotations

from sqlalchemy import INTEGER, REAL, TEXT, MetaData
from sqlalchemy.dialects.postgresql import DOUBLE_PRECISION
from sqlalchemy.orm import DeclarativeBase
from sqlalchemy.types import TypeEngine

Text_: TypeEngine[str] = TEXT()
Integer_: TypeEngine[int] = INTEGER()
Real_: TypeEngine[float] = REAL().with_variant(DOUBLE_PRECISION(), "postgresql")


class Base(DeclarativeBase):
    # No naming convention: every upstream name (idx_..., sqlite autoindexes) is a contract.
    metadata = MetaData()
