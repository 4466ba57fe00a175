"""A database created from nothing is the v23 layout directly, whichever route creates it
(`alembic upgrade head`, `hermes-store upgrade`, opening a `SessionDB`), and `alembic
downgrade base` leaves nothing of hermes-store's behind, so `upgrade head` works again
(issue 14, part 3; docs/reference/README.md 2, rule 1)."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from helpers.postgres import with_gin_word_index
from helpers.processes import run_cli
from sqlalchemy import create_engine, text
from sqlalchemy.pool import NullPool

from hermes_store import migrate
from hermes_store.compat import SessionDB
from hermes_store.migration import schema_snapshot

REPO_ROOT = Path(__file__).resolve().parents[2]


def _alembic(url: str, *args: str) -> None:
    alembic = Path(sys.executable).parent / "alembic"
    if not alembic.exists():
        pytest.skip(f"no alembic executable next to {sys.executable}")
    result = subprocess.run(
        [str(alembic), "-x", f"url={url}", *args],
        cwd=REPO_ROOT,
        env=dict(os.environ),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def _cli_upgrade(url: str, *extra: str) -> None:
    result = run_cli("upgrade", "--url", url, *extra)
    assert result.returncode == 0, result.stdout + result.stderr


def _open_facade(url: str) -> None:
    SessionDB(url=url).close()


# Each route as a user takes it. The deferred CLI run and the facade (which defers too)
# would keep any fts_v22_trash_* table a run made: nothing tears them down afterwards.
ROUTES: dict[str, Callable[[str], None]] = {
    "alembic upgrade head": lambda url: _alembic(url, "upgrade", "head"),
    "hermes-store upgrade": _cli_upgrade,
    "hermes-store upgrade --defer-fts-backfill": lambda url: _cli_upgrade(
        url, "--defer-fts-backfill"
    ),
    "SessionDB()": _open_facade,
}


def _sqlite_tables(path: Path) -> list[str]:
    con = sqlite3.connect(str(path))
    try:
        return [
            r[0]
            for r in con.execute("SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY 1")
        ]
    finally:
        con.close()


def _rows(url: str, sql: str) -> list[tuple[object, ...]]:
    engine = create_engine(url, poolclass=NullPool)
    try:
        with engine.connect() as conn:
            return [tuple(r) for r in conn.execute(text(sql))]
    finally:
        engine.dispose()


def _assert_is_v23(url: str) -> None:
    assert _rows(url, "SELECT version FROM schema_version") == [(23,)]
    assert _rows(url, "SELECT key, value FROM state_meta") == [("fts_storage_version", "1")]
    assert _rows(url, f"SELECT version_num FROM {migrate.VERSION_TABLE}") == [(migrate.HEAD,)]
    facade = SessionDB(url=url)
    try:
        assert facade.fts_optimize_available() is False
    finally:
        facade.close()
    report = migrate.check(url)
    assert report.ok, report


@pytest.mark.parametrize("route", ROUTES, ids=list(ROUTES))
def test_fresh_sqlite_database_is_the_v23_layout(route, tmp_path, legacy_db, db):
    path = tmp_path / "state.db"
    url = db.url_for(path)
    ROUTES[route](url)
    assert [t for t in _sqlite_tables(path) if t.startswith("fts_v22_trash_")] == []
    expected, actual = db.snapshot(legacy_db(23)), db.snapshot(path)
    assert actual == expected, schema_snapshot.diff(expected, actual)
    _assert_is_v23(url)


def test_alembic_downgrade_base_leaves_nothing_and_upgrade_works_again(tmp_path, legacy_db, db):
    path = tmp_path / "state.db"
    url = db.url_for(path)
    _alembic(url, "upgrade", "head")
    _alembic(url, "downgrade", "base")
    # sqlite_sequence is SQLite's own (it cannot be dropped) and empty
    assert _sqlite_tables(path) == ["sqlite_sequence"]
    assert _rows(url, "SELECT COUNT(*) FROM sqlite_sequence") == [(0,)]
    assert migrate.current(url).kind == "empty"
    _alembic(url, "upgrade", "head")
    expected, actual = db.snapshot(legacy_db(23)), db.snapshot(path)
    assert actual == expected, schema_snapshot.diff(expected, actual)
    _assert_is_v23(url)


def test_downgrade_base_drops_a_demoted_legacy_index(tmp_path, legacy_db, db):
    """The fts_v22_trash_* tables an adopted file's conversion leaves (until the teardown)
    are hermes-store's too: base holds none of them."""
    path = legacy_db(22, "state.db")
    url = db.url_for(path)
    migrate.upgrade(url, defer_fts_backfill=True)
    assert [t for t in _sqlite_tables(path) if t.startswith("fts_v22_trash_")], "no trash made"
    con = db.raw(path, foreign_keys=False)
    try:
        for table in ("session_model_usage", "messages", "sessions", "state_meta"):
            con.execute(f'DELETE FROM "{table}"')  # noqa: S608 (fixed names)
    finally:
        con.close()
    migrate.downgrade(url, "base")
    assert [t for t in _sqlite_tables(path) if not t.startswith("sqlite_")] == []
    migrate.upgrade(url, fts_min_pause=0)
    expected, actual = db.snapshot(legacy_db(23)), db.snapshot(path)
    assert actual == expected, schema_snapshot.diff(expected, actual)


def _pg_objects(url: str) -> list[tuple[object, ...]]:
    """Everything of the database's own schema: relations and functions (the members of
    an extension, such as pg_trgm's, excepted)."""
    return _rows(
        url,
        "SELECT 'relation', relname FROM pg_catalog.pg_class "
        "WHERE relnamespace = current_schema()::regnamespace "
        "UNION ALL SELECT 'function', p.proname FROM pg_catalog.pg_proc p "
        "WHERE p.pronamespace = current_schema()::regnamespace AND NOT EXISTS ("
        "SELECT 1 FROM pg_catalog.pg_depend d WHERE d.classid = 'pg_proc'::regclass "
        "AND d.objid = p.oid AND d.deptype = 'e') ORDER BY 1, 2",
    )


def _pg_schema(url: str) -> str:
    engine = create_engine(url, poolclass=NullPool)
    try:
        with engine.connect() as conn:
            return with_gin_word_index(schema_snapshot.dump_text(conn))
    finally:
        engine.dispose()


def _committed_pg_schema() -> str:
    committed = Path(__file__).resolve().parent / "schema" / "postgresql_head.sql"
    return committed.read_text(encoding="utf-8")


@pytest.mark.parametrize("route", ROUTES, ids=list(ROUTES))
def test_fresh_postgresql_database_is_the_head_schema(route, pg_url):
    ROUTES[route](pg_url)
    assert _pg_schema(pg_url) == _committed_pg_schema()
    _assert_is_v23(pg_url)


def test_postgresql_downgrade_base_leaves_nothing_and_upgrade_works_again(pg_url):
    _alembic(pg_url, "upgrade", "head")
    _alembic(pg_url, "downgrade", "base")
    assert _pg_objects(pg_url) == []
    assert migrate.current(pg_url).kind == "empty"
    _alembic(pg_url, "upgrade", "head")
    assert _pg_schema(pg_url) == _committed_pg_schema()
    _assert_is_v23(pg_url)
