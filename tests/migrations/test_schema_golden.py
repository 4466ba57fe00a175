"""A database created from nothing equals the reference schema (state_v23.db), and the
revision chain is well formed."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

import pytest

from hermes_store import migrate
from hermes_store.migration import schema_snapshot

REPO_ROOT = Path(__file__).resolve().parents[2]
VERSIONS_DIR = REPO_ROOT / "migrations" / "versions"
#: the upstream chain 0001..0023, then the project's own revisions
EXPECTED_REVISIONS = [
    *(f"{i:04d}" for i in range(1, 24)),
    *("hs0001", "hs0002", "hs0003", "hs0005", "hs0006", "hs0007", "hs0008", "hs0009", "hs0010"),
]


def _path(url: str) -> Path:
    return Path(url.removeprefix("sqlite:///"))


def test_fresh_database_matches_reference_schema(fresh_db, legacy_db, db):
    reference = legacy_db(23)
    expected = db.snapshot(reference)
    actual = db.snapshot(fresh_db)
    delta = schema_snapshot.diff(expected, actual)
    assert actual == expected, f"fresh schema differs from state_v23.db:\n{delta}"


def test_snapshot_detects_a_difference(fresh_db, legacy_db, db):
    """Guard for the golden test itself: the normalisation must not hide real changes."""
    path = _path(fresh_db)
    con = db.raw(path)
    try:
        con.execute("DROP INDEX idx_sessions_source_id")
        con.execute("CREATE INDEX idx_sessions_source_id ON sessions(id, source)")
    finally:
        con.close()
    delta = schema_snapshot.diff(db.snapshot(legacy_db(23)), db.snapshot(path))
    assert "idx_sessions_source_id" in delta


def test_fresh_database_rows(fresh_db, db):
    con = db.raw(_path(fresh_db))
    try:
        assert con.execute("SELECT version FROM schema_version").fetchall() == [(23,)]
        assert dict(con.execute("SELECT key, value FROM state_meta").fetchall()) == {
            "fts_storage_version": "1"
        }
        assert con.execute(
            "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'sqlite_sequence'"
        ).fetchone() == (1,)
        assert con.execute("PRAGMA quick_check").fetchall() == [("ok",)]
    finally:
        con.close()


def test_fresh_database_status(fresh_db):
    status = migrate.current(fresh_db)
    assert status.kind == "managed"
    assert status.alembic_revision == migrate.HEAD
    assert status.at_head
    assert status.fts is not None and status.fts.layout == "v23"
    assert status.fts.storage_version == "1"
    assert not status.fts.backfill_pending
    report = migrate.check(fresh_db)
    assert report.ok, report


def test_single_head():
    assert migrate.heads() == (migrate.HEAD,)


def test_no_model_drift(fresh_db, db):
    with db.connect(fresh_db) as conn:
        drift = migrate.schema_drift(conn)
    assert drift == []


def test_model_drift_is_detected(fresh_db, db):
    """schema_drift must be able to fail: an extra column on a model table is drift."""
    con = db.raw(_path(fresh_db))
    try:
        con.execute("ALTER TABLE sessions ADD COLUMN not_in_models TEXT")
    finally:
        con.close()
    with db.connect(fresh_db) as conn:
        drift = migrate.schema_drift(conn)
    assert any("not_in_models" in repr(d) for d in drift), drift


def _alembic_cli(*args: str) -> subprocess.CompletedProcess[str]:
    alembic = Path(sys.executable).parent / "alembic"
    if not alembic.exists():
        pytest.skip(f"no alembic executable next to {sys.executable}")
    return subprocess.run(
        [str(alembic), *args],
        cwd=REPO_ROOT,
        env=dict(os.environ),
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_alembic_check_cli_is_clean(fresh_db):
    result = _alembic_cli("-x", f"url={fresh_db}", "check")
    assert result.returncode == 0, result.stdout + result.stderr


def test_alembic_cli_upgrade_head_is_a_no_op_at_head(fresh_db, db):
    before = db.dump(_path(fresh_db))
    result = _alembic_cli("-x", f"url={fresh_db}", "upgrade", "head")
    assert result.returncode == 0, result.stdout + result.stderr
    assert db.dump(_path(fresh_db)) == before


def _revision_scripts():
    from alembic.script import ScriptDirectory

    return ScriptDirectory.from_config(migrate.make_config())


def test_revision_chain_is_linear_0001_to_head():
    script = _revision_scripts()
    revisions = {rev.revision: rev for rev in script.walk_revisions()}
    assert sorted(revisions) == EXPECTED_REVISIONS
    for index, rev_id in enumerate(EXPECTED_REVISIONS):
        expected_down = EXPECTED_REVISIONS[index - 1] if index else None
        assert revisions[rev_id].down_revision == expected_down, rev_id
        assert Path(revisions[rev_id].path).name.startswith(f"{rev_id}_")


def _revision_files() -> list[Path]:
    files = sorted([*VERSIONS_DIR.glob("0*.py"), *VERSIONS_DIR.glob("hs*.py")])
    assert len(files) == len(EXPECTED_REVISIONS), files
    return files


def _imported_modules(source: str) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
            names.update(f"{node.module}.{alias.name}" for alias in node.names)
    return names


@pytest.mark.parametrize(
    "path",
    [
        *_revision_files(),
        REPO_ROOT / "migrations" / "_ops.py",
        REPO_ROOT / "migrations" / "_dialects.py",
        REPO_ROOT / "migrations" / "_fts_layouts.py",
        REPO_ROOT / "migrations" / "_pg_search.py",
    ],
    ids=lambda p: p.name,
)
def test_revision_does_not_import_models(path):
    source = path.read_text(encoding="utf-8")
    imported = _imported_modules(source)
    offending = sorted(
        m for m in imported if m == "hermes_store.models" or m.startswith("hermes_store.models.")
    )
    assert not offending, f"{path.name} imports {offending}"
    assert "hermes_store.models" not in source
    assert "hermes_store import models" not in source


def test_revisions_do_not_load_models_transitively():
    """Importing every revision module must not pull in the ORM models indirectly."""
    code = (
        "import importlib, sys, pathlib\n"
        f"d = pathlib.Path({str(VERSIONS_DIR)!r})\n"
        "for p in sorted([*d.glob('0*.py'), *d.glob('hs*.py')]):\n"
        "    importlib.import_module('hermes_store._migrations.versions.' + p.stem)\n"
        "bad = sorted(m for m in sys.modules if m.startswith('hermes_store.models'))\n"
        "print(bad)\n"
        "sys.exit(1 if bad else 0)\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stdout + result.stderr
