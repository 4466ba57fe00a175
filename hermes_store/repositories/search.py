"""Message search as a repository: what a gateway service injects to search people's
history (spec/behaviour.md section 6). The query language and the routes are
`hermes_store.search`'s; this class gives them a unit of work."""

from __future__ import annotations

from ..search import planner
from ..search.backend import TRANSACTION_ENDS_WITH_SEARCH
from ..store import Store
from ._units import read_method


class SearchRepository:
    def __init__(self, store: Store) -> None:
        self.store = store

    # the read unit is the search's whole transaction
    search_messages = read_method(
        planner.search_messages, options={TRANSACTION_ENDS_WITH_SEARCH: True}
    )
