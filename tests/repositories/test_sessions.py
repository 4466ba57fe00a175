"""SessionRepository on real SQLite files: docs/reference/behaviour.md section 2 (sessions),
4.2/5.3 (lineage), 7 (listing and counting) and the lineage classes of docs/reference/schema.md 8.
The listing examples of docs/reference/behaviour.md 7.1 run on a copy of the real v23 fixture."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import text, update

from hermes_store import migrate
from hermes_store.repositories.sessions import SESSIONS, SessionRepository
from hermes_store.store import Store

FIX_S1 = "20260301_091500_a1b2c3"
FIX_TRIP = "20260302_140000_7e1e9a"
FIX_ROOT = "20260303_080000_c0ffee"
FIX_CHILD = "20260303_083012_c0ffe2"
FIX_CRON = "20260304_020000_c7a01d"

# --------------------------------------------------------------------------- helpers


@pytest.fixture
def repo(store: Store) -> SessionRepository:
    return SessionRepository(store)


@pytest.fixture
def v23(legacy_db: Callable[..., Path], db: Any) -> Iterator[SessionRepository]:
    url = db.url_for(legacy_db(23))
    migrate.upgrade(url, fts_min_pause=0)
    s = Store(url)
    yield SessionRepository(s)
    s.close()


def put(store: Store, sid: str, **values: Any) -> None:
    """Set columns directly (back-dating, markers, odd states)."""
    statement = update(SESSIONS).where(SESSIONS.c.id == sid).values(**values)
    store.write(lambda s: s.execute(statement))


def msg(store: Store, sid: str, content: Any, ts: float, role: str = "user") -> None:
    params = {"sid": sid, "role": role, "content": content, "ts": ts}
    store.write(
        lambda s: s.execute(
            text(
                "INSERT INTO messages (session_id, role, content, timestamp, active) "
                "VALUES (:sid, :role, :content, :ts, 1)"
            ),
            params,
        )
    )


def make(repo: SessionRepository, sid: str, started_at: float, **kwargs: Any) -> str:
    source = kwargs.pop("source", "cli")
    repo.create_session(sid, source, **kwargs)
    put(repo.store, sid, started_at=started_at)
    return sid


def compressed(repo: SessionRepository, root: str, *children: str, t0: float = 1000.0) -> None:
    """root -> child1 -> child2 ...: every segment but the last ended by compression."""
    chain = [root, *children]
    make(repo, root, t0)
    for i, sid in enumerate(children, start=1):
        make(repo, sid, t0 + i, parent_session_id=chain[i - 1])
    for sid in chain[:-1]:
        repo.end_session(sid, "compression")


def ids(rows: list[dict[str, Any]]) -> list[str]:
    return [r["id"] for r in rows]


# --------------------------------------------------------------------------- 2: create


def test_create_session_inserts_row_with_started_at_and_json_config(
    repo: SessionRepository,
) -> None:
    assert repo.create_session("s1", "cli", model="m1", model_config={"temperature": 0.5}) == "s1"
    row = repo.get_session("s1")
    assert row is not None
    assert row["source"] == "cli" and row["model"] == "m1"
    assert row["model_config"] == '{"temperature": 0.5}'
    assert isinstance(row["started_at"], float) and row["ended_at"] is None
    assert row["message_count"] == 0 and row["archived"] == 0 and row["pinned"] == 0


def test_create_session_falsy_model_config_is_null(repo: SessionRepository) -> None:
    repo.create_session("s1", "cli", model_config={})
    assert repo.get_session("s1")["model_config"] is None  # type: ignore[index]


def test_create_session_unknown_kwarg_raises_type_error_and_writes_nothing(
    repo: SessionRepository,
) -> None:
    with pytest.raises(TypeError, match="title"):
        repo.create_session("s1", "cli", title="nope")
    assert repo.get_session("s1") is None


def test_create_session_on_existing_id_only_fills_nulls(repo: SessionRepository) -> None:
    repo.create_session("s1", "telegram", model="first", user_id="u1")
    started = repo.get_session("s1")["started_at"]  # type: ignore[index]
    repo.create_session(
        "s1", "cli", model="second", user_id="u2", system_prompt="prompt", chat_id="c1"
    )
    row = repo.get_session("s1")
    assert row is not None
    assert row["model"] == "first"  # COALESCE(existing, new)
    assert row["system_prompt"] == "prompt" and row["chat_id"] == "c1"  # NULLs filled
    assert row["source"] == "telegram" and row["user_id"] == "u1"  # never changed
    assert row["started_at"] == started


def test_create_child_inherits_workspace_fields_from_parent(repo: SessionRepository) -> None:
    repo.create_session("p", "cli", cwd="/srv/app", profile_name="work")
    repo.update_session_cwd("p", "/srv/app", git_branch="main", git_repo_root="/srv/app")
    repo.create_session("c", "cli", parent_session_id="p")
    child = repo.get_session("c")
    assert child is not None
    assert (child["cwd"], child["git_branch"], child["git_repo_root"], child["profile_name"]) == (
        "/srv/app",
        "main",
        "/srv/app",
        "work",
    )


def test_create_child_keeps_its_own_values_over_the_parents(repo: SessionRepository) -> None:
    repo.create_session("p", "cli", cwd="/srv/app", profile_name="work")
    repo.create_session("c", "cli", parent_session_id="p", cwd="/elsewhere")
    child = repo.get_session("c")
    assert child is not None and child["cwd"] == "/elsewhere" and child["profile_name"] == "work"


ROUTING = {
    "user_id": "u1",
    "session_key": "agent:main:telegram:dm:1",
    "chat_id": "1",
    "chat_type": "dm",
    "thread_id": "t",
}


def test_create_child_of_compression_parent_inherits_gateway_origin(
    repo: SessionRepository,
) -> None:
    repo.create_session("p", "telegram", **ROUTING)
    put(repo.store, "p", display_name="Ann", origin_json='{"platform": "telegram"}')
    repo.end_session("p", "compression")
    repo.create_session("c", "telegram", parent_session_id="p")
    child = repo.get_session("c")
    assert child is not None
    for name, value in ROUTING.items():
        assert child[name] == value
    assert child["display_name"] == "Ann" and child["origin_json"] == '{"platform": "telegram"}'


def test_create_child_of_other_parent_does_not_inherit_gateway_origin(
    repo: SessionRepository,
) -> None:
    repo.create_session("p", "telegram", **ROUTING)
    repo.end_session("p", "user_exit")
    repo.create_session("c", "telegram", parent_session_id="p")
    child = repo.get_session("c")
    assert child is not None
    assert all(child[name] is None for name in ROUTING)


def test_create_session_scrubs_lone_surrogates(repo: SessionRepository) -> None:
    repo.create_session("s1", "cli", system_prompt="bad \ud800 half")
    assert repo.get_session("s1")["system_prompt"] == "bad \ufffd half"  # type: ignore[index]


def test_ensure_session_defaults_to_unknown_and_is_an_upsert(repo: SessionRepository) -> None:
    assert repo.ensure_session("s1") == "s1"
    repo.ensure_session("s1", source="cli", model="m")
    row = repo.get_session("s1")
    assert row is not None and row["source"] == "unknown" and row["model"] == "m"


# --------------------------------------------------------------------------- 2: lifecycle


def test_end_session_first_reason_wins(repo: SessionRepository) -> None:
    repo.create_session("s1", "cli")
    repo.end_session("s1", "user_exit")
    first = repo.get_session("s1")
    repo.end_session("s1", "compression")
    second = repo.get_session("s1")
    assert first is not None and second is not None
    assert second["end_reason"] == "user_exit" and second["ended_at"] == first["ended_at"]


def test_end_session_unknown_id_is_a_noop(repo: SessionRepository) -> None:
    repo.end_session("missing", "user_exit")
    assert repo.get_session("missing") is None


def test_reopen_session_clears_end_unconditionally(repo: SessionRepository) -> None:
    repo.create_session("s1", "cli")
    repo.end_session("s1", "compression")
    repo.reopen_session("s1")
    row = repo.get_session("s1")
    assert row is not None and row["ended_at"] is None and row["end_reason"] is None
    repo.reopen_session("missing")  # no error


@pytest.mark.parametrize(
    ("previous", "expected"),
    [(None, True), ("agent_close", True), ("ws_orphan_reap", True), ("user_exit", False)],
)
def test_promote_to_session_reset(
    repo: SessionRepository, previous: str | None, expected: bool
) -> None:
    repo.create_session("s1", "cli")
    if previous:
        repo.end_session("s1", previous)
    assert repo.promote_to_session_reset("s1") is expected
    row = repo.get_session("s1")
    assert row is not None
    assert row["end_reason"] == ("session_reset" if expected else previous)
    assert row["ended_at"] is not None


def test_promote_to_session_reset_empty_or_unknown_id_is_false(repo: SessionRepository) -> None:
    assert repo.promote_to_session_reset("") is False
    assert repo.promote_to_session_reset("missing", reason="idle") is False


# --------------------------------------------------------------------------- 2: reads


def test_get_session_returns_full_row_with_unknown_columns(
    repo: SessionRepository, store: Store
) -> None:
    store.write(lambda s: s.execute(text("ALTER TABLE sessions ADD COLUMN fork_extra TEXT")))
    repo.create_session("s1", "cli")
    put(store, "s1", title="t")
    store.write(lambda s: s.execute(text("UPDATE sessions SET fork_extra = 'x'")))
    row = repo.get_session("s1")
    assert row is not None and row["fork_extra"] == "x"
    assert len(row) == 49
    assert repo.get_session("missing") is None


def test_get_session_runs_the_flush_hook_first(store: Store) -> None:
    calls: list[int] = []
    repo = SessionRepository(store, flush=lambda: calls.append(1))
    repo.get_session("x")
    repo.list_sessions_rich()
    assert calls == [1, 1]


def test_resolve_session_id_exact_prefix_and_ambiguity(repo: SessionRepository) -> None:
    make(repo, "20260301_aaa", 1.0)
    make(repo, "20260301_aab", 2.0)
    make(repo, "20260302_x", 3.0)
    assert repo.resolve_session_id("20260301_aaa") == "20260301_aaa"
    assert repo.resolve_session_id("20260302") == "20260302_x"
    assert repo.resolve_session_id("20260301_aa") is None  # two matches
    assert repo.resolve_session_id("nothing") is None
    assert repo.resolve_session_id("") is None


def test_resolve_session_id_wildcards_are_literal(repo: SessionRepository) -> None:
    make(repo, "abcdef", 1.0)
    make(repo, "a%b_c\\d", 2.0)
    assert repo.resolve_session_id("a_c") is None
    assert repo.resolve_session_id("%") is None
    assert repo.resolve_session_id("a%b") == "a%b_c\\d"
    assert repo.resolve_session_id("a%b_c\\") == "a%b_c\\d"


# --------------------------------------------------------------------------- 2: settings


def test_update_system_prompt(repo: SessionRepository) -> None:
    repo.create_session("s1", "cli", system_prompt="old")
    repo.update_system_prompt("s1", "new")
    assert repo.get_session("s1")["system_prompt"] == "new"  # type: ignore[index]


def test_update_session_meta_sets_config_and_coalesces_model(repo: SessionRepository) -> None:
    repo.create_session("s1", "cli", model="m1")
    repo.update_session_meta("s1", '{"a": 1}')
    row = repo.get_session("s1")
    assert row is not None and row["model_config"] == '{"a": 1}' and row["model"] == "m1"
    repo.update_session_meta("s1", None, model="m2")
    row = repo.get_session("s1")
    assert row is not None and row["model_config"] is None and row["model"] == "m2"


def test_update_session_model_drops_browser_lock_and_prompt(repo: SessionRepository) -> None:
    repo.create_session(
        "s1",
        "cli",
        model="m1",
        system_prompt="p",
        model_config={"temperature": 0.2, "browser_model_lock": {"model": "m1"}},
    )
    repo.update_session_model("s1", "m2")
    row = repo.get_session("s1")
    assert row is not None
    assert row["model"] == "m2" and row["system_prompt"] is None
    assert json.loads(row["model_config"]) == {"temperature": 0.2}


def test_update_session_model_keeps_unparsable_config(repo: SessionRepository) -> None:
    repo.create_session("s1", "cli")
    put(repo.store, "s1", model_config="{broken")
    repo.update_session_model("s1", "m2")
    row = repo.get_session("s1")
    assert row is not None and row["model_config"] == "{broken" and row["model"] == "m2"


def test_update_session_runtime_lock_merges_lock(repo: SessionRepository) -> None:
    repo.create_session("s1", "cli", model="m1", system_prompt="p", model_config={"k": 1})
    repo.update_session_runtime_lock(
        "s1", model="m2", provider="openrouter", model_options={"x": 1}, confirmed=True
    )
    row = repo.get_session("s1")
    assert row is not None and row["model"] == "m2" and row["system_prompt"] is None
    config = json.loads(row["model_config"])
    assert config["k"] == 1
    lock = config["browser_model_lock"]
    assert {k: lock[k] for k in ("provider", "model", "model_options", "route_source")} == {
        "provider": "openrouter",
        "model": "m2",
        "model_options": {"x": 1},
        "route_source": None,
    }
    assert lock["confirmed"] is True and isinstance(lock["updated_at"], float)


def test_update_session_runtime_lock_replaces_unparsable_and_keeps_model(
    repo: SessionRepository,
) -> None:
    repo.create_session("s1", "cli", model="m1")
    put(repo.store, "s1", model_config="[1, 2]")
    repo.update_session_runtime_lock("s1", provider="p")
    row = repo.get_session("s1")
    assert row is not None and row["model"] == "m1"
    assert list(json.loads(row["model_config"])) == ["browser_model_lock"]


def test_update_session_runtime_lock_unknown_id_is_a_noop(repo: SessionRepository) -> None:
    repo.update_session_runtime_lock("missing", model="m")
    assert repo.get_session("missing") is None


def test_update_session_billing_route(repo: SessionRepository) -> None:
    repo.create_session("s1", "cli", system_prompt="p")
    repo.update_session_billing_route("s1", provider="a", base_url="u1", billing_mode="paid")
    repo.update_session_billing_route("s1", provider="b", base_url=None)
    row = repo.get_session("s1")
    assert row is not None
    assert (row["billing_provider"], row["billing_base_url"], row["billing_mode"]) == (
        "b",
        None,
        "paid",
    )
    assert row["system_prompt"] is None


def test_update_session_cwd_sets_branch_and_root_only_when_non_empty(
    repo: SessionRepository,
) -> None:
    repo.create_session("s1", "cli")
    repo.update_session_cwd("s1", "/a", git_branch=" main ", git_repo_root="/a")
    repo.update_session_cwd("s1", "/b", git_branch="   ", git_repo_root="")
    row = repo.get_session("s1")
    assert row is not None
    assert (row["cwd"], row["git_branch"], row["git_repo_root"]) == ("/b", "main", "/a")
    repo.update_session_cwd("s1", "")  # no cwd: no-op
    repo.update_session_cwd("", "/c")  # no id: no-op
    assert repo.get_session("s1")["cwd"] == "/b"  # type: ignore[index]


def test_backfill_repo_roots_fills_only_missing_roots(repo: SessionRepository) -> None:
    repo.create_session("a", "cli", cwd="/w")
    repo.create_session("b", "cli", cwd="/w", git_repo_root="/kept")
    repo.create_session("c", "cli", cwd="/w")
    put(repo.store, "c", git_repo_root="")
    repo.create_session("d", "cli", cwd="/other")
    assert repo.backfill_repo_roots({"/w": "/w-root", "": "/x", "/other": ""}) == 2
    roots = {sid: repo.get_session(sid)["git_repo_root"] for sid in "abcd"}  # type: ignore[index]
    assert roots == {"a": "/w-root", "b": "/kept", "c": "/w-root", "d": None}


@pytest.mark.parametrize("column", ["archived", "pinned"])
def test_lineage_flag_covers_the_whole_compression_lineage(
    repo: SessionRepository, column: str
) -> None:
    compressed(repo, "root", "mid", "tip")
    make(repo, "other_child", 5000.0, parent_session_id="tip")  # tip is open: not linked
    setter = getattr(repo, f"set_session_{column}")
    assert setter("mid", True) is True
    values = {sid: repo.get_session(sid)[column] for sid in ("root", "mid", "tip", "other_child")}  # type: ignore[index]
    assert values == {"root": 1, "mid": 1, "tip": 1, "other_child": 0}
    assert setter("tip", False) is True
    assert repo.get_session("root")[column] == 0  # type: ignore[index]


@pytest.mark.parametrize("column", ["archived", "pinned"])
def test_lineage_flag_unknown_id_is_false(repo: SessionRepository, column: str) -> None:
    assert getattr(repo, f"set_session_{column}")("missing", True) is False


def test_lineage_flag_survives_a_parent_cycle(repo: SessionRepository) -> None:
    compressed(repo, "a", "b")
    repo.end_session("b", "compression")
    put(repo.store, "a", parent_session_id="b")  # a <-> b
    assert repo.set_session_archived("a", True) is True
    assert repo.get_session("b")["archived"] == 1  # type: ignore[index]


def test_set_expiry_finalized(repo: SessionRepository) -> None:
    repo.create_session("s1", "cli")
    repo.set_expiry_finalized("s1")
    assert repo.get_session("s1")["expiry_finalized"] == 1  # type: ignore[index]
    repo.set_expiry_finalized("s1", False)
    assert repo.get_session("s1")["expiry_finalized"] == 0  # type: ignore[index]
    repo.set_expiry_finalized("", True)  # no id: no-op


def test_compression_failure_cooldown_round_trip(repo: SessionRepository) -> None:
    repo.create_session("s1", "cli")
    assert repo.get_compression_failure_cooldown("s1") is None
    until = time.time() + 60
    repo.record_compression_failure_cooldown("s1", until, error="boom \ud800")
    cooldown = repo.get_compression_failure_cooldown("s1")
    assert cooldown is not None
    assert cooldown["cooldown_until"] == until and cooldown["error"] == "boom \ufffd"
    assert 0 < cooldown["remaining_seconds"] <= 60
    repo.clear_compression_failure_cooldown("s1")
    row = repo.get_session("s1")
    assert row is not None
    assert row["compression_failure_cooldown_until"] is None
    assert row["compression_failure_error"] is None


def test_compression_failure_cooldown_expired_or_unknown_is_none(repo: SessionRepository) -> None:
    repo.create_session("s1", "cli")
    repo.record_compression_failure_cooldown("s1", 1.0, error="old")
    assert repo.get_compression_failure_cooldown("s1") is None
    assert repo.get_compression_failure_cooldown("missing") is None
    repo.record_compression_failure_cooldown("missing", 1.0)  # no error
    repo.clear_compression_failure_cooldown("missing")


@pytest.mark.parametrize("name", ["compression_fallback_streak", "compression_ineffective_count"])
def test_compression_counters_are_clamped_integers(repo: SessionRepository, name: str) -> None:
    repo.create_session("s1", "cli")
    getter, setter = getattr(repo, f"get_{name}"), getattr(repo, f"set_{name}")
    assert getter("s1") == 0
    setter("s1", 3.9)
    assert getter("s1") == 3
    setter("s1", -5)
    assert getter("s1") == 0 and repo.get_session("s1")[name] == 0  # type: ignore[index]
    assert getter("missing") == 0
    setter("missing", 2)  # no-op


@pytest.mark.sqlite_only  # PostgreSQL's BIGINT column cannot hold text
def test_compression_counter_getter_tolerates_bad_stored_values(repo: SessionRepository) -> None:
    repo.create_session("s1", "cli")
    put(repo.store, "s1", compression_fallback_streak="abc")
    assert repo.get_compression_fallback_streak("s1") == 0


# --------------------------------------------------------------------------- 5.3 lineage


def test_compression_tip_follows_the_chain(repo: SessionRepository) -> None:
    compressed(repo, "root", "mid", "tip")
    assert repo.get_compression_tip("root") == "tip"
    assert repo.get_compression_tip("mid") == "tip"
    assert repo.get_compression_tip("tip") == "tip"
    assert repo.get_compression_tip("missing") == "missing"


def test_compression_tip_needs_a_compression_parent(repo: SessionRepository) -> None:
    make(repo, "p", 1.0)
    make(repo, "c", 2.0, parent_session_id="p")
    repo.end_session("p", "user_exit")
    assert repo.get_compression_tip("p") == "p"


def test_compression_tip_prefers_compressed_then_open_children(repo: SessionRepository) -> None:
    compressed(repo, "root", "open_child")
    make(repo, "ended_child", 3.0, parent_session_id="root")
    repo.end_session("ended_child", "user_exit")
    assert repo.get_compression_tip("root") == "open_child"
    make(repo, "compressed_child", 0.5, parent_session_id="root")
    repo.end_session("compressed_child", "compression")
    assert repo.get_compression_tip("root") == "compressed_child"


def test_compression_tip_breaks_ties_by_latest_activity(repo: SessionRepository) -> None:
    compressed(repo, "root", "early")
    make(repo, "late", 2000.0, parent_session_id="root")
    assert repo.get_compression_tip("root") == "late"  # started later, no messages
    msg(repo.store, "early", "hi", 3000.0)
    assert repo.get_compression_tip("root") == "early"  # newer activity wins


def test_compression_tip_skips_branch_delegate_and_tool_children(repo: SessionRepository) -> None:
    make(repo, "root", 1.0)
    repo.end_session("root", "compression")
    make(repo, "branch", 2.0, parent_session_id="root", model_config={"_branched_from": "root"})
    make(repo, "delegate", 3.0, parent_session_id="root", model_config={"_delegate_from": "root"})
    make(repo, "tool", 4.0, parent_session_id="root", source="tool")
    assert repo.get_compression_tip("root") == "root"
    assert repo.find_live_compression_child("root") is None


def test_compression_tip_is_cycle_safe(repo: SessionRepository) -> None:
    compressed(repo, "a", "b")
    repo.end_session("b", "compression")
    put(repo.store, "a", parent_session_id="b")
    assert repo.get_compression_tip("a") == "b"


def test_compression_lineage_from_any_segment(repo: SessionRepository) -> None:
    compressed(repo, "root", "mid", "tip")
    for sid in ("root", "mid", "tip"):
        assert repo.get_compression_lineage(sid) == ["root", "mid", "tip"]
    assert repo.get_compression_lineage("missing") == []


def test_compression_lineage_branch_child_is_its_own_root(repo: SessionRepository) -> None:
    compressed(repo, "root", "tip")
    make(repo, "branch", 10.0, parent_session_id="root", model_config={"_branched_from": "root"})
    assert repo.get_compression_lineage("branch") == ["branch"]
    assert repo.get_compression_lineage("root") == ["root", "tip"]


def test_compression_lineage_takes_first_child_by_start(repo: SessionRepository) -> None:
    compressed(repo, "root", "first")
    make(repo, "second", 5000.0, parent_session_id="root")
    assert repo.get_compression_lineage("root") == ["root", "first"]
    assert repo.get_compression_lineage("second") == ["second"]  # not in the chain


def test_find_live_compression_child(repo: SessionRepository) -> None:
    compressed(repo, "root", "child")
    row = repo.find_live_compression_child("root")
    assert row is not None and row["id"] == "child" and "pinned" in row
    make(repo, "rival", 9.0, parent_session_id="root")
    assert repo.find_live_compression_child("root") is None  # ambiguous
    repo.end_session("rival", "user_exit")
    assert repo.find_live_compression_child("root")["id"] == "child"  # type: ignore[index]
    assert repo.find_live_compression_child("child") is None  # not ended by compression
    assert repo.find_live_compression_child("missing") is None


def test_find_live_compression_child_none_when_child_ended(repo: SessionRepository) -> None:
    compressed(repo, "root", "child")
    repo.end_session("child", "user_exit")
    assert repo.find_live_compression_child("root") is None


def test_session_delete_targets_collect_delegate_descendants(repo: SessionRepository) -> None:
    make(repo, "s", 1.0)
    make(repo, "d2", 2.0, parent_session_id="s", model_config={"_delegate_from": "s"})
    make(repo, "d1", 3.0, parent_session_id="s", model_config={"_delegate_from": "__orphaned__"})
    make(repo, "dd", 4.0, parent_session_id="d1", model_config={"_delegate_from": "d1"})
    make(repo, "named", 5.0, model_config={"_delegate_from": "s"})  # no parent link
    make(repo, "plain", 6.0, parent_session_id="s")  # ordinary child: orphaned, not deleted
    assert repo.get_session_delete_targets("s") == ["s", "d1", "d2", "dd", "named"]
    assert repo.get_session_delete_targets("missing") == []


def test_ancestors_descendants_and_conversation_root(repo: SessionRepository) -> None:
    make(repo, "a", 1.0)
    make(repo, "b", 2.0, parent_session_id="a")
    make(repo, "c", 3.0, parent_session_id="b")
    make(repo, "c2", 4.0, parent_session_id="b")
    assert repo.ancestors("c") == ["b", "a"]
    assert repo.descendants("a") == ["b", "c", "c2"]
    assert repo.get_conversation_root("c") == "a"
    assert repo.get_conversation_root("a") == "a"
    assert repo.get_conversation_root("missing") == "missing"
    assert repo.ancestors("missing") == [] and repo.descendants("missing") == []


def test_ancestors_and_descendants_are_cycle_safe_and_bounded(repo: SessionRepository) -> None:
    make(repo, "x", 1.0)
    make(repo, "y", 2.0, parent_session_id="x")
    put(repo.store, "x", parent_session_id="y")
    assert repo.ancestors("x") == ["y"]
    assert repo.descendants("x") == ["y"]

    def chain(s: Any) -> None:
        s.execute(
            SESSIONS.insert(),
            [
                {
                    "id": f"n{i:03d}",
                    "source": "cli",
                    "started_at": float(i),
                    "parent_session_id": f"n{i - 1:03d}" if i else None,
                }
                for i in range(150)
            ],
        )

    repo.store.write(chain)
    assert len(repo.ancestors("n149")) == 100
    assert len(repo.descendants("n000")) == 100


def test_resolve_resume_session_id_jumps_to_tip_then_newest_child(
    repo: SessionRepository,
) -> None:
    compressed(repo, "root", "tip")
    msg(repo.store, "tip", "hello", 10.0)
    assert repo.resolve_resume_session_id("root") == "tip"
    make(repo, "next", 20.0, parent_session_id="tip")  # newest child, but empty
    assert repo.resolve_resume_session_id("root") == "tip"
    msg(repo.store, "next", "more", 30.0)
    assert repo.resolve_resume_session_id("root") == "next"
    make(repo, "delegate", 40.0, parent_session_id="next", model_config={"_delegate_from": "x"})
    msg(repo.store, "delegate", "sub", 41.0)
    assert repo.resolve_resume_session_id("root") == "next"


def test_resolve_resume_session_id_without_messages_returns_input(
    repo: SessionRepository,
) -> None:
    compressed(repo, "root", "tip")
    assert repo.resolve_resume_session_id("root") == "root"
    assert repo.resolve_resume_session_id("missing") == "missing"


# --------------------------------------------------------------------------- 7.1 on v23


def test_v23_lists_five_sessions_as_four_rows(v23: SessionRepository) -> None:
    rows = v23.list_sessions_rich()
    assert ids(rows) == [FIX_CRON, FIX_CHILD, FIX_TRIP, FIX_S1]


def test_v23_compression_root_is_projected_to_its_tip(v23: SessionRepository) -> None:
    row = next(r for r in v23.list_sessions_rich() if r["id"] == FIX_CHILD)
    assert row["title"] == "Refactor auth-module #2"
    assert row["_lineage_root_id"] == FIX_ROOT
    assert row["preview"] == ("[CONTEXT COMPACTION] Earlier turns were compacted. Summary: ...")
    assert row["end_reason"] is None and row["message_count"] == 10
    root = v23.get_session(FIX_ROOT)
    assert root is not None
    assert row["started_at"] == root["started_at"]  # the root's, not the tip's
    assert row["input_tokens"] == root["input_tokens"]


def test_v23_cron_preview_is_cut_to_sixty_characters(v23: SessionRepository) -> None:
    first = (
        "Daily digest: summarise yesterday's GitHub notifications for NousResearch/hermes-agent."
    )
    assert len(first) == 87
    row = next(r for r in v23.list_sessions_rich() if r["id"] == FIX_CRON)
    assert row["preview"] == first[:60] + "..."
    assert row["last_active"] == pytest.approx(1796219013.1729956)


def test_v23_listing_rows_are_full_rows_plus_preview_and_last_active(
    v23: SessionRepository,
) -> None:
    rows = v23.list_sessions_rich()
    plain = next(r for r in rows if r["id"] == FIX_S1)
    assert len(plain) == 48 + 2 and "system_prompt" in plain
    compact = next(r for r in v23.list_sessions_rich(compact_rows=True) if r["id"] == FIX_S1)
    assert "system_prompt" not in compact and len(compact) == 47 + 2


def test_v23_without_projection_shows_the_root(v23: SessionRepository) -> None:
    rows = v23.list_sessions_rich(project_compression_tips=False)
    assert FIX_ROOT in ids(rows) and FIX_CHILD not in ids(rows)
    assert all("_lineage_root_id" not in r for r in rows)


def test_v23_include_children_lists_everything_unprojected(v23: SessionRepository) -> None:
    rows = v23.list_sessions_rich(include_children=True)
    assert sorted(ids(rows)) == sorted([FIX_S1, FIX_TRIP, FIX_ROOT, FIX_CHILD, FIX_CRON])
    assert all("_lineage_root_id" not in r for r in rows)


def test_v23_counts(v23: SessionRepository) -> None:
    assert v23.session_count() == 5
    assert v23.session_count(exclude_children=True) == 4
    assert v23.session_count(source="cli") == 3
    assert v23.session_count(sources=["cron", "telegram"]) == 2
    assert v23.session_count(exclude_sources=["cli"]) == 2
    assert v23.session_count(cwd_prefix="/srv/app/") == 2
    assert v23.session_count(min_message_count=12) == 3
    assert v23.session_count_by_source() == {"cli": 3, "cron": 1, "telegram": 1}
    assert v23.session_count_by_source(exclude_children=True) == {
        "cli": 2,
        "cron": 1,
        "telegram": 1,
    }


def test_v23_order_by_last_active_uses_the_chain(v23: SessionRepository) -> None:
    rows = v23.list_sessions_rich(order_by_last_active=True)
    assert ids(rows) == [FIX_CRON, FIX_CHILD, FIX_TRIP, FIX_S1]


def test_v23_id_query_matches_any_id_in_the_chain(v23: SessionRepository) -> None:
    rows = v23.list_sessions_rich(order_by_last_active=True, id_query="C0FFE2")
    assert ids(rows) == [FIX_CHILD] and rows[0]["_lineage_root_id"] == FIX_ROOT
    rows = v23.list_sessions_rich(order_by_last_active=True, id_query="080000_c0ffee")
    assert ids(rows) == [FIX_CHILD]
    assert v23.list_sessions_rich(order_by_last_active=True, id_query="%") == []


def test_v23_search_query_matches_titles_in_the_chain(v23: SessionRepository) -> None:
    rows = v23.list_sessions_rich(order_by_last_active=True, search_query="#2")
    assert ids(rows) == [FIX_CHILD]
    rows = v23.list_sessions_rich(order_by_last_active=True, search_query="kyoto")
    assert ids(rows) == [FIX_TRIP]
    rows = v23.list_sessions_rich(order_by_last_active=True, search_query="authmodule")
    assert ids(rows) == [FIX_CHILD]  # punctuation-stripped variant


def test_v23_queries_are_ignored_outside_last_active_mode(v23: SessionRepository) -> None:
    assert len(v23.list_sessions_rich(id_query="nothing", search_query="nothing")) == 4


def test_v23_include_pinned_appends_pinned_rows_outside_the_page(v23: SessionRepository) -> None:
    assert ids(v23.list_sessions_rich(limit=1)) == [FIX_CRON]
    rows = v23.list_sessions_rich(limit=1, include_pinned=True)
    assert ids(rows) == [FIX_CRON, FIX_CHILD]  # the pinned root, projected
    rows = v23.list_sessions_rich(limit=2, include_pinned=True)
    assert ids(rows) == [FIX_CRON, FIX_CHILD]  # already on the page: not repeated


def test_v23_get_session_rich_row_is_not_projected(v23: SessionRepository) -> None:
    row = v23.get_session_rich_row(FIX_ROOT)
    assert row is not None and row["id"] == FIX_ROOT and row["title"] == "Refactor auth-module"
    assert row["preview"].startswith("Step 1: refactor the auth-module")
    assert "_lineage_root_id" not in row
    compact = v23.get_session_rich_row(FIX_ROOT, compact_rows=True)
    assert compact is not None and "system_prompt" not in compact
    assert v23.get_session_rich_row("missing") is None


def test_v23_distinct_session_cwds(v23: SessionRepository) -> None:
    cwds = {r["cwd"]: r for r in v23.distinct_session_cwds()}
    assert set(cwds) == {"/home/dev/projects/state-migrator", "/srv/app"}
    assert cwds["/srv/app"]["sessions"] == 2
    child = v23.get_session(FIX_CHILD)
    assert child is not None and cwds["/srv/app"]["last_active"] == child["started_at"]


# --------------------------------------------------------------------------- 7.1 rules


def test_preview_takes_first_user_message_by_timestamp_then_id(repo: SessionRepository) -> None:
    make(repo, "s", 1.0)
    msg(repo.store, "s", "assistant first", 1.0, role="assistant")
    msg(repo.store, "s", "later\r\nline", 3.0)
    msg(repo.store, "s", "  earlier\nline  ", 2.0)
    row = repo.get_session_rich_row("s")
    assert row is not None and row["preview"] == "earlier line"
    assert row["last_active"] == 3.0


def test_preview_cut_at_sixty_three_then_sixty(repo: SessionRepository) -> None:
    make(repo, "a", 1.0)
    msg(repo.store, "a", "x" * 60, 1.0)
    make(repo, "b", 2.0)
    msg(repo.store, "b", "y" * 61, 1.0)
    make(repo, "c", 3.0)
    msg(repo.store, "c", "z" * 58 + "     tail", 1.0)  # the 63-char cut strips to 58
    rows = {r["id"]: r["preview"] for r in repo.list_sessions_rich()}
    assert rows == {"a": "x" * 60, "b": "y" * 60 + "...", "c": "z" * 58}


def test_preview_empty_without_user_text_or_for_structured_content(
    repo: SessionRepository,
) -> None:
    make(repo, "none", 1.0)
    make(repo, "multi", 2.0)
    msg(repo.store, "multi", '\x00json:[{"type": "text", "text": "hi"}]', 1.0)
    rows = {r["id"]: r for r in repo.list_sessions_rich()}
    assert rows["none"]["preview"] == "" and rows["none"]["last_active"] == 1.0
    assert rows["multi"]["preview"] == ""


def test_preview_describes_a_skill_invocation(repo: SessionRepository) -> None:
    body = "skill body " * 200
    content = (
        '[IMPORTANT: The user has invoked the "work" skill, indicating they want you to '
        "follow its instructions. The full skill content is loaded below.]\n\n"
        f"{body}\n\nThe user has provided the following "
        "instruction alongside the skill invocation: fix the title leak"
    )
    make(repo, "s", 1.0)
    msg(repo.store, "s", content, 1.0)
    assert repo.get_session_rich_row("s")["preview"] == "/work — fix the title leak"  # type: ignore[index]


def test_listing_visibility_of_children(repo: SessionRepository) -> None:
    make(repo, "root", 1.0)
    make(repo, "child", 2.0, parent_session_id="root")
    make(repo, "marked", 3.0, parent_session_id="root", model_config={"_branched_from": "root"})
    make(repo, "delegate", 4.0, model_config={"_delegate_from": "root"})
    make(repo, "p2", 5.0)
    repo.end_session("p2", "branched")
    put(repo.store, "p2", ended_at=6.0)
    make(repo, "legacy_branch", 7.0, parent_session_id="p2")
    make(repo, "before_branch", 5.5, parent_session_id="p2")
    put(repo.store, "root", model_config="{corrupt")  # must not break the listing
    assert ids(repo.list_sessions_rich()) == ["legacy_branch", "p2", "marked", "root"]
    assert len(repo.list_sessions_rich(include_children=True)) == 7


def test_listing_source_filters(repo: SessionRepository) -> None:
    make(repo, "a", 1.0, source="cli")
    make(repo, "b", 2.0, source="telegram")
    make(repo, "c", 3.0, source="cron")
    assert ids(repo.list_sessions_rich(source="cli")) == ["a"]
    assert ids(repo.list_sessions_rich(sources=["cli", "cron"])) == ["c", "a"]
    assert ids(repo.list_sessions_rich(exclude_sources=["cron"])) == ["b", "a"]


def test_listing_cwd_prefix(repo: SessionRepository) -> None:
    make(repo, "exact", 1.0, cwd="/srv/app")
    make(repo, "below", 2.0, cwd="/srv/app/sub")
    make(repo, "windows", 3.0, cwd="/srv/app\\win")
    make(repo, "sibling", 4.0, cwd="/srv/app2")
    make(repo, "wild", 5.0, cwd="/srv/a%p")
    expected = ["windows", "below", "exact"]
    assert ids(repo.list_sessions_rich(cwd_prefix="/srv/app")) == expected
    assert ids(repo.list_sessions_rich(cwd_prefix="/srv/app/")) == expected
    assert ids(repo.list_sessions_rich(cwd_prefix="/srv/a_p")) == []
    assert repo.session_count(cwd_prefix="/SRV/APP") == 0  # paths are case-sensitive


def test_listing_min_message_count_and_archived(repo: SessionRepository) -> None:
    make(repo, "a", 1.0)
    make(repo, "b", 2.0)
    put(repo.store, "a", message_count=5)
    repo.set_session_archived("b", True)
    assert ids(repo.list_sessions_rich(min_message_count=3)) == ["a"]
    assert ids(repo.list_sessions_rich()) == ["a"]
    assert ids(repo.list_sessions_rich(include_archived=True)) == ["b", "a"]
    assert ids(repo.list_sessions_rich(archived_only=True)) == ["b"]
    assert repo.session_count() == 1 and repo.session_count(archived_only=True) == 1
    assert repo.session_count(include_archived=True) == 2


def test_listing_orders_by_start_and_pages(repo: SessionRepository) -> None:
    for i in range(5):
        make(repo, f"s{i}", float(i))
    assert ids(repo.list_sessions_rich(limit=2)) == ["s4", "s3"]
    assert ids(repo.list_sessions_rich(limit=2, offset=2)) == ["s2", "s1"]
    assert ids(repo.list_sessions_rich(limit=None)) == ["s4", "s3", "s2", "s1", "s0"]


def test_order_by_last_active_counts_activity_across_the_chain(repo: SessionRepository) -> None:
    compressed(repo, "old_root", "old_tip", t0=1.0)
    make(repo, "newer", 100.0)
    msg(repo.store, "newer", "x", 150.0)
    assert ids(repo.list_sessions_rich()) == ["newer", "old_tip"]
    msg(repo.store, "old_tip", "y", 200.0)
    rows = repo.list_sessions_rich(order_by_last_active=True)
    assert ids(rows) == ["old_tip", "newer"]
    assert rows[0]["last_active"] == 200.0 and rows[0]["_lineage_root_id"] == "old_root"


def test_search_query_punctuation_variant_and_literal_wildcards(repo: SessionRepository) -> None:
    make(repo, "a", 1.0)
    make(repo, "b", 2.0)
    put(repo.store, "a", title="AN-94 notes")
    put(repo.store, "b", title="100% done")
    assert ids(repo.list_sessions_rich(order_by_last_active=True, search_query="an94")) == ["a"]
    assert ids(repo.list_sessions_rich(order_by_last_active=True, search_query="100%")) == ["b"]
    # `%` is an ordinary character, not a wildcard matching every title
    assert ids(repo.list_sessions_rich(order_by_last_active=True, search_query="%")) == ["b"]


def test_search_sessions_orders_by_activity_and_includes_everything(
    repo: SessionRepository,
) -> None:
    make(repo, "a", 1.0)
    make(repo, "b", 2.0, parent_session_id="a")
    make(repo, "c", 3.0)
    repo.set_session_archived("c", True)
    msg(repo.store, "a", "late", 10.0)
    rows = repo.search_sessions()
    assert ids(rows) == ["a", "c", "b"]
    assert rows[0]["last_active"] == 10.0 and rows[1]["last_active"] == 3.0
    assert ids(repo.search_sessions(limit=1, offset=1)) == ["c"]
    assert ids(repo.search_sessions(source="nope")) == []


def test_search_sessions_workspace_key(repo: SessionRepository) -> None:
    make(repo, "root_match", 1.0, cwd="/elsewhere", git_repo_root="/repo")
    make(repo, "cwd_match", 2.0, cwd="/repo/sub")
    make(repo, "cwd_but_other_root", 3.0, cwd="/repo", git_repo_root="/other")
    make(repo, "sibling", 4.0, cwd="/repo2")
    assert sorted(ids(repo.search_sessions(workspace_key="/repo"))) == ["cwd_match", "root_match"]


def test_session_count_by_source_counts_empty_sources_as_cli(repo: SessionRepository) -> None:
    make(repo, "a", 1.0, source="telegram")
    make(repo, "b", 2.0, source="")
    make(repo, "c", 3.0, source="cli")
    make(repo, "d", 4.0, source="telegram")
    counts = repo.session_count_by_source()
    assert counts == {"cli": 2, "telegram": 2}
    repo.set_session_archived("d", True)
    assert list(repo.session_count_by_source()) == ["cli", "telegram"]  # largest first
    assert repo.session_count_by_source(archived_only=True) == {"telegram": 1}


def test_list_cron_job_runs_binds_to_one_job(repo: SessionRepository) -> None:
    make(repo, "cron_job1_001", 1.0, source="cron")
    make(repo, "cron_job1_002", 2.0, source="cron")
    make(repo, "cron_job10_001", 3.0, source="cron")
    make(repo, "cron_job1_003", 4.0, source="cli")
    msg(repo.store, "cron_job1_001", "run", 5.0)
    runs = repo.list_cron_job_runs("job1")
    assert ids(runs) == ["cron_job1_002", "cron_job1_001"]
    assert runs[1]["preview"] == "run" and runs[1]["last_active"] == 5.0
    assert ids(repo.list_cron_job_runs("job1", limit=1, offset=1)) == ["cron_job1_001"]
    assert repo.list_cron_job_runs("missing") == []


def test_distinct_session_cwds_skips_blank_and_archived(repo: SessionRepository) -> None:
    make(repo, "a", 1.0, cwd="/w")
    make(repo, "b", 2.0, cwd="/w")
    make(repo, "c", 3.0, cwd="   ")
    make(repo, "d", 4.0, cwd="/arch")
    repo.end_session("b", "user_exit")
    put(repo.store, "b", ended_at=9.0)
    repo.set_session_archived("d", True)
    assert repo.distinct_session_cwds() == [{"cwd": "/w", "sessions": 2, "last_active": 9.0}]
    assert [r["cwd"] for r in repo.distinct_session_cwds(include_archived=True)] == [
        "/arch",
        "/w",
    ]


def test_empty_database_reads(repo: SessionRepository) -> None:
    assert repo.list_sessions_rich() == []
    assert repo.list_sessions_rich(order_by_last_active=True, search_query="x") == []
    assert repo.search_sessions() == []
    assert repo.session_count() == 0
    assert repo.session_count_by_source() == {}
    assert repo.distinct_session_cwds() == []
