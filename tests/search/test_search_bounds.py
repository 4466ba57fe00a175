"""Search whose work does not grow with the corpus (docs/search-at-scale.md): a query is
read once (SearchQuery), the SQL of each route is built apart from running it (its text
checked here), ranked routes rank the newest limits.RANK_WINDOW matches in id order and
scans keep the newest limits.TIME_WINDOW, on both backends; the word index's access
method (RUM where the extension is available, GIN where not, FTS5 on SQLite), the
revision that chooses it, and the line `hermes-store check` prints."""

from __future__ import annotations

import dataclasses
import os
import re
import sqlite3
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from helpers.postgres import PG_ADMIN_URL, require_pg
from helpers.search import record_wider_windows
from helpers.system import unavailable
from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url
from sqlalchemy.pool import NullPool

from hermes_store import migrate
from hermes_store.migration.head import HEAD_REVISION
from hermes_store.repositories.messages import MessageRepository
from hermes_store.repositories.sessions import SessionRepository
from hermes_store.search import limits, search_messages
from hermes_store.search.backend import Filters
from hermes_store.search.index_method import read_index_method
from hermes_store.search.postgres_fts import reading_shape, tsquery_params
from hermes_store.search.query import SearchQuery
from hermes_store.store import Store

REPO = Path(__file__).resolve().parents[2]
CLI = str(Path(sys.executable).parent / "hermes-store")
NO_FILTERS = Filters(None, None, None, False)


def search(store: Store, query: str, **options: Any) -> list[dict[str, Any]]:
    with store.read() as session:
        return search_messages(session, query, **options)


# --- one reading of a query ------------------------------------------------------------------


def test_a_query_is_read_once_into_one_immutable_value() -> None:
    read = SearchQuery.read('deploy deploy "connection pool" src/main.py OR retry*')
    # the original's reading, its repeated term merged (the sanitiser's own output)
    assert read.sanitized == 'deploy "connection pool" src/ "main.py" OR retry*'
    assert read.tokens == ("deploy", '"connection', 'pool"', "src/", '"main.py"', "OR", "retry*")
    assert "OR" not in read.words and read.words[0] == "deploy"
    assert read.fts5_error == "'src/' is not an FTS5 bareword"
    assert read.has_literals and read.searchable and not read.has_cjk
    literals = [term.text for group in read.literal for _, term in group if term.literal]
    assert literals == ["src/main.py"]
    with pytest.raises(dataclasses.FrozenInstanceError):
        read.sanitized = "other"  # type: ignore[misc]


def test_what_fts5_rejects_is_read_as_an_error_and_a_literal() -> None:
    read = SearchQuery.read("don't")
    assert read.fts5 == () and read.fts5_error is not None
    assert read.has_literals
    assert not SearchQuery.read("   ").searchable
    assert SearchQuery.read("数据").has_cjk and not SearchQuery.read("数据").trigram_answers_cjk
    assert SearchQuery.read("数据库").trigram_answers_cjk


def test_only_the_query_module_reads_the_query_text() -> None:
    # the readers of the raw text are called in one module; every other module of the
    # search takes the SearchQuery value
    readers = re.compile(r"\b(sanitize_fts5_query|read_query|parse_fts5|route_tokens)\(")
    allowed = {"query.py"}
    offenders = [
        path.name
        for path in (REPO / "hermes_store" / "search").glob("*.py")
        if path.name not in allowed and readers.search(path.read_text())
    ]
    assert offenders == []


# --- the SQL of each route: tests/search/test_route_sql.py pins it ------------------------------


def test_postgres_phrases_ask_the_index_for_their_words_and_check_the_row() -> None:
    from sqlalchemy.dialects import postgresql

    from hermes_store.search.backend import m
    from hermes_store.search.postgres_fts import _holds_literal, _matches

    dialect = postgresql.psycopg.dialect(paramstyle="named")  # type: ignore[no-untyped-call]
    read = SearchQuery.read('"connection pool exhausted" retry')
    sql = str(_matches(reading_shape(read.fts5)).compile(dialect=dialect))
    params = tsquery_params(read.fts5)
    # the index is asked for every word (:wl0, the phrase's words in any order), the
    # row's own vector for the phrase (:w0)
    asked, checked = sql.split(" AND ts_match_vq(")
    assert "plainto_tsquery('simple', regexp_replace(:wl0," in asked and ":w0," not in asked
    assert "phraseto_tsquery('simple', regexp_replace(:w0," in checked
    assert params == {"w0": "connection pool exhausted", "wl0": "connection pool exhausted"} | {
        "w1": "retry"
    }
    # a query of single words needs no check
    words = str(_matches(reading_shape(SearchQuery.read("retry deploy").fts5)).compile())
    assert "ts_match_vq" not in words and "plainto_tsquery" not in words
    # a negated phrase stays as it is: the index's query then matches every row the
    # exact one does, and with no positive phrase the two are the same
    read = SearchQuery.read('retry NOT "pool exhausted"')
    negated = str(_matches(reading_shape(read.fts5)).compile(dialect=dialect))
    assert "ts_match_vq" not in negated and tsquery_params(read.fts5)["w1"] == "pool exhausted"
    assert "(!! phraseto_tsquery('simple', regexp_replace(:w1," in negated
    # a literal's words vouch for it where they stand as a phrase, asked the same way
    holds = _holds_literal("~/.config/zephyr.toml", {}, m, trigram=True, words=True, window=False)
    literal = str(holds.compile(dialect=dialect))
    assert "m.search_vector @@ CASE WHEN (numnode(plainto_tsquery('simple'" in literal
    assert "ts_match_vq(m.search_vector, CASE WHEN (numnode(phraseto_tsquery(" in literal


def test_a_phrase_finds_its_words_in_order_only(store: Store) -> None:
    rows = [
        ("the connection pool exhausted at noon", 1.0),
        ("pool connection exhausted, words out of order", 2.0),
        ("connection to the pool was exhausted", 3.0),
        ("connection pool exhausted again; retry later", 4.0),
        ("migration plan: migrating tables", 5.0),
        ("plan migration", 6.0),
    ]
    ids = _chat(store, [("user", t, ts) for t, ts in rows])

    def found(query: str) -> set[int]:
        return {h["id"] for h in search(store, query)}

    assert found('"connection pool exhausted"') == {ids[0], ids[3]}
    assert found('"connection pool exhausted" retry') == {ids[3]}
    assert found('exhausted NOT "connection pool"') == {ids[1], ids[2]}
    assert found('"pool exhausted" OR "plan migration"') == {ids[0], ids[3], ids[5]}
    assert found('"migration plan"') == {ids[4]}
    # a phrase that holds no word matches nothing, as in FTS5, whatever stands beside it
    assert found('"..." NOT "connection pool"') == set()
    assert found('"..." NOT exhausted') == set()
    assert found('"..." OR "plan migration"') == {ids[5]}


def test_a_literal_in_tool_output_is_found_where_its_words_stand_as_a_phrase(
    store: Store,
) -> None:
    SessionRepository(store).create_session("t", "cli")
    messages = MessageRepository(store)

    def tool(content: str) -> int:
        return messages.append_message("t", "tool", content, tool_name="shell")

    apart = tool("abdon't: t don")  # the literal mid-word, its words elsewhere, apart
    phrase = tool("we don't retry")  # the literal on word boundaries
    hits = {h["id"] for h in search(store, "don't")}
    assert phrase in hits and apart not in hits


@pytest.mark.parametrize(
    ("matches", "rows", "walks"),
    [
        (400_000, 10_000_000, True),  # 4 %: 25,600 rows read against 400,000 matches
        (40_000, 1_000_000, False),  # the same word at 1M: the index's 40,000 cost less
        (30_000, 10_000_000, False),  # 0.3 %: 341,000 rows to read, past the span
        (0, 10_000_000, False),
        (10, 0, False),
    ],
)
def test_a_word_is_walked_only_where_the_estimates_say_it_pays(
    matches: float, rows: float, walks: bool
) -> None:
    from hermes_store.search.postgres_fts import PostgresSearch, walk_pays

    span, cost = PostgresSearch.word_span, PostgresSearch.word_row_cost
    assert walk_pays(matches, rows, 1024, span, cost) is walks


@pytest.mark.parametrize(
    ("query", "bound"),
    [
        ("rebase", 0.04),
        ("Rebase", 0.04),  # the lexeme is lower case
        ("git rebase", 0.04),  # an AND: its rarest word
        ('"git rebase"', 0.04),
        ("rebase NOT git", 0.04),  # a negated term only lowers it
        ("git OR rebase", 0.14),  # an OR: its groups summed
        ("the OR git OR rebase", 0.44),
        ("zephyrine", 0.002),  # not listed: below the rarest listed word
        ('"src/main.py"', 0.002),  # punctuation separates words, as in the vector
        ('"..." OR rebase', 0.042),  # a phrase of no word: a lexeme never listed
        ("migrat*", None),  # a prefix's lexemes are the index's to know
        ("café", None),  # the parser decides a non-ASCII word's lexeme
        ("数据库", None),
    ],
)
def test_the_common_words_bound_a_querys_density(query: str, bound: float | None) -> None:
    from hermes_store.search.postgres_fts import CommonWords, density_bound

    words = CommonWords({"the": 0.3, "git": 0.1, "rebase": 0.04, "main": 0.01}, 0.002)
    found = density_bound(SearchQuery.read(query).fts5, words)
    assert found == (None if bound is None else pytest.approx(bound))


def test_a_rare_word_costs_no_estimate_a_frequent_one_is_estimated(
    dense: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """ANALYZE's most common words decide whether the planner is asked (EXPLAIN) if a
    word may be walked: a word too rare to fill the window in the span is not."""
    from sqlalchemy import event

    from hermes_store.search.postgres_fts import COMMON_WORDS, PostgresSearch, common_words

    with dense.engine.connect() as conn:
        words = common_words(next(iter(COMMON_WORDS.dicts(conn, {})), None))
    assert words is not None
    assert words.frequencies["step"] == 1.0 and 0.3 < words.frequencies["rebase"] < 0.36
    assert "zephyrine" not in words.frequencies and words.rarest < 0.05

    statements: list[str] = []

    def record(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        statements.append(statement)

    event.listen(dense.engine, "before_cursor_execute", record)
    monkeypatch.setattr(limits, "RANK_WINDOW", 30)

    def estimates(query: str) -> int:
        statements.clear()
        search(dense, query)
        return sum(s.startswith("EXPLAIN (FORMAT JSON) SELECT m.id") for s in statements)

    # 600 rows: a walk needs a window of 30 matches in 5 % of them, within half the span
    monkeypatch.setattr(PostgresSearch, "word_span", 65_536)
    monkeypatch.setattr(PostgresSearch, "word_row_cost", 0.01)
    assert estimates("zephyrine") == 0
    assert estimates("rebase") == 1
    assert estimates("zephyrine OR rebase") == 1
    assert estimates("zephyrine rebase") == 0
    assert estimates("migrat*") == 1  # unknown lexemes: the planner is asked
    # walking costs more than the index for any word here: no estimate is needed
    monkeypatch.setattr(PostgresSearch, "word_row_cost", 10.0)
    assert estimates("rebase") == 0


# --- the bounding rule, on both backends ---------------------------------------------------------


def _chat(store: Store, texts: list[tuple[str, str, float]]) -> list[int]:
    SessionRepository(store).create_session("s", "cli")
    messages = MessageRepository(store)
    return [
        messages.append_message("s", role, content, timestamp=ts) for role, content, ts in texts
    ]


@pytest.fixture
def ranked(store: Store) -> list[int]:
    # the oldest row is the best match by far; five newer rows hold the word once
    filler = " ".join(f"word{n}" for n in range(40))
    rows = [("user", "needle needle needle needle", 1.0)]
    rows += [("assistant", f"needle {filler}", 2.0 + n) for n in range(5)]
    return _chat(store, rows)


def test_all_matches_in_the_window_rank_as_the_original(store: Store, ranked: list[int]) -> None:
    hits = search(store, "needle")
    assert [h["id"] for h in hits][0] == ranked[0]
    assert sorted(h["id"] for h in hits) == sorted(ranked)


def test_past_the_window_the_newest_matches_are_ranked(
    store: Store, ranked: list[int], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(limits, "RANK_WINDOW", 4)
    hits = search(store, "needle", limit=3)
    assert len(hits) == 3 and {h["id"] for h in hits} <= set(ranked[-4:])
    oldest = search(store, "needle", sort="oldest", limit=3)
    assert [h["id"] for h in oldest] == ranked[:3]
    # a filter that empties the window's first page: the window of the rows it keeps
    users = search(store, "needle", role_filter=["user"], limit=3)
    assert [h["id"] for h in users] == [ranked[0]]
    # a page longer than the window is its own window: every match, ranked
    everything = search(store, "needle", limit=10)
    assert everything[0]["id"] == ranked[0] and len(everything) == len(ranked)


def test_a_page_past_the_first_is_cut_from_the_same_ranking(
    store: Store, ranked: list[int]
) -> None:
    everything = [h["id"] for h in search(store, "needle")]
    pages = [h["id"] for n in range(3) for h in search(store, "needle", limit=2, offset=2 * n)]
    assert pages == everything


def test_a_scan_orders_the_newest_window_by_time(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    # ids and timestamps disagree: the newest id is not the newest message
    ids = _chat(
        store, [("user", "数据 a", 30.0), ("user", "数据 b", 10.0), ("user", "数据 c", 20.0)]
    )
    assert [h["id"] for h in search(store, "数据")] == [ids[0], ids[2], ids[1]]
    monkeypatch.setattr(limits, "TIME_WINDOW", 1)
    # the window holds the page (one hit) plus nothing more: the newest two ids
    assert [h["id"] for h in search(store, "数据", limit=2)] == [ids[2], ids[1]]


# --- RUM, GIN and FTS5 ---------------------------------------------------------------------------


def _method(url: str) -> str:
    engine = create_engine(url, poolclass=NullPool)
    try:
        with engine.connect() as conn:
            return read_index_method(conn)
    finally:
        engine.dispose()


def _rum_available() -> bool:
    engine = create_engine(PG_ADMIN_URL, poolclass=NullPool)
    try:
        with engine.connect() as conn:
            sql = text("SELECT 1 FROM pg_available_extensions WHERE name = 'rum'")
            return conn.execute(sql).scalar() is not None
    finally:
        engine.dispose()


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    environ = {k: v for k, v in os.environ.items() if k != "HERMES_STORE_URL"}
    return subprocess.run([CLI, *args], capture_output=True, text=True, env=environ, timeout=300)


def test_sqlite_uses_fts5_and_the_revision_changes_nothing(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    url = f"sqlite:///{path}"
    migrate.upgrade(url, revision="hs0002", fts_min_pause=0)
    con = sqlite3.connect(path)
    before = con.execute("SELECT type, name, sql FROM sqlite_master ORDER BY name").fetchall()
    con.close()
    migrate.upgrade(url, revision="hs0003", fts_min_pause=0)
    con = sqlite3.connect(path)
    after = con.execute("SELECT type, name, sql FROM sqlite_master ORDER BY name").fetchall()
    con.close()
    assert after == before
    assert _method(url) == "fts5"
    checked = _cli("check", "--url", url)
    assert "search index:  fts5" in checked.stdout, checked.stdout


def test_postgres_uses_rum_where_the_extension_is_available(pg_fresh_db: str) -> None:
    if not _rum_available():
        unavailable(
            "the PostgreSQL server does not offer the RUM extension (Debian's"
            " postgresql-15-rum; .ci/run installs it under CI)"
        )
    assert _method(pg_fresh_db) == "rum"
    checked = _cli("check", "--url", pg_fresh_db)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert "search index:  rum (" in checked.stdout, checked.stdout
    # down to hs0002 the index is GIN again, and back up it is what it was
    migrate.downgrade(pg_fresh_db, "hs0002")
    assert _method(pg_fresh_db) == "gin"
    migrate.upgrade(pg_fresh_db)
    assert _method(pg_fresh_db) == "rum"


@pytest.fixture
def unprivileged_db() -> Iterator[str]:
    """A database owned by a role that is no superuser: it may create trusted extensions
    (pg_trgm) but not RUM, as on a managed server where RUM is not offered to it."""
    require_pg()
    role = f"hs_norum_{uuid.uuid4().hex[:12]}"
    admin = create_engine(PG_ADMIN_URL, poolclass=NullPool, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(text(f'CREATE ROLE "{role}" LOGIN NOSUPERUSER'))
        conn.execute(
            text(f'CREATE DATABASE "{role}" OWNER "{role}" TEMPLATE template0 ENCODING \'UTF8\'')
        )
    url = make_url(PG_ADMIN_URL).set(username=role, database=role)
    try:
        yield url.render_as_string(hide_password=False)
    finally:
        with admin.connect() as conn:
            conn.execute(text(f'DROP DATABASE IF EXISTS "{role}" WITH (FORCE)'))
            conn.execute(text(f'DROP ROLE IF EXISTS "{role}"'))
        admin.dispose()


def test_without_the_extension_the_revision_keeps_gin(unprivileged_db: str) -> None:
    migrate.upgrade(unprivileged_db)
    assert migrate.current(unprivileged_db).alembic_revision == HEAD_REVISION
    assert _method(unprivileged_db) == "gin"
    engine = create_engine(unprivileged_db, poolclass=NullPool)
    with engine.connect() as conn:
        created = conn.execute(text("SELECT 1 FROM pg_extension WHERE extname = 'rum'")).scalar()
    engine.dispose()
    assert created is None
    with Store(unprivileged_db) as store:
        ids = _chat(store, [("user", "gin answers this needle", 1.0), ("user", "other", 2.0)])
        assert [h["id"] for h in search(store, "needle")] == [ids[0]]
    checked = _cli("check", "--url", unprivileged_db)
    assert "search index:  gin (" in checked.stdout, checked.stdout


# --- windows of the newest ids before the whole table (PostgreSQL) ---------------------------


@pytest.fixture
def spread(store: Store) -> Store:
    """300 messages; the CJK term in every 4th non-tool row, the literal in every 25th,
    timestamps that disagree with ids in places (every 10th row is older)."""
    SessionRepository(store).create_session("s", "cli")
    rows: list[dict[str, Any]] = []
    for n in range(300):
        tool = n % 9 == 0
        parts = [f"line {n}"]
        if n % 4 == 0:
            parts.append("数据库 ready")
        if n % 25 == 0:
            parts.append("mail ops@zephyr.io now")
        rows.append(
            {
                "role": "tool" if tool else ("user", "assistant")[n % 2],
                "content": " ".join(parts),
                "tool_name": "shell" if tool else None,
                "timestamp": 1_000.0 + n - (50 if n % 10 == 0 else 0),
            }
        )
    MessageRepository(store).append_messages("s", rows)
    return store


_CASES: list[tuple[str, dict[str, Any]]] = [
    ("数据库", {}),
    ("数据库", {"limit": 5, "offset": 3}),
    ("数据库", {"limit": 40}),
    ("数据库", {"role_filter": ["user"]}),
    ("数据库", {"sort": "oldest", "limit": 7}),
    ("ops@zephyr.io", {"limit": 5}),
    ("ops@zephyr.io", {}),
    ("ops@zephyr.io", {"role_filter": ["assistant"], "limit": 3}),
    ("ops@zephyr.io ready", {"limit": 2}),
    # a 2-character CJK term: the LIKE scan, the span first on PostgreSQL
    ("数据", {}),
    ("数据", {"limit": 5, "offset": 3}),
    ("数据", {"limit": 40}),
]


def _ids(store: Store) -> list[list[int]]:
    return [[h["id"] for h in search(store, query, **options)] for query, options in _CASES]


def test_windows_give_the_pages_the_whole_table_gives(
    spread: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    from hermes_store.search.postgres_fts import PostgresSearch
    from hermes_store.search.sqlite_fts import SqliteSearch

    monkeypatch.setattr(limits, "TIME_WINDOW", 30)
    # unwindowed: no substring window, no literal window (the whole table at once)
    monkeypatch.setattr(PostgresSearch, "substring_span", 0)
    for backend in (SqliteSearch, PostgresSearch):
        monkeypatch.setattr(backend, "literal_window", 10**9)
    whole = _ids(spread)
    assert all(whole) and len(whole[2]) == 40 and len(whole[6]) == 12

    used: list[int] = []  # the ids each substring window handed over
    original = PostgresSearch._substring_window

    def recorded(self: Any, *args: Any) -> list[int] | None:
        found = original(self, *args)
        used.append(len(found) if found is not None else 0)
        return found

    windows = record_wider_windows(monkeypatch, PostgresSearch)
    monkeypatch.setattr(PostgresSearch, "_substring_window", recorded)
    # windows small enough that some fall short, the wider ones through the indexes
    monkeypatch.setattr(PostgresSearch, "substring_span", 150)
    monkeypatch.setattr(PostgresSearch, "literal_widest_window", 16)
    monkeypatch.setattr(PostgresSearch, "literal_index_windows", (32, 64, 128))
    for backend in (SqliteSearch, PostgresSearch):
        monkeypatch.setattr(backend, "literal_window", 8)
    assert _ids(spread) == whole
    if spread.engine.dialect.name == "postgresql":
        # the span held the newest 30 matches for short pages, not for a page of 40
        assert 30 in used and 0 in used
        # 8 ids row by row (too few hits to size a second window on), then 32, 64, 128
        # through the indexes (which holds the 5 newest hits of a page of 5), then for a
        # page of 20 the whole table after them
        assert windows[:7] == [32, 64, 128, 32, 64, 128, None]


@pytest.fixture
def dense(pg_fresh_db: str) -> Iterator[Store]:
    """600 messages in two sessions (cli, telegram); `rebase` in every 3rd row, with
    ranks that disagree with ids (a repeated word ranks higher), statistics analysed."""
    store = Store(pg_fresh_db)
    sessions = SessionRepository(store)
    sessions.create_session("a", "cli")
    sessions.create_session("b", "telegram")
    for name in ("a", "b"):
        rows = [
            {
                "role": ("user", "assistant", "tool")[n % 3 if n % 7 else 0],
                "content": f"step {n} " + ("git rebase " * (1 + n % 5) if n % 3 == 0 else "merge"),
                "timestamp": 1_000.0 + n - (40 if n % 11 == 0 else 0),
            }
            for n in range(300)
        ]
        MessageRepository(store).append_messages(name, rows)
    with store.engine.begin() as conn:
        conn.execute(text("ANALYZE messages, sessions"))
    yield store
    store.close()


_WORD_CASES: list[tuple[str, dict[str, Any]]] = [
    ("rebase", {}),
    ("rebase", {"limit": 5, "offset": 4}),
    ("rebase", {"sort": "newest", "limit": 7}),
    ("rebase", {"sort": "oldest", "limit": 7}),
    ("rebase", {"role_filter": ["user"]}),
    ("rebase", {"source_filter": ["telegram"], "limit": 9}),
    ("git rebase", {"limit": 12}),
    ('"git rebase"', {"limit": 10}),
    ('rebase NOT "step 3"', {"limit": 10}),
    ('"step 3 git"', {"limit": 10, "role_filter": ["user"]}),
]


def test_a_walked_word_window_gives_the_page_the_word_index_gives(
    dense: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    from hermes_store.search import postgres_fts
    from hermes_store.search.postgres_fts import (
        TABLE_ESTIMATE,
        PostgresSearch,
        estimated_rows,
        word_estimate_statement,
    )

    def pages() -> list[list[int]]:
        return [[h["id"] for h in search(dense, q, **o)] for q, o in _WORD_CASES]

    monkeypatch.setattr(limits, "RANK_WINDOW", 30)
    monkeypatch.setattr(PostgresSearch, "word_span", 0)  # never walked: the word index
    indexed = pages()
    assert all(indexed) and len(indexed[0]) == 20

    # the planner's estimates of the matches and the rows, from ANALYZE's statistics
    reading = SearchQuery.read("rebase").fts5
    shape, params = reading_shape(reading), tsquery_params(reading)
    with dense.engine.connect() as conn:
        estimate = word_estimate_statement(shape, NO_FILTERS.shape)
        matches = estimated_rows(estimate.tuples(conn, params)[0][0])
        rows = estimated_rows(TABLE_ESTIMATE.tuples(conn, {})[0][0])
        no_source = Filters([], None, None, False)
        empty = word_estimate_statement(shape, no_source.shape)
        nothing = estimated_rows(empty.tuples(conn, params)[0][0])
    assert 150 <= matches <= 250 and rows == 600 and nothing <= 1

    walked: list[int] = []
    original = PostgresSearch._word_window

    def recorded(self: Any, *args: Any, **options: Any) -> list[int] | None:
        found = original(self, *args, **options)
        walked.append(len(found) if found is not None else 0)
        return found

    monkeypatch.setattr(PostgresSearch, "_word_window", recorded)
    monkeypatch.setattr(PostgresSearch, "word_span", 65_536)
    monkeypatch.setattr(PostgresSearch, "word_row_cost", 0.01)  # walking pays
    assert pages() == indexed
    # every case asked (sort="oldest" walks the oldest ids); the span held a window of
    # 30 for each but the last, whose estimate (under the window) said a walk could not
    assert walked == [30] * 9 + [0]

    walked.clear()
    # a span of the newest (oldest) 150 ids, which hold 50 rebase rows: the window from
    # a part of the table (the phrase of `step 3` has 2 rows in all, the index gives them)
    monkeypatch.setattr(postgres_fts, "walk_pays", lambda *args: True)
    monkeypatch.setattr(PostgresSearch, "word_span", 150)
    assert pages() == indexed
    assert walked == [30] * 9 + [0]

    walked.clear()
    # a walk that falls short (60 ids hold about 20 matches): the word index answers
    monkeypatch.setattr(PostgresSearch, "word_span", 60)
    assert pages() == indexed
    assert walked == [0] * 10
