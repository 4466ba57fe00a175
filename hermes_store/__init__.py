"""hermes-store: a SQLAlchemy 2 data access layer for Hermes Agent's `state.db`.

Public API: `make_engine`, `migrate` (upgrade / current / check), the models in
`hermes_store.models`, search in `hermes_store.search`, and the error types.
"""

from .config import SCHEMA_VERSION, resolve_url
from .engine import make_engine
from .errors import (
    DatabaseCorrupt,
    DatabaseNotWritable,
    FTSUnavailable,
    MigrationError,
    NotAHermesDatabase,
    NotAtHead,
    SchemaTooNew,
    StorageFull,
    StoreClosed,
    StoreError,
)

__version__ = "0.1.0"

__all__ = [
    "SCHEMA_VERSION",
    "DatabaseCorrupt",
    "DatabaseNotWritable",
    "FTSUnavailable",
    "MigrationError",
    "NotAHermesDatabase",
    "NotAtHead",
    "SchemaTooNew",
    "StorageFull",
    "StoreClosed",
    "StoreError",
    "make_engine",
    "resolve_url",
]
