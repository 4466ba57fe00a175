"""hermes-store: a SQLAlchemy 2 data access layer for Hermes Agent's `state.db`.

Public API, importable from here::

    from hermes_store import Store, AsyncStore, SessionRepository, MessageRepository

- `Store` (a database opened for the repositories, each an attribute of it:
  `store.sessions`, `store.messages`, ...) and `AsyncStore` (the same for asyncio, on
  its own thread pool);
- the repositories (declared once, with their attribute names, in
  `hermes_store.repository_set`): `SessionRepository`, `MessageRepository`,
  `SearchRepository`, `UsageRepository`, `TitleRepository`, `MetaRepository`,
  `MaintenanceRepository`, `HousekeepingRepository`, `TelegramTopicRepository`,
  `CompressionLockRepository`, `GatewayRoutingRepository`, `AsyncDelegationRepository`,
  `ChangeFeed` (the change feed), `TurnRepository` (turn leases with fencing tokens),
  `TrashRepository` (trash and restore), `TagRepository` (session tags),
  `RedactionRepository` (secrets in what is stored; `RedactionPolicy` for new writes) and
  `SpaceRepository` (where the space goes);
- `make_engine`, `read_only_engine` (a database read as it is, for notebooks),
  `resolve_url`, `SCHEMA_VERSION`, and the error types;
- `hermes_store.migrate` (upgrade / current / check), the models in
  `hermes_store.models`, search in `hermes_store.search`.

The names below are imported when first used (PEP 562), so that importing the package,
as `hermes-store --help` does, does not import SQLAlchemy.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .aio import AsyncStore
    from .config import SCHEMA_VERSION, resolve_url
    from .engine import make_engine
    from .errors import (
        ChangeCursorExpired,
        DatabaseCorrupt,
        DatabaseNotWritable,
        EncryptionKeyError,
        EncryptionKeyRequired,
        EncryptionUnavailable,
        FTSUnavailable,
        InvalidRedactionPattern,
        MigrationError,
        NotAHermesDatabase,
        NotAtHead,
        RestoreConflict,
        SchemaTooNew,
        StaleTurn,
        StorageFull,
        StoreClosed,
        StoreError,
        TurnHeld,
        WrongEncryptionKey,
    )
    from .read_only import read_only_engine
    from .redaction import RedactionPolicy
    from .repositories.changes import ChangeFeed
    from .repositories.coordination import (
        AsyncDelegationRepository,
        CompressionLockRepository,
        GatewayRoutingRepository,
    )
    from .repositories.housekeeping import HousekeepingRepository
    from .repositories.maintenance import MaintenanceRepository
    from .repositories.messages import MessageRepository
    from .repositories.meta import MetaRepository
    from .repositories.redaction import RedactionRepository
    from .repositories.search import SearchRepository
    from .repositories.sessions import SessionRepository
    from .repositories.space import SpaceRepository
    from .repositories.tags import TagRepository
    from .repositories.telegram import TelegramTopicRepository
    from .repositories.titles import TitleRepository
    from .repositories.trash import TrashRepository
    from .repositories.turns import TurnRepository
    from .repositories.usage import UsageRepository
    from .store import Store

__version__ = "0.1.0"

#: The store and the repositories, by the module each lives in.
_CLASSES = {
    "Store": "store",
    "AsyncStore": "aio",
    "AsyncDelegationRepository": "repositories.coordination",
    "ChangeFeed": "repositories.changes",
    "CompressionLockRepository": "repositories.coordination",
    "GatewayRoutingRepository": "repositories.coordination",
    "HousekeepingRepository": "repositories.housekeeping",
    "MaintenanceRepository": "repositories.maintenance",
    "MessageRepository": "repositories.messages",
    "MetaRepository": "repositories.meta",
    "RedactionPolicy": "redaction",
    "RedactionRepository": "repositories.redaction",
    "SearchRepository": "repositories.search",
    "SessionRepository": "repositories.sessions",
    "TagRepository": "repositories.tags",
    "SpaceRepository": "repositories.space",
    "TelegramTopicRepository": "repositories.telegram",
    "TitleRepository": "repositories.titles",
    "TrashRepository": "repositories.trash",
    "TurnRepository": "repositories.turns",
    "UsageRepository": "repositories.usage",
}

__all__ = [
    "SCHEMA_VERSION",
    "AsyncDelegationRepository",
    "AsyncStore",
    "ChangeFeed",
    "CompressionLockRepository",
    "GatewayRoutingRepository",
    "HousekeepingRepository",
    "MaintenanceRepository",
    "MessageRepository",
    "MetaRepository",
    "RedactionPolicy",
    "RedactionRepository",
    "SearchRepository",
    "SessionRepository",
    "SpaceRepository",
    "Store",
    "TagRepository",
    "TelegramTopicRepository",
    "TitleRepository",
    "TrashRepository",
    "TurnRepository",
    "UsageRepository",
    "ChangeCursorExpired",
    "DatabaseCorrupt",
    "DatabaseNotWritable",
    "EncryptionKeyError",
    "EncryptionKeyRequired",
    "EncryptionUnavailable",
    "FTSUnavailable",
    "InvalidRedactionPattern",
    "MigrationError",
    "NotAHermesDatabase",
    "NotAtHead",
    "RestoreConflict",
    "SchemaTooNew",
    "StaleTurn",
    "StorageFull",
    "StoreClosed",
    "StoreError",
    "TurnHeld",
    "WrongEncryptionKey",
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
    **{
        name: "errors"
        for name in __all__
        if name[0].isupper() and name != "SCHEMA_VERSION" and name not in _CLASSES
    },
    **_CLASSES,
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
