"""Messages: the transcript of a session, its counters and its conversation format
(spec/behaviour.md sections 3, 4.1 and the publication half of 12).

Every method that touches more than one row runs in one `Store.write` unit of work, so a
failure or a retry leaves nothing half done; the counters `sessions.message_count` and
`sessions.tool_call_count` are maintained here, in the same transaction as the rows they
count (the schema has no triggers for them). Transcripts are ordered by `messages.id`,
never by `timestamp`, which is wall-clock time and not monotonic.
"""

from __future__ import annotations

import logging
import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, cast

from sqlalchemy import (
    CursorResult,
    Select,
    Table,
    and_,
    bindparam,
    delete,
    func,
    insert,
    literal_column,
    or_,
    select,
    update,
)
from sqlalchemy.orm import Session as OrmSession

from ..errors import (
    CompressionSessionBusyError,
    CompressionSessionClosedError,
    InvalidInput,
    SessionNotFound,
)
from ..models import CompressionLock, Message
from ..models import Session as SessionModel
from ..store import Store
from ._dialect import data_columns, data_rows, lock_session
from ._encoding import (
    decode_content,
    decode_display_metadata,
    decode_json,
    encode_content,
    encode_display_metadata,
    encode_json_if_truthy,
    encode_tool_calls,
    flag,
    now,
    scrub,
)
from .sessions import describe_skill_invocation

log = logging.getLogger(__name__)

MESSAGES = cast(Table, Message.__table__)
SESSIONS = cast(Table, SessionModel.__table__)
LOCKS = cast(Table, CompressionLock.__table__)
M = MESSAGES.c
S = SESSIONS.c
L = LOCKS.c

#: A result row as a mapping (SQLAlchemy's RowMapping is keyed by names and columns).
RowLike = Mapping[Any, Any]

#: The smallest step of the bulk routine's running clock (one microsecond).
CLOCK_STEP = 1e-6
#: How far `include_ancestors` walks up `parent_session_id` before giving up.
MAX_LINEAGE_HOPS = 100
#: Fields the bulk routine keeps only on assistant rows.
ASSISTANT_ONLY = (
    "reasoning",
    "reasoning_content",
    "reasoning_details",
    "codex_reasoning_items",
    "codex_message_items",
)
REVIEW_PROMPT_PREFIXES = (
    "Review the conversation above and update the skill library",
    "Review the conversation above and consider saving to memory",
)
PREVIEW_CHARS = 80

_MEMORY_BLOCK = re.compile(r"<memory-context>.*?</memory-context>", re.I | re.S)
_MEMORY_NOTE = re.compile(
    r"\[System note: The following is recalled memory context\b[^\]]*\]", re.I | re.S
)
_MEMORY_FENCE = re.compile(r"</?memory-context>", re.I)

# Text values SQLite can bind as they are; anything else is refused with InvalidInput
# before it reaches the driver, whose own error would not say which field was wrong.
_BINDABLE_SCALARS = (str, int, float, type(None))
_CONTENT_TYPES = (str, bytes, int, float, list, dict, type(None))


# --------------------------------------------------------------------------- encoding


def _field_text(name: str, value: Any) -> Any:
    if isinstance(value, str):
        return scrub(value)
    if isinstance(value, _BINDABLE_SCALARS):
        return value
    raise InvalidInput(f"message field {name!r} must be text, got {type(value).__name__}")


def _field_json(name: str, value: Any) -> str | None:
    try:
        return encode_json_if_truthy(value)
    except (TypeError, ValueError) as exc:
        raise InvalidInput(f"message field {name!r} is not JSON-serialisable: {exc}") from exc


def _content(value: Any) -> Any:
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


def _timestamp(value: Any) -> float | None:
    """Epoch seconds from a datetime-like object or a number; None when unusable.

    Booleans and numeric strings count as unusable (the original accepts "a number"), and
    so do NaN and infinities: SQLite would turn NaN into NULL and fail the NOT NULL."""
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
    return ts if math.isfinite(ts) else None


def _row(
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
    timestamp: float,
    api_content: Any,
    display_kind: Any,
    display_metadata: Any,
) -> tuple[dict[str, Any], int]:
    """One `messages` row in the stored encodings, and what it adds to tool_call_count."""
    stored_calls, n_calls = _tool_calls(tool_calls)
    values = {
        "session_id": session_id,
        "role": _field_text("role", role),
        "content": _content(content),
        "tool_call_id": _field_text("tool_call_id", tool_call_id),
        "tool_calls": stored_calls,
        "tool_name": _field_text("tool_name", tool_name),
        "effect_disposition": _field_text("effect_disposition", effect_disposition),
        "timestamp": timestamp,
        "token_count": token_count,
        "finish_reason": _field_text("finish_reason", finish_reason),
        "reasoning": _field_text("reasoning", reasoning),
        "reasoning_content": _field_text("reasoning_content", reasoning_content),
        "reasoning_details": _field_json("reasoning_details", reasoning_details),
        "codex_reasoning_items": _field_json("codex_reasoning_items", codex_reasoning_items),
        "codex_message_items": _field_json("codex_message_items", codex_message_items),
        "platform_message_id": _field_text("platform_message_id", platform_message_id),
        "observed": flag(observed),
        # Written explicitly: older reconciled files have `active` without its DEFAULT 1.
        "active": 1,
        "compacted": 0,
        "api_content": _field_text("api_content", api_content),
        "display_kind": _field_text("display_kind", display_kind),
        "display_metadata": encode_display_metadata(display_metadata),
    }
    return values, n_calls


@dataclass
class _Encoded:
    rows: list[dict[str, Any]]
    tool_calls: int


def encode_bulk(session_id: str, messages: Iterable[Mapping[str, Any]]) -> _Encoded:
    """The bulk routine shared by replace, compaction, publication and batch appends."""
    clock = now()
    rows: list[dict[str, Any]] = []
    total_calls = 0
    for index, message in enumerate(messages):
        if not isinstance(message, Mapping):
            raise InvalidInput(f"message {index} is a {type(message).__name__}, not a dict")
        role = message.get("role") or "unknown"
        is_assistant = role == "assistant"
        explicit = _timestamp(message.get("timestamp"))
        ts = clock if explicit is None else explicit
        platform_id = message.get("platform_message_id")
        if platform_id is None:
            platform_id = message.get("message_id")
        kept = {k: (message.get(k) if is_assistant else None) for k in ASSISTANT_ONLY}
        values, n_calls = _row(
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
    return _Encoded(rows, total_calls)


# --------------------------------------------------------------------------- decoding


def _parse_tool_calls(stored: Any) -> Any:
    return None if stored is None else decode_json(stored, [])


def decode_message(row: RowLike) -> dict[str, Any]:
    """A full row as a dict with content, tool_calls and display_metadata decoded."""
    return _decode_fields(data_columns(row))


def _decode_fields(out: dict[str, Any]) -> dict[str, Any]:
    if "content" in out:
        out["content"] = decode_content(out["content"])
    if "tool_calls" in out:
        out["tool_calls"] = _parse_tool_calls(out["tool_calls"])
    if "display_metadata" in out:
        out["display_metadata"] = decode_display_metadata(out["display_metadata"])
    return out


def strip_memory_context(text: str) -> str:
    """Remove recalled-memory fences, their system note and stray fence tags."""
    text = _MEMORY_BLOCK.sub("", text)
    text = _MEMORY_NOTE.sub("", text)
    text = _MEMORY_FENCE.sub("", text)
    return text.strip()


def _full_rows() -> Select[Any]:
    # SELECT *: columns this code does not know (added by a newer Hermes) come back too.
    return select(literal_column("*")).select_from(MESSAGES)


def _non_empty_content() -> Any:
    return and_(M.content.is_not(None), M.content != "")


def _preview(content: Any) -> str:
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
    if len(text) > PREVIEW_CHARS:
        text = text[: PREVIEW_CHARS - 3] + "..."
    return text


def _to_conversation(row: RowLike) -> dict[str, Any]:
    role = row["role"]
    content = decode_content(row["content"])
    if role in ("user", "assistant") and isinstance(content, str):
        content = strip_memory_context(content)
    msg: dict[str, Any] = {"role": role, "content": content}
    if row["api_content"]:
        msg["api_content"] = row["api_content"]
    if row["display_kind"]:
        msg["display_kind"] = row["display_kind"]
    metadata = decode_display_metadata(row["display_metadata"])
    if metadata is not None:
        msg["display_metadata"] = metadata
    if row["timestamp"]:
        msg["timestamp"] = float(row["timestamp"])
    for key in ("tool_call_id", "tool_name", "effect_disposition"):
        if row[key]:
            msg[key] = row[key]
    if row["tool_calls"] is not None:
        msg["tool_calls"] = _parse_tool_calls(row["tool_calls"])
    if row["platform_message_id"]:
        msg["message_id"] = row["platform_message_id"]
    if row["observed"]:
        msg["observed"] = True
    if role == "assistant":
        for key in ("finish_reason", "reasoning"):
            if row[key]:
                msg[key] = row[key]
        if row["reasoning_content"] is not None:
            msg["reasoning_content"] = row["reasoning_content"]
        for key in ("reasoning_details", "codex_reasoning_items", "codex_message_items"):
            if row[key] is not None:
                msg[key] = decode_json(row[key])
    return msg


def _drop_replayed_prompts(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
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


def _is_review_prompt(msg: Mapping[str, Any]) -> bool:
    content = msg["content"]
    return (
        msg["role"] in ("user", "system")
        and isinstance(content, str)
        and content.lstrip().startswith(REVIEW_PROMPT_PREFIXES)
    )


def _drop_review_prompts(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    skip_reply = False
    for msg in messages:
        if _is_review_prompt(msg):
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


# --------------------------------------------------------------------------- checks


# The statements every append runs, built once: constructing them per call cost the
# append path more than executing them (benchmarks/, "append one").
_LEASE_HOLDER = select(L.holder).where(
    L.session_id == bindparam("lease_session"), L.expires_at > bindparam("lease_at")
)
_SESSION_STATE = select(S.ended_at, S.end_reason).where(S.id == bindparam("state_session"))
_INSERT_MESSAGE = insert(MESSAGES)
_ADD_COUNTS = (
    update(SESSIONS)
    .where(S.id == bindparam("count_session"))
    .values(
        # COALESCE: a counter created without its DEFAULT 0 would otherwise stay NULL.
        message_count=func.coalesce(S.message_count, 0) + bindparam("add_messages"),
        tool_call_count=func.coalesce(S.tool_call_count, 0) + bindparam("add_tool_calls"),
    )
)


def _live_lock_holder(session: OrmSession, session_id: str, at: float) -> str | None:
    params = {"lease_session": session_id, "lease_at": at}
    return session.execute(_LEASE_HOLDER, params).scalar_one_or_none()


def _check_append_allowed(
    session: OrmSession, session_id: str, holder: str | None, at: float
) -> None:
    """Another holder's live lease, then a compression-closed session, then a missing one."""
    current = _live_lock_holder(session, session_id, at)
    if current is not None and current != holder:
        raise CompressionSessionBusyError(
            f"Session '{session_id}' is being compressed by another writer",
            session_id,
        )
    state = _session_state(session, session_id)
    if state is None:
        raise SessionNotFound(session_id)
    _check_not_compression_closed(session_id, state.ended_at, state.end_reason)


def _check_not_compression_closed(session_id: str, ended_at: Any, end_reason: Any) -> None:
    if ended_at is not None and end_reason == "compression":
        raise CompressionSessionClosedError(session_id)


def _session_state(session: OrmSession, session_id: str) -> Any:
    return session.execute(_SESSION_STATE, {"state_session": session_id}).one_or_none()


def _insert_rows(session: OrmSession, rows: list[dict[str, Any]]) -> list[int]:
    """Insert rows in one multi-row statement; ids in the order of `rows`."""
    if not rows:
        return []
    if not session.get_bind().dialect.insert_returning:
        # SQLite before 3.35 has no RETURNING: one statement per row, keys from lastrowid.
        ids = []
        for values in rows:
            one = cast(CursorResult[Any], session.execute(insert(MESSAGES).values(values)))
            key = one.inserted_primary_key
            assert key is not None
            ids.append(int(key[0]))
        return ids
    result = session.execute(insert(MESSAGES).returning(M.id), rows)
    # RETURNING order is unspecified, but AUTOINCREMENT ids grow in VALUES order inside
    # one statement under the write lock, so sorting restores the input order.
    return sorted(result.scalars().all())


def _add_counts(session: OrmSession, session_id: str, messages: int, tool_calls: int) -> None:
    params = {"count_session": session_id, "add_messages": messages, "add_tool_calls": tool_calls}
    session.execute(_ADD_COUNTS, params)


def _set_counts(session: OrmSession, session_id: str, messages: int, tool_calls: int) -> None:
    session.execute(
        update(SESSIONS)
        .where(S.id == session_id)
        .values(message_count=messages, tool_call_count=tool_calls)
    )


def _is_empty(value: Any) -> bool:
    return value is None or (isinstance(value, str | bytes | list | dict) and len(value) == 0)


def _rowcount(result: Any) -> int:
    return int(cast(CursorResult[Any], result).rowcount)


# --------------------------------------------------------------------------- repository


class MessageRepository:
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
    ) -> int:
        """Append one message and bump the counters; returns the new `messages.id`.

        Raises CompressionSessionBusyError while another holder's lease is live,
        CompressionSessionClosedError on a session ended by compression, SessionNotFound
        for an unknown id, InvalidInput for values that cannot be stored."""
        if role is None:
            raise InvalidInput("a message needs a role")
        explicit_ts = _timestamp(timestamp)

        def work(session: OrmSession) -> int:
            lock_session(session, session_id)  # the checks below must hold until commit
            at = now()
            _check_append_allowed(session, session_id, compression_lock_holder, at)
            values, n_calls = _row(
                session_id,
                role=role,
                content=content,
                tool_name=tool_name,
                tool_calls=tool_calls,
                tool_call_id=tool_call_id,
                token_count=token_count,
                finish_reason=finish_reason,
                reasoning=reasoning,
                reasoning_content=reasoning_content,
                reasoning_details=reasoning_details,
                codex_reasoning_items=codex_reasoning_items,
                codex_message_items=codex_message_items,
                platform_message_id=platform_message_id,
                observed=observed,
                effect_disposition=effect_disposition,
                timestamp=at if explicit_ts is None else explicit_ts,
                api_content=api_content,
                display_kind=display_kind,
                display_metadata=display_metadata,
            )
            result = cast(CursorResult[Any], session.execute(_INSERT_MESSAGE, values))
            _add_counts(session, session_id, 1, n_calls)
            key = result.inserted_primary_key
            assert key is not None  # a single-row INSERT always reports its key
            return int(key[0])

        return self.store.write(work)

    def append_messages(
        self,
        session_id: str,
        messages: Sequence[Mapping[str, Any]],
        *,
        compression_lock_holder: str | None = None,
    ) -> list[int]:
        """Append many messages (dicts, bulk encoding) in one transaction; returns their
        ids in order. Same checks as `append_message`; an empty list writes nothing."""
        encoded = encode_bulk(session_id, messages)

        def work(session: OrmSession) -> list[int]:
            lock_session(session, session_id)
            _check_append_allowed(session, session_id, compression_lock_holder, now())
            ids = _insert_rows(session, encoded.rows)
            if ids:
                _add_counts(session, session_id, len(ids), encoded.tool_calls)
            return ids

        return self.store.write(work)

    def replace_messages(
        self,
        session_id: str,
        messages: Sequence[Mapping[str, Any]],
        active_only: bool = False,
    ) -> None:
        """Delete the session's messages (only active ones with `active_only`), insert
        `messages` as the new active transcript and set the counters to what was inserted."""
        encoded = encode_bulk(session_id, messages)

        def work(session: OrmSession) -> None:
            state = _session_state(session, session_id)
            if state is not None:
                _check_not_compression_closed(session_id, state.ended_at, state.end_reason)
            elif encoded.rows:
                raise SessionNotFound(session_id)
            doomed = delete(MESSAGES).where(M.session_id == session_id)
            if active_only:
                doomed = doomed.where(M.active == 1)
            session.execute(doomed)
            _insert_rows(session, encoded.rows)
            _set_counts(session, session_id, len(encoded.rows), encoded.tool_calls)

        self.store.write(work)

    def archive_and_compact(
        self, session_id: str, compacted_messages: Sequence[Mapping[str, Any]]
    ) -> int:
        """Archive the active rows (active=0, compacted=1; still searchable), insert the
        compacted transcript, set the counters to it; returns how many rows were inserted."""
        encoded = encode_bulk(session_id, compacted_messages)

        def work(session: OrmSession) -> int:
            if _session_state(session, session_id) is None:
                if encoded.rows:
                    raise SessionNotFound(session_id)
                return 0
            session.execute(
                update(MESSAGES)
                .where(M.session_id == session_id, M.active == 1)
                .values(active=0, compacted=1)
            )
            _insert_rows(session, encoded.rows)
            _set_counts(session, session_id, len(encoded.rows), encoded.tool_calls)
            return len(encoded.rows)

        return self.store.write(work)

    def set_latest_matching_message_display_kind(
        self,
        session_id: str,
        *,
        role: str,
        content: Any,
        display_kind: str,
        display_metadata: Any = None,
    ) -> bool:
        """Tag the newest active row with this role and content; False if none matched."""
        if not session_id or not role or not display_kind or _is_empty(content):
            return False
        stored_content = _content(content)
        kind = _field_text("display_kind", display_kind)
        metadata = encode_display_metadata(display_metadata)

        def work(session: OrmSession) -> bool:
            target = session.execute(
                select(M.id)
                .where(
                    M.session_id == session_id,
                    M.active == 1,
                    M.role == role,
                    M.content == stored_content,
                )
                .order_by(M.id.desc())
                .limit(1)
            ).scalar_one_or_none()
            if target is None:
                return False
            session.execute(
                update(MESSAGES)
                .where(M.id == target)
                .values(display_kind=kind, display_metadata=metadata)
            )
            return True

        return self.store.write(work)

    def set_latest_user_api_content(self, session_id: str, content: Any, api_content: Any) -> int:
        """Set `api_content` on the newest active user row if its content is `content`."""
        if not session_id:
            return 0
        stored_content = _content(content)
        stored_api = _field_text("api_content", api_content)

        def work(session: OrmSession) -> int:
            latest = session.execute(
                select(M.id, M.content)
                .where(M.session_id == session_id, M.active == 1, M.role == "user")
                .order_by(M.id.desc())
                .limit(1)
            ).one_or_none()
            if latest is None or latest.content != stored_content:
                return 0
            session.execute(
                update(MESSAGES).where(M.id == latest.id).values(api_content=stored_api)
            )
            return 1

        return self.store.write(work)

    def rewind_to_message(self, session_id: str, target_message_id: int) -> dict[str, Any]:
        """Hide the target user message and everything after it (rows stay on disk).

        Raises ValueError if the target is not in the session or is not a user message.
        The counters are left as they are, as the original does at v23."""

        def work(session: OrmSession) -> dict[str, Any]:
            target = (
                session.execute(
                    _full_rows().where(M.id == target_message_id, M.session_id == session_id)
                )
                .mappings()
                .one_or_none()
            )
            if target is None:
                raise ValueError(f"message {target_message_id} not found in session {session_id}")
            if target["role"] != "user":
                raise ValueError(
                    "rewind target must be a 'user' message "
                    f"(got role='{target['role']}', id={target_message_id})"
                )
            rewound = session.execute(
                update(MESSAGES)
                .where(
                    M.session_id == session_id,
                    M.active == 1,
                    M.id >= target_message_id,
                )
                .values(active=0)
            )
            session.execute(
                update(SESSIONS)
                .where(S.id == session_id)
                .values(rewind_count=func.coalesce(S.rewind_count, 0) + 1)
            )
            head = session.execute(
                select(func.max(M.id)).where(M.session_id == session_id, M.active == 1)
            ).scalar_one_or_none()
            row = data_columns(target)
            row["content"] = decode_content(row["content"])
            return {
                "rewound_count": _rowcount(rewound),
                "target_message": row,
                "new_head_id": None if head is None else int(head),
            }

        return self.store.write(work)

    def restore_rewound(self, session_id: str, since_message_id: int) -> int:
        """Make inactive rows with id >= `since_message_id` active again; returns how many."""

        def work(session: OrmSession) -> int:
            result = session.execute(
                update(MESSAGES)
                .where(
                    M.session_id == session_id,
                    M.active == 0,
                    M.id >= since_message_id,
                )
                .values(active=1)
            )
            return _rowcount(result)

        return self.store.write(work)

    def clear_messages(self, session_id: str) -> None:
        """Delete every message of the session and zero its counters."""

        def work(session: OrmSession) -> None:
            session.execute(delete(MESSAGES).where(M.session_id == session_id))
            _set_counts(session, session_id, 0, 0)

        self.store.write(work)

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
        the parent with `compression`, all in one transaction (spec section 12)."""
        encoded = encode_bulk(child_session_id, messages)
        if isinstance(model_config, str):
            stored_config: str | None = model_config or None
        else:
            stored_config = _field_json("model_config", model_config)

        def work(session: OrmSession) -> None:
            # Same row lock as appends: the lease and the parent read below hold until commit.
            lock_session(session, parent_session_id)
            at = now()
            if require_compression_lease:
                lease = session.execute(
                    select(L.holder, L.expires_at).where(L.session_id == parent_session_id)
                ).one_or_none()
                if lease is None or lease.holder != compression_lock_holder:
                    raise CompressionSessionBusyError(
                        f"Compression lease lost before publication: {parent_session_id}",
                        parent_session_id,
                    )
                if lease.expires_at < at:
                    raise CompressionSessionBusyError(
                        f"Compression lease lost before publication: {parent_session_id}",
                        parent_session_id,
                    )
            parent = (
                session.execute(select(SESSIONS).where(S.id == parent_session_id))
                .mappings()
                .one_or_none()
            )
            if parent is None:
                raise RuntimeError(f"Compression parent not found: {parent_session_id}")
            if parent["ended_at"] is not None:
                raise RuntimeError(f"Compression parent already ended: {parent_session_id}")
            if not encoded.rows:
                raise RuntimeError("Compression child handoff must not be empty")
            inherited = {
                key: parent[key]
                for key in (
                    "user_id",
                    "session_key",
                    "chat_id",
                    "chat_type",
                    "thread_id",
                    "display_name",
                    "origin_json",
                    "git_branch",
                    "git_repo_root",
                )
            }
            session.execute(
                insert(SESSIONS).values(
                    id=child_session_id,
                    source=source,
                    model=model,
                    model_config=stored_config,
                    system_prompt=scrub(system_prompt),
                    parent_session_id=parent_session_id,
                    started_at=at,
                    cwd=cwd if cwd is not None else parent["cwd"],
                    profile_name=profile_name
                    if profile_name is not None
                    else parent["profile_name"],
                    message_count=len(encoded.rows),
                    tool_call_count=encoded.tool_calls,
                    **inherited,
                )
            )
            _insert_rows(session, encoded.rows)
            ended = session.execute(
                update(SESSIONS)
                .where(S.id == parent_session_id, S.ended_at.is_(None))
                .values(ended_at=at, end_reason="compression")
            )
            if _rowcount(ended) != 1:
                raise RuntimeError(
                    f"Compression parent changed during publication: {parent_session_id}"
                )

        self.store.write(work)

    # ----------------------------------------------------------------- readers

    def get_messages(
        self,
        session_id: str,
        include_inactive: bool = False,
        limit: int | None = None,
        offset: int = 0,
    ) -> list[dict[str, Any]]:
        """Full rows in id order, decoded; only active rows unless `include_inactive`."""
        query = _full_rows().where(M.session_id == session_id)
        if not include_inactive:
            query = query.where(M.active == 1)
        query = query.order_by(M.id)
        if limit is not None and limit >= 0:
            query = query.limit(limit)
        if offset and offset > 0:
            query = query.offset(offset)
        with self.store.read() as session:
            rows = data_rows(session.execute(query))
        return [_decode_fields(r) for r in rows]

    def _window(
        self, session: OrmSession, session_id: str, around_message_id: int, window: int
    ) -> tuple[list[RowLike], RowLike, list[RowLike]] | None:
        anchor = (
            session.execute(
                _full_rows().where(M.id == around_message_id, M.session_id == session_id)
            )
            .mappings()
            .one_or_none()
        )
        if anchor is None:
            return None
        window = max(0, int(window))
        before = (
            session.execute(
                _full_rows()
                .where(M.session_id == session_id, M.id < around_message_id)
                .order_by(M.id.desc())
                .limit(window)
            )
            .mappings()
            .all()
        )
        after = (
            session.execute(
                _full_rows()
                .where(M.session_id == session_id, M.id > around_message_id)
                .order_by(M.id)
                .limit(window)
            )
            .mappings()
            .all()
        )
        return list(reversed(before)), anchor, list(after)

    def get_messages_around(
        self, session_id: str, around_message_id: int, window: int = 5
    ) -> dict[str, Any]:
        """Up to `window` rows either side of the anchor (inactive included), by id."""
        with self.store.read() as session:
            found = self._window(session, session_id, around_message_id, window)
        if found is None:
            return {"window": [], "messages_before": 0, "messages_after": 0}
        before, anchor, after = found
        return {
            "window": [decode_message(r) for r in (*before, anchor, *after)],
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
    ) -> dict[str, Any]:
        """The window around the anchor plus the session's first and last `bookend` rows
        outside it. `messages_before`/`messages_after` count the rows actually returned
        after the role filter."""
        empty: dict[str, Any] = {
            "window": [],
            "messages_before": 0,
            "messages_after": 0,
            "bookend_start": [],
            "bookend_end": [],
        }
        bookend = max(0, int(bookend))

        def kept(row: RowLike) -> bool:
            return keep_roles is None or row["role"] in keep_roles

        with self.store.read() as session:
            found = self._window(session, session_id, around_message_id, window)
            if found is None:
                return empty
            before, anchor, after = found
            low = before[0]["id"] if before else anchor["id"]
            high = after[-1]["id"] if after else anchor["id"]
            base = _full_rows().where(M.session_id == session_id, _non_empty_content())
            if keep_roles is not None:
                base = base.where(M.role.in_(list(keep_roles)))
            start = (
                session.execute(base.where(M.id < low).order_by(M.id).limit(bookend))
                .mappings()
                .all()
            )
            end = (
                session.execute(base.where(M.id > high).order_by(M.id.desc()).limit(bookend))
                .mappings()
                .all()
            )
        before = [r for r in before if kept(r)]
        after = [r for r in after if kept(r)]
        return {
            "window": [decode_message(r) for r in (*before, anchor, *after)],
            "messages_before": len(before),
            "messages_after": len(after),
            "bookend_start": [decode_message(r) for r in start],
            "bookend_end": [decode_message(r) for r in reversed(end)],
        }

    def list_recent_user_messages(
        self, session_id: str, limit: int = 20, include_inactive: bool = False
    ) -> list[dict[str, Any]]:
        """Newest first: `{id, timestamp, preview}` of user rows without a display kind."""
        query = select(M.id, M.timestamp, M.content).where(
            M.session_id == session_id,
            M.role == "user",
            or_(M.display_kind.is_(None), M.display_kind == ""),
        )
        if not include_inactive:
            query = query.where(M.active == 1)
        query = query.order_by(M.id.desc()).limit(max(0, int(limit)))
        with self.store.read() as session:
            rows = session.execute(query).all()
        return [
            {"id": r.id, "timestamp": r.timestamp, "preview": _preview(decode_content(r.content))}
            for r in rows
        ]

    def has_archived_messages(self, session_id: str) -> bool:
        """Whether any row of the session is inactive (rewound or compaction-archived)."""
        query = select(M.id).where(M.session_id == session_id, M.active == 0).limit(1)
        with self.store.read() as session:
            return session.execute(query).first() is not None

    def has_platform_message_id(self, session_id: str, platform_message_id: str) -> bool:
        query = (
            select(M.id)
            .where(M.session_id == session_id, M.platform_message_id == platform_message_id)
            .limit(1)
        )
        with self.store.read() as session:
            return session.execute(query).first() is not None

    def message_count(self, session_id: str | None = None) -> int:
        """Rows on disk (inactive included), for one session or the whole database."""
        query = select(func.count()).select_from(MESSAGES)
        if session_id is not None:
            query = query.where(M.session_id == session_id)
        with self.store.read() as session:
            return int(session.execute(query).scalar_one())

    def _lineage(self, session: OrmSession, session_id: str) -> list[str]:
        """Root-to-tip ids following parent_session_id; bounded and cycle-safe."""
        chain = [session_id]
        current = session_id
        for _ in range(MAX_LINEAGE_HOPS):
            parent = session.execute(
                select(S.parent_session_id).where(S.id == current)
            ).scalar_one_or_none()
            if not parent or parent in chain:
                break
            chain.append(parent)
            current = parent
        chain.reverse()
        return chain

    def _lineage_rows(
        self, session: OrmSession, session_id: str, include_ancestors: bool, include_inactive: bool
    ) -> tuple[list[str], list[RowLike]]:
        """(root-to-tip chain, its rows in chain order then id order) in one query."""
        chain = self._lineage(session, session_id) if include_ancestors else [session_id]
        query = _full_rows().where(M.session_id.in_(chain))
        if not include_inactive:
            query = query.where(M.active == 1)
        rows = session.execute(query.order_by(M.id)).mappings().all()
        position = {sid: i for i, sid in enumerate(chain)}
        return chain, sorted(rows, key=lambda r: (position[r["session_id"]], r["id"]))

    @staticmethod
    def _conversation(
        rows: Iterable[RowLike], dedupe_replays: bool, repair_alternation: bool
    ) -> list[dict[str, Any]]:
        messages = [_to_conversation(r) for r in rows]
        if dedupe_replays:
            messages = _drop_replayed_prompts(messages)
        messages = _drop_review_prompts(messages)
        if repair_alternation:
            messages = repair_message_alternation(messages)
        return messages

    def get_messages_as_conversation(
        self,
        session_id: str,
        include_ancestors: bool = False,
        include_inactive: bool = False,
        repair_alternation: bool = False,
    ) -> list[dict[str, Any]]:
        """The transcript in the agent's message format (spec section 4.1).

        With `include_ancestors` the rows of the whole lineage come root first (each
        session's rows in id order) and prompts replayed across a compression boundary
        appear once. `repair_alternation` runs `repair_message_alternation()`."""
        with self.store.read() as session:
            _, rows = self._lineage_rows(session, session_id, include_ancestors, include_inactive)
        return self._conversation(rows, include_ancestors, repair_alternation)

    def get_resume_conversations(
        self, session_id: str
    ) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        """(model_history, display_history) from one read of the lineage's active rows
        (spec section 4.2): what the model is sent is the session's own rows with the
        alternation repair; what the user sees is the whole lineage, root first, with
        replayed prompts shown once. Equal to `get_messages_as_conversation(id,
        repair_alternation=True)` and `get_messages_as_conversation(id,
        include_ancestors=True)`, without a second read in between."""
        with self.store.read() as session:
            _, rows = self._lineage_rows(session, session_id, True, False)
        own = [r for r in rows if r["session_id"] == session_id]
        return (
            self._conversation(own, dedupe_replays=False, repair_alternation=True),
            self._conversation(rows, dedupe_replays=True, repair_alternation=False),
        )

    def get_ancestor_display_prefix(self, session_id: str) -> list[dict[str, Any]]:
        """The display rows of the session's ancestors only, root first, with replayed
        prompts de-duplicated among them (what a UI shows above the live session's own
        transcript); [] when the session has no parent (spec section 4.2)."""
        with self.store.read() as session:
            chain, rows = self._lineage_rows(session, session_id, True, False)
        if len(chain) < 2:
            return []
        ancestors = [r for r in rows if r["session_id"] != session_id]
        return self._conversation(ancestors, dedupe_replays=True, repair_alternation=False)


__all__ = [
    "MessageRepository",
    "decode_message",
    "encode_bulk",
    "repair_message_alternation",
    "strip_memory_context",
]
