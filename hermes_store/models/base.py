"""Declarative base and the column types of the upstream schema.

The original declares TEXT, INTEGER and REAL literally, and `PRAGMA table_info` shows the
declared type, so the generic String/Float/Boolean types (VARCHAR, FLOAT, BOOLEAN) would
differ. SQLite's INTEGER and REAL are eight bytes; PostgreSQL's are four (REAL would lose
epoch seconds, INTEGER overflow on token sums), hence BIGINT and DOUBLE PRECISION there.
"""

from __future__ import annotations

from sqlalchemy import BIGINT, INTEGER, REAL, TEXT, MetaData
from sqlalchemy.dialects.postgresql import DOUBLE_PRECISION
from sqlalchemy.orm import DeclarativeBase
from sqlalchemy.types import TypeEngine

Text_: TypeEngine[str] = TEXT()
Integer_: TypeEngine[int] = INTEGER().with_variant(BIGINT(), "postgresql")
Real_: TypeEngine[float] = REAL().with_variant(DOUBLE_PRECISION(), "postgresql")


class Base(DeclarativeBase):
    # No naming convention: every upstream name (idx_..., sqlite autoindexes) is a contract.
    metadata = MetaData()
