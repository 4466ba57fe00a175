"""Public behaviour the facade had wrong or lacked (issue 14, part 2), on both backends."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from hermes_store.compat import SessionDB


@pytest.fixture
def sdb(backend_url: str) -> Iterator[SessionDB]:
    db = SessionDB(url=backend_url)
    yield db
    db.close()


def test_import_of_a_parent_cycle_detaches_one_link(sdb: SessionDB) -> None:
    ended = {"end_reason": "compression", "ended_at": 2.0, "started_at": 1.0}
    result = sdb.import_sessions(
        [
            {"id": "a", "parent_session_id": "b", **ended},
            {"id": "b", "parent_session_id": "a", **ended},
        ]
    )
    assert result["ok"] and result["detached"] == 1
    a, b = sdb.get_session("a"), sdb.get_session("b")
    assert a is not None and b is not None
    assert a["parent_session_id"] is None
    assert b["parent_session_id"] == "a"
    assert sdb.get_compression_lineage("a") == ["a", "b"]
