"""The search planner and its backends, on SQLite and on PostgreSQL: the backend chosen
by dialect name, the slow-search log (HERMES_SEARCH_SLOW_MS, logger `hermes_state`,
docs/reference/behaviour.md 6.1), and snippets that hold a matched phrase or hyphenated term as
one highlighted run with the text's own punctuation, as FTS5's snippet() does."""

from __future__ import annotations

import logging
from types import SimpleNamespace
from typing import Any

import pytest
from sqlalchemy import event

from hermes_store.errors import MigrationError
from hermes_store.repositories.messages import MessageRepository
from hermes_store.repositories.sessions import SessionRepository
from hermes_store.search import search_messages
from hermes_store.search.backend import SearchBackend, backend_for
from hermes_store.search.postgres_fts import PostgresSearch
from hermes_store.search.sqlite_fts import SqliteSearch
from hermes_store.store import Store


def search(store: Store, query: str, **options: Any) -> list[dict[str, Any]]:
    with store.read() as session:
        return search_messages(session, query, **options)


@pytest.fixture
def texts(store: Store) -> dict[str, int]:
    SessionRepository(store).create_session("s", "cli")
    messages = MessageRepository(store)
    return {
        "chat": messages.append_message("s", "user", "please call chat-send when the job ends"),
        "needle": messages.append_message(
            "s", "assistant", "a haystack with the Needle, match and a needle match inside"
        ),
        "dotted": messages.append_message("s", "user", "open my-app.config in the editor"),
        "words": messages.append_message("s", "user", "needle here and match there"),
    }


def test_backend_is_chosen_by_dialect_name(store: Store) -> None:
    with store.read() as session:
        backend = backend_for(session)
    expected = {"sqlite": SqliteSearch, "postgresql": PostgresSearch}[store.dialect]
    assert type(backend) is expected
    assert issubclass(expected, SearchBackend) and expected.dialect == store.dialect


def test_an_unknown_dialect_is_refused_by_name() -> None:
    # the registry reads nothing but the dialect's name
    other = SimpleNamespace(dialect=SimpleNamespace(name="mysql"))
    with pytest.raises(MigrationError, match="runs on SQLite and PostgreSQL, not mysql"):
        backend_for(other)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("query", "key", "run"),
    [
        ("chat-send", "chat", "chat-send"),
        ('"needle match"', "needle", "needle match"),
        ('"Needle match"', "needle", "Needle, match"),
        ("my-app.config", "dotted", "my-app.config"),
        ('"needle match"*', "needle", "needle match"),
    ],
)
def test_snippets_hold_a_phrase_as_one_run(
    store: Store, texts: dict[str, int], query: str, key: str, run: str
) -> None:
    hits = {h["id"]: h for h in search(store, query)}
    assert f">>>{run}<<<" in hits[texts[key]]["snippet"], hits[texts[key]]["snippet"]


def test_snippets_mark_barewords_one_by_one(store: Store, texts: dict[str, int]) -> None:
    (hit,) = [h for h in search(store, "here there") if h["id"] == texts["words"]]
    assert ">>>here<<<" in hit["snippet"] and ">>>there<<<" in hit["snippet"]
    assert ">>>here and" not in hit["snippet"]


def _slow_lines(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [
        r.getMessage()
        for r in caplog.records
        if r.name == "hermes_state" and r.getMessage().startswith("slow session search")
    ]


@pytest.mark.parametrize(
    ("query", "route", "rows"),
    [
        ("haystack", {"sqlite": "fts5", "postgresql": "tsvector"}, 1),
        ("chat-send", {"sqlite": "literal", "postgresql": "literal"}, 1),
        ("aystac", {"sqlite": "trigram", "postgresql": "trigram"}, 1),
        # no hit: the trigram retry runs for terms of 3+ characters, not for shorter ones
        ("nothing", {"sqlite": "trigram", "postgresql": "trigram"}, 0),
        ("zz", {"sqlite": "fts5", "postgresql": "tsvector"}, 0),
    ],
)
def test_slow_searches_are_logged_with_route_and_rows(
    store: Store,
    texts: dict[str, int],
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    query: str,
    route: dict[str, str],
    rows: int,
) -> None:
    monkeypatch.setenv("HERMES_SEARCH_SLOW_MS", "0")  # 0 logs every search
    with caplog.at_level(logging.INFO, logger="hermes_state"):
        hits = search(store, query)
    assert len(hits) == rows
    (line,) = _slow_lines(caplog)
    assert f"path={route[store.dialect]} " in line and f"rows={rows} " in line, line


def test_fast_searches_are_not_logged(
    store: Store,
    texts: dict[str, int],
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    monkeypatch.setenv("HERMES_SEARCH_SLOW_MS", "60000")
    with caplog.at_level(logging.INFO, logger="hermes_state"):
        assert search(store, "haystack")
    assert _slow_lines(caplog) == []
    # unset: the original's default of 1000 ms; a search of a handful of rows is faster
    monkeypatch.delenv("HERMES_SEARCH_SLOW_MS")
    with caplog.at_level(logging.INFO, logger="hermes_state"):
        assert search(store, "chat-send")
    assert _slow_lines(caplog) == []


@pytest.mark.parametrize(
    ("query", "pg_index"),
    [
        ("src/main.py", "idx_messages_trgm"),
        ("don't", "idx_messages_trgm"),
        # the rows holding both words, each then checked for the literal
        ("rm -rf docker", "idx_messages_search_vector"),
        (".env OR $HOME", "idx_messages_trgm"),
    ],
)
def test_literal_queries_never_scan_messages(store: Store, query: str, pg_index: str) -> None:
    """The statements a literal search of 3+ characters sends are answered from the
    indexes: SQLite reaches `messages` by rowid only, PostgreSQL (sequential scans
    priced out, as on a large table) through its GIN indexes."""
    SessionRepository(store).create_session("s", "cli")
    messages = MessageRepository(store)
    for n in range(30):
        messages.append_message("s", ("user", "tool")[n % 2], f"edit src/main.py {n} don't")
    sent: list[tuple[str, Any]] = []

    def keep(conn: Any, cursor: Any, sql: str, params: Any, context: Any, many: bool) -> None:
        if sql.lstrip().upper().startswith(("WITH", "SELECT")):
            sent.append((sql, params))

    event.listen(store.engine, "before_cursor_execute", keep)
    try:
        assert search(store, query) or query != "src/main.py"
    finally:
        event.remove(store.engine, "before_cursor_execute", keep)
    literal = [(sql, params) for sql, params in sent if "m.content AS body" in sql]
    assert len(literal) == 1, sent
    sql, params = literal[0]
    with store.engine.connect() as conn:
        raw = conn.connection.driver_connection
        cursor = raw.cursor()  # type: ignore[union-attr]
        if store.dialect == "sqlite":
            cursor.execute(f"EXPLAIN QUERY PLAN {sql}", params)
            plan = [row[3] for row in cursor.fetchall()]
            # CTEs and compound parts are scanned as id lists; `messages` never is
            scans = [step.split()[1] for step in plan if step.startswith("SCAN ")]
            assert not {"m", "messages"} & set(scans), plan
            assert any("SEARCH m USING INTEGER PRIMARY KEY" in step for step in plan), plan
        else:
            cursor.execute("SET enable_seqscan = off")
            cursor.execute(f"EXPLAIN {sql}", params)
            plan = [row[0] for row in cursor.fetchall()]
            assert not [step for step in plan if "Seq Scan on messages" in step], plan
            assert any(pg_index in step for step in plan), plan
