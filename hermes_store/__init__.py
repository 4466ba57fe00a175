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
import importlib.abc
import importlib.machinery
import importlib.util
import sys
import types
import warnings
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .aio import AsyncStore
    from .config import SCHEMA_VERSION, resolve_url
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
    from .migration.read_only import read_only_engine
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
    from .runtime.engine import make_engine
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
    "make_engine": "runtime.engine",
    "read_only_engine": "migration.read_only",
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


#: Modules that moved into the subpackages or within one, by their old names under
#: hermes_store (`prepared`, `runtime.prepared`). Importing an old name gives the module
#: at its new place (the same module object) with a DeprecationWarning, so code and
#: notebooks written against the old paths keep working while they move.
_MOVED = {
    "adoption": "migration.adoption",
    "inventory": "migration.inventory",
    "dialects": "migration.dialects",
    "copy": "migration.copy",
    "schema_snapshot": "migration.schema_snapshot",
    "head": "migration.head",
    "read_only": "migration.read_only",
    "sqlite_driver": "sqlite.driver",
    "sqlite_file": "sqlite.file",
    "sqlite_damage": "sqlite.damage",
    "sqlite_limits": "sqlite.limits",
    "sqlite_recovery": "sqlite.recovery",
    "sqlite_encrypt": "sqlite.encrypt",
    "encryption": "sqlite.encryption",
    "backup": "sqlite.backup",
    "pg_faults": "postgresql.faults",
    "rows": "repositories.rows",
    "analytics": "repositories.analytics",
    "engine": "runtime.engine",
    "backends": "runtime.backends",
    "store_backends": "runtime.store_backends",
    "prepared": "runtime.engine",
    "retry": "runtime.retry",
    "waiting": "runtime.waiting",
    "runtime.prepared": "runtime.engine",
}


class _MovedModuleLoader(importlib.abc.Loader):
    def __init__(self, target: str) -> None:
        self.target = target
        self.spec: importlib.machinery.ModuleSpec | None = None

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType:
        warnings.warn(
            f"{spec.name} is now {self.target}; the old name will be removed",
            DeprecationWarning,
            stacklevel=2,
        )
        module = importlib.import_module(self.target)
        self.spec = module.__spec__
        return module

    def exec_module(self, module: types.ModuleType) -> None:
        # the import system gave the module the old name's spec: it keeps its own
        module.__spec__ = self.spec


class _MovedModuleFinder(importlib.abc.MetaPathFinder):
    def find_spec(
        self, fullname: str, path: Any = None, target: Any = None
    ) -> importlib.machinery.ModuleSpec | None:
        package, dot, name = fullname.partition(".")
        if package != __name__ or not dot or name not in _MOVED:
            return None
        return importlib.util.spec_from_loader(
            fullname, _MovedModuleLoader(f"{__name__}.{_MOVED[name]}")
        )


if not any(isinstance(finder, _MovedModuleFinder) for finder in sys.meta_path):
    sys.meta_path.insert(0, _MovedModuleFinder())
