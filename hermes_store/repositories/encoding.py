"""How values are stored and read back, in the original's conventions
(docs/reference/schema.md section 8, docs/reference/behaviour.md 3.1): REAL epoch seconds,
0/1 flags, JSON as TEXT with Python's default formatting, structured message content
behind the `\\x00json:` prefix, lone surrogates replaced by U+FFFD; and, built on them,
how a message becomes a `messages` row and a row becomes a message again.

Every writer encodes through here, so a value that cannot be stored is refused with
InvalidInput naming the field before anything reaches the driver (whose own error would
not say which field was wrong), and every reader decodes content, tool calls and display
metadata the same way.
"""

from __future__ import annotations

import json
import logging
import math
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from ..errors import InvalidInput, TimeOutOfRange
from ..redaction import RedactionPolicy
from ..runtime.engine import scrub_surrogates

log = logging.getLogger(__name__)


# --------------------------------------------------------------------------- values


JSON_PREFIX = "\x00json:"


def now() -> float:
    return time.time()


def scrub(value: str | None) -> str | None:
    return None if value is None else scrub_surrogates(value)


def encode_content(content: Any) -> Any:
    """str as given (surrogates scrubbed); list/dict behind the JSON prefix; others as is."""
    if isinstance(content, str):
        return scrub_surrogates(content)
    if isinstance(content, list | dict):
        return JSON_PREFIX + json.dumps(content)
    return content


def decode_content(stored: Any) -> Any:
    if isinstance(stored, str) and stored.startswith(JSON_PREFIX):
        try:
            return json.loads(stored[len(JSON_PREFIX) :])
        except ValueError:
            log.warning("undecodable structured content returned raw")
    return stored


def parse_tool_calls(value: Any) -> Any:
    """The original's normalisation: a JSON string is parsed first (invalid -> [])."""
    if isinstance(value, str):
        try:
            return json.loads(value)
        except ValueError:
            return []
    return value


def encode_tool_calls(value: Any) -> tuple[str | None, int]:
    """(stored text, count added to tool_call_count), per docs/reference/behaviour.md 3.1."""
    parsed = parse_tool_calls(value)
    stored = json.dumps(parsed) if parsed else None
    if parsed is None:
        count = 0
    elif isinstance(parsed, list):
        count = len(parsed)
    else:
        count = 1
    return stored, count


def encode_json_if_truthy(value: Any) -> str | None:
    return json.dumps(value) if value else None


def decode_json(stored: Any, default: Any = None) -> Any:
    if stored is None:
        return default
    try:
        return json.loads(stored)
    except (TypeError, ValueError):
        log.warning("corrupt JSON column value ignored")
        return default


def encode_display_metadata(value: Any) -> str | None:
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError:
            log.warning("display_metadata is not valid JSON; stored NULL")
            return None
    if isinstance(value, dict) and value:
        return json.dumps(value)
    if value is not None:
        log.warning("display_metadata must be a non-empty JSON object; stored NULL")
    return None


def decode_display_metadata(stored: Any) -> dict[str, Any] | None:
    value = decode_json(stored)
    if isinstance(value, str):  # one extra layer of string encoding
        value = decode_json(value)
    return value if isinstance(value, dict) else None


def flag(value: Any) -> int:
    return 1 if value else 0


#: A result row as a mapping (SQLAlchemy's RowMapping is keyed by names and columns).
RowLike = Mapping[Any, Any]

#: The smallest step of the bulk routine's running clock (one microsecond).
CLOCK_STEP = 1e-6
#: Fields the bulk routine keeps only on assistant rows.
ASSISTANT_ONLY = (
    "reasoning",
    "reasoning_content",
    "reasoning_details",
    "codex_reasoning_items",
    "codex_message_items",
)
#: Every column `encode_row` writes, in one order, so an insert of n rows is one statement.
INSERT_COLUMNS = (
    "session_id", "role", "content", "tool_call_id", "tool_calls", "tool_name",
    "effect_disposition", "timestamp", "token_count", "finish_reason", "reasoning",
    "reasoning_content", "reasoning_details", "codex_reasoning_items", "codex_message_items",
    "platform_message_id", "observed", "active", "compacted", "api_content", "display_kind",
    "display_metadata",
)  # fmt: skip

_BINDABLE_SCALARS = (str, int, float, type(None))
_CONTENT_TYPES = (str, bytes, int, float, list, dict, type(None))


# --------------------------------------------------------------------------- a message as a row


def field_text(name: str, value: Any) -> Any:
    """A text field as stored (surrogates scrubbed); InvalidInput for a non-scalar."""
    if isinstance(value, str):
        return scrub_surrogates(value)
    if isinstance(value, _BINDABLE_SCALARS):
        return value
    raise InvalidInput(f"message field {name!r} must be text, got {type(value).__name__}")


def field_json(name: str, value: Any) -> str | None:
    """A JSON field as stored (NULL when falsy); InvalidInput when not serialisable."""
    try:
        return encode_json_if_truthy(value)
    except (TypeError, ValueError) as exc:
        raise InvalidInput(f"message field {name!r} is not JSON-serialisable: {exc}") from exc


def content_value(value: Any) -> Any:
    """Message content as stored: text as is, structured content behind the JSON prefix."""
    if isinstance(value, bytearray | memoryview):
        value = bytes(value)
    if not isinstance(value, _CONTENT_TYPES):
        raise InvalidInput(
            f"message content of type {type(value).__name__} cannot be stored; "
            "pass str, list, dict, bytes, int, float or None"
        )
    try:
        return encode_content(value)
    except (TypeError, ValueError) as exc:
        raise InvalidInput(f"structured message content is not JSON-serialisable: {exc}") from exc


def _tool_calls(value: Any) -> tuple[str | None, int]:
    try:
        return encode_tool_calls(value)
    except (TypeError, ValueError) as exc:
        raise InvalidInput(f"tool_calls is not JSON-serialisable: {exc}") from exc


#: The times every layer computes with, in epoch seconds: 0001-01-01T00:00:00Z to
#: 9999-12-31T23:59:59Z. SQLite's date functions cover years 0 to 9999 (NULL outside),
#: PostgreSQL's to_timestamp 4713 BC to 294276 AD (an error outside, which would fail a
#: whole `stats`), Python's datetime years 1 to 9999; the intersection is kept.
TIME_MIN = -62_135_596_800.0
TIME_MAX = 253_402_300_799.0


def time_in_range(value: float) -> bool:
    return TIME_MIN <= value <= TIME_MAX


def epoch_seconds(value: Any, field: str = "timestamp") -> float | None:
    """Epoch seconds from a datetime-like object or a number; None when unusable.

    Booleans and numeric strings count as unusable (the original accepts "a number"), and
    so do NaN and infinities: SQLite would turn NaN into NULL and fail the NOT NULL. A
    finite time outside TIME_MIN..TIME_MAX raises TimeOutOfRange (named `field`): stored,
    it would break every later computation with it on PostgreSQL."""
    if value is None or isinstance(value, bool):
        return None
    try:
        if isinstance(value, int | float):
            ts = float(value)
        elif callable(getattr(value, "timestamp", None)):
            ts = float(value.timestamp())
        else:
            return None
    except (TypeError, ValueError, OverflowError, OSError):
        return None
    if not math.isfinite(ts):
        return None
    if not time_in_range(ts):
        raise TimeOutOfRange(field, ts)
    return ts


def encode_row(
    session_id: str,
    *,
    role: Any,
    content: Any,
    tool_name: Any,
    tool_calls: Any,
    tool_call_id: Any,
    token_count: Any,
    finish_reason: Any,
    reasoning: Any,
    reasoning_content: Any,
    reasoning_details: Any,
    codex_reasoning_items: Any,
    codex_message_items: Any,
    platform_message_id: Any,
    observed: Any,
    effect_disposition: Any,
    timestamp: float | None,
    api_content: Any,
    display_kind: Any,
    display_metadata: Any,
) -> tuple[dict[str, Any], int]:
    """One `messages` row in the stored encodings, and what it adds to tool_call_count.

    A message leaves most fields None, stored as NULL: those skip their encoder, which
    would return None for them (field_text, field_json, the tool calls' and display
    metadata's encoders), since every append runs this. A None `timestamp` is left for the
    database to stamp (PostgreSQL's one-call append, after the session's row lock)."""
    stored_calls, n_calls = (None, 0) if tool_calls is None else _tool_calls(tool_calls)
    text = field_text
    values = {
        "session_id": session_id,
        "role": text("role", role),
        "content": content_value(content),
        "tool_call_id": None if tool_call_id is None else text("tool_call_id", tool_call_id),
        "tool_calls": stored_calls,
        "tool_name": tool_name if tool_name is None else text("tool_name", tool_name),
        "effect_disposition": (
            None if effect_disposition is None else text("effect_disposition", effect_disposition)
        ),
        "timestamp": timestamp,
        "token_count": token_count,
        "finish_reason": (None if finish_reason is None else text("finish_reason", finish_reason)),
        "reasoning": None if reasoning is None else text("reasoning", reasoning),
        "reasoning_content": (
            None if reasoning_content is None else text("reasoning_content", reasoning_content)
        ),
        "reasoning_details": (
            None
            if reasoning_details is None
            else field_json("reasoning_details", reasoning_details)
        ),
        "codex_reasoning_items": (
            None
            if codex_reasoning_items is None
            else field_json("codex_reasoning_items", codex_reasoning_items)
        ),
        "codex_message_items": (
            None
            if codex_message_items is None
            else field_json("codex_message_items", codex_message_items)
        ),
        "platform_message_id": (
            None
            if platform_message_id is None
            else text("platform_message_id", platform_message_id)
        ),
        "observed": 1 if observed else 0,
        # Written explicitly: older reconciled files have `active` without its DEFAULT 1.
        "active": 1,
        "compacted": 0,
        "api_content": None if api_content is None else text("api_content", api_content),
        "display_kind": None if display_kind is None else text("display_kind", display_kind),
        "display_metadata": (
            None if display_metadata is None else encode_display_metadata(display_metadata)
        ),
    }
    return values, n_calls


@dataclass
class EncodedMessages:
    """Rows ready to insert, and the tool calls they add to the session's counter."""

    rows: list[dict[str, Any]]
    tool_calls: int


def encode_bulk(
    session_id: str,
    messages: Iterable[Mapping[str, Any]],
    redaction: RedactionPolicy | None = None,
) -> EncodedMessages:
    """The bulk routine shared by replace, compaction, publication, batch appends and
    imports; with an enabled `redaction`, each message's fields are redacted first."""
    redact = redaction is not None and bool(redaction.compiled)
    clock = now()
    rows: list[dict[str, Any]] = []
    total_calls = 0
    for index, message in enumerate(messages):
        if not isinstance(message, Mapping):
            raise InvalidInput(f"message {index} is a {type(message).__name__}, not a dict")
        if redact:
            assert redaction is not None
            message = redaction.redact_fields(message)
        role = message.get("role") or "unknown"
        is_assistant = role == "assistant"
        explicit = epoch_seconds(message.get("timestamp"), f"message {index} timestamp")
        ts = clock if explicit is None else explicit
        platform_id = message.get("platform_message_id")
        if platform_id is None:
            platform_id = message.get("message_id")
        kept = {k: (message.get(k) if is_assistant else None) for k in ASSISTANT_ONLY}
        values, n_calls = encode_row(
            session_id,
            role=role,
            content=message.get("content"),
            tool_name=message.get("tool_name"),
            tool_calls=message.get("tool_calls"),
            tool_call_id=message.get("tool_call_id"),
            token_count=message.get("token_count"),
            finish_reason=message.get("finish_reason"),
            platform_message_id=platform_id,
            observed=message.get("observed"),
            effect_disposition=message.get("effect_disposition"),
            timestamp=ts,
            api_content=message.get("api_content"),
            display_kind=message.get("display_kind"),
            display_metadata=message.get("display_metadata"),
            **kept,
        )
        rows.append(values)
        total_calls += n_calls
        # Rows without their own time still sort after the previous row by timestamp.
        clock = max(clock + CLOCK_STEP, ts + CLOCK_STEP)
    return EncodedMessages(rows, total_calls)


# --------------------------------------------------------------------------- a row as a message


def decode_tool_calls(stored: Any) -> Any:
    """Stored tool calls parsed; NULL stays None, unreadable JSON becomes []."""
    return None if stored is None else decode_json(stored, [])


def decode_fields(out: dict[str, Any]) -> dict[str, Any]:
    """Decode, in place, the encoded fields a row dict carries (a NULL, or a field the
    row does not carry, decodes to itself)."""
    content = out.get("content")
    if isinstance(content, str) and content.startswith(JSON_PREFIX):
        out["content"] = decode_content(content)
    tool_calls = out.get("tool_calls")
    if tool_calls is not None:
        out["tool_calls"] = decode_tool_calls(tool_calls)
    metadata = out.get("display_metadata")
    if metadata is not None:
        out["display_metadata"] = decode_display_metadata(metadata)
    return out
