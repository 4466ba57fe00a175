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
import shutil
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from helpers.statements import Traced, counted_begins, sent
from sqlalchemy import Connection, event, text, update

from hermes_store.config import JOURNAL_ENV
from hermes_store.errors import TitleInUse
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
    return [sid, *sorted(lineage.with_delegates(conn, [sid]) - {sid})]


def _live_child(conn: Connection, sid: str) -> dict[str, Any] | None:
    ids = lineage.LIVE_CONTINUATIONS.rows(conn, {"parent": sid})
    return full_row(conn, str(ids[0][0])) if len(ids) == 1 else None


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


# --------------------------------------------------------------------------- writes


#: Each write, with what it returns, on session `sid` (which may not exist).
SESSION_WRITES: dict[str, Callable[[Store, str], Any]] = {
    "update_system_prompt": lambda s, sid: s.sessions.update_system_prompt(sid, f"p {sid}"),
    "update_session_meta": lambda s, sid: s.sessions.update_session_meta(sid, '{"a": 1}'),
    "update_session_meta (model)": lambda s, sid: s.sessions.update_session_meta(
        sid, '{"a": 2}', "m2"
    ),
    "update_session_cwd": lambda s, sid: s.sessions.update_session_cwd(sid, "/w", " br ", " "),
    "update_session_cwd (root)": lambda s, sid: s.sessions.update_session_cwd(
        sid, "/w/x", None, "/w"
    ),
    "set_compression_fallback_streak": lambda s, sid: s.sessions.set_compression_fallback_streak(
        sid, 3
    ),
    "set_compression_ineffective_count": lambda s, sid: (
        s.sessions.set_compression_ineffective_count(sid, -2)
    ),
    "set_expiry_finalized": lambda s, sid: s.sessions.set_expiry_finalized(sid),
    "update_session_billing_route": lambda s, sid: s.sessions.update_session_billing_route(
        sid, provider="p", base_url="u", billing_mode="metered"
    ),
    "update_session_billing_route (mode kept)": lambda s, sid: (
        s.sessions.update_session_billing_route(sid, provider="q", base_url=None)
    ),
    "record_compression_failure_cooldown": lambda s, sid: (
        s.sessions.record_compression_failure_cooldown(sid, 4.0e9, "failed")
    ),
    "clear_compression_failure_cooldown": lambda s, sid: (
        s.sessions.clear_compression_failure_cooldown(sid)
    ),
    "ensure_session": lambda s, sid: s.sessions.ensure_session(sid, "cli", "m3"),
    "create_session": lambda s, sid: s.sessions.create_session(f"new {sid}", "cli", cwd="/n"),
    "set_auto_title_if_empty": lambda s, sid: s.titles.set_auto_title_if_empty(sid, f"A {sid}"),
    "set_auto_title_if_empty (again)": lambda s, sid: s.titles.set_auto_title_if_empty(sid, "B"),
    "set_auto_title_if_empty (held)": lambda s, sid: s.titles.set_auto_title_if_empty(sid, "Taken"),
    "set_session_title": lambda s, sid: s.titles.set_session_title(sid, f"T {sid}"),
    "set_session_title (same)": lambda s, sid: s.titles.set_session_title(sid, f"T {sid}"),
    "set_session_title (held)": lambda s, sid: s.titles.set_session_title(sid, "Taken"),
    "set_session_title (ancestor's)": lambda s, sid: s.titles.set_session_title(sid, "Root"),
    "set_session_title (cleared)": lambda s, sid: s.titles.set_session_title(sid, ""),
}


def _written(store: Store) -> None:
    """w1 (untitled), w2 (titled), a compression chain root -> w3, and 'Taken' held."""
    sessions = store.sessions
    sessions.create_session("w1", "cli")
    sessions.create_session("w2", "cli")
    store.titles.set_session_title("w2", "Second")
    sessions.create_session("root", "cli")
    store.titles.set_session_title("root", "Root")
    sessions.create_session("w3", "cli", parent_session_id="root")
    sessions.end_session("root", "compression")
    sessions.create_session("holder", "cli")
    store.titles.set_session_title("holder", "Taken")


def _apply_every_write(store: Store) -> list[Any]:
    answers: list[Any] = []
    for sid in ("w1", "w2", "w3", "missing"):
        for write in SESSION_WRITES.values():
            try:
                answers.append(write(store, sid))
            except Exception as exc:  # noqa: BLE001 (the error is what is compared)
                answers.append(type(exc).__name__)
    return answers


def _rows(store: Store) -> list[dict[str, Any]]:
    """Every session's row, its times (which differ between two stores) as whether set."""
    with store.read() as conn:
        rows = [
            dict(r) for r in conn.execute(text("SELECT * FROM sessions ORDER BY id")).mappings()
        ]
    return [{**row, "started_at": None, "ended_at": row["ended_at"] is not None} for row in rows]


def _feed(store: Store) -> list[tuple[str, str]]:
    with store.read() as conn:
        rows = conn.execute(
            text("SELECT kind, session_id FROM hermes_store_changes ORDER BY position")
        ).all()
    return [(str(kind), str(sid)) for kind, sid in rows]


@pytest.mark.usefixtures("sqlite_driver")
def test_the_writes_answer_and_change_as_through_a_connection(
    journal_db: str, journal: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same writes on two copies of one file, one store taking the Connection path
    (a statement listener): the same answers, errors, rows and change feed."""
    monkeypatch.setenv(JOURNAL_ENV, journal)
    source = journal_db.removeprefix("sqlite:///")
    other = source.replace("state.db", "other.db")
    with Store(journal_db) as store:
        _written(store)
        store.checkpoint("TRUNCATE")
        store.dispose()
        shutil.copy2(source, other)
    with Store(journal_db) as direct, Store(f"sqlite:///{other}") as through:
        event.listen(through.engine, "before_cursor_execute", lambda *_args: None)
        fed = len(_feed(direct))
        answers = _apply_every_write(direct)
        assert answers == _apply_every_write(through)
        assert _rows(direct) == _rows(through)
        assert _feed(direct)[fed:] == _feed(through)[fed:]
    assert "TitleInUse" in answers and True in answers and False in answers


def test_write_answers(store: Store) -> None:
    """Known answers on SQLite and PostgreSQL."""
    _written(store)
    sessions, titles = store.sessions, store.titles
    sessions.update_session_meta("w1", '{"a": 1}', "m1")
    sessions.update_session_meta("w1", '{"a": 2}')
    sessions.update_session_cwd("w1", "/w", " br ", " ")
    sessions.update_session_billing_route("w1", provider="p", base_url="u", billing_mode="x")
    sessions.update_session_billing_route("w1", provider="q", base_url=None)
    sessions.set_compression_fallback_streak("w1", -3)
    row = sessions.get_session("w1")
    assert row is not None
    assert (row["model_config"], row["model"], row["cwd"], row["git_branch"]) == (
        '{"a": 2}',
        "m1",
        "/w",
        "br",
    )
    assert (row["billing_provider"], row["billing_base_url"], row["billing_mode"]) == (
        "q",
        None,
        "x",
    )
    assert row["compression_fallback_streak"] == 0
    assert titles.set_auto_title_if_empty("w1", "Auto") is True
    assert titles.set_auto_title_if_empty("w1", "Other") is False
    assert titles.set_auto_title_if_empty("missing", "Other") is False
    with pytest.raises(TitleInUse):
        titles.set_session_title("w2", "Auto")
    assert titles.set_session_title("missing", "Fresh") is False
    assert titles.set_session_title("w3", "Root") is True  # handed over by its ancestor
    assert titles.get_session_title("root") is None
    assert sessions.create_session("w4", "cli") == "w4"
    assert sessions.ensure_session("w4", "tui", "m") == "w4"
    created = sessions.get_session("w4")
    assert created is not None and (created["source"], created["model"]) == ("cli", "m")


@pytest.mark.usefixtures("sqlite_driver")
@pytest.mark.parametrize(
    "name",
    [
        "update_system_prompt",
        "update_session_meta (model)",
        "update_session_cwd",
        "set_compression_fallback_streak",
        "create_session",
        "ensure_session",
        "set_session_title",
        "set_auto_title_if_empty",
        "set_auto_title_if_empty (again)",
    ],
)
def test_a_write_is_its_statements_at_the_driver(
    kept_store: Store, monkeypatch: pytest.MonkeyPatch, name: str
) -> None:
    traced = Traced(kept_store)  # before the first write opens the writer connection
    _written(kept_store)
    kept_store.sessions.end_session("w2", "warm")  # the writer connection is open
    begins = counted_begins(monkeypatch, kept_store)
    traced.statements.clear()
    SESSION_WRITES[name](kept_store, "w1")
    assert traced.statements[0] == "BEGIN IMMEDIATE", traced.statements
    assert traced.statements[-1] == "COMMIT", traced.statements
    body = traced.statements[1:-1]
    if "title" in name:
        assert len(body) == 2 and body[0].startswith("SELECT"), body
        assert body[1].startswith("UPDATE sessions SET title"), body
    else:
        assert len(body) == 1, body
        assert body[0].split()[0] in ("UPDATE", "INSERT"), body
    assert begins == []  # no SQLAlchemy transaction
