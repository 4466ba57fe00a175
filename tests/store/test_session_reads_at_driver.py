"""The facade's session, title and lineage point reads, one statement each.

Each read below is one prepared statement through `Store.read_one` (a lineage walk is
one recursive CTE): on SQLite it reaches the driver alone, with no BEGIN, no ROLLBACK
and no SQLAlchemy transaction. Their answers equal those of the walks and reads they
replace (lineage.py's functions of a Connection, run here inside `Store.read`), on
lineage graphs drawn at random with every kind of link the rules tell apart (compression
continuations, branches, delegate runs, tool runs, automatic closes, parent cycles), on
both SQLite drivers and journal modes and on PostgreSQL.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from helpers.statements import counted_begins, sent
from sqlalchemy import Connection, text, update

from hermes_store.config import JOURNAL_ENV
from hermes_store.repositories import lineage
from hermes_store.repositories._tables import SESSIONS, S
from hermes_store.repositories.sessions import SessionRepository, full_row
from hermes_store.store import Store

END_REASONS = [None, "compression", "compression", "compression", "branched", "agent_close"]
CONFIGS = [
    None,
    None,
    "{}",
    '{"_branched_from": "x"}',
    '{"_delegate_from": "s03"}',
    '{"_delegate_from": "s11", "k": 1}',
    '{"_delegate_from": null}',
    "not json",
    '{"_delegate_from": "elsewhere"}',
]


def _put(store: Store, sid: str, **values: Any) -> None:
    statement = update(SESSIONS).where(S.id == sid).values(**values)
    store.write(lambda conn: conn.execute(statement))


def _graph(store: Store, seed: int, count: int = 36) -> list[str]:
    """`count` sessions linked at random (parents earlier and later, so cycles too),
    with random end reasons, markers, sources, start times (ties among them) and
    messages; then a two-session and a three-session compression cycle and a session
    that is its own parent. Returns the ids, plus ids that do not exist."""
    rng = random.Random(seed)
    ids = [f"s{n:02d}" for n in range(count)]
    sessions = SessionRepository(store)
    for sid in ids:
        sessions.create_session(sid, rng.choice(["cli", "cli", "tool", "telegram"]))
    for n, sid in enumerate(ids):
        parent = rng.choice(ids) if n and rng.random() < 0.8 else None
        if parent is not None and rng.random() < 0.7:
            parent = ids[rng.randrange(max(1, n - 4), n) if n > 1 else 0]
        _put(
            store,
            sid,
            parent_session_id=parent,
            started_at=1000.0 + rng.randrange(12),
            model_config=rng.choice(CONFIGS),
        )
        reason = rng.choice(END_REASONS)
        if reason is not None:
            _put(store, sid, ended_at=2000.0 + n, end_reason=reason)
        if rng.random() < 0.5:
            for m in range(rng.randrange(1, 3)):
                stamp = 1500.0 + rng.randrange(30)
                store.write(
                    lambda conn, sid=sid, m=m, stamp=stamp: conn.execute(
                        text(
                            "INSERT INTO messages (session_id, role, content, timestamp, active) "
                            "VALUES (:sid, 'user', :c, :ts, 1)"
                        ),
                        {"sid": sid, "c": f"m{m}", "ts": stamp},
                    )
                )
    for cycle in (["c0", "c1"], ["d0", "d1", "d2"], ["self"]):
        for sid in cycle:
            sessions.create_session(sid, "cli")
        for n, sid in enumerate(cycle):
            _put(store, sid, parent_session_id=cycle[n - 1], ended_at=3000.0 + n)
            _put(store, sid, end_reason="compression")
        ids.extend(cycle)
    # a continuation of a cycle member that is still open, and one with messages
    sessions.create_session("c2", "cli", parent_session_id="c1")
    sessions.create_session("d3", "cli", parent_session_id="d2")
    store.write(
        lambda conn: conn.execute(
            text(
                "INSERT INTO messages (session_id, role, content, timestamp, active) "
                "VALUES ('d3', 'assistant', 'x', 1.0, 1)"
            )
        )
    )
    ids.extend(["c2", "d3", "missing", ""])
    return ids


def _delete_targets(conn: Connection, sid: str) -> list[str]:
    if not lineage.session_exists(conn, sid):
        return []
    return [sid, *sorted(lineage.delegate_descendants(conn, sid))]


def _live_child(conn: Connection, sid: str) -> dict[str, Any] | None:
    child = lineage.live_continuation(conn, sid)
    return None if child is None else full_row(conn, child)


def _root(conn: Connection, sid: str) -> str:
    chain = lineage.ancestor_ids(conn, sid)
    return chain[-1] if chain else sid


#: Each read, through the repository and through the walks it replaces.
READS: dict[
    str, tuple[Callable[[SessionRepository, str], Any], Callable[[Connection, str], Any]]
] = {
    "get_compression_tip": (
        lambda r, sid: r.get_compression_tip(sid),
        lineage.compression_tip,
    ),
    "ancestors": (lambda r, sid: r.ancestors(sid), lineage.ancestor_ids),
    "get_conversation_root": (lambda r, sid: r.get_conversation_root(sid), _root),
    "resolve_resume_session_id": (
        lambda r, sid: r.resolve_resume_session_id(sid),
        lambda conn, sid: lineage.resume_target(conn, sid) if sid else sid,
    ),
    "find_live_compression_child": (
        lambda r, sid: r.find_live_compression_child(sid),
        _live_child,
    ),
    "get_session_delete_targets": (
        lambda r, sid: r.get_session_delete_targets(sid),
        _delete_targets,
    ),
}


def _typed(value: Any) -> Any:
    """A value with its types spelt out, so that 1 == 1.0 == True cannot pass for equal."""
    if isinstance(value, dict):
        return {k: _typed(v) for k, v in value.items()}, list(value)
    if isinstance(value, list):
        return [_typed(v) for v in value]
    return type(value).__name__, value


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_answers_equal_the_walks_they_replace(store: Store, seed: int) -> None:
    ids = _graph(store, seed)
    repo = SessionRepository(store)
    for name, (new, old) in READS.items():
        for sid in ids:
            expected = store.read(lambda conn, old=old, sid=sid: old(conn, sid))
            assert _typed(new(repo, sid)) == _typed(expected), (name, sid)


def test_known_answers_across_cycles(store: Store) -> None:
    _graph(store, 0, count=2)
    repo = SessionRepository(store)
    # c0 <-> c1, both ended by compression, c2 an open continuation of c1
    assert repo.get_compression_tip("c0") == "c2"
    assert repo.get_compression_tip("c1") == "c0"  # c0, compressed, ranks above c2
    assert repo.ancestors("c0") == ["c1"]
    assert repo.get_conversation_root("c1") == "c0"
    assert repo.get_conversation_root("self") == "self"
    assert repo.ancestors("d3") == ["d2", "d1", "d0"]
    assert repo.resolve_resume_session_id("d0") == "d3"
    assert repo.resolve_resume_session_id("c0") == "c0"  # no messages on the way
    live = repo.find_live_compression_child("c1")
    assert live is not None and live["id"] == "c2" and "system_prompt" in live
    assert repo.find_live_compression_child("c2") is None
    assert repo.find_live_compression_child("missing") is None
    assert repo.get_session_delete_targets("c0") == ["c0"]
    assert repo.get_session_delete_targets("missing") == []


# --------------------------------------------------------------------------- mechanism


@pytest.fixture
def kept_store(journal_db: str, journal: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[Store]:
    monkeypatch.setenv(JOURNAL_ENV, journal)  # a fixed SQLite would switch DELETE to WAL
    with Store(journal_db) as opened:
        yield opened


def _linked(store: Store) -> None:
    """a -> b -> c compressed, d a delegate run of a, e a child of c (which is open, so
    the tip is c and the resume walk goes on to e), messages in b and e."""
    sessions = SessionRepository(store)
    sessions.create_session("a", "cli")
    sessions.create_session("b", "cli", parent_session_id="a")
    sessions.create_session("c", "cli", parent_session_id="b")
    sessions.create_session("d", "cli", parent_session_id="a")
    _put(store, "d", model_config=json.dumps({"_delegate_from": "a"}))
    sessions.create_session("e", "cli", parent_session_id="c")
    store.messages.append_message("b", "user", "hi")
    store.messages.append_message("e", "user", "hi")
    sessions.end_session("a", "compression")
    sessions.end_session("b", "compression")


#: Each read made one statement, on arguments that walk (and one that finds nothing).
ONE_STATEMENT: dict[str, Callable[[SessionRepository], Any]] = {
    "get_compression_tip": lambda r: r.get_compression_tip("a"),
    "get_compression_tip (missing)": lambda r: r.get_compression_tip("missing"),
    "get_conversation_root": lambda r: r.get_conversation_root("c"),
    "ancestors": lambda r: r.ancestors("c"),
    "resolve_resume_session_id": lambda r: r.resolve_resume_session_id("a"),
    "find_live_compression_child (none)": lambda r: r.find_live_compression_child("c"),
    "get_session_delete_targets": lambda r: r.get_session_delete_targets("a"),
    "get_session_delete_targets (missing)": lambda r: r.get_session_delete_targets("x"),
}


@pytest.mark.usefixtures("sqlite_driver")
def test_each_read_is_one_statement_without_a_transaction(
    kept_store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    _linked(kept_store)
    repo = SessionRepository(kept_store)
    answers = {name: read(repo) for name, read in ONE_STATEMENT.items()}  # readers kept
    assert answers["get_compression_tip"] == "c"
    assert answers["get_conversation_root"] == "a"
    assert answers["resolve_resume_session_id"] == "e"
    assert answers["get_session_delete_targets"] == ["a", "d"]
    begins = counted_begins(monkeypatch, kept_store)
    for name, read in ONE_STATEMENT.items():
        with sent(kept_store, transactions=True) as statements:
            assert read(repo) == answers[name]
        assert len(statements) == 1, (name, statements)
        assert statements[0].split()[0] in ("SELECT", "WITH"), (name, statements)
    # a live continuation found: its id, then its whole row, each read alone
    with sent(kept_store, transactions=True) as statements:
        live = repo.find_live_compression_child("b")
    assert live is not None and live["id"] == "c"
    assert len(statements) == 2 and all(s.startswith("SELECT") for s in statements), statements
    assert begins == []


@pytest.mark.usefixtures("sqlite_driver")
def test_a_cycle_is_walked_as_before(kept_store: Store) -> None:
    """Where a naive walk comes back to an id, the walk that skips what it has seen runs
    (in a read of its own): the step from c1 ranks c0, already seen, first."""
    _graph(kept_store, 0, count=2)
    repo = SessionRepository(kept_store)
    with sent(kept_store) as statements:
        assert repo.get_compression_tip("c0") == "c2"
    assert len(statements) > 1, statements
    with sent(kept_store) as statements:
        assert repo.get_compression_tip("d3") == "d3"
    assert len(statements) == 1, statements


# --------------------------------------------------------------------------- counts, titles


def _titled(store: Store) -> list[dict[str, Any]]:
    """Titled sessions, numbered lineages among them (LIKE wildcards in one base), start
    times with ties, a source '' (counted as cli); every row back."""
    sessions = SessionRepository(store)
    titles = {
        "t1": "Work",
        "t2": "Work #2",
        "t3": "Work #10",
        "t4": "Work #x",
        "o": "Other",
        "p1": "50% done_",
        "p2": "50% done_ #3",
        "p3": "50X done_ #7",
        "n": None,
    }
    for n, (sid, title) in enumerate(titles.items()):
        sessions.create_session(sid, ["cli", "telegram", "cron"][n % 3])
        store.titles.set_session_title(sid, title)
        _put(store, sid, started_at=1000.0 + n % 4)
    _put(store, "o", source="")
    _put(store, "n", archived=1)
    store.messages.append_message("t1", "assistant", "first")
    store.messages.append_message("t1", "assistant", "second")
    rows = [store.sessions.get_session(sid) for sid in titles]
    return [row for row in rows if row is not None]


def _resolved(rows: list[dict[str, Any]], title: str) -> str | None:
    """resolve_session_by_title worked out from the rows."""
    numbered = [r for r in rows if (r["title"] or "").startswith(title + " #")]
    if numbered:
        return str(max(numbered, key=lambda r: (r["started_at"], r["id"]))["id"])
    exact = [r for r in rows if r["title"] == title]
    return str(exact[0]["id"]) if exact else None


TITLE_ARGS = ["Work", "Other", "50% done_", "50X done_", "Nothing", "Work #2"]


def test_count_and_title_answers(store: Store) -> None:
    rows = _titled(store)
    repo = SessionRepository(store)
    titles = store.titles
    for title in TITLE_ARGS:
        assert titles.resolve_session_by_title(title) == _resolved(rows, title), title
    assert titles.resolve_session_by_title("") is None
    assert titles.get_next_title_in_lineage("Work") == "Work #11"
    assert titles.get_next_title_in_lineage("Work #3") == "Work #11"
    assert titles.get_next_title_in_lineage("50% done_") == "50% done_ #4"
    assert titles.get_next_title_in_lineage("Nothing") == "Nothing"
    assert repo.session_count() == 8
    assert repo.session_count(include_archived=True) == 9
    assert repo.session_count(source="cron", include_archived=True) == 3
    counts = repo.session_count_by_source(include_archived=True)
    assert list(counts.items()) == [("cli", 4), ("cron", 3), ("telegram", 2)]
    assert repo.get_first_assistant_text("t1") == "first"
    assert repo.get_first_assistant_text("o") == ""


COUNT_AND_TITLE_READS: dict[str, Callable[[Store], Any]] = {
    "session_count": lambda s: s.sessions.session_count(),
    "session_count (filtered)": lambda s: s.sessions.session_count(
        sources=["cli", "cron"], exclude_children=True
    ),
    "session_count_by_source": lambda s: s.sessions.session_count_by_source(),
    "get_first_assistant_text": lambda s: s.sessions.get_first_assistant_text("t1"),
    "resolve_session_by_title": lambda s: s.titles.resolve_session_by_title("Work"),
    "resolve_session_by_title (exact)": lambda s: s.titles.resolve_session_by_title("Other"),
    "get_next_title_in_lineage": lambda s: s.titles.get_next_title_in_lineage("Work"),
}


@pytest.mark.usefixtures("sqlite_driver")
def test_count_and_title_reads_are_one_statement_without_a_transaction(
    kept_store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    _titled(kept_store)
    answers = {name: read(kept_store) for name, read in COUNT_AND_TITLE_READS.items()}
    begins = counted_begins(monkeypatch, kept_store)
    for name, read in COUNT_AND_TITLE_READS.items():
        with sent(kept_store, transactions=True) as statements:
            assert read(kept_store) == answers[name]
        assert len(statements) == 1, (name, statements)
        assert statements[0].startswith("SELECT"), (name, statements)
    assert begins == []
