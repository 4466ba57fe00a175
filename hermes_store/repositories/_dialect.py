"""The one place repositories ask which database they are on."""

from __future__ import annotations

from typing import Any

from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.orm import Session


def upsert_insert(session: Session, entity: Any) -> sqlite.Insert | postgresql.Insert:
    """An INSERT that supports ON CONFLICT for the dialect the session is bound to.

    Both dialects spell the upsert the same way (`on_conflict_do_update`, `excluded`),
    so callers stay dialect-neutral as long as they only pick the constructor here."""
    if session.get_bind().dialect.name == "postgresql":
        return postgresql.insert(entity)
    return sqlite.insert(entity)
