"""PostgreSQL as a second backend: the schema the revisions build there, the upgrade
lock, the search indexes, and the legacy fixtures moved from SQLite answering the same
searches. Every test uses the machine's real server (a database of its own)."""

from __future__ import annotations

import multiprocessing
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from helpers.processes import run_cli_here as run_cli  # the commands' main, in-process
from sqlalchemy import create_engine, inspect, text
from sqlalchemy.pool import NullPool

from hermes_store import migrate
from hermes_store.compat import SessionDB
from hermes_store.errors import NotAHermesDatabase, SchemaTooNew
from hermes_store.migration import copy as hcopy
from hermes_store.models import metadata

QUERIES = ("refactor", "迁移", "Kyoto", "refactor OR Kyoto", "test*", '"auth module"')


def _scalar(url: str, sql: str, **params: Any) -> Any:
    engine = create_engine(url, poolclass=NullPool)
    try:
        with engine.connect() as conn:
            return conn.execute(text(sql), params).scalar()
    finally:
        engine.dispose()


def test_head_schema_matches_the_models(pg_fresh_db: str) -> None:
    report = migrate.check(pg_fresh_db)
    assert report.ok, (report.schema_drift, report.status)
    engine = create_engine(pg_fresh_db, poolclass=NullPool)
    try:
        info = inspect(engine)
        assert set(metadata.tables) <= set(info.get_table_names())
        columns = {c["name"]: c for c in info.get_columns("messages")}
        assert str(columns["timestamp"]["type"]) == "DOUBLE PRECISION"
        assert str(columns["token_count"]["type"]) == "BIGINT"
        assert columns["id"].get("identity") is not None
        indexes = {i["name"]: i for i in info.get_indexes("sessions")}
        title = indexes["idx_sessions_title_unique"]
        assert title["unique"] and "title IS NOT NULL" in str(
            title.get("dialect_options", {}).get("postgresql_where")
        )
    finally:
        engine.dispose()
    assert _scalar(pg_fresh_db, "SELECT MAX(version) FROM schema_version") == 23
    assert _scalar(pg_fresh_db, "SELECT COUNT(*) FROM schema_version") == 1


def test_identity_never_reuses_ids(pg_fresh_db: str) -> None:
    db = SessionDB(url=pg_fresh_db)
    try:
        db.create_session("s1", "cli")
        first = db.append_message("s1", "user", "one")
        second = db.append_message("s1", "user", "two")
        db.delete_session("s1")
        db.create_session("s2", "cli")
        third = db.append_message("s2", "user", "three")
    finally:
        db.close()
    assert first < second < third


def test_every_revision_goes_down_and_up_again(pg_url: str) -> None:
    migrate.upgrade(pg_url)
    migrate.downgrade(pg_url, "base")
    assert _scalar(
        pg_url, "SELECT COUNT(*) FROM pg_tables WHERE schemaname = current_schema() "
        "AND tablename IN ('sessions', 'messages')"
    ) == 0
    migrate.upgrade(pg_url)
    assert migrate.check(pg_url).ok


def test_a_foreign_schema_is_refused_untouched(pg_url: str) -> None:
    engine = create_engine(pg_url, poolclass=NullPool)
    try:
        with engine.begin() as conn:
            conn.execute(text("CREATE TABLE invoices (id INTEGER PRIMARY KEY)"))
    finally:
        engine.dispose()
    with pytest.raises(NotAHermesDatabase):
        migrate.upgrade(pg_url)
    assert _scalar(pg_url, "SELECT to_regclass('sessions')") is None


def test_a_newer_schema_is_refused(pg_fresh_db: str) -> None:
    engine = create_engine(pg_fresh_db, poolclass=NullPool)
    try:
        with engine.begin() as conn:
            conn.execute(text("UPDATE schema_version SET version = 24"))
            conn.execute(text("UPDATE hermes_store_version SET version_num = '0022'"))
    finally:
        engine.dispose()
    with pytest.raises(SchemaTooNew):
        migrate.upgrade(pg_fresh_db)


def _upgrade_in_child(url: str) -> str:
    report = migrate.upgrade(url)
    return str(report.after)


def test_concurrent_upgrades_are_serialised_by_the_advisory_lock(pg_url: str) -> None:
    # Hold the lock ourselves: an upgrade started meanwhile must wait for it.
    holder = create_engine(pg_url, poolclass=NullPool)
    conn = holder.connect()
    trans = conn.begin()
    conn.execute(text("SELECT pg_advisory_xact_lock(:k)"), {"k": migrate.PG_MIGRATION_LOCK})
    context = multiprocessing.get_context("spawn")
    try:
        with context.Pool(2) as pool:
            pending = [pool.apply_async(_upgrade_in_child, (pg_url,)) for _ in range(2)]
            deadline = time.monotonic() + 30
            waiting = 0
            # an upgrade waits for the lock by polling pg_try_advisory_lock (so that it can
            # report the wait): both are connected, and neither has created anything
            while time.monotonic() < deadline and waiting < 2:
                waiting = int(
                    _scalar(
                        pg_url,
                        "SELECT COUNT(*) FROM pg_stat_activity WHERE datname = "
                        "current_database() AND application_name = 'hermes-store'",
                    )
                )
                time.sleep(0.1)
            assert waiting == 2, "both upgrades should wait on the migration lock"
            time.sleep(1.0)  # polling meanwhile, not migrating
            assert _scalar(pg_url, "SELECT to_regclass('sessions')") is None
            trans.rollback()
            results = [p.get(timeout=120) for p in pending]
    finally:
        conn.close()
        holder.dispose()
    assert results == [migrate.HEAD, migrate.HEAD]
    assert _scalar(pg_url, "SELECT COUNT(*) FROM schema_version") == 1
    assert _scalar(pg_url, "SELECT COUNT(*) FROM hermes_store_version") == 1


def test_search_queries_use_the_indexes(pg_fresh_db: str) -> None:
    db = SessionDB(url=pg_fresh_db)
    try:
        db.create_session("s1", "cli")
        for n in range(50):
            db.append_message("s1", "user", f"message {n} about 记忆断裂 and refactoring")
    finally:
        db.close()
    from hermes_store.search import postgres_fts

    engine = create_engine(pg_fresh_db, poolclass=NullPool)
    try:
        with engine.connect() as conn:
            conn.execute(text("SET enable_seqscan = off"))
            plan = "\n".join(
                r[0]
                for r in conn.execute(
                    text(
                        "EXPLAIN SELECT id FROM messages AS m WHERE m.search_vector @@ "
                        "phraseto_tsquery('simple', 'refactoring')"
                    )
                )
            )
            assert "idx_messages_search_vector" in plan, plan
            plan = "\n".join(
                r[0]
                for r in conn.execute(
                    text(
                        f"EXPLAIN SELECT id FROM messages AS m WHERE m.role <> 'tool' AND "
                        f"{postgres_fts.TRIGRAM_TEXT} ILIKE '%记忆断裂%'"
                    )
                )
            )
            assert "idx_messages_trgm" in plan, plan
            # caseless terms are matched with LIKE, which the trigram index serves too
            plan = "\n".join(
                r[0]
                for r in conn.execute(
                    text(
                        f"EXPLAIN SELECT id FROM messages AS m WHERE m.role <> 'tool' AND "
                        f"{postgres_fts.TRIGRAM_TEXT} LIKE '%记忆断裂%'"
                    )
                )
            )
            assert "idx_messages_trgm" in plan, plan
    finally:
        engine.dispose()


def test_caseless_terms() -> None:
    from hermes_store.search.postgres_fts import caseless

    assert caseless("数据库") and caseless("数据") and caseless("2024-05") and caseless("한국어")
    for cased in ("数据a", "Kyoto", "ß", "ǅ", "Ⓐ", "K", "ı", "ͅ"):
        assert not caseless(cased), cased


def test_like_scans_match_case_as_ilike(pg_fresh_db: str) -> None:
    """A term with cased letters still matches case-insensitively (ILIKE); a caseless one
    (LIKE) finds exactly the rows ILIKE finds."""
    db = SessionDB(url=pg_fresh_db)
    try:
        db.create_session("s1", "cli")
        for content in ("数据ABC here", "数据abc there", "ÄRGER数据 x", "ärger数据 y", "nothing"):
            db.append_message("s1", "user", content)
        assert len(db.search_messages("数据abc")) == 2
        assert len(db.search_messages("ärger数据")) == 2
        assert len(db.search_messages("数据")) == 4
        assert db.search_messages("数据", role_filter=["assistant"]) == []
    finally:
        db.close()


def test_contexts_of_many_hits_in_one_query(pg_fresh_db: str) -> None:
    """The context the search statement computes for each hit of its page is what
    `backend.attach_context` (the SQLite backend's) gives it (equal timestamps ordered by
    id; first and last messages of a session)."""
    from hermes_store.search.backend import attach_context

    db = SessionDB(url=pg_fresh_db)
    try:
        for sid in ("a", "b"):
            db.create_session(sid, "cli")
            for n in range(6):
                ts = 1000.0 + (n // 2)  # pairs share a timestamp
                db.append_message(sid, "user", f"{sid} needle {n}", timestamp=ts)
        hits = db.search_messages("needle", limit=50)
        assert len(hits) == 12
        engine = create_engine(pg_fresh_db, poolclass=NullPool)
        try:
            with engine.connect() as conn:
                expected = [{**hit, "context": None} for hit in hits]
                attach_context(lambda route, params: route.tuples(conn, params), expected)
            for hit, want in zip(hits, expected, strict=True):
                assert hit["context"] == want["context"], hit
        finally:
            engine.dispose()
        assert {len(h["context"]) for h in hits} == {2, 3}
    finally:
        db.close()


def _session_sets(db: SessionDB) -> dict[str, list[str]]:
    return {
        query: sorted({h["session_id"] for h in db.search_messages(query, limit=200)})
        for query in QUERIES
    }


def test_fixture_moved_to_postgresql_answers_the_same_searches(
    fixture_version: int, legacy_db: Callable[..., Path], pg_url: str
) -> None:
    path = legacy_db(fixture_version)
    migrate.upgrade(path, fts_min_pause=0)
    source = f"sqlite:///{path}"
    hcopy.copy_database(source, pg_url)
    assert all(d.ok for d in hcopy.verify(source, pg_url))
    on_sqlite, on_pg = SessionDB(path), SessionDB(url=pg_url)
    try:
        assert _session_sets(on_pg) == _session_sets(on_sqlite)
    finally:
        on_sqlite.close()
        on_pg.close()


def test_cli_runs_against_postgresql(pg_url: str, hermes_home: Path) -> None:
    assert run_cli("upgrade", "--url", pg_url).returncode == 0
    checked = run_cli("check", "--url", pg_url)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    current = run_cli("current", "--url", pg_url)
    assert migrate.HEAD in current.stdout
