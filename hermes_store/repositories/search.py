"""Message search as a repository: what a gateway service injects to search people's
history (spec/behaviour.md section 6). The query language and the routes are
`hermes_store.search`'s; this class gives them a unit of work."""

from __future__ import annotations

from typing import Any

from ..search import search_messages
from ..store import Store

Hit = dict[str, Any]


class SearchRepository:
    def __init__(self, store: Store) -> None:
        self.store = store

    def search_messages(
        self,
        query: str,
        source_filter: list[str] | None = None,
        exclude_sources: list[str] | None = None,
        role_filter: list[str] | None = None,
        limit: int = 20,
        offset: int = 0,
        sort: str | None = None,
        include_inactive: bool = False,
    ) -> list[Hit]:
        """Messages matching `query`, best first (or `sort="newest"/"oldest"`). Each hit
        has `id, session_id, role, snippet` (the match marked `>>>`/`<<<`), `timestamp,
        tool_name, source, model, session_started` and `context` (the neighbouring
        messages). Never raises on user input: a query that cannot be read finds nothing."""
        return self.store.read(
            lambda conn: search_messages(
                conn,
                query,
                source_filter=source_filter,
                exclude_sources=exclude_sources,
                role_filter=role_filter,
                limit=limit,
                offset=offset,
                sort=sort,
                include_inactive=include_inactive,
            )
        )
