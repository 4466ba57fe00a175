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


def test_search_sessions_by_id_ranks_exact_then_prefix_then_substring(sdb: SessionDB) -> None:
    # newest activity first would be xx_abc, other, abc_tail, ABC: the ranking wins
    for sid, started in (("xx_abc", 4.0), ("abc_tail", 2.0), ("ABC", 1.0), ("other", 3.0)):
        sdb.create_session(sid, "cli")
        sdb.append_message(sid, "user", f"hello from {sid}", timestamp=started)
    # a compression root is listed as its live tip and found by the root's id too
    sdb.create_session("old_root", "cli")
    sdb.append_message("old_root", "user", "first", timestamp=5.0)
    sdb.end_session("old_root", "compression")
    sdb.create_session("tip_child", "cli", parent_session_id="old_root")
    sdb.append_message("tip_child", "user", "later", timestamp=6.0)

    found = [r["id"] for r in sdb.search_sessions_by_id("abc")]
    assert found == ["ABC", "abc_tail", "xx_abc"]
    assert [r["id"] for r in sdb.search_sessions_by_id("abc", limit=2)] == ["ABC", "abc_tail"]
    by_root = sdb.search_sessions_by_id("old_root")
    assert [(r["id"], r["_lineage_root_id"]) for r in by_root] == [("tip_child", "old_root")]
    assert [r["id"] for r in sdb.search_sessions_by_id("tip_ch")] == ["tip_child"]
    assert sdb.search_sessions_by_id("  ") == [] and sdb.search_sessions_by_id("abc", 0) == []
    assert sdb.search_sessions_by_id("abc", exclude_sources=["cli"]) == []
