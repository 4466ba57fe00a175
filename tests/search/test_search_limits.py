"""The work of one search is bounded whatever its query (issue 28, item 5;
docs/search.md): a repeated term is read once, a query holds at most
`limits.MAX_TERMS` terms, and a search stops at HERMES_SEARCH_TIMEOUT_MS with a typed
error, on SQLite and on PostgreSQL. Time is never asserted here (benchmarks measure it):
what is asserted is the work sent to the database, the typed errors, and the answers."""

from __future__ import annotations

import itertools
import sqlite3
from collections.abc import Iterator
from typing import Any

import pytest
from helpers.search import PREFIXES, fill_with_short_words
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlalchemy import event, text
from sqlalchemy.exc import DBAPIError

from hermes_store.config import JOURNAL_ENV
from hermes_store.errors import InvalidInput, QueryTooComplex, SearchTimedOut
from hermes_store.repositories.messages import MessageRepository
from hermes_store.repositories.search import SearchRepository
from hermes_store.repositories.sessions import SessionRepository
from hermes_store.search import search_messages
from hermes_store.search.backend import backend_for
from hermes_store.search.limits import MAX_TERMS, TIMEOUT_ENV
from hermes_store.search.query import collapse_tokens
from hermes_store.store import Store

TEXTS = [
    ("user", "flights to Kyoto in spring"),
    ("assistant", "Kyoto and Osaka are close by train"),
    ("user", "the connection pool is exhausted again"),
    ("user", "edit src/main.py around line 40"),
    ("assistant", "src and main and py, but not the path"),
    ("user", "never run rm -rf on docker volumes"),
    ("assistant", "rm the docker image, then rf"),
    ("user", "聊天记录，记忆断裂问题复现了"),
    ("assistant", "节点之间的通信中断了"),
    ("user", "修改youer服务端的配置"),
    ("user", "deploy deploy twice in a row"),
    ("assistant", "deploy once, then rest"),
]


@pytest.fixture
def texts(store: Store) -> Store:
    SessionRepository(store).create_session("s", "cli")
    messages = MessageRepository(store)
    for role, content in TEXTS:
        messages.append_message("s", role, content)
    return store


class _Sent:
    """Every parameter value a store's engine sends, as text."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.values: list[str] = []

    def __call__(self, conn: Any, cursor: Any, statement: str, params: Any, *_: Any) -> None:
        items = params.values() if isinstance(params, dict) else params or ()
        self.values += [str(value) for value in items]

    def __enter__(self) -> _Sent:
        event.listen(self.store.engine, "before_cursor_execute", self)
        return self

    def __exit__(self, *exc: object) -> None:
        event.remove(self.store.engine, "before_cursor_execute", self)

    def count(self, needle: str) -> int:
        return sum(value.lower().count(needle.lower()) for value in self.values)


def _search(store: Store, query: str, **options: Any) -> list[int]:
    return [int(h["id"]) for h in SearchRepository(store).search_messages(query, **options)]


#: (a query, the term it repeats, how many times): every route (docs/search.md), the
#: term typed over and over, within the 2,048 characters a query keeps
REPEATED = [
    ("kyoto", "kyoto", 300),  # the word index
    ("kyoto OR osaka", "osaka", 100),  # OR (typed over and over with OR between)
    ('"connection pool"', "connection pool", 100),  # a phrase
    ("src/main.py", "src/main.py", 150),  # a literal
    ("rm -rf docker", "docker", 140),  # a literal and words: both tiers
    ("记忆断裂", "记忆断裂", 300),  # CJK: the trigram index
    ("通信", "通信", 600),  # CJK of two characters: a LIKE scan
    ("youer", "youer", 300),  # no word hit: the trigram retry
]


@pytest.mark.parametrize(("query", "term", "times"), REPEATED)
def test_a_repeated_term_is_read_once(texts: Store, query: str, term: str, times: int) -> None:
    """The query typed `times` times over finds what it finds once, and sends the
    database what it sends once: each repeat would be one more pass over an index or a
    table (`deploy` typed 300 times took 70 s at 200k messages)."""
    store = texts
    with _Sent(store) as once:
        expected = _search(store, query)
    assert expected, "nothing found: the test would test nothing"
    repeated = (" OR " if " OR " in query else " ").join([query] * times)
    assert len(repeated) <= 2048
    with _Sent(store) as again:
        assert _search(store, repeated) == expected
    assert once.count(term) >= 1
    assert again.count(term) == once.count(term)


def test_repeats_inside_a_phrase_are_what_it_matches(texts: Store) -> None:
    """`"deploy deploy"` is the word twice in a row: only the message that holds that;
    `deploy deploy` (two AND-ed words) is `deploy`."""
    store = texts
    ids = {content: mid for mid, (_, content) in enumerate(TEXTS, start=1)}
    twice, once = ids["deploy deploy twice in a row"], ids["deploy once, then rest"]
    assert _search(store, '"deploy deploy"') == [twice]
    assert sorted(_search(store, "deploy deploy")) == sorted(_search(store, "deploy"))
    assert sorted(_search(store, "deploy")) == sorted([twice, once])
    assert _search(store, '"deploy deploy" "deploy deploy"') == [twice]


# FTS5 itself tells whether collapse_tokens keeps a query's meaning: every combination of a
# few terms and operators, on a table holding every combination of the terms.
_TERMS = ["a", "b", "c", '"a b"', "a*"]
_OPS = ["AND", "OR", "NOT"]


@pytest.fixture(scope="module")
def fts5() -> Iterator[sqlite3.Connection]:
    con = sqlite3.connect(":memory:")
    con.execute("CREATE VIRTUAL TABLE t USING fts5(x)")
    words = ["a", "b", "c", "ab"]
    for n in range(1, len(words) + 1):
        for combo in itertools.permutations(words, n):
            con.execute("INSERT INTO t VALUES (?)", (" ".join(combo),))
    yield con
    con.close()


def _matches(con: sqlite3.Connection, query: str) -> list[int] | str:
    try:
        return [r for (r,) in con.execute("SELECT rowid FROM t WHERE t MATCH ?", (query,))]
    except sqlite3.OperationalError:
        return "error"


@settings(
    max_examples=400, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(st.lists(st.sampled_from(_TERMS + _OPS + _TERMS), min_size=1, max_size=9))
def test_merging_repeats_keeps_what_fts5_matches(
    fts5: sqlite3.Connection, tokens: list[str]
) -> None:
    collapsed = collapse_tokens(tokens)
    assert _matches(fts5, " ".join(collapsed)) == _matches(fts5, " ".join(tokens)), collapsed


def test_merging_repeats_drops_them() -> None:
    assert collapse_tokens(["a"] * 5) == ["a"]
    assert collapse_tokens(["a", "AND", "a", "b", "a"]) == ["a", "b"]
    assert collapse_tokens(["a", "OR", "b", "OR", "a"]) == ["a", "OR", "b"]
    assert collapse_tokens(["a", "b", "OR", "b", "AND", "a"]) == ["a", "b"]
    # NOT binds between the implicit AND and the explicit one: kept as typed
    assert collapse_tokens(["a", "NOT", "b", "a"]) == ["a", "NOT", "b", "a"]
    # misplaced operators: FTS5's own answer stands
    assert collapse_tokens(["a", "AND", "OR", "a"]) == ["a", "AND", "OR", "a"]


# --------------------------------------------------------------------------- term count


def test_a_query_of_more_terms_than_the_limit_is_refused(texts: Store) -> None:
    """Past MAX_TERMS distinct terms, read any way the search reads the query, the
    search refuses it with QueryTooComplex naming the limit (an InvalidInput); at the
    limit it runs. The store goes on working."""
    store = texts
    words = [f"w{i}x" for i in range(MAX_TERMS)]
    assert _search(store, " ".join(words)) == []
    assert _search(store, " OR ".join([*words[:-1], "kyoto"])) != []
    too_many = [
        " ".join([*words, "kyoto"]),  # words
        " OR ".join([*words, "kyoto"]),  # alternatives
        '"' + " ".join([*words, "kyoto"]) + '"',  # the words of a phrase
        " ".join(f"{w}/x" for w in [*words, "kyoto"]),  # literals
        " ".join(f"数{chr(0x4E00 + i)}" for i in range(MAX_TERMS + 1)),  # CJK (LIKE scan)
    ]
    for query in too_many:
        with pytest.raises(QueryTooComplex, match=f"at most {MAX_TERMS}") as raised:
            _search(store, query)
        assert isinstance(raised.value, InvalidInput) and raised.value.limit == MAX_TERMS
    # repeats are merged before counting
    assert _search(store, " ".join([*words[1:], *words[1:], "kyoto", "kyoto"])) == []
    assert _search(store, "kyoto") != []


def test_the_search_function_refuses_too_many_terms_too(texts: Store) -> None:
    with texts.read() as conn, pytest.raises(QueryTooComplex):
        search_messages(conn, " ".join(f"t{i}y" for i in range(MAX_TERMS + 1)))


# --------------------------------------------------------------------------- time limit

#: terms of two CJK characters each: a LIKE scan of every message per term
_SCANNED = " OR ".join(f"{chr(0x4E00 + i)}{chr(0x4E80 + i)}" for i in range(MAX_TERMS - 1))


@pytest.fixture(params=["wal", "delete"])
def journal(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """The SQLite journal mode the test's file is made in (requested before the store:
    the time limit must hold in both; PostgreSQL ignores it)."""
    mode = str(request.param)
    monkeypatch.setenv(JOURNAL_ENV, mode)
    return mode


def _in_journal_mode(store: Store, journal: str) -> None:
    if store.dialect == "sqlite":
        pragma = text("PRAGMA journal_mode")
        assert store.read(lambda conn: conn.execute(pragma).scalar_one()) == journal


@pytest.fixture
def many(store: Store) -> Store:
    """2,000 messages, one of which holds a term of _SCANNED."""
    SessionRepository(store).create_session("big", "cli")
    messages = MessageRepository(store)
    for start in range(0, 2000, 500):
        batch = [f"message {n} about nothing much" for n in range(start, start + 500)]
        messages.append_messages("big", [{"role": "user", "content": c} for c in batch])
    messages.append_message("big", "user", f"the rare {chr(0x4E00 + 7)}{chr(0x4E80 + 7)} here")
    return store


def test_a_search_past_its_time_limit_ends_with_a_typed_error(
    journal: str, many: Store, monkeypatch: pytest.MonkeyPatch, sqlite_driver: str
) -> None:
    """With a budget far shorter than the search needs (a scan of every message for
    each of 31 terms), the search ends with SearchTimedOut naming the limit, not with a
    driver error and not after the whole scan; with the default budget the same search
    completes with the right hit. The store goes on working."""
    store = many
    _in_journal_mode(store, journal)
    monkeypatch.setenv(TIMEOUT_ENV, "0.001")
    with pytest.raises(SearchTimedOut, match=TIMEOUT_ENV) as raised:
        SearchRepository(store).search_messages(_SCANNED)
    assert isinstance(raised.value, QueryTooComplex) and raised.value.limit <= 1
    monkeypatch.delenv(TIMEOUT_ENV)
    hits = SearchRepository(store).search_messages(_SCANNED)
    assert [h["snippet"] for h in hits] == [f"the rare {chr(0x4E00 + 7)}{chr(0x4E80 + 7)} here"]
    assert _search(store, "nothing", limit=3) != []


def test_no_limit_when_the_budget_is_zero(many: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(TIMEOUT_ENV, "0")
    assert len(SearchRepository(many).search_messages(_SCANNED)) == 1


def test_the_limit_ends_with_the_search(
    journal: str, many: Store, monkeypatch: pytest.MonkeyPatch, sqlite_driver: str
) -> None:
    """The caller's transaction goes on without the search's limit: on SQLite no
    progress handler is left on the connection (a later statement of thousands of steps
    runs after a search that timed out), on PostgreSQL statement_timeout is what it was."""
    store = many
    _in_journal_mode(store, journal)
    heavy = text("SELECT sum(length(content || content)) FROM messages")
    if store.dialect == "sqlite":
        monkeypatch.setenv(TIMEOUT_ENV, "0.001")
        with store.read() as conn:
            with pytest.raises(SearchTimedOut):
                search_messages(conn, _SCANNED)
            assert conn.execute(heavy).scalar_one() > 0
        return
    assert SearchRepository(store).search_messages("nothing", limit=1)
    show = text("SHOW statement_timeout")
    assert store.read(lambda conn: conn.execute(show).scalar_one()) == "0"
    with store.read() as conn:
        assert search_messages(conn, "nothing", limit=1)
        assert conn.execute(show).scalar_one() == "0"
        conn.execute(text("SET LOCAL statement_timeout = '2s'"))
        assert search_messages(conn, "nothing", limit=1)
        assert conn.execute(show).scalar_one() == "2s"
        assert conn.execute(heavy).scalar_one() > 0


@pytest.mark.parametrize("budget", ["10000", "0"])
def test_a_search_raises_work_mem_for_its_own_statements(
    pg_fresh_db: str, monkeypatch: pytest.MonkeyPatch, budget: str
) -> None:
    """PostgreSQL: the search's statements run with PostgresSearch.work_mem at least
    (RUM's ordered scan sorts in it), with or without a time limit; a larger one of the
    session's is kept, and the caller's transaction goes on with its own after."""
    from sqlalchemy import event

    from hermes_store.repositories.messages import MessageRepository
    from hermes_store.repositories.sessions import SessionRepository
    from hermes_store.search.postgres_fts import PostgresSearch

    monkeypatch.setenv(TIMEOUT_ENV, budget)
    pg_store = Store(pg_fresh_db)
    SessionRepository(pg_store).create_session("w", "cli")
    MessageRepository(pg_store).append_message("w", "user", "a zephyr line")
    seen: list[str] = []

    def record(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        if statement.startswith(("SELECT m.", "SELECT page.")):  # a search statement
            seen.append(cursor.connection.execute("SHOW work_mem").fetchone()[0])

    event.listen(pg_store.engine, "after_cursor_execute", record)
    show = text("SHOW work_mem")
    with pg_store.read() as conn:
        conn.execute(text("SET LOCAL work_mem = '4MB'"))
        conn.execute(text("SET LOCAL statement_timeout = '3s'"))
        assert search_messages(conn, "zephyr")
        assert conn.execute(show).scalar_one() == "4MB"
        assert conn.execute(text("SHOW statement_timeout")).scalar_one() == "3s"
        assert seen and set(seen) == {PostgresSearch.work_mem}
        seen.clear()
        conn.execute(text("SET LOCAL work_mem = '64MB'"))
        assert search_messages(conn, "zephyr")
        assert seen and set(seen) == {"64MB"}
        assert conn.execute(show).scalar_one() == "64MB"
    pg_store.close()


def test_a_search_runs_its_statements_without_jit(pg_fresh_db: str) -> None:
    """PostgreSQL: the search's statements run with jit off (their windows and LIMITs
    are bound parameters, so the planner can think a statement large enough to compile,
    which costs more than running it), and the caller's transaction gets its own jit
    setting back after."""
    from sqlalchemy import event

    from hermes_store.repositories.messages import MessageRepository
    from hermes_store.repositories.sessions import SessionRepository

    pg_store = Store(pg_fresh_db)
    SessionRepository(pg_store).create_session("j", "cli")
    MessageRepository(pg_store).append_message("j", "user", "a zephyr line")
    seen: list[str] = []

    def record(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        if statement.startswith(("SELECT m.", "SELECT page.", "SELECT count")):
            seen.append(cursor.connection.execute("SHOW jit").fetchone()[0])

    event.listen(pg_store.engine, "after_cursor_execute", record)
    try:
        with pg_store.read() as conn:
            conn.execute(text("SET LOCAL jit = on"))
            assert search_messages(conn, "zephyr")
            # a zero-hit literal takes the estimate's route too
            assert not search_messages(conn, "~/.config/zephyr.yaml")
            assert conn.execute(text("SHOW jit")).scalar_one() == "on"
        assert seen and set(seen) == {"off"}
    finally:
        pg_store.close()


def test_a_statement_running_at_the_deadline_is_stopped(
    journal: str, store: Store, sqlite_driver: str
) -> None:
    """The limit stops a statement already running when the deadline comes (SQLite: the
    progress handler interrupts it; PostgreSQL: statement_timeout cancels it), not only
    the next one: a statement that would count for many seconds ends in SearchTimedOut
    caused by the driver's interrupt or cancel."""
    endless = text(
        "WITH RECURSIVE r(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM r WHERE n < 1000000000)"
        " SELECT count(*) FROM r"
    )
    _in_journal_mode(store, journal)
    with store.read() as conn:
        backend = backend_for(conn)
        with pytest.raises(SearchTimedOut) as raised, backend.time_limit(50):
            conn.execute(endless)
    cause = raised.value.__cause__
    assert isinstance(cause, DBAPIError), repr(cause)
    if store.dialect == "sqlite":
        assert getattr(cause.orig, "sqlite_errorcode", None) == sqlite3.SQLITE_INTERRUPT
    else:
        assert getattr(cause.orig, "sqlstate", None) == "57014"
    assert raised.value.limit == 50


@pytest.fixture
def words(sqlite_store: Store) -> Store:
    """1,000 messages of 60 short random words each."""
    fill_with_short_words(sqlite_store, count=1000)
    return sqlite_store


def test_the_progress_handler_stops_a_prefix_search_on_either_driver(
    journal: str, words: Store, monkeypatch: pytest.MonkeyPatch, sqlite_driver: str
) -> None:
    """On both drivers (pysqlite3, the `sqlite` extra's, too: its connections are not
    the standard library's class) a statement running at the deadline is stopped by the
    progress handler: the search ends in SearchTimedOut caused by SQLite's interrupt,
    raised by this driver's own error class, and the store goes on working. With no
    limit the same search completes."""
    from hermes_store.sqlite import driver as chosen

    store = words
    _in_journal_mode(store, journal)
    monkeypatch.setenv(TIMEOUT_ENV, "50")
    with pytest.raises(SearchTimedOut, match=TIMEOUT_ENV) as raised:
        SearchRepository(store).search_messages(PREFIXES)
    cause = raised.value.__cause__
    assert isinstance(cause, DBAPIError), repr(cause)
    assert getattr(cause.orig, "sqlite_errorcode", None) == sqlite3.SQLITE_INTERRUPT
    assert type(cause.orig).__module__.split(".")[0] == sqlite_driver
    assert chosen.current().name == sqlite_driver
    monkeypatch.setenv(TIMEOUT_ENV, "0")
    assert SearchRepository(store).search_messages(PREFIXES, limit=3)


@pytest.mark.parametrize("limit", [-1, -5, 10**20, 2**63 - 1])
def test_a_negative_or_huge_limit_is_no_limit_on_both_backends(store: Store, limit: int) -> None:
    """The original binds the limit into SQLite's LIMIT: negative means no limit; on
    PostgreSQL too, and no limit beyond 64 bits fails on either."""
    sessions, messages = SessionRepository(store), MessageRepository(store)
    sessions.create_session("lim", "cli")
    for i in range(25):
        messages.append_message("lim", "user", f"limitless word {i}")
    search = SearchRepository(store)
    assert len(search.search_messages("limitless", limit=limit)) == 25
    assert len(search.search_messages("limitless", limit=limit, offset=-3)) == 25
    assert len(search.search_messages("limitless", limit=limit, offset=20)) == 5


@pytest.mark.parametrize("limit", [None, -5, -1, 0, 1, 20, 2**63 - 1, 2**63, 2**70, 3.7, "7"])
@pytest.mark.parametrize("offset", [None, -3, 0, 5, 2**63 - 2, 2**63 - 1, 2**70, 2.5, "4"])
def test_the_planner_pages_as_the_repositories_do(limit: Any, offset: Any) -> None:
    """The planner bounds a search's page itself (a search does not enter the paging
    module); its rule must stay the repositories' (`bound_limit`, `row_offset`)."""
    from hermes_store.repositories._paging import MAX_ROWS, bound_limit, row_offset
    from hermes_store.search.planner import _page

    start = row_offset(offset)
    assert _page(limit, offset) == (min(bound_limit(limit), MAX_ROWS - start), start)
