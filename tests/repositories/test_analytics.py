"""The examples of docs/analytics.md run against a populated database.

Every ```python block of the page is extracted in order and executed in one namespace
against an upgraded copy of the v23 fixture (5 sessions, 64 messages). The setup block
reads the database path from `HERMES_DB`. A block that raises fails the test; afterwards
the names the examples leave behind are checked against what the fixture holds (read
independently with sqlite3), and the file is checked to be unchanged.
"""

from __future__ import annotations

import re
import sqlite3
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from helpers.databases import set_journal_mode

from hermes_store import migrate

pd = pytest.importorskip("pandas")

REPO_ROOT = Path(__file__).resolve().parents[2]
DOC = REPO_ROOT / "docs" / "analytics.md"
ENV = "HERMES_DB"
ROOT_ID = "20260303_080000_c0ffee"
TIP_ID = "20260303_083012_c0ffe2"
MODELS = {
    "anthropic/claude-sonnet-4",
    "nousresearch/hermes-4-405b",
    "openai/gpt-5-codex",
    "google/gemini-2.5-flash",
}
FENCE_OPEN = re.compile(r"^```python\s*$")
FENCE_CLOSE = re.compile(r"^```\s*$")


@dataclass(frozen=True)
class Block:
    section: str
    line: int  # 1-based line of the first code line in the page
    code: str

    def compiled(self) -> Any:
        # Padding keeps tracebacks pointing at the right line of docs/analytics.md.
        return compile("\n" * (self.line - 1) + self.code, str(DOC), "exec")


def python_blocks(text: str) -> list[Block]:
    blocks: list[Block] = []
    section = ""
    current: list[str] | None = None
    start = 0
    for number, line in enumerate(text.splitlines(), start=1):
        if current is None:
            if line.startswith("## "):
                section = line[3:].strip()
            elif FENCE_OPEN.match(line):
                current, start = [], number + 1
        elif FENCE_CLOSE.match(line):
            blocks.append(Block(section, start, "\n".join(current) + "\n"))
            current = None
        else:
            current.append(line)
    assert current is None, "unterminated ```python block in docs/analytics.md"
    return blocks


BLOCKS = python_blocks(DOC.read_text(encoding="utf-8"))
SETUP = BLOCKS[0]
# the sections that print; the last block, `engine.dispose()`, prints nothing
SECTIONS = list(dict.fromkeys(b.section for b in BLOCKS[1:-1]))


@pytest.fixture
def analytics_db(legacy_db: Callable[..., Path], monkeypatch: pytest.MonkeyPatch) -> Path:
    path = legacy_db(23)
    migrate.upgrade(path, fts_min_pause=0)
    monkeypatch.setenv(ENV, str(path))
    return path


def run(
    blocks: list[Block], capsys: pytest.CaptureFixture[str]
) -> tuple[dict[str, Any], list[str]]:
    """Execute `blocks` in one namespace; return it and what each block printed."""
    namespace: dict[str, Any] = {"__name__": "analytics_md"}
    printed: list[str] = []
    try:
        for block in blocks:
            exec(block.compiled(), namespace)  # noqa: S102 - the page's own examples
            printed.append(capsys.readouterr().out)
    finally:
        engine = namespace.get("engine")
        if engine is not None:
            engine.dispose()
    return namespace, printed


def expected(path: Path, sql: str) -> list[tuple[Any, ...]]:
    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        return con.execute(sql).fetchall()
    finally:
        con.close()


def test_page_has_the_examples() -> None:
    assert SETUP.section.startswith("Setup")
    assert "HERMES_DB" in SETUP.code and "read_only_engine(" in SETUP.code
    # the model of `sessions` under the name that does not shadow sqlalchemy.orm.Session
    assert "import HermesSession" in SETUP.code
    bare = [b.line for b in BLOCKS if re.search(r"(?<![\w.])Session\b", b.code)]
    assert bare == [], f"blocks naming the model `Session` at docs/analytics.md lines {bare}"
    assert len(SECTIONS) >= 6, SECTIONS
    for number in range(1, 6):
        assert any(s.startswith(f"{number}. ") for s in SECTIONS), (number, SECTIONS)


def test_examples_run_against_the_v23_fixture(
    analytics_db: Path, db: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    before = db.dump(analytics_db)

    ns, printed = run(BLOCKS, capsys)

    # Every block states what it prints, so every block prints something; the last one
    # closes the engine.
    assert BLOCKS[-1].section == "When you are done"
    assert BLOCKS[-1].code.startswith("engine.dispose()")
    for block, out in zip(BLOCKS[:-1], printed[:-1], strict=True):
        assert out.strip(), f"block at docs/analytics.md:{block.line} printed nothing"
    assert "5 sessions, 64 messages" in printed[0]

    # (1) tokens and cost by model per day: ORM rows and the pandas frames.
    truth = {
        model: (tin, tout, cost)
        for model, tin, tout, cost in expected(
            analytics_db,
            "SELECT model, SUM(input_tokens), SUM(output_tokens),"
            " SUM(CASE WHEN actual_cost_usd > 0 THEN actual_cost_usd"
            " ELSE estimated_cost_usd END) FROM session_model_usage GROUP BY model",
        )
    }
    assert set(truth) == MODELS
    assert {row.model for row in ns["usage_rows"]} == MODELS
    assert all(row.input_tokens > 0 and row.output_tokens > 0 for row in ns["usage_rows"])
    usage_df = ns["usage_df"]
    assert len(usage_df) == len(ns["usage_rows"])
    assert pd.api.types.is_datetime64_any_dtype(usage_df["day"])
    by_model = ns["usage_by_model"]
    assert set(by_model.index) == MODELS
    assert (by_model["input_tokens"] > 0).all() and (by_model["output_tokens"] > 0).all()
    for model, (tin, tout, cost) in truth.items():
        assert by_model.loc[model, "input_tokens"] == tin
        assert by_model.loc[model, "output_tokens"] == tout
        assert by_model.loc[model, "cost_usd"] == pytest.approx(cost)
    assert by_model.loc["openai/gpt-5-codex", "input_tokens"] == 48000 + 9100
    assert by_model.loc["openai/gpt-5-codex", "sessions"] == 2
    assert by_model.index[0] == "openai/gpt-5-codex"  # the most expensive
    assert set(ns["input_by_day"].columns) == MODELS
    assert int(ns["input_by_day"].to_numpy().sum()) == sum(t[0] for t in truth.values())

    # (2) most used tools, in SQL and in pandas.
    tool_counts = {
        "patch": 5,
        "terminal": 2,
        "read_file": 1,
        "search_files": 1,
        "web_search": 1,
        "web_extract": 1,
        "session_search": 1,
    }
    top_tools = ns["top_tools"]
    assert {row.tool: row.calls for row in top_tools} == tool_counts
    assert (top_tools[0].tool, top_tools[0].calls) == ("patch", 5)
    assert {"web_search", "patch"} <= {row.tool for row in top_tools}
    assert {row.tool: row.sessions for row in top_tools}["patch"] == 2
    assert ns["tool_counts"].to_dict() == tool_counts
    assert ns["tool_counts"].index[0] == "patch"
    assert ns["tools_df"]["id"].nunique() == 11  # messages with tool_calls

    # (3) longest sessions.
    by_messages = ns["longest_by_messages"]
    assert list(by_messages["id"]) == [
        "20260303_080000_c0ffee",
        "20260301_091500_a1b2c3",
        "20260302_140000_7e1e9a",
        "20260303_083012_c0ffe2",
        "20260304_020000_c7a01d",
    ]
    assert list(by_messages["message_count"]) == [18, 14, 12, 10, 10]
    assert (by_messages["message_count"] == by_messages["stored_rows"]).all()
    by_wall = ns["longest_by_wall"]
    assert by_wall["id"].iloc[0] == ROOT_ID
    assert (by_wall["wall_seconds"] > 0).all()
    assert by_wall["wall_seconds"].is_monotonic_decreasing
    assert by_wall.set_index("id")["still_open"].to_dict() == {
        sid: sid == TIP_ID for sid in by_messages["id"]
    }
    ((tip_started, tip_last),) = expected(
        analytics_db,
        f"SELECT s.started_at, MAX(m.timestamp) FROM sessions s JOIN messages m"
        f" ON m.session_id = s.id WHERE s.id = '{TIP_ID}'",
    )
    open_row = by_wall.set_index("id").loc[TIP_ID]
    assert open_row["end_reason"] == "(open)"
    assert open_row["wall_seconds"] == pytest.approx(tip_last - tip_started)

    # (4) lineage, root first.
    assert ns["TIP_ID"] == TIP_ID
    assert ns["lineage_ids"] == [ROOT_ID, TIP_ID]
    assert [row.depth for row in ns["lineage"]] == [1, 0]
    assert [row.end_reason for row in ns["lineage"]] == ["compression", None]

    # (5) messages per day by role.
    per_day = ns["per_day_by_role"]
    assert set(per_day.columns) == {"user", "assistant", "tool"}
    assert per_day.sum().to_dict() == {"assistant": 29, "tool": 12, "user": 23}
    ((first_ts, last_ts),) = expected(
        analytics_db, "SELECT MIN(timestamp), MAX(timestamp) FROM messages"
    )
    first_day = pd.Timestamp(first_ts, unit="s", tz="UTC").normalize()
    last_day = pd.Timestamp(last_ts, unit="s", tz="UTC").normalize()
    assert per_day.index[0] == first_day and per_day.index[-1] == last_day
    assert len(per_day) == (last_day - first_day).days + 1

    # lazy="raise" and selectinload.
    lazy_out = printed[-2]
    assert "lazy='raise'" in lazy_out
    loaded = {s.id: s for s in ns["loaded"]}
    assert len(loaded) == 5
    assert [m.id for m in loaded[ROOT_ID].messages] == list(range(27, 45))
    assert [c.id for c in loaded[ROOT_ID].children] == [TIP_ID]
    assert {u.model for u in loaded[TIP_ID].usage} == {"openai/gpt-5-codex"}
    decode = ns["decode_content"]
    assert decode('\x00json:[{"type": "text", "text": "hi"}]') == [{"type": "text", "text": "hi"}]
    assert decode("plain text") == "plain text"
    assert decode("\x00json:{broken") == "\x00json:{broken"
    assert decode(None) is None

    # Read-only: the examples changed nothing, and the engine refuses writes.
    assert db.dump(analytics_db) == before


def test_engine_of_the_setup_is_read_only(
    analytics_db: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from sqlalchemy import text
    from sqlalchemy.exc import OperationalError

    namespace: dict[str, Any] = {"__name__": "analytics_md"}
    exec(SETUP.compiled(), namespace)  # noqa: S102
    engine = namespace["engine"]
    try:
        with engine.connect() as conn, pytest.raises(OperationalError, match="readonly"):
            conn.execute(text("UPDATE sessions SET title = 'x'"))
    finally:
        engine.dispose()


@pytest.mark.parametrize("section", SECTIONS)
def test_each_section_is_self_contained(
    section: str, analytics_db: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Setup plus one section's blocks, nothing else, runs."""
    _, printed = run([SETUP, *(b for b in BLOCKS[1:] if b.section == section)], capsys)
    assert all(out.strip() for out in printed)


def test_the_page_leaves_nothing_beside_a_wal_file(
    analytics_db: Path, db: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    """Beside a file in WAL mode (what a fixed SQLite gives), the setup's engine leaves
    -wal/-shm while it holds a connection; the page's last block disposes of it, and the
    file is left as it was found."""
    set_journal_mode(str(analytics_db), "wal")
    before = db.dump(analytics_db)
    namespace: dict[str, Any] = {"__name__": "analytics_md"}
    exec(SETUP.compiled(), namespace)  # noqa: S102 - the page's own example

    def files() -> list[str]:
        return sorted(p.name for p in analytics_db.parent.glob(f"{analytics_db.name}*"))

    assert f"{analytics_db.name}-shm" in files(), files()
    exec(BLOCKS[-1].compiled(), namespace)  # noqa: S102
    capsys.readouterr()
    assert files() == [analytics_db.name]
    assert db.dump(analytics_db) == before
