"""Export, import, deletion, pruning and archiving (spec/behaviour.md 8 and 9).

Every id list that reaches SQL is chunked (900 per IN-list) so no batch size can hit
SQLite's variable limit (upstream #87928). Long deletions run as a series of short write
transactions rather than one long one: the original's writers give up after about 15
attempts, so holding the write lock for a 50,000-session prune would make them drop
writes.

Deliberate difference from v23: the `*_like` prune filters take `%` and `_` literally
(v23 passes them to LIKE unescaped, so `_` matched any character). Later upstream builds
made the same change.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol, TypeGuard

from sqlalchemy import (
    BindParameter,
    ColumnElement,
    Connection,
    RowMapping,
    Select,
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
from sqlalchemy.orm import Session, aliased

from ..models import Message
from ..models import Session as SessionRow
from ..store import Store
from ._dialect import data_columns
from ._encoding import (
    decode_content,
    decode_display_metadata,
    decode_json,
    flag,
    now,
    scrub,
)
from .messages import encode_bulk
from .sessions import compression_lineage, lineage_members

log = logging.getLogger(__name__)

CHUNK = 900
EXPORT_PAGE = 200
DAY = 86400.0

IMPORT_MAX_SESSIONS = 500
IMPORT_MAX_MESSAGES_PER_SESSION = 10_000
IMPORT_MAX_MESSAGES_TOTAL = 50_000
IMPORT_MAX_SESSION_BYTES = 5 * 1024 * 1024
IMPORT_MAX_TOTAL_BYTES = 25 * 1024 * 1024

PRUNE_FILTERS = frozenset(
    {
        "last_active_before",
        "last_active_after",
        "started_before",
        "started_after",
        "title_like",
        "end_reason",
        "cwd_prefix",
        "min_messages",
        "max_messages",
        "archived",
        "model_like",
        "provider",
        "user_id",
        "chat_id",
        "chat_type",
        "branch_like",
        "min_tokens",
        "max_tokens",
        "min_cost",
        "max_cost",
        "min_tool_calls",
        "max_tool_calls",
    }
)

_SESSION_TEXT_FIELDS = (
    "source",
    "user_id",
    "model",
    "system_prompt",
    "parent_session_id",
    "cwd",
    "git_branch",
    "git_repo_root",
    "billing_provider",
    "billing_base_url",
    "billing_mode",
    "cost_status",
    "cost_source",
    "pricing_version",
    "title",
    "end_reason",
)
_SESSION_INT_FIELDS = (
    "input_tokens",
    "output_tokens",
    "cache_read_tokens",
    "cache_write_tokens",
    "reasoning_tokens",
    "api_call_count",
)
_SESSION_REAL_FIELDS = ("started_at", "ended_at", "estimated_cost_usd", "actual_cost_usd")
_MESSAGE_TEXT_FIELDS = (
    "tool_call_id",
    "tool_name",
    "finish_reason",
    "reasoning",
    "reasoning_content",
    "effect_disposition",
    "api_content",
    "display_kind",
)
# Platform ids are often numeric (Telegram); they are stored as text either way.
_MESSAGE_ID_FIELDS = ("platform_message_id", "message_id")
_REASONING_JSON_FIELDS = ("reasoning_details", "codex_reasoning_items", "codex_message_items")


class SupportsWriteStr(Protocol):
    def write(self, s: str, /) -> object: ...


def _chunks(items: Sequence[str], size: int = CHUNK) -> Iterator[Sequence[str]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]


def _activity() -> ColumnElement[float]:
    """A session's last activity: its newest message timestamp, else when it started."""
    newest = (
        select(func.max(Message.timestamp))
        .where(Message.session_id == SessionRow.id)
        .scalar_subquery()
    )
    return func.coalesce(newest, SessionRow.started_at)


def _is_number(value: object) -> TypeGuard[int | float]:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _is_int(value: object) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)


# --------------------------------------------------------------------------- reads


def _session_row(conn: Connection, session_id: str) -> dict[str, Any] | None:
    row = (
        conn.execute(
            select(literal_column("*")).select_from(SessionRow).where(SessionRow.id == session_id)
        )
        .mappings()
        .first()
    )
    return _row_dict(row) if row is not None else None


def _row_dict(row: RowMapping) -> dict[str, Any]:
    return data_columns(row)


def _decode_message(row: RowMapping) -> dict[str, Any]:
    out = _row_dict(row)
    out["content"] = decode_content(out.get("content"))
    if out.get("tool_calls") is not None:
        out["tool_calls"] = decode_json(out["tool_calls"], default=[])
    if "display_metadata" in out:
        out["display_metadata"] = decode_display_metadata(out["display_metadata"])
    return out


def _active_messages(conn: Connection, session_id: str) -> list[dict[str, Any]]:
    stmt: Select[Any] = (
        select(literal_column("*"))
        .select_from(Message)
        .where(Message.session_id == session_id, Message.active == 1)
        .order_by(Message.id)
    )
    return [_decode_message(r) for r in conn.execute(stmt).mappings()]


# --------------------------------------------------------------------------- deletes


def _delete_ids(conn: Connection, ids: Sequence[str]) -> int:
    """Delete sessions with their messages, orphaning every child first.

    With foreign keys on, a parent row cannot go while a child still points at it, and
    messages have no ON DELETE action, so the order is: unlink children, delete
    messages, delete sessions (usage rows follow by ON DELETE CASCADE)."""
    ids_param: BindParameter[Any] = bindparam("ids", expanding=True)
    unlink = (
        update(SessionRow)
        .where(SessionRow.parent_session_id.in_(ids_param))
        .values(parent_session_id=None)
    )
    drop_messages = delete(Message).where(Message.session_id.in_(ids_param))
    drop_sessions = delete(SessionRow).where(SessionRow.id.in_(ids_param))
    for chunk in _chunks(ids):
        conn.execute(unlink, {"ids": list(chunk)})
    for chunk in _chunks(ids):
        conn.execute(drop_messages, {"ids": list(chunk)})
    deleted = 0
    for chunk in _chunks(ids):
        deleted += conn.execute(drop_sessions, {"ids": list(chunk)}).rowcount
    return deleted


def _existing_ids(conn: Connection, ids: Sequence[str]) -> set[str]:
    stmt = select(SessionRow.id).where(SessionRow.id.in_(bindparam("ids", expanding=True)))
    found: set[str] = set()
    for chunk in _chunks(ids):
        found.update(conn.execute(stmt, {"ids": list(chunk)}).scalars())
    return found


def _delegate_index(conn: Connection) -> list[tuple[str, str | None, str | None]]:
    """(id, parent, `_delegate_from` value) of every row carrying the marker.

    JSON is parsed here rather than with json_extract: one malformed model_config must
    not make a delete fail, and the parse is the same on every dialect."""
    rows = conn.execute(
        select(SessionRow.id, SessionRow.parent_session_id, SessionRow.model_config).where(
            SessionRow.model_config.contains("_delegate_from", autoescape=True)
        )
    ).all()
    index: list[tuple[str, str | None, str | None]] = []
    for sid, parent, config in rows:
        parsed = decode_json(config)
        if isinstance(parsed, dict) and parsed.get("_delegate_from") not in (None, ""):
            index.append((sid, parent, str(parsed["_delegate_from"])))
    return index


def _with_delegates(conn: Connection, roots: Iterable[str]) -> set[str]:
    """The roots plus their delegate descendants: rows whose `_delegate_from` names a
    target, or children of a target that carry any `_delegate_from`, recursively."""
    targets = set(roots)
    index = _delegate_index(conn)
    changed = True
    while changed:
        changed = False
        for sid, parent, marker in index:
            if sid not in targets and (marker in targets or parent in targets):
                targets.add(sid)
                changed = True
    return targets


def _safe_file_id(sid: str) -> bool:
    # An id is data, not a path: never let one reach outside the directory.
    return bool(sid) and not any(c in sid for c in "/\\\x00") and sid not in (".", "..")


def _remove_session_files(sessions_dir: str | Path | None, ids: Iterable[str]) -> None:
    """Remove `<id>.json`, `<id>.jsonl` and `request_dump_<id>_*.json` of deleted ids;
    errors are ignored (the rows are already gone, the files are only caches)."""
    if sessions_dir is None:
        return
    base = Path(sessions_dir)
    wanted = {sid for sid in ids if _safe_file_id(sid)}
    if not wanted or not base.is_dir():
        return
    doomed = [base / f"{sid}{suffix}" for sid in sorted(wanted) for suffix in (".json", ".jsonl")]
    # One directory scan instead of a glob per id: a prune may delete 50,000 sessions.
    # Ids may contain underscores, so try every split point of the dump file name.
    try:
        names = [p.name for p in base.iterdir()]
    except OSError:
        names = []
    for name in names:
        if not (name.startswith("request_dump_") and name.endswith(".json")):
            continue
        middle = name[len("request_dump_") : -len(".json")]
        cuts = [i for i, c in enumerate(middle) if c == "_"]
        if any(middle[:i] in wanted for i in cuts):
            doomed.append(base / name)
    for path in doomed:
        try:
            path.unlink()
        except FileNotFoundError:
            pass
        except OSError as exc:
            log.debug("could not remove %s: %s", path, exc)


# --------------------------------------------------------------------------- import


def _decoded_reasoning(message: Mapping[str, Any]) -> dict[str, Any]:
    """Reasoning columns arrive decoded or as the JSON text an export holds; parse text
    first so the bulk routine does not encode it a second time (unparsable text is kept
    as the string it is)."""
    out = dict(message)
    for field in _REASONING_JSON_FIELDS:
        value = out.get(field)
        if isinstance(value, str):
            try:
                out[field] = json.loads(value) if value.strip() else None
            except ValueError:
                pass
    return out


def _model_config_error(value: Any) -> str | None:
    if value is None or value == "":
        return None
    if isinstance(value, str):
        try:
            parsed = json.loads(value)
        except ValueError:
            return "model_config must be valid JSON"
        return None if isinstance(parsed, dict) else "model_config must be a JSON object"
    if not isinstance(value, dict):
        return "model_config must be a JSON object"
    try:
        json.dumps(value)
    except (TypeError, ValueError):
        return "model_config must be JSON serializable"
    return None


def _encode_model_config(value: Any) -> str | None:
    if isinstance(value, str):
        return scrub(value) or None
    return json.dumps(value) if value else None


def _message_error(index: int, msg: Mapping[str, Any]) -> str | None:
    where = f"messages[{index}]"
    role = msg.get("role")
    if not isinstance(role, str) or not role.strip():
        return f"{where}.role must be a non-empty string"
    for field in _MESSAGE_TEXT_FIELDS:
        value = msg.get(field)
        if value is not None and not isinstance(value, str):
            return f"{where}.{field} must be a string"
    for field in _MESSAGE_ID_FIELDS:
        value = msg.get(field)
        if value is not None and not isinstance(value, str) and not _is_int(value):
            return f"{where}.{field} must be a string"
    token_count = msg.get("token_count")
    if token_count is not None and not _is_int(token_count):
        return f"{where}.token_count must be an integer"
    timestamp = msg.get("timestamp")
    if timestamp is not None and not _is_number(timestamp):
        return f"{where}.timestamp must be a number"
    return None


class _ImportTotals:
    def __init__(self) -> None:
        self.bytes = 0
        self.messages = 0


def _entry_error(
    entry: Any, seen: set[str], totals: _ImportTotals
) -> tuple[str, str | None] | None:
    """(error, session id if known) for the first problem of one entry, else None."""
    if not isinstance(entry, dict):
        return "session must be an object", None
    sid = entry.get("id")
    if not isinstance(sid, str) or not sid.strip():
        return "session id is required", None
    if sid in seen:
        return "duplicate session id", sid
    seen.add(sid)
    messages = entry.get("messages", [])
    if messages is None:
        messages = []
    if not isinstance(messages, list):
        return "messages must be a list", sid
    if len(messages) > IMPORT_MAX_MESSAGES_PER_SESSION:
        return "messages exceeds the per-session import limit", sid
    if not all(isinstance(m, dict) for m in messages):
        return "messages must contain only objects", sid
    # Before the whole-entry check, so a bad model_config gets its own message.
    config_error = _model_config_error(entry.get("model_config"))
    if config_error:
        return config_error, sid
    try:
        size = len(
            json.dumps(entry, ensure_ascii=False, separators=(",", ":")).encode(
                "utf-8", "surrogatepass"
            )
        )
    except (TypeError, ValueError):
        return "session must be JSON serializable", sid
    if size > IMPORT_MAX_SESSION_BYTES:
        return "session exceeds the import size limit", sid
    totals.bytes += size
    if totals.bytes > IMPORT_MAX_TOTAL_BYTES:
        return "import exceeds the total size limit", sid
    totals.messages += len(messages)
    if totals.messages > IMPORT_MAX_MESSAGES_TOTAL:
        return "messages exceeds the total import limit", sid
    for field in _SESSION_TEXT_FIELDS:
        value = entry.get(field)
        if value is not None and not isinstance(value, str):
            return f"{field} must be a string", sid
    for field in _SESSION_INT_FIELDS:
        value = entry.get(field)
        if value is not None and not _is_int(value):
            return f"{field} must be an integer", sid
    for field in _SESSION_REAL_FIELDS:
        value = entry.get(field)
        if value is not None and not _is_number(value):
            return f"{field} must be a number", sid
    for index, msg in enumerate(messages):
        error = _message_error(index, msg)
        if error:
            return error, sid
    return None


def _session_insert_row(
    entry: Mapping[str, Any], ts: float, message_count: int, tool_call_count: int
) -> dict[str, Any]:
    """What an import takes from an entry: identity, model, prompt, accounting, workspace,
    billing, title, ending and the archived flag. Routing, handoff, rewind, pinning,
    profile and compression state belong to the machine that wrote them."""

    def text(field: str) -> str | None:
        return scrub(entry.get(field))

    def real(field: str) -> float | None:
        value = entry.get(field)
        return float(value) if _is_number(value) else None

    started = entry.get("started_at")
    return {
        "id": entry["id"],
        "source": text("source") or "import",
        "user_id": text("user_id"),
        "model": text("model"),
        "model_config": _encode_model_config(entry.get("model_config")),
        "system_prompt": text("system_prompt"),
        "parent_session_id": None,  # linked after every row exists
        "started_at": float(started) if _is_number(started) else ts,
        "ended_at": real("ended_at"),
        "end_reason": text("end_reason"),
        "message_count": message_count,
        "tool_call_count": tool_call_count,
        **{f: int(entry.get(f) or 0) for f in _SESSION_INT_FIELDS},  # validated ints
        "estimated_cost_usd": real("estimated_cost_usd"),
        "actual_cost_usd": real("actual_cost_usd"),
        "cost_status": text("cost_status"),
        "cost_source": text("cost_source"),
        "pricing_version": text("pricing_version"),
        "cwd": text("cwd"),
        "git_branch": text("git_branch"),
        "git_repo_root": text("git_repo_root"),
        "billing_provider": text("billing_provider"),
        "billing_base_url": text("billing_base_url"),
        "billing_mode": text("billing_mode"),
        "title": text("title") or None,
        "archived": flag(entry.get("archived")),
    }


def _creates_cycle(child: str, parent: str, parents: Mapping[str, str]) -> bool:
    """Whether linking `child` to `parent` closes a loop through `child`, following the
    payload's parent links that still stand (the original's rule: the first member of a
    loop met in payload order is the one detached)."""
    node: str | None = parent
    seen: set[str] = set()
    while node is not None and node not in seen:
        if node == child:
            return True
        seen.add(node)
        node = parents.get(node)
    return False


# --------------------------------------------------------------------------- repository


class MaintenanceRepository:
    def __init__(
        self,
        store: Store,
        *,
        chunk_size: int = CHUNK,
        chunk_pause: float = 0.0,
        export_page: int = EXPORT_PAGE,
    ) -> None:
        self.store = store
        self.chunk_size = max(1, min(int(chunk_size), CHUNK))
        # Pause between deletion chunks so other processes' writers get the lock.
        self.chunk_pause = max(0.0, float(chunk_pause))
        self.export_page = max(1, int(export_page))

    # ------------------------------------------------------------------ export

    def export_session(self, session_id: str) -> dict[str, Any] | None:
        """The full session row plus its active messages, decoded; None if unknown."""
        with self.store.read() as s:
            conn = s.connection()
            row = _session_row(conn, session_id)
            if row is None:
                return None
            row["messages"] = _active_messages(conn, session_id)
        return row

    def export_session_lineage(self, session_id: str) -> dict[str, Any] | None:
        """A compression lineage exported as one logical session (spec section 8): the
        last segment's fields, plus `segments` (one `export_session` dict per segment,
        root first), `lineage_session_ids`, `messages` (all segments' active messages
        concatenated) and `message_count` (their total). None for unknown ids. Read in
        one transaction, so the segments are consistent with each other."""
        with self.store.read() as s:
            conn = s.connection()
            segments: list[dict[str, Any]] = []
            for sid in compression_lineage(s, session_id):
                row = _session_row(conn, sid)
                if row is not None:
                    row["messages"] = _active_messages(conn, sid)
                    segments.append(row)
        if not segments:
            return None
        merged = dict(segments[-1])
        merged["segments"] = segments
        merged["lineage_session_ids"] = [seg["id"] for seg in segments]
        merged["messages"] = [m for seg in segments for m in seg["messages"]]
        merged["message_count"] = len(merged["messages"])
        return merged

    def export_all(self, source: str | None = None) -> Iterator[dict[str, Any]]:
        """Every session (newest start first), one export at a time.

        Keyset pages over (started_at, id); no read transaction stays open while the
        caller consumes a session, so a slow consumer never blocks a DELETE-mode writer."""
        after: tuple[float, str] | None = None
        while True:
            stmt = select(SessionRow.started_at, SessionRow.id)
            if source is not None:
                stmt = stmt.where(SessionRow.source == source)
            if after is not None:
                stmt = stmt.where(
                    or_(
                        SessionRow.started_at < after[0],
                        and_(SessionRow.started_at == after[0], SessionRow.id < after[1]),
                    )
                )
            stmt = stmt.order_by(SessionRow.started_at.desc(), SessionRow.id.desc()).limit(
                self.export_page
            )
            with self.store.read() as s:
                page = [(float(r[0]), str(r[1])) for r in s.execute(stmt).all()]
            if not page:
                return
            for _, sid in page:
                exported = self.export_session(sid)
                if exported is not None:  # deleted since the page was read
                    yield exported
            after = page[-1]

    @staticmethod
    def write_jsonl(fp: SupportsWriteStr, sessions: Iterable[Mapping[str, Any]]) -> int:
        """One JSON object per line; returns how many were written. Bytes content (a
        legacy oddity) is written as text, decoded as UTF-8 with replacement."""
        count = 0
        for session in sessions:
            fp.write(json.dumps(session, ensure_ascii=False, default=_json_default) + "\n")
            count += 1
        return count

    @staticmethod
    def read_jsonl(fp: Iterable[str]) -> Iterator[dict[str, Any]]:
        """The objects of a JSONL stream; blank lines are skipped, anything else that is
        not a JSON object raises ValueError naming the line."""
        for number, line in enumerate(fp, start=1):
            if not line.strip():
                continue
            try:
                value = json.loads(line)
            except ValueError as exc:
                raise ValueError(f"line {number}: invalid JSON ({exc})") from None
            if not isinstance(value, dict):
                raise ValueError(f"line {number}: expected a JSON object")
            yield value

    # ------------------------------------------------------------------ import

    def import_sessions(self, sessions: Any) -> dict[str, Any]:
        """Validate every entry, then import all of them in one transaction or nothing.

        Existing ids are skipped. A parent link survives only if the parent exists (in
        the database or the payload) and no cycle results; otherwise the child is
        detached. A title already in use raises the database's IntegrityError."""
        if not isinstance(sessions, list):
            raise ValueError("sessions must be a list")
        if len(sessions) > IMPORT_MAX_SESSIONS:
            raise ValueError(f"sessions must contain at most {IMPORT_MAX_SESSIONS} entries")

        errors: list[dict[str, Any]] = []
        seen: set[str] = set()
        totals = _ImportTotals()
        for index, entry in enumerate(sessions):
            problem = _entry_error(entry, seen, totals)
            if problem is not None:
                error: dict[str, Any] = {"index": index, "error": problem[0]}
                if problem[1] is not None:
                    error["session_id"] = problem[1]
                errors.append(error)
        if errors:
            return {"ok": False, "imported": 0, "skipped": 0, "detached": 0, "errors": errors}

        entries: list[dict[str, Any]] = sessions

        def work(s: Session) -> dict[str, Any]:
            conn = s.connection()
            ids = [e["id"] for e in entries]
            existing = _existing_ids(conn, ids)
            fresh = [e for e in entries if e["id"] not in existing]
            fresh_ids = {e["id"] for e in fresh}
            wanted = sorted(
                {p for e in fresh if (p := e.get("parent_session_id")) and p not in fresh_ids}
            )
            parents_in_db = _existing_ids(conn, wanted)

            links: dict[str, str] = {}
            declared = {e["id"]: p for e in fresh if (p := e.get("parent_session_id"))}
            detached = 0
            for e in fresh:
                parent = e.get("parent_session_id")
                if not parent:
                    continue
                if parent in parents_in_db or (
                    parent in fresh_ids and not _creates_cycle(e["id"], parent, declared)
                ):
                    links[e["id"]] = parent
                else:
                    detached += 1
                    del declared[e["id"]]

            ts = now()
            session_rows = []
            message_rows: list[dict[str, Any]] = []
            for e in fresh:
                encoded = encode_bulk(
                    e["id"], [_decoded_reasoning(m) for m in e.get("messages") or []]
                )
                session_rows.append(
                    _session_insert_row(e, ts, len(encoded.rows), encoded.tool_calls)
                )
                message_rows.extend(encoded.rows)
            if session_rows:
                conn.execute(insert(SessionRow), session_rows)
            if message_rows:
                conn.execute(insert(Message), message_rows)
            if links:
                conn.execute(
                    update(SessionRow)
                    .where(SessionRow.id == bindparam("child"))
                    .values(parent_session_id=bindparam("parent")),
                    [{"child": c, "parent": p} for c, p in links.items()],
                )
            return {
                "ok": True,
                "imported": len(fresh),
                "skipped": len(entries) - len(fresh),
                "detached": detached,
                "imported_ids": [e["id"] for e in fresh],
                "skipped_ids": [e["id"] for e in entries if e["id"] in existing],
                "errors": [],
            }

        return self.store.write(work)

    # ------------------------------------------------------------------ delete

    def delete_session(
        self,
        session_id: str,
        sessions_dir: str | Path | None = None,
        expected_delete_ids: Iterable[str] | None = None,
    ) -> bool:
        """Delete a session, its messages and its delegate runs; orphan other children.
        With `expected_delete_ids`, only if exactly that set would go (what a UI showed
        the user). False for unknown ids or a mismatch."""
        if not session_id or not isinstance(session_id, str):
            return False
        expected = None if expected_delete_ids is None else set(expected_delete_ids)

        def work(s: Session) -> set[str] | None:
            conn = s.connection()
            if not _existing_ids(conn, [session_id]):
                return None
            targets = _with_delegates(conn, [session_id])
            if expected is not None and targets != expected:
                return None
            _delete_ids(conn, sorted(targets))
            return targets

        deleted = self.store.write(work)
        if deleted is None:
            return False
        _remove_session_files(sessions_dir, sorted(deleted))
        return True

    def delete_session_if_empty(
        self, session_id: str, sessions_dir: str | Path | None = None
    ) -> bool:
        """Delete a session only if it is untitled (NULL or ''), has no message rows
        (inactive ones count) and no child sessions; decided and done in one write.
        Its files under `sessions_dir` are removed afterwards (spec section 9)."""
        if not session_id or not isinstance(session_id, str):
            return False
        child = aliased(SessionRow)
        stmt = delete(SessionRow).where(
            SessionRow.id == session_id,
            or_(SessionRow.title.is_(None), SessionRow.title == ""),
            ~select(Message.id).where(Message.session_id == session_id).exists(),
            ~select(child.id).where(child.parent_session_id == session_id).exists(),
        )
        deleted = self.store.write(lambda s: s.connection().execute(stmt).rowcount) > 0
        if deleted:
            _remove_session_files(sessions_dir, [session_id])
        return deleted

    def delete_sessions(
        self, session_ids: Iterable[Any], sessions_dir: str | Path | None = None
    ) -> int:
        """The bulk form of delete_session in one transaction; returns how many of the
        given ids were deleted (non-strings, empties and unknown ids are ignored)."""
        wanted = list(dict.fromkeys(i for i in session_ids if isinstance(i, str) and i))
        if not wanted:
            return 0

        def work(s: Session) -> tuple[int, set[str]]:
            conn = s.connection()
            found = _existing_ids(conn, wanted)
            if not found:
                return 0, set()
            targets = _with_delegates(conn, found)
            _delete_ids(conn, sorted(targets))
            return len(found), targets

        count, deleted = self.store.write(work)
        _remove_session_files(sessions_dir, sorted(deleted))
        return count

    def _delete_where(
        self, conditions: Sequence[ColumnElement[bool]], sessions_dir: str | Path | None
    ) -> int:
        """Delete every session matching `conditions`, chunk by chunk, each chunk in its
        own short write that re-evaluates the conditions (a session that was reopened or
        got new messages meanwhile is spared). Children are orphaned, not cascaded."""
        deleted: list[str] = []
        last_id: str | None = None

        def work(s: Session) -> list[str]:
            conn = s.connection()
            stmt = select(SessionRow.id).where(*conditions)
            if last_id is not None:  # keyset: never rescan rows an earlier chunk passed
                stmt = stmt.where(SessionRow.id > last_id)
            ids = list(conn.execute(stmt.order_by(SessionRow.id).limit(self.chunk_size)).scalars())
            if ids:
                _delete_ids(conn, ids)
            return ids

        while True:
            ids = self.store.write(work)
            if not ids:
                break
            deleted.extend(ids)
            last_id = ids[-1]
            if self.chunk_pause:
                time.sleep(self.chunk_pause)
        _remove_session_files(sessions_dir, deleted)
        return len(deleted)

    # ------------------------------------------------------------------ prune

    def _prune_conditions(
        self,
        caller: str,
        older_than_days: float | None,
        source: str | None,
        filters: Mapping[str, Any],
    ) -> list[ColumnElement[bool]]:
        unknown = sorted(set(filters) - PRUNE_FILTERS)
        if unknown:
            raise TypeError(f"{caller}() got an unexpected keyword argument '{unknown[0]}'")
        f = {k: v for k, v in filters.items() if v is not None}
        if (
            older_than_days is not None
            and "last_active_before" not in f
            and "started_before" not in f
        ):
            f["last_active_before"] = now() - float(older_than_days) * DAY

        activity = _activity()
        tokens = func.coalesce(SessionRow.input_tokens, 0) + func.coalesce(
            SessionRow.output_tokens, 0
        )
        cost = func.coalesce(SessionRow.actual_cost_usd, SessionRow.estimated_cost_usd, 0.0)
        messages = func.coalesce(SessionRow.message_count, 0)
        tool_calls = func.coalesce(SessionRow.tool_call_count, 0)

        conds: list[ColumnElement[bool]] = [SessionRow.ended_at.is_not(None)]
        if source is not None:
            conds.append(SessionRow.source == source)
        simple: dict[str, Any] = {
            "last_active_before": lambda v: activity < float(v),
            "last_active_after": lambda v: activity > float(v),
            "started_before": lambda v: SessionRow.started_at < float(v),
            "started_after": lambda v: SessionRow.started_at > float(v),
            "title_like": lambda v: SessionRow.title.icontains(str(v), autoescape=True),
            "model_like": lambda v: SessionRow.model.icontains(str(v), autoescape=True),
            "branch_like": lambda v: SessionRow.git_branch.icontains(str(v), autoescape=True),
            "end_reason": lambda v: SessionRow.end_reason == v,
            "cwd_prefix": _cwd_under,
            "min_messages": lambda v: messages >= int(v),
            "max_messages": lambda v: messages <= int(v),
            "archived": lambda v: SessionRow.archived == (1 if v else 0),
            "provider": lambda v: func.lower(SessionRow.billing_provider) == str(v).lower(),
            "user_id": lambda v: SessionRow.user_id == v,
            "chat_id": lambda v: SessionRow.chat_id == v,
            "chat_type": lambda v: SessionRow.chat_type == v,
            "min_tokens": lambda v: tokens >= int(v),
            "max_tokens": lambda v: tokens <= int(v),
            "min_cost": lambda v: cost >= float(v),
            "max_cost": lambda v: cost <= float(v),
            "min_tool_calls": lambda v: tool_calls >= int(v),
            "max_tool_calls": lambda v: tool_calls <= int(v),
        }
        for name, value in f.items():
            conds.append(simple[name](value))
        return conds

    def prune_sessions(
        self,
        older_than_days: float | None = 90,
        source: str | None = None,
        sessions_dir: str | Path | None = None,
        **filters: Any,
    ) -> int:
        """Delete ended sessions matching every filter (behaviour.md 9); open sessions are
        never pruned. Returns how many were deleted."""
        conds = self._prune_conditions("prune_sessions", older_than_days, source, filters)
        return self._delete_where(conds, sessions_dir)

    def list_prune_candidates(
        self, older_than_days: float | None = None, source: str | None = None, **filters: Any
    ) -> list[dict[str, Any]]:
        """What prune_sessions would delete, least recently active first."""
        conds = self._prune_conditions("list_prune_candidates", older_than_days, source, filters)
        activity = _activity().label("last_active")
        stmt = (
            select(
                SessionRow.id,
                SessionRow.source,
                SessionRow.title,
                SessionRow.model,
                SessionRow.started_at,
                activity,
                SessionRow.ended_at,
                SessionRow.message_count,
                SessionRow.archived,
            )
            .where(*conds)
            .order_by(activity, SessionRow.started_at, SessionRow.id)
        )
        with self.store.read() as s:
            return [dict(r) for r in s.execute(stmt).mappings()]

    def archive_sessions(
        self, older_than_days: float | None = None, source: str | None = None, **filters: Any
    ) -> int:
        """Archive what `prune_sessions` would select with the same filters, lineage-wide
        like `set_session_archived` (ancestors and descendants linked through compression
        parents, open tips included). `archived` defaults to False, so already archived
        sessions are not selected again. Returns the number of selected sessions (as the
        original, which archives each candidate in turn); one write transaction."""
        filters.setdefault("archived", False)
        conds = self._prune_conditions("archive_sessions", older_than_days, source, filters)

        def work(s: Session) -> int:
            conn = s.connection()
            ids = list(
                conn.execute(select(SessionRow.id).where(*conds).order_by(SessionRow.id)).scalars()
            )
            members: set[str] = set()
            for sid in ids:  # every one: lineages need not be closed under membership
                members.update(lineage_members(s, sid))
            stmt = (
                update(SessionRow)
                .where(SessionRow.id.in_(bindparam("ids", expanding=True)))
                .values(archived=1)
            )
            for chunk in _chunks(sorted(members)):
                conn.execute(stmt, {"ids": list(chunk)})
            return len(ids)

        return self.store.write(work)

    # ------------------------------------------------------------------ empty / stale

    @staticmethod
    def _empty_conditions() -> list[ColumnElement[bool]]:
        return [
            func.coalesce(SessionRow.message_count, 0) == 0,
            SessionRow.ended_at.is_not(None),
            SessionRow.archived == 0,
        ]

    def count_empty_sessions(self) -> int:
        """Ended, unarchived sessions whose message count is 0."""
        stmt = select(func.count()).select_from(SessionRow).where(*self._empty_conditions())
        with self.store.read() as s:
            return int(s.execute(stmt).scalar_one())

    def delete_empty_sessions(self, sessions_dir: str | Path | None = None) -> int:
        """Delete what count_empty_sessions counts; children are orphaned."""
        return self._delete_where(self._empty_conditions(), sessions_dir)

    def archive_stale_sessions(
        self, idle_days: float | None, *, exclude_pinned: bool = True
    ) -> int:
        """Archive unarchived sessions idle for more than `idle_days` (open ones too),
        except compression-ended segments (their live tip carries the lineage) and, by
        default, pinned sessions. None or a negative value archives nothing."""
        if idle_days is None or idle_days < 0:
            return 0
        cutoff = now() - float(idle_days) * DAY
        conds: list[ColumnElement[bool]] = [
            SessionRow.archived == 0,
            or_(SessionRow.end_reason.is_(None), SessionRow.end_reason != "compression"),
            _activity() < cutoff,
        ]
        if exclude_pinned:
            conds.append(SessionRow.pinned == 0)
        stmt = update(SessionRow).where(*conds).values(archived=1)
        return self.store.write(lambda s: s.connection().execute(stmt).rowcount)


def _cwd_under(prefix: Any) -> ColumnElement[bool]:
    """`cwd` is the prefix itself or lies below it, with either path separator. substr
    rather than LIKE: paths are case-sensitive and may contain `%` or `_`."""
    base = str(prefix).rstrip("/\\")
    head = func.substr(SessionRow.cwd, 1, len(base) + 1)
    return or_(SessionRow.cwd == base, head.in_([base + "/", base + "\\"]))


def _json_default(value: Any) -> Any:
    if isinstance(value, bytes | bytearray | memoryview):
        return bytes(value).decode("utf-8", "replace")
    raise TypeError(f"Object of type {type(value).__name__} is not JSON serializable")
