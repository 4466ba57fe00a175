"""The SQL of every search route, pinned on both backends: each route's statement as its
builder renders it (sqlite_fts.py, postgres_fts.py, backend.py), in one file per route
per backend under tests/search/route_sql/, so that a change to a route's SQL shows in the
review as a change to its file. The statements are rendered with named parameters
(`:name`); a filter's list renders as SQLAlchemy's expanding placeholder.

`HERMES_STORE_UPDATE_ROUTE_SQL=1 python -m pytest tests/search/test_route_sql.py` writes
the files anew (docs/development.md); read the diff before committing it. The statements
themselves run in every other test of the search."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.engine import Dialect

from hermes_store.search import postgres_fts as pg
from hermes_store.search import sqlite_fts as lite
from hermes_store.search.backend import (
    Edge,
    Filters,
    LikeShape,
    RouteStatement,
    SearchBackend,
    context_statement,
)
from hermes_store.search.literal import estimate_statement, page_statement
from hermes_store.search.query import SearchQuery, read_query

GOLDEN = Path(__file__).parent / "route_sql"
UPDATE_ENV = "HERMES_STORE_UPDATE_ROUTE_SQL"
DIALECTS: dict[str, Dialect] = {
    "sqlite": sqlite.dialect(paramstyle="named"),
    "postgresql": postgresql.psycopg.dialect(paramstyle="named"),  # type: ignore[no-untyped-call]
}

#: no filter; every filter at once (sources, an excluded source, roles, inactive rows
#: left out, two tags); a role filter only (the page is cut from messages alone)
NONE = Filters(None, None, None, False).shape
ALL = Filters(["cli"], ["cron"], ["user"], False, ["work", "urgent"]).shape
ROLES = Filters(None, None, ["assistant"], True).shape
#: a word, a phrase, a prefix, a negated word: every kind of term the tsquery builds
READING = pg.reading_shape(SearchQuery.read('deploy "connection pool" OR retry* NOT drop').fts5)
WORDS = pg.reading_shape(SearchQuery.read("retry deploy").fts5)
SUBSTRING = pg.substring_shape(("数据库", "OR", "Zephyr", "NOT", "x.y"))
PROBE = pg.probe_shape(("postgress", "OR", "ab", "NOT", "zzz"))
LIKE = LikeShape(("LIKE", "LIKE"), False, False)
PG_LIKE = LikeShape(("ILIKE", "LIKE"), False, False)
TOPUP = LikeShape(("LIKE", "LIKE"), True, True)
PG_TOPUP = LikeShape(("ILIKE", "ILIKE"), True, True)

#: the literal tier's filters (Filters objects, not shapes)
NO_FILTERS = Filters(None, None, None, False)
ALL_FILTERS = Filters(["cli"], ["cron"], ["user"], False, ["work", "urgent"])
ROLE_FILTER = Filters(None, None, ["assistant"], True)


class _LiteNoDatabase(lite.SqliteSearch):
    """SQLite's backend without a connection, its trigram index taken as present (the
    statements are only rendered here)."""

    dialect = None

    def has_trigram_index(self) -> bool:
        return True


class _PgNoDatabase(pg.PostgresSearch):
    dialect = None


def _literal_pages(backend: SearchBackend) -> list[tuple[str, RouteStatement]]:
    """The literal tier's page: every kind of term, a window read row by row or through
    the indexes (PostgreSQL), the whole table, an OR of groups."""

    def page(
        query: str, filters: Filters, oldest: bool, edge: Edge | None, window: int
    ) -> RouteStatement:
        parsed = read_query(query)
        statement, _ = page_statement(backend, parsed, filters, edge, window, oldest=oldest)
        return RouteStatement(statement)

    wide = max(backend.literal_index_windows, default=0)
    variants = [
        (
            "one literal, the newest window",
            page("~/.config/zephyr.yaml", NO_FILTERS, False, "newest", backend.literal_window),
        ),
        (
            "a literal, a negated literal, a word, a negated word, the whole table, every filter",
            page("x.y NOT a->b deploy NOT drop", ALL_FILTERS, False, None, 0),
        ),
        (
            "short punctuation (no index), the oldest window",
            page("%", NO_FILTERS, True, "oldest", backend.literal_window),
        ),
        (
            "two groups (OR), a negated literal, the whole table, a role filter",
            page("chat-send OR x.y deploy NOT %", ROLE_FILTER, False, None, 0),
        ),
    ]
    if wide:
        variants.append(
            (
                "one literal, a window read through the indexes",
                page("~/.config/zephyr.yaml", NO_FILTERS, False, "newest", wide),
            )
        )
    return variants


def _literal_estimate(backend: SearchBackend) -> list[tuple[str, RouteStatement]]:
    """The literal tier's budget: the candidates of each literal above :floor."""
    parsed = read_query("~/.config/zephyr.yaml NOT % x.y NOT a->b")
    return [
        (name, RouteStatement(estimate_statement(backend, parsed, filters, 0)[0]))
        for name, filters in (
            ("four literals, no filter", NO_FILTERS),
            ("tool rows left out", ALL_FILTERS),
        )
    ]


Variants = Callable[[], list[tuple[str, RouteStatement]]]


def _substring() -> tuple[pg.SubstringShape, ...]:
    assert SUBSTRING is not None
    return (SUBSTRING[0],)


def _probe() -> tuple[int, ...]:
    assert PROBE is not None
    return PROBE[0]


#: backend -> route -> its variants (name, statement)
ROUTES: dict[str, dict[str, Variants]] = {
    "sqlite": {
        # the word route (FTS5) and the trigram route share their two statements
        "ranked_top": lambda: [
            (
                "word index, relevance",
                lite.ranked_top_statement("messages_fts", NONE, None, 2000, 20),
            ),
            (
                "word index, every filter",
                lite.ranked_top_statement("messages_fts", ALL, None, 2000, 20),
            ),
            (
                "trigram index, the newest window (zero-hit retry)",
                lite.ranked_top_statement("messages_fts_trigram", NONE, "newest", 2000, 20),
            ),
        ],
        "ranked": lambda: [
            (
                "word index, relevance",
                lite.ranked_statement("messages_fts", NONE, None, None, 2000, 20),
            ),
            (
                "word index, newest",
                lite.ranked_statement("messages_fts", NONE, "DESC", None, 2000, 20),
            ),
            (
                "word index, oldest, every filter",
                lite.ranked_statement("messages_fts", ALL, "ASC", None, 2000, 20),
            ),
            (
                "trigram index, oldest, the oldest window (zero-hit retry)",
                lite.ranked_statement("messages_fts_trigram", NONE, "ASC", "oldest", 2000, 20),
            ),
        ],
        "retry_sample": lambda: [
            ("trigram index", lite.retry_sample_statement("messages_fts_trigram"))
        ],
        "retry_window": lambda: [
            ("newest", lite.retry_window_statement("messages_fts_trigram", "newest")),
            ("oldest", lite.retry_window_statement("messages_fts_trigram", "oldest")),
        ],
        "scan": lambda: [
            ("two terms, any", lite.scan_statement(NONE, LIKE)),
            ("two terms, any, every filter", lite.scan_statement(ALL, LIKE)),
            ("pending-range top-up: every term, an id range", lite.scan_statement(NONE, TOPUP)),
        ],
        "context": lambda: [("two hits", context_statement(2))],
        "literal_page": lambda: _literal_pages(_LiteNoDatabase(None)),  # type: ignore[arg-type]
        "literal_estimate": lambda: _literal_estimate(_LiteNoDatabase(None)),  # type: ignore[arg-type]
    },
    "postgresql": {
        "word": lambda: [
            ("RUM, relevance", pg.word_statement(READING, NONE, None, "rum")),
            ("RUM, oldest", pg.word_statement(WORDS, NONE, "oldest", "rum")),
            ("GIN, newest, every filter", pg.word_statement(READING, ALL, "newest", "gin")),
            ("GIN, relevance, a role filter", pg.word_statement(WORDS, ROLES, None, "gin")),
        ],
        "word_window": lambda: [
            ("newest", pg.word_window_statement(READING, NONE, False)),
            ("oldest, every filter", pg.word_window_statement(WORDS, ALL, True)),
        ],
        "word_page": lambda: [
            ("relevance", pg.word_page_statement(READING, NONE, None)),
            ("newest, every filter", pg.word_page_statement(WORDS, ALL, "newest")),
        ],
        "word_estimate": lambda: [
            ("no filter", pg.word_estimate_statement(WORDS, NONE)),
            ("every filter", pg.word_estimate_statement(READING, ALL)),
        ],
        "table_estimate": lambda: [("the table", pg.TABLE_ESTIMATE)],
        "common_words": lambda: [("ANALYZE's statistics", pg.COMMON_WORDS)],
        "substring": lambda: [
            ("newest", pg.substring_statement(*_substring(), NONE, None, False)),
            (
                "oldest, fenced (zero-hit retry), every filter",
                pg.substring_statement(*_substring(), ALL, "oldest", True),
            ),
        ],
        "substring_window": lambda: [
            ("newest", pg.substring_window_statement(*_substring(), NONE, False)),
            ("oldest, every filter", pg.substring_window_statement(*_substring(), ALL, True)),
        ],
        "page": lambda: [
            ("newest", pg.page_statement(NONE, False)),
            ("oldest, every filter", pg.page_statement(ALL, True)),
        ],
        "probe": lambda: [("two alternatives, a negated token", pg.probe_statement(_probe()))],
        "scan": lambda: [
            ("two terms, any", pg.scan_statement(NONE, PG_LIKE)),
            ("pending-range top-up, every filter", pg.scan_statement(ALL, PG_TOPUP)),
        ],
        "scan_span": lambda: [
            ("two terms, any", pg.scan_span_statement(NONE, PG_LIKE)),
            ("every filter", pg.scan_span_statement(ALL, PG_LIKE)),
        ],
        "context": lambda: [("hits by id", pg.CONTEXT_BY_ID)],
        "literal_page": lambda: _literal_pages(_PgNoDatabase(None)),  # type: ignore[arg-type]
        "literal_estimate": lambda: _literal_estimate(_PgNoDatabase(None)),  # type: ignore[arg-type]
    },
}

CASES = [(backend, route) for backend, routes in ROUTES.items() for route in routes]


def render(backend: str, route: str) -> str:
    """The route's golden file: each variant's SQL after a comment naming it (trailing
    spaces dropped)."""
    parts = []
    for name, statement in ROUTES[backend][route]():
        sql = "\n".join(line.rstrip() for line in statement.sql(DIALECTS[backend]).splitlines())
        parts.append(f"-- {name}\n{sql};\n")
    return "\n".join(parts)


@pytest.mark.parametrize(("backend", "route"), CASES, ids=[f"{b}-{r}" for b, r in CASES])
def test_each_route_renders_the_sql_of_its_file(backend: str, route: str) -> None:
    path = GOLDEN / backend / f"{route}.sql"
    rendered = render(backend, route)
    if os.environ.get(UPDATE_ENV) == "1":
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(rendered, encoding="utf-8")
    assert path.exists(), f"{path} is missing: run with {UPDATE_ENV}=1 to write it"
    assert rendered == path.read_text(encoding="utf-8"), (
        f"the SQL of {backend} route {route!r} changed: run with {UPDATE_ENV}=1 and "
        f"review the diff of {path.relative_to(GOLDEN.parent.parent.parent)}"
    )


def test_every_golden_file_is_a_route() -> None:
    files = {(p.parent.name, p.stem) for p in GOLDEN.glob("*/*.sql")}
    assert files == set(CASES)


def test_user_text_is_never_spelled_into_a_statement() -> None:
    # the shape of a query decides the SQL; its text is bound
    read = SearchQuery.read('zephyrine "quartz pipeline" OR nimbus*')
    shape, params = pg.reading_shape(read.fts5), pg.tsquery_params(read.fts5)
    sql = pg.word_statement(shape, NONE, None, "rum").sql(DIALECTS["postgresql"])
    for word in ("zephyrine", "quartz", "nimbus"):
        assert word not in sql
    assert params == {
        "w0": "zephyrine",
        "w1": "quartz pipeline",
        "wl1": "quartz pipeline",
        "w2": "'nimbus':*",
    }
    built = pg.substring_shape(("数据库",))
    assert built is not None and built[1] == {"p0": "%数据库%"}
    assert pg.substring_shape(("OR",)) is None


@pytest.mark.parametrize("backend", [_LiteNoDatabase, _PgNoDatabase], ids=["sqlite", "postgresql"])
def test_a_literal_page_is_built_once_per_shape(backend: type[SearchBackend]) -> None:
    """Two searches of one shape share the statement (and so its compiled form); only
    their parameters differ. A literal of another shape gets a statement of its own (on
    PostgreSQL a caseless literal is checked with LIKE, not ILIKE)."""
    search = backend(None)  # type: ignore[arg-type]  # no statement is run

    def page(query: str) -> tuple[Any, dict[str, Any]]:
        return page_statement(search, read_query(query), ALL_FILTERS, "newest", 1, oldest=False)

    first, first_params = page("x.y NOT a->b deploy")
    second, second_params = page("q.z NOT c->d rollout")
    assert first is second
    assert first_params.keys() == second_params.keys() and first_params != second_params
    other, _ = page("数.据 NOT a->b deploy")
    assert (other is first) == (backend is _LiteNoDatabase)
