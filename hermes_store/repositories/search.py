"""Message search as a repository: what a gateway service injects to search people's
history (docs/reference/behaviour.md section 6). The query language and the routes are
`hermes_store.search`'s; this class gives them a unit of work."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..search import planner
from ..search.backend import TRANSACTION_ENDS_WITH_SEARCH
from ._units import read_method

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

    # the read unit is the search's whole transaction
    search_messages = read_method(
        planner.search_messages,
        options={TRANSACTION_ENDS_WITH_SEARCH: True},
        doc="""Messages matching `query` (docs/reference/behaviour.md 6.1), best first, in one
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
        """,
    )
