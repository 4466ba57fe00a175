"""What differs between SQLite and PostgreSQL lives in one dialect per database kind
(hermes_store/runtime/backends.py), chosen by dialect name in one function: its capabilities, its
store part (runtime/store_backends.py), its migration, adoption and copy part
(migration/dialects.py; for the revisions, the frozen migrations/_dialects.py), its repository SQL
part (repositories/_dialect.py) and its search part (search/backend.py). The modules that use
them ask no dialect question of their own."""

from __future__ import annotations

import importlib
import re
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import create_engine, create_mock_engine
from sqlalchemy.pool import NullPool

from hermes_store._migrations import _dialects as frozen
from hermes_store.errors import MigrationError
from hermes_store.migration import dialects
from hermes_store.runtime.backends import dialect_for

REPO_ROOT = Path(__file__).resolve().parents[2]
ASKS_THE_DIALECT = re.compile(r"dialect\.name|is_postgresql\(\)")

GATHERED = [
    "hermes_store/migrate.py",
    "hermes_store/migration/adoption.py",
    "hermes_store/migration/copy.py",
    "hermes_store/contract.py",
    "migrations/_pg_search.py",
    "migrations/_fts_layouts.py",
]


@pytest.mark.parametrize("relative", GATHERED)
def test_users_of_the_backend_classes_ask_no_dialect_question(relative):
    source = (REPO_ROOT / relative).read_text(encoding="utf-8")
    found = [line.strip() for line in source.splitlines() if ASKS_THE_DIALECT.search(line)]
    assert not found, f"{relative} asks the dialect itself: {found}"


def test_ops_asks_its_backend_class_only():
    """migrations/_ops.py keeps is_postgresql() for the revisions' own branches, and
    answers it from the frozen backend class."""
    source = (REPO_ROOT / "migrations" / "_ops.py").read_text(encoding="utf-8")
    assert "dialect.name" not in source
    uses = [line.strip() for line in source.splitlines() if "is_postgresql()" in line]
    assert uses == ["def is_postgresql() -> bool:"], uses


@pytest.mark.parametrize(
    ("url", "runtime", "revisions"),
    [
        ("sqlite://", dialects.SQLiteMigrationDialect, frozen.SQLiteOps),
        (
            "postgresql+psycopg://u@localhost/x",
            dialects.PostgreSQLMigrationDialect,
            frozen.PostgreSQLOps,
        ),
    ],
)
def test_the_backend_is_chosen_by_dialect_name(url, runtime, revisions):
    if url.startswith("postgresql"):
        pytest.importorskip("psycopg")
    engine = create_engine(url, poolclass=NullPool)  # never connected
    try:
        assert type(dialect_for(engine).migration) is runtime
    finally:
        engine.dispose()
    assert revisions.name == runtime.name


@pytest.mark.parametrize(
    ("url", "store", "sql", "search"),
    [
        ("sqlite://", "SQLiteStoreDialect", "SQLiteSQLDialect", "sqlite_fts.SqliteSearch"),
        (
            "postgresql+psycopg://u@localhost/x",
            "PostgreSQLStoreDialect",
            "PostgreSQLSQLDialect",
            "postgres_fts.PostgresSearch",
        ),
    ],
)
def test_one_dialect_holds_every_layer_s_part(url: str, store: str, sql: str, search: str) -> None:
    from hermes_store.repositories import _dialect
    from hermes_store.runtime import backends, store_backends

    if url.startswith("postgresql"):
        pytest.importorskip("psycopg")
    engine = create_engine(url, poolclass=NullPool)  # never connected
    try:
        dialect = dialect_for(engine)
    finally:
        engine.dispose()
    assert dialect is backends.dialect_named(engine.dialect.name)
    assert dialect.store is getattr(store_backends, store)
    assert type(dialect.sql) is getattr(_dialect, sql)
    assert dialect.migration.name == dialect.name
    module, name = search.split(".")
    assert dialect.search is getattr(importlib.import_module(f"hermes_store.search.{module}"), name)


#: Each module that defines a part of the dialects, and the line that registers it
#: there (the search backends register as they subclass SearchBackend).
REGISTERS = {
    "migration/dialects.py": r'^dialect_named\("sqlite"\)\.migration = ',
    "runtime/store_backends.py": r'^dialect_named\("sqlite"\)\.store = ',
    "repositories/_dialect.py": r'^dialect_named\("sqlite"\)\.sql = ',
    "search/backend.py": r"^\s+dialect_named\(cls\.dialect\)\.search = cls$",
}


@pytest.mark.parametrize("relative", REGISTERS)
def test_no_module_keeps_a_registry_of_its_own(relative: str) -> None:
    """The per-dialect classes are registered in runtime/backends.py only: each module that
    defines a part sets it in the dialect and keeps no table of its own, and the search
    backend is picked from the dialect's `search` part (`backend_for` reads
    `dialect_for`); the revisions keep their frozen table."""
    source = (REPO_ROOT / "hermes_store" / relative).read_text(encoding="utf-8")
    assert "_BACKENDS" not in source and "_REGISTRY" not in source, relative
    assert re.search(REGISTERS[relative], source, re.M), relative
    if relative == "search/backend.py":
        assert "return dialect_for(conn).search(conn)" in source  # backend_for reads the dialect
    else:
        assert "def backend_for" not in source, relative


def test_the_search_backend_is_the_dialect_s_search_part() -> None:
    from hermes_store.search import backend

    engine = create_engine("sqlite://", poolclass=NullPool)
    try:
        with engine.connect() as conn:
            assert type(backend.backend_for(conn)) is dialect_for(conn).search
    finally:
        engine.dispose()


def test_an_unknown_dialect_is_refused_with_a_clear_error():
    # a mock engine has a dialect and no driver (nothing here connects)
    engine = create_mock_engine("mysql://u@localhost/x", lambda *a, **k: None)
    with pytest.raises(MigrationError, match="SQLite and PostgreSQL, not mysql"):
        dialect_for(engine)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("value", "column_type", "fits"),
    [
        ("text", "text", True),
        (b"\x00", "text", False),
        (7, "text", False),
        (2**63 - 1, "bigint", True),
        (2**63, "bigint", False),
        (2**31, "integer", False),
        ("7", "bigint", False),
        (1.5, "double precision", True),
        (3, "double precision", True),
        ("1.5", "double precision", False),
        (True, "bigint", True),
    ],
)
def test_postgresql_says_which_values_it_cannot_hold(value, column_type, fits):
    why = dialects.PostgreSQLMigrationDialect().unfit_value(value, column_type)
    assert (why is None) is fits, why
    assert dialects.SQLiteMigrationDialect().unfit_value(value, column_type) is None


def test_a_store_resolves_its_dialect_once_when_it_opens(store: Any) -> None:
    """`store.dialect` is the dialect `dialect_for` picks for its engine, the same object
    for the store's whole life; its run-time part is an instance of that dialect's
    `store` class. It still reads as its name for callers that compare or key by it."""
    dialect = store.dialect
    assert dialect is dialect_for(store.engine)
    assert type(store._runtime) is dialect.store
    with store.read() as conn:
        assert dialect_for(conn) is dialect
    name = store.engine.dialect.name
    assert dialect == name and dialect.name == name and str(dialect) == name
    assert {name: 1}[dialect] == 1 and dialect in {name}
    assert dialect != ({"sqlite", "postgresql"} - {name}).pop()


@pytest.mark.parametrize(
    ("name", "capabilities"),
    [
        (
            "sqlite",
            {
                "in_process": True,
                "fts5": True,
                "shared_with_the_original": True,
                "system_catalogues": False,
            },
        ),
        (
            "postgresql",
            {
                "in_process": False,
                "fts5": False,
                "shared_with_the_original": False,
                "system_catalogues": True,
            },
        ),
    ],
)
def test_each_dialect_answers_the_capabilities_code_asks(
    name: str, capabilities: dict[str, bool]
) -> None:
    from hermes_store.runtime import backends

    dialect = backends.dialect_named(name)
    assert {key: getattr(dialect, key) for key in capabilities} == capabilities
    assert dialect.name == name and backends.NAMES == ("sqlite", "postgresql")
