"""Messages: the transcript of a session and its counters (docs/reference/behaviour.md sections 3,
4.1 and the publication half of 12).

Every method that touches more than one row runs in one `Store.write` unit of work, so a
failure or a retry leaves nothing half done; the counters `sessions.message_count` and
`sessions.tool_call_count` are maintained here, in the same transaction as the rows they
count (the schema has no triggers for them). Transcripts are ordered by `messages.id`,
never by `timestamp`, which is wall-clock time and not monotonic.

Row encoding lives in `encoding.py`, the conversation format in `conversation.py`;
each unit of work is a module-level function taking the transaction's connection first.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from functools import cache, lru_cache
from typing import TYPE_CHECKING, Any, cast

from sqlalchemy import (
    BigInteger,
    BindParameter,
    Connection,
    CursorResult,
    Select,
    and_,
    bindparam,
    column,
    delete,
    false,
    func,
    insert,
    literal_column,
    or_,
    select,
    update,
)
from sqlalchemy.exc import DBAPIError

from ..errors import (
    CompressionSessionBusyError,
    CompressionSessionClosedError,
    InvalidInput,
    SessionNotFound,
)
from ..runtime.engine import (
    DriverWrite,
    Prepared,
    all_dicts,
    all_tuples,
    first_tuple,
    first_value,
)
from . import idempotency, turns
from ._dialect import (
    SEARCH_COLUMNS,
    SQLDialect,
    append_refusal,
    data_columns,
    data_dicts,
    message_columns,
)
from ._paging import (
    NO_OFFSET,
    bound_limit,
    limit_of,
    row_count,
    row_limit,
    row_offset,
    written,
)
from ._preview import shape_message_preview
from ._sql import all_columns, chunks, rowcount
from ._tables import MESSAGES, SESSIONS, L, M, S
from .conversation import (
    CONVERSATION_COLUMNS,
    conversation,
    repair_message_alternation,
    strip_memory_context,
)
from .encoding import (
    INSERT_COLUMNS,
    EncodedMessages,
    RowLike,
    content_value,
    decode_content,
    decode_fields,
    decode_tool_calls,
    encode_bulk,
    encode_display_metadata,
    encode_row,
    epoch_seconds,
    field_json,
    field_text,
    now,
    scrub,
)
from .lineage import (
    COMPRESSION,
    INHERITED_ACROSS_COMPRESSION,
    INHERITED_FROM_PARENT,
    ancestor_ids,
)
from .rows import (
    AnchoredView,
    ConversationMessage,
    MessageRow,
    MessageWindow,
    RecentUserMessage,
    RewindResult,
)

if TYPE_CHECKING:
    from ..postgresql.pipelined import Call
    from ..store import Store

log = logging.getLogger(__name__)


# --------------------------------------------------------------------------- statements


def _session_rows(columns: tuple[str, ...] | None, include_inactive: bool) -> Select[Any]:
    """A session's rows (`columns`, or every column for None), walked on the index
    (session_id, id) of revision hs0005."""
    query: Select[Any]
    if columns is None:
        query = _full_rows()
    else:
        named: list[Any] = [column(name) for name in columns]
        query = select(*named).select_from(MESSAGES)
    query = query.where(M.session_id == bindparam("session_id"))
    if not include_inactive:
        query = query.where(M.active == 1)
    return query


@lru_cache(maxsize=64)
def _conversation_page(
    columns: tuple[str, ...] | None,
    include_inactive: bool,
    limited: bool,
    skipped: bool,
    limit: int | None = None,
) -> Prepared:
    """get_messages' statement for one combination of its options; a `limited` one has
    `limit` written in (`_paging.written`; None: bound as :limit, 64-bit: an Integer
    parameter is cast to PostgreSQL's 32-bit integer). The offset is bound: SQLite
    prepares a statement again for a bound LIMIT only."""
    query = _session_rows(columns, include_inactive).order_by(M.id)
    if limited:
        query = query.limit(limit_of(limit))
    if skipped:
        query = query.offset(bindparam("offset", type_=BigInteger))
    return Prepared(query)


#: The columns a read may ask for by name: the model's, but the search machinery's.
_READABLE_COLUMNS = frozenset(MESSAGES.c.keys()) - SEARCH_COLUMNS


def _chosen_columns(columns: Sequence[str]) -> tuple[str, ...]:
    """`columns` checked against the messages table's, repeats dropped, in order."""
    if isinstance(columns, str | bytes):
        raise InvalidInput("columns are a list of column names, not one string")
    chosen = tuple(dict.fromkeys(columns))
    unknown = [name for name in chosen if name not in _READABLE_COLUMNS]
    if not chosen or unknown:
        raise InvalidInput(
            f"columns must name columns of messages; unknown: {unknown!r}"
            if unknown
            else "columns must name at least one column of messages"
        )
    return chosen


@lru_cache(maxsize=64)
def _newest_page(
    columns: tuple[str, ...] | None, include_inactive: bool, limit: int | None
) -> Prepared:
    """get_newest_messages' statement: the index walked from the session's newest id,
    `limit` written in (`_paging.written`; None: bound as :limit)."""
    query = _session_rows(columns, include_inactive).order_by(M.id.desc())
    return Prepared(query.limit(limit_of(limit)).offset(NO_OFFSET))


@cache
def _conversation_rows(include_inactive: bool) -> Prepared:
    """One session's rows in id order, only the columns a conversation shows."""
    return Prepared(_session_rows(CONVERSATION_COLUMNS, include_inactive).order_by(M.id))


#: One inactive row of the session, if it has any.
_ARCHIVED_ONE = Prepared(
    select(M.id).where(M.session_id == bindparam("session_id"), M.active == 0).limit(1)
)
#: One row of the session with this platform message id, if it has any.
_WITH_PLATFORM_ID = Prepared(
    select(M.id)
    .where(
        M.session_id == bindparam("session_id"),
        M.platform_message_id == bindparam("platform_message_id"),
    )
    .limit(1)
)
#: A session's parent ('' or NULL: none), whose absence ends the ancestor walk at once.
_PARENT = Prepared(select(S.parent_session_id).where(S.id == bindparam("session_id")))


@lru_cache(maxsize=32)
def _recent_user_rows(include_inactive: bool, limited: bool, limit: int | None) -> Prepared:
    """list_recent_user_messages' statement: (id, timestamp, content) of the session's
    user rows without a display kind, newest first; a `limited` one has `limit` written
    in (`_paging.written`; None: bound as :limit)."""
    query = select(M.id, M.timestamp, M.content).where(
        M.session_id == bindparam("session_id"),
        M.role == "user",
        or_(M.display_kind.is_(None), M.display_kind == ""),
    )
    if not include_inactive:
        query = query.where(M.active == 1)
    query = query.order_by(M.id.desc())
    if limited:
        query = query.limit(limit_of(limit))
    return Prepared(query)


_SESSION_COUNT = Prepared(
    select(func.count()).select_from(MESSAGES).where(M.session_id == bindparam("session_id"))
)
_ALL_COUNT = Prepared(select(func.count()).select_from(MESSAGES))


def _full_rows() -> Select[Any]:
    return all_columns(MESSAGES)


def _non_empty_content() -> Any:
    return and_(M.content.is_not(None), M.content != "")


# The statements every append runs, compiled once per dialect: building and executing
# them through SQLAlchemy on every call costs more than SQLite spends on the append
# itself (docs/benchmarks.md, "append one").
_LEASE_HOLDER = Prepared(
    select(L.holder).where(L.session_id == bindparam("session_id"), L.expires_at > bindparam("at"))
)
_SESSION_STATE = Prepared(select(S.ended_at, S.end_reason).where(S.id == bindparam("session_id")))
#: The session's state and the holder of its live lease, if any, in one statement.
_APPEND_STATE = Prepared(
    select(
        S.ended_at,
        S.end_reason,
        select(L.holder)
        .where(L.session_id == bindparam("session_id"), L.expires_at > bindparam("at"))
        .scalar_subquery(),
    ).where(S.id == bindparam("session_id"))
)
_INSERT_ONE = Prepared(
    insert(MESSAGES).values({name: bindparam(name) for name in INSERT_COLUMNS}).returning(M.id)
)
#: The append's checks and its INSERT in one statement, for a database whose write
#: transaction holds its one write lock (SQLite): a row is inserted only into a session
#: that exists, was not closed by compression and has no live lease of another holder
#: (`_check_append_allowed`'s conditions); no row back means one of them failed, and the
#: read that says which sees the same state, since nothing else can write meanwhile.
_INSERT_CHECKED = Prepared(
    insert(MESSAGES)
    .from_select(
        INSERT_COLUMNS,
        select(*(bindparam(name) for name in INSERT_COLUMNS))
        .select_from(SESSIONS)
        .where(
            S.id == bindparam("session_id"),
            # a parameter, not a constant: binding stays one tuple of the caller's values
            or_(S.ended_at.is_(None), S.end_reason.is_distinct_from(bindparam("closed_by"))),
            ~select(L.session_id)
            .where(
                L.session_id == bindparam("session_id"),
                L.expires_at > bindparam("at"),
                L.holder.is_not(None),
                or_(bindparam("holder").is_(None), L.holder != bindparam("holder")),
            )
            .exists(),
        ),
    )
    .returning(M.id)
)
_ADD_COUNTS = Prepared(
    update(SESSIONS)
    .where(S.id == bindparam("session_id"))
    .values(
        # COALESCE: a counter created without its DEFAULT 0 would otherwise stay NULL.
        message_count=func.coalesce(S.message_count, 0) + bindparam("add_messages"),
        tool_call_count=func.coalesce(S.tool_call_count, 0) + bindparam("add_tool_calls"),
    )
)
#: Multi-row inserts by row count, kept for the batch sizes a process actually uses.
_INSERT_MANY: dict[int, Prepared] = {}
_INSERT_MANY_SIZES = 64
#: Rows per multi-row INSERT: 22 parameters a row stays under SQLite's default limit
#: of 32,766 bound parameters.
_INSERT_CHUNK = 500


def _insert_many(count: int) -> Prepared:
    found = _INSERT_MANY.get(count)
    if found is None:
        rows: list[dict[str, Any]] = [
            {name: bindparam(f"{name}_{i}") for name in INSERT_COLUMNS} for i in range(count)
        ]
        found = Prepared(insert(MESSAGES).values(rows).returning(M.id))
        if len(_INSERT_MANY) < _INSERT_MANY_SIZES:
            _INSERT_MANY[count] = found
    return found


# --------------------------------------------------------------------------- checks


def _lock_session(conn: Connection, sql: SQLDialect, session_id: str) -> bool:
    """The session's row lock, taken by every unit of work here that reads a session's
    state and then writes it (`SQLDialect.lock_session`): only where the dialect locks
    rows, since SQLite's write transaction already holds the database's one write lock.
    False when the session's row was not there to lock."""
    return sql.lock_session(conn, session_id) if sql.locks_rows else True


def _check_append_allowed(
    conn: Connection, session_id: str, holder: str | None, at: float, locked: bool = True
) -> None:
    """Another holder's live lease, then a missing session, then a compression-closed one:
    one statement for a session that exists. `locked`: what `lock_session` returned; a
    session its lock did not find is missing, even if it has been committed since."""
    params = {"session_id": session_id, "at": at}
    state = _APPEND_STATE.first(conn, params) if locked else None
    current = _LEASE_HOLDER.scalar(conn, params) if state is None else state[2]
    if current is not None and str(current) != holder:
        raise _busy(session_id)
    if state is None:
        raise SessionNotFound(session_id)
    _check_not_compression_closed(session_id, state[0], state[1])


def _busy(session_id: str) -> CompressionSessionBusyError:
    return CompressionSessionBusyError(
        f"Session '{session_id}' is being compressed by another writer", session_id
    )


def _check_not_compression_closed(session_id: str, ended_at: Any, end_reason: Any) -> None:
    if ended_at is not None and end_reason == COMPRESSION:
        raise CompressionSessionClosedError(session_id)


def _is_empty(value: Any) -> bool:
    return value is None or (isinstance(value, str | bytes | list | dict) and len(value) == 0)


# --------------------------------------------------------------------------- row writes


def _insert_rows(conn: Connection, rows: list[dict[str, Any]]) -> list[int]:
    """Insert rows in multi-row statements; ids in the order of `rows`."""
    if not conn.dialect.insert_returning:
        return [_insert_without_returning(conn, row) for row in rows]
    ids: list[int] = []
    for chunk in chunks(rows, _INSERT_CHUNK):
        params = {
            f"{name}_{i}": row[name] for i, row in enumerate(chunk) for name in INSERT_COLUMNS
        }
        # RETURNING order is unspecified, but AUTOINCREMENT ids grow in VALUES order
        # inside one statement under the write lock, so sorting restores the input order.
        ids += sorted(int(r[0]) for r in _insert_many(len(chunk)).rows(conn, params))
    return ids


def _insert_without_returning(conn: Connection, row: dict[str, Any]) -> int:
    """SQLite before 3.35 has no RETURNING: one statement per row, keys from lastrowid."""
    one = cast(CursorResult[Any], conn.execute(insert(MESSAGES).values(row)))
    key = one.inserted_primary_key
    assert key is not None
    return int(key[0])


def _add_counts(conn: Connection, session_id: str, messages: int, tool_calls: int) -> None:
    params = {"session_id": session_id, "add_messages": messages, "add_tool_calls": tool_calls}
    _ADD_COUNTS.run(conn, params)


_SET_COUNTS = Prepared(
    update(SESSIONS)
    .where(S.id == bindparam("session_id"))
    .values(message_count=bindparam("messages"), tool_call_count=bindparam("tool_calls"))
)


def _set_counts(conn: Connection, session_id: str, messages: int, tool_calls: int) -> None:
    params = {"session_id": session_id, "messages": messages, "tool_calls": tool_calls}
    _SET_COUNTS.run(conn, params)


# --------------------------------------------------------------------------- units of work


def _append_in_one_call(
    conn: Connection,
    sql: SQLDialect,
    session_id: str,
    holder: str | None,
    explicit_ts: float | None,
    fields: Mapping[str, Any],
) -> int:
    """A plain append (no key, no turn) through the database's one-call append (a
    function on PostgreSQL): the same checks in the same order, in one round trip. A
    message without a time of its own is stamped by the function with the server's
    clock once it holds the session's row lock (revision hs0009): `at`, read before the
    call, may precede the commits of writers it waits for."""
    at = now()
    values, n_calls = encode_row(session_id, timestamp=explicit_ts, **fields)
    try:
        appended = sql.append_one(conn, values, holder, at, n_calls)
    except DBAPIError as exc:
        refused = _refused(exc, session_id)
        if refused is None:
            raise
        raise refused from None
    assert appended is not None  # a dialect that appends in one call returns the id
    return appended


def _one_call(
    store: Store,
    session_id: str,
    holder: str | None,
    explicit_ts: float | None,
    fields: Mapping[str, Any],
) -> int:
    """A plain append as a write of its own through the database's one-call append: the
    call is handed to Store.write as well, which sends it without a Connection where it
    can (the lease's time and the encoding are taken afresh for each attempt, as in the
    unit of work)."""
    sql = store.dialect.sql
    dialect = store.engine.dialect

    def call() -> Call:
        # the time is the function's, as in the unit of work
        values, n_calls = encode_row(session_id, timestamp=explicit_ts, **fields)
        return sql.append_call(dialect, values, holder, now(), n_calls)

    try:
        return store.write(
            lambda conn: _append_in_one_call(conn, sql, session_id, holder, explicit_ts, fields),
            call=call,
        )
    except DBAPIError as exc:
        refused = _refused(exc, session_id)
        if refused is None:
            raise
        raise refused from None


def _checked_at_driver(
    store: Store,
    session_id: str,
    holder: str | None,
    explicit_ts: float | None,
    fields: Mapping[str, Any],
) -> int:
    """A plain append where the INSERT checks the session and its lease itself (SQLite,
    `_insert_checked`): its statements are handed to Store.write as well, which sends
    them at the driver where it can; a refusal, or a value that cannot be stored, runs
    the unit of work instead, which says why in the order the checks come (the time and
    the encoding are taken afresh for each attempt, under the write lock, as in the unit
    of work)."""
    sql = store.dialect.sql
    dialect = store.engine.dialect

    def statements() -> tuple[tuple[str, Any], ...] | None:
        at = now()  # under the write lock (DriverWrite)
        try:
            values, n_calls = encode_row(
                session_id, timestamp=at if explicit_ts is None else explicit_ts, **fields
            )
        except InvalidInput:
            return None
        values["holder"] = holder
        values["at"] = at
        values["closed_by"] = COMPRESSION
        counts = {"session_id": session_id, "add_messages": 1, "add_tool_calls": n_calls}
        return (_INSERT_CHECKED.bound(dialect, values), _ADD_COUNTS.bound(dialect, counts))

    write = DriverWrite(statements)
    return store.write(
        lambda conn: _append_one(conn, sql, session_id, holder, explicit_ts, fields),
        call=lambda: write,
    )


def _refused(exc: DBAPIError, session_id: str) -> Exception | None:
    """The typed error a refusal of the one-call append (by SQLSTATE) stands for; None
    for any other error."""
    refusal = append_refusal(exc)
    if refusal == "busy":
        return _busy(session_id)
    if refusal == "missing":
        return SessionNotFound(session_id)
    if refusal == "closed":
        return CompressionSessionClosedError(session_id)
    return None


def _append_one(
    conn: Connection,
    sql: SQLDialect,
    session_id: str,
    holder: str | None,
    explicit_ts: float | None,
    fields: Mapping[str, Any],
    key: str | None = None,
    turn_token: int | None = None,
) -> int:
    """Append one encoded message in the unit of work on `conn`; `sql` is the store's
    dialect part (`store.dialect.sql`), resolved when the store opened."""
    if key is None and turn_token is None and sql.appends_in_one_call:
        return _append_in_one_call(conn, sql, session_id, holder, explicit_ts, fields)
    # the checks below must hold until commit
    locked = _lock_session(conn, sql, session_id)
    if key is not None:
        # before the checks: a retry of an append that happened returns its id even if
        # the session has been closed by compression (or its turn passed) since
        earlier = idempotency.earlier_ids(conn, session_id, key, 1)
        if earlier is not None:
            return earlier[0]
    if turn_token is not None:
        turns.require_turn(conn, session_id, turn_token)
    at = now()
    if sql.locks_rows or not conn.dialect.insert_returning:
        _check_append_allowed(conn, session_id, holder, at, locked)
        values, n_calls = encode_row(
            session_id, timestamp=at if explicit_ts is None else explicit_ts, **fields
        )
        if conn.dialect.insert_returning:
            message_id = int(_INSERT_ONE.scalar(conn, values))
        else:
            message_id = _insert_without_returning(conn, values)
    else:
        values, n_calls = _encode_checked(conn, session_id, holder, at, explicit_ts, fields)
        message_id = _insert_checked(conn, session_id, holder, at, values)
    if sql.checks_commit_outcome:
        sql.note_appended(conn, message_id, values)
    _add_counts(conn, session_id, 1, n_calls)
    if key is not None:
        idempotency.remember(conn, session_id, key, [message_id], at)
    return message_id


def _encode_checked(
    conn: Connection,
    session_id: str,
    holder: str | None,
    at: float,
    explicit_ts: float | None,
    fields: Mapping[str, Any],
) -> tuple[dict[str, Any], int]:
    """`encode_row` before the checks, which `_insert_checked` makes: a value that cannot
    be stored is still refused after them (a missing session, say, is reported first)."""
    try:
        return encode_row(
            session_id, timestamp=at if explicit_ts is None else explicit_ts, **fields
        )
    except InvalidInput:
        _check_append_allowed(conn, session_id, holder, at)
        raise


def _insert_checked(
    conn: Connection, session_id: str, holder: str | None, at: float, values: dict[str, Any]
) -> int:
    """Insert `values` if the append is allowed (`_INSERT_CHECKED`); else raise what
    `_check_append_allowed` finds."""
    params = {**values, "holder": holder, "at": at, "closed_by": COMPRESSION}
    row = _INSERT_CHECKED.first(conn, params)
    if row is None:
        _check_append_allowed(conn, session_id, holder, at)
        raise AssertionError(f"an append to {session_id!r} was refused for no reason found")
    return int(row[0])


def _append_many(
    conn: Connection,
    sql: SQLDialect,
    session_id: str,
    holder: str | None,
    encoded: EncodedMessages,
    key: str | None = None,
    turn_token: int | None = None,
) -> list[int]:
    locked = _lock_session(conn, sql, session_id)
    if key is not None:
        earlier = idempotency.earlier_ids(conn, session_id, key, len(encoded.rows))
        if earlier is not None:
            return earlier
    if turn_token is not None:
        turns.require_turn(conn, session_id, turn_token)
    at = now()
    _check_append_allowed(conn, session_id, holder, at, locked)
    ids = _insert_rows(conn, encoded.rows)
    if ids:
        if sql.checks_commit_outcome:
            sql.note_appended(conn, ids[0], encoded.rows[0])
        _add_counts(conn, session_id, len(ids), encoded.tool_calls)
    if key is not None and ids:
        idempotency.remember(conn, session_id, key, ids, at)
    return ids


def _replace(
    conn: Connection, session_id: str, encoded: EncodedMessages, active_only: bool
) -> None:
    state = _SESSION_STATE.first(conn, {"session_id": session_id})
    if state is not None:
        _check_not_compression_closed(session_id, state[0], state[1])
    elif encoded.rows:
        raise SessionNotFound(session_id)
    doomed = delete(MESSAGES).where(M.session_id == session_id)
    if active_only:
        doomed = doomed.where(M.active == 1)
    conn.execute(doomed)
    _insert_rows(conn, encoded.rows)
    _set_counts(conn, session_id, len(encoded.rows), encoded.tool_calls)


def _archive_and_compact(conn: Connection, session_id: str, encoded: EncodedMessages) -> int:
    if _SESSION_STATE.first(conn, {"session_id": session_id}) is None:
        if encoded.rows:
            raise SessionNotFound(session_id)
        return 0
    conn.execute(
        update(MESSAGES)
        .where(M.session_id == session_id, M.active == 1)
        .values(active=0, compacted=1)
    )
    _insert_rows(conn, encoded.rows)
    _set_counts(conn, session_id, len(encoded.rows), encoded.tool_calls)
    return len(encoded.rows)


def _newest_active(session_id: str, role: str) -> Select[Any]:
    """The newest active row of `role` in the session (its id and content)."""
    return (
        select(M.id, M.content)
        .where(M.session_id == session_id, M.active == 1, M.role == role)
        .order_by(M.id.desc())
        .limit(1)
    )


def _tag_latest_match(
    conn: Connection,
    session_id: str,
    role: str,
    stored_content: Any,
    values: Mapping[str, Any],
) -> bool:
    target = conn.execute(
        _newest_active(session_id, role).where(M.content == stored_content)
    ).first()
    if target is None:
        return False
    conn.execute(update(MESSAGES).where(M.id == target.id).values(values))
    return True


# The newest active user row's api_content, set only where its content is still the
# given one: one statement, so nothing can come between the read and the write.
_NEWEST_USER = (
    select(M.id)
    .where(M.session_id == bindparam("session_id"), M.active == 1, M.role == "user")
    .order_by(M.id.desc())
    .limit(literal_column("1"))
    .scalar_subquery()
)
_SET_LATEST_API_CONTENT = Prepared(
    update(MESSAGES)
    .where(M.id == _NEWEST_USER, M.content.is_not_distinct_from(bindparam("content")))
    .values(api_content=bindparam("api_content"))
)


_REWIND_TARGET = Prepared(
    all_columns(MESSAGES).where(M.id == bindparam("id"), M.session_id == bindparam("session_id"))
)
_REWIND_COUNT = Prepared(
    update(SESSIONS)
    .where(S.id == bindparam("session_id"))
    .values(rewind_count=func.coalesce(S.rewind_count, 0) + 1)
)
_ACTIVE_HEAD = Prepared(
    select(func.max(M.id)).where(M.session_id == bindparam("session_id"), M.active == 1)
)
#: The rows with id >= :since that are not yet active (or not yet inactive), flipped.
_SET_ACTIVE = {
    active: Prepared(
        update(MESSAGES)
        .where(
            M.session_id == bindparam("session_id"),
            M.active == (0 if active else 1),
            M.id >= bindparam("since"),
        )
        .values(active=1 if active else 0)
    )
    for active in (True, False)
}
_CLEAR = Prepared(delete(MESSAGES).where(M.session_id == bindparam("session_id")))


def _rewind(conn: Connection, session_id: str, target_message_id: int) -> dict[str, Any]:
    found = _REWIND_TARGET.dicts(conn, {"id": target_message_id, "session_id": session_id})
    target = found[0] if found else None
    if target is None:
        raise ValueError(f"message {target_message_id} not found in session {session_id}")
    if target["role"] != "user":
        raise ValueError(
            "rewind target must be a 'user' message "
            f"(got role='{target['role']}', id={target_message_id})"
        )
    rewound = _set_active(conn, session_id, target_message_id, active=False)
    _REWIND_COUNT.run(conn, {"session_id": session_id})
    head = _ACTIVE_HEAD.scalar(conn, {"session_id": session_id})
    row = data_columns(target)
    row["content"] = decode_content(row["content"])
    return {
        "rewound_count": rewound,
        "target_message": row,
        "new_head_id": None if head is None else int(head),
    }


def _set_active(conn: Connection, session_id: str, since_message_id: int, active: bool) -> int:
    """Flip the rows with id >= `since_message_id` that are not yet `active`; how many."""
    return _SET_ACTIVE[active].run(conn, {"session_id": session_id, "since": since_message_id})


def _pop_newest(conn: Connection, sql: SQLDialect, session_id: str) -> dict[str, Any] | None:
    # Read-then-delete: the session's row lock first, so two pops on PostgreSQL never
    # both pick the same newest row (the second would delete nothing and report empty).
    locked = _lock_session(conn, sql, session_id)
    # a pop rewrites the transcript as an append extends it: refused while another
    # writer compresses the session or once compression has closed it
    try:
        _check_append_allowed(conn, session_id, None, now(), locked)
    except SessionNotFound:
        return None
    newest = (
        conn.execute(
            _full_rows()
            .where(M.session_id == session_id, M.active == 1)
            .order_by(M.id.desc())
            .limit(1)
        )
        .mappings()
        .first()
    )
    if newest is None:
        return None
    row = data_columns(newest)
    conn.execute(delete(MESSAGES).where(M.id == row["id"]))
    calls = decode_tool_calls(row["tool_calls"])
    n_calls = 0 if not calls else len(calls) if isinstance(calls, list) else 1
    _add_counts(conn, session_id, -1, -n_calls)
    return decode_fields(row)


def _clear(conn: Connection, session_id: str) -> None:
    _CLEAR.run(conn, {"session_id": session_id})
    _set_counts(conn, session_id, 0, 0)


def _check_lease(conn: Connection, parent_session_id: str, holder: str | None, at: float) -> None:
    lease = conn.execute(
        select(L.holder, L.expires_at).where(L.session_id == parent_session_id)
    ).one_or_none()
    if lease is None or lease.holder != holder or lease.expires_at < at:
        raise CompressionSessionBusyError(
            f"Compression lease lost before publication: {parent_session_id}",
            parent_session_id,
        )


def _publish_child(
    conn: Connection,
    sql: SQLDialect,
    parent_session_id: str,
    child: Mapping[str, Any],
    encoded: EncodedMessages,
    holder: str | None,
    require_lease: bool,
) -> None:
    """Insert the child with its rows and end the parent, checked under the parent's lock.
    `child` holds the child's own columns; where it leaves an inherited one None, the
    parent's value is taken."""
    # Same row lock as appends: the lease and the parent read below hold until commit.
    locked = _lock_session(conn, sql, parent_session_id)
    at = now()
    if require_lease:
        _check_lease(conn, parent_session_id, holder, at)
    parent = (
        conn.execute(select(SESSIONS).where(S.id == parent_session_id)).mappings().one_or_none()
    )
    if parent is None or not locked:
        raise RuntimeError(f"Compression parent not found: {parent_session_id}")
    if parent["ended_at"] is not None:
        raise RuntimeError(f"Compression parent already ended: {parent_session_id}")
    if not encoded.rows:
        raise RuntimeError("Compression child handoff must not be empty")
    inherited = (*INHERITED_FROM_PARENT, *INHERITED_ACROSS_COMPRESSION)
    values = {key: parent[key] for key in inherited}
    values.update({k: v for k, v in child.items() if v is not None or k not in values})
    conn.execute(
        insert(SESSIONS).values(
            parent_session_id=parent_session_id,
            started_at=at,
            message_count=len(encoded.rows),
            tool_call_count=encoded.tool_calls,
            **values,
        )
    )
    _insert_rows(conn, encoded.rows)
    ended = conn.execute(
        update(SESSIONS)
        .where(S.id == parent_session_id, S.ended_at.is_(None))
        .values(ended_at=at, end_reason=COMPRESSION)
    )
    if rowcount(ended) != 1:
        raise RuntimeError(f"Compression parent changed during publication: {parent_session_id}")


# --------------------------------------------------------------------------- reads


#: The anchor of a window (:anchor, in session :session_id).
_ANCHOR = Prepared(
    _full_rows().where(M.id == bindparam("anchor"), M.session_id == bindparam("session_id"))
)


@lru_cache(maxsize=16)
def _beside_anchor(rows: int | None) -> tuple[Prepared, Prepared]:
    """The rows before and after the anchor :anchor of session :session_id, nearest first,
    at most `rows` each (a `written` limit; None: bound as :rows)."""
    in_session = _full_rows().where(M.session_id == bindparam("session_id"))
    anchor: BindParameter[int] = bindparam("anchor")
    return (
        Prepared(
            in_session.where(M.id < anchor).order_by(M.id.desc()).limit(limit_of(rows, "rows"))
        ),
        Prepared(in_session.where(M.id > anchor).order_by(M.id).limit(limit_of(rows, "rows"))),
    )


@lru_cache(maxsize=32)
def _bookend_statements(roles: int | None, rows: int | None) -> tuple[Prepared, Prepared]:
    """The first rows with content before id :low and the last ones after :high (the
    latter newest first), of session :session_id, at most `rows` each (a `written` limit;
    None: bound as :rows); with `roles`, only rows whose role is one of :role_0 ... (each
    its own parameter, so the statement is prepared once per count)."""
    base = _full_rows().where(M.session_id == bindparam("session_id"), _non_empty_content())
    if roles is not None:
        base = base.where(
            M.role.in_([bindparam(f"role_{i}") for i in range(roles)]) if roles else false()
        )
    return (
        Prepared(base.where(M.id < bindparam("low")).order_by(M.id).limit(limit_of(rows, "rows"))),
        Prepared(
            base.where(M.id > bindparam("high")).order_by(M.id.desc()).limit(limit_of(rows, "rows"))
        ),
    )


def _window(
    conn: Connection, session_id: str, around_message_id: int, window: int
) -> tuple[list[RowLike], RowLike, list[RowLike]] | None:
    """(rows before, the anchor, rows after), each side at most `window` rows by id."""
    params = {"session_id": session_id, "anchor": around_message_id}
    anchor = _ANCHOR.dicts(conn, params)
    if not anchor:
        return None
    rows = row_count(window)
    params["rows"] = rows
    before_anchor, after_anchor = _beside_anchor(written(rows))
    before = before_anchor.dicts(conn, params)
    after = after_anchor.dicts(conn, params)
    return list(reversed(before)), anchor[0], list(after)


def _bookends(
    conn: Connection,
    session_id: str,
    low: int,
    high: int,
    bookend: int,
    keep_roles: Sequence[str] | None,
) -> tuple[list[RowLike], list[RowLike]]:
    """The first `bookend` rows before id `low` and the last ones after `high`, both in id
    order; only rows with content and (with `keep_roles`) of those roles."""
    roles = None if keep_roles is None else list(keep_roles)
    rows = row_count(bookend)
    first, last = _bookend_statements(None if roles is None else len(roles), written(rows))
    params: dict[str, Any] = {"session_id": session_id, "low": low, "high": high, "rows": rows}
    for i, role in enumerate(roles or ()):
        params[f"role_{i}"] = role
    start = first.dicts(conn, params)
    end = last.dicts(conn, params)
    return list(start), list(reversed(end))


def _anchored_rows(
    conn: Connection,
    session_id: str,
    around_message_id: int,
    window: int,
    bookend: int,
    keep_roles: Sequence[str] | None,
) -> tuple[list[RowLike], RowLike, list[RowLike], list[RowLike], list[RowLike]] | None:
    """(before, anchor, after, first bookends, last bookends) of `get_anchored_view`, or
    None when the anchor is not a message of the session."""
    found = _window(conn, session_id, around_message_id, window)
    if found is None:
        return None
    before, anchor, after = found
    low = before[0]["id"] if before else anchor["id"]
    high = after[-1]["id"] if after else anchor["id"]
    start, end = _bookends(conn, session_id, low, high, bookend, keep_roles)
    return before, anchor, after, start, end


#: A lineage read: each session of the chain, root first, with its rows.
_Lineage = list[tuple[str, list[tuple[Any, ...]]]]


def _lineage_rows(
    conn: Connection, session_id: str, include_ancestors: bool, include_inactive: bool
) -> _Lineage:
    """The root-to-tip chain, each session with its rows in id order, with the columns a
    conversation shows: one indexed read per session of the chain."""
    chain = [session_id]
    if include_ancestors:
        chain = [*reversed(ancestor_ids(conn, session_id)), session_id]
    statement = _conversation_rows(include_inactive)
    return [(member, statement.rows(conn, {"session_id": member})) for member in chain]


def _ancestors_rows(conn: Connection, session_id: str) -> _Lineage:
    """The session's ancestors, root first, each with its active rows in id order; the
    session's own rows are not read (nothing is, past the parent lookup, when it has none)."""
    statement = _conversation_rows(False)
    chain = reversed(ancestor_ids(conn, session_id))
    return [(member, statement.rows(conn, {"session_id": member})) for member in chain]


def _rows_of(lineage: _Lineage) -> list[tuple[Any, ...]]:
    """The rows of every session of a lineage, in chain order."""
    if len(lineage) == 1:
        return lineage[0][1]
    return [row for _member, rows in lineage for row in rows]


def decode_message(row: RowLike) -> dict[str, Any]:
    """A full row as a dict with content, tool_calls and display_metadata decoded."""
    return decode_fields(data_columns(row))


def _decoded(rows: Sequence[RowLike]) -> list[MessageRow]:
    return cast("list[MessageRow]", [decode_message(r) for r in rows])


def _messages(messages: list[dict[str, Any]]) -> list[ConversationMessage]:
    return cast("list[ConversationMessage]", messages)


# --------------------------------------------------------------------------- repository


class MessageRepository:
    """The messages of a session (its transcript) and the counters kept with them, each
    method one unit of work.

    Args:
        store: the Store the repository works on.
    """

    def __init__(self, store: Store) -> None:
        self.store = store

    # ----------------------------------------------------------------- writers

    def append_message(
        self,
        session_id: str,
        role: str,
        content: Any = None,
        tool_name: str | None = None,
        tool_calls: Any = None,
        tool_call_id: str | None = None,
        token_count: int | None = None,
        finish_reason: str | None = None,
        reasoning: str | None = None,
        reasoning_content: str | None = None,
        reasoning_details: Any = None,
        codex_reasoning_items: Any = None,
        codex_message_items: Any = None,
        platform_message_id: str | None = None,
        observed: bool = False,
        effect_disposition: str | None = None,
        timestamp: Any = None,
        api_content: str | None = None,
        display_kind: str | None = None,
        display_metadata: Any = None,
        compression_lock_holder: str | None = None,
        *,
        idempotency_key: str | None = None,
        turn_token: int | None = None,
    ) -> int:
        """Append one message and bump the counters; returns the new `messages.id`.

        With `idempotency_key` (a string the caller chooses per message, such as a UUID or
        the platform's message id), a call that repeats a committed one (a retry after a
        timeout or a cancellation, from any process) returns the id stored then and writes
        nothing; keys are per session and go with it.

        With `turn_token` (from TurnRepository.acquire_turn), the append is made only if
        that token is still the session's current turn, checked in the same transaction;
        otherwise StaleTurn and nothing is written.

        Raises CompressionSessionBusyError while another holder's lease is live,
        CompressionSessionClosedError on a session ended by compression, SessionNotFound
        for an unknown id, InvalidInput for values that cannot be stored.

        Args:
            session_id: the session's id.
            role: the message's role (user, assistant, tool, system).
            content: the message content: text, or a list of multimodal parts (stored as
                JSON).
            tool_name: the tool's name.
            tool_calls: the tool calls the message makes (stored as JSON).
            tool_call_id: the id of the tool call this message answers.
            token_count: the message's token count.
            finish_reason: why the model stopped generating (stop, length, tool_calls, ...).
            reasoning: the model's reasoning text.
            reasoning_content: the provider's reasoning content field.
            reasoning_details: the provider's structured reasoning details (stored as JSON).
            codex_reasoning_items: the Codex API's reasoning items, stored as JSON.
            codex_message_items: the Codex API's message items, stored as JSON.
            platform_message_id: the platform's id for the message.
            observed: the message's `observed` flag (stored as 1 or 0).
            effect_disposition: the tool call's effect disposition, stored as given.
            timestamp: epoch seconds (default: now).
            api_content: the content as sent to the model's API, when it differs from
                `content`.
            display_kind: how a client displays the message (a marker such as a tool
                summary), or None.
            display_metadata: what the client needs to display it that way (stored as JSON).
            compression_lock_holder: the holder of the session's compression lock; a write
                from anyone else is refused while the lock is held.
            idempotency_key: a key the caller chooses for this write; a retry with the same
                key returns the first write's result instead of writing again.
            turn_token: a token from TurnRepository.acquire_turn; the write is made only while
                it is the session's current turn (StaleTurn otherwise, nothing written).
        """
        if role is None:
            raise InvalidInput("a message needs a role")
        # checked here only when given: a plain append needs neither module
        key = None if idempotency_key is None else idempotency.check_key(idempotency_key)
        token = None if turn_token is None else turns.check_token(turn_token)
        explicit_ts = epoch_seconds(timestamp)
        fields = {
            "role": role,
            "content": content,
            "tool_name": tool_name,
            "tool_calls": tool_calls,
            "tool_call_id": tool_call_id,
            "token_count": token_count,
            "finish_reason": finish_reason,
            "reasoning": reasoning,
            "reasoning_content": reasoning_content,
            "reasoning_details": reasoning_details,
            "codex_reasoning_items": codex_reasoning_items,
            "codex_message_items": codex_message_items,
            "platform_message_id": platform_message_id,
            "observed": observed,
            "effect_disposition": effect_disposition,
            "api_content": api_content,
            "display_kind": display_kind,
            "display_metadata": display_metadata,
        }
        if self.store.redaction.compiled:
            fields = self.store.redaction.redact_fields(fields)
        holder = compression_lock_holder
        sql = self.store.dialect.sql
        if key is None and token is None:
            if sql.appends_in_one_call:
                return _one_call(self.store, session_id, holder, explicit_ts, fields)
            if not sql.locks_rows and self.store.engine.dialect.insert_returning:
                return _checked_at_driver(self.store, session_id, holder, explicit_ts, fields)
        return self.store.write(
            lambda conn: _append_one(conn, sql, session_id, holder, explicit_ts, fields, key, token)
        )

    def append_messages(
        self,
        session_id: str,
        messages: Sequence[Mapping[str, Any]],
        *,
        compression_lock_holder: str | None = None,
        idempotency_key: str | None = None,
        turn_token: int | None = None,
    ) -> list[int]:
        """Append many messages (dicts, bulk encoding) in one transaction; returns their
        ids in order. Same checks as `append_message`; an empty list writes nothing.
        `idempotency_key` as for `append_message`: one key for the whole batch, whose
        retry returns the same ids (a retry with another number of messages is refused).

        Args:
            session_id: the session's id.
            messages: the messages, as dicts with the `append_message` fields.
            compression_lock_holder: the holder of the session's compression lock; a write
                from anyone else is refused while the lock is held.
            idempotency_key: a key the caller chooses for this write; a retry with the same
                key returns the first write's result instead of writing again.
            turn_token: a token from TurnRepository.acquire_turn; the write is made only while
                it is the session's current turn (StaleTurn otherwise, nothing written).
        """
        key = idempotency.check_key(idempotency_key)
        token = turns.check_token(turn_token)
        encoded = encode_bulk(session_id, messages, self.store.redaction)
        holder = compression_lock_holder
        sql = self.store.dialect.sql
        return self.store.write(
            lambda conn: _append_many(conn, sql, session_id, holder, encoded, key, token)
        )

    def replace_messages(
        self,
        session_id: str,
        messages: Sequence[Mapping[str, Any]],
        active_only: bool = False,
    ) -> None:
        """Delete the session's messages (only active ones with `active_only`), insert
        `messages` as the new active transcript and set the counters to what was inserted.

        Args:
            session_id: the session's id.
            messages: the messages, as dicts with the `append_message` fields.
            active_only: only rows not marked inactive (rewound or compacted away).
        """
        encoded = encode_bulk(session_id, messages, self.store.redaction)
        self.store.write(lambda conn: _replace(conn, session_id, encoded, active_only))

    def archive_and_compact(
        self, session_id: str, compacted_messages: Sequence[Mapping[str, Any]]
    ) -> int:
        """Archive the active rows (active=0, compacted=1; still searchable), insert the
        compacted transcript, set the counters to it; returns how many rows were inserted.

        Args:
            session_id: the session's id.
            compacted_messages: the messages that replace the active history.
        """
        encoded = encode_bulk(session_id, compacted_messages, self.store.redaction)
        return self.store.write(lambda conn: _archive_and_compact(conn, session_id, encoded))

    def set_latest_matching_message_display_kind(
        self,
        session_id: str,
        *,
        role: str,
        content: Any,
        display_kind: str,
        display_metadata: Any = None,
    ) -> bool:
        """Tag the newest active row with this role and content; False if none matched.

        Args:
            session_id: the session's id.
            role: the message's role (user, assistant, tool, system).
            content: the message content: text, or a list of multimodal parts (stored as
                JSON).
            display_kind: how a client displays the message (a marker such as a tool
                summary), or None.
            display_metadata: what the client needs to display it that way (stored as JSON).
        """
        if not session_id or not role or not display_kind or _is_empty(content):
            return False
        # the row was stored redacted: compared with the same redaction
        redaction = self.store.redaction
        stored_content = content_value(redaction.redact_value(content))
        metadata = redaction.redact_fields({"display_metadata": display_metadata})
        values = {
            "display_kind": field_text("display_kind", display_kind),
            "display_metadata": encode_display_metadata(metadata["display_metadata"]),
        }
        return self.store.write(
            lambda conn: _tag_latest_match(conn, session_id, role, stored_content, values)
        )

    def set_latest_user_api_content(self, session_id: str, content: Any, api_content: Any) -> int:
        """Set `api_content` on the newest active user row if its content is `content`.

        Args:
            session_id: the session's id.
            content: the message content: text, or a list of multimodal parts (stored as
                JSON).
            api_content: the content as sent to the model's API, when it differs from
                `content`.
        """
        if not session_id:
            return 0
        redaction = self.store.redaction
        stored_content = content_value(redaction.redact_value(content))
        stored_api = field_text("api_content", redaction.redact_value(api_content))
        params = {"session_id": session_id, "content": stored_content, "api_content": stored_api}
        return 1 if self.store.write_one(_SET_LATEST_API_CONTENT, params) > 0 else 0

    def rewind_to_message(self, session_id: str, target_message_id: int) -> RewindResult:
        """Hide the target user message and everything after it (rows stay on disk).

        Raises ValueError if the target is not in the session or is not a user message.
        The counters are left as they are, as the original does at v23.

        Args:
            session_id: the session's id.
            target_message_id: the message to rewind to (it and everything after it become
                inactive).
        """
        result = self.store.write(lambda conn: _rewind(conn, session_id, target_message_id))
        return cast(RewindResult, result)

    def restore_rewound(self, session_id: str, since_message_id: int) -> int:
        """Make inactive rows with id >= `since_message_id` active again; returns how many.

        Args:
            session_id: the session's id.
            since_message_id: the message from which the rewound messages are restored.
        """
        params = {"session_id": session_id, "since": since_message_id}
        return self.store.write_one(_SET_ACTIVE[True], params)

    def pop_newest_message(self, session_id: str) -> MessageRow | None:
        """Delete the session's newest active message and return it (decoded as
        `get_messages` returns rows), with the counters lowered by what it counted; None
        when the session has no active message or does not exist. One unit of work, so
        concurrent pops each take a different message. As an append, refused with
        CompressionSessionBusyError while another holder's compression lock is live, and
        with CompressionSessionClosedError once compression has closed the session.

        Args:
            session_id: the session's id.
        """
        sql = self.store.dialect.sql
        row = self.store.write(lambda conn: _pop_newest(conn, sql, session_id))
        return cast("MessageRow | None", row)

    def clear_messages(self, session_id: str) -> None:
        """Delete every message of the session and zero its counters.

        Args:
            session_id: the session's id.
        """
        store = self.store

        def work(conn: Connection) -> None:
            _clear(conn, session_id)

        if not store.dialect.in_process:
            store.write(work)
            return
        # SQLite: the two statements at the kept writer's driver, without SQLAlchemy's
        # transaction (a DriverWrite: the rows the DELETE removed are its result)
        dialect = store.engine.dialect
        statements = (
            _CLEAR.bound(dialect, {"session_id": session_id}),
            _SET_COUNTS.bound(dialect, {"session_id": session_id, "messages": 0, "tool_calls": 0}),
        )
        write = DriverWrite(lambda: statements, rowcount=True)
        store.write(work, call=lambda: write)

    def publish_compression_child(
        self,
        *,
        parent_session_id: str,
        child_session_id: str,
        source: str,
        messages: Sequence[Mapping[str, Any]],
        model: str | None = None,
        model_config: Any = None,
        system_prompt: str | None = None,
        cwd: str | None = None,
        profile_name: str | None = None,
        compression_lock_holder: str | None = None,
        require_compression_lease: bool = True,
    ) -> None:
        """Create the continuation of a compressed session with its first messages and end
        the parent with `compression`, all in one transaction (docs/reference/behaviour.md 12).

        Args:
            parent_session_id: the parent session's id.
            child_session_id: the id of the continuation session to create.
            source: the source (cli, telegram, discord, cron, ...).
            messages: the messages, as dicts with the `append_message` fields.
            model: the model's name.
            model_config: the model's settings (stored as JSON).
            system_prompt: the assembled system prompt.
            cwd: the working directory of the session.
            profile_name: the Hermes profile the session runs under.
            compression_lock_holder: the holder of the session's compression lock; a write
                from anyone else is refused while the lock is held.
            require_compression_lease: refuse unless the caller holds the parent's
                compression lock.
        """
        encoded = encode_bulk(child_session_id, messages, self.store.redaction)
        if isinstance(model_config, str):
            stored_config: str | None = model_config or None
        else:
            stored_config = field_json("model_config", model_config)
        child = {
            "id": child_session_id,
            "source": source,
            "model": model,
            "model_config": stored_config,
            "system_prompt": scrub(system_prompt),
            "cwd": cwd,
            "profile_name": profile_name,
        }
        holder, required = compression_lock_holder, require_compression_lease
        sql = self.store.dialect.sql
        self.store.write(
            lambda conn: _publish_child(
                conn, sql, parent_session_id, child, encoded, holder, required
            )
        )

    # ----------------------------------------------------------------- readers

    def get_messages(
        self,
        session_id: str,
        include_inactive: bool = False,
        limit: int | None = None,
        offset: int = 0,
    ) -> list[MessageRow]:
        """Full rows in id order, decoded; only active rows unless `include_inactive`.

        Args:
            session_id: the session's id.
            include_inactive: also messages marked inactive (rewound or compacted away).
            limit: at most this many rows.
            offset: skip this many rows first.
        """
        limit, offset = row_limit(limit), row_offset(offset)
        limited = limit is not None
        skipped = offset > 0
        params = {"session_id": session_id, "limit": limit, "offset": offset}

        limit_in_sql = None if limit is None else written(limit)

        def page(conn: Connection) -> Prepared:
            return _conversation_page(
                message_columns(conn), include_inactive, limited, skipped, limit_in_sql
            )

        rows = data_dicts(self.store.read_one(page, params, all_dicts))
        return cast("list[MessageRow]", [decode_fields(r) for r in rows])

    def get_newest_messages(
        self,
        session_id: str,
        limit: int = 20,
        include_inactive: bool = False,
        columns: Sequence[str] | None = None,
    ) -> list[MessageRow]:
        """The session's newest `limit` rows, in id (conversation) order, decoded as
        `get_messages` returns them: one read that walks the session's index from its
        newest message and stops after `limit` rows.

        Args:
            session_id: the session's id.
            limit: at most this many rows (a negative limit: all of them).
            include_inactive: also messages marked inactive (rewound or compacted away).
            columns: only these columns of each row (InvalidInput for a name that is
                not a column of messages); None: every column. A caller that needs a
                few columns of many rows reads and decodes that much less.
        """
        rows_wanted = bound_limit(limit)
        params = {"session_id": session_id, "limit": rows_wanted}
        chosen = None if columns is None else _chosen_columns(columns)
        limit_in_sql = written(rows_wanted)

        def page(conn: Connection) -> Prepared:
            return _newest_page(
                message_columns(conn) if chosen is None else chosen, include_inactive, limit_in_sql
            )

        rows = data_dicts(self.store.read_one(page, params, all_dicts))
        rows.reverse()
        return cast("list[MessageRow]", [decode_fields(r) for r in rows])

    def get_messages_around(
        self, session_id: str, around_message_id: int, window: int = 5
    ) -> MessageWindow:
        """Up to `window` rows either side of the anchor (inactive included), by id.

        Args:
            session_id: the session's id.
            around_message_id: the message the window is centred on.
            window: how many messages on each side.
        """
        found = self.store.read(lambda conn: _window(conn, session_id, around_message_id, window))
        if found is None:
            return {"window": [], "messages_before": 0, "messages_after": 0}
        before, anchor, after = found
        return {
            "window": _decoded((*before, anchor, *after)),
            "messages_before": len(before),
            "messages_after": len(after),
        }

    def get_anchored_view(
        self,
        session_id: str,
        around_message_id: int,
        window: int = 5,
        bookend: int = 3,
        keep_roles: Sequence[str] | None = ("user", "assistant"),
    ) -> AnchoredView:
        """The window around the anchor plus the session's first and last `bookend` rows
        outside it. `messages_before`/`messages_after` count the rows actually returned
        after the role filter.

        Args:
            session_id: the session's id.
            around_message_id: the message the window is centred on.
            window: how many messages on each side.
            bookend: how many of the session's first and last messages outside the window to
                add.
            keep_roles: the roles of the messages the view keeps.
        """
        bookend = row_count(bookend)
        found = self.store.read(
            lambda conn: _anchored_rows(
                conn, session_id, around_message_id, window, bookend, keep_roles
            )
        )
        if found is None:
            return {
                "window": [],
                "messages_before": 0,
                "messages_after": 0,
                "bookend_start": [],
                "bookend_end": [],
            }
        before, anchor, after, start, end = found
        if keep_roles is not None:
            before = [r for r in before if r["role"] in keep_roles]
            after = [r for r in after if r["role"] in keep_roles]
        return {
            "window": _decoded((*before, anchor, *after)),
            "messages_before": len(before),
            "messages_after": len(after),
            "bookend_start": _decoded(start),
            "bookend_end": _decoded(end),
        }

    def list_recent_user_messages(
        self, session_id: str, limit: int = 20, include_inactive: bool = False
    ) -> list[RecentUserMessage]:
        """Newest first: `{id, timestamp, preview}` of user rows without a display kind.

        Args:
            session_id: the session's id.
            limit: at most this many rows.
            include_inactive: also messages marked inactive (rewound or compacted away).
        """
        wanted = row_limit(limit)
        statement = _recent_user_rows(
            include_inactive, wanted is not None, None if wanted is None else written(wanted)
        )
        params = {"session_id": session_id, "limit": wanted}
        rows = self.store.read_one(statement, params, all_tuples)
        return [
            {
                "id": message_id,
                "timestamp": timestamp,
                "preview": shape_message_preview(decode_content(content)),
            }
            for message_id, timestamp, content in rows
        ]

    def has_archived_messages(self, session_id: str) -> bool:
        """Whether any row of the session is inactive (rewound or compaction-archived).

        Args:
            session_id: the session's id.
        """
        found = self.store.read_one(_ARCHIVED_ONE, {"session_id": session_id}, first_tuple)
        return found is not None

    def has_platform_message_id(self, session_id: str, platform_message_id: str) -> bool:
        """Whether a row of the session carries this platform (chat service) message id.

        Args:
            session_id: the session's id.
            platform_message_id: the platform's id for the message.
        """
        params = {"session_id": session_id, "platform_message_id": platform_message_id}
        return self.store.read_one(_WITH_PLATFORM_ID, params, first_tuple) is not None

    def message_count(self, session_id: str | None = None) -> int:
        """Rows on disk (inactive included), for one session or the whole database.

        Args:
            session_id: the session's id.
        """
        if session_id is None:
            return int(self.store.read_one(_ALL_COUNT, {}, first_value))
        return int(self.store.read_one(_SESSION_COUNT, {"session_id": session_id}, first_value))

    def get_messages_as_conversation(
        self,
        session_id: str,
        include_ancestors: bool = False,
        include_inactive: bool = False,
        repair_alternation: bool = False,
    ) -> list[ConversationMessage]:
        """The transcript in the agent's message format (docs/reference/behaviour.md 4.1).

        With `include_ancestors` the rows of the whole lineage come root first (each
        session's rows in id order) and prompts replayed across a compression boundary
        appear once. `repair_alternation` runs `repair_message_alternation()`.

        Args:
            session_id: the session's id.
            include_ancestors: also the messages of the sessions this one continues.
            include_inactive: also messages marked inactive (rewound or compacted away).
            repair_alternation: merge consecutive messages of the same role so roles
                alternate, as model APIs want.
        """
        if include_ancestors:
            lineage = self.store.read(
                lambda conn: _lineage_rows(conn, session_id, True, include_inactive)
            )
            rows = _rows_of(lineage)
        else:  # the session's own rows: one statement
            rows = self.store.read_one(
                _conversation_rows(include_inactive), {"session_id": session_id}, all_tuples
            )
        return _messages(conversation(rows, include_ancestors, repair_alternation))

    def get_resume_conversations(
        self, session_id: str
    ) -> tuple[list[ConversationMessage], list[ConversationMessage]]:
        """(model_history, display_history) from one read of the lineage's active rows
        (docs/reference/behaviour.md 4.2): what the model is sent is the session's own rows with the
        alternation repair; what the user sees is the whole lineage, root first, with
        replayed prompts shown once. Equal to `get_messages_as_conversation(id,
        repair_alternation=True)` and `get_messages_as_conversation(id,
        include_ancestors=True)`, without a second read in between.

        Args:
            session_id: the session's id.
        """
        lineage = self.store.read(lambda conn: _lineage_rows(conn, session_id, True, False))
        own = lineage[-1][1]  # the chain ends with the session itself
        return (
            _messages(conversation(own, dedupe_replays=False, repair_alternation=True)),
            _messages(
                conversation(_rows_of(lineage), dedupe_replays=True, repair_alternation=False)
            ),
        )

    def get_ancestor_display_prefix(self, session_id: str) -> list[ConversationMessage]:
        """The display rows of the session's ancestors only, root first, with replayed
        prompts de-duplicated among them (what a UI shows above the live session's own
        transcript); [] when the session has no parent (docs/reference/behaviour.md 4.2).

        Args:
            session_id: the session's id.
        """
        # most sessions have no parent: that is one statement, read alone; a lineage is
        # read whole in one transaction, the parent again with it
        parent = self.store.read_one(_PARENT, {"session_id": session_id}, first_value)
        if not parent or parent == session_id:
            return []
        lineage = self.store.read(lambda conn: _ancestors_rows(conn, session_id))
        if not lineage:
            return []
        ancestors = _rows_of(lineage)
        return _messages(conversation(ancestors, dedupe_replays=True, repair_alternation=False))


__all__ = [
    "MessageRepository",
    "decode_message",
    "encode_bulk",
    "repair_message_alternation",
    "strip_memory_context",
]
