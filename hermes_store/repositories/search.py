"""Message search as a repository: what a gateway service injects to search people's
history (docs/reference/behaviour.md section 6). The query language and the routes are
`hermes_store.search`'s; this class gives them a unit of work."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..search import limits, planner
from ..search.backend import TRANSACTION_ENDS_WITH_SEARCH

if TYPE_CHECKING:
    from ..store import Store


class SearchRepository:
    """Message search as a unit of work: the query language and the routes are
    `hermes_store.search`'s.

    Args:
        store: the Store the repository works on.
    """

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
        tags: list[str] | None = None,
    ) -> limits.SearchHits:
        """Messages matching `query` (docs/reference/behaviour.md 6.1), best first, in one
        read unit of work. Each hit has `id, session_id, role, snippet` (the match marked
        `>>>`/`<<<`), `timestamp, tool_name, source, model, session_started` and `context`
        (the neighbouring messages); a query that cannot be read finds nothing. Raises
        QueryTooComplex for a query of too many terms, SearchTimedOut for a search that
        runs past HERMES_SEARCH_TIMEOUT_MS.

        Args:
            query: the search text: words, "phrases", prefix*, AND / OR / NOT.
            source_filter: only messages of sessions from these sources.
            exclude_sources: leave out messages of sessions from these sources.
            role_filter: only messages with these roles.
            limit: at most this many hits.
            offset: skip this many hits first.
            sort: 'newest' or 'oldest' for time order; anything else orders by relevance.
            include_inactive: also messages marked inactive (rewound or compacted away).
            tags: only messages of sessions carrying every one of these tags (hermes-store's
                own, `TagRepository`).
        """
        # one read unit, retried as a whole through server faults; the search's
        # transaction ends with it, so what the search sets needs no putting back. The
        # backend is the store's dialect's, resolved when the store opened.
        backend = self.store.dialect.search
        return self.store.read(
            lambda conn: planner.search_messages(
                conn.execution_options(**{TRANSACTION_ENDS_WITH_SEARCH: True}),
                query,
                source_filter,
                exclude_sources,
                role_filter,
                limit,
                offset,
                sort,
                include_inactive,
                tags,
                backend=backend,
            )
        )
