"""Token accounting (docs/reference/behaviour.md 10.1), auxiliary usage (10.3) and the usage
statistics helpers, on real database files."""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path
from typing import Any

import pytest

from hermes_store.repositories.usage import UsageRepository
from hermes_store.store import Store


@pytest.fixture
def repo(store: Store) -> UsageRepository:
    return UsageRepository(store)


@pytest.fixture
def con(raw_con: Any) -> Any:
    """Plain SQL on the store's own database (SQLite file or PostgreSQL)."""
    return raw_con


def add_session(con: sqlite3.Connection, sid: str, **cols: Any) -> None:
    values = {"id": sid, "source": "cli", "started_at": time.time(), **cols}
    names = ", ".join(values)
    marks = ", ".join("?" for _ in values)
    con.execute(f"INSERT INTO sessions ({names}) VALUES ({marks})", list(values.values()))


def session(con: sqlite3.Connection, sid: str) -> dict[str, Any]:
    row = con.execute("SELECT * FROM sessions WHERE id = ?", (sid,)).fetchone()
    assert row is not None
    return dict(row)


def usage_rows(con: sqlite3.Connection, sid: str) -> list[dict[str, Any]]:
    rows = con.execute(
        "SELECT * FROM session_model_usage WHERE session_id = ? ORDER BY task, model", (sid,)
    ).fetchall()
    return [dict(r) for r in rows]


# --------------------------------------------------------------------------- 10.1


def test_incremental_tokens_add_up(repo: UsageRepository, con: sqlite3.Connection) -> None:
    repo.update_token_counts("s1", input_tokens=200, output_tokens=100)
    repo.update_token_counts("s1", input_tokens=100, output_tokens=50)
    row = session(con, "s1")
    assert (row["input_tokens"], row["output_tokens"]) == (300, 150)


def test_api_call_count_increments(repo: UsageRepository, con: sqlite3.Connection) -> None:
    for _ in range(3):
        repo.update_token_counts("s1", input_tokens=1, api_call_count=1)
    assert session(con, "s1")["api_call_count"] == 3


def test_all_five_counters_increment(repo: UsageRepository, con: sqlite3.Connection) -> None:
    for _ in range(2):
        repo.update_token_counts(
            "s1",
            input_tokens=1,
            output_tokens=2,
            cache_read_tokens=3,
            cache_write_tokens=4,
            reasoning_tokens=5,
        )
    row = session(con, "s1")
    assert [row[c] for c in ("input_tokens", "output_tokens", "cache_read_tokens")] == [2, 4, 6]
    assert (row["cache_write_tokens"], row["reasoning_tokens"]) == (8, 10)


def test_absolute_sets_exact_values(repo: UsageRepository, con: sqlite3.Connection) -> None:
    repo.update_token_counts("s1", input_tokens=1000, output_tokens=70, api_call_count=9)
    repo.update_token_counts("s1", input_tokens=300, api_call_count=5, absolute=True)
    row = session(con, "s1")
    assert (row["input_tokens"], row["api_call_count"]) == (300, 5)
    assert row["output_tokens"] == 0  # omitted counters are set too, to 0


def test_absolute_omitted_api_call_count_sets_zero(
    repo: UsageRepository, con: sqlite3.Connection
) -> None:
    repo.update_token_counts("s1", input_tokens=10, api_call_count=4)
    repo.update_token_counts("s1", input_tokens=10, absolute=True)
    assert session(con, "s1")["api_call_count"] == 0


def test_unknown_session_is_created_with_source_unknown(
    repo: UsageRepository, con: sqlite3.Connection
) -> None:
    before = time.time()
    repo.update_token_counts("ghost", input_tokens=5, model="m1")
    row = session(con, "ghost")
    assert row["source"] == "unknown"
    assert row["model"] == "m1"
    assert row["started_at"] >= before - 1
    assert row["input_tokens"] == 5


def test_session_row_created_even_without_usage(
    repo: UsageRepository, con: sqlite3.Connection
) -> None:
    repo.update_token_counts("ghost")
    assert session(con, "ghost")["source"] == "unknown"
    assert usage_rows(con, "ghost") == []


def test_existing_session_keeps_source_and_start(
    repo: UsageRepository, con: sqlite3.Connection
) -> None:
    add_session(con, "s1", source="telegram", started_at=123.0)
    repo.update_token_counts("s1", input_tokens=1, model="m")
    row = session(con, "s1")
    assert (row["source"], row["started_at"]) == ("telegram", 123.0)


def test_null_model_backfilled_existing_model_kept(
    repo: UsageRepository, con: sqlite3.Connection
) -> None:
    add_session(con, "s1")
    repo.update_token_counts("s1", input_tokens=1, model="first")
    assert session(con, "s1")["model"] == "first"
    repo.update_token_counts("s1", input_tokens=1, model="second")
    assert session(con, "s1")["model"] == "first"


def test_first_accounted_route_overwrites_placeholder(
    repo: UsageRepository, con: sqlite3.Connection
) -> None:
    add_session(
        con,
        "s1",
        model="placeholder",
        billing_provider="old-provider",
        billing_base_url="https://old",
        billing_mode="subscription",
    )
    repo.update_token_counts(
        "s1", input_tokens=10, api_call_count=1, model="real", billing_provider="openrouter"
    )
    row = session(con, "s1")
    assert row["model"] == "real"
    assert row["billing_provider"] == "openrouter"
    # The call's values win wholesale, NULLs included.
    assert row["billing_base_url"] is None
    assert row["billing_mode"] is None


def test_route_is_fixed_after_the_first_accounted_call(
    repo: UsageRepository, con: sqlite3.Connection
) -> None:
    repo.update_token_counts(
        "s1", input_tokens=10, api_call_count=1, model="a", billing_provider="p1"
    )
    repo.update_token_counts(
        "s1", input_tokens=10, api_call_count=1, model="b", billing_provider="p2"
    )
    row = session(con, "s1")
    assert (row["model"], row["billing_provider"]) == ("a", "p1")


def test_first_route_rule_needs_usage(repo: UsageRepository, con: sqlite3.Connection) -> None:
    add_session(con, "s1", model="placeholder")
    repo.update_token_counts("s1", model="real", billing_provider="openrouter")
    row = session(con, "s1")
    assert row["model"] == "placeholder"
    assert row["billing_provider"] is None  # offered only when the call has usage


def test_first_route_rule_needs_model_and_provider(
    repo: UsageRepository, con: sqlite3.Connection
) -> None:
    add_session(con, "s1", model="placeholder")
    repo.update_token_counts("s1", input_tokens=5, model="real")
    assert session(con, "s1")["model"] == "placeholder"


def test_first_route_rule_only_while_no_calls_counted(
    repo: UsageRepository, con: sqlite3.Connection
) -> None:
    add_session(con, "s1", model="m0", billing_provider="p0", api_call_count=2)
    repo.update_token_counts("s1", input_tokens=5, model="m1", billing_provider="p1")
    row = session(con, "s1")
    assert (row["model"], row["billing_provider"]) == ("m0", "p0")


def test_billing_fields_fill_nulls_only_with_usage(
    repo: UsageRepository, con: sqlite3.Connection
) -> None:
    add_session(con, "s1", billing_provider="p0", api_call_count=1)
    repo.update_token_counts("s1", billing_base_url="https://x", billing_mode="api")
    row = session(con, "s1")
    assert (row["billing_base_url"], row["billing_mode"]) == (None, None)
    repo.update_token_counts("s1", input_tokens=1, billing_base_url="https://x")
    repo.update_token_counts("s1", input_tokens=1, billing_base_url="https://y")
    row = session(con, "s1")
    assert row["billing_base_url"] == "https://x"
    assert row["billing_provider"] == "p0"


def test_estimated_cost_incremental_coalesce(
    repo: UsageRepository, con: sqlite3.Connection
) -> None:
    repo.update_token_counts("s1", input_tokens=1)
    assert session(con, "s1")["estimated_cost_usd"] == 0.0  # COALESCE(NULL,0)+COALESCE(NULL,0)
    repo.update_token_counts("s1", input_tokens=1, estimated_cost_usd=0.5)
    repo.update_token_counts("s1", input_tokens=1, estimated_cost_usd=0.25)
    repo.update_token_counts("s1", input_tokens=1)
    assert session(con, "s1")["estimated_cost_usd"] == pytest.approx(0.75)


def test_actual_cost_incremented_only_when_given(
    repo: UsageRepository, con: sqlite3.Connection
) -> None:
    repo.update_token_counts("s1", input_tokens=1)
    assert session(con, "s1")["actual_cost_usd"] is None
    repo.update_token_counts("s1", input_tokens=1, actual_cost_usd=0.1)
    repo.update_token_counts("s1", input_tokens=1, actual_cost_usd=0.2)
    repo.update_token_counts("s1", input_tokens=1)
    assert session(con, "s1")["actual_cost_usd"] == pytest.approx(0.3)


def test_absolute_costs(repo: UsageRepository, con: sqlite3.Connection) -> None:
    repo.update_token_counts("s1", input_tokens=1, estimated_cost_usd=2.0, actual_cost_usd=3.0)
    repo.update_token_counts("s1", input_tokens=1, absolute=True)
    row = session(con, "s1")
    assert row["estimated_cost_usd"] == 0.0  # COALESCE(new, 0)
    assert row["actual_cost_usd"] == 3.0  # set only when given
    repo.update_token_counts("s1", input_tokens=1, actual_cost_usd=1.5, absolute=True)
    assert session(con, "s1")["actual_cost_usd"] == 1.5


def test_cost_metadata_takes_new_values_when_given(
    repo: UsageRepository, con: sqlite3.Connection
) -> None:
    repo.update_token_counts(
        "s1", cost_status="estimated", cost_source="pricing_table", pricing_version="v1"
    )
    repo.update_token_counts("s1", input_tokens=1)
    row = session(con, "s1")
    assert (row["cost_status"], row["cost_source"], row["pricing_version"]) == (
        "estimated",
        "pricing_table",
        "v1",
    )
    repo.update_token_counts("s1", cost_status="actual", pricing_version="v2")
    row = session(con, "s1")
    assert (row["cost_status"], row["cost_source"], row["pricing_version"]) == (
        "actual",
        "pricing_table",
        "v2",
    )


def test_incremental_call_writes_main_loop_usage_row(
    repo: UsageRepository, con: sqlite3.Connection
) -> None:
    repo.update_token_counts(
        "s1",
        input_tokens=200,
        output_tokens=100,
        cache_read_tokens=7,
        api_call_count=1,
        estimated_cost_usd=0.5,
        actual_cost_usd=0.4,
        cost_status="estimated",
        model="m",
        billing_provider="p",
        billing_base_url="https://b",
        billing_mode="api",
    )
    (row,) = usage_rows(con, "s1")
    first_seen = row["first_seen"]
    time.sleep(0.01)
    repo.update_token_counts(
        "s1",
        input_tokens=100,
        output_tokens=50,
        api_call_count=1,
        estimated_cost_usd=0.25,
        model="m",
        billing_provider="p",
        billing_base_url="https://b",
        billing_mode="api",
    )
    (row,) = usage_rows(con, "s1")
    assert (row["model"], row["billing_provider"], row["billing_base_url"]) == (
        "m",
        "p",
        "https://b",
    )
    assert (row["billing_mode"], row["task"]) == ("api", "")
    assert (row["input_tokens"], row["output_tokens"], row["cache_read_tokens"]) == (300, 150, 7)
    assert row["api_call_count"] == 2
    assert row["estimated_cost_usd"] == pytest.approx(0.75)
    assert row["actual_cost_usd"] == pytest.approx(0.4)  # missing -> 0 added
    assert row["cost_status"] == "estimated"  # COALESCE(new, old)
    assert row["first_seen"] == first_seen
    assert row["last_seen"] > first_seen


def test_usage_row_key_falls_back_to_session_then_defaults(
    repo: UsageRepository, con: sqlite3.Connection
) -> None:
    add_session(con, "s1", model="session-model", billing_provider="session-provider")
    add_session(con, "s2")
    repo.update_token_counts("s1", input_tokens=1)
    repo.update_token_counts("s2", input_tokens=1)
    (r1,) = usage_rows(con, "s1")
    (r2,) = usage_rows(con, "s2")
    assert (r1["model"], r1["billing_provider"], r1["billing_base_url"]) == (
        "session-model",
        "session-provider",
        "",
    )
    assert (r2["model"], r2["billing_provider"], r2["billing_mode"]) == ("unknown", "", "")


def test_different_models_get_separate_usage_rows(
    repo: UsageRepository, con: sqlite3.Connection
) -> None:
    repo.update_token_counts("s1", input_tokens=1, model="a")
    repo.update_token_counts("s1", input_tokens=2, model="b")
    assert [(r["model"], r["input_tokens"]) for r in usage_rows(con, "s1")] == [
        ("a", 1),
        ("b", 2),
    ]


def test_absolute_calls_never_write_usage_rows(
    repo: UsageRepository, con: sqlite3.Connection
) -> None:
    repo.update_token_counts("s1", input_tokens=300, api_call_count=5, absolute=True)
    assert usage_rows(con, "s1") == []


def test_calls_without_usage_write_no_usage_row(
    repo: UsageRepository, con: sqlite3.Connection
) -> None:
    repo.update_token_counts("s1", model="m", cost_status="estimated")
    assert usage_rows(con, "s1") == []


def test_estimated_cost_alone_writes_usage_row(
    repo: UsageRepository, con: sqlite3.Connection
) -> None:
    repo.update_token_counts("s1", estimated_cost_usd=0.01)
    (row,) = usage_rows(con, "s1")
    assert row["estimated_cost_usd"] == pytest.approx(0.01)


def test_actual_cost_alone_moves_only_the_session_total(
    repo: UsageRepository, con: sqlite3.Connection
) -> None:
    # docs/reference/behaviour.md 10.1 lists "tokens, calls or an estimated cost" as what
    # earns a usage row.
    repo.update_token_counts("s1", actual_cost_usd=0.02)
    assert session(con, "s1")["actual_cost_usd"] == pytest.approx(0.02)
    assert usage_rows(con, "s1") == []


def test_empty_session_id_is_a_no_op(repo: UsageRepository, con: sqlite3.Connection) -> None:
    repo.update_token_counts("", input_tokens=5)
    assert con.execute("SELECT COUNT(*) FROM sessions").fetchone()[0] == 0


def test_surrogates_in_route_values_are_scrubbed(
    repo: UsageRepository, con: sqlite3.Connection
) -> None:
    repo.update_token_counts("s1", input_tokens=1, model="m\ud800", billing_provider="p")
    assert session(con, "s1")["model"] == "m\ufffd"


# --------------------------------------------------------------------------- 10.3


def test_auxiliary_usage_requires_session_and_task(
    repo: UsageRepository, con: sqlite3.Connection
) -> None:
    repo.record_auxiliary_usage("", "vision", input_tokens=5)
    repo.record_auxiliary_usage("s1", "", input_tokens=5)
    assert con.execute("SELECT COUNT(*) FROM sessions").fetchone()[0] == 0
    assert con.execute("SELECT COUNT(*) FROM session_model_usage").fetchone()[0] == 0


def test_auxiliary_usage_creates_session_and_row(
    repo: UsageRepository, con: sqlite3.Connection
) -> None:
    repo.record_auxiliary_usage(
        "s1",
        "vision",
        model="gpt-v",
        billing_provider="openai",
        billing_base_url="https://api",
        input_tokens=10,
        output_tokens=3,
        cache_read_tokens=1,
        cache_write_tokens=2,
        reasoning_tokens=4,
        estimated_cost_usd=0.1,
    )
    repo.record_auxiliary_usage(
        "s1",
        "vision",
        model="gpt-v",
        billing_provider="openai",
        billing_base_url="https://api",
        input_tokens=5,
        estimated_cost_usd=0.05,
    )
    row = session(con, "s1")
    assert row["source"] == "unknown"
    assert row["model"] is None  # the auxiliary model is not the session's model
    (usage,) = usage_rows(con, "s1")
    assert (usage["model"], usage["billing_provider"], usage["billing_base_url"]) == (
        "gpt-v",
        "openai",
        "https://api",
    )
    assert (usage["billing_mode"], usage["task"]) == ("", "vision")
    assert (usage["input_tokens"], usage["output_tokens"], usage["reasoning_tokens"]) == (
        15,
        3,
        4,
    )
    assert usage["api_call_count"] == 2  # one per call
    assert usage["estimated_cost_usd"] == pytest.approx(0.15)
    assert usage["first_seen"] is not None and usage["last_seen"] >= usage["first_seen"]


def test_auxiliary_usage_never_touches_session_totals(
    repo: UsageRepository, con: sqlite3.Connection
) -> None:
    repo.update_token_counts("s1", input_tokens=100, api_call_count=1, estimated_cost_usd=1.0)
    repo.record_auxiliary_usage("s1", "compression", input_tokens=999, estimated_cost_usd=9.0)
    row = session(con, "s1")
    assert (row["input_tokens"], row["api_call_count"]) == (100, 1)
    assert row["estimated_cost_usd"] == pytest.approx(1.0)


def test_auxiliary_usage_never_inherits_the_session_route(
    repo: UsageRepository, con: sqlite3.Connection
) -> None:
    add_session(con, "s1", model="main-model", billing_provider="main-provider")
    repo.record_auxiliary_usage("s1", "title_generation", input_tokens=3)
    (usage,) = usage_rows(con, "s1")
    assert (usage["model"], usage["billing_provider"], usage["billing_base_url"]) == (
        "unknown",
        "",
        "",
    )


def test_main_loop_and_auxiliary_rows_coexist(
    repo: UsageRepository, con: sqlite3.Connection
) -> None:
    repo.update_token_counts("s1", input_tokens=10, model="m", billing_provider="p")
    repo.record_auxiliary_usage("s1", "vision", model="m", billing_provider="p", input_tokens=4)
    rows = usage_rows(con, "s1")
    assert [(r["task"], r["input_tokens"]) for r in rows] == [("", 10), ("vision", 4)]


def test_usage_rows_go_with_their_session(repo: UsageRepository, con: sqlite3.Connection) -> None:
    repo.update_token_counts("s1", input_tokens=10, model="m")
    repo.record_auxiliary_usage("s1", "vision", input_tokens=4)
    con.execute("DELETE FROM sessions WHERE id = 's1'")  # FK cascade (foreign_keys=ON)
    assert con.execute("SELECT COUNT(*) FROM session_model_usage").fetchone()[0] == 0


# --------------------------------------------------------------------------- statistics


def test_usage_by_model(repo: UsageRepository) -> None:
    repo.update_token_counts("s1", input_tokens=10, output_tokens=1, model="a", api_call_count=1)
    repo.update_token_counts("s2", input_tokens=20, model="a", estimated_cost_usd=0.5)
    repo.update_token_counts("s2", input_tokens=5, model="b", estimated_cost_usd=1.0)
    repo.record_auxiliary_usage("s1", "vision", model="a", input_tokens=7)
    rows = repo.usage_by_model()
    assert [r["model"] for r in rows] == ["b", "a"]  # most expensive first
    a = rows[1]
    assert (a["sessions"], a["input_tokens"], a["output_tokens"]) == (2, 37, 1)
    assert a["api_call_count"] == 2 and a["estimated_cost_usd"] == pytest.approx(0.5)
    assert a["cache_read_tokens"] == 0 and a["actual_cost_usd"] == 0
    only_s1 = repo.usage_by_model("s1")
    assert [(r["model"], r["input_tokens"]) for r in only_s1] == [("a", 17)]
    main_loop = repo.usage_by_model("s1", task="")
    assert [(r["model"], r["input_tokens"]) for r in main_loop] == [("a", 10)]
    assert repo.usage_by_model("nope") == []


def test_usage_by_day(repo: UsageRepository, con: sqlite3.Connection) -> None:
    day1 = 1_767_225_600.0  # 2026-01-01T00:00:00Z
    add_session(con, "a", started_at=day1 + 10, input_tokens=5, estimated_cost_usd=0.5)
    add_session(con, "b", started_at=day1 + 20, input_tokens=7, actual_cost_usd=1.0)
    add_session(con, "c", started_at=day1 + 86400 + 5, output_tokens=3, source="cron")
    rows = repo.usage_by_day()
    assert [r["day"] for r in rows] == ["2026-01-01", "2026-01-02"]
    assert (rows[0]["sessions"], rows[0]["input_tokens"]) == (2, 12)
    assert rows[0]["estimated_cost_usd"] == pytest.approx(0.5)
    assert rows[0]["actual_cost_usd"] == pytest.approx(1.0)
    assert (rows[1]["sessions"], rows[1]["output_tokens"]) == (1, 3)
    assert [r["day"] for r in repo.usage_by_day(source="cron")] == ["2026-01-02"]
    assert [r["day"] for r in repo.usage_by_day(since=day1 + 15, until=day1 + 86400)] == [
        "2026-01-01"
    ]
    shifted = repo.usage_by_day(utc_offset_seconds=-3600)  # one hour west of UTC
    assert [r["day"] for r in shifted] == ["2025-12-31", "2026-01-01"]


def test_message_activity_by_day(repo: UsageRepository, con: sqlite3.Connection) -> None:
    day1 = 1_767_225_600.0
    add_session(con, "a", started_at=day1)
    for ts in (day1 + 1, day1 + 2, day1 + 86401):
        con.execute(
            "INSERT INTO messages (session_id, role, content, timestamp)"
            " VALUES ('a', 'user', 'x', ?)",
            (ts,),
        )
    rows = repo.message_activity_by_day()
    assert [(r["day"], r["messages"], r["sessions"]) for r in rows] == [
        ("2026-01-01", 2, 1),
        ("2026-01-02", 1, 1),
    ]


def test_statistics_on_an_empty_database(repo: UsageRepository, tmp_path: Path) -> None:
    assert repo.usage_by_model() == []
    assert repo.usage_by_day() == []
