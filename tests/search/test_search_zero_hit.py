"""The zero-hit retry is bounded (issue 41), on SQLite and on PostgreSQL: a word query
that matches no word is asked again by substring; where the newest rows say the whole
table holds more candidates than limits.RETRY_CHECKS (a misspelling that extends a
frequent word: `postgress` shares all its trigrams but one with `postgres`), only the
newest rows that budget allows are read, whatever the table holds, and the hits'
`warnings` say so (the facade logs them, the command prints them). Where the budget
holds, the retry is what it was: a real substring hit anywhere is found. The literal
tier (a quoted or punctuated term) keeps to the same budget where its windows fall short
(literal.py)."""

from __future__ import annotations

import logging
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import event

from hermes_store import migrate
from hermes_store.compat import SessionDB
from hermes_store.repositories.messages import MessageRepository
from hermes_store.repositories.sessions import SessionRepository
from hermes_store.search import limits, literal, search_messages
from hermes_store.search.postgres_fts import PostgresSearch, _needles, probe_shape
from hermes_store.search.sqlite_fts import trigram_probe
from hermes_store.store import Store

#: a message holding `postgress` inside a longer word: the word index does not find it
#: for `postgress`, the substring retry does
OLD_HIT = "see xpostgressy in the old notes"
#: a word glued to CJK text, found by substring only (#54242)
GLUED = "the 数据foobar库 note"
#: the budget the tests run with (PostgreSQL reads that many rows past it)
CHECKS, SAMPLE = 20, 64


def search(store: Store, query: str, **options: Any) -> limits.SearchHits:
    with store.read() as conn:
        return search_messages(conn, query, **options)


def _candidates(store: Store, first: int, count: int) -> None:
    """`count` user messages holding `postgres` and `session` (every trigram of
    `postgress`), none holding `postgress`."""
    rows = [
        {"role": "user", "content": f"postgres session note {n}"}
        for n in range(first, first + count)
    ]
    MessageRepository(store).append_messages("s", rows)


@pytest.fixture
def small_budget(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(limits, "RETRY_CHECKS", CHECKS)
    monkeypatch.setattr(limits, "RETRY_SAMPLE", SAMPLE)
    # the literal tier's estimate in tables of a few hundred rows
    monkeypatch.setattr(literal, "SMALL_TABLE_CHECKS", 1)


def _crowd(store: Store) -> dict[str, int]:
    """The old hit and the glued word first, then 300 candidates of `postgress`."""
    SessionRepository(store).create_session("s", "cli")
    messages = MessageRepository(store)
    ids = {
        "old": messages.append_message("s", "user", OLD_HIT),
        "glued": messages.append_message("s", "assistant", GLUED),
    }
    _candidates(store, 0, 300)
    return ids


@pytest.fixture
def crowded(store: Store, small_budget: None) -> dict[str, int]:
    return _crowd(store)


def _span_read(warning: str) -> int:
    found = re.search(r"read only the newest ([\d,]+) messages", warning)
    assert found, warning
    return int(found.group(1).replace(",", ""))


def test_past_the_budget_only_the_newest_rows_are_read_and_the_hits_say_so(
    store: Store, crowded: dict[str, int]
) -> None:
    hits = search(store, "postgress")
    # the old hit is older than the rows the budget allows: not read, and said so
    assert hits == []
    assert len(hits.warnings) == 1
    warning = hits.warnings[0]
    assert "'postgress'" in warning and f"({CHECKS:,})" in warning
    read = _span_read(warning)
    expected = CHECKS if store.dialect == "postgresql" else SAMPLE
    assert read == expected
    # the bound does not grow with the table: twice the candidates, the same rows read
    _candidates(store, 300, 300)
    again = search(store, "postgress")
    assert again == [] and _span_read(again.warnings[0]) == read


def test_within_the_budget_the_retry_reads_the_whole_table(
    store: Store, crowded: dict[str, int], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(limits, "RETRY_CHECKS", 10_000)
    hits = search(store, "postgress")
    assert [h["id"] for h in hits] == [crowded["old"]]
    assert hits.warnings == ()


def test_a_real_substring_hit_is_found_whatever_the_table_holds(
    store: Store, crowded: dict[str, int]
) -> None:
    # its trigrams are rare: the newest rows hold no candidate, the whole table is asked
    hits = search(store, "foobar")
    assert [h["id"] for h in hits] == [crowded["glued"]]
    assert hits.warnings == ()
    assert search(store, "foobar", sort="oldest") == hits


@pytest.mark.parametrize("sort", [None, "newest", "oldest"])
def test_a_substring_in_many_rows_fills_its_page_from_the_newest_rows(
    store: Store, crowded: dict[str, int], monkeypatch: pytest.MonkeyPatch, sort: str | None
) -> None:
    # `ostgre` matches no word and is in every candidate: the newest rows (the oldest
    # for sort="oldest") hold a whole window of matches (those the route ranks or
    # orders by time, fewer here than the rows the budget reads), which is what the
    # whole table gives
    monkeypatch.setattr(limits, "RANK_WINDOW", 10)
    monkeypatch.setattr(limits, "TIME_WINDOW", 10)
    bounded = search(store, "ostgre", limit=5, sort=sort)
    assert len(bounded) == 5 and bounded.warnings == ()
    monkeypatch.setattr(limits, "RETRY_CHECKS", 10_000)
    whole = search(store, "ostgre", limit=5, sort=sort)
    assert [h["id"] for h in whole] == [h["id"] for h in bounded]


def test_past_the_budget_sqlite_reads_the_same_in_either_journal_mode(
    journal_db: str, small_budget: None
) -> None:
    store = Store(journal_db)
    try:
        _crowd(store)
        hits = search(store, "postgress")
        assert hits == [] and _span_read(hits.warnings[0]) == SAMPLE
    finally:
        store.close()


def test_past_the_budget_postgresql_never_asks_pg_trgm_for_the_whole_table(
    pg_fresh_db: str, small_budget: None
) -> None:
    store = Store(pg_fresh_db)
    try:
        _crowd(store)
        _walks_the_span_only(store)
    finally:
        store.close()


def _walks_the_span_only(store: Store) -> None:
    statements: list[tuple[str, Any]] = []

    def record(conn: Any, cursor: Any, statement: str, params: Any, *rest: Any) -> None:
        statements.append((statement, params))

    event.listen(store.engine, "before_cursor_execute", record)
    try:
        assert search(store, "postgress") == []
    finally:
        event.remove(store.engine, "before_cursor_execute", record)
    patterns = [(s, p) for s, p in statements if "ILIKE" in s and "%postgress%" in str(p)]
    # one statement reads the substring, the span walked row by row (behind OFFSET 0)
    assert len(patterns) == 1
    sql, params = patterns[0]
    assert "FROM messages) - %(span)s" in sql and "OFFSET 0" in sql
    assert params["span"] == CHECKS
    probes = [p for s, p in statements if "count(*) FILTER" in s]
    assert len(probes) == 1 and probes[0]["sample"] == SAMPLE


def test_the_facade_logs_the_warning(
    backend_url: str, small_budget: None, caplog: pytest.LogCaptureFixture
) -> None:
    db: Any = SessionDB(url=backend_url)
    try:
        db.create_session("s", "cli")
        _candidates(db.store, 0, 200)
        with caplog.at_level(logging.WARNING, logger="hermes_store.compat"):
            assert db.search_messages("postgress") == []
        assert any("read only the newest" in r.getMessage() for r in caplog.records)
    finally:
        db.close()


def test_the_command_prints_the_warning_on_stderr(tmp_path: Path) -> None:
    # the real budget: more candidates than limits.RETRY_CHECKS in the newest rows
    url = str(tmp_path / "state.db")
    migrate.upgrade(url)
    store = Store(url)
    try:
        SessionRepository(store).create_session("s", "cli")
        for first in range(0, limits.RETRY_CHECKS + 500, 1_000):
            _candidates(store, first, 1_000)
    finally:
        store.close()
    cli = str(Path(sys.executable).with_name("hermes-store"))
    env = {**os.environ, "HERMES_HOME": str(tmp_path)}
    env.pop("HERMES_STORE_URL", None)
    for form, empty in (("--json", "[]"), ("--csv", None), (None, "no matches")):
        done = subprocess.run(
            [cli, "search", "postgress", "--url", url, *([form] if form else [])],
            capture_output=True,
            text=True,
            env=env,
            timeout=120,
        )
        assert done.returncode == 0, done.stderr
        if empty is not None:
            assert done.stdout.strip() == empty
        assert "warning: no word matched 'postgress'" in done.stderr, form


def test_the_probes_ask_for_what_the_indexes_read() -> None:
    # pg_trgm: each inner trigram of a word of 3+ characters, a 2-character word whole
    assert _needles("Postgress") == ["pos", "ost", "stg", "tgr", "gre", "res", "ess"]
    assert _needles('a1.zq"') == ["a1", "zq"]
    assert _needles("x") == []
    built = probe_shape(("postgress", "OR", "ab", "NOT", "zzz"))
    assert built is not None
    shape, params = built
    # the statement: tests/search/route_sql/postgresql/probe.sql
    assert shape == (7, 1)
    assert list(params.values()) == ["pos", "ost", "stg", "tgr", "gre", "res", "ess", "ab"]
    assert probe_shape(("OR",)) is None
    # FTS5's trigram index: every trigram of each positive token, an AND per alternative
    assert trigram_probe(["dockerr"]) == '("doc" AND "ock" AND "cke" AND "ker" AND "err")'
    assert trigram_probe(["ab", "NOT", "xyz"]) is None
    assert trigram_probe(["abc", "OR", "Def"]) == '("abc") OR ("def")'


# --- the literal tier (a quoted or punctuated term) keeps to the same budget ---------------

#: the oldest row holds the literal; every later candidate holds each of its trigrams (and
#: pg_trgm's) but neither the literal nor its words
LITERAL = "~/.config/zephyr.yaml"
OLD_LITERAL = f"see {LITERAL} in the old notes."
NEAR_MISS = "~/.xconfig/zephyr.yamlx"


def _literal_candidates(store: Store, first: int, count: int) -> None:
    rows = [
        {"role": "user", "content": f"open {NEAR_MISS} {n}"} for n in range(first, first + count)
    ]
    MessageRepository(store).append_messages("s", rows)


def _literal_crowd(store: Store) -> int:
    SessionRepository(store).create_session("s", "cli")
    old = MessageRepository(store).append_message("s", "user", OLD_LITERAL)
    _literal_candidates(store, 0, 300)
    return old


def _literal_span(warning: str) -> int:
    found = re.search(r"the literal search for .* read only the newest ([\d,]+) messages", warning)
    assert found, warning
    return int(found.group(1).replace(",", ""))


def _record_pages(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, int] | None]:
    """The bound of every statement the literal tier runs (None: the whole table)."""
    from hermes_store.search import literal

    pages: list[tuple[str, int] | None] = []
    original = literal._page

    def recorded(*args: Any) -> Any:
        pages.append(args[5])
        return original(*args)

    monkeypatch.setattr(literal, "_page", recorded)
    return pages


@pytest.fixture
def literal_crowded(store: Store, small_budget: None) -> int:
    return _literal_crowd(store)


def test_a_literal_found_nowhere_past_the_budget_reads_the_newest_candidates_only(
    store: Store, literal_crowded: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    pages = _record_pages(monkeypatch)
    hits = search(store, LITERAL)
    # the old hit is older than the ids that hold the budget's candidates: not read
    assert hits == []
    assert len(hits.warnings) == 1 and repr(LITERAL) in hits.warnings[0]
    # every candidate in the sample: the budget's candidates are the newest CHECKS ids
    assert _literal_span(hits.warnings[0]) == CHECKS
    highest = literal_crowded + 300
    assert pages and all(page == ("newest", highest - CHECKS) for page in pages)
    # twice the candidates: the same ids read, never the whole table
    _literal_candidates(store, 300, 300)
    pages.clear()
    again = search(store, LITERAL)
    assert again == [] and _literal_span(again.warnings[0]) == CHECKS
    assert None not in pages and all(page == ("newest", highest + 300 - CHECKS) for page in pages)


def test_a_literal_within_the_budget_reads_the_whole_table(
    store: Store, literal_crowded: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(limits, "RETRY_CHECKS", 10_000)
    pages = _record_pages(monkeypatch)
    hits = search(store, LITERAL)
    assert [h["id"] for h in hits] == [literal_crowded]
    assert hits.warnings == ()
    assert pages[-1] is None  # the whole table, as before
    # ten literals OR-ed, one of them the old row's: found too
    assert [h["id"] for h in search(store, _ten_literals())] == [literal_crowded]


def test_a_rare_literal_is_estimated_from_its_own_candidates(
    store: Store, literal_crowded: int
) -> None:
    # `notes.` has no candidate among the newest ids: the whole table is asked
    hits = search(store, "notes.")
    assert [h["id"] for h in hits] == [literal_crowded] and hits.warnings == ()


def test_a_table_within_the_budget_is_read_whole_whatever_the_estimate(
    store: Store, literal_crowded: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    # both literals have a candidate in every later row (`zephyr.yaml` is even in them),
    # so their summed estimate is twice the table; the table itself spans fewer ids
    # than the budget: it is read whole and the old row, the only one holding both, found
    monkeypatch.setattr(limits, "RETRY_CHECKS", 400)
    pages = _record_pages(monkeypatch)
    hits = search(store, f"{LITERAL} zephyr.yaml")
    assert [h["id"] for h in hits] == [literal_crowded]
    assert hits.warnings == ()
    assert pages[-1] is None


def _ten_literals() -> str:
    others = ("ops@zephyr.com", "99.6%", "--force-with-leash", "HEAD~4", "v1.2.3-rc9")
    more = ("src/module_9999.py", "/etc/zephyr.conf", "user@example.org", "doesn't")
    return " OR ".join((LITERAL, *others, *more))


def test_ten_literals_found_nowhere_read_the_newest_candidates_only(
    store: Store, literal_crowded: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    pages = _record_pages(monkeypatch)
    hits = search(store, _ten_literals())
    assert hits == [] and len(hits.warnings) == 1
    # the candidates of every literal count: at most the one literal's span
    span = _literal_span(hits.warnings[0])
    assert 1 <= span <= CHECKS
    assert None not in pages


@pytest.mark.parametrize("sort", [None, "newest", "oldest"])
def test_a_literal_in_many_rows_past_the_budget_fills_its_page_exactly(
    store: Store, literal_crowded: int, monkeypatch: pytest.MonkeyPatch, sort: str | None
) -> None:
    # every candidate holds `zephyr.yamlx`: the newest (oldest) ids the budget reads
    # hold a whole window of hits, which is what the whole table gives, and no warning
    monkeypatch.setattr(limits, "TIME_WINDOW", 10)
    bounded = search(store, "zephyr.yamlx", limit=5, sort=sort)
    assert len(bounded) == 5 and bounded.warnings == ()
    monkeypatch.setattr(limits, "RETRY_CHECKS", 10_000)
    whole = search(store, "zephyr.yamlx", limit=5, sort=sort)
    assert [h["id"] for h in whole] == [h["id"] for h in bounded]


@pytest.mark.usefixtures("sqlite_driver")
def test_a_literal_past_the_budget_reads_the_same_on_sqlite_in_either_journal_mode(
    journal_db: str, small_budget: None
) -> None:
    store = Store(journal_db)
    try:
        _literal_crowd(store)
        for query in (LITERAL, _ten_literals()):
            hits = search(store, query)
            assert hits == [] and _literal_span(hits.warnings[0]) <= CHECKS
    finally:
        store.close()


def test_a_literal_past_the_budget_on_postgresql_checks_the_newest_ids_only(
    pg_fresh_db: str, small_budget: None
) -> None:
    store = Store(pg_fresh_db)
    try:
        old = _literal_crowd(store)
        statements: list[tuple[str, Any]] = []

        def record(conn: Any, cursor: Any, statement: str, params: Any, *rest: Any) -> None:
            statements.append((statement, params))

        event.listen(store.engine, "before_cursor_execute", record)
        try:
            assert search(store, LITERAL) == []
        finally:
            event.remove(store.engine, "before_cursor_execute", record)
        probes = [p for s, p in statements if "count(*) FILTER" in s]
        assert len(probes) == 1 and probes[0]["floor"] == old + 300 - SAMPLE
        # every statement that checks the literal is bounded to the newest CHECKS ids
        checks = [(s, p) for s, p in statements if "ILIKE" in s and "zephyr.yaml%" in str(p)]
        assert checks
        assert all(p.get("floor") == old + 300 - CHECKS for _, p in checks)
    finally:
        store.close()


def test_the_literal_estimate_asks_for_what_pg_trgm_reads() -> None:
    from hermes_store.search.postgres_fts import _index_pattern, _pattern_needles

    # words of 3+ characters between dropped separators: their inner trigrams only
    assert _index_pattern(LITERAL) == "%config%zephyr%yaml%"
    assert [n for n, _ in _pattern_needles(LITERAL)][:4] == ["con", "onf", "nfi", "fig"]
    assert not any(anchored for _, anchored in _pattern_needles(LITERAL))
    # a kept separator pads the word beside it: its edge trigrams are asked for too
    start, end = "([^[:alnum:]]|^)", "([^[:alnum:]]|$)"
    assert _pattern_needles("HEAD~4") == [
        ("hea", False),
        ("ead", False),
        ("ad" + end, True),
        (start + "4", True),
    ]
    assert _pattern_needles("99.6%") == [("99" + end, True), (start + "6" + end, True)]
    assert _pattern_needles("-->") == []  # no trigram: every non-tool row is a candidate


def test_the_facade_logs_the_literal_warning(
    backend_url: str, small_budget: None, caplog: pytest.LogCaptureFixture
) -> None:
    db: Any = SessionDB(url=backend_url)
    try:
        db.create_session("s", "cli")
        _literal_candidates(db.store, 0, 200)
        with caplog.at_level(logging.WARNING, logger="hermes_store.compat"):
            assert db.search_messages(LITERAL) == []
        assert any("the literal search for" in r.getMessage() for r in caplog.records)
    finally:
        db.close()


def test_a_table_of_a_few_budgets_is_read_whole_without_an_estimate(
    store: Store, literal_crowded: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A table spanning at most SMALL_TABLE_CHECKS budgets of ids is read whole: no
    estimate statement, the old hit found with no warning; past that size the estimate
    is asked and the budget keeps the read to the newest ids."""
    estimates: list[Any] = []
    estimate = literal.estimate_statement

    def recorded(*args: Any) -> Any:
        estimates.append(args[3])
        return estimate(*args)

    monkeypatch.setattr(literal, "estimate_statement", recorded)
    # 301 rows within 16 budgets of CHECKS ids
    monkeypatch.setattr(literal, "SMALL_TABLE_CHECKS", 16)
    hits = search(store, LITERAL)
    assert [h["id"] for h in hits] == [literal_crowded] and hits.warnings == ()
    assert estimates == []
    monkeypatch.setattr(literal, "SMALL_TABLE_CHECKS", 14)
    again = search(store, LITERAL)
    assert again == [] and len(again.warnings) == 1 and len(estimates) == 1


@pytest.mark.parametrize("sort", [None, "newest"])
def test_many_literals_past_the_index_budget_are_never_read_through_the_indexes(
    pg_fresh_db: str, small_budget: None, monkeypatch: pytest.MonkeyPatch, sort: str | None
) -> None:
    """pg_trgm hands over a literal's candidates from the whole table whatever the
    window, so windows read through the indexes cost every literal's posting lists: a
    reading whose literals times the table's ids pass `literal_index_rows` skips them,
    and past the budget reads the rows at the walk's end one by one, the budget's checks
    shared among its literals. One literal in the same table reads its index windows as
    before."""
    store = Store(pg_fresh_db)
    try:
        old = _literal_crowd(store)
        highest = old + 300

        def bound(ids: int) -> tuple[str, int]:
            return ("newest", highest - ids)

        monkeypatch.setattr(PostgresSearch, "literal_window", 8)
        monkeypatch.setattr(PostgresSearch, "literal_widest_window", 16)
        monkeypatch.setattr(PostgresSearch, "literal_index_windows", (32, 64))
        # one literal in this table's 301 ids pays for the index windows, two do not
        monkeypatch.setattr(PostgresSearch, "literal_index_rows", 301)
        pages = _record_pages(monkeypatch)
        assert search(store, LITERAL, sort=sort) == []
        assert bound(32) in pages and bound(64) in pages
        pages.clear()
        ten = search(store, _ten_literals(), sort=sort)
        assert ten == [] and len(ten.warnings) == 1
        # the first window only: the budget's 20 checks among ten literals are 2 rows,
        # fewer than the window's 8 already read
        assert pages == [bound(8)]
        assert _literal_span(ten.warnings[0]) == 8
        # two literals: 10 rows each, 2 more than the first window read
        pages.clear()
        two = search(store, f"{LITERAL} OR ops@zephyr.com", sort=sort)
        assert two == [] and _literal_span(two.warnings[0]) == 10
        assert pages == [bound(8), bound(10)]
        # within the budget the whole table is read through the indexes, as before, and
        # the old row found
        monkeypatch.setattr(limits, "RETRY_CHECKS", 10_000)
        pages.clear()
        assert [h["id"] for h in search(store, _ten_literals(), sort=sort)] == [old]
        assert pages == [bound(8), None]
    finally:
        store.close()
