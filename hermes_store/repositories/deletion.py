"""Deleting sessions: the rows (children orphaned first, messages, then the sessions) and
the transcript files a deleted session leaves in the sessions directory."""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any, cast

from sqlalchemy import BindParameter, Connection, Table, bindparam, delete, update

from ..models import Message
from ..models import Session as SessionModel
from ._sql import chunks

log = logging.getLogger(__name__)

SESSIONS = cast(Table, SessionModel.__table__)
MESSAGES = cast(Table, Message.__table__)
S = SESSIONS.c
M = MESSAGES.c


def delete_ids(conn: Connection, ids: Sequence[str]) -> int:
    """Delete sessions with their messages, orphaning every child first.

    With foreign keys on, a parent row cannot go while a child still points at it, and
    messages have no ON DELETE action, so the order is: unlink children, delete
    messages, delete sessions (usage rows follow by ON DELETE CASCADE)."""
    ids_param: BindParameter[Any] = bindparam("ids", expanding=True)
    unlink = (
        update(SESSIONS)
        .where(S.parent_session_id.in_(ids_param))
        .values(parent_session_id=None)
    )
    drop_messages = delete(MESSAGES).where(M.session_id.in_(ids_param))
    drop_sessions = delete(SESSIONS).where(S.id.in_(ids_param))
    for chunk in chunks(ids):
        conn.execute(unlink, {"ids": list(chunk)})
    for chunk in chunks(ids):
        conn.execute(drop_messages, {"ids": list(chunk)})
    deleted = 0
    for chunk in chunks(ids):
        deleted += conn.execute(drop_sessions, {"ids": list(chunk)}).rowcount
    return deleted


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
