"""The head schema of each dialect, committed as text (tests/migrations/schema/<dialect>_head.sql)
and compared with what the migrations create now, so that every change of the schema is
seen, and reviewed, as a diff of those files."""

from __future__ import annotations

import difflib
import os
from pathlib import Path

import pytest
from helpers.postgres import with_gin_word_index

from hermes_store.migration import schema_snapshot

SCHEMA_DIR = Path(__file__).resolve().parent / "schema"
REFRESH_ENV = "HERMES_STORE_REFRESH_SCHEMA_DUMPS"
REFRESH = (
    f"{REFRESH_ENV}=1 .venv/bin/python -m pytest tests/migrations/test_schema_dump.py "
    "(rewrites tests/migrations/schema/*_head.sql from a fresh database;"
    " review the diff, commit it)"
)


def _dump(url: str, db) -> str:
    with db.connect(url) as conn:
        text = schema_snapshot.dump_text(conn)
        conn.rollback()
    return text


def _compare(dialect: str, actual: str) -> None:
    path = SCHEMA_DIR / f"{dialect}_head.sql"
    if os.environ.get(REFRESH_ENV):
        path.write_text(actual, encoding="utf-8")
        return
    expected = path.read_text(encoding="utf-8") if path.exists() else ""
    if actual == expected:
        return
    delta = "\n".join(
        difflib.unified_diff(
            expected.splitlines(),
            actual.splitlines(),
            f"tests/migrations/schema/{path.name} (committed)",
            "a fresh database now",
            lineterm="",
        )
    )
    pytest.fail(
        f"the {dialect} head schema differs from tests/migrations/schema/{path.name}.\n"
        f"If the change is intended, refresh the dump with:\n    {REFRESH}\n{delta}",
        pytrace=False,
    )


@pytest.mark.parametrize("dialect", ["sqlite", "postgresql"])
def test_head_schema_matches_the_committed_dump(dialect, request, db):
    url = request.getfixturevalue("fresh_db" if dialect == "sqlite" else "pg_fresh_db")
    dump = _dump(url, db)
    _compare(dialect, with_gin_word_index(dump) if dialect == "postgresql" else dump)


def test_the_sqlite_dump_is_the_reference_schema(fresh_db, legacy_db, db):
    """state_v23.db is the authority for a fresh file (docs/reference/README.md 2): its
    dump and the committed one are the same text."""
    reference = _dump(db.url_for(legacy_db(23)), db)
    assert reference == _dump(fresh_db, db)
    assert reference == (SCHEMA_DIR / "sqlite_head.sql").read_text(encoding="utf-8")


@pytest.mark.parametrize("dialect", ["sqlite", "postgresql"])
def test_the_dump_shows_a_change(dialect, request, db):
    """Guard: an added column, a changed default and a dropped index all show."""
    url = request.getfixturevalue("fresh_db" if dialect == "sqlite" else "pg_fresh_db")
    before = _dump(url, db)
    with db.connect(url) as conn:
        conn.exec_driver_sql("ALTER TABLE sessions ADD COLUMN not_in_models TEXT")
        conn.exec_driver_sql("DROP INDEX idx_sessions_source")
        conn.commit()
    after = _dump(url, db)
    removed = {line.strip() for line in before.splitlines()} - {
        line.strip() for line in after.splitlines()
    }
    assert "not_in_models TEXT" in after.replace("text", "TEXT")
    assert any("idx_sessions_source " in line for line in removed), removed
