"""The floor: the benchmarked operations written directly on the stdlib sqlite3 module.

Same schema (created by `migrate.upgrade` on a fresh file, so the FTS tables and their
triggers are identical), same connection pragmas as hermes-store's engine (WAL,
foreign_keys, recursive_triggers, explicit BEGIN), no ORM, no validation, no retries.
"""

from __future__ import annotations

import json
import sqlite3
import time
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from hermes_store import migrate

from .corpus import SessionSpec

MESSAGE_COLUMNS = (
    "session_id",
    "role",
    "content",
    "tool_call_id",
    "tool_calls",
    "tool_name",
    "timestamp",
    "token_count",
    "finish_reason",
    "active",
    "compacted",
)
_COLUMNS_SQL = ", ".join(MESSAGE_COLUMNS)
_MARKS_SQL = ", ".join("?" for _ in MESSAGE_COLUMNS)
_INSERT_MESSAGE = f"INSERT INTO messages ({_COLUMNS_SQL}) VALUES ({_MARKS_SQL})"  # noqa: S608
_BUMP = (
    "UPDATE sessions SET message_count = COALESCE(message_count, 0) + ?, "
    "tool_call_count = COALESCE(tool_call_count, 0) + ? WHERE id = ?"
)
_SNIPPET = "snippet({t}, -1, '>>>', '<<<', '...', 40)"
_SEARCH = (
    "SELECT m.id, m.session_id, m.role, {snippet} AS snippet, m.timestamp, m.tool_name, "
    "s.source, s.model, s.started_at AS session_started "
    "FROM {t} JOIN messages AS m ON m.id = {t}.rowid "
    "JOIN sessions AS s ON s.id = m.session_id "
    "WHERE {t} MATCH ? AND (m.active = 1 OR m.compacted = 1) ORDER BY rank LIMIT ?"
)
_LIKE = (
    "SELECT m.id, m.session_id, m.role, m.content AS snippet, m.timestamp, m.tool_name, "
    "s.source, s.model, s.started_at AS session_started "
    "FROM messages AS m JOIN sessions AS s ON s.id = m.session_id "
    "WHERE (m.content LIKE ? ESCAPE '\\' OR m.tool_name LIKE ? ESCAPE '\\' "
    "OR m.tool_calls LIKE ? ESCAPE '\\') AND (m.active = 1 OR m.compacted = 1) "
    "ORDER BY m.timestamp DESC LIMIT ?"
)
# The comparable simple listing: top-level sessions newest first, with the first user
# message as preview and the newest message time (the two per-row subqueries the
# repository's listing also runs), without its JSON marker and branch-child tests.
_LIST_RECENT = (
    "SELECT s.*, "
    "COALESCE((SELECT substr(replace(replace(m.content, char(10), ' '), char(13), ' '), 1, 200) "
    "  FROM messages AS m WHERE m.session_id = s.id AND m.role = 'user' "
    "  AND m.content IS NOT NULL ORDER BY m.timestamp, m.id LIMIT 1), '') AS preview, "
    "COALESCE((SELECT max(m.timestamp) FROM messages AS m WHERE m.session_id = s.id), "
    "  s.started_at) AS last_active "
    "FROM sessions AS s WHERE s.parent_session_id IS NULL "
    "ORDER BY s.started_at DESC, s.id DESC LIMIT ?"
)


def create_schema(path: Path) -> None:
    """A fresh database at head, built by hermes-store's own migrations."""
    migrate.upgrade(str(path), fts_min_pause=0)


def connect(path: Path) -> sqlite3.Connection:
    conn = sqlite3.connect(str(path), timeout=30, isolation_level=None)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA foreign_keys=ON")
    conn.execute("PRAGMA recursive_triggers=ON")
    return conn


def message_params(session_id: str, msg: dict[str, Any]) -> tuple[tuple[Any, ...], int]:
    calls = msg.get("tool_calls")
    return (
        (
            session_id,
            msg["role"],
            msg.get("content"),
            msg.get("tool_call_id"),
            json.dumps(calls) if calls else None,
            msg.get("tool_name"),
            msg.get("timestamp") or time.time(),
            msg.get("token_count"),
            msg.get("finish_reason"),
            1,
            0,
        ),
        len(calls) if calls else 0,
    )


def bulk_load(conn: sqlite3.Connection, sessions: Iterable[SessionSpec]) -> None:
    """Insert the corpus in a few large transactions (the FTS triggers index every row)."""
    conn.execute("BEGIN IMMEDIATE")
    rows = 0
    for spec in sessions:
        params = [message_params(spec.id, m) for m in spec.messages]
        conn.execute(
            "INSERT INTO sessions (id, source, model, started_at, cwd, message_count, "
            "tool_call_count) VALUES (?, ?, ?, ?, ?, ?, ?)",
            (
                spec.id,
                spec.source,
                spec.model,
                spec.started_at,
                spec.cwd,
                len(params),
                sum(n for _, n in params),
            ),
        )
        conn.executemany(_INSERT_MESSAGE, [p for p, _ in params])
        rows += len(params)
        if rows >= 50_000:
            conn.execute("COMMIT")
            conn.execute("BEGIN IMMEDIATE")
            rows = 0
    conn.execute("COMMIT")


class Floor:
    """The benchmarked operations on one sqlite3 connection."""

    def __init__(self, path: Path) -> None:
        self.conn = connect(path)
        self.conn.row_factory = sqlite3.Row

    def close(self) -> None:
        self.conn.close()

    def append_message(self, session_id: str, msg: dict[str, Any]) -> int:
        params, n_calls = message_params(session_id, msg)
        conn = self.conn
        conn.execute("BEGIN IMMEDIATE")
        try:
            cur = conn.execute(_INSERT_MESSAGE, params)
            conn.execute(_BUMP, (1, n_calls, session_id))
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        return int(cur.lastrowid or 0)

    def append_messages(self, session_id: str, msgs: Sequence[dict[str, Any]]) -> None:
        encoded = [message_params(session_id, m) for m in msgs]
        conn = self.conn
        conn.execute("BEGIN IMMEDIATE")
        try:
            conn.executemany(_INSERT_MESSAGE, [p for p, _ in encoded])
            conn.execute(_BUMP, (len(encoded), sum(n for _, n in encoded), session_id))
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise

    def get_messages(self, session_id: str) -> list[dict[str, Any]]:
        rows = self.conn.execute(
            "SELECT * FROM messages WHERE session_id = ? AND active = 1 ORDER BY id",
            (session_id,),
        ).fetchall()
        out = []
        for r in rows:
            d = dict(r)
            if d["tool_calls"] is not None:
                d["tool_calls"] = json.loads(d["tool_calls"])
            out.append(d)
        return out

    def list_recent_sessions(self, limit: int = 20) -> list[dict[str, Any]]:
        return [dict(r) for r in self.conn.execute(_LIST_RECENT, (limit,)).fetchall()]

    def search(self, match: str, *, table: str = "messages_fts", limit: int = 20) -> list[Any]:
        """FTS5 MATCH joined to messages and sessions, as the repository issues it."""
        sql = _SEARCH.format(t=table, snippet=_SNIPPET.format(t=table))
        return [dict(r) for r in self.conn.execute(sql, (match, limit)).fetchall()]

    def search_like(self, term: str, limit: int = 20) -> list[Any]:
        """The LIKE scan for CJK terms too short for the trigram index."""
        pattern = "%" + term.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"
        return [
            dict(r) for r in self.conn.execute(_LIKE, (pattern, pattern, pattern, limit)).fetchall()
        ]


#: benchmark query name -> how the floor runs it (the route hermes-store picks)
def floor_search(floor: Floor, name: str, query: str) -> list[Any]:
    if name == "cjk2":
        return floor.search_like(query)
    if name == "cjk3":
        return floor.search(f'"{query}"', table="messages_fts_trigram")
    return floor.search(query)
