"""hermes_store.integrations.adk (issue 40): Google ADK's session service on hermes-store,
on real SQLite files and the real PostgreSQL server. Skipped without the `adk` extra.

Each test drives the service as ADK does (coroutines, on a loop of its own) and then
looks at what the database holds through hermes-store itself: the events as messages
(searchable, in the change feed), the state in the hs0008 tables, nothing of `temp:`."""

from __future__ import annotations

import asyncio
import json
import math
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

import pytest

pytest.importorskip("google.adk", reason="the adk extra is not installed (pip install -e '.[adk]')")

from google.adk.errors import StaleSessionError  # noqa: E402
from google.adk.errors.already_exists_error import AlreadyExistsError  # noqa: E402
from google.adk.errors.session_not_found_error import SessionNotFoundError  # noqa: E402
from google.adk.events.event import Event  # noqa: E402
from google.adk.events.event_actions import EventActions  # noqa: E402
from google.adk.sessions.base_session_service import GetSessionConfig  # noqa: E402
from google.adk.sessions.session import Session  # noqa: E402
from google.genai import types  # noqa: E402
from sqlalchemy import text  # noqa: E402

from hermes_store import (  # noqa: E402
    ChangeFeed,
    MaintenanceRepository,
    MessageRepository,
    SearchRepository,
    Store,
)
from hermes_store.contract import (  # noqa: E402
    ADK_APP_STATES_TABLE,
    ADK_EVENT_KIND,
    ADK_SESSIONS_TABLE,
    ADK_USER_STATES_TABLE,
)
from hermes_store.errors import InvalidInput, StoreError  # noqa: E402
from hermes_store.integrations.adk import (  # noqa: E402
    AdkSessionExists,
    AdkSessionNotFound,
    AdkStaleSession,
    HermesSessionService,
)
from hermes_store.migration.copy import copy_database  # noqa: E402

T = TypeVar("T")


def _run(url: str, work: Callable[[HermesSessionService], Awaitable[T]]) -> T:
    """`work(service)` on a loop of its own, the service opened off the loop and closed."""

    async def main() -> T:
        async with await HermesSessionService.open(url) as service:
            return await work(service)

    return asyncio.run(main())


def _holder(url: str, app: str, user: str, session_id: str) -> str:
    """The hermes-store session that holds an ADK session's events."""
    with Store(url) as store, store.read() as conn:
        found = conn.execute(
            text(
                f"SELECT session_id FROM {ADK_SESSIONS_TABLE}"
                " WHERE app_name = :a AND user_id = :u AND id = :i"
            ),
            {"a": app, "u": user, "i": session_id},
        ).scalar()
    assert found is not None
    return str(found)


def _rows(url: str, sql: str) -> list[Any]:
    with Store(url) as store, store.read() as conn:
        return list(conn.execute(text(sql)).all())


def _event(author: str = "user", said: str | None = None, **kwargs: Any) -> Event:
    content = None
    if said is not None:
        role = "user" if author == "user" else "model"
        content = types.Content(role=role, parts=[types.Part(text=said)])
    return Event(invocation_id="inv", author=author, content=content, **kwargs)


def test_an_event_round_trips_and_is_a_searchable_message(backend_url: str) -> None:
    call = types.Part(function_call=types.FunctionCall(name="book", args={"city": "Kyoto"}))
    rich = Event(
        invocation_id="inv-2",
        author="planner",
        content=types.Content(
            role="model",
            parts=[
                types.Part(text="Booking flights to Kyoto"),
                call,
                types.Part.from_bytes(data=b"\x00\xffpng", mime_type="image/png"),
            ],
        ),
        actions=EventActions(state_delta={"step": 2}, artifact_delta={"plan.md": 1}),
        long_running_tool_ids={"tool-1"},
        custom_metadata={"k": [1, 2.5, None]},
        timestamp=1_800_000_000.123456,
    )

    async def work(service: HermesSessionService) -> tuple[Session, Session | None]:
        session = await service.create_session(
            app_name="travel", user_id="ada", session_id="trip-1", state={"step": 0}
        )
        await service.append_event(session, _event(said="flights to kyoto please"))
        await service.append_event(session, rich)
        got = await service.get_session(app_name="travel", user_id="ada", session_id="trip-1")
        return session, got

    session, got = _run(backend_url, work)
    assert got is not None
    assert got == session  # events, merged state, last_update_time and the stale marker
    assert got.events[1] == rich
    assert got.events[1].content.parts[2].inline_data.data == b"\x00\xffpng"
    assert got.last_update_time == rich.timestamp
    assert got.state == {"step": 2}

    holder = _holder(backend_url, "travel", "ada", "trip-1")
    with Store(backend_url) as store:
        messages = MessageRepository(store).get_messages(holder)
        assert [(m["role"], m["content"]) for m in messages] == [
            ("user", "flights to kyoto please"),
            ("assistant", "Booking flights to Kyoto"),
        ]
        assert [m["platform_message_id"] for m in messages] == [e.id for e in got.events]
        assert {m["display_kind"] for m in messages} == {ADK_EVENT_KIND}
        hits = SearchRepository(store).search_messages("kyoto")
        assert {hit["session_id"] for hit in hits} == {holder}
        kinds = [c.kind for c in ChangeFeed(store).changes(since=0) if c.session_id == holder]
        assert kinds.count("message.appended") == 2
        session_row = _rows(
            backend_url, f"SELECT source, user_id FROM sessions WHERE id = '{holder}'"
        )
        assert session_row == [("adk", "ada")]


def test_state_prefixes_are_shared_as_adk_shares_them_and_temp_is_never_stored(
    backend_url: str,
) -> None:
    async def work(service: HermesSessionService) -> dict[str, Any]:
        s1 = await service.create_session(
            app_name="app",
            user_id="u1",
            session_id="s1",
            state={"app:theme": "dark", "user:lang": "en", "draft": 1, "temp:scratch": "x"},
        )
        assert s1.state == {"app:theme": "dark", "user:lang": "en", "draft": 1}
        delta = {"app:limit": 3, "user:lang": "fr", "draft": 2, "temp:t": "kept in memory"}
        await service.append_event(s1, _event(actions=EventActions(state_delta=dict(delta))))
        assert s1.state["temp:t"] == "kept in memory"  # this invocation still sees it
        same_user = await service.create_session(app_name="app", user_id="u1", session_id="s2")
        other_user = await service.create_session(app_name="app", user_id="u2", session_id="s3")
        other_app = await service.create_session(app_name="other", user_id="u1", session_id="s4")
        got = await service.get_session(app_name="app", user_id="u1", session_id="s1")
        assert got is not None
        return {
            "same_user": same_user.state,
            "other_user": other_user.state,
            "other_app": other_app.state,
            "s1": got.state,
            "s1_delta": got.events[0].actions.state_delta,
            "user": await service.get_user_state(app_name="app", user_id="u1"),
            "nobody": await service.get_user_state(app_name="app", user_id="u9"),
            "listed": {
                s.id: s.state for s in (await service.list_sessions(app_name="app")).sessions
            },
        }

    seen = _run(backend_url, work)
    shared = {"app:theme": "dark", "app:limit": 3}
    assert seen["same_user"] == {**shared, "user:lang": "fr"}
    assert seen["other_user"] == shared
    assert seen["other_app"] == {}
    assert seen["s1"] == {**shared, "user:lang": "fr", "draft": 2}
    assert seen["s1_delta"] == {"app:limit": 3, "user:lang": "fr", "draft": 2}
    assert seen["user"] == {"lang": "fr"}
    assert seen["nobody"] == {}
    assert seen["listed"] == {
        "s1": seen["s1"],
        "s2": {**shared, "user:lang": "fr"},
        "s3": shared,
    }
    stored = _rows(
        backend_url,
        f"SELECT state FROM {ADK_SESSIONS_TABLE} UNION ALL SELECT state FROM {ADK_APP_STATES_TABLE}"
        f" UNION ALL SELECT state FROM {ADK_USER_STATES_TABLE}"
        " UNION ALL SELECT display_metadata FROM messages",
    )
    assert stored and not any("temp:" in str(row[0]) for row in stored)
    app_state = _rows(
        backend_url, f"SELECT state FROM {ADK_APP_STATES_TABLE} WHERE app_name = 'app'"
    )
    assert json.loads(app_state[0][0]) == {"theme": "dark", "limit": 3}


def test_a_stale_session_is_refused_and_nothing_is_written(backend_url: str) -> None:
    async def work(service: HermesSessionService) -> Session | None:
        first = await service.create_session(app_name="a", user_id="u", session_id="s")
        second = await service.get_session(app_name="a", user_id="u", session_id="s")
        assert second is not None
        await service.append_event(second, _event(actions=EventActions(state_delta={"k": 1})))
        with pytest.raises(AdkStaleSession, match="modified in storage") as refused:
            await service.append_event(
                first, _event(said="late", actions=EventActions(state_delta={"k": 2}))
            )
        assert isinstance(refused.value, StaleSessionError | ValueError | StoreError)
        assert len(first.events) == 0  # the refused event never reached the Session either
        # read again, the same writer goes on
        fresh = await service.get_session(app_name="a", user_id="u", session_id="s")
        assert fresh is not None
        await service.append_event(fresh, _event(actions=EventActions(state_delta={"k": 3})))
        return await service.get_session(app_name="a", user_id="u", session_id="s")

    final = _run(backend_url, work)
    assert final is not None
    assert final.state == {"k": 3} and len(final.events) == 2
    holder = _holder(backend_url, "a", "u", "s")
    with Store(backend_url) as store:
        assert MessageRepository(store).message_count(holder) == 2
        assert not any(
            m["content"] == "late" for m in MessageRepository(store).get_messages(holder)
        )


def test_a_session_without_a_marker_is_judged_by_its_last_event(backend_url: str) -> None:
    """A Session object built elsewhere (no stale marker) may append while its newest
    event is the stored newest one, and is refused once storage moved past it."""

    async def work(service: HermesSessionService) -> None:
        session = await service.create_session(app_name="a", user_id="u", session_id="s")
        await service.append_event(session, _event(timestamp=session.last_update_time + 5))
        copy = Session(
            id=session.id,
            app_name="a",
            user_id="u",
            events=list(session.events),
            last_update_time=session.last_update_time - 1,
        )
        await service.append_event(copy, _event(timestamp=session.last_update_time + 10))
        behind = Session(id=session.id, app_name="a", user_id="u", events=[], last_update_time=0.0)
        with pytest.raises(AdkStaleSession):
            await service.append_event(behind, _event())

    _run(backend_url, work)


def test_recent_events_and_after_timestamp(backend_url: str) -> None:
    async def work(service: HermesSessionService) -> dict[str, list[float]]:
        session = await service.create_session(app_name="a", user_id="u", session_id="s")
        for second in (10.0, 20.0, 30.0, 40.0, 50.0):
            await service.append_event(session, _event(timestamp=second))

        async def stamps(**config: Any) -> list[float]:
            got = await service.get_session(
                app_name="a", user_id="u", session_id="s", config=GetSessionConfig(**config)
            )
            assert got is not None
            return [event.timestamp for event in got.events]

        return {
            "all": await stamps(),
            "none": await stamps(num_recent_events=0),
            "last2": await stamps(num_recent_events=2),
            "since30": await stamps(after_timestamp=30.0),
            "both": await stamps(num_recent_events=4, after_timestamp=30.0),
            "more": await stamps(num_recent_events=99),
        }

    seen = _run(backend_url, work)
    assert seen == {
        "all": [10.0, 20.0, 30.0, 40.0, 50.0],
        "none": [],
        "last2": [40.0, 50.0],
        "since30": [30.0, 40.0, 50.0],
        "both": [30.0, 40.0, 50.0],
        "more": [10.0, 20.0, 30.0, 40.0, 50.0],
    }


def test_delete_and_unknown_ids_behave_as_adk_expects(backend_url: str) -> None:
    async def work(service: HermesSessionService) -> None:
        session = await service.create_session(app_name="a", user_id="u", session_id="s")
        await service.append_event(session, _event(said="bye"))
        with pytest.raises(AdkSessionExists) as taken:
            await service.create_session(app_name="a", user_id="u", session_id="s")
        assert isinstance(taken.value, AlreadyExistsError)
        # the same id is free for another user and another app
        await service.create_session(app_name="a", user_id="v", session_id="s")
        await service.create_session(app_name="b", user_id="u", session_id="s")
        assert await service.get_session(app_name="a", user_id="u", session_id="nope") is None
        assert await service.get_session(app_name="zz", user_id="u", session_id="s") is None
        assert (await service.list_sessions(app_name="nope")).sessions == []
        await service.delete_session(app_name="a", user_id="u", session_id="nope")  # no error
        await service.delete_session(app_name="a", user_id="u", session_id="s")
        assert await service.get_session(app_name="a", user_id="u", session_id="s") is None
        with pytest.raises(AdkSessionNotFound) as missing:
            await service.append_event(session, _event())
        assert isinstance(missing.value, SessionNotFoundError)
        left = await service.list_sessions(app_name="a")
        assert [(s.user_id, s.id) for s in left.sessions] == [("v", "s")]

    _run(backend_url, work)
    # the deleted session's hermes-store session and messages went with it
    assert _rows(backend_url, "SELECT COUNT(*) FROM messages") == [(0,)]
    assert _rows(backend_url, "SELECT COUNT(*) FROM sessions") == [(2,)]
    assert _rows(backend_url, f"SELECT COUNT(*) FROM {ADK_SESSIONS_TABLE}") == [(2,)]


def test_deleting_the_hermes_session_takes_the_adk_session_with_it(backend_url: str) -> None:
    _run(backend_url, lambda s: s.create_session(app_name="a", user_id="u", session_id="s"))
    holder = _holder(backend_url, "a", "u", "s")
    with Store(backend_url) as store:
        MaintenanceRepository(store).delete_session(holder)
    found = _run(backend_url, lambda s: s.get_session(app_name="a", user_id="u", session_id="s"))
    assert found is None


def test_bad_input_gets_typed_errors(backend_url: str) -> None:
    async def work(service: HermesSessionService) -> None:
        with pytest.raises(InvalidInput, match="app_name must be a string"):
            await service.create_session(app_name=7, user_id="u")  # type: ignore[arg-type]
        with pytest.raises(InvalidInput, match="NUL"):
            await service.create_session(app_name="a", user_id="u\x00")
        with pytest.raises(InvalidInput, match="must be a dict"):
            await service.create_session(app_name="a", user_id="u", state=["x"])  # type: ignore[arg-type]
        with pytest.raises(InvalidInput, match="cannot be stored as JSON"):
            await service.create_session(app_name="a", user_id="u", state={"f": object()})
        with pytest.raises(InvalidInput, match="GetSessionConfig"):
            await service.get_session(
                app_name="a",
                user_id="u",
                session_id="s",
                config={"num_recent_events": 1},  # type: ignore[arg-type]
            )
        session = await service.create_session(app_name="a", user_id="u", session_id="s")
        with pytest.raises(InvalidInput, match="ADK Event"):
            await service.append_event(session, {"author": "user"})  # type: ignore[arg-type]
        with pytest.raises(InvalidInput, match="ADK Session"):
            await service.append_event("s", _event())  # type: ignore[arg-type]
        with pytest.raises(InvalidInput, match="finite"):
            await service.append_event(session, _event(timestamp=math.nan))
        # nothing of the refused calls was stored
        got = await service.get_session(app_name="a", user_id="u", session_id="s")
        assert got is not None and got.events == [] and got.state == {}

    _run(backend_url, work)
    with pytest.raises(InvalidInput, match="not both"):
        HermesSessionService("x.db", store=object())  # type: ignore[arg-type]


def test_copy_carries_the_adk_sessions_to_postgresql(fresh_db: str, pg_url: str) -> None:
    async def work(service: HermesSessionService) -> Session | None:
        session = await service.create_session(
            app_name="a", user_id="u", session_id="s", state={"app:x": 1, "user:y": 2, "z": 3}
        )
        await service.append_event(session, _event(said="copied across"))
        return await service.get_session(app_name="a", user_id="u", session_id="s")

    before = _run(fresh_db, work)
    report = copy_database(fresh_db, pg_url)
    assert report.ok, report
    for table in (ADK_SESSIONS_TABLE, ADK_APP_STATES_TABLE, ADK_USER_STATES_TABLE):
        assert report.copied[table] == 1, report.copied
    after = _run(pg_url, lambda s: s.get_session(app_name="a", user_id="u", session_id="s"))
    assert after == before


def test_the_service_serves_a_given_async_store_and_leaves_it_open(
    fresh_db: str, tmp_path: Path
) -> None:
    from hermes_store.aio import AsyncStore

    async def main() -> int:
        store = await AsyncStore.open(fresh_db)
        try:
            async with HermesSessionService(store=store) as service:
                await service.create_session(app_name="a", user_id="u", session_id="s")
            # closing the service left the caller's store open
            return await store.sessions.session_count()
        finally:
            await store.aclose()

    assert asyncio.run(main()) == 1


def test_concurrent_appends_to_one_app_lose_no_shared_state(backend_url: str) -> None:
    """Sessions of one app (and one user) updating their shared state at once: every key
    each one wrote is kept (each state row is locked while it changes)."""

    async def work(service: HermesSessionService) -> tuple[dict[str, Any], dict[str, Any]]:
        sessions = [
            await service.create_session(app_name="a", user_id="u", session_id=f"s{i}")
            for i in range(8)
        ]
        await asyncio.gather(
            *(
                service.append_event(
                    session,
                    _event(actions=EventActions(state_delta={f"app:k{i}": i, f"user:k{i}": i})),
                )
                for i, session in enumerate(sessions)
            )
        )
        got = await service.get_session(app_name="a", user_id="u", session_id="s0")
        assert got is not None
        return got.state, await service.get_user_state(app_name="a", user_id="u")

    state, user = _run(backend_url, work)
    assert state == {**{f"app:k{i}": i for i in range(8)}, **{f"user:k{i}": i for i in range(8)}}
    assert user == {f"k{i}": i for i in range(8)}


def test_with_a_policy_on_an_event_is_stored_and_read_back_redacted(
    backend_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The store's redaction policy reaches the event's text (`content`, searched) and the
    stored event (`display_metadata`), string by string: get_session rebuilds the event
    with the markers in place."""
    monkeypatch.setenv("HERMES_STORE_REDACT", "on")
    aws, openai = "AKIAIOSFODNN7EXAMPLE", "sk-proj-" + "Q" * 40
    call = types.Part(function_call=types.FunctionCall(name="deploy", args={"key": openai}))
    event = Event(
        invocation_id="inv",
        author="ops",
        content=types.Content(role="model", parts=[types.Part(text=f"use {aws}"), call]),
    )

    async def work(service: HermesSessionService) -> Session | None:
        session = await service.create_session(app_name="ops", user_id="ada", session_id="d1")
        await service.append_event(session, event)
        return await service.get_session(app_name="ops", user_id="ada", session_id="d1")

    got = _run(backend_url, work)
    assert got is not None
    parts = got.events[0].content.parts
    assert parts[0].text == "use [REDACTED:aws-access-key]"
    assert parts[1].function_call.args == {"key": "[REDACTED:openai-key]"}
    stored = _rows(backend_url, "SELECT content, display_metadata FROM messages")
    assert stored[0][0] == "use [REDACTED:aws-access-key]"
    assert aws not in json.dumps([list(r) for r in stored])
    assert openai not in json.dumps([list(r) for r in stored])
