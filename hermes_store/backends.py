"""The one registry of what differs between SQLite and PostgreSQL: a `Dialect` bundle per
backend, keyed by the SQLAlchemy dialect name and picked in one place,
`dialect_for(bind)`, from an engine or a connection (as Alembic keeps its `DefaultImpl`
classes by `__dialect__`, and Prefect hands out one database interface per engine).

A bundle holds each layer's behaviour for its backend:

- `store`: the Store's run-time class (store_backends.py): write connections, read
  locks, typed driver errors, checkpoints;
- `migration`: migration, adoption, check and copy (dialects.py);
- `sql`: what repositories run differently (repositories/_dialect.py): the upsert's
  INSERT constructor, row and key locks, the lease clock, the database's size;
- `search`: the search backend class (search/sqlite_fts.py, search/postgres_fts.py):
  each route's SQL and how it is run.

Each of those modules registers its classes here when it is imported (`bundle(name)`,
one assignment per backend), so this module imports none of them and every layer can
import it without an import cycle; a layer asks only for the part it has imported.
One table stays outside, on purpose: the revisions' frozen one
(migrations/_dialects.py), because what a released revision does must not follow
changes made here.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .errors import MigrationError

if TYPE_CHECKING:
    from sqlalchemy import Connection, Engine

    from .dialects import Backend
    from .repositories._dialect import RepositorySQL
    from .search.backend import SearchBackend
    from .store_backends import StoreBackend

#: The database kinds hermes-store runs on, by SQLAlchemy dialect name.
NAMES = ("sqlite", "postgresql")


class Dialect:
    """One backend's behaviour for every layer: `store`, `migration`, `sql` and
    `search`, each set by the module that defines it."""

    store: type[StoreBackend]
    """The Store's run-time behaviour (a class; each Store makes one instance)."""
    migration: Backend
    """Migration, adoption, check and copy behaviour."""
    sql: RepositorySQL
    """What the repositories run differently."""
    search: type[SearchBackend]
    """The search backend (a class; each search makes one instance on its connection)."""

    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return f"<Dialect {self.name}>"


_REGISTRY: dict[str, Dialect] = {name: Dialect(name) for name in NAMES}


def bundle(name: str) -> Dialect:
    """The bundle of the dialect called `name`, for a module registering its part."""
    return _REGISTRY[name]


def dialect_for(bind: Connection | Engine) -> Dialect:
    """The bundle of `bind`'s dialect; MigrationError for a database hermes-store does
    not run on."""
    try:
        return _REGISTRY[bind.dialect.name]
    except KeyError:
        raise MigrationError(
            f"hermes-store runs on SQLite and PostgreSQL, not {bind.dialect.name}"
        ) from None
