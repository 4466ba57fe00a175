"""Compression leases (docs/reference/behaviour.md 12), gateway routing, peers and handoffs (13),
read-only async delegations (14), and state_meta (11), on real database files."""

from __future__ import annotations

import logging
import os
import sqlite3
import subprocess
import sys
import time
from typing import Any

import pytest

from hermes_store.repositories.coordination import (
    AsyncDelegationRepository,
    CompressionLockRepository,
    GatewayRoutingRepository,
    holder_is_dead,
    holder_pid,
)
from hermes_store.repositories.meta import MetaRepository
from hermes_store.store import Store


@pytest.fixture
def con(raw_con: Any) -> Any:
    """Plain SQL on the store's own database (SQLite file or PostgreSQL)."""
    return raw_con


@pytest.fixture
def locks(store: Store) -> CompressionLockRepository:
    return CompressionLockRepository(store)


@pytest.fixture
def gw(store: Store) -> GatewayRoutingRepository:
    return GatewayRoutingRepository(store)


def add_session(con: sqlite3.Connection, sid: str, **cols: Any) -> None:
    values = {"id": sid, "source": "telegram", "started_at": time.time(), **cols}
    names = ", ".join(values)
    marks = ", ".join("?" for _ in values)
    con.execute(f"INSERT INTO sessions ({names}) VALUES ({marks})", list(values.values()))


def add_message(con: sqlite3.Connection, sid: str, ts: float | None = None) -> None:
    con.execute(
        "INSERT INTO messages (session_id, role, content, timestamp) VALUES (?, 'user', 'hi', ?)",
        (sid, ts if ts is not None else time.time()),
    )


def session(con: sqlite3.Connection, sid: str) -> dict[str, Any]:
    return dict(con.execute("SELECT * FROM sessions WHERE id = ?", (sid,)).fetchone())


def lock_row(con: sqlite3.Connection, sid: str) -> dict[str, Any] | None:
    row = con.execute("SELECT * FROM compression_locks WHERE session_id = ?", (sid,)).fetchone()
    return dict(row) if row else None


def dead_pid() -> int:
    """The pid of a process that has exited and been reaped."""
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


HOLDER_A = "pid={pid}:tid=1:agent=aa:nonce=0000000a"


# --------------------------------------------------------------------------- 12 locks


def test_acquire_free_lock(locks: CompressionLockRepository, con: sqlite3.Connection) -> None:
    before = time.time()
    assert locks.try_acquire("s1", "holder-a", ttl_seconds=60)
    row = lock_row(con, "s1")
    assert row is not None and row["holder"] == "holder-a"
    assert before - 1 <= row["acquired_at"] <= time.time()
    assert row["expires_at"] == pytest.approx(row["acquired_at"] + 60)


def test_default_ttl_is_300_seconds(
    locks: CompressionLockRepository, con: sqlite3.Connection
) -> None:
    assert locks.try_acquire("s1", "holder-a")
    row = lock_row(con, "s1")
    assert row is not None
    assert row["expires_at"] - row["acquired_at"] == pytest.approx(300.0)


def test_live_lock_refuses_another_holder(
    locks: CompressionLockRepository, con: sqlite3.Connection
) -> None:
    assert locks.try_acquire("s1", "holder-a")
    assert not locks.try_acquire("s1", "holder-b")
    row = lock_row(con, "s1")
    assert row is not None and row["holder"] == "holder-a"


def test_same_holder_reacquires_without_extending(
    locks: CompressionLockRepository, con: sqlite3.Connection
) -> None:
    assert locks.try_acquire("s1", "holder-a", ttl_seconds=30)
    first = lock_row(con, "s1")
    assert locks.try_acquire("s1", "holder-a", ttl_seconds=600)
    assert lock_row(con, "s1") == first


def test_locks_are_per_session(locks: CompressionLockRepository) -> None:
    assert locks.try_acquire("s1", "holder-a")
    assert locks.try_acquire("s2", "holder-b")


def test_expired_lock_is_reclaimed(
    locks: CompressionLockRepository, con: sqlite3.Connection, caplog: pytest.LogCaptureFixture
) -> None:
    con.execute(
        "INSERT INTO compression_locks VALUES ('s1', 'old-holder', ?, ?)",
        (time.time() - 400, time.time() - 100),
    )
    with caplog.at_level(logging.INFO, logger="hermes_store.repositories.coordination"):
        assert locks.try_acquire("s1", "holder-b")
    assert "Reclaimed stale compression lock" in caplog.text
    row = lock_row(con, "s1")
    assert row is not None and row["holder"] == "holder-b"


def test_dead_pid_lock_is_reclaimed(
    locks: CompressionLockRepository, con: sqlite3.Connection, caplog: pytest.LogCaptureFixture
) -> None:
    holder = HOLDER_A.format(pid=dead_pid())
    assert locks.try_acquire("s1", holder, ttl_seconds=3600)
    with caplog.at_level(logging.INFO, logger="hermes_store.repositories.coordination"):
        assert locks.try_acquire("s1", "pid=1:tid=2:agent=bb:nonce=0000000b")
    assert "Reclaimed stale compression lock" in caplog.text
    row = lock_row(con, "s1")
    assert row is not None and row["holder"].startswith("pid=1:")


def test_live_pid_lock_is_kept(locks: CompressionLockRepository) -> None:
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        assert locks.try_acquire("s1", HOLDER_A.format(pid=proc.pid))
        assert not locks.try_acquire("s1", "holder-b")
    finally:
        proc.kill()
        proc.wait()


def test_own_pid_lock_is_kept(locks: CompressionLockRepository) -> None:
    assert locks.try_acquire("s1", HOLDER_A.format(pid=os.getpid()))
    assert not locks.try_acquire("s1", "holder-b")


@pytest.mark.parametrize(
    "holder",
    ["free text holder", "pid=0:tid=1", "pid=-5", "ppid={dead}", "pid={dead}x", ""],
)
def test_unstructured_or_doubtful_holders_are_kept(
    locks: CompressionLockRepository, con: sqlite3.Connection, holder: str
) -> None:
    holder = holder.format(dead=dead_pid())
    now = time.time()
    con.execute("INSERT INTO compression_locks VALUES ('s1', ?, ?, ?)", (holder, now, now + 3600))
    assert not locks.try_acquire("s1", "holder-b")
    row = lock_row(con, "s1")
    assert row is not None and row["holder"] == holder


def test_holder_pid_parsing() -> None:
    assert holder_pid("pid=123:tid=4:agent=ab:nonce=deadbeef") == 123
    assert holder_pid("agent=ab:pid=77") == 77
    assert holder_pid("ppid=5") is None
    assert holder_pid("pid=12ab") is None
    assert holder_pid("no pid here") is None
    assert not holder_is_dead(f"pid={os.getpid()}")
    assert holder_is_dead(f"pid={dead_pid()}")


def test_empty_session_id_is_refused(locks: CompressionLockRepository) -> None:
    assert not locks.try_acquire("", "holder-a")
    assert not locks.refresh("", "holder-a")
    assert not locks.refresh("s1", "")
    locks.release("", "holder-a")  # no error


def test_sql_errors_mean_not_acquired(fresh_db: str) -> None:
    with Store(fresh_db, read_only=True) as ro:
        repo = CompressionLockRepository(ro)
        assert not repo.try_acquire("s1", "holder-a")
        assert not repo.refresh("s1", "holder-a")
        repo.release("s1", "holder-a")  # logged, not raised


def test_refresh_extends_own_lease_even_when_expired(
    locks: CompressionLockRepository, con: sqlite3.Connection
) -> None:
    con.execute(
        "INSERT INTO compression_locks VALUES ('s1', 'holder-a', ?, ?)",
        (time.time() - 400, time.time() - 100),
    )
    assert locks.get_holder("s1") is None
    assert locks.refresh("s1", "holder-a", ttl_seconds=120)
    row = lock_row(con, "s1")
    assert row is not None
    assert row["expires_at"] == pytest.approx(time.time() + 120, abs=5)
    assert locks.get_holder("s1") == "holder-a"


def test_refresh_fails_once_someone_else_holds_it(locks: CompressionLockRepository) -> None:
    assert locks.try_acquire("s1", "holder-a")
    assert not locks.refresh("s1", "holder-b")
    assert not locks.refresh("unknown", "holder-a")


def test_release_only_by_the_holder_and_idempotent(
    locks: CompressionLockRepository, con: sqlite3.Connection
) -> None:
    assert locks.try_acquire("s1", "holder-a")
    locks.release("s1", "holder-b")
    assert lock_row(con, "s1") is not None
    locks.release("s1", "holder-a")
    assert lock_row(con, "s1") is None
    locks.release("s1", "holder-a")
    assert locks.try_acquire("s1", "holder-b")


def test_get_holder_only_for_live_leases(
    locks: CompressionLockRepository, con: sqlite3.Connection
) -> None:
    assert locks.get_holder("s1") is None
    assert locks.try_acquire("s1", "holder-a")
    assert locks.get_holder("s1") == "holder-a"
    con.execute("UPDATE compression_locks SET expires_at = ?", (time.time() - 1,))
    assert locks.get_holder("s1") is None


# --------------------------------------------------------------------------- 13 routing


def test_save_entry_upserts_per_scope(
    gw: GatewayRoutingRepository, con: sqlite3.Connection
) -> None:
    gw.save_entry("k1", '{"v": 1}')
    first = con.execute("SELECT updated_at FROM gateway_routing").fetchone()[0]
    time.sleep(0.01)
    gw.save_entry("k1", '{"v": 2}')
    gw.save_entry("k1", '{"v": 3}', scope="/other/dir")
    assert gw.load_entries() == {"k1": '{"v": 2}'}
    assert gw.load_entries(scope="/other/dir") == {"k1": '{"v": 3}'}
    rows = con.execute("SELECT updated_at FROM gateway_routing WHERE scope = ''").fetchall()
    assert len(rows) == 1 and rows[0][0] > first


def test_save_entry_ignores_empty_values(gw: GatewayRoutingRepository) -> None:
    gw.save_entry("", '{"v": 1}')
    gw.save_entry("k1", "")
    assert gw.load_entries() == {}


def test_replace_entries_only_touches_its_scope(gw: GatewayRoutingRepository) -> None:
    gw.save_entry("old", "1")
    gw.save_entry("keep", "x", scope="s2")
    gw.replace_entries({"a": "1", "b": "2", "": "skipped", "c": ""})
    assert gw.load_entries() == {"a": "1", "b": "2"}
    assert gw.load_entries(scope="s2") == {"keep": "x"}
    gw.replace_entries({})
    assert gw.load_entries() == {}


def test_delete_entries_in_scope(gw: GatewayRoutingRepository) -> None:
    gw.replace_entries({f"k{i}": "v" for i in range(2000)})
    gw.save_entry("k1", "other", scope="s2")
    deleted = gw.delete_entries([f"k{i}" for i in range(1500)] + ["missing", ""])
    assert deleted == 1500
    assert len(gw.load_entries()) == 500
    assert gw.load_entries(scope="s2") == {"k1": "other"}
    assert gw.delete_entries([]) == 0


def test_record_gateway_session_peer(gw: GatewayRoutingRepository, con: sqlite3.Connection) -> None:
    add_session(
        con, "s1", source="cli", user_id="old", thread_id="t0", display_name="Ann", origin_json="{}"
    )
    gw.record_gateway_session_peer(
        "s1", source="telegram", session_key="agent:main:telegram:dm:1", chat_id="c1"
    )
    row = session(con, "s1")
    assert (row["source"], row["session_key"], row["chat_id"]) == (
        "telegram",
        "agent:main:telegram:dm:1",
        "c1",
    )
    assert row["user_id"] is None and row["thread_id"] is None  # None is written too
    assert (row["display_name"], row["origin_json"]) == ("Ann", "{}")  # only when given
    gw.record_gateway_session_peer(
        "s1", source="telegram", session_key="k", display_name="Bob", origin_json='{"a": 1}'
    )
    row = session(con, "s1")
    assert (row["display_name"], row["origin_json"]) == ("Bob", '{"a": 1}')


def test_record_gateway_session_peer_no_ops(
    gw: GatewayRoutingRepository, con: sqlite3.Connection
) -> None:
    add_session(con, "s1", source="cli")
    gw.record_gateway_session_peer("s1", source="telegram")  # no session_key
    gw.record_gateway_session_peer("", source="telegram", session_key="k")
    gw.record_gateway_session_peer("unknown", source="telegram", session_key="k")
    assert session(con, "s1")["source"] == "cli"
    assert con.execute("SELECT COUNT(*) FROM sessions").fetchone()[0] == 1


def test_list_gateway_sessions_newest_per_key(
    gw: GatewayRoutingRepository, con: sqlite3.Connection
) -> None:
    t = time.time() - 1000
    add_session(con, "old", session_key="k1", started_at=t)
    add_session(con, "new", session_key="k1", started_at=t + 10)
    add_session(con, "other", session_key="k2", started_at=t + 5, source="Discord")
    add_session(con, "nokey", started_at=t + 20)
    add_message(con, "other", ts=t + 500)  # most recent activity
    rows = gw.list_gateway_sessions()
    assert [r["id"] for r in rows] == ["other", "new"]
    assert rows[0]["last_active"] == t + 500
    assert rows[1]["last_active"] == t + 10  # no messages: started_at
    assert "hermes_rank" not in rows[0]
    assert "pinned" in rows[0]  # full rows


def test_list_gateway_sessions_platform_is_case_insensitive(
    gw: GatewayRoutingRepository, con: sqlite3.Connection
) -> None:
    add_session(con, "a", session_key="k1", source="Telegram")
    add_session(con, "b", session_key="k2", source="discord")
    assert [r["id"] for r in gw.list_gateway_sessions(platform="TELEGRAM")] == ["a"]


def test_list_gateway_sessions_active_only(
    gw: GatewayRoutingRepository, con: sqlite3.Connection
) -> None:
    t = time.time() - 1000
    add_session(con, "open-old", session_key="k1", started_at=t)
    add_session(con, "ended-new", session_key="k1", started_at=t + 1, ended_at=t + 2)
    add_session(con, "open", session_key="k2", started_at=t)
    # k1's current session has ended, so the key has no active session.
    assert [r["id"] for r in gw.list_gateway_sessions()] == ["open"]
    everything = gw.list_gateway_sessions(active_only=False)
    assert sorted(r["id"] for r in everything) == ["ended-new", "open"]


def test_find_session_by_origin_newest_open(
    gw: GatewayRoutingRepository, con: sqlite3.Connection
) -> None:
    t = time.time() - 100
    add_session(con, "old", session_key="k", chat_id="c", user_id="u1", started_at=t)
    add_session(con, "new", session_key="k", chat_id="c", user_id="u1", started_at=t + 1)
    add_session(con, "ended", session_key="k", chat_id="c", started_at=t + 2, ended_at=t + 3)
    add_session(con, "unkeyed", chat_id="c", started_at=t + 4)
    assert gw.find_session_by_origin(platform="TeleGram", chat_id="c") == "new"
    assert gw.find_session_by_origin(platform="telegram", chat_id="nope") is None
    assert gw.find_session_by_origin(platform="discord", chat_id="c") is None


def test_find_session_by_origin_thread(
    gw: GatewayRoutingRepository, con: sqlite3.Connection
) -> None:
    t = time.time() - 100
    add_session(con, "main", session_key="k1", chat_id="c", started_at=t)
    add_session(con, "thread", session_key="k2", chat_id="c", thread_id="t1", started_at=t + 1)
    assert gw.find_session_by_origin(platform="telegram", chat_id="c", thread_id="t1") == "thread"
    assert gw.find_session_by_origin(platform="telegram", chat_id="c", thread_id="") == "main"


def test_find_session_by_origin_user_rules(
    gw: GatewayRoutingRepository, con: sqlite3.Connection
) -> None:
    t = time.time() - 100
    add_session(con, "ann", session_key="k1", chat_id="g", user_id="ann", started_at=t)
    add_session(con, "bob", session_key="k2", chat_id="g", user_id="bob", started_at=t + 1)
    find = gw.find_session_by_origin
    assert find(platform="telegram", chat_id="g", user_id="ann") == "ann"  # exact sender wins
    assert find(platform="telegram", chat_id="g", user_id="cid") is None  # several, none match
    assert find(platform="telegram", chat_id="g") is None  # several distinct senders
    add_session(con, "solo", session_key="k3", chat_id="dm", user_id="ann", started_at=t)
    assert find(platform="telegram", chat_id="dm", user_id="someone") == "solo"  # one row
    add_session(con, "solo2", session_key="k4", chat_id="dm", user_id=None, started_at=t + 2)
    assert find(platform="telegram", chat_id="dm") == "solo2"  # one non-empty sender


def test_find_latest_gateway_session_for_peer(
    gw: GatewayRoutingRepository, con: sqlite3.Connection
) -> None:
    t = time.time() - 100
    add_session(
        con, "closed", session_key="k", started_at=t + 5, ended_at=t + 6, end_reason="user_exit"
    )
    add_session(con, "empty", session_key="k", started_at=t + 4)
    add_session(
        con,
        "reaped",
        session_key="k",
        started_at=t + 3,
        ended_at=t + 4,
        end_reason="ws_orphan_reap",
    )
    add_session(con, "open", session_key="k", started_at=t + 1)
    for sid in ("closed", "reaped", "open"):
        add_message(con, sid)
    found = gw.find_latest_gateway_session_for_peer(source="telegram", session_key="k")
    assert found is not None and found["id"] == "reaped"
    assert "model_config" in found
    assert gw.find_latest_gateway_session_for_peer(source="telegram") is None
    assert gw.find_latest_gateway_session_for_peer(source="discord", session_key="k") is None


def test_find_latest_gateway_session_for_peer_falls_back_to_peer_tuple(
    gw: GatewayRoutingRepository, con: sqlite3.Connection
) -> None:
    add_session(con, "p", session_key="old-key", user_id="u", chat_id="c", chat_type="dm")
    add_message(con, "p")
    find = gw.find_latest_gateway_session_for_peer
    assert find(source="telegram", session_key="new-key", user_id="u") is None  # no chat
    found = find(source="telegram", session_key="new-key", user_id="u", chat_id="c", chat_type="dm")
    assert found is not None and found["id"] == "p"
    # thread_id NULL in the row compares equal to a missing thread ('' = '').
    assert (
        find(
            source="telegram",
            session_key="x",
            user_id="u",
            chat_id="c",
            chat_type="dm",
            thread_id="t9",
        )
        is None
    )


def test_handoff_state_machine(gw: GatewayRoutingRepository, con: sqlite3.Connection) -> None:
    add_session(con, "s1")
    assert gw.get_handoff_state("s1") == {"state": None, "platform": None, "error": None}
    assert gw.request_handoff("s1", "discord")
    assert not gw.request_handoff("s1", "slack")  # already pending
    assert gw.get_handoff_state("s1") == {"state": "pending", "platform": "discord", "error": None}
    assert gw.claim_handoff("s1")
    assert not gw.claim_handoff("s1")  # already running
    assert not gw.request_handoff("s1", "slack")  # running
    gw.fail_handoff("s1", "x" * 600)
    state = gw.get_handoff_state("s1")
    assert state is not None and state["state"] == "failed" and state["error"] == "x" * 500
    assert gw.request_handoff("s1", "slack")  # from failed
    assert gw.get_handoff_state("s1") == {"state": "pending", "platform": "slack", "error": None}
    gw.complete_handoff("s1")
    assert gw.get_handoff_state("s1") == {"state": "completed", "platform": "slack", "error": None}
    assert gw.request_handoff("s1", "discord")  # from completed


def test_complete_and_fail_do_not_check_state(
    gw: GatewayRoutingRepository, con: sqlite3.Connection
) -> None:
    add_session(con, "s1")
    gw.complete_handoff("s1")
    assert session(con, "s1")["handoff_state"] == "completed"
    gw.fail_handoff("s1", "boom")
    assert session(con, "s1")["handoff_error"] == "boom"


def test_handoff_unknown_session(gw: GatewayRoutingRepository) -> None:
    assert gw.get_handoff_state("unknown") is None
    assert not gw.request_handoff("unknown", "discord")
    assert not gw.claim_handoff("unknown")
    gw.complete_handoff("unknown")
    gw.fail_handoff("unknown", "e")


def test_list_pending_handoffs_oldest_first(
    gw: GatewayRoutingRepository, con: sqlite3.Connection
) -> None:
    t = time.time() - 100
    add_session(con, "new", started_at=t + 2)
    add_session(con, "old", started_at=t)
    add_session(con, "running", started_at=t + 1)
    for sid in ("new", "old", "running"):
        gw.request_handoff(sid, "discord")
    gw.claim_handoff("running")
    pending = gw.list_pending_handoffs()
    assert [r["id"] for r in pending] == ["old", "new"]
    assert pending[0]["handoff_platform"] == "discord" and "title" in pending[0]


# --------------------------------------------------------------------------- 14 async


def _add_delegation(con: sqlite3.Connection, did: str, state: str, dispatched: float) -> None:
    con.execute(
        "INSERT INTO async_delegations (delegation_id, origin_session, state, dispatched_at,"
        " updated_at, task_json) VALUES (?, 'origin', ?, ?, ?, '{\"goal\": 1}')",
        (did, state, dispatched, dispatched),
    )


def test_async_delegations_are_read_only(
    store: Store, con: sqlite3.Connection, fresh_db: str, db: Any
) -> None:
    t = time.time()
    _add_delegation(con, "deleg_00000002", "running", t + 1)
    _add_delegation(con, "deleg_00000001", "queued", t)
    _add_delegation(con, "deleg_00000003", "completed", t + 2)
    before = db.dump(fresh_db.removeprefix("sqlite:///"))
    repo = AsyncDelegationRepository(store)
    got = repo.get("deleg_00000001")
    assert got is not None and got["state"] == "queued" and got["delivery_state"] == "pending"
    assert got["task_json"] == '{"goal": 1}'
    assert repo.get("missing") is None
    assert [r["delegation_id"] for r in repo.list_by_state()] == [
        "deleg_00000001",
        "deleg_00000002",
        "deleg_00000003",
    ]
    assert [r["delegation_id"] for r in repo.list_by_state("running")] == ["deleg_00000002"]
    assert [r["delegation_id"] for r in repo.list_by_state(["queued", "completed"])] == [
        "deleg_00000001",
        "deleg_00000003",
    ]
    assert repo.list_by_state([]) == []
    assert len(repo.list_by_state(limit=2)) == 2
    assert repo.list_by_state(origin_session="other") == []
    assert repo.count_by_state() == {"completed": 1, "queued": 1, "running": 1}
    assert db.dump(fresh_db.removeprefix("sqlite:///")) == before
    public = [n for n in dir(repo) if not n.startswith("_") and callable(getattr(repo, n))]
    assert sorted(public) == ["count_by_state", "get", "list_by_state"]


def test_async_delegations_expose_lazily_added_columns(
    store: Store, con: sqlite3.Connection
) -> None:
    # Later writers add columns lazily; full rows must carry them.
    con.execute(
        "ALTER TABLE async_delegations ADD COLUMN origin_session_id TEXT NOT NULL DEFAULT ''"
    )
    _add_delegation(con, "deleg_00000001", "queued", time.time())
    got = AsyncDelegationRepository(store).get("deleg_00000001")
    assert got is not None and got["origin_session_id"] == ""


# --------------------------------------------------------------------------- 11 meta


def test_meta_get_set_overwrite_delete(store: Store) -> None:
    meta = MetaRepository(store)
    assert meta.get_meta("last_auto_prune") is None
    meta.set_meta("last_auto_prune", 1.5)
    assert meta.get_meta("last_auto_prune") == "1.5"
    meta.set_meta("last_auto_prune", "2")
    assert meta.get_meta("last_auto_prune") == "2"
    assert meta.delete_meta("last_auto_prune")
    assert not meta.delete_meta("last_auto_prune")
    assert meta.get_meta("last_auto_prune") is None


def test_meta_inside_a_callers_unit_of_work(store: Store) -> None:
    meta = MetaRepository(store)

    def work(s: Any) -> str | None:
        meta.set_meta("goal:s1", "x", conn=s)
        return meta.get_meta("goal:s1", conn=s)  # sees its own uncommitted write

    assert store.write(work) == "x"
    assert meta.get_meta("goal:s1") == "x"


def test_meta_set_rolls_back_with_the_callers_transaction(store: Store) -> None:
    meta = MetaRepository(store)

    def work(s: Any) -> None:
        meta.set_meta("k", "v", conn=s)
        raise RuntimeError("caller failed")

    with pytest.raises(RuntimeError):
        store.write(work)
    assert meta.get_meta("k") is None


def test_list_meta_prefix_takes_wildcards_literally(store: Store) -> None:
    meta = MetaRepository(store)
    existing = meta.list_meta_prefix("")  # a fresh database may carry FTS bookkeeping
    for key in ("goal:a", "goal:b", "goalXa", "GOAL:c", "tmp_marker", "tmp%x", "tmpYx"):
        meta.set_meta(key, key.upper())
    assert meta.list_meta_prefix("goal:") == {"goal:a": "GOAL:A", "goal:b": "GOAL:B"}
    assert meta.list_meta_prefix("tmp_") == {"tmp_marker": "TMP_MARKER"}
    assert meta.list_meta_prefix("tmp%") == {"tmp%x": "TMP%X"}
    assert meta.list_meta_prefix("none") == {}
    assert len(meta.list_meta_prefix("")) == len(existing) + 7
