"""The change feed records an UPDATE of a session only when it changed one of the columns
its trigger lists (revision hs0010): an UPDATE that sets the values already held records
nothing, whoever sends it (hermes-store or the original's plain SQL), on both SQLite
drivers, both journal modes and PostgreSQL; a downgrade to hs0009 brings back a change
for every UPDATE naming those columns."""

from __future__ import annotations

import importlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from helpers.databases import JOURNAL_MODES, set_journal_mode
from helpers.postgres import pg_database
from helpers.raw_sql import RawConnection

from hermes_store import migrate
from hermes_store.compat import SessionDB
from hermes_store.config import JOURNAL_ENV
from hermes_store.contract import CHANGES_TABLE, FEED_OBJECT_PREFIX

pytestmark = pytest.mark.usefixtures("sqlite_driver")

hs0002 = importlib.import_module("hermes_store._migrations.versions.hs0002_change_feed_and_turns")
SESSION_COLUMNS: tuple[str, ...] = hs0002.SESSION_COLUMNS
USAGE_COLUMNS: tuple[str, ...] = hs0002.USAGE_COLUMNS
KIND_OF = {
    **{c: "session.updated" for c in SESSION_COLUMNS},
    **{c: "usage.updated" for c in USAGE_COLUMNS},
}
LISTED = (*SESSION_COLUMNS, *USAGE_COLUMNS)
UPDATE_TRIGGERS = (FEED_OBJECT_PREFIX + "session_update", FEED_OBJECT_PREFIX + "session_usage")


@pytest.fixture(params=[*(f"sqlite-{mode}" for mode in JOURNAL_MODES), "postgresql"])
def backend_url(request: pytest.FixtureRequest) -> Iterator[str]:
    """A database at head: SQLite in each journal mode, then PostgreSQL (named as the
    suite's `backend_url`, so the other SQLite driver's PostgreSQL variant is dropped)."""
    if request.param == "postgresql":
        with pg_database(at_head=True) as url:
            yield url
        return
    url = str(request.getfixturevalue("fresh_db"))
    mode = request.param.removeprefix("sqlite-")
    request.getfixturevalue("monkeypatch").setenv(JOURNAL_ENV, mode)
    set_journal_mode(url.removeprefix("sqlite:///"), mode)
    yield url


@pytest.fixture
def con(backend_url: str) -> Iterator[RawConnection]:
    """Plain SQL in autocommit, as the original writes: every statement commits."""
    connection = RawConnection(backend_url)
    yield connection
    connection.close()


def _numeric(con: RawConnection) -> set[str]:
    if con.dialect == "sqlite":
        rows = con.execute("PRAGMA table_info(sessions)").fetchall()
        return {r["name"] for r in rows if str(r["type"]).upper() in ("INTEGER", "REAL")}
    rows = con.execute(
        "SELECT column_name FROM information_schema.columns WHERE table_name = 'sessions' "
        "AND table_schema = current_schema() AND data_type IN ('bigint', 'double precision')"
    ).fetchall()
    return {r[0] for r in rows}


def _seed(con: RawConnection, sid: str = "s") -> dict[str, Any]:
    """A session with a value in every listed column (parent: itself, the one id the
    foreign key accepts); its row."""
    numeric = _numeric(con)
    values: dict[str, Any] = {
        c: (7 if c in numeric else f"{c} of {sid}") for c in LISTED if c != "parent_session_id"
    }
    con.execute(
        f"INSERT INTO sessions (id, {', '.join(values)}) "
        f"VALUES (?, {', '.join('?' for _ in values)})",
        (sid, *values.values()),
    )
    con.execute("UPDATE sessions SET parent_session_id = id WHERE id = ?", (sid,))
    return _row(con, sid)


def _row(con: RawConnection, sid: str) -> dict[str, Any]:
    row = con.execute(f"SELECT {', '.join(LISTED)} FROM sessions WHERE id = ?", (sid,)).fetchone()
    assert row is not None
    return dict(zip(LISTED, row, strict=True))


def _position(con: RawConnection) -> int:
    return int(con.execute(f"SELECT COALESCE(MAX(position), 0) FROM {CHANGES_TABLE}").fetchone()[0])


def _since(con: RawConnection, position: int) -> list[tuple[str, str, Any]]:
    rows = con.execute(
        f"SELECT kind, session_id, message_id FROM {CHANGES_TABLE} WHERE position > ? "
        "ORDER BY position",
        (position,),
    ).fetchall()
    return [tuple(r) for r in rows]  # type: ignore[misc]


def _set(con: RawConnection, sid: str, values: dict[str, Any]) -> list[tuple[str, str, Any]]:
    """UPDATE sessions SET `values` on `sid` (committed); the changes it recorded."""
    before = _position(con)
    assignments = ", ".join(f"{c} = ?" for c in values)
    con.execute(f"UPDATE sessions SET {assignments} WHERE id = ?", (*values.values(), sid))
    return _since(con, before)


def test_setting_the_values_held_records_nothing(con: RawConnection) -> None:
    row = _seed(con)
    # every listed column of both triggers, given the value it holds
    assert _set(con, "s", row) == []
    # each column on its own, and as an expression of itself
    for column, value in row.items():
        assert _set(con, "s", {column: value}) == [], column
        before = _position(con)
        con.execute(f"UPDATE sessions SET {column} = {column} WHERE id = 's'")
        assert _since(con, before) == [], column
    # a statement over several sessions, none changed
    _seed(con, "t")
    before = _position(con)
    con.execute("UPDATE sessions SET archived = archived, input_tokens = input_tokens")
    assert _since(con, before) == []


def test_changing_one_listed_column_records_one_change_of_its_kind(con: RawConnection) -> None:
    row = _seed(con)
    _seed(con, "other")
    numeric = _numeric(con)
    for column in LISTED:
        held = _row(con, "s")
        if column == "parent_session_id":
            new: Any = "other"
        else:
            new = held[column] + 1 if column in numeric else f"{held[column]}!"
        # the others named too, unchanged: only the changed column's trigger records
        assert _set(con, "s", {**held, column: new}) == [(KIND_OF[column], "s", None)], column
    assert _row(con, "s") != row


@pytest.mark.parametrize(("column", "value"), [("title", "a title"), ("cost_status", "estimated")])
def test_null_is_a_value_of_its_own(con: RawConnection, column: str, value: str) -> None:
    con.execute("INSERT INTO sessions (id, source, started_at) VALUES ('s', 'cli', 1.0)")
    kind = [(KIND_OF[column], "s", None)]
    assert _row(con, "s")[column] is None
    assert _set(con, "s", {column: None}) == []
    assert _set(con, "s", {column: value}) == kind
    assert _set(con, "s", {column: value}) == []
    assert _set(con, "s", {column: None}) == kind
    assert _set(con, "s", {column: None}) == []


def _facade(url: str) -> SessionDB:
    if url.startswith("sqlite"):
        return SessionDB(Path(url.removeprefix("sqlite:///")))
    return SessionDB(url=url)


def test_the_facade_records_a_change_once(backend_url: str, con: RawConnection) -> None:
    """Hermes sets some of these again on every turn with the value they hold."""
    db = _facade(backend_url)
    try:
        db.create_session("s", "cli", model="m")
        calls = [
            (lambda: db.set_session_archived("s", True), "session.updated"),
            (lambda: db.set_session_pinned("s", True), "session.updated"),
            (lambda: db.update_session_model("s", "m2"), "session.updated"),
            (lambda: db.update_system_prompt("s", "prompt"), "session.updated"),
            (lambda: db.update_session_cwd("s", "/tmp"), "session.updated"),
        ]
        for call, kind in calls:
            before = _position(con)
            call()
            assert _since(con, before) == [(kind, "s", None)]
            before = _position(con)
            call()
            assert _since(con, before) == [], kind
        # a session that is open, reopened
        before = _position(con)
        db.reopen_session("s")
        assert _since(con, before) == []
        db.end_session("s", "user_exit")
        before = _position(con)
        db.reopen_session("s")
        assert _since(con, before) == [("session.updated", "s", None)]
    finally:
        db.close()


def _definitions(url: str) -> dict[str, str]:
    con = RawConnection(url)
    try:
        if con.dialect == "sqlite":
            rows = con.execute(
                "SELECT name, sql FROM sqlite_master WHERE type = 'trigger' "
                f"AND name LIKE '{FEED_OBJECT_PREFIX}%'"
            ).fetchall()
        else:
            rows = con.execute(
                "SELECT tgname, pg_get_triggerdef(oid) FROM pg_trigger "
                f"WHERE NOT tgisinternal AND tgname LIKE '{FEED_OBJECT_PREFIX}%'"
            ).fetchall()
    finally:
        con.close()
    return {str(name): str(sql) for name, sql in rows}


def _no_op_records(url: str) -> list[tuple[str, str, Any]]:
    con = RawConnection(url)
    try:
        if con.execute("SELECT 1 FROM sessions WHERE id = 'rt'").fetchone() is None:
            con.execute("INSERT INTO sessions (id, source, started_at) VALUES ('rt', 'cli', 1.0)")
        return _set(con, "rt", {"archived": 0, "input_tokens": 0})
    finally:
        con.close()


def test_the_downgrade_restores_hs0009_s_triggers(backend_url: str) -> None:
    at_head = _definitions(backend_url)
    assert _no_op_records(backend_url) == []
    migrate.downgrade(backend_url, "hs0009")
    restored = _definitions(backend_url)
    assert set(restored) == set(at_head)
    changed = {name for name in at_head if restored[name] != at_head[name]}
    assert changed == set(UPDATE_TRIGGERS)
    assert all(" WHEN " not in restored[name].upper() for name in UPDATE_TRIGGERS)
    # the previous behaviour: every UPDATE naming the columns is recorded (the two
    # triggers' order is the dialect's: by name on PostgreSQL, newest first on SQLite)
    assert sorted(_no_op_records(backend_url)) == [
        ("session.updated", "rt", None),
        ("usage.updated", "rt", None),
    ]
    migrate.upgrade(backend_url)
    assert _definitions(backend_url) == at_head
    assert _no_op_records(backend_url) == []


def test_the_downgrade_gives_what_hs0009_created(backend_url: str, tmp_path: Path) -> None:
    """hs0010 then its downgrade leaves the triggers a database made at hs0009 has."""
    if backend_url.startswith("sqlite"):
        url = f"sqlite:///{tmp_path / 'at_hs0009.db'}"
        migrate.upgrade(url, revision="hs0009", fts_min_pause=0)
        expected = _definitions(url)
    else:
        with pg_database() as url:
            migrate.upgrade(url, revision="hs0009")
            expected = _definitions(url)
    migrate.downgrade(backend_url, "hs0009")
    assert _definitions(backend_url) == expected


@pytest.mark.parametrize("version", [11, 23])
def test_an_adopted_file_gets_the_same_triggers_as_a_fresh_one(
    fresh_db: str, legacy_db: Any, version: int
) -> None:
    path = legacy_db(version)
    migrate.upgrade(f"sqlite:///{path}", fts_min_pause=0)
    adopted = _definitions(f"sqlite:///{path}")
    assert adopted == _definitions(fresh_db)
    assert all(" WHEN " in adopted[name] for name in UPDATE_TRIGGERS)
