"""Typed Declarative models of every table of the upstream v23 schema.

FTS virtual tables, their view and triggers are not models: they are raw SQL inside the
migrations. Models know nothing of repositories or migrations.
"""

from .base import Base
from .coordination import AsyncDelegation, CompressionLock, GatewayRouting
from .messages import Message
from .meta import StateMeta, schema_version
from .sessions import Session
from .usage import SessionModelUsage

metadata = Base.metadata

__all__ = [
    "AsyncDelegation",
    "Base",
    "CompressionLock",
    "GatewayRouting",
    "Message",
    "Session",
    "SessionModelUsage",
    "StateMeta",
    "metadata",
    "schema_version",
]
