"""Idempotency keys of appends (`hermes_store_idempotency_keys`, revision hs0001).

An append given `idempotency_key=` looks the key up inside its own write transaction,
after the session's lock (`lock_session`: a row lock on PostgreSQL, the database's write
lock on SQLite), so two calls with one key, in one process or in two, are serialised and
the second finds what the first committed. If the key is there, the append returns the
ids stored then and writes nothing; otherwise it stores its messages and the key in the
same transaction, so a key exists exactly when its messages do. The table's primary key
(session_id, key) is the last word: a second row for a key can never commit.

A key answers only for messages that still exist: on a hit, the ids it recorded are
looked up in its session, and a key whose messages are not all there any more is void:
it is deleted and the append goes ahead as a first call. The foreign key's ON DELETE
CASCADE removes a session's keys when it is deleted or pruned with foreign keys
enforced; the lookup covers every other way rows go (a connection with `foreign_keys`
off, such as the `sqlite3` shell, then the id made again; a transcript cleared or
rewound), so a key never returns the id of a message that is gone.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import cast

from sqlalchemy import Connection, Table, bindparam, delete, func, insert, select

from ..errors import InvalidInput
from ..models import IdempotencyKey
from ..runtime.engine import Prepared
from ._tables import MESSAGES, M

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


_PRESENT = select(func.count()).select_from(MESSAGES).where(
    M.session_id == bindparam("session_id"), M.id.in_(bindparam("ids", expanding=True))
)
_FORGET = delete(KEYS).where(I.session_id == bindparam("session_id"), I.key == bindparam("key"))


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
    present = int(conn.execute(_PRESENT, {"session_id": session_id, "ids": ids}).scalar() or 0)
    if present == 0:
        # the messages it answered for are gone, however they went: the key is void
        conn.execute(_FORGET, {"session_id": session_id, "key": key})
        return None
    if present != len(set(ids)):
        # answering would name messages that are gone; writing again would repeat the
        # ones still there
        raise InvalidInput(
            f"the append of idempotency key {key!r} in session {session_id!r} was stored, "
            f"but {len(set(ids)) - present} of its {len(set(ids))} message(s) have been "
            "removed since; nothing was written"
        )
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
