"""The space report (issue 39, item 5): the bytes of each table, index and FTS index on
both backends (SQLite's dbstat where compiled in, an estimate without it), the largest
sessions and tool outputs, and a scan bounded by its time limit (docs/space.md)."""

from __future__ import annotations

import asyncio
import random
import string
from typing import Any

import pytest

from hermes_store import MessageRepository, SessionRepository, SpaceRepository, Store
from hermes_store.aio import AsyncStore
from hermes_store.errors import InvalidInput


def _has_dbstat(store: Store) -> bool:
    with store.read() as conn:
        options = {str(r[0]) for r in conn.exec_driver_sql("PRAGMA compile_options")}
    return "ENABLE_DBSTAT_VTAB" in options


def _noise(size: int, seed: int) -> str:
    """Text PostgreSQL's compression cannot shrink (its sizes are stored bytes)."""
    return "".join(random.Random(seed).choices(string.ascii_letters, k=size))


def _fill(store: Store) -> None:
    sessions, messages = SessionRepository(store), MessageRepository(store)
    for sid, size in (("small", 10), ("big", 5000), ("middle", 800)):
        sessions.create_session(sid, "cli")
        messages.append_messages(
            sid,
            [{"role": "user", "content": _noise(size, size)}]
            + [
                {"role": "tool", "tool_name": "shell", "content": _noise(size + i, i)}
                for i in range(3)
            ],
        )


def test_space_report_on_both_backends(backend_url: str) -> None:
    with Store(backend_url) as store:
        _fill(store)
        report = SpaceRepository(store).space_report(top=2, scan_seconds=None)
        dbstat = store.dialect == "sqlite" and _has_dbstat(store)
    by_name = {o["name"]: o for o in report["objects"]}
    assert by_name["messages"]["kind"] == "table" and by_name["messages"]["bytes"] > 0
    assert by_name["sessions"]["kind"] == "table"
    fts = {o["name"] for o in report["objects"] if o["kind"] == "fts"}
    indexes = [o for o in report["objects"] if o["kind"] == "index"]
    assert any(o["table"] == "messages" for o in indexes)
    if store.dialect == "sqlite":
        assert report["method"] == ("dbstat" if dbstat else "estimate")
        assert fts == {"messages_fts", "messages_fts_trigram"}
        # shadow tables are folded into their index
        assert not any(
            o["name"].startswith("messages_fts_") for o in report["objects"] if o["kind"] != "fts"
        )
        assert report["free_bytes"] is not None
    else:
        assert report["method"] == "postgresql"
        assert fts, "the search indexes are reported as FTS"
    assert report["database_bytes"] and report["database_bytes"] > 0
    assert [s["session_id"] for s in report["largest_sessions"]] == ["big", "middle"]
    assert report["largest_sessions"][0]["messages"] == 4
    tools = report["largest_tool_outputs"]
    assert [t["session_id"] for t in tools] == ["big", "big"]
    assert tools[0]["bytes"] >= tools[1]["bytes"] and tools[0]["tool_name"] == "shell"
    assert report["scan"]["complete"] and report["scan"]["rows_scanned"] == 12
    # sizes are bytes: the largest tool output holds 5002 one-byte characters
    if store.dialect == "sqlite":
        assert tools[0]["bytes"] == 5002


@pytest.mark.usefixtures("sqlite_driver")
def test_sqlite_sizes_add_up_to_the_file(fresh_db: str) -> None:
    with Store(fresh_db) as store:
        _fill(store)
        report = SpaceRepository(store).space_report()
        # the standard library's SQLite has dbstat, pysqlite3's does not: both are tried
        assert report["method"] == ("dbstat" if _has_dbstat(store) else "estimate")
    total = sum(o["bytes"] for o in report["objects"])
    used = report["database_bytes"] - report["free_bytes"]
    # dbstat counts every page of every b-tree; the estimate is scaled to the used pages
    assert abs(total - used) <= 0.02 * used + 4096


def test_scan_stops_at_its_time_limit_and_says_so(
    fresh_db: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from hermes_store.repositories import space

    monkeypatch.setattr(space, "SCAN_WINDOW", 2)
    with Store(fresh_db) as store:
        _fill(store)
        report = SpaceRepository(store).space_report(scan_seconds=0)
    scan = report["scan"]
    assert not scan["complete"]
    assert scan["rows_scanned"] == 2 and scan["from_id"] == 11 and scan["to_id"] == 12


def test_bad_arguments_are_refused(fresh_db: str) -> None:
    with Store(fresh_db, read_only=True) as store:
        with pytest.raises(InvalidInput):
            SpaceRepository(store).space_report(top=0)
        with pytest.raises(InvalidInput):
            SpaceRepository(store).space_report(scan_seconds=-1)
        for wrong in ("5", True, float("nan")):
            with pytest.raises(InvalidInput):
                SpaceRepository(store).space_report(scan_seconds=wrong)  # type: ignore[arg-type]


def test_async_store_space_report(fresh_db: str) -> None:
    async def run() -> Any:
        async with await AsyncStore.open(fresh_db) as store:
            return await store.space.space_report(top=1)

    report = asyncio.run(run())
    assert report["largest_sessions"] == []
    assert report["scan"]["complete"]
