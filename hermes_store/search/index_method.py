"""Which access method serves a database's word index: "fts5" on SQLite; on PostgreSQL
"rum" where revision hs0003 found the RUM extension available (its index hands over
matches in id order, so the newest window of a frequent word costs what the window
holds), else "gin" (every match is found, then the newest window kept). Each backend
reads its own (`SearchBackend.index_method`; PostgreSQL's from the catalogue, once per
pooled connection); this module asks the backend of a connection, and says which for
`hermes-store check`.
"""

from __future__ import annotations

from sqlalchemy import Connection, text
from sqlalchemy.exc import DBAPIError

from ..contract import PG_SEARCH_VECTOR_INDEX
from .backend import IndexMethod as IndexMethod
from .backend import backend_for
from .postgres_fts import INDEX_METHOD


def index_method(conn: Connection) -> IndexMethod:
    """The method of the word index ("rum", "gin" or "fts5"), as the search uses it
    (cached on the pooled connection)."""
    return backend_for(conn).index_method()


def read_index_method(conn: Connection) -> IndexMethod:
    """The method of the word index, read from the database now."""
    return backend_for(conn).index_method(cached=False)


_AVAILABLE = text("SELECT 1 FROM pg_available_extensions WHERE name = 'rum'")
_WHY = {
    "fts5": "fts5 (SQLite's full-text index)",
    "rum": "rum (the newest matches come from the index in id order)",
}


def describe_index_method(url: str | None) -> str:
    """One line for `hermes-store check`: the word index's access method and, for GIN,
    why not RUM. Reads only; a database that cannot be read says so."""
    from ..errors import StoreError
    from ..migration.read_only import reading_engine

    try:
        engine = reading_engine(url, refuse_empty=False)
    except StoreError as exc:
        return f"not checked ({exc})"
    try:
        with engine.connect() as conn:
            if read_index_method(conn) == "fts5":
                return _WHY["fts5"]
            found = conn.execute(INDEX_METHOD, {"name": PG_SEARCH_VECTOR_INDEX}).scalar()
            if found is None:
                return "none (the word index is missing: run hermes-store upgrade)"
            if found == "rum":
                return _WHY["rum"]
            available = conn.execute(_AVAILABLE).scalar() is not None
    except DBAPIError as exc:
        return f"not checked ({str(exc.orig).strip().splitlines()[0]})"
    finally:
        engine.dispose()
    if available:
        return (
            f"{found} (the rum extension is available but not used: hermes-store upgrade "
            "creates it where the role may; docs/search-at-scale.md)"
        )
    return f"{found} (the rum extension is not available on this server)"
