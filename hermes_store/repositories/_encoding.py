"""How values are stored, in the original's conventions (docs/reference/schema.md section 8):
REAL epoch seconds, 0/1 flags, JSON as TEXT with Python's default formatting, structured
message content behind the `\\x00json:` prefix, lone surrogates replaced by U+FFFD."""

from __future__ import annotations

import json
import logging
import time
from typing import Any

from ..search.query import scrub_surrogates

log = logging.getLogger(__name__)

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
