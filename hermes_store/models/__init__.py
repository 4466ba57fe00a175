"""Typed Declarative models of every table of the upstream v23 schema, and of the
project's own tables (`hermes_store_*`, models/own.py), which lie outside it.

FTS virtual tables, their view and triggers are not models: they are raw SQL inside the
migrations. Models know nothing of repositories or migrations. Every model and column
carries its meaning (`help(HermesSession)`, `HermesSession.started_at.__doc__`, or
`Column.doc` on `metadata.tables[...]`); the DDL has no comments.

`HermesSession` is the model of `sessions`. `Session` is the same class under the name
the repositories use; it is left out of `__all__` because it would shadow
`sqlalchemy.orm.Session` after a star import.

Imports allowed (tests/project/test_packages.py checks them):

    contract
"""

from .base import Base
from .coordination import AsyncDelegation, CompressionLock, GatewayRouting
from .messages import Message
from .meta import StateMeta, schema_version
from .own import (
    AdkAppState,
    AdkSession,
    AdkUserState,
    ChangeRecord,
    FeedState,
    IdempotencyKey,
    SessionActivity,
    SessionTag,
    TrashedRow,
    TrashedTree,
    TurnLease,
)
from .sessions import HermesSession
from .sessions import Session as Session  # explicit re-export, kept out of __all__
from .usage import SessionModelUsage

metadata = Base.metadata

__all__ = [
    "AdkAppState",
    "AdkSession",
    "AdkUserState",
    "AsyncDelegation",
    "Base",
    "ChangeRecord",
    "CompressionLock",
    "FeedState",
    "GatewayRouting",
    "HermesSession",
    "IdempotencyKey",
    "Message",
    "SessionActivity",
    "SessionModelUsage",
    "SessionTag",
    "StateMeta",
    "TrashedRow",
    "TrashedTree",
    "TurnLease",
    "metadata",
    "schema_version",
]
