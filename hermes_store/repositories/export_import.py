"""Moving sessions between databases as JSON: exports (one session, a compression
lineage, every session page by page), JSON Lines streams, and the import: the rules an
entry must meet (one place for every caller, so both backends see the same refusals),
the all-or-nothing `import_sessions` payload check (docs/reference/behaviour.md section 8) and the
writes. Importing entry by entry is `importing.py`.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Iterator, Mapping
from functools import lru_cache
from typing import Any, Protocol, TypeGuard

from sqlalchemy import (
    Connection,
    and_,
    bindparam,
    column,
    insert,
    or_,
    select,
    update,
)

from ..errors import InvalidInput
from ..redaction import RedactionPolicy
from ..runtime.engine import Prepared
from ._dialect import data_dicts, message_columns
from ._sql import all_columns, chunks
from ._tables import MESSAGES, SESSIONS, M, S
from ._tag_names import check_tags
from .deletion import existing_ids
from .encoding import (
    TIME_MAX,
    TIME_MIN,
    decode_fields,
    encode_bulk,
    flag,
    now,
    scrub,
    time_in_range,
)
from .lineage import compression_lineage
from .tags import add_tags, has_tags_table, tags_of

IMPORT_MAX_SESSIONS = 500
IMPORT_MAX_MESSAGES_PER_SESSION = 10_000
IMPORT_MAX_MESSAGES_TOTAL = 50_000
IMPORT_MAX_SESSION_BYTES = 5 * 1024 * 1024
IMPORT_MAX_TOTAL_BYTES = 25 * 1024 * 1024
#: Nesting levels an entry may use (the entry object is level 1), and so may each JSON
#: text field on its own. Python's JSON parser and encoder recurse once per level and
#: stop near 1,000 levels, less the caller's own stack: beyond this margin an entry could
#: be stored and then fail every later read or export.
IMPORT_MAX_DEPTH = 200
#: The integer columns are 64-bit on both backends (INTEGER on SQLite, BIGINT on
#: PostgreSQL); anything outside fails there with a driver error that names no field.
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
DUPLICATE_ID = "duplicate session id"

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
#: Message fields whose JSON text the import parses (the encoders parse tool calls and
#: display metadata, `_prepared_message` the reasoning fields).
_MESSAGE_JSON_TEXT_FIELDS = ("tool_calls", *_REASONING_JSON_FIELDS, "display_metadata")


class SupportsWriteStr(Protocol):
    def write(self, s: str, /) -> object: ...


def _is_number(value: object) -> TypeGuard[int | float]:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _is_int(value: object) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)


def _int_error(where: str, value: object) -> str | None:
    if not _is_int(value):
        return f"{where} must be an integer"
    if not INT64_MIN <= value <= INT64_MAX:
        return f"{where} must fit in a 64-bit integer"
    return None


def _real_error(where: str, value: object) -> str | None:
    """NaN and the infinities are refused. SQLite stores NaN as NULL (and fails a NOT NULL
    column) where PostgreSQL keeps it, so the backends would disagree; neither is a time
    or a cost, and an export would write them as JSON that strict parsers reject."""
    if not _is_number(value):
        return f"{where} must be a number"
    try:
        finite = math.isfinite(value)  # an int beyond a float's range raises here
    except OverflowError:
        finite = False
    return None if finite else f"{where} must be a finite number"


#: The entry fields that are times (epoch seconds), and so must lie in TIME_MIN..TIME_MAX.
_SESSION_TIME_FIELDS = ("started_at", "ended_at")


def _time_error(where: str, value: object) -> str | None:
    """A finite number outside the times every layer computes with is refused as well:
    stored, one such session would fail PostgreSQL's `stats` for the whole database."""
    error = _real_error(where, value)
    if error is None and not time_in_range(float(value)):  # type: ignore[arg-type]
        return (
            f"{where} must be a time from {TIME_MIN:.0f} to {TIME_MAX:.0f} epoch seconds "
            "(0001-01-01 to 9999-12-31 UTC)"
        )
    return error


def _unicode_error(where: str, value: str) -> str | None:
    """Ids are keys, so a lone surrogate cannot be replaced as text fields' are: the
    driver could neither store nor look it up."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return f"{where} must be valid Unicode text (it holds a lone surrogate)"
    return None


def too_deep(where: str) -> str:
    return f"{where} nests deeper than {IMPORT_MAX_DEPTH} levels"


_CONTAINERS = (dict, list, tuple)


def nests_too_deep(value: object) -> bool:
    """Whether `value` (its own level 1) nests lists and dicts deeper than
    IMPORT_MAX_DEPTH. Walked without recursion, so any depth is measured safely."""
    if not isinstance(value, _CONTAINERS):
        return False
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        node, depth = stack.pop()
        if depth > IMPORT_MAX_DEPTH:
            return True
        for child in node.values() if isinstance(node, dict) else node:
            if isinstance(child, _CONTAINERS):
                stack.append((child, depth + 1))
    return False


def _json_text_error(where: str, text: str) -> str | None:
    """A JSON text field the import will parse: too deep to parse, or parsed too deep.
    Text that is not JSON is left to the field's own rule."""
    try:
        parsed = json.loads(text)
    except RecursionError:
        return too_deep(where)
    except ValueError:
        return None
    return too_deep(where) if nests_too_deep(parsed) else None


# --------------------------------------------------------------------------- export


_SESSION_ROW = Prepared(all_columns(SESSIONS).where(S.id == bindparam("session_id")))


@lru_cache(maxsize=8)
def _active_messages(columns: tuple[str, ...] | None) -> Prepared:
    """A session's active messages in id order (`columns`; None: `SELECT *`), walked on
    the index (session_id, id)."""
    query = (
        all_columns(MESSAGES)
        if columns is None
        else select(*[column(name) for name in columns]).select_from(MESSAGES)
    )
    return Prepared(
        query.where(M.session_id == bindparam("session_id"), M.active == 1).order_by(M.id)
    )


def export_session(conn: Connection, session_id: str) -> dict[str, Any] | None:
    """The full session row plus its active messages, decoded; None if unknown. Both
    reads are prepared statements run at the driver (a session of a thousand messages
    would otherwise pay SQLAlchemy's row objects and mappings a thousand times)."""
    params = {"session_id": session_id}
    found = data_dicts(_SESSION_ROW.dicts(conn, params))
    if not found:
        return None
    out = found[0]
    active = _active_messages(message_columns(conn)).dicts(conn, params)
    out["messages"] = [decode_fields(row) for row in data_dicts(active)]
    # hermes-store's own tags, only when there are any: an export of an untagged session
    # keeps the original's shape (and a database never upgraded has no tags table)
    if has_tags_table(conn):
        tags = tags_of(conn, session_id)
        if tags:
            out["tags"] = tags
    return out


def export_lineage(conn: Connection, session_id: str) -> dict[str, Any] | None:
    """A compression lineage as one logical session: the last segment's fields, plus
    `segments` (one `export_session` dict per segment, root first),
    `lineage_session_ids`, `messages` (all segments' active messages concatenated) and
    `message_count` (their total). None for unknown ids."""
    segments = [
        found
        for sid in compression_lineage(conn, session_id)
        if (found := export_session(conn, sid)) is not None
    ]
    if not segments:
        return None
    merged = dict(segments[-1])
    merged["segments"] = segments
    merged["lineage_session_ids"] = [seg["id"] for seg in segments]
    merged["messages"] = [m for seg in segments for m in seg["messages"]]
    merged["message_count"] = len(merged["messages"])
    return merged


def export_page(
    conn: Connection, source: str | None, after: tuple[float, str] | None, limit: int
) -> list[tuple[float, str]]:
    """(started_at, id) of the next `limit` sessions after `after`, newest start first: a
    keyset page, so each page is its own short read."""
    stmt = select(S.started_at, S.id)
    if source is not None:
        stmt = stmt.where(S.source == source)
    if after is not None:
        stmt = stmt.where(
            or_(S.started_at < after[0], and_(S.started_at == after[0], S.id < after[1]))
        )
    stmt = stmt.order_by(S.started_at.desc(), S.id.desc()).limit(limit)
    return [(float(r[0]), str(r[1])) for r in conn.execute(stmt).all()]


def write_jsonl(fp: SupportsWriteStr, sessions: Iterable[Mapping[str, Any]]) -> int:
    """One JSON object per line; returns how many were written. Bytes content (a legacy
    oddity) is written as text, decoded as UTF-8 with replacement."""
    count = 0
    for session in sessions:
        fp.write(json.dumps(session, ensure_ascii=False, default=_json_default) + "\n")
        count += 1
    return count


def read_jsonl(fp: Iterable[str]) -> Iterator[dict[str, Any]]:
    """The objects of a JSONL stream; blank lines are skipped, anything else that is not
    a JSON object raises ValueError naming the line."""
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


def _json_default(value: Any) -> Any:
    if isinstance(value, bytes | bytearray | memoryview):
        return bytes(value).decode("utf-8", "replace")
    raise TypeError(f"Object of type {type(value).__name__} is not JSON serializable")


# --------------------------------------------------------------------------- import


def _prepared_message(message: Mapping[str, Any]) -> dict[str, Any]:
    """A message as the bulk routine should see it. Reasoning columns arrive decoded or as
    the JSON text an export holds; text is parsed first so it is not encoded a second
    time (unparsable text is kept as the string it is). Numeric platform ids become their
    decimal text, which is what a text column holds for them anyway: bound as integers,
    one beyond 64 bits would fail on SQLite only."""
    out = dict(message)
    for field in _REASONING_JSON_FIELDS:
        value = out.get(field)
        if isinstance(value, str):
            try:
                out[field] = json.loads(value) if value.strip() else None
            except ValueError:
                pass
    for field in _MESSAGE_ID_FIELDS:
        value = out.get(field)
        if _is_int(value):
            out[field] = str(value)
    return out


def _model_config_error(value: Any) -> str | None:
    if value is None or value == "":
        return None
    if isinstance(value, str):
        try:
            parsed = json.loads(value)
        except RecursionError:
            return too_deep("model_config")
        except ValueError:
            return "model_config must be valid JSON"
        if not isinstance(parsed, dict):
            return "model_config must be a JSON object"
        return too_deep("model_config") if nests_too_deep(parsed) else None
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
    if token_count is not None and (error := _int_error(f"{where}.token_count", token_count)):
        return error
    timestamp = msg.get("timestamp")
    if timestamp is not None and (error := _time_error(f"{where}.timestamp", timestamp)):
        return error
    for field in _MESSAGE_JSON_TEXT_FIELDS:
        value = msg.get(field)
        if isinstance(value, str) and (error := _json_text_error(f"{where}.{field}", value)):
            return error
    return None


class _ImportTotals:
    def __init__(self) -> None:
        self.bytes = 0
        self.messages = 0


def entry_weight(entry: Any) -> tuple[int, int]:
    """(bytes of compact UTF-8 JSON, messages) of an entry, as the import limits count
    them. TypeError or ValueError for an entry that is not JSON serializable."""
    size = len(
        json.dumps(entry, ensure_ascii=False, separators=(",", ":")).encode(
            "utf-8", "surrogatepass"
        )
    )
    messages = entry.get("messages") if isinstance(entry, dict) else None
    return size, len(messages) if isinstance(messages, list) else 0


def entry_problem(entry: Any, seen: set[str]) -> tuple[str, str | None] | None:
    """(reason, session id if usable) for the first rule one entry breaks, else None: the
    rules of `import_sessions` that concern a single entry, but its size limits (messages
    and bytes of one session): the entry-by-entry import brings back whatever the store
    holds, and a session the store accepted may be larger (it is written on its own).
    `seen` collects the ids met so far, so a second entry with the same id is refused."""
    return _entry_error(entry, seen, None, sized=False)


def _entry_error(
    entry: Any, seen: set[str], totals: _ImportTotals | None, sized: bool = True
) -> tuple[str, str | None] | None:
    """(error, session id if known) for the first problem of one entry, else None; with
    `totals`, the limits of one import call as well; without `sized`, no limit on the
    messages and bytes of the one entry."""
    if not isinstance(entry, dict):
        return "session must be an object", None
    sid = entry.get("id")
    if not isinstance(sid, str) or not sid.strip():
        return "session id is required", None
    if error := _unicode_error("session id", sid):
        return error, None  # an id that cannot be encoded cannot be shown either
    if sid in seen:
        return DUPLICATE_ID, sid
    seen.add(sid)
    messages = entry.get("messages", [])
    if messages is None:
        messages = []
    if not isinstance(messages, list):
        return "messages must be a list", sid
    if sized and len(messages) > IMPORT_MAX_MESSAGES_PER_SESSION:
        return "messages exceeds the per-session import limit", sid
    if not all(isinstance(m, dict) for m in messages):
        return "messages must contain only objects", sid
    # Before anything that encodes the entry, which would recurse once per level.
    if nests_too_deep(entry):
        return too_deep("session"), sid
    # Before the whole-entry check, so a bad model_config gets its own message.
    config_error = _model_config_error(entry.get("model_config"))
    if config_error:
        return config_error, sid
    try:
        size, count = entry_weight(entry)
    except (TypeError, ValueError):
        return "session must be JSON serializable", sid
    if sized and size > IMPORT_MAX_SESSION_BYTES:
        return "session exceeds the import size limit", sid
    if totals is not None:
        totals.bytes += size
        if totals.bytes > IMPORT_MAX_TOTAL_BYTES:
            return "import exceeds the total size limit", sid
        totals.messages += count
        if totals.messages > IMPORT_MAX_MESSAGES_TOTAL:
            return "messages exceeds the total import limit", sid
    for field in _SESSION_TEXT_FIELDS:
        value = entry.get(field)
        if value is not None and not isinstance(value, str):
            return f"{field} must be a string", sid
    parent = entry.get("parent_session_id")
    if isinstance(parent, str) and (error := _unicode_error("parent_session_id", parent)):
        return error, sid
    for field in _SESSION_INT_FIELDS:
        value = entry.get(field)
        if value is not None and (error := _int_error(field, value)):
            return error, sid
    for field in _SESSION_REAL_FIELDS:
        value = entry.get(field)
        check = _time_error if field in _SESSION_TIME_FIELDS else _real_error
        if value is not None and (error := check(field, value)):
            return error, sid
    for index, msg in enumerate(messages):
        error = _message_error(index, msg)
        if error:
            return error, sid
    tags = entry.get("tags")
    if tags is not None:
        try:
            check_tags(tags)
        except InvalidInput as exc:
            return f"tags: {exc}", sid
    return None


def stored_title(entry: Mapping[str, Any]) -> str | None:
    """The title an entry would be stored with (NULL for none or an empty one)."""
    title = entry.get("title")
    return (scrub(title) or None) if isinstance(title, str) else None


def titles_in_use(conn: Connection, titles: Iterable[str]) -> dict[str, str]:
    """title -> the id of the session holding it, for those of `titles` in use."""
    stmt = select(S.title, S.id).where(S.title.in_(bindparam("titles", expanding=True)))
    held: dict[str, str] = {}
    for chunk in chunks(sorted(set(titles))):
        held.update((str(t), str(i)) for t, i in conn.execute(stmt, {"titles": chunk}).all())
    return held


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
        "title": stored_title(entry),
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


def import_errors(sessions: Any) -> list[dict[str, Any]]:
    """Every problem of an import payload, one `{index, error[, session_id]}` per bad
    entry; ValueError when `sessions` is not a list or has too many entries."""
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
    return errors


def _parent_links(
    fresh: list[dict[str, Any]], parents_in_db: set[str]
) -> tuple[dict[str, str], int]:
    """(child -> parent links that survive, how many children were detached)."""
    fresh_ids = {e["id"] for e in fresh}
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
    return links, detached


def import_entries(
    conn: Connection, entries: list[dict[str, Any]], redaction: RedactionPolicy | None = None
) -> dict[str, Any]:
    """Import validated entries (see `import_errors`) in the caller's transaction:
    existing ids are skipped, parents linked once every row exists; messages are redacted
    by `redaction` (the store's policy) before they are written."""
    existing = existing_ids(conn, [e["id"] for e in entries])
    fresh = [e for e in entries if e["id"] not in existing]
    fresh_ids = {e["id"] for e in fresh}
    wanted = sorted({p for e in fresh if (p := e.get("parent_session_id")) and p not in fresh_ids})
    links, detached = _parent_links(fresh, existing_ids(conn, wanted))

    ts = now()
    session_rows = []
    message_rows: list[dict[str, Any]] = []
    for e in fresh:
        prepared = [_prepared_message(m) for m in e.get("messages") or []]
        encoded = encode_bulk(e["id"], prepared, redaction)
        session_rows.append(_session_insert_row(e, ts, len(encoded.rows), encoded.tool_calls))
        message_rows.extend(encoded.rows)
    if session_rows:
        conn.execute(insert(SESSIONS), session_rows)
    if message_rows:
        conn.execute(insert(MESSAGES), message_rows)
    if links:
        conn.execute(
            update(SESSIONS)
            .where(S.id == bindparam("child"))
            .values(parent_session_id=bindparam("parent")),
            [{"child": c, "parent": p} for c, p in links.items()],
        )
    for e in fresh:
        if e.get("tags"):
            add_tags(conn, e["id"], check_tags(e["tags"]))
    return {
        "ok": True,
        "imported": len(fresh),
        "skipped": len(entries) - len(fresh),
        "detached": detached,
        "imported_ids": [e["id"] for e in fresh],
        "skipped_ids": [e["id"] for e in entries if e["id"] in existing],
        "errors": [],
    }
