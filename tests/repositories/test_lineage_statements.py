"""The lineage walks (resume target, compression tip and chain, live continuation), the
session counts, the delete targets and the FTS state read with statements built once: a
repeat call with other arguments builds and compiles nothing, a walk sends one statement
per hop (the parent's end reason rides in the step), and the walks still skip the ids
they have seen, in the order the exclusion in SQL gave. Real databases (SQLite and
PostgreSQL; the FTS state on SQLite), no mocks; SQLAlchemy's constructors are only
counted."""

from __future__ import annotations

import re
from typing import Any

import pytest
from helpers.statements import built, sent
from sqlalchemy import event, update

from hermes_store.repositories.housekeeping import HousekeepingRepository
from hermes_store.repositories.messages import MessageRepository
from hermes_store.repositories.sessions import SESSIONS, SessionRepository
from hermes_store.search.layout import fts_state
from hermes_store.store import Store


def _set(store: Store, sid: str, **values: Any) -> None:
    statement = update(SESSIONS).where(SESSIONS.c.id == sid).values(**values)
    store.write(lambda conn: conn.execute(statement))


def _chain(repo: SessionRepository, *chain: str, written: tuple[str, ...] = ()) -> None:
    """chain[0] -> chain[1] -> ...: every segment but the last ended by compression, a
    message in each of `written`."""
    for i, sid in enumerate(chain):
        repo.create_session(sid, "cli", parent_session_id=chain[i - 1] if i else None)
        _set(repo.store, sid, started_at=1000.0 + i)
    for sid in written:
        MessageRepository(repo.store).append_message(sid, "user", "hi")
    for sid in chain[:-1]:
        repo.end_session(sid, "compression")


@pytest.fixture
def repo(store: Store) -> SessionRepository:
    return SessionRepository(store)


def test_resume_walk_builds_and_compiles_once(
    repo: SessionRepository, monkeypatch: pytest.MonkeyPatch
) -> None:
    _chain(repo, "r", "m", "t", written=("t",))
    repo.create_session("plain", "cli")
    first = (
        repo.resolve_resume_session_id("r"),
        repo.resolve_resume_session_id("plain"),
        repo.get_compression_tip("r"),
        repo.get_compression_lineage("m"),
        repo.find_live_compression_child("m"),
        repo.get_session_delete_targets("plain"),
        repo.session_count(),
        repo.session_count(source="cli", exclude_children=True),
        repo.session_count_by_source(),
    )
    with built(monkeypatch) as names:
        again = (
            repo.resolve_resume_session_id("r"),
            repo.resolve_resume_session_id("plain"),
            repo.get_compression_tip("r"),
            repo.get_compression_lineage("m"),
            repo.find_live_compression_child("m"),
            repo.get_session_delete_targets("plain"),
            repo.session_count(),
            repo.session_count(source="cli", exclude_children=True),
            repo.session_count_by_source(),
        )
    assert names == []
    assert again == first
    assert first[:4] == ("t", "plain", "t", ["r", "m", "t"])
    assert first[4] is not None and first[4]["id"] == "t"
    assert first[5:] == (["plain"], 4, 2, {"cli": 4})


def test_a_compression_walk_sends_one_statement_per_hop(repo: SessionRepository) -> None:
    """The repository's tip and resume walks are one recursive statement each however
    long the chain (tests/store/test_session_reads_at_driver.py); the chain walk, which
    titles and exports share, sends one statement per hop."""
    _chain(repo, "a", "b", "c", "d")
    with sent(repo.store) as statements:
        assert repo.get_compression_tip("a") == "d"
    assert len(statements) == 1, statements
    with sent(repo.store) as statements:
        assert repo.get_compression_lineage("a") == ["a", "b", "c", "d"]
    # the existence check, the walk up from a (its parent lookup), then four steps down
    assert len(statements) == 6, statements
    with sent(repo.store) as statements:
        assert repo.resolve_resume_session_id("plain-missing") == "plain-missing"
    assert len(statements) == 1, statements


def test_the_walks_write_their_limit_into_the_statement(store: Store) -> None:
    """A bound LIMIT costs SQLite more than the whole of such a small read."""
    repo = SessionRepository(store)
    _chain(repo, "a", "b")
    with sent(store) as statements:
        repo.resolve_resume_session_id("a")
        repo.get_compression_lineage("a")
        repo.find_live_compression_child("a")
    limited = [s for s in statements if " LIMIT " in s]
    assert len(limited) >= 3, statements
    assert not [s for s in limited if re.search(r" LIMIT (\?|%\()", s)], limited


def test_a_walk_skips_seen_ids_ranked_first(repo: SessionRepository) -> None:
    """s1's children are s0 (ranked first: compressed) and s2 (open); s0 is where the walk
    came from (a parent cycle), so the step takes s2, as `NOT IN (seen)` did."""
    repo.create_session("s0", "cli")
    repo.create_session("s1", "cli", parent_session_id="s0")
    repo.create_session("s2", "cli", parent_session_id="s1")
    _set(repo.store, "s0", parent_session_id="s1")
    repo.end_session("s0", "compression")
    repo.end_session("s1", "compression")
    assert repo.get_compression_tip("s0") == "s2"
    # the chain from the root (s0, up through the cycle) skips s0 among s1's children too
    assert repo.get_compression_lineage("s2") == ["s0", "s1", "s2"]
    assert repo.resolve_resume_session_id("s0") == "s0"  # no messages anywhere


def test_fts_state_reads_only_the_objects_it_describes(sqlite_store: Store) -> None:
    sqlite_store.write(
        lambda conn: (
            conn.exec_driver_sql("CREATE TABLE fts_v22_trash_b (x)"),
            conn.exec_driver_sql("CREATE TABLE fts_v22_trash_a (x)"),
            conn.exec_driver_sql("CREATE TABLE FTS_V22_TRASH_UPPER (x)"),
            conn.exec_driver_sql("CREATE TABLE fts_v22Xtrash_wild (x)"),
        )
    )
    state = sqlite_store.read(fts_state)
    assert state.layout == "v23" and state.triggers == 6
    assert state.trash_tables == ("fts_v22_trash_a", "fts_v22_trash_b")
    catalog = sqlite_store.read(
        lambda conn: conn.exec_driver_sql("SELECT count(*) FROM sqlite_master").scalar()
    )
    reads: list[tuple[str, Any]] = []

    def record(conn: Any, cursor: Any, statement: str, parameters: Any, *rest: Any) -> None:
        if not statement.startswith("BEGIN"):
            reads.append((statement, parameters))

    event.listen(sqlite_store.engine, "before_cursor_execute", record)
    try:
        assert HousekeepingRepository(sqlite_store).fts_optimize_available() is True
    finally:
        event.remove(sqlite_store.engine, "before_cursor_execute", record)
    assert len(reads) == 2, reads
    rows = sqlite_store.read(lambda conn: conn.exec_driver_sql(*reads[0]).all())
    # the two FTS tables, the view, the six triggers, state_meta, the two trash tables
    assert len(rows) == 12 < int(catalog)
