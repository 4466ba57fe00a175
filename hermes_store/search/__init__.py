"""Full-text search: query reading and sanitising, one planner over one backend per
dialect, and FTS maintenance.

Imports allowed (tests/project/test_packages.py checks them):

    errors, config, contract, runtime, sqlite, migration, repositories, _migrations
"""

from __future__ import annotations

# the backends register themselves in their dialect (runtime/backends.py) on import
from . import postgres_fts as _postgres_fts  # noqa: F401
from . import sqlite_fts as _sqlite_fts  # noqa: F401
from .planner import search_messages
from .query import sanitize_fts5_query

__all__ = ["sanitize_fts5_query", "search_messages"]
