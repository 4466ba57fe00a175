"""Idempotency keys of appends (`hermes_store_idempotency_keys`, revision hs0001).

An append given `idempotency_key=` looks the key up inside its own write transaction,
after the session's lock (`lock_session`: a row lock on PostgreSQL, the database's write
lock on SQLite), so two calls with one key, in one process or in two, are serialised and
the second finds what the first committed. If the key is there, the append returns the
ids stored then and writes nothing; otherwise it stores its messages and the key in the
same transaction, so a key exists exactly when its messages do. The table's primary key
(session_id, key) is the last word: a second row for a key can never commit.

A key lives as long as its session: the foreign key's ON DELETE CASCADE removes a
session's keys when it is deleted or pruned, whoever deletes it (the original Hermes
code included). Clearing or rewriting a transcript keeps the keys: the append they
record did happen, so a late retry of it must not write it again.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import cast

from sqlalchemy import Connection, Table, bindparam, insert, select

from ..errors import InvalidInput
from ..models import IdempotencyKey
from ..prepared import Prepared

KEYS = cast(Table, IdempotencyKey.__table__)
I = KEYS.c  # noqa: E741 (the repositories' one-letter column namespaces)

#: Longer keys are refused: a key names a call (a UUID, a platform message id, a turn
#: number), and the table keeps one per keyed append.
MAX_KEY_LENGTH = 200

_LOOKUP = Prepared(
    select(I.message_ids).where(I.session_id == bindparam("session_id"), I.key == bindparam("key"))
)
_REMEMBER = Prepared(
    insert(KEYS).values(
        session_id=bindparam("session_id"),
        key=bindparam("key"),
        message_ids=bindparam("message_ids"),
        created_at=bindparam("created_at"),
    )
)


def check_key(key: object) -> str | None:
    """The key as given, after checking it is usable (None: no key)."""
    if key is None:
        return None
    if not isinstance(key, str) or not key:
        raise InvalidInput(f"an idempotency key must be a non-empty string, not {key!r}")
    if len(key) > MAX_KEY_LENGTH:
        raise InvalidInput(
            f"an idempotency key may be at most {MAX_KEY_LENGTH} characters long "
            f"(this one has {len(key)})"
        )
    return key


def earlier_ids(conn: Connection, session_id: str, key: str, count: int) -> list[int] | None:
    """The ids an earlier append with this key stored, None if there was none. `count`
    is how many messages this call appends: a key reused for a different number of
    messages is a caller's mistake, refused rather than answered with the wrong ids."""
    found = _LOOKUP.scalar(conn, {"session_id": session_id, "key": key})
    if found is None:
        return None
    ids = [int(i) for i in json.loads(str(found))]
    if len(ids) != count:
        raise InvalidInput(
            f"the idempotency key {key!r} of session {session_id!r} was used for an append "
            f"of {len(ids)} message(s), not {count}; nothing was written"
        )
    return ids


def remember(conn: Connection, session_id: str, key: str, ids: Sequence[int], at: float) -> None:
    """Record the ids this append stored under its key (same transaction as the rows)."""
    params = {
        "session_id": session_id,
        "key": key,
        "message_ids": json.dumps(list(ids), separators=(",", ":")),
        "created_at": at,
    }
    _REMEMBER.run(conn, params)
