"""hermes-store: a SQLAlchemy 2 data access layer for Hermes Agent's `state.db`.

Public API: `make_engine`, `read_only_engine` (a database read as it is, for notebooks),
`migrate` (upgrade / current / check), the models in
`hermes_store.models`, search in `hermes_store.search`, and the error types.

The names below are imported when first used (PEP 562), so that importing the package,
as `hermes-store --help` does, does not import SQLAlchemy.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
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
    from .read_only import read_only_engine

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
    "read_only_engine",
    "resolve_url",
]

#: Where each public name lives.
_HOMES = {
    "SCHEMA_VERSION": "config",
    "resolve_url": "config",
    "make_engine": "engine",
    "read_only_engine": "read_only",
    **{name: "errors" for name in __all__ if name[0].isupper() and name != "SCHEMA_VERSION"},
}


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{home}", __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
