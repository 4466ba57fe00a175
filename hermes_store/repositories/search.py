"""Message search as a repository: what a gateway service injects to search people's
history (spec/behaviour.md section 6). The query language and the routes are
`hermes_store.search`'s; this class gives them a unit of work."""

from __future__ import annotations

from typing import Any

from ..search import planner
from ..store import Store
from ._units import read_method

Hit = dict[str, Any]


class SearchRepository:
    def __init__(self, store: Store) -> None:
        self.store = store

    search_messages = read_method(planner.search_messages)
