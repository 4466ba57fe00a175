"""The trash (`hermes_store_trash`, `hermes_store_trash_rows`, revision hs0007):
sessions moved out of the live tables until they are restored or the trash is emptied.

Trashing a session moves it with its descendants (children through `parent_session_id`
and delegate runs, as `sessions delete` finds them), their messages, usage rows, tags,
idempotency keys, Google ADK sessions and Telegram topic bindings into the trash, in one
write transaction, streamed a batch at a time: every row is kept as a JSON object of all
the columns its table has (bytes tagged, floats written exactly), then deleted from the
live tables. The original Hermes, which only reads the v23 tables, no longer sees the
session; search does not find it (the FTS triggers deleted its index entries); the
change feed reports the deletes (`session.deleted`, `message.deleted`) as for any delete.

A restore inserts the rows again with the same ids and values, parents before children,
in one write transaction: the FTS triggers index the messages again, and followers of the
feed see `session.created`, `message.appended` and `usage.updated` as for new rows.
Two things may have changed meanwhile, and a restore handles them so:

- a live session took one of the trashed session ids, or a live row another of the
  entry's unique keys (a Google ADK session's (app, user, id), a message id): the restore
  is refused (RestoreConflict), nothing changes;
- another session was bound to a trashed session's Telegram topic: that binding stays
  and the report names the topic;
- a live session took a trashed session's title (titles are unique): the restored session
  is titled `<title> (restored)`, `<title> (restored 2)`, ... and the report says so;
- the trashed root's parent is gone (deleted, or trashed on its own): it is restored as a
  root (`parent_session_id` NULL) and the report names the parent it had.

Each entry keeps its expiry (trashed_at + keep_days); `empty_trash(expired_only=True)`,
which `hermes-store sessions prune` runs, deletes the expired ones for good.
"""

from __future__ import annotations

import base64
import json
import math
import uuid
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar, cast

from sqlalchemy import (
    Connection,
    Table,
    TableClause,
    bindparam,
    column,
    delete,
    func,
    insert,
    select,
    update,
)
from sqlalchemy import table as sql_table
from sqlalchemy.exc import IntegrityError
from sqlalchemy.types import NullType

from ..contract import ADK_SESSIONS_TABLE, TAGS_TABLE, TRASH_ROWS_TABLE, TRASH_TABLE
from ..errors import InvalidInput, RestoreConflict, SessionNotFound
from ..models import AdkSession, IdempotencyKey
from ..redaction import RedactionPolicy
from ._dialect import data_columns
from ._own_tables import needing
from ._sql import all_columns, chunks
from ._tables import ACTIVITY, MESSAGES, SESSIONS, TAGS, TRASH, TRASH_ROWS, USAGE, M, S
from .deletion import delete_ids
from .encoding import now
from .lineage import with_delegates
from .telegram import BINDINGS as TELEGRAM_BINDINGS

if TYPE_CHECKING:
    from ..store import Store

T = TypeVar("T")

DAY = 86400.0
#: How long a trashed session is kept before a prune may empty it, unless the caller says.
DEFAULT_KEEP_DAYS = 30.0
#: The longest a caller may keep one (a century: longer is no expiry at all).
MAX_KEEP_DAYS = 36_500.0
#: Trashed rows per INSERT into the trash, and rows per INSERT on restore.
ROWS_PER_INSERT = 1000
#: The suffix a restored session's title gets when a live session took its title.
RESTORED_SUFFIX = " (restored)"
MAX_TITLE_LENGTH = 100

IDEMPOTENCY = cast(Table, IdempotencyKey.__table__)
#: A Google ADK session (hermes_store.integrations.adk) naming the trashed session: it goes
#: with it (ON DELETE CASCADE), so it is kept in the trash and comes back with it.
ADK_SESSIONS = cast(Table, AdkSession.__table__)
#: The tables a trashed session's rows come from, in the order a restore inserts them
#: (sessions first: the others reference them), with the column naming the session.
_TABLES: tuple[tuple[Table, str], ...] = (
    (SESSIONS, "id"),
    (MESSAGES, "session_id"),
    (USAGE, "session_id"),
    (TAGS, "session_id"),
    (IDEMPOTENCY, "session_id"),
    (ADK_SESSIONS, "session_id"),
)
#: A Telegram DM topic's binding to the session (repositories/telegram.py): it goes with
#: it (ON DELETE CASCADE), so it is kept too, where the opt-in created the table.
_BINDING: tuple[Table, str] = (TELEGRAM_BINDINGS, "session_id")
_BY_NAME = {table.name: table for table, _ in (*_TABLES, _BINDING)}
#: A bytes value inside a row's JSON: [BYTES_TAG, base64] (no column holds a list).
BYTES_TAG = "base64"
#: The tables the trash reads and writes besides the v23 ones (SchemaBehind names the
#: missing ones): hs0007's and, for the ADK sessions it moves, hs0008's.
_OWN_TABLES = (TRASH_TABLE, TRASH_ROWS_TABLE, TAGS_TABLE, ADK_SESSIONS_TABLE)


@dataclass(frozen=True)
class TrashEntry:
    """A trashed session as the trash lists it."""

    id: str
    session_id: str
    title: str | None
    source: str | None
    sessions: int
    messages: int
    trashed_at: float
    expires_at: float

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class RestoreReport:
    """What a restore brought back: the ids of the sessions, how many messages, the
    titles it had to change (id -> new title) and the parent the root lost (None when
    its parent is live, or it had none), and the Telegram topic bindings it could not
    restore."""

    session_id: str
    sessions: list[str]
    messages: int
    retitled: dict[str, str] = field(default_factory=dict)
    detached_from: str | None = None
    #: (chat_id, thread_id) of Telegram topic bindings not restored: another session
    #: was bound to that topic meanwhile
    topic_bindings_skipped: list[tuple[str, str]] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


# --------------------------------------------------------------------------- rows as JSON


def _encode_value(value: Any) -> Any:
    if isinstance(value, bytes | bytearray | memoryview):
        return [BYTES_TAG, base64.b64encode(bytes(value)).decode("ascii")]
    return value


def _decode_value(value: Any) -> Any:
    if isinstance(value, list):
        return base64.b64decode(value[1])
    return value


def encode_row(row: dict[str, Any]) -> str:
    """A row as JSON text: floats as their shortest exact repr (NaN and the infinities
    as JSON's extensions), ASCII only (a NUL is written `\\u0000`, which a PostgreSQL
    text column can hold)."""
    return json.dumps({k: _encode_value(v) for k, v in row.items()}, allow_nan=True)


def decode_row(data: str) -> dict[str, Any]:
    return {k: _decode_value(v) for k, v in json.loads(data).items()}


# --------------------------------------------------------------------------- trashing


def tree(conn: Connection, root: str) -> list[str]:
    """`root` and its descendants: children through parent_session_id and delegate runs
    (with_delegates), to a fixed point. Parents come before their children."""
    order = [root]
    seen = {root}
    children = select(S.id).where(S.parent_session_id.in_(bindparam("ids", expanding=True)))
    frontier = [root]
    while frontier:
        found: list[str] = []
        for chunk in chunks(frontier):
            found.extend(str(i) for i in conn.execute(children, {"ids": chunk}).scalars())
        delegates = with_delegates(conn, seen) - seen
        fresh = [i for i in sorted(set(found) | delegates) if i not in seen]
        seen.update(fresh)
        order.extend(fresh)
        frontier = fresh
    return order


def _check_keep_days(keep_days: object) -> float:
    if isinstance(keep_days, bool) or not isinstance(keep_days, int | float):
        raise InvalidInput(f"keep_days is a number of days, not {keep_days!r}")
    value = float(keep_days)
    if not math.isfinite(value) or value < 0 or value > MAX_KEEP_DAYS:
        raise InvalidInput(f"keep_days must be between 0 and {MAX_KEEP_DAYS:g}, not {keep_days!r}")
    return value


def trash_session(conn: Connection, session_id: str, keep_days: float) -> TrashEntry:
    """Move the session and its descendants into the trash (see the module docstring)."""
    # FOR UPDATE on PostgreSQL (nothing on SQLite, whose write lock is already held): an
    # append to one of these sessions waits for this move, then finds its session gone,
    # instead of adding a message the snapshot missed and the delete then removes
    root = conn.execute(
        select(S.title, S.source).where(S.id == session_id).with_for_update()
    ).first()
    if root is None:
        raise SessionNotFound(session_id)
    ids = tree(conn, session_id)
    lock = select(S.id).where(S.id.in_(bindparam("ids", expanding=True))).with_for_update()
    for chunk in chunks(sorted(ids)):
        conn.execute(lock, {"ids": chunk}).all()
    entry_id = uuid.uuid4().hex
    at = now()
    entry = {
        "id": entry_id,
        "session_id": session_id,
        "title": root[0],
        "source": root[1],
        "sessions": len(ids),
        "messages": 0,
        "trashed_at": at,
        "expires_at": at + keep_days * DAY,
    }
    conn.execute(insert(TRASH), entry)
    seq = 0
    pending: list[dict[str, Any]] = []
    messages = 0

    def flush() -> None:
        if pending:
            conn.execute(insert(TRASH_ROWS), pending)
            pending.clear()

    position = {sid: i for i, sid in enumerate(ids)}
    bindings = _has_bindings(conn)
    for table, key in (*_TABLES, _BINDING) if bindings else _TABLES:
        column = table.c[key]
        # every column the table has, those a newer Hermes or a fork added included
        stmt = all_columns(table).where(column.in_(bindparam("ids", expanding=True)))
        if table is MESSAGES:
            stmt = stmt.order_by(M.id)
        for chunk in chunks(ids):
            # streamed ROWS_PER_INSERT rows at a time: one session's messages may be far
            # more than fit in memory (the inserts below run while the cursor is open)
            result = conn.execute(
                stmt, {"ids": chunk}, execution_options={"yield_per": ROWS_PER_INSERT}
            )
            rows: Iterable[dict[str, Any]] = (data_columns(r) for r in result.mappings())
            if table is SESSIONS:  # at most one chunk of ids
                rows = sorted(rows, key=lambda r: position[r["id"]])
            for row in rows:
                if table is MESSAGES:
                    messages += 1
                seq += 1
                pending.append(
                    {"trash_id": entry_id, "seq": seq, "table_name": table.name,
                     "data": encode_row(row)}
                )  # fmt: skip
                if len(pending) >= ROWS_PER_INSERT:
                    flush()
    flush()
    conn.execute(update(TRASH).where(TRASH.c.id == entry_id).values(messages=messages))
    # tags, idempotency keys and ADK sessions go with their sessions (ON DELETE CASCADE),
    # but are deleted here as well, so the move does not depend on the connection's
    # foreign-key setting
    for table in (TAGS, IDEMPOTENCY, ADK_SESSIONS, *([TELEGRAM_BINDINGS] if bindings else [])):
        stmt_del = delete(table).where(table.c.session_id.in_(bindparam("ids", expanding=True)))
        for chunk in chunks(ids):
            conn.execute(stmt_del, {"ids": chunk})
    delete_ids(conn, ids)
    entry["messages"] = messages
    return TrashEntry(**entry)


# --------------------------------------------------------------------------- restoring


def _entry_for(conn: Connection, session_id: str) -> Any:
    """The newest trash entry of `session_id` (a session id may be trashed, used again
    and trashed again), locked on PostgreSQL: a second restore of it waits, then finds it
    gone (SQLite's write lock is held already)."""
    stmt = (
        select(TRASH)
        .where(TRASH.c.session_id == session_id)
        .order_by(TRASH.c.trashed_at.desc(), TRASH.c.id)
        .limit(1)
        .with_for_update()
    )
    return conn.execute(stmt).mappings().first()


def _free_title(conn: Connection, title: str, taken_here: set[str]) -> str:
    def taken(candidate: str) -> bool:
        if candidate in taken_here:
            return True
        return conn.execute(select(S.id).where(S.title == candidate)).first() is not None

    n = 1
    while True:
        suffix = RESTORED_SUFFIX if n == 1 else f"{RESTORED_SUFFIX[:-1]} {n})"
        candidate = title[: MAX_TITLE_LENGTH - len(suffix)] + suffix
        if not taken(candidate):
            return candidate
        n += 1


#: A restore's policy unless the store has one on (TrashRepository passes the store's).
_NO_REDACTION = RedactionPolicy.off()


def restore_session(
    conn: Connection, session_id: str, redaction: RedactionPolicy = _NO_REDACTION
) -> RestoreReport:
    """Bring the newest trash entry of `session_id` back (see the module docstring);
    `redaction`: the store's policy, applied to the messages as they are written back.
    RestoreConflict when a live row holds one of its keys; the caller's transaction is
    then rolled back, so nothing is written."""
    try:
        return _restore(conn, session_id, redaction)
    except IntegrityError as exc:
        # a unique key the checks before the inserts do not cover (a message id an
        # import or a copy wrote, a title taken by a concurrent writer)
        detail = str(exc.orig).strip().splitlines()[0] if exc.orig is not None else ""
        raise RestoreConflict(session_id, [detail] if detail else [], "row") from None


def _restore(conn: Connection, session_id: str, redaction: RedactionPolicy) -> RestoreReport:
    entry = _entry_for(conn, session_id)
    if entry is None:
        raise SessionNotFound(session_id)
    entry_id = entry["id"]
    rows_stmt = (
        select(TRASH_ROWS.c.seq, TRASH_ROWS.c.table_name, TRASH_ROWS.c.data)
        .where(TRASH_ROWS.c.trash_id == entry_id, TRASH_ROWS.c.seq > bindparam("after"))
        .order_by(TRASH_ROWS.c.seq)
        .limit(ROWS_PER_INSERT)
    )

    def batches() -> Any:
        after = 0
        while True:
            batch = conn.execute(rows_stmt, {"after": after}).all()
            if not batch:
                return
            yield batch
            after = int(batch[-1][0])

    sessions: list[dict[str, Any]] = []
    adk_keys: list[tuple[str, str, str]] = []
    for batch in batches():
        for _seq, table_name, data in batch:
            if table_name == SESSIONS.name:
                sessions.append(decode_row(str(data)))
            elif table_name == ADK_SESSIONS.name:
                row = decode_row(str(data))
                adk_keys.append((str(row["app_name"]), str(row["user_id"]), str(row["id"])))
    _refuse_taken_adk_keys(conn, session_id, adk_keys)
    ids = [str(s["id"]) for s in sessions]
    taken = sorted(
        str(i)
        for chunk in chunks(ids)
        for i in conn.execute(
            select(S.id).where(S.id.in_(bindparam("ids", expanding=True))), {"ids": chunk}
        ).scalars()
    )
    if taken:
        raise RestoreConflict(session_id, taken)
    retitled: dict[str, str] = {}
    titles_here: set[str] = set()
    detached: str | None = None
    members = set(ids)
    for row in sessions:
        title = row.get("title")
        if title is not None:
            clash = conn.execute(select(S.id).where(S.title == title)).first() is not None
            if clash or title in titles_here:
                row["title"] = _free_title(conn, str(title), titles_here)
                retitled[str(row["id"])] = row["title"]
            titles_here.add(str(row["title"]))
        parent = row.get("parent_session_id")
        if parent is not None and parent not in members:
            live = conn.execute(select(S.id).where(S.id == parent)).first() is not None
            if not live:
                row["parent_session_id"] = None
                if row["id"] == session_id:
                    detached = str(parent)
    _insert_sessions(conn, sessions)
    # The activity triggers update a session's row on every message inserted; on
    # PostgreSQL each update of one row in one transaction adds a version the next must
    # walk past (quadratic in a session's size). With the rows gone the triggers' updates
    # match nothing; they are written once, as the triggers would compute them, below.
    _forget_activity(conn, ids)
    messages = 0
    pending: dict[str, list[dict[str, Any]]] = {}

    skipped: list[tuple[str, str]] = []

    def flush() -> None:
        redaction.redact_stored_rows(pending.get(MESSAGES.name, ()))
        for name, rows in pending.items():
            if name == TELEGRAM_BINDINGS.name:
                rows = _free_bindings(conn, rows, skipped)
            _insert_rows(conn, _BY_NAME[name], rows)
        pending.clear()

    for batch in batches():
        for _seq, table_name, data in batch:
            name = str(table_name)
            if name == SESSIONS.name:
                continue
            if name not in _BY_NAME:
                raise InvalidInput(f"trash entry {entry_id} holds a row of unknown table {name}")
            if name == MESSAGES.name:
                messages += 1
            pending.setdefault(name, []).append(decode_row(str(data)))
        flush()
    _forget_activity(conn, ids)
    _record_activity(conn, ids)
    _drop_entry(conn, [entry_id])
    return RestoreReport(session_id, ids, messages, retitled, detached, skipped)


def _refuse_taken_adk_keys(
    conn: Connection, session_id: str, keys: list[tuple[str, str, str]]
) -> None:
    """RestoreConflict when a live Google ADK session has the (app, user, id) of one the
    entry holds: the ADK app, finding none, may have created it again."""
    A = ADK_SESSIONS.c
    taken = [
        "/".join(key)
        for key in keys
        if conn.execute(
            select(A.session_id).where(A.app_name == key[0], A.user_id == key[1], A.id == key[2])
        ).first()
        is not None
    ]
    if taken:
        raise RestoreConflict(session_id, taken, "Google ADK session (app, user, id)")


def _has_bindings(conn: Connection) -> bool:
    return bool(conn.dialect.has_table(conn, TELEGRAM_BINDINGS.name))


def _free_bindings(
    conn: Connection, rows: list[dict[str, Any]], skipped: list[tuple[str, str]]
) -> list[dict[str, Any]]:
    """The Telegram topic bindings whose topic no live session is bound to; the others'
    (chat_id, thread_id) go to `skipped`. Without the table (gone since) none."""
    if not _has_bindings(conn):
        skipped.extend((str(r["chat_id"]), str(r["thread_id"])) for r in rows)
        return []
    B = TELEGRAM_BINDINGS.c
    free: list[dict[str, Any]] = []
    for row in rows:
        topic = (str(row["chat_id"]), str(row["thread_id"]))
        taken = conn.execute(
            select(B.session_id).where(B.chat_id == topic[0], B.thread_id == topic[1])
        ).first()
        if taken is None:
            free.append(row)
        else:
            skipped.append(topic)
    return free


def _writable(table: Table, keys: tuple[str, ...]) -> TableClause:
    """`table` with exactly the columns `keys`: the model's types where it knows the
    column, untyped for those it does not (added by a newer Hermes or a fork)."""
    known = {c.name: c.type for c in table.c}
    return sql_table(
        table.name, *(column(k, known.get(k, NullType())) for k in keys), schema=table.schema
    )


def _insert_rows(conn: Connection, table: Table, rows: list[dict[str, Any]]) -> None:
    """Insert trashed rows with every column they were trashed with (rows with the same
    columns in one statement)."""
    groups: dict[tuple[str, ...], list[dict[str, Any]]] = {}
    for row in rows:
        groups.setdefault(tuple(row), []).append(row)
    for keys, group in groups.items():
        conn.execute(insert(_writable(table, keys)), group)


def _forget_activity(conn: Connection, ids: Sequence[str]) -> None:
    stmt = delete(ACTIVITY).where(ACTIVITY.c.session_id.in_(bindparam("ids", expanding=True)))
    for chunk in chunks(ids):
        conn.execute(stmt, {"ids": chunk})


def _record_activity(conn: Connection, ids: Sequence[str]) -> None:
    """Each session's last activity as revision hs0005's triggers define it: its newest
    message's timestamp, else its start."""
    newest = (
        select(func.max(M.timestamp)).where(M.session_id == S.id).scalar_subquery()
    )
    rows = select(S.id, func.coalesce(newest, S.started_at)).where(
        S.id.in_(bindparam("ids", expanding=True))
    )
    stmt = insert(ACTIVITY).from_select(["session_id", "last_active"], rows)
    for chunk in chunks(ids):
        conn.execute(stmt, {"ids": chunk})


def _insert_sessions(conn: Connection, rows: list[dict[str, Any]]) -> None:
    """Parents before children; a parent link inside a cycle (damaged data) is written
    after every row of the cycle is in."""
    placed: set[str] = set()
    ids = {str(r["id"]) for r in rows}
    remaining = list(rows)
    relink: list[tuple[str, str]] = []
    while remaining:
        ready = [
            r
            for r in remaining
            if r.get("parent_session_id") is None
            or r["parent_session_id"] not in ids
            or r["parent_session_id"] in placed
        ]
        if not ready:  # a cycle: cut the first row's link, set it once all are in
            first = dict(remaining[0])
            relink.append((str(first["id"]), str(first["parent_session_id"])))
            first["parent_session_id"] = None
            remaining[0] = first
            continue
        _insert_rows(conn, SESSIONS, ready)
        placed.update(str(r["id"]) for r in ready)
        ready_ids = {id(r) for r in ready}
        remaining = [r for r in remaining if id(r) not in ready_ids]
    for sid, parent in relink:
        conn.execute(update(SESSIONS).where(S.id == sid).values(parent_session_id=parent))


# --------------------------------------------------------------------------- emptying


def _drop_entry(conn: Connection, entry_ids: Sequence[str]) -> None:
    rows = delete(TRASH_ROWS).where(TRASH_ROWS.c.trash_id.in_(bindparam("ids", expanding=True)))
    entries = delete(TRASH).where(TRASH.c.id.in_(bindparam("ids", expanding=True)))
    for chunk in chunks(entry_ids):
        conn.execute(rows, {"ids": chunk})
        conn.execute(entries, {"ids": chunk})


def empty(conn: Connection, session_id: str | None, expired_before: float | None) -> int:
    stmt = select(TRASH.c.id)
    if session_id is not None:
        stmt = stmt.where(TRASH.c.session_id == session_id)
    if expired_before is not None:
        stmt = stmt.where(TRASH.c.expires_at <= expired_before)
    ids = [str(i) for i in conn.execute(stmt).scalars()]
    if session_id is not None and not ids:
        raise SessionNotFound(session_id)
    _drop_entry(conn, ids)
    return len(ids)


def _entry(row: Any) -> TrashEntry:
    return TrashEntry(
        id=str(row["id"]),
        session_id=str(row["session_id"]),
        title=row["title"],
        source=row["source"],
        sessions=int(row["sessions"]),
        messages=int(row["messages"]),
        trashed_at=float(row["trashed_at"]),
        expires_at=float(row["expires_at"]),
    )


class TrashRepository:
    """The trash: move a session there, list it, restore it, empty it (see the module
    docstring for what each does to the live tables, the FTS indexes and the feed).
    `MaintenanceRepository.delete_session` (the original's API) still deletes for good.

    Args:
        store: the Store the repository works on.
    """

    def __init__(self, store: Store) -> None:
        self.store = store

    def _write(self, work: Callable[[Connection], T]) -> T:
        return needing(self.store, _OWN_TABLES, "the trash", lambda: self.store.write(work))

    def trash_session(self, session_id: str, keep_days: float = DEFAULT_KEEP_DAYS) -> TrashEntry:
        """Move the session, its descendants and their rows into the trash, in one
        transaction; the entry. SessionNotFound if it does not exist (or is in the trash).

        Args:
            session_id: the exact session id.
            keep_days: days before a prune may empty the entry (0: at the next prune).
        """
        if not isinstance(session_id, str) or not session_id:
            raise SessionNotFound(str(session_id))
        days = _check_keep_days(keep_days)
        return self._write(lambda conn: trash_session(conn, session_id, days))

    def restore_session(self, session_id: str) -> RestoreReport:
        """Bring the session's newest trash entry back with the same ids, in one
        transaction. SessionNotFound if the trash has no entry for it; RestoreConflict if
        a live session took one of its ids.

        Args:
            session_id: the id of the trashed session (the one trash_session was given).
        """
        if not isinstance(session_id, str) or not session_id:
            raise SessionNotFound(str(session_id))
        return self._write(lambda conn: restore_session(conn, session_id, self.store.redaction))

    def list_trash(self) -> list[TrashEntry]:
        """Every trash entry, most recently trashed first."""
        stmt = select(TRASH).order_by(TRASH.c.trashed_at.desc(), TRASH.c.id)
        return needing(
            self.store,
            _OWN_TABLES,
            "the trash",
            lambda: self.store.read(
                lambda conn: [_entry(r) for r in conn.execute(stmt).mappings()]
            ),
        )

    def empty_trash(self, session_id: str | None = None, expired_only: bool = False) -> int:
        """Delete trash entries for good; how many. All of them, or the entries of
        `session_id` (SessionNotFound if it has none), or with `expired_only` those whose
        time is over.

        Args:
            session_id: only this trashed session's entries.
            expired_only: only the entries whose expiry has passed.
        """
        cutoff = now() if expired_only else None
        return self._write(lambda conn: empty(conn, session_id, cutoff))

    def trash_size(self) -> tuple[int, int]:
        """(entries, rows) the trash holds."""
        stmt = select(
            select(func.count()).select_from(TRASH).scalar_subquery(),
            select(func.count()).select_from(TRASH_ROWS).scalar_subquery(),
        )
        row = needing(
            self.store, _OWN_TABLES, "the trash", lambda: self.store.read(
                lambda conn: conn.execute(stmt).one()
            )
        )  # fmt: skip
        return int(row[0]), int(row[1])
