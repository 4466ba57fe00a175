"""Public behaviour the facade had wrong or lacked (issue 14, part 2), on both backends."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from sqlalchemy import text

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


def test_vacuum_runs_outside_a_transaction_on_both_backends(sdb: SessionDB) -> None:
    sdb.create_session("s1", "cli")
    for i in range(50):
        sdb.append_message("s1", "user", f"message {i} " + "x" * 2000)
    sdb.delete_session("s1")
    size_before = sdb.logical_size_bytes()
    assert size_before is not None and size_before > 0
    optimized = sdb.vacuum()
    # SQLite optimises its two FTS5 indexes first; PostgreSQL has none to optimise
    assert optimized == (2 if sdb.store.dialect == "sqlite" else 0)
    size_after = sdb.logical_size_bytes()
    assert size_after is not None and 0 < size_after
    if sdb.store.dialect == "sqlite":
        assert size_after < size_before  # the freed pages went back to the file system
    sdb.create_session("s2", "cli")  # the store works on afterwards
    assert sdb.get_session("s2") is not None


def test_auto_prune_vacuums_on_both_backends(sdb: SessionDB) -> None:
    sdb.create_session("old", "cli")
    sdb.end_session("old", "done")
    sdb.store.write(
        lambda unit: unit.execute(
            text("UPDATE sessions SET started_at = 1.0, ended_at = 2.0 WHERE id = 'old'")
        )
    )
    result = sdb.maybe_auto_prune_and_vacuum(retention_days=30)
    assert result == {"skipped": False, "pruned": 1, "vacuumed": True}
    assert sdb.get_session("old") is None


def test_fts_storage_needs_nothing_on_postgresql(sdb: SessionDB) -> None:
    phases: list[str] = []
    result = sdb.optimize_fts_storage(progress_cb=lambda p: phases.append(p["phase"]))
    if sdb.store.dialect == "postgresql":
        assert result == {"ok": True, "vacuumed": None, "reason": "nothing_to_optimize"}
        assert sdb.fts_optimize_available() is False
        assert sdb.optimize_fts() == 0 and sdb.rebuild_fts() == 0
    else:
        assert result == {"ok": True, "vacuumed": True}
        assert "vacuum" in phases
        assert sdb.fts_optimize_available() is False  # settled by the optimisation
    assert phases[-1] == "done"
    assert sdb.fts_rebuild_status() is None and sdb.fts_rebuild_step() is None
    assert sdb.fts_cjk_rebuild_status() is None and sdb.fts_cjk_rebuild_step() is None
