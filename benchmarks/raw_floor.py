"""The floor: the benchmarked operations as the same SQL statements, issued directly on
the stdlib sqlite3 module.

Same schema (created by `migrate.upgrade` on a fresh file, so the FTS tables and their
triggers are identical), same connection pragmas as hermes-store's engine (WAL,
foreign_keys, recursive_triggers, explicit BEGIN), and the same statements in the same
transactions: the writes' guard reads, the reads' lock-taking PRAGMA, and for listing and
search the exact statements hermes-store issued for that call, recorded once (`Recorded`).
What is left to the ratio is hermes-store's own cost: SQLAlchemy, sessions, query
sanitising and routing, value encoding and decoding, retries.
"""

from __future__ import annotations

import json
import sqlite3
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sqlalchemy import Engine, event

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
# the guards every append runs first: a live compression lease held by another writer,
# and a session closed by compression (MessageRepository._check_appendable)
_LEASE = (
    "SELECT compression_locks.holder FROM compression_locks "
    "WHERE compression_locks.session_id = ? AND compression_locks.expires_at > ?"
)
_CLOSED = "SELECT sessions.ended_at, sessions.end_reason FROM sessions WHERE sessions.id = ?"
_BUMP = (
    "UPDATE sessions SET message_count = COALESCE(message_count, 0) + ?, "
    "tool_call_count = COALESCE(tool_call_count, 0) + ? WHERE id = ?"
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

    def _guards(self, session_id: str) -> None:
        self.conn.execute(_LEASE, (session_id, time.time())).fetchall()
        self.conn.execute(_CLOSED, (session_id,)).fetchall()

    def append_message(self, session_id: str, msg: dict[str, Any]) -> int:
        params, n_calls = message_params(session_id, msg)
        conn = self.conn
        conn.execute("BEGIN IMMEDIATE")
        try:
            self._guards(session_id)
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
            self._guards(session_id)
            # one multi-row INSERT ... RETURNING id, as the repository sends it
            rows = ", ".join(f"({_MARKS_SQL})" for _ in encoded)
            values = [v for p, _ in encoded for v in p]
            ids = conn.execute(
                f"INSERT INTO messages ({_COLUMNS_SQL}) VALUES {rows} RETURNING id",  # noqa: S608
                values,
            ).fetchall()
            assert len(ids) == len(encoded)
            conn.execute(_BUMP, (len(encoded), sum(n for _, n in encoded), session_id))
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise

    def get_messages(self, session_id: str) -> list[dict[str, Any]]:
        conn = self.conn
        conn.execute("BEGIN DEFERRED")
        try:
            conn.execute("PRAGMA schema_version").fetchall()
            rows = conn.execute(
                "SELECT * FROM messages WHERE session_id = ? AND active = 1 ORDER BY id",
                (session_id,),
            ).fetchall()
        finally:
            conn.execute("ROLLBACK")
        out = []
        for r in rows:
            d = dict(r)
            if d["tool_calls"] is not None:
                d["tool_calls"] = json.loads(d["tool_calls"])
            out.append(d)
        return out

    def replay(self, recorded: Recorded) -> list[list[dict[str, Any]]]:
        """Issue a recorded call's statements in order, fetching every row of each, and
        end the transaction they began as hermes-store ends a read: ROLLBACK."""
        conn = self.conn
        results = []
        try:
            for sql, params in recorded.statements:
                try:
                    rows = conn.execute(sql, params).fetchall()
                except sqlite3.OperationalError:
                    # an FTS5 syntax error: hermes-store's search answers it with no
                    # rows (the original's reading of `don't`) and goes on, as does this
                    rows = []
                results.append([dict(r) for r in rows])
        finally:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
        return results


@dataclass(frozen=True)
class Recorded:
    """The SQL one hermes-store call sent to the driver, in order, with its parameters."""

    statements: tuple[tuple[str, Any], ...]


def record_statements(engine: Engine, call: Callable[[], Any]) -> Recorded:
    """Run `call` once and keep every statement it sent through `engine` (BEGIN,
    SAVEPOINTs and PRAGMAs included; COMMIT/ROLLBACK go through the driver's own methods
    and are replayed by `Floor.replay`)."""
    captured: list[tuple[str, Any]] = []

    def keep(conn: Any, cursor: Any, sql: str, params: Any, context: Any, many: bool) -> None:
        if many:
            raise ValueError("recording is for reads; executemany was called")
        captured.append((sql, params))

    event.listen(engine, "before_cursor_execute", keep)
    try:
        call()
    finally:
        event.remove(engine, "before_cursor_execute", keep)
    return Recorded(tuple(captured))
