"""hermes_store.integrations.openai_agents: the OpenAI Agents SDK's Session on real
SQLite files and the real PostgreSQL server (the `store` fixture runs each test on both).
Skipped where the `openai-agents` extra is not installed."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

pytest.importorskip("agents", reason="the openai-agents extra is not installed")

from agents import Agent, RunConfig, Runner  # noqa: E402
from agents.memory import Session, SessionSettings  # noqa: E402
from agents.testing import ScriptedModel, assistant_message  # noqa: E402
from sqlalchemy import text  # noqa: E402

from hermes_store.aio import AsyncStore  # noqa: E402
from hermes_store.errors import InvalidInput  # noqa: E402
from hermes_store.integrations.openai_agents import HermesSession  # noqa: E402
from hermes_store.redaction import RedactionPolicy  # noqa: E402
from hermes_store.repositories.changes import ChangeFeed  # noqa: E402
from hermes_store.repositories.messages import MessageRepository  # noqa: E402
from hermes_store.repositories.search import SearchRepository  # noqa: E402
from hermes_store.repositories.sessions import SessionRepository  # noqa: E402
from hermes_store.store import Store  # noqa: E402

#: One of each kind of item a run stores, with what JSON can carry (nesting, unicode,
#: numbers, null, an empty object).
ITEMS: list[Any] = [
    {"role": "user", "content": "Where is the Golden Gate Bridge?"},
    {"role": "developer", "content": "Answer in one word."},
    {
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "status": "completed",
        "content": [{"type": "output_text", "text": "San Francisco 🌉", "annotations": []}],
    },
    {
        "type": "function_call",
        "call_id": "call_7",
        "name": "lookup_weather",
        "arguments": json.dumps({"city": "Zürich", "days": 3}),
    },
    {"type": "function_call_output", "call_id": "call_7", "output": "sunny, 21.5 °C"},
    {"type": "reasoning", "id": "rs_1", "summary": [{"type": "summary_text", "text": "fog"}]},
    {"type": "custom", "nested": {"list": [1, 2.5, None, True, "x"], "empty": {}}},
]


def run(coro: Any) -> Any:
    return asyncio.run(coro)


def test_items_round_trip_exactly_and_are_hermes_messages(store: Store) -> None:
    session = HermesSession("agent-1", store)
    assert isinstance(session, Session)  # the SDK's runtime-checkable protocol
    run(session.add_items(ITEMS))

    assert run(session.get_items()) == ITEMS
    row = SessionRepository(store).get_session("agent-1")
    assert row is not None and row["source"] == "openai-agents"
    assert row["message_count"] == len(ITEMS)
    stored = MessageRepository(store).get_messages("agent-1")
    assert [m["role"] for m in stored] == [
        "user", "system", "assistant", "assistant", "tool", "assistant", "assistant",
    ]  # fmt: skip
    assert stored[3]["tool_name"] == "lookup_weather"
    assert stored[4]["tool_call_id"] == "call_7"
    assert stored[4]["content"] == "sunny, 21.5 °C"


def test_item_text_is_searchable(store: Store) -> None:
    run(HermesSession("agent-1", store).add_items(ITEMS))
    hits = SearchRepository(store).search_messages("Francisco")
    assert [h["session_id"] for h in hits] == ["agent-1"]
    assert [h["session_id"] for h in SearchRepository(store).search_messages("sunny")] == [
        "agent-1"
    ]


def test_writes_are_on_the_change_feed(store: Store) -> None:
    feed = ChangeFeed(store)
    since = feed.latest()
    session = HermesSession("agent-1", store)
    run(session.add_items(ITEMS[:2]))
    run(session.pop_item())
    kinds = [c.kind for c in feed.changes(since) if c.session_id == "agent-1"]
    assert kinds.count("message.appended") == 2
    assert kinds.count("message.deleted") == 1
    assert "session.created" in kinds


def test_limit_reads_the_newest_items_in_order(store: Store) -> None:
    session = HermesSession("agent-1", store)
    items = [{"role": "user", "content": f"turn {i}"} for i in range(10)]
    run(session.add_items(items))

    assert run(session.get_items(limit=3)) == items[-3:]
    assert run(session.get_items(limit=1)) == items[-1:]
    assert run(session.get_items(limit=50)) == items
    assert run(session.get_items(limit=0)) == []
    assert run(session.get_items(limit=-1)) == items
    with_default = HermesSession("agent-1", store, session_settings=SessionSettings(limit=4))
    assert run(with_default.get_items()) == items[-4:]
    assert run(with_default.get_items(limit=2)) == items[-2:]


def test_a_limit_that_is_not_an_int_is_refused(store: Store) -> None:
    with pytest.raises(InvalidInput):
        run(HermesSession("agent-1", store).get_items(limit="3"))  # type: ignore[arg-type]


def test_pop_takes_the_newest_item_and_none_when_empty(store: Store) -> None:
    session = HermesSession("never-written", store)
    assert run(session.pop_item()) is None
    assert SessionRepository(store).get_session("never-written") is None

    run(session.add_items(ITEMS[:3]))
    assert run(session.pop_item()) == ITEMS[2]
    assert run(session.pop_item()) == ITEMS[1]
    assert run(session.get_items()) == ITEMS[:1]
    row = SessionRepository(store).get_session("never-written")
    assert row is not None and row["message_count"] == 1
    assert run(session.pop_item()) == ITEMS[0]
    assert run(session.pop_item()) is None


def test_clear_empties_one_session_only(store: Store) -> None:
    first, second = HermesSession("agent-1", store), HermesSession("agent-2", store)
    run(first.add_items(ITEMS))
    run(second.add_items(ITEMS[:2]))
    run(first.clear_session())
    assert run(first.get_items()) == []
    assert run(second.get_items()) == ITEMS[:2]
    run(first.add_items(ITEMS[:1]))  # the session is still there to write to
    assert run(first.get_items()) == ITEMS[:1]


def test_a_message_hermes_wrote_reads_as_an_item(store: Store) -> None:
    SessionRepository(store).ensure_session("chat", "cli")
    messages = MessageRepository(store)
    messages.append_message("chat", "user", "hello")
    messages.append_message("chat", "tool", "42", tool_call_id="call_1")
    assert run(HermesSession("chat", store).get_items()) == [
        {"role": "user", "content": "hello"},
        {"type": "function_call_output", "call_id": "call_1", "output": "42"},
    ]


@pytest.mark.parametrize("on", ["Store", "AsyncStore"])
def test_concurrent_adds_keep_every_batch_whole(backend_url: str, on: str) -> None:
    batches = [[{"role": "user", "content": f"b{b} i{i}"} for i in range(5)] for b in range(12)]

    async def main() -> list[Any]:
        store: Store | AsyncStore = (
            Store(backend_url) if on == "Store" else await AsyncStore.open(backend_url)
        )
        try:
            sessions = [HermesSession("shared", store) for _ in batches]
            await asyncio.gather(*(s.add_items(b) for s, b in zip(sessions, batches, strict=True)))
            return await sessions[0].get_items()
        finally:
            if isinstance(store, AsyncStore):
                await store.aclose()
            else:
                store.close()

    items = run(main())
    assert len(items) == 60
    # Each add is one transaction: its five items stay together and in order.
    runs = [items[i : i + 5] for i in range(0, 60, 5)]
    assert sorted(runs, key=lambda r: r[0]["content"]) == sorted(
        batches, key=lambda b: b[0]["content"]
    )


def test_concurrent_pops_each_take_a_different_item(backend_url: str) -> None:
    async def main() -> list[Any]:
        store = await AsyncStore.open(backend_url)
        try:
            session = HermesSession("shared", store)
            await session.add_items([{"role": "user", "content": str(i)} for i in range(8)])
            return list(await asyncio.gather(*(session.pop_item() for _ in range(10))))
        finally:
            await store.aclose()

    popped = run(main())
    taken = [p["content"] for p in popped if p is not None]
    assert sorted(taken, key=int) == [str(i) for i in range(8)]
    assert popped.count(None) == 2


@pytest.mark.parametrize(
    "bad",
    [
        [{"role": "user", "content": object()}],  # not JSON-serialisable
        [{"role": "user", "content": float("nan")}],  # not JSON
        [{"role": "user", "content": ("a", "b")}],  # would read back as a list
        [{1: "non-string key"}],
        ["not a dict"],
        {"role": "user", "content": "a dict, not a list"},
    ],
    ids=["object", "nan", "tuple", "int-key", "str-item", "dict-items"],
)
def test_bad_items_are_refused_and_nothing_is_written(store: Store, bad: Any) -> None:
    session = HermesSession("agent-1", store)
    with pytest.raises(InvalidInput):
        run(session.add_items([{"role": "user", "content": "fine"}, *bad]))
    assert run(session.get_items()) == []
    assert SessionRepository(store).get_session("agent-1") is None


def test_a_session_id_must_be_a_non_empty_string(store: Store) -> None:
    with pytest.raises(InvalidInput):
        HermesSession("", store)


def test_an_agent_run_keeps_its_history_in_the_store(backend_url: str) -> None:
    async def main() -> tuple[Any, list[Any]]:
        store = await AsyncStore.open(backend_url)
        try:
            model = ScriptedModel()
            agent = Agent(name="guide", model=model)
            session = HermesSession("tour", store)
            quiet = RunConfig(tracing_disabled=True)
            model.enqueue([assistant_message("San Francisco")])
            await Runner.run(
                agent, "Where is the Golden Gate Bridge?", session=session, run_config=quiet
            )
            model.enqueue([assistant_message("California")])
            second = await Runner.run(agent, "Which state?", session=session, run_config=quiet)
            return second.final_output, model.calls[-1].input
        finally:
            await store.aclose()

    answer, second_input = run(main())
    assert answer == "California"
    # The second turn's input carries the first turn from the store.
    assert "Golden Gate" in json.dumps(second_input)
    with Store(backend_url) as store:
        stored = MessageRepository(store).get_messages("tour")
    assert [m["role"] for m in stored] == ["user", "assistant", "user", "assistant"]
    assert stored[1]["content"] == "San Francisco"


def test_with_a_policy_on_items_are_stored_and_handed_back_redacted(backend_url: str) -> None:
    """The whole item is kept in `display_metadata`: the policy redacts it string by
    string there as in `content`, so get_items hands back the markers, never the secret."""
    aws, openai = "AKIAIOSFODNN7EXAMPLE", "sk-proj-" + "Q" * 40
    items: list[Any] = [
        {"role": "user", "content": f"deploy with {aws}"},
        {
            "type": "function_call",
            "call_id": "call_1",
            "name": "deploy",
            "arguments": json.dumps({"key": openai}),
        },
    ]
    with Store(backend_url, redaction=RedactionPolicy()) as store:
        session = HermesSession("agent-1", store)
        run(session.add_items(items))
        got = run(session.get_items())
        with store.read() as conn:
            stored = conn.execute(text("SELECT content, display_metadata FROM messages")).all()
    assert got[0] == {"role": "user", "content": "deploy with [REDACTED:aws-access-key]"}
    assert json.loads(got[1]["arguments"]) == {"key": "[REDACTED:openai-key]"}
    dumped = json.dumps([list(r) for r in stored])
    assert aws not in dumped and openai not in dumped
