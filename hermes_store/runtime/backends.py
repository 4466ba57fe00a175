"""The one registry of what differs between SQLite and PostgreSQL: one `Dialect` per
database kind, keyed by the SQLAlchemy dialect name and picked in one place,
`dialect_for(bind)`, from an engine or a connection (as Alembic keeps its `DefaultImpl`
classes by `__dialect__`, and Prefect hands out one database interface per engine).

A `Dialect` holds:

- the capabilities code written once for both asks about (`in_process`, `fts5`,
  `shared_with_the_original`, `system_catalogues`): a module outside the dialect
  objects never compares a dialect's name (tests/project/test_import_layers.py);
- each layer's part, a dialect object of its own:
  - `store`: the Store's run-time class (`StoreDialect`, store_backends.py): write
    connections, read locks, typed driver errors, checkpoints;
  - `migration`: migration, adoption, check and copy (`MigrationDialect`, migration/dialects.py);
  - `sql`: what repositories run differently (`SQLDialect`, repositories/_dialect.py):
    the upsert's INSERT constructor, row and key locks, the lease clock, the size;
  - `search`: the search backend class (search/sqlite_fts.py, search/postgres_fts.py):
    each route's SQL and how it is run.

How code reaches it, two ways:

- `dialect_for(conn or engine)`, then the part of its own layer or a capability:
  `dialect_for(conn).migration.snapshot(conn)`. A `Store` resolves its dialect once, when
  it opens (`store.dialect`, the same object), so code holding a store asks that;
- repositories/_dialect.py's helpers of one connection (`lock_session(conn, id)`,
  `upsert_insert(conn, table)`, ...), each a call of `dialect_for(conn).sql`.

Each module defining a part registers it here when it is imported
(`dialect_named(name).store = ...`, one assignment per database kind), so this module
imports none of them and every layer can import it without an import cycle; a layer asks
only for the part it has imported. One table stays outside, on purpose: the revisions'
frozen one (migrations/_dialects.py), because what a released revision does must not
follow changes made here.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..errors import MigrationError

if TYPE_CHECKING:
    from sqlalchemy import Connection, Engine

    from ..migration.dialects import MigrationDialect
    from ..repositories._dialect import SQLDialect
    from ..search.backend import SearchBackend
    from .store_backends import StoreDialect


class Dialect(str):
    """One database kind's behaviour: its capabilities, and each layer's part (`store`,
    `migration`, `sql`, `search`), set by the module that defines it.

    It is a string, its name, so what callers did with `store.dialect` when it was the
    name (compare it, key a dict, write it to JSON or a log) keeps working; the package
    itself asks the capabilities instead. Pickled or copied, it comes back as the
    registered object."""

    store: type[StoreDialect]
    """The Store's run-time behaviour (a class; each Store makes one instance)."""
    migration: MigrationDialect
    """Migration, adoption, check and copy behaviour."""
    sql: SQLDialect
    """What the repositories run differently."""
    search: type[SearchBackend]
    """The search backend (a class; each search makes one instance on its connection)."""

    def __new__(
        cls,
        name: str,
        *,
        in_process: bool,
        fts5: bool,
        shared_with_the_original: bool,
        system_catalogues: bool,
    ) -> Dialect:
        return super().__new__(cls, name)

    def __init__(
        self,
        name: str,
        *,
        in_process: bool,
        fts5: bool,
        shared_with_the_original: bool,
        system_catalogues: bool,
    ) -> None:
        #: The SQLAlchemy dialect name: 'sqlite' or 'postgresql'.
        self.name = name
        #: The database is a file this process opens through the sqlite3 driver: a small
        #: statement costs microseconds, so Prepared runs it on the driver connection;
        #: VACUUM and the original's internals (`SessionDB._conn`) use that connection.
        #: False: a server, reached over connections that can drop.
        self.in_process = in_process
        #: The word index is FTS5 tables kept by triggers: there are layouts to tell
        #: apart, backfills to run, indexes to rebuild, optimise and check. False: a
        #: generated column the server keeps, with none of that.
        self.fts5 = fts5
        #: The original Hermes writes this kind of database too (a state.db file), so it
        #: may hold any of the original's older shapes, read as they are (no state_meta
        #: yet, the v1 Telegram tables), and a table the original also creates is created
        #: with the original's own DDL. False: hermes-store created the database, at its
        #: own revisions' shapes only.
        self.shared_with_the_original = shared_with_the_original
        #: The database describes itself in system catalogues (pg_class, pg_attribute,
        #: pg_relation_size, pg_column_size): its schema is dumped and its objects and
        #: values sized from them. False: sqlite_master, PRAGMAs and the file's pages.
        self.system_catalogues = system_catalogues

    def __reduce__(self) -> tuple[Any, tuple[str]]:
        return dialect_named, (self.name,)


_REGISTRY: dict[str, Dialect] = {
    "sqlite": Dialect(
        "sqlite",
        in_process=True,
        fts5=True,
        shared_with_the_original=True,
        system_catalogues=False,
    ),
    "postgresql": Dialect(
        "postgresql",
        in_process=False,
        fts5=False,
        shared_with_the_original=False,
        system_catalogues=True,
    ),
}

#: The database kinds hermes-store runs on, by SQLAlchemy dialect name.
NAMES = tuple(_REGISTRY)


def dialect_named(name: str) -> Dialect:
    """The dialect called `name`, for a module registering its part."""
    return _REGISTRY[name]


def dialect_for(bind: Connection | Engine) -> Dialect:
    """The dialect of `bind`; MigrationError for a database hermes-store does not run on."""
    try:
        return _REGISTRY[bind.dialect.name]
    except KeyError:
        raise MigrationError(
            f"hermes-store runs on SQLite and PostgreSQL, not {bind.dialect.name}"
        ) from None
