"""The conversation format built in one pass (repositories/conversation.py): a load that does
not de-duplicate replays builds the messages and drops the review-harness turns together;
it must give what the two steps the format is defined by give, on rows that exercise every
branch (each role, every optional column, structured content, memory fences, review
prompts behind whitespace, from the user and the system, followed or not by a reply).
Pure functions on stored-row tuples: no database."""

from __future__ import annotations

import json
from typing import Any

import pytest

from hermes_store.repositories.conversation import (
    CONVERSATION_COLUMNS,
    conversation,
    conversation_message,
    drop_replayed_prompts,
    drop_review_prompts,
    repair_message_alternation,
)
from hermes_store.repositories.encoding import JSON_PREFIX

REVIEW = "Review the conversation above and update the skill library. Be active."
MEMORY = "Review the conversation above and consider saving to memory."


def row(**values: Any) -> tuple[Any, ...]:
    """A stored row in CONVERSATION_COLUMNS order: NULL for what is not given, observed 0."""
    values.setdefault("observed", 0)
    unknown = set(values) - set(CONVERSATION_COLUMNS)
    assert not unknown, unknown
    return tuple(values.get(name) for name in CONVERSATION_COLUMNS)


FULL = {
    "api_content": "as sent",
    "display_kind": "tool_summary",
    "display_metadata": json.dumps({"k": 1}),
    "timestamp": 1_700_000_000.5,
    "tool_call_id": "call-1",
    "tool_name": "search",
    "effect_disposition": "applied",
    "tool_calls": json.dumps([{"id": "call-1"}]),
    "platform_message_id": "tg-9",
    "observed": 1,
    "finish_reason": "stop",
    "reasoning": "because",
    "reasoning_content": "",
    "reasoning_details": json.dumps([{"type": "summary"}]),
    "codex_reasoning_items": json.dumps([1]),
    "codex_message_items": json.dumps([2]),
}

ROWS = [
    row(role="user", content="<memory-context>old</memory-context> hello", timestamp=1.0),
    row(role="assistant", content="[System note: The following is recalled memory context] hi"),
    row(role="user", content=REVIEW),
    row(role="assistant", content="Updated the skill."),
    row(role="system", content="  \n" + MEMORY),
    row(role="assistant", content="Saved."),
    row(role="user", content=" " + REVIEW),  # stripped of its fence-free padding
    row(role="tool", content="tool output", tool_call_id="call-1", tool_name="search"),
    row(role="user", content="Review this, please"),  # starts with R, not a harness prompt
    row(role="assistant", content=REVIEW),  # an assistant's text is never a harness prompt
    row(role="user", content=JSON_PREFIX + json.dumps([{"type": "text", "text": "hi"}])),
    row(role="user", content=JSON_PREFIX + "{not json"),  # returned raw, then stripped
    row(role="assistant", content="all columns", **FULL),
    row(role="tool", content="all columns", **FULL),  # assistant-only keys left out
    row(role="user", content=None),
    row(role="user", content=""),
    row(role="system", content=MEMORY),  # the last row: nothing follows to skip
]


@pytest.mark.parametrize("repair", [False, True])
def test_the_one_pass_load_is_the_two_step_definition(repair: bool) -> None:
    defined = drop_review_prompts([conversation_message(r) for r in ROWS])
    if repair:
        defined = repair_message_alternation(defined)
    assert conversation(ROWS, dedupe_replays=False, repair_alternation=repair) == defined


def test_replays_are_dropped_before_review_prompts() -> None:
    rows = [*ROWS, row(role="user", content="next"), row(role="user", content="next")]
    defined = drop_review_prompts(drop_replayed_prompts([conversation_message(r) for r in rows]))
    assert conversation(rows, dedupe_replays=True, repair_alternation=False) == defined


def test_the_harness_turns_and_their_replies_are_what_is_dropped() -> None:
    got = [(m["role"], m["content"]) for m in conversation(ROWS, False, False)]
    assert ("user", REVIEW) not in got and ("assistant", "Updated the skill.") not in got
    assert ("assistant", "Saved.") not in got
    assert ("user", "Review this, please") in got
    assert ("assistant", REVIEW) in got
    assert got[-1] == ("user", "")  # the system review prompt at the end is dropped


def test_every_column_reaches_its_key() -> None:
    assistant = conversation_message(row(role="assistant", content="all columns", **FULL))
    assert assistant == {
        "role": "assistant",
        "content": "all columns",
        "api_content": "as sent",
        "display_kind": "tool_summary",
        "display_metadata": {"k": 1},
        "timestamp": 1_700_000_000.5,
        "tool_call_id": "call-1",
        "tool_name": "search",
        "effect_disposition": "applied",
        "tool_calls": [{"id": "call-1"}],
        "message_id": "tg-9",
        "observed": True,
        "finish_reason": "stop",
        "reasoning": "because",
        "reasoning_content": "",
        "reasoning_details": [{"type": "summary"}],
        "codex_reasoning_items": [1],
        "codex_message_items": [2],
    }
    tool = conversation_message(row(role="tool", content="all columns", **FULL))
    assert not {"finish_reason", "reasoning", "reasoning_content"} & set(tool)
    structured = conversation_message(ROWS[10])
    assert structured["content"] == [{"type": "text", "text": "hi"}]
    assert conversation_message(ROWS[11])["content"] == JSON_PREFIX + "{not json"
