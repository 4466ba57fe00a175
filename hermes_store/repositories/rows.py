"""The shapes of the dicts the repositories return, for type checkers.

The values are plain dicts, as the original's were (`row["title"]`, `json.dumps(row)`
and `dict(row)` keep working); these TypedDicts only tell mypy and editors which keys
they have and what the values are, on the sync repositories, the facade and
`AsyncStore` alike. A row of a database written by a later build may carry columns not
listed here; reading them needs `row.get(...)` through `Mapping[str, object]`.
"""

from __future__ import annotations

from typing import Any, Required, TypedDict


class _SessionColumns(TypedDict, total=False):
    """The columns of `sessions`, as stored: written once, for both row shapes below."""

    id: Required[str]
    source: str
    user_id: str | None
    session_key: str | None
    chat_id: str | None
    chat_type: str | None
    thread_id: str | None
    display_name: str | None
    origin_json: str | None
    expiry_finalized: int | None
    model: str | None
    model_config: str | None
    system_prompt: str | None
    parent_session_id: str | None
    started_at: float
    ended_at: float | None
    end_reason: str | None
    message_count: int | None
    tool_call_count: int | None
    input_tokens: int | None
    output_tokens: int | None
    cache_read_tokens: int | None
    cache_write_tokens: int | None
    reasoning_tokens: int | None
    cwd: str | None
    git_branch: str | None
    git_repo_root: str | None
    billing_provider: str | None
    billing_base_url: str | None
    billing_mode: str | None
    estimated_cost_usd: float | None
    actual_cost_usd: float | None
    cost_status: str | None
    cost_source: str | None
    pricing_version: str | None
    title: str | None
    api_call_count: int | None
    handoff_state: str | None
    handoff_platform: str | None
    handoff_error: str | None
    compression_failure_cooldown_until: float | None
    compression_failure_error: str | None
    compression_fallback_streak: int
    compression_ineffective_count: int
    profile_name: str | None
    rewind_count: int
    archived: int
    pinned: int


class SessionRow(_SessionColumns):
    """A full `sessions` row (`get_session`), columns as stored."""


class ListingRow(_SessionColumns, total=False):
    """A listing row (`list_sessions_rich`, `get_session_rich_row`, the session
    searches): the session's columns (a subset with `compact_rows`), its `preview` and
    `last_active`, and for a compressed conversation shown as its tip, the root's id."""

    preview: str
    last_active: float
    _lineage_root_id: str


class MessageRow(TypedDict):
    """A full `messages` row (`get_messages`), with `content`, `tool_calls` and
    `display_metadata` decoded (content is text, or the structured value it encodes)."""

    id: int
    session_id: str
    role: str
    content: Any
    tool_call_id: str | None
    tool_calls: list[Any] | None
    tool_name: str | None
    effect_disposition: str | None
    timestamp: float
    token_count: int | None
    finish_reason: str | None
    reasoning: str | None
    reasoning_content: str | None
    reasoning_details: str | None
    codex_reasoning_items: str | None
    codex_message_items: str | None
    platform_message_id: str | None
    observed: int | None
    active: int
    compacted: int
    api_content: str | None
    display_kind: str | None
    display_metadata: dict[str, Any] | None


class ConversationMessage(TypedDict, total=False):
    """A message in the agent's format (`get_messages_as_conversation`): `role` and
    `content` always, the other keys only where the row fills them."""

    role: Required[str]
    content: Required[Any]
    api_content: str
    display_kind: str
    display_metadata: dict[str, Any]
    timestamp: float
    tool_call_id: str
    tool_name: str
    effect_disposition: str
    tool_calls: list[Any]
    message_id: str
    observed: bool
    finish_reason: str
    reasoning: str
    reasoning_content: str
    reasoning_details: Any
    codex_reasoning_items: Any
    codex_message_items: Any


class RecentUserMessage(TypedDict):
    """`list_recent_user_messages`: a user row's id, time and one-line preview."""

    id: int
    timestamp: float
    preview: str


class MessageWindow(TypedDict):
    """`get_messages_around`: the rows either side of an anchor, and how many of each."""

    window: list[MessageRow]
    messages_before: int
    messages_after: int


class AnchoredView(TypedDict):
    """`get_anchored_view`: the window plus the session's first and last rows."""

    window: list[MessageRow]
    messages_before: int
    messages_after: int
    bookend_start: list[MessageRow]
    bookend_end: list[MessageRow]


class RewindResult(TypedDict):
    """`rewind_to_message`: how many rows were hidden, the target row and the new head."""

    rewound_count: int
    target_message: dict[str, Any]
    new_head_id: int | None


class CompressionCooldown(TypedDict):
    """`get_compression_failure_cooldown` while a cooldown runs."""

    cooldown_until: float
    remaining_seconds: float
    error: str | None
