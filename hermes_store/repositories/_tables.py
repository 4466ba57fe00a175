"""The Core tables behind the models, named once for every repository.

Repositories write Core statements against the tables (`S.id`, not `Session.id`): the
units of work run on a Core `Connection`, and a statement built from table columns skips
the ORM's entity bookkeeping. The models stay the schema's single source.
"""

from __future__ import annotations

from typing import cast

from sqlalchemy import Table

from ..models import (
    AsyncDelegation,
    CompressionLock,
    Message,
    SessionActivity,
    SessionModelUsage,
    SessionTag,
    StateMeta,
    TrashedRow,
    TrashedTree,
)
from ..models import Session as SessionModel

SESSIONS = cast(Table, SessionModel.__table__)
MESSAGES = cast(Table, Message.__table__)
LOCKS = cast(Table, CompressionLock.__table__)
USAGE = cast(Table, SessionModelUsage.__table__)
META = cast(Table, StateMeta.__table__)
DELEGATIONS = cast(Table, AsyncDelegation.__table__)
ACTIVITY = cast(Table, SessionActivity.__table__)
TAGS = cast(Table, SessionTag.__table__)
TRASH = cast(Table, TrashedTree.__table__)
TRASH_ROWS = cast(Table, TrashedRow.__table__)
S = SESSIONS.c
M = MESSAGES.c
L = LOCKS.c
U = USAGE.c
K = META.c
TG = TAGS.c
