"""The agent's conversation format: stored rows turned into the message dicts a model is
sent and a user is shown (docs/reference/behaviour.md 4.1 and 4.2).

Only presentation lives here: recalled-memory fences are stripped, a prompt replayed
across a compression boundary is shown once, the background review turns are hidden,
and consecutive user turns can be merged. Nothing here reads or writes the database.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from .encoding import (
    JSON_PREFIX,
    decode_content,
    decode_display_metadata,
    decode_json,
    decode_tool_calls,
)

REVIEW_PROMPT_PREFIXES = (
    "Review the conversation above and update the skill library",
    "Review the conversation above and consider saving to memory",
)

_MEMORY_BLOCK = re.compile(r"<memory-context>.*?</memory-context>", re.I | re.S)
_MEMORY_NOTE = re.compile(
    r"\[System note: The following is recalled memory context\b[^\]]*\]", re.I | re.S
)
_MEMORY_FENCE = re.compile(r"</?memory-context>", re.I)


def strip_memory_context(text: str) -> str:
    """Remove recalled-memory fences, their system note and stray fence tags."""
    # each pattern starts with "<" or "[": a text without it cannot match (most do not)
    if "<" in text:
        text = _MEMORY_BLOCK.sub("", text)
    if "[" in text:
        text = _MEMORY_NOTE.sub("", text)
    if "<" in text:
        text = _MEMORY_FENCE.sub("", text)
    return text.strip()


#: The columns `conversation_message` reads, in the order it unpacks them: a conversation
#: is read with these only (never PostgreSQL's search vector, nor the id and session id,
#: which the query orders and selects by and the format does not show).
CONVERSATION_COLUMNS = (
    "role", "content", "api_content", "display_kind", "display_metadata", "timestamp",
    "tool_call_id", "tool_name", "effect_disposition", "tool_calls", "platform_message_id",
    "observed", "finish_reason", "reasoning", "reasoning_content", "reasoning_details",
    "codex_reasoning_items", "codex_message_items",
)  # fmt: skip
_STRIPPED_ROLES = ("user", "assistant")


def conversation_message(row: Sequence[Any]) -> dict[str, Any]:
    """One stored row (CONVERSATION_COLUMNS, by position) in the agent's format: only
    the keys the row actually fills."""
    # unpacked once: the loads call this for every row of a conversation
    (
        role, content, api_content, display_kind, display_metadata, timestamp,
        tool_call_id, tool_name, effect_disposition, tool_calls, platform_message_id,
        observed, finish_reason, reasoning, reasoning_content, reasoning_details,
        codex_reasoning_items, codex_message_items,
    ) = row  # fmt: skip
    if isinstance(content, str):
        if content.startswith(JSON_PREFIX):
            content = decode_content(content)
        if role in _STRIPPED_ROLES and isinstance(content, str):
            content = strip_memory_context(content)
    msg: dict[str, Any] = {"role": role, "content": content}
    if api_content:
        msg["api_content"] = api_content
    if display_kind:
        msg["display_kind"] = display_kind
    if display_metadata is not None:
        metadata = decode_display_metadata(display_metadata)
        if metadata is not None:
            msg["display_metadata"] = metadata
    if timestamp:
        msg["timestamp"] = float(timestamp)
    if tool_call_id:
        msg["tool_call_id"] = tool_call_id
    if tool_name:
        msg["tool_name"] = tool_name
    if effect_disposition:
        msg["effect_disposition"] = effect_disposition
    if tool_calls is not None:
        msg["tool_calls"] = decode_tool_calls(tool_calls)
    if platform_message_id:
        msg["message_id"] = platform_message_id
    if observed:
        msg["observed"] = True
    if role == "assistant":
        if finish_reason:
            msg["finish_reason"] = finish_reason
        if reasoning:
            msg["reasoning"] = reasoning
        if reasoning_content is not None:
            msg["reasoning_content"] = reasoning_content
        if reasoning_details is not None:
            msg["reasoning_details"] = decode_json(reasoning_details)
        if codex_reasoning_items is not None:
            msg["codex_reasoning_items"] = decode_json(codex_reasoning_items)
        if codex_message_items is not None:
            msg["codex_message_items"] = decode_json(codex_message_items)
    return msg


def drop_replayed_prompts(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Compression re-sends the pending user prompt in the child; show it once."""
    out: list[dict[str, Any]] = []
    seen_prompts: list[Any] = []  # contents may be lists, so no set
    for msg in messages:
        role = msg["role"]
        if role == "user":
            if msg["content"] in seen_prompts:
                continue
            seen_prompts.append(msg["content"])
        elif role == "tool" or (role == "assistant" and (msg["content"] or msg.get("tool_calls"))):
            seen_prompts = []
        out.append(msg)
    return out


def is_review_prompt(msg: Mapping[str, Any]) -> bool:
    """A background skill/memory review turn, which the user never typed."""
    content = msg["content"]
    if msg["role"] not in ("user", "system") or not isinstance(content, str):
        return False
    first = content[:1]
    if first != "R" and not first.isspace():
        return False  # what lstrip() would leave cannot start with a prefix
    return content.lstrip().startswith(REVIEW_PROMPT_PREFIXES)


def drop_review_prompts(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Review prompts and the assistant reply that answers each of them."""
    out: list[dict[str, Any]] = []
    skip_reply = False
    for msg in messages:
        if is_review_prompt(msg):
            skip_reply = True
            continue
        if skip_reply and msg["role"] == "assistant":
            skip_reply = False
            continue
        skip_reply = False
        out.append(msg)
    return out


def _messages_without_review_prompts(rows: Iterable[Sequence[Any]]) -> list[dict[str, Any]]:
    """`drop_review_prompts` of the rows' messages, in the one pass that builds them."""
    out: list[dict[str, Any]] = []
    skip_reply = False
    for row in rows:
        msg = conversation_message(row)
        role = msg["role"]
        if role == "user" or role == "system":
            # is_review_prompt, inline (this runs for every user message of a load)
            content = msg["content"]
            if isinstance(content, str):
                first = content[:1]
                if (first == "R" or first.isspace()) and content.lstrip().startswith(
                    REVIEW_PROMPT_PREFIXES
                ):
                    skip_reply = True
                    continue
        if skip_reply and role == "assistant":
            skip_reply = False
            continue
        skip_reply = False
        out.append(msg)
    return out


def repair_message_alternation(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """A deliberately small stand-in for the agent's sequence repair: consecutive user
    messages with text content are merged into one (texts joined by a blank line), since
    providers reject two user turns in a row. Nothing else is changed; the input list and
    its dicts are not modified."""
    out: list[dict[str, Any]] = []
    for msg in messages:
        prev = out[-1] if out else None
        if (
            prev is not None
            and prev["role"] == "user"
            and msg["role"] == "user"
            and isinstance(prev["content"], str)
            and isinstance(msg["content"], str)
        ):
            merged = dict(prev)
            merged["content"] = "\n\n".join(p for p in (prev["content"], msg["content"]) if p)
            out[-1] = merged
            continue
        out.append(msg)
    return out


def conversation(
    rows: Iterable[Sequence[Any]], dedupe_replays: bool, repair_alternation: bool
) -> list[dict[str, Any]]:
    """Rows (CONVERSATION_COLUMNS) in transcript order as the conversation the agent and
    its UIs use."""
    if dedupe_replays:
        messages = drop_replayed_prompts([conversation_message(r) for r in rows])
        messages = drop_review_prompts(messages)
    else:
        messages = _messages_without_review_prompts(rows)
    if repair_alternation:
        messages = repair_message_alternation(messages)
    return messages
