"""Reads that a caller may repeat often (a UI polling a cron job's runs, the /skill
re-titling helper, whether FTS maintenance has work) reuse statements built once: a
repeat call with other arguments builds and compiles nothing, and the FTS state is read
in two statements. Real databases (SQLite and PostgreSQL; the FTS state on SQLite), no
mocks; SQLAlchemy's constructors are only counted."""

from __future__ import annotations

from typing import Any

import pytest
from helpers.statements import built, sent
from sqlalchemy import update

from hermes_store.repositories.housekeeping import HousekeepingRepository
from hermes_store.repositories.maintenance import MaintenanceRepository
from hermes_store.repositories.messages import MessageRepository
from hermes_store.repositories.sessions import SESSIONS, SessionRepository
from hermes_store.store import Store


def test_cron_job_runs_build_and_compile_once(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    repo = SessionRepository(store)
    for n in range(3):
        repo.create_session(f"cron_a_{n:03d}", "cron")
    assert len(repo.list_cron_job_runs("a")) == 3
    # one statement per small limit (written into its SQL), built at its first call
    repo.list_cron_job_runs("a", limit=1)
    repo.list_cron_job_runs("a", limit=None)
    with built(monkeypatch) as names:
        assert len(repo.list_cron_job_runs("a", limit=1, offset=1)) == 1
        assert repo.list_cron_job_runs("b", limit=None) == []
        assert len(repo.list_cron_job_runs("b", limit=20)) == 0
    assert names == []


def test_skill_scaffolded_sessions_build_and_compile_once(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    sessions, messages = SessionRepository(store), MessageRepository(store)
    sessions.create_session("s", "cli")
    messages.append_message("s", "user", '[IMPORTANT: The user has invoked the "pdf" skill.]')
    titled = update(SESSIONS).where(SESSIONS.c.id == "s").values(title="pdf")
    store.write(lambda conn: conn.execute(titled))
    assert [r["id"] for r in sessions.list_skill_scaffolded_sessions()] == ["s"]
    # one statement per small limit (written into its SQL), built at its first call
    sessions.list_skill_scaffolded_sessions(limit=5)
    sessions.list_skill_scaffolded_sessions(limit=0)
    with built(monkeypatch) as names:
        assert [r["id"] for r in sessions.list_skill_scaffolded_sessions(limit=200)] == ["s"]
        assert [r["id"] for r in sessions.list_skill_scaffolded_sessions(limit=5)] == ["s"]
        assert sessions.list_skill_scaffolded_sessions(limit=0) == []
    assert names == []


def test_fts_optimize_available_reads_the_state_in_two_statements(sqlite_store: Store) -> None:
    housekeeping = HousekeepingRepository(sqlite_store)
    with sent(sqlite_store) as statements:
        assert housekeeping.fts_optimize_available() is False
    assert len(statements) == 2, statements


def test_session_counts_and_cwds_build_and_compile_once(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    sessions, maintenance = SessionRepository(store), MaintenanceRepository(store)
    sessions.create_session("a", "cli", cwd="/w")
    sessions.create_session("b", "cron")
    sessions.end_session("b", "user_exit")

    def calls() -> tuple[Any, ...]:
        return (
            sessions.session_count_by_source(),
            sessions.session_count_by_source(include_archived=True),
            sessions.distinct_session_cwds(),
            sessions.distinct_session_cwds(include_archived=True),
            maintenance.count_empty_sessions(),
        )

    first = calls()
    with built(monkeypatch) as names:
        assert calls() == first
    assert names == []
    assert first[0] == {"cli": 1, "cron": 1}
    assert [row["cwd"] for row in first[2]] == ["/w"]
    assert first[4] == 1


def test_search_sessions_builds_and_compiles_once_per_shape(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    repo = SessionRepository(store)
    repo.create_session("a", "cli", cwd="/w/a")
    repo.create_session("b", "cron", cwd="/elsewhere")
    # each shape (filters present, a written limit or none) built at its first call
    repo.search_sessions()
    repo.search_sessions(source="cli", workspace_key="/w", limit=None)
    with built(monkeypatch) as names:
        assert [r["id"] for r in repo.search_sessions(offset=1)] == ["a"]
        assert [
            r["id"]
            for r in repo.search_sessions(source="cron", workspace_key="/elsewhere", limit=None)
        ] == ["b"]
        assert repo.search_sessions(source="cli", workspace_key="/nowhere", limit=None) == []
    assert names == []
