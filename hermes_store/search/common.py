"""Search pieces both backends share: filters, LIKE snippets, the context of a hit."""

from __future__ import annotations

import json
from typing import Any

from sqlalchemy import Connection, bindparam, text

JSON_PREFIX = "\x00json:"
CONTEXT_CHARS = 200


class Filters:
    def __init__(
        self,
        source_filter: list[str] | None,
        exclude_sources: list[str] | None,
        role_filter: list[str] | None,
        include_inactive: bool,
    ) -> None:
        clauses: list[str] = []
        params: dict[str, Any] = {}
        expanding: list[str] = []
        if source_filter is not None:
            if not source_filter:
                clauses.append("1 = 0")
            else:
                clauses.append("s.source IN :sources")
                params["sources"] = list(source_filter)
                expanding.append("sources")
        if exclude_sources:
            clauses.append("s.source NOT IN :excluded")
            params["excluded"] = list(exclude_sources)
            expanding.append("excluded")
        if role_filter:
            clauses.append("m.role IN :roles")
            params["roles"] = list(role_filter)
            expanding.append("roles")
        if not include_inactive:
            clauses.append("(m.active = 1 OR m.compacted = 1)")
        self.sql = "".join(f" AND {c}" for c in clauses)
        self.params = params
        self.expanding = expanding
        self.excludes_tool_rows = bool(role_filter) and "tool" not in (role_filter or [])
        self.wants_tool_rows = bool(role_filter) and "tool" in (role_filter or [])

    def statement(self, sql: str) -> Any:
        stmt = text(sql)
        if self.expanding:
            stmt = stmt.bindparams(*(bindparam(n, expanding=True) for n in self.expanding))
        return stmt


def like_snippet(content: Any, term: str) -> str:
    body = content if isinstance(content, str) else ("" if content is None else str(content))
    at = body.lower().find(term.lower()) if term else -1
    start = max(0, at - 40) if at >= 0 else 0
    return body[start : start + 120]


def decode_preview(content: Any) -> str:
    """Text of a stored message for context lines: structured content is decoded (its text
    parts joined), NULL is ''."""
    if content is None:
        return ""
    if not isinstance(content, str):
        return str(content)
    if not content.startswith(JSON_PREFIX):
        return content
    try:
        value = json.loads(content[len(JSON_PREFIX) :])
    except ValueError:
        return content
    parts = value if isinstance(value, list) else [value]
    texts = [
        str(p.get("text"))
        for p in parts
        if isinstance(p, dict) and p.get("type") == "text" and p.get("text")
    ]
    return " ".join(texts) if texts else "[multimodal content]"


_NEIGHBOUR = (
    "SELECT role, content FROM messages WHERE session_id = :sid AND "
    # a row value, so that idx_messages_session (session_id, timestamp[, rowid]) seeks
    "(timestamp, id) {cmp} (:ts, :id) "
    "ORDER BY timestamp {direction}, id {direction} LIMIT 1"
)
# One round trip per hit for the previous message, the hit and the next one (ordered by
# timestamp, then id, as the original orders context); built once, not per call.
_CONTEXT = text(
    "SELECT 0 AS pos, role, content FROM ("  # noqa: S608 (fixed fragments only)
    + _NEIGHBOUR.format(cmp="<", direction="DESC")
    + ") AS before_hit UNION ALL SELECT 1, role, content FROM messages WHERE id = :id "
    "UNION ALL SELECT 2, role, content FROM ("
    + _NEIGHBOUR.format(cmp=">", direction="ASC")
    + ") AS after_hit ORDER BY pos"
)


def context_of(conn: Connection, hit: dict[str, Any]) -> list[dict[str, str]]:
    params = {"sid": hit["session_id"], "ts": hit["timestamp"], "id": hit["id"]}
    return [
        {"role": str(r.role), "content": decode_preview(r.content)[:CONTEXT_CHARS]}
        for r in conn.execute(_CONTEXT, params)
    ]


