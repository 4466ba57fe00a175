"""Google ADK's session service on hermes-store: `HermesSessionService`, a
`google.adk.sessions.BaseSessionService` whose sessions, state and events live in a
hermes-store database (SQLite or PostgreSQL). Install the `adk` extra
(`pip install 'hermes-store[adk]'`); nothing else in hermes_store imports google.adk.

    service = await HermesSessionService.open("state.db")
    runner = Runner(agent=agent, app_name="my_app", session_service=service)
    ...
    await service.close()

Where things are kept (revision hs0008, docs/adk.md):

- An ADK session is a row of `hermes_store_adk_sessions`, keyed as ADK keys it
  (app_name, user_id, id), holding its session-scoped state, its times and a revision
  that grows with every event. It names one hermes-store session (`sessions.id`, source
  `adk`, the ADK user as `user_id`) whose messages are the events.
- An event is one message of that session: its text parts as `content` (so hermes-store
  search finds it), `user` or `assistant` as role, the event's timestamp and id
  (`platform_message_id`), and the whole event as JSON in `display_metadata` under
  `display_kind` `adk_event`, from which it is read back exactly (with the store's
  redaction policy on, both columns are redacted, so it is read back with the markers).
  Events are therefore in the change feed and copied by `hermes-store copy` like any
  message.
- `app:` and `user:` state live in `hermes_store_adk_app_states` and
  `hermes_store_adk_user_states` (without the prefix, as ADK stores them); `temp:` keys
  are never stored.

Behaviour follows ADK's `DatabaseSessionService`: `get_session` returns None for an
unknown session, `delete_session` of one does nothing, `append_event` to one raises
`SessionNotFoundError`, creating an id that exists raises `AlreadyExistsError`, and a
Session object older than what is stored (another writer appended since it was read)
raises `StaleSessionError`; each is also a hermes-store `StoreError`. Events are
returned in the order they were appended. Every call runs on the `AsyncStore`'s worker
threads, never on the event loop, and each write is one transaction.
"""

from __future__ import annotations

import json
import math
import time
import uuid
from collections.abc import Mapping
from typing import Any, cast

from google.adk.errors import StaleSessionError
from google.adk.errors.already_exists_error import AlreadyExistsError
from google.adk.errors.session_not_found_error import SessionNotFoundError
from google.adk.events.event import Event
from google.adk.sessions.base_session_service import (
    BaseSessionService,
    GetSessionConfig,
    ListSessionsResponse,
)
from google.adk.sessions.session import Session
from google.adk.sessions.state import State
from pydantic import ValidationError
from pydantic_core import PydanticSerializationError, to_jsonable_python
from sqlalchemy import Connection, Table, delete, insert, select, update
from sqlalchemy.engine import URL

from ..aio import AsyncStore
from ..contract import ADK_EVENT_KIND
from ..errors import InvalidInput, StoreError
from ..models.own import AdkAppState, AdkSession, AdkUserState
from ..repositories._dialect import SQLDialect, lock_key, upsert_insert
from ..repositories._sql import rowcount
from ..repositories._tables import SESSIONS, M
from ..repositories.deletion import delete_ids
from ..repositories.encoding import epoch_seconds
from ..repositories.messages import _append_one

__all__ = [
    "AdkSessionExists",
    "AdkSessionNotFound",
    "AdkStaleSession",
    "HermesSessionService",
]

ADK_SESSIONS = cast(Table, AdkSession.__table__)
APP_STATES = cast(Table, AdkAppState.__table__)
USER_STATES = cast(Table, AdkUserState.__table__)
A = ADK_SESSIONS.c

#: The message fields an append takes (an event sets a few; the rest stay NULL).
MESSAGE_FIELDS = (
    "role", "content", "tool_name", "tool_calls", "tool_call_id", "token_count",
    "finish_reason", "reasoning", "reasoning_content", "reasoning_details",
    "codex_reasoning_items", "codex_message_items", "platform_message_id", "observed",
    "effect_disposition", "api_content", "display_kind", "display_metadata",
)  # fmt: skip

#: `sessions.source` of the hermes-store sessions that hold ADK events.
SOURCE = "adk"

#: ADK's own words, which its callers match on.
STALE_MESSAGE = (
    "The session has been modified in storage since it was loaded. "
    "Please reload the session before appending more events."
)


# The ignores: without google-adk installed (the type check of CI) its classes are Any,
# and subclassing Any is an error there; where ADK is installed there is nothing to ignore.
class AdkSessionExists(StoreError, AlreadyExistsError):  # type: ignore[misc,unused-ignore]
    """create_session with an id the app and user already have (ADK's AlreadyExistsError)."""


class AdkSessionNotFound(StoreError, SessionNotFoundError):  # type: ignore[misc,unused-ignore]
    """append_event to a session that is not stored (ADK's SessionNotFoundError)."""


class AdkStaleSession(StoreError, StaleSessionError):  # type: ignore[misc,unused-ignore]
    """append_event from a Session object read before another writer appended to the same
    session (ADK's StaleSessionError, a ValueError): get the session again and retry."""


# --------------------------------------------------------------------------- checks


def _name(value: object, what: str) -> str:
    if not isinstance(value, str):
        raise InvalidInput(f"an ADK {what} must be a string, not {type(value).__name__}")
    if "\x00" in value:
        raise InvalidInput(f"an ADK {what} cannot hold a NUL character")
    return value


def _json_object(value: Mapping[str, Any], what: str) -> dict[str, Any]:
    """`value` as JSON-ready data (datetimes, models and the like as ADK serialises
    them); InvalidInput for what has no JSON form."""
    try:
        ready = to_jsonable_python(dict(value))
    except (PydanticSerializationError, TypeError, ValueError) as exc:
        raise InvalidInput(f"the {what} cannot be stored as JSON: {exc}") from None
    return cast(dict[str, Any], ready)


def _split_state(state: Mapping[str, Any], what: str) -> tuple[dict[str, Any], ...]:
    """(app, user, session) parts of a state or a state delta, prefixes removed from the
    first two, `temp:` keys dropped."""
    if not isinstance(state, Mapping):
        raise InvalidInput(f"the {what} must be a dict, not {type(state).__name__}")
    app: dict[str, Any] = {}
    user: dict[str, Any] = {}
    session: dict[str, Any] = {}
    for key, value in _json_object(state, what).items():
        if key.startswith(State.APP_PREFIX):
            app[key.removeprefix(State.APP_PREFIX)] = value
        elif key.startswith(State.USER_PREFIX):
            user[key.removeprefix(State.USER_PREFIX)] = value
        elif not key.startswith(State.TEMP_PREFIX):
            session[key] = value
    return app, user, session


def _merged(app: dict[str, Any], user: dict[str, Any], session: dict[str, Any]) -> dict[str, Any]:
    merged = dict(session)
    merged.update({State.APP_PREFIX + k: v for k, v in app.items()})
    merged.update({State.USER_PREFIX + k: v for k, v in user.items()})
    return merged


def _marker(revision: int) -> str:
    """The stale-session marker a Session object carries: the stored revision it saw."""
    return f"hermes-store:{revision}"


def _set_marker(session: Session, revision: int) -> None:
    # ADK sessions carry the revision they were read at (ADK 2.x); older ones have no
    # such field and are judged by their events instead.
    if "_storage_update_marker" in getattr(Session, "__private_attributes__", {}):
        session._storage_update_marker = _marker(revision)


def _loads(stored: str | None) -> dict[str, Any]:
    value = json.loads(stored) if stored else {}
    return value if isinstance(value, dict) else {}


def _text_of(event: Event) -> str | None:
    """The event's text parts, which hermes-store search indexes."""
    if event.content is None or not event.content.parts:
        return None
    texts = [part.text for part in event.content.parts if part.text]
    return "\n".join(texts) or None


# --------------------------------------------------------------------------- units of work


def _states(conn: Connection, app_name: str, user_id: str | None) -> tuple[dict[str, Any], ...]:
    app = conn.execute(select(APP_STATES.c.state).where(APP_STATES.c.app_name == app_name))
    user_state: dict[str, Any] = {}
    if user_id is not None:
        found = conn.execute(
            select(USER_STATES.c.state).where(
                USER_STATES.c.app_name == app_name, USER_STATES.c.user_id == user_id
            )
        ).scalar()
        user_state = _loads(found)
    return _loads(app.scalar()), user_state


def _state_row(
    conn: Connection, table: Table, keys: dict[str, str], at: float, lock: bool
) -> dict[str, Any]:
    """The state row of `keys`, made if missing; with `lock`, locked until commit
    (PostgreSQL; SQLite's write transaction holds the database)."""
    conn.execute(
        upsert_insert(conn, table)
        .values(**keys, state="{}", updated_at=at)
        .on_conflict_do_nothing(index_elements=list(keys))
    )
    where = [table.c[name] == value for name, value in keys.items()]
    read = select(table.c.state).where(*where)
    return _loads(conn.execute(read.with_for_update() if lock else read).scalar())


def _write_state(
    conn: Connection, table: Table, keys: dict[str, str], state: dict[str, Any], at: float
) -> None:
    where = [table.c[name] == value for name, value in keys.items()]
    conn.execute(update(table).where(*where).values(state=json.dumps(state), updated_at=at))


def _apply_deltas(
    conn: Connection, app_name: str, user_id: str, app: dict[str, Any], user: dict[str, Any]
) -> tuple[dict[str, Any], dict[str, Any]]:
    """Add the app and user deltas to their rows (made if missing); both states after."""
    at = time.time()
    app_keys = {"app_name": app_name}
    user_keys = {"app_name": app_name, "user_id": user_id}
    # only a row about to change is locked, so sessions of one app are made side by side
    app_state = _state_row(conn, APP_STATES, app_keys, at, lock=bool(app))
    user_state = _state_row(conn, USER_STATES, user_keys, at, lock=bool(user))
    if app:
        app_state.update(app)
        _write_state(conn, APP_STATES, app_keys, app_state, at)
    if user:
        user_state.update(user)
        _write_state(conn, USER_STATES, user_keys, user_state, at)
    return app_state, user_state


def _key(app_name: str, user_id: str, session_id: str) -> list[Any]:
    return [A.app_name == app_name, A.user_id == user_id, A.id == session_id]


def _create(
    conn: Connection,
    app_name: str,
    user_id: str,
    session_id: str,
    parts: tuple[dict[str, Any], ...],
) -> tuple[dict[str, Any], float, int]:
    app, user, session_state = parts
    # two creations of one id must not both pass the check (PostgreSQL; SQLite's write
    # transaction already serialises them)
    lock_key(conn, json.dumps(["adk", app_name, user_id, session_id]))
    if conn.execute(select(A.revision).where(*_key(app_name, user_id, session_id))).first():
        raise AdkSessionExists(f"Session with id {session_id} already exists.")
    at = time.time()
    holder = f"adk-{uuid.uuid4().hex}"
    conn.execute(insert(SESSIONS).values(id=holder, source=SOURCE, user_id=user_id, started_at=at))
    conn.execute(
        insert(ADK_SESSIONS).values(
            app_name=app_name,
            user_id=user_id,
            id=session_id,
            session_id=holder,
            state=json.dumps(session_state),
            created_at=at,
            updated_at=at,
            revision=0,
        )
    )
    app_state, user_state = _apply_deltas(conn, app_name, user_id, app, user)
    return _merged(app_state, user_state, session_state), at, 0


def _events(conn: Connection, holder: str, config: GetSessionConfig | None) -> list[Event]:
    if config is not None and config.num_recent_events == 0:
        return []
    stmt = select(M.display_metadata).where(
        M.session_id == holder, M.display_kind == ADK_EVENT_KIND
    )
    if config is not None and config.after_timestamp:
        stmt = stmt.where(M.timestamp >= config.after_timestamp)
    if config is not None and config.num_recent_events is not None:
        newest = stmt.order_by(M.id.desc()).limit(config.num_recent_events)
        stored = list(conn.execute(newest).scalars())[::-1]
    else:
        stored = list(conn.execute(stmt.order_by(M.id)).scalars())
    return [Event.model_validate_json(text) for text in stored]


def _get(
    conn: Connection,
    app_name: str,
    user_id: str,
    session_id: str,
    config: GetSessionConfig | None,
) -> Session | None:
    row = conn.execute(
        select(A.session_id, A.state, A.updated_at, A.revision).where(
            *_key(app_name, user_id, session_id)
        )
    ).first()
    if row is None:
        return None
    app_state, user_state = _states(conn, app_name, user_id)
    session = Session(
        id=session_id,
        app_name=app_name,
        user_id=user_id,
        state=_merged(app_state, user_state, _loads(row.state)),
        events=_events(conn, row.session_id, config),
        last_update_time=row.updated_at,
    )
    _set_marker(session, row.revision)
    return session


def _list(conn: Connection, app_name: str, user_id: str | None) -> list[Session]:
    stmt = select(A.id, A.user_id, A.state, A.updated_at, A.revision).where(A.app_name == app_name)
    if user_id is not None:
        stmt = stmt.where(A.user_id == user_id)
    rows = conn.execute(stmt.order_by(A.updated_at, A.user_id, A.id)).all()
    app_state, _ = _states(conn, app_name, None)
    users = select(USER_STATES.c.user_id, USER_STATES.c.state).where(
        USER_STATES.c.app_name == app_name
    )
    if user_id is not None:
        users = users.where(USER_STATES.c.user_id == user_id)
    user_states = {found.user_id: _loads(found.state) for found in conn.execute(users)}
    sessions = []
    for row in rows:
        session = Session(
            id=row.id,
            app_name=app_name,
            user_id=row.user_id,
            state=_merged(app_state, user_states.get(row.user_id, {}), _loads(row.state)),
            last_update_time=row.updated_at,
        )
        _set_marker(session, row.revision)
        sessions.append(session)
    return sessions


def _delete(conn: Connection, app_name: str, user_id: str, session_id: str) -> None:
    holder = conn.execute(select(A.session_id).where(*_key(app_name, user_id, session_id))).scalar()
    if holder is None:
        return
    conn.execute(delete(ADK_SESSIONS).where(*_key(app_name, user_id, session_id)))
    delete_ids(conn, [holder])


def _is_stale(conn: Connection, session: Session, holder: str, revision: int, at: float) -> bool:
    """Whether `session` was read before the stored revision (ADK's rule: its marker,
    else, for a Session without one, whether storage moved past its last event)."""
    marker = getattr(session, "_storage_update_marker", None)
    if marker is not None:
        return bool(marker != _marker(revision))
    if at <= session.last_update_time:
        return False
    newest = conn.execute(
        select(M.platform_message_id)
        .where(M.session_id == holder, M.display_kind == ADK_EVENT_KIND)
        .order_by(M.id.desc())
        .limit(1)
    ).scalar()
    if not session.events:
        return newest is not None
    return bool(newest != session.events[-1].id)


def _append(
    conn: Connection,
    sql: SQLDialect,
    session: Session,
    event: Event,
    parts: tuple[dict[str, Any], ...],
    stored: Mapping[str, Any],
    event_time: float,
) -> int:
    """Store `event` and its state deltas; the session's new revision. `stored`: the
    event's `content` and `display_metadata` as the store's policy redacted them."""
    app, user, delta = parts
    key = _key(session.app_name, session.user_id, session.id)
    row = conn.execute(
        select(A.session_id, A.state, A.updated_at, A.revision).where(*key).with_for_update()
    ).first()
    if row is None:
        raise AdkSessionNotFound(f"Session {session.id} not found.")
    if _is_stale(conn, session, row.session_id, row.revision, row.updated_at):
        raise AdkStaleSession(STALE_MESSAGE)
    if app or user:
        _apply_deltas(conn, session.app_name, session.user_id, app, user)
    values: dict[str, Any] = {"updated_at": event_time, "revision": row.revision + 1}
    if delta:
        values["state"] = json.dumps({**_loads(row.state), **delta})
    moved = conn.execute(
        update(ADK_SESSIONS).where(*key, A.revision == row.revision).values(values)
    )
    if rowcount(moved) == 0:  # another writer got in between (no row locks on SQLite)
        raise AdkStaleSession(STALE_MESSAGE)
    fields: dict[str, Any] = dict.fromkeys(MESSAGE_FIELDS)
    fields.update(
        role="user" if event.author == "user" else "assistant",
        platform_message_id=event.id,
        observed=False,
        display_kind=ADK_EVENT_KIND,
        **stored,
    )
    _append_one(conn, sql, row.session_id, None, event_time, fields)
    return int(row.revision) + 1


# --------------------------------------------------------------------------- the service


class HermesSessionService(BaseSessionService):  # type: ignore[misc,unused-ignore]
    """ADK's session service on a hermes-store database.

    Args:
        url: a database URL or a SQLite path (default: $HERMES_STORE_URL, else
            $HERMES_HOME/state.db), opened on the calling thread; in async code prefer
            `await HermesSessionService.open(url)`. The database must be at head
            (`hermes-store upgrade`).
        store: an open `AsyncStore` to use instead (it stays open when the service
            closes; its owner closes it).
    """

    def __init__(self, url: str | URL | None = None, *, store: AsyncStore | None = None) -> None:
        super().__init__()
        if store is not None and url is not None:
            raise InvalidInput("give HermesSessionService a url or a store, not both")
        self._owns_store = store is None
        self.store = store if store is not None else AsyncStore(url)

    @classmethod
    async def open(cls, url: str | URL | None = None) -> HermesSessionService:
        """Open the database without blocking the event loop (AsyncStore.open).

        Args:
            url: a database URL or a SQLite path (default: $HERMES_STORE_URL, else
                $HERMES_HOME/state.db).
        """
        service = cls(store=await AsyncStore.open(url))
        service._owns_store = True
        return service

    async def close(self) -> None:
        """Close the store if the service opened it (off the event loop)."""
        if self._owns_store:
            await self.store.aclose()

    async def __aenter__(self) -> HermesSessionService:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def create_session(
        self,
        *,
        app_name: str,
        user_id: str,
        state: dict[str, Any] | None = None,
        session_id: str | None = None,
    ) -> Session:
        """Create a session with `state` (its `app:` and `user:` keys update the app's and
        the user's state); AdkSessionExists if `session_id` is taken.

        Args:
            app_name: the ADK app.
            user_id: the ADK user.
            state: the initial state (`temp:` keys are not stored).
            session_id: the session's id (default: a new UUID).
        """
        app_name = _name(app_name, "app_name")
        user_id = _name(user_id, "user_id")
        session_id = str(uuid.uuid4()) if session_id is None else _name(session_id, "session id")
        parts = _split_state(state or {}, "session state")
        sync = self.store.sync
        merged, at, revision = await self.store.run(
            lambda: sync.write(lambda conn: _create(conn, app_name, user_id, session_id, parts))
        )
        session = Session(
            id=session_id, app_name=app_name, user_id=user_id, state=merged, last_update_time=at
        )
        _set_marker(session, revision)
        return session

    async def get_session(
        self,
        *,
        app_name: str,
        user_id: str,
        session_id: str,
        config: GetSessionConfig | None = None,
    ) -> Session | None:
        """The session with its merged state and events (in the order appended), or None.

        Args:
            app_name: the ADK app.
            user_id: the ADK user.
            session_id: the session's id.
            config: at most `num_recent_events` of the newest events, and only those
                with a timestamp at or after `after_timestamp`.
        """
        app_name = _name(app_name, "app_name")
        user_id = _name(user_id, "user_id")
        session_id = _name(session_id, "session id")
        if config is not None and not isinstance(config, GetSessionConfig):
            raise InvalidInput(f"config must be a GetSessionConfig, not {type(config).__name__}")
        sync = self.store.sync
        return await self.store.run(
            lambda: sync.read(lambda conn: _get(conn, app_name, user_id, session_id, config))
        )

    async def list_sessions(
        self, *, app_name: str, user_id: str | None = None
    ) -> ListSessionsResponse:
        """The app's sessions (one user's, or every user's with `user_id` None), oldest
        update first, with their merged state and without events.

        Args:
            app_name: the ADK app.
            user_id: the ADK user (None: every user).
        """
        app_name = _name(app_name, "app_name")
        if user_id is not None:
            user_id = _name(user_id, "user_id")
        sync = self.store.sync
        sessions = await self.store.run(
            lambda: sync.read(lambda conn: _list(conn, app_name, user_id))
        )
        return ListSessionsResponse(sessions=sessions)

    async def delete_session(self, *, app_name: str, user_id: str, session_id: str) -> None:
        """Delete the session and its events (its hermes-store session); nothing for an
        unknown one.

        Args:
            app_name: the ADK app.
            user_id: the ADK user.
            session_id: the session's id.
        """
        app_name = _name(app_name, "app_name")
        user_id = _name(user_id, "user_id")
        session_id = _name(session_id, "session id")
        sync = self.store.sync
        await self.store.run(
            lambda: sync.write(lambda conn: _delete(conn, app_name, user_id, session_id))
        )

    async def get_user_state(self, *, app_name: str, user_id: str) -> dict[str, Any]:
        """The user's state in the app, keys without the `user:` prefix ({} if none).

        Args:
            app_name: the ADK app.
            user_id: the ADK user.
        """
        app_name = _name(app_name, "app_name")
        user_id = _name(user_id, "user_id")
        sync = self.store.sync
        _app, user = await self.store.run(
            lambda: sync.read(lambda conn: _states(conn, app_name, user_id))
        )
        return user

    async def append_event(self, session: Session, event: Event) -> Event:
        """Store `event` (not a partial one) and its state delta in one transaction, then
        add it to `session`; AdkStaleSession if `session` was read before another writer
        appended, AdkSessionNotFound if it is not stored.

        Args:
            session: the session as read or created by this service.
            event: the event to append.
        """
        if not isinstance(session, Session):
            raise InvalidInput(f"session must be an ADK Session, not {type(session).__name__}")
        if not isinstance(event, Event):
            raise InvalidInput(f"event must be an ADK Event, not {type(event).__name__}")
        if event.partial:
            return event
        event_time = epoch_seconds(event.timestamp)
        if event_time is None or not math.isfinite(event_time):
            raise InvalidInput(f"an event's timestamp must be finite, not {event.timestamp}")
        # temp: keys reach the Session object (this invocation reads them) but not storage
        for key, value in (event.actions.state_delta or {}).items():
            if key.startswith(State.TEMP_PREFIX):
                session.state[key] = value
        if event.actions.state_delta:
            event.actions.state_delta = {
                key: value
                for key, value in event.actions.state_delta.items()
                if not key.startswith(State.TEMP_PREFIX)
            }
        parts = _split_state(event.actions.state_delta or {}, "event's state delta")
        try:
            event_json = event.model_dump_json(exclude_none=True)
            Event.model_validate_json(event_json)  # what get_session will do with it
        except (PydanticSerializationError, ValidationError, ValueError) as exc:
            raise InvalidInput(f"the event cannot be stored as JSON: {exc}") from None
        sync = self.store.sync
        sql = sync.dialect.sql
        # the store's policy, as every write path applies it (the event's text parts are
        # in both columns); redacted before the transaction, as appends do
        stored = sync.redaction.redact_fields(
            {"content": _text_of(event), "display_metadata": event_json}
        )
        revision = await self.store.run(
            lambda: sync.write(
                lambda conn: _append(conn, sql, session, event, parts, stored, event_time)
            )
        )
        session.last_update_time = event.timestamp
        _set_marker(session, revision)
        for key, value in (event.actions.state_delta or {}).items():
            session.state[key] = value
        session.events.append(event)
        return event
