"""Deleting sessions: the rows (children orphaned first, messages, then the sessions),
the delegate runs that go with a deleted session, and the transcript files a deleted
session leaves in the sessions directory (docs/reference/behaviour.md section 9).

Every id list that reaches SQL is chunked (`_sql.IN_CHUNK`), so no batch size can hit
SQLite's variable limit (upstream #87928).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from sqlalchemy import (
    BindParameter,
    ColumnElement,
    Connection,
    bindparam,
    delete,
    exists,
    or_,
    select,
    update,
)

from ..runtime.engine import Prepared
from ._sql import alias, chunks, rowcount
from ._tables import MESSAGES, SESSIONS, M, S
from .lineage import with_delegates

log = logging.getLogger(__name__)

# One session (a `delete_session` of a session without delegate runs) has its statements
# prepared: an expanding IN list is rendered again on every call.
_ONE_EXISTS = Prepared(select(S.id).where(S.id == bindparam("id")))
_ONE_UNLINK = Prepared(
    update(SESSIONS).where(S.parent_session_id == bindparam("id")).values(parent_session_id=None)
)
_ONE_DROP_MESSAGES = Prepared(delete(MESSAGES).where(M.session_id == bindparam("id")))
_ONE_DROP_SESSION = Prepared(delete(SESSIONS).where(S.id == bindparam("id")))


def delete_ids(conn: Connection, ids: Sequence[str]) -> int:
    """Delete sessions with their messages, orphaning every child first.

    With foreign keys on, a parent row cannot go while a child still points at it, and
    messages have no ON DELETE action, so the order is: unlink children, delete
    messages, delete sessions (usage rows follow by ON DELETE CASCADE)."""
    if len(ids) == 1:
        one = {"id": ids[0]}
        _ONE_UNLINK.run(conn, one)
        _ONE_DROP_MESSAGES.run(conn, one)
        return _ONE_DROP_SESSION.run(conn, one)
    ids_param: BindParameter[Any] = bindparam("ids", expanding=True)
    unlink = (
        update(SESSIONS).where(S.parent_session_id.in_(ids_param)).values(parent_session_id=None)
    )
    drop_messages = delete(MESSAGES).where(M.session_id.in_(ids_param))
    drop_sessions = delete(SESSIONS).where(S.id.in_(ids_param))
    for chunk in chunks(ids):
        conn.execute(unlink, {"ids": chunk})
    for chunk in chunks(ids):
        conn.execute(drop_messages, {"ids": chunk})
    deleted = 0
    for chunk in chunks(ids):
        deleted += rowcount(conn.execute(drop_sessions, {"ids": chunk}))
    return deleted


def existing_ids(conn: Connection, ids: Sequence[str]) -> set[str]:
    """Which of `ids` name a session."""
    if len(ids) == 1:
        row = _ONE_EXISTS.first(conn, {"id": ids[0]})
        return set() if row is None else {row[0]}
    stmt = select(S.id).where(S.id.in_(bindparam("ids", expanding=True)))
    found: set[str] = set()
    for chunk in chunks(ids):
        found.update(conn.execute(stmt, {"ids": chunk}).scalars())
    return found


def delete_with_delegates(
    conn: Connection, ids: Sequence[str], expected: set[str] | None = None
) -> tuple[int, set[str]]:
    """Delete the existing sessions among `ids` with their delegate runs; (how many of
    `ids` existed, every id deleted). With `expected`, nothing is deleted unless exactly
    that set would go (what a UI showed the user): then (0, empty set)."""
    found = existing_ids(conn, ids)
    if not found:
        return 0, set()
    targets = with_delegates(conn, found)
    if expected is not None and targets != expected:
        return 0, set()
    delete_ids(conn, sorted(targets))
    return len(found), targets


def delete_if_empty(conn: Connection, session_id: str) -> bool:
    """Delete the session only if it is untitled (NULL or ''), has no message rows
    (inactive ones count) and no child sessions."""
    child = alias(SESSIONS, "empty_child")
    stmt = delete(SESSIONS).where(
        S.id == session_id,
        or_(S.title.is_(None), S.title == ""),
        ~exists().where(M.session_id == session_id),
        ~exists().where(child.c.parent_session_id == session_id),
    )
    return rowcount(conn.execute(stmt)) > 0


def delete_chunk_where(
    conn: Connection,
    conditions: Sequence[ColumnElement[bool]],
    after_id: str | None,
    limit: int,
) -> list[str]:
    """Delete up to `limit` sessions matching `conditions` with ids above `after_id`
    (children orphaned, not cascaded); the deleted ids in order. A keyset, so a series of
    chunks never rescans rows an earlier chunk passed."""
    stmt = select(S.id).where(*conditions)
    if after_id is not None:
        stmt = stmt.where(S.id > after_id)
    ids = [str(i) for i in conn.execute(stmt.order_by(S.id).limit(limit)).scalars()]
    if ids:
        delete_ids(conn, ids)
    return ids


def _safe_file_id(sid: str) -> bool:
    # An id is data, not a path: never let one reach outside the directory.
    return bool(sid) and not any(c in sid for c in "/\\\x00") and sid not in (".", "..")


def remove_session_files(sessions_dir: str | Path | None, ids: Iterable[str]) -> None:
    """Remove `<id>.json`, `<id>.jsonl` and `request_dump_<id>_*.json` of deleted ids;
    errors are ignored (the rows are already gone, the files are only caches)."""
    if sessions_dir is None:
        return
    base = Path(sessions_dir)
    wanted = {sid for sid in ids if _safe_file_id(sid)}
    if not wanted or not base.is_dir():
        return
    doomed = [base / f"{sid}{suffix}" for sid in sorted(wanted) for suffix in (".json", ".jsonl")]
    # One directory scan instead of a glob per id: a prune may delete 50,000 sessions.
    # Ids may contain underscores, so try every split point of the dump file name.
    try:
        names = [p.name for p in base.iterdir()]
    except OSError:
        names = []
    for name in names:
        if not (name.startswith("request_dump_") and name.endswith(".json")):
            continue
        middle = name[len("request_dump_") : -len(".json")]
        cuts = [i for i, c in enumerate(middle) if c == "_"]
        if any(middle[:i] in wanted for i in cuts):
            doomed.append(base / name)
    for path in doomed:
        try:
            path.unlink()
        except FileNotFoundError:
            pass
        except OSError as exc:
            log.debug("could not remove %s: %s", path, exc)
