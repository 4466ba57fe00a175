"""What each upstream schema version adds to a Hermes `state.db`, by name (frozen facts
of docs/reference/history.md): the basis of adoption (adoption.py) and of the judgement whether a
database can be read as it is (read_only.py)."""

from __future__ import annotations

from ..contract import FTS_TABLE, FTS_TRIGRAM_TABLE

_S, _M = "sessions", "messages"

# What each upstream version adds, as (kind, table, name). "column" items name a column
# of a table; "table" and "index" items name the object. Frozen facts of docs/reference/history.md.
INVENTORY: dict[int, tuple[tuple[str, str, str], ...]] = {
    1: (
        ("table", "schema_version", ""),
        ("table", _S, ""),
        ("table", _M, ""),
        *(
            ("column", _S, c)
            for c in (
                "id",
                "source",
                "user_id",
                "model",
                "model_config",
                "system_prompt",
                "parent_session_id",
                "started_at",
                "ended_at",
                "end_reason",
                "message_count",
                "tool_call_count",
                "input_tokens",
                "output_tokens",
            )
        ),
        *(
            ("column", _M, c)
            for c in (
                "id",
                "session_id",
                "role",
                "content",
                "tool_call_id",
                "tool_calls",
                "tool_name",
                "timestamp",
                "token_count",
            )
        ),
        ("index", _S, "idx_sessions_source"),
        ("index", _S, "idx_sessions_parent"),
        ("index", _S, "idx_sessions_started"),
        ("index", _M, "idx_messages_session"),
        ("table", FTS_TABLE, ""),
    ),
    2: (("column", _M, "finish_reason"),),
    3: (("column", _S, "title"),),
    4: (("index", _S, "idx_sessions_title_unique"),),
    5: tuple(
        ("column", _S, c)
        for c in (
            "cache_read_tokens",
            "cache_write_tokens",
            "reasoning_tokens",
            "billing_provider",
            "billing_base_url",
            "billing_mode",
            "estimated_cost_usd",
            "actual_cost_usd",
            "cost_status",
            "cost_source",
            "pricing_version",
        )
    ),
    6: tuple(
        ("column", _M, c) for c in ("reasoning", "reasoning_details", "codex_reasoning_items")
    ),
    7: (("column", _M, "reasoning_content"), ("table", "state_meta", "")),
    8: (("column", _S, "api_call_count"),),
    9: (("column", _M, "codex_message_items"),),
    10: (("table", FTS_TRIGRAM_TABLE, ""),),
    11: (
        *(("column", _S, c) for c in ("handoff_state", "handoff_platform", "handoff_error")),
        ("fts", "", "L3 or newer"),
    ),
    12: (("column", _M, "platform_message_id"), ("index", _M, "idx_messages_platform_msg_id")),
    13: (("column", _M, "observed"),),
    14: (
        ("table", "compression_locks", ""),
        ("index", "compression_locks", "idx_compression_locks_expires"),
        *(("column", _S, c) for c in ("cwd", "rewind_count", "archived")),
        ("column", _M, "active"),
        ("not_null", _M, "active"),
        ("index", _M, "idx_messages_session_active"),
    ),
    15: (("index", _S, "idx_sessions_source_id"),),
    16: (
        ("column", _M, "compacted"),
        ("column", _S, "git_branch"),
        ("column", _S, "git_repo_root"),
    ),
    17: (
        *(
            ("column", _S, c)
            for c in (
                "session_key",
                "chat_id",
                "chat_type",
                "thread_id",
                "compression_failure_cooldown_until",
                "compression_failure_error",
            )
        ),
        ("index", _S, "idx_sessions_session_key"),
        ("index", _S, "idx_sessions_gateway_peer"),
        ("index", _S, "idx_sessions_handoff_state"),
    ),
    18: tuple(("column", _S, c) for c in ("display_name", "origin_json", "expiry_finalized")),
    19: (
        ("table", "gateway_routing", ""),
        ("primary_key", "gateway_routing", "scope,session_key"),
        ("absent", "gateway_routing_legacy_pk", ""),
        ("column", _M, "effect_disposition"),
        ("index", _M, "idx_messages_active_null"),
    ),
    20: (
        ("table", "session_model_usage", ""),
        ("column", "session_model_usage", "billing_mode"),
        ("column", "session_model_usage", "actual_cost_usd"),
        ("column", "session_model_usage", "cost_status"),
        ("column", "session_model_usage", "cost_source"),
        ("index", "session_model_usage", "idx_session_model_usage_session"),
        ("index", "session_model_usage", "idx_session_model_usage_model"),
    ),
    21: (
        ("table", "async_delegations", ""),
        ("index", "async_delegations", "idx_async_delegations_delivery"),
        ("column", _S, "compression_fallback_streak"),
        ("column", _S, "profile_name"),
    ),
    22: (
        (
            "primary_key",
            "session_model_usage",
            "session_id,model,billing_provider,billing_base_url,billing_mode,task",
        ),
        ("absent", "session_model_usage_v21", ""),
        ("absent", "session_model_usage_legacy_pk", ""),
        ("column", _M, "api_content"),
    ),
    23: (
        ("fts", "", "v23"),
        ("column", _S, "compression_ineffective_count"),
        ("column", _S, "pinned"),
        ("column", _M, "display_kind"),
        ("column", _M, "display_metadata"),
    ),
}
