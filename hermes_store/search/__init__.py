"""Full-text search: query sanitising, the per-dialect routes and FTS maintenance."""

from __future__ import annotations

from typing import Any

from sqlalchemy import Connection

from .postgres_fts import search_messages as _postgres_search
from .query import sanitize_fts5_query
from .sqlite_fts import search_messages as _sqlite_search


def search_messages(conn: Connection, query: str, **options: Any) -> list[dict[str, Any]]:
    """Search message text; see `sqlite_fts.search_messages` for the options and the
    shape of a hit. Never raises on user input: invalid syntax yields no results."""
    if conn.dialect.name == "postgresql":
        return _postgres_search(conn, query, **options)
    return _sqlite_search(conn, query, **options)


__all__ = ["sanitize_fts5_query", "search_messages"]
