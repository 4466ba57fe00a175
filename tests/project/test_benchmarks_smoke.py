"""The benchmark runner works end to end: `python -m benchmarks --smoke --json` (the quick
corpus and upgrade files, a few calls per row) exits 0 and reports every row with positive
timings (the quick upgrade rows generate a small v9- and v22-shaped file each; runs in CI
with the rest), PostgreSQL rows
included: without a server they are skipped, except in CI, where skipped PostgreSQL rows
fail the test (as a skipped PostgreSQL suite does)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from helpers.databases import fixtures_dir

from hermes_store.migration.head import HEAD_REVISION

#: the search rows, in order (benchmarks/corpus.py QUERIES, then ZERO_HIT_QUERIES)
SEARCHES = (
    "word",
    "phrase",
    "prefix",
    "or",
    "word frequent",
    "cjk2",
    "cjk3",
    "literal contraction",
    "literal percent",
    "literal e-mail",
    "literal path",
    "literal flag",
    "literal + word",
    "literal short",
    "literal common letters",
    # benchmarks/corpus.py ZERO_HIT_QUERIES
    "zero-hit extends a word",
    "zero-hit inside a word",
    "zero-hit random",
    "zero-hit literal",
    "zero-hit ten literals",
)
#: the per-turn rows, in order (benchmarks/per_turn.py ROWS)
PER_TURN = (
    "append one (100 sessions)",
    "load a 100-message conversation",
    "load a 1,000-message conversation",
    "newest 20 of 1,000",
    "append into a 1,000-message session",
)
REPO_ROOT = Path(__file__).resolve().parents[2]
FIXTURES = fixtures_dir()


#: A guard against a hung run, not a bound on its speed: the smoke run is CPU-bound and
#: shares the machine with the rest of the suite (and, on a developer's machine, with
#: other runs), where it takes several times as long as on an idle one.
SMOKE_RUN_TIMEOUT_S = 900


def test_quick_benchmark_reports_every_row(tmp_path: Path) -> None:
    for name in ("state_v09.db", "state_v22.db"):
        if not (FIXTURES / name).exists():
            pytest.skip(f"legacy fixture {FIXTURES / name} not found")
    out = tmp_path / "bench.json"
    proc = subprocess.run(
        [sys.executable, "-m", "benchmarks", "--smoke", "--json", str(out)],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=SMOKE_RUN_TIMEOUT_S,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    data = json.loads(out.read_text())
    names = [row["operation"] for row in data["rows"]]
    assert names[0] == "append one"
    assert names[1].startswith("append batch")
    assert names[2].startswith("get messages")
    assert names[3] == "list 20 recent sessions"
    assert [n.split(":")[0] for n in names[4:]] == [f"search {q}" for q in SEARCHES]
    for row in data["rows"]:
        for key in ("floor_p50_ms", "floor_p95_ms", "store_p50_ms", "store_p95_ms"):
            assert row[key] > 0, (row["operation"], key)
    upgrades = {row["shape"]: row for row in data["upgrades"]}
    assert sorted(upgrades) == ["v22", "v9"]
    for shape, upgrade in upgrades.items():
        assert upgrade["after"] == HEAD_REVISION, shape
        assert upgrade["adoption"]["adopt_at_revision"] == int(shape[1:]), shape
        for key in (
            "total_s",
            "migration_txn_s",
            "floor_rebuild_s",
            "longest_write_txn_s",
            "peak_rss_mb",
        ):
            assert upgrade[key] > 0, (shape, key)
        assert upgrade["backfill_steps"] > 0, shape
        assert upgrade["teardown_steps"] > 0, shape
        assert upgrade["pacing"] == "default", shape
        (beside,) = upgrade["beside_appender"]
        assert beside["upgrade"]["after"] == HEAD_REVISION, shape
        assert beside["appender"]["appends"] > 0, shape
        assert beside["appender"]["latency_p99_s"] > 0, shape

    encrypted = data["encryption"]
    if "skipped" not in encrypted:  # sqlcipher3 is installed (the test extra on Linux x86_64)
        rows = {row["row"]: row for row in encrypted["rows"]}
        assert sorted(rows) == [
            "append one message",
            "open a Store",
            "search: substring (trigram)",
            "search: word",
        ]
        for row in rows.values():
            assert row["plain"]["p50_ms"] > 0 and row["ratio_p50"]["encrypted"] > 0
        assert encrypted["word_hits"]["plain"] == encrypted["word_hits"]["encrypted"] > 0
    modes = {row["variant"]: row for row in data["journal_modes"]}
    assert modes["DELETE, sqlite3"]["journal_mode"] == "delete"
    assert modes["WAL, sqlite3"]["journal_mode"] == "wal"
    assert modes["WAL, pysqlite3"]["journal_mode"] == "wal"  # the test extra installs it
    for variant, row in modes.items():
        for op in ("create session", "append one", "get messages", "list 20 recent sessions",
                   "append beside a reader"):
            assert row[op]["p50_ms"] > 0 and row[op]["p99_ms"] >= row[op]["p50_ms"], (variant, op)
    assert "journal modes (ratios against DELETE, sqlite3" in proc.stdout
    # the asyncio tables: every row measured, or skipped with the reason
    chats = data["concurrent"]
    assert chats["rows"] and "concurrent chats" in proc.stdout
    for row in chats["rows"]:
        assert row["appends_per_s"] > 0 and row["call_p99_ms"] > 0, row
    measured = {(r["backend"], r["mode"]) for r in chats["rows"]}
    assert ("sqlite", "thread pool") in measured, chats
    assert len(measured) + len(chats["skipped"]) == 5, chats  # benchmarks/concurrent.py MODES
    compared = data["peers"]
    assert "agent-framework session stores" in proc.stdout
    assert any(r["store"].startswith("hermes-store") for r in compared["rows"]), compared
    assert all(why for why in compared["skipped"].values())

    # the per-turn table: both SQLite drivers and PostgreSQL, hermes-store measured on every
    # row (the peers are optional installs: measured, skipped or failed, each with a reason)
    turns = data["per_turn"]
    assert "per-turn calls" in proc.stdout
    backends = [column["backend"] for column in turns["columns"]]
    assert backends[0].startswith("SQLite (pysqlite3") and backends[1].startswith("SQLite (sqlite3")
    assert backends[2] == "PostgreSQL"
    for column in turns["columns"]:
        if "all" in column["skipped"]:
            assert column["backend"] == "PostgreSQL" and not os.environ.get("CI"), column
            continue
        assert [row["row"] for row in column["rows"]] == list(PER_TURN), column
        for row in column["rows"]:
            # the repositories' own entry, "hermes-store (driver, mode)"; with google-adk
            # installed the ADK adapter's entry also starts with "hermes-store"
            (hermes,) = [r for n, r in row["stores"].items() if n.startswith("hermes-store (")]
            assert hermes["p50_ms"] > 0 and hermes["n"] == 20, row
        assert all(column["skipped"].values()) and all(column["failed"].values()), column

    changes = data["feed"]
    assert "change feed" in proc.stdout
    fed = {(r["backend"], r["operation"]) for r in changes["rows"]}
    for op in ("poll, no news", "poll, 10 new", "append one", "append batch of 50"):
        assert ("sqlite", op) in fed, changes
    assert len(fed) + 4 * len(changes["skipped"]) == 8, changes
    for row in changes["rows"]:
        assert row["ratio_p50"] > 0, row

    pg = data["postgres"]
    if "skipped" in pg:
        assert "PostgreSQL rows skipped" in proc.stdout
        if os.environ.get("CI"):
            pytest.fail(f"CI must run the PostgreSQL benchmark rows: {pg['skipped']}")
        return
    assert pg["load"]["messages"] == data["messages"]
    assert [row["operation"] for row in pg["rows"]] == names
    for row in pg["rows"]:
        for key in ("pg_p50_ms", "pg_p95_ms", "sqlite_p50_ms", "ratio_p50", "ratio_p95"):
            assert row[key] > 0, (row["operation"], key)
    assert "PostgreSQL" in proc.stdout and "ratio pg/sqlite" in proc.stdout


@pytest.mark.parametrize("args", [["--size", "10m"], ["--postgres-only"]])
def test_the_10m_run_needs_both_flags(args: list[str]) -> None:
    # the 10M PostgreSQL run (benchmarks/scale.py) never starts by accident
    run = subprocess.run(
        [sys.executable, "-m", "benchmarks", *args],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 2, run.stdout + run.stderr
    assert "--size 10m runs with --postgres-only" in run.stderr


def test_the_postgres_profile_explains_every_statement_a_search_runs(pg_fresh_db: str) -> None:
    """`python -m benchmarks.postgres explain URL QUERY`: every statement a search runs,
    its own EXPLAIN estimates printed as they are, the others with their plans."""
    from hermes_store.repositories.messages import MessageRepository
    from hermes_store.repositories.sessions import SessionRepository
    from hermes_store.store import Store

    store = Store(pg_fresh_db)
    try:
        SessionRepository(store).create_session("s", "cli")
        MessageRepository(store).append_messages(
            "s", [{"role": "user", "content": f"migration step {n}"} for n in range(30)]
        )
    finally:
        store.close()
    run = subprocess.run(
        [sys.executable, "-m", "benchmarks.postgres", "explain", pg_fresh_db, "migrat*"],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 0, run.stderr
    assert "===== 'migrat*': 20 hits" in run.stdout
    assert "EXPLAIN (FORMAT JSON) SELECT m.id" in run.stdout  # printed
    assert run.stdout.count("Execution Time") >= 3  # the others explained
