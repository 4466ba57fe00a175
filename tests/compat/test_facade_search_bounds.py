"""The drop-in facade's search never raises on any input (docs/reference/behaviour.md 6.2): a query
past the search bounds (search/limits.py) finds nothing there, with a warning logged,
while the repository raises the typed error."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from hermes_store.compat import SessionDB
from hermes_store.errors import QueryTooComplex
from hermes_store.repositories.search import SearchRepository
from hermes_store.search.limits import MAX_TERMS


def test_a_query_past_the_term_limit_finds_nothing_through_the_facade(
    backend_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    db: Any = SessionDB(url=backend_url)
    try:
        db.create_session("s", "cli")
        db.append_message("s", "user", "alpha beta gamma")
        too_many = " OR ".join(f"word{i}" for i in range(MAX_TERMS + 5))
        with pytest.raises(QueryTooComplex):
            SearchRepository(db.store).search_messages(too_many)
        with caplog.at_level(logging.WARNING, logger="hermes_store.compat"):
            assert db.search_messages(too_many) == []
        assert any("search_messages" in r.getMessage() for r in caplog.records)
        assert [h["session_id"] for h in db.search_messages("alpha")] == ["s"]
    finally:
        db.close()
