"""The examples of docs/analytics.md on PostgreSQL (issue 24): the page's blocks run
against the v23 fixture copied into a PostgreSQL database of the test's own, and print
what they print on SQLite (the first line names the database); the sections that read
through the repositories (search, usage by model and day in a time zone) give their
documented answers on both."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import text
from sqlalchemy.exc import DBAPIError
from test_analytics import BLOCKS, ENV, SECTIONS, SETUP, run

from hermes_store import migrate
from hermes_store.migration.copy import copy_database

pd = pytest.importorskip("pandas")


@pytest.fixture
def sqlite_copy(legacy_db: Callable[..., Path]) -> Path:
    path = legacy_db(23)
    migrate.upgrade(path, fts_min_pause=0)
    return path


@pytest.fixture
def pg_copy(sqlite_copy: Path, pg_url: str) -> str:
    assert copy_database(str(sqlite_copy), pg_url).ok
    return pg_url


def _run_on(
    url: str, blocks: list[Any], capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> tuple[dict[str, Any], list[str]]:
    monkeypatch.setenv(ENV, url)
    return run(blocks, capsys)


def test_every_example_prints_the_same_on_both_databases(
    sqlite_copy: Path,
    pg_copy: str,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    lite, lite_out = _run_on(str(sqlite_copy), BLOCKS, capsys, monkeypatch)
    pg, pg_out = _run_on(pg_copy, BLOCKS, capsys, monkeypatch)
    assert lite_out[0] == "sqlite: 5 sessions, 64 messages\n"
    assert pg_out[0] == "postgresql: 5 sessions, 64 messages\n"
    for block, on_sqlite, on_pg in zip(BLOCKS[1:], lite_out[1:], pg_out[1:], strict=True):
        assert on_pg == on_sqlite, f"docs/analytics.md:{block.line} ({block.section})"
    for ns in (lite, pg):
        # (6) search from a notebook, (7) usage by model and day in a time zone
        assert list(ns["hits_df"]["id"]) == [15, 18, 26]
        assert set(ns["hits_df"]["session_id"]) == {"20260302_140000_7e1e9a"}
        assert set(ns["daily_utc"]["day"]) == {"2026-12-02"}
        assert set(ns["daily_auckland"]["day"]) == {"2026-12-03"}
        assert int(ns["daily_utc"]["input_tokens"].sum()) == 66_470
        assert [row.tool for row in ns["top_tools"]][0] == "patch"


@pytest.mark.parametrize("section", SECTIONS)
def test_each_section_runs_alone_on_postgresql(
    section: str,
    pg_copy: str,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    blocks = [SETUP, *(b for b in BLOCKS[1:] if b.section == section)]
    _, printed = _run_on(pg_copy, blocks, capsys, monkeypatch)
    assert all(out.strip() for out in printed)


def test_the_setup_engine_is_read_only_on_postgresql(
    pg_copy: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(ENV, pg_copy)
    namespace: dict[str, Any] = {"__name__": "analytics_md"}
    exec(SETUP.compiled(), namespace)  # noqa: S102 - the page's own example
    engine = namespace["engine"]
    try:
        with engine.connect() as conn, pytest.raises(DBAPIError, match="read-only"):
            conn.execute(text("UPDATE sessions SET title = 'x'"))
    finally:
        engine.dispose()
