"""One FTS layout detector: the runtime's (`hermes_store.search.layout.classify`) and the
frozen copy revisions 0011 and 0023 decide with (`migrations/_fts_layouts.layout`) give
the same answer on every legacy fixture and on every combination of the FTS objects
releases wrote (and the mixtures upgrades and damage leave)."""

from __future__ import annotations

import itertools
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
from sqlalchemy import Connection, create_engine, text
from sqlalchemy.pool import StaticPool

from hermes_store._migrations import _fts_layouts as fts
from hermes_store.search.layout import classify

MESSAGES = """CREATE TABLE messages (
    id INTEGER PRIMARY KEY AUTOINCREMENT, session_id TEXT, role TEXT, content TEXT,
    tool_name TEXT, tool_calls TEXT, timestamp REAL
)"""
STATE_META = "CREATE TABLE state_meta (key TEXT PRIMARY KEY, value TEXT)"


def _named(statements: tuple[str, ...], prefix: str) -> str:
    return next(s for s in statements if s.startswith(prefix))


BASES = {
    "absent": None,
    "L1 external": _named(fts.L1_BASE, "CREATE VIRTUAL TABLE messages_fts "),
    "L3 inline": _named(fts.L3, "CREATE VIRTUAL TABLE messages_fts "),
    "v23 external": _named(fts.V23, "CREATE VIRTUAL TABLE messages_fts "),
    "inline with tool_name": (
        "CREATE VIRTUAL TABLE messages_fts USING fts5(content, tool_name, tool_calls)"
    ),
    "contentless": "CREATE VIRTUAL TABLE messages_fts USING fts5(content, content='')",
    "external with spaces": (
        "CREATE VIRTUAL TABLE messages_fts USING fts5(content, content = 'messages', "
        "content_rowid = 'id')"
    ),
}
TRIGRAMS = {
    "absent": None,
    "L1 external": _named(fts.L1_TRIGRAM, "CREATE VIRTUAL TABLE messages_fts_trigram "),
    "L3 inline": _named(fts.L3, "CREATE VIRTUAL TABLE messages_fts_trigram "),
    "v23 over the view": _named(fts.V23, "CREATE VIRTUAL TABLE messages_fts_trigram "),
}
VIEWS = {"absent": None, "v23": _named(fts.V23, "CREATE VIEW ")}
DELETE_TRIGGERS = {
    "absent": None,
    "L1 'delete' command": _named(fts.L1_BASE, "CREATE TRIGGER messages_fts_delete "),
    "L3 DELETE FROM": _named(fts.L3, "CREATE TRIGGER messages_fts_delete "),
    "v23 gated": _named(fts.V23, "CREATE TRIGGER messages_fts_delete "),
}
COMBINATIONS = list(itertools.product(BASES, TRIGRAMS, VIEWS, DELETE_TRIGGERS))


@contextmanager
def _memory_database(*statements: str | None) -> Iterator[Connection]:
    engine = create_engine("sqlite://", poolclass=StaticPool)
    try:
        with engine.connect() as conn:
            for sql in (MESSAGES, STATE_META, *statements):
                if sql is not None:
                    conn.exec_driver_sql(sql)
            yield conn
    finally:
        engine.dispose()


def _both(conn: Connection) -> tuple[str, str]:
    def sql_of(name: str) -> str | None:
        value = conn.execute(
            text("SELECT sql FROM sqlite_master WHERE name = :n"), {"n": name}
        ).scalar()
        return None if value is None else str(value)

    return classify(conn), fts.layout(sql_of)


def _generated(combination: tuple[str, str, str, str]) -> tuple[str, str]:
    base, trigram, view, delete = combination
    with _memory_database(
        BASES[base], TRIGRAMS[trigram], VIEWS[view], DELETE_TRIGGERS[delete]
    ) as conn:
        return _both(conn)


@pytest.mark.parametrize("combination", COMBINATIONS, ids=" / ".join)
def test_the_frozen_copy_agrees_on_a_generated_layout(combination):
    runtime, frozen = _generated(combination)
    assert frozen == runtime, f"{combination}: runtime says {runtime}, revisions {frozen}"


def test_the_generated_layouts_reach_every_answer():
    """Guard for the test above: the combinations exercise every branch of both."""
    seen = Counter(_generated(c)[0] for c in COMBINATIONS)
    assert set(seen) == {"none", "L1", "L1+trigram", "L2", "L3", "hybrid", "v23"}, seen


@pytest.mark.parametrize(
    ("statements", "expected"),
    [
        ((BASES["L1 external"], DELETE_TRIGGERS["L1 'delete' command"]), "L1"),
        ((*fts.L1_BASE, *fts.L1_TRIGRAM), "L1+trigram"),
        ((*fts.L1_BASE, TRIGRAMS["L3 inline"]), "hybrid"),
        ((BASES["L3 inline"], DELETE_TRIGGERS["L1 'delete' command"]), "L2"),
        (fts.L3, "L3"),
        (fts.V23, "v23"),
        ((s for s in fts.V23 if not s.startswith("CREATE VIEW")), "hybrid"),
        ((BASES["inline with tool_name"], *fts.V23[4:]), "hybrid"),
        ((BASES["L3 inline"],), "hybrid"),
    ],
    ids=[
        "L1",
        "v10 bump build",
        "last v10 build on a v9 file",
        "L2",
        "L3",
        "v23",
        "v23 without its view",
        "inline v23 columns",
        "inline without triggers",
    ],
)
def test_each_release_layout_is_recognised(statements, expected):
    with _memory_database(*statements) as conn:
        assert _both(conn) == (expected, expected)


def test_the_frozen_copy_agrees_on_every_fixture(fixture_version, legacy_db, db):
    with db.connect(legacy_db(fixture_version)) as conn:
        runtime, frozen = _both(conn)
        conn.rollback()
    assert frozen == runtime
    # docs/reference/schema.md 6.1: L1 up to v9, the last v10 build's L2, L3 from v11 to v22
    expected = "L1" if fixture_version < 10 else "L2" if fixture_version == 10 else "L3"
    assert runtime == ("v23" if fixture_version == 23 else expected)
