"""Previews: the one-line text a listing shows for a session or a message.

A session's preview is its first user message (by timestamp, then id), cut in SQL so a
huge message is never read whole. A `/skill` turn embeds the whole skill body, so its
preview is rebuilt as what the user typed (`/work — fix the title leak`), by the
original's rule; that rule lives here once and serves every preview.
"""

from __future__ import annotations

import re
from typing import Any

from sqlalchemy import TEXT, ColumnElement, and_, case, func, select

from ._dialect import last_chars
from ._sql import alias
from ._tables import MESSAGES

#: Characters of a session preview, and how many SQL reads before trimming and shaping.
SESSION_PREVIEW_CHARS = 60
SESSION_PREVIEW_HEAD = 63
#: Characters of a message preview (`list_recent_user_messages`), the ellipsis included.
MESSAGE_PREVIEW_CHARS = 80
#: A /skill turn embeds the whole skill body; the typed instruction sits at the end, so
#: such a preview reads up to this many characters from each end.
SKILL_WINDOW = 400
SKILL_INVOCATION_PREFIX = "[IMPORTANT: The user has invoked the "
#: The skill's name is the first quoted span of the invocation header (a bundle's names
#: already carry their slashes: "/clean /work").
_SKILL_NAME = re.compile(re.escape(SKILL_INVOCATION_PREFIX) + r'"([^"]*)"')
#: A single skill: the typed instruction follows the body (which may quote the marker,
#: hence the last one), up to the runtime note.
SINGLE_SKILL_MARKER = "The full skill content is loaded below.]"
SKILL_INSTRUCTION_MARKER = (
    "The user has provided the following instruction alongside the skill invocation: "
)
RUNTIME_NOTE_MARKER = "\n\n[Runtime note:"
#: A bundle: the typed instruction comes first (the first marker), before the skills.
BUNDLE_MARKER = " skill bundle,"
BUNDLE_INSTRUCTION_MARKER = "\nUser instruction: "
BUNDLE_FIRST_SKILL_MARKER = "\n\n[Loaded as part of the "
#: Joins the head and tail excerpts of a long /skill turn; never part of a preview.
EXCERPT_JOINT = "\x1e"


def first_user_excerpt(session_id: ColumnElement[Any]) -> ColumnElement[Any]:
    """SQL for the raw preview of the session `session_id`: the first user message (by
    timestamp, then id) cut to what `shape_session_preview` needs; CR/LF become spaces.
    Structured content starts with NUL, which SQLite's string functions treat as the end
    of the text, so it previews as ''."""
    m = alias(MESSAGES, "preview_m")
    flat = func.replace(func.replace(m.c.content, "\n", " "), "\r", " ", type_=TEXT())
    scaffold = func.substr(m.c.content, 1, len(SKILL_INVOCATION_PREFIX)) == (
        SKILL_INVOCATION_PREFIX
    )
    excerpt = case(
        (
            and_(scaffold, func.length(m.c.content) > 2 * SKILL_WINDOW),
            func.substr(flat, 1, SKILL_WINDOW, type_=TEXT())
            + EXCERPT_JOINT
            + last_chars(flat, SKILL_WINDOW),
        ),
        (scaffold, func.substr(flat, 1, 2 * SKILL_WINDOW, type_=TEXT())),
        else_=func.substr(flat, 1, SESSION_PREVIEW_HEAD, type_=TEXT()),
    )
    first = (
        select(excerpt)
        .where(m.c.session_id == session_id, m.c.role == "user", m.c.content.is_not(None))
        .order_by(m.c.timestamp, m.c.id)
        .limit(1)
        .scalar_subquery()
    )
    return func.coalesce(first, "")


def _typed_instruction(text: str) -> str:
    if BUNDLE_MARKER in text:
        marker, stop, at = BUNDLE_INSTRUCTION_MARKER, BUNDLE_FIRST_SKILL_MARKER, text.find
    elif SINGLE_SKILL_MARKER in text:
        marker, stop, at = SKILL_INSTRUCTION_MARKER, RUNTIME_NOTE_MARKER, text.rfind
    else:
        return ""
    start = at(marker)
    if start < 0:
        return ""
    rest = text[start + len(marker) :]
    end = rest.find(stop)
    return (rest if end < 0 else rest[:end]).strip()


def describe_skill_invocation(text: str, separator: str = " — ") -> str | None:
    """A `/skill` turn as the user typed it, the original's rule: `/work — fix the title
    leak`, `/work` when nothing was typed after it, the bare instruction when the header
    names no skill; None for a turn that is not a skill invocation (or says nothing)."""
    if not text.startswith(SKILL_INVOCATION_PREFIX):
        return None
    match = _SKILL_NAME.match(text)
    name = match.group(1).strip() if match else ""
    label = name if name.startswith("/") else f"/{name}"
    # an excerpt's joint can fall inside the instruction: keep the side the marker is on
    instruction = " ".join(_typed_instruction(text).split(EXCERPT_JOINT)[0].split())
    if instruction:
        return f"{label}{separator}{instruction}" if name else instruction
    return label if name else None


def shape_session_preview(raw: Any) -> str:
    """A session preview from `first_user_excerpt`'s value."""
    if isinstance(raw, bytes):
        raw = raw.decode("utf-8", "replace")
    text = "" if raw is None else str(raw)
    if text.startswith("\x00"):  # structured content, should a driver keep the NUL
        return ""
    text = text.strip()
    described = describe_skill_invocation(text)
    text = described if described is not None else text.split(EXCERPT_JOINT)[0]
    if len(text) > SESSION_PREVIEW_CHARS:
        return text[:SESSION_PREVIEW_CHARS] + "..."
    return text


def shape_message_preview(content: Any) -> str:
    """A message preview from its decoded content: the text parts of structured content,
    a /skill turn as typed, whitespace collapsed, at most MESSAGE_PREVIEW_CHARS."""
    if isinstance(content, dict):
        content = [content]
    if isinstance(content, list):
        texts = [
            part["text"]
            for part in content
            if isinstance(part, dict) and isinstance(part.get("text"), str) and part["text"]
        ]
        text = " ".join(texts) if texts else "[multimodal content]"
    elif content is None:
        text = ""
    elif isinstance(content, bytes):
        text = content.decode("utf-8", "replace")
    else:
        text = str(content)
        text = describe_skill_invocation(text) or text
    text = " ".join(text.split())
    if len(text) > MESSAGE_PREVIEW_CHARS:
        text = text[: MESSAGE_PREVIEW_CHARS - 3] + "..."
    return text
