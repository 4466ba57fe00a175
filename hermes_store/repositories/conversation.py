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

from .encoding import decode_content, decode_display_metadata, decode_json, decode_tool_calls

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


#: The columns `conversation_message` reads, in the order it reads them by position, and
#: the two that place a row in a lineage: a conversation is read with these only (never
#: PostgreSQL's search vector).
CONVERSATION_COLUMNS = (
    "id", "session_id", "role", "content", "api_content", "display_kind",
    "display_metadata", "timestamp", "tool_call_id", "tool_name", "effect_disposition",
    "tool_calls", "platform_message_id", "observed", "finish_reason", "reasoning",
    "reasoning_content", "reasoning_details", "codex_reasoning_items", "codex_message_items",
)  # fmt: skip
_AT = {name: index for index, name in enumerate(CONVERSATION_COLUMNS)}
SESSION_ID = _AT["session_id"]
_ROLE, _CONTENT, _API, _KIND, _META, _TS = (
    _AT[name]
    for name in ("role", "content", "api_content", "display_kind", "display_metadata", "timestamp")
)
_CALLS, _PLATFORM, _OBSERVED = _AT["tool_calls"], _AT["platform_message_id"], _AT["observed"]
_FINISH, _REASONING, _REASONING_CONTENT = (
    _AT[name] for name in ("finish_reason", "reasoning", "reasoning_content")
)
_OPTIONAL_TEXT = tuple(
    (_AT[key], key) for key in ("tool_call_id", "tool_name", "effect_disposition")
)
_JSON_FIELDS = tuple(
    (_AT[key], key)
    for key in ("reasoning_details", "codex_reasoning_items", "codex_message_items")
)


def conversation_message(row: Sequence[Any]) -> dict[str, Any]:
    """One stored row (CONVERSATION_COLUMNS, by position) in the agent's format: only
    the keys the row actually fills."""
    role = row[_ROLE]
    content = decode_content(row[_CONTENT])
    if role in ("user", "assistant") and isinstance(content, str):
        content = strip_memory_context(content)
    msg: dict[str, Any] = {"role": role, "content": content}
    if row[_API]:
        msg["api_content"] = row[_API]
    if row[_KIND]:
        msg["display_kind"] = row[_KIND]
    if row[_META] is not None:
        metadata = decode_display_metadata(row[_META])
        if metadata is not None:
            msg["display_metadata"] = metadata
    if row[_TS]:
        msg["timestamp"] = float(row[_TS])
    for index, key in _OPTIONAL_TEXT:
        if row[index]:
            msg[key] = row[index]
    if row[_CALLS] is not None:
        msg["tool_calls"] = decode_tool_calls(row[_CALLS])
    if row[_PLATFORM]:
        msg["message_id"] = row[_PLATFORM]
    if row[_OBSERVED]:
        msg["observed"] = True
    if role == "assistant":
        if row[_FINISH]:
            msg["finish_reason"] = row[_FINISH]
        if row[_REASONING]:
            msg["reasoning"] = row[_REASONING]
        if row[_REASONING_CONTENT] is not None:
            msg["reasoning_content"] = row[_REASONING_CONTENT]
        for index, key in _JSON_FIELDS:
            if row[index] is not None:
                msg[key] = decode_json(row[index])
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
    messages = [conversation_message(r) for r in rows]
    if dedupe_replays:
        messages = drop_replayed_prompts(messages)
    messages = drop_review_prompts(messages)
    if repair_alternation:
        messages = repair_message_alternation(messages)
    return messages
