"""Sessions: creation and lifecycle, per-session settings, lineage walks, listing and
counting (spec/behaviour.md sections 2, 4.2, 5.3 and 7; lineage classes in spec/schema.md
section 8).

Rows come back as plain dicts of the full `sessions` row (`SELECT *`), so columns this
code does not know (added by a newer Hermes or a fork) come back too. Missing sessions
give None, False, [] or 0 rather than an exception, as the original does.

Lineage walks are bounded (100 hops; 32 for the resume walk) and remember what they have
visited, because `parent_session_id` is written by many processes and a cycle in it must
not hang a listing.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any, cast

from sqlalchemy import (
    TEXT,
    ColumnElement,
    CursorResult,
    Select,
    Table,
    and_,
    case,
    exists,
    func,
    literal,
    literal_column,
    or_,
    select,
    text,
    update,
)
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.orm import Session as OrmSession
from sqlalchemy.sql.selectable import NamedFromClause

from ..models import Message
from ..models import Session as SessionModel
from ..store import Store
from ._dialect import json_member, last_chars, position_of
from ._encoding import decode_content, flag, now, scrub

log = logging.getLogger(__name__)

SESSIONS = cast(Table, SessionModel.__table__)
MESSAGES = cast(Table, Message.__table__)
S = SESSIONS.c
M = MESSAGES.c

Row = dict[str, Any]

COMPRESSION = "compression"
BRANCHED = "branched"
BRANCH_MARKER = "_branched_from"
DELEGATE_MARKER = "_delegate_from"
BROWSER_LOCK_KEY = "browser_model_lock"
#: End reasons an automatic close leaves behind; a session reset may overwrite them.
RECOVERABLE_END_REASONS = ("agent_close", "ws_orphan_reap")

MAX_LINEAGE_HOPS = 100
MAX_RESUME_HOPS = 32
#: prune_empty_ghost_sessions / finalize_orphaned_compression_sessions age thresholds.
GHOST_AGE = 24 * 3600.0
ORPHANED_COMPRESSION_AGE = 7 * 86400.0
ORPHANED_COMPRESSION = "orphaned_compression"
#: Ids per IN-list, well under SQLite's historical limit of 999 bound variables.
IN_CHUNK = 500

CREATE_KWARGS = frozenset(
    {
        "model",
        "model_config",
        "system_prompt",
        "user_id",
        "session_key",
        "chat_id",
        "chat_type",
        "thread_id",
        "parent_session_id",
        "cwd",
        "profile_name",
        "git_repo_root",
    }
)
INHERITED_FROM_PARENT = ("cwd", "git_repo_root", "git_branch", "profile_name")
INHERITED_ACROSS_COMPRESSION = (
    "user_id",
    "session_key",
    "chat_id",
    "chat_type",
    "thread_id",
    "display_name",
    "origin_json",
)
#: Fields a listed compression root takes from its live tip; the rest stay the root's.
PROJECTED_FIELDS = (
    "id",
    "ended_at",
    "end_reason",
    "message_count",
    "tool_call_count",
    "title",
    "last_active",
    "preview",
    "model",
    "system_prompt",
    "cwd",
    "git_branch",
    "git_repo_root",
)

PREVIEW_HEAD_CHARS = 63
PREVIEW_MAX_CHARS = 60
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

#: Separators `search_query` ignores in its second pass, so `an94` finds `AN-94`. Kept
#: short: each one is a nested replace() in SQL, and SQLite's parser depth is limited.
SEARCH_PUNCTUATION = " -_./:#'"

#: Columns `compact_rows` returns: every declared column but the prompt snapshot.
COMPACT_COLUMNS = tuple(name for name in SESSIONS.c.keys() if name != "system_prompt")


# --------------------------------------------------------------------------- SQL pieces


def _rowcount(result: Any) -> int:
    return int(cast(CursorResult[Any], result).rowcount)


def _chunks(values: Sequence[str]) -> Iterator[list[str]]:
    for start in range(0, len(values), IN_CHUNK):
        yield list(values[start : start + IN_CHUNK])


@cache
def _alias(table: Table, name: str) -> NamedFromClause:
    """One shared alias per name. Building an alias proxies every column of its table
    (about fifty for sessions), which cost a listing more than running its SQL; aliases
    are immutable, so statements can share them. Give a name only to one use per scope:
    a subquery auto-correlates an alias that its enclosing query also selects from."""
    return table.alias(name)


def _marker(config: ColumnElement[Any], key: str) -> ColumnElement[Any]:
    """A lineage marker from `model_config`, NULL when absent or malformed."""
    return json_member(config, literal(key, TEXT()))


def _is_branch_child(a: NamedFromClause) -> ColumnElement[bool]:
    """schema.md section 8: the `/branch` marker, or the legacy heuristic (the parent
    ended `branched` and the child started after it)."""
    parent = _alias(SESSIONS, "branch_parent")
    return or_(
        _marker(a.c.model_config, BRANCH_MARKER).is_not(None),
        exists().where(
            parent.c.id == a.c.parent_session_id,
            parent.c.end_reason == BRANCHED,
            a.c.started_at >= parent.c.ended_at,
        ),
    )


@cache
def _is_listable(a: NamedFromClause) -> ColumnElement[bool]:
    return and_(
        or_(a.c.parent_session_id.is_(None), _is_branch_child(a)),
        _marker(a.c.model_config, DELEGATE_MARKER).is_(None),
    )


def _is_continuation(a: NamedFromClause) -> ColumnElement[bool]:
    """A child that can carry a conversation on: not a branch, delegate or tool run."""
    return and_(
        _marker(a.c.model_config, BRANCH_MARKER).is_(None),
        _marker(a.c.model_config, DELEGATE_MARKER).is_(None),
        func.coalesce(a.c.source, "") != "tool",
    )


def _newest_message_ts(session_id: ColumnElement[Any]) -> ColumnElement[Any]:
    m = _alias(MESSAGES, "newest_m")
    return select(func.max(m.c.timestamp)).where(m.c.session_id == session_id).scalar_subquery()


def _last_active(a: NamedFromClause) -> ColumnElement[Any]:
    return func.coalesce(_newest_message_ts(a.c.id), a.c.started_at)


def _preview_raw(a: NamedFromClause) -> ColumnElement[Any]:
    """The first user message (by timestamp, then id), cut in SQL so a huge message is
    never read whole; CR/LF become spaces. Structured content starts with NUL, which
    SQLite's string functions treat as the end of the text, so it previews as ''."""
    m = _alias(MESSAGES, "preview_m")
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
        else_=func.substr(flat, 1, PREVIEW_HEAD_CHARS, type_=TEXT()),
    )
    first = (
        select(excerpt)
        .where(m.c.session_id == a.c.id, m.c.role == "user", m.c.content.is_not(None))
        .order_by(m.c.timestamp, m.c.id)
        .limit(1)
        .scalar_subquery()
    )
    return func.coalesce(first, "")


def _typed_instruction(text_: str) -> str:
    if BUNDLE_MARKER in text_:
        marker, stop, at = BUNDLE_INSTRUCTION_MARKER, BUNDLE_FIRST_SKILL_MARKER, text_.find
    elif SINGLE_SKILL_MARKER in text_:
        marker, stop, at = SKILL_INSTRUCTION_MARKER, RUNTIME_NOTE_MARKER, text_.rfind
    else:
        return ""
    start = at(marker)
    if start < 0:
        return ""
    rest = text_[start + len(marker) :]
    end = rest.find(stop)
    return (rest if end < 0 else rest[:end]).strip()


def describe_skill_invocation(text_: str, separator: str = " — ") -> str | None:
    """A `/skill` turn as the user typed it, the original's rule: `/work — fix the title
    leak`, `/work` when nothing was typed after it, the bare instruction when the header
    names no skill; None for a turn that is not a skill invocation (or says nothing)."""
    if not text_.startswith(SKILL_INVOCATION_PREFIX):
        return None
    match = _SKILL_NAME.match(text_)
    name = match.group(1).strip() if match else ""
    label = name if name.startswith("/") else f"/{name}"
    # an excerpt's joint can fall inside the instruction: keep the side the marker is on
    instruction = " ".join(_typed_instruction(text_).split(EXCERPT_JOINT)[0].split())
    if instruction:
        return f"{label}{separator}{instruction}" if name else instruction
    return label if name else None


def _shape_preview(raw: Any) -> str:
    if isinstance(raw, bytes):
        raw = raw.decode("utf-8", "replace")
    text_ = "" if raw is None else str(raw)
    if text_.startswith("\x00"):  # structured content, should a driver keep the NUL
        return ""
    text_ = text_.strip()
    described = describe_skill_invocation(text_)
    text_ = described if described is not None else text_.split(EXCERPT_JOINT)[0]
    if len(text_) > PREVIEW_MAX_CHARS:
        return text_[:PREVIEW_MAX_CHARS] + "..."
    return text_


@cache
def _rich_select(a: NamedFromClause, compact: bool) -> Select[Any]:
    """A listing row: the full row (or the compact columns), preview and last_active.
    Built once per alias: callers add their own WHERE/ORDER BY to the immutable Select."""
    columns: list[Any] = (
        [a.c[name] for name in COMPACT_COLUMNS] if compact else [literal_column(f"{a.name}.*")]
    )
    return select(
        *columns,
        _preview_raw(a).label("_preview_raw"),
        _last_active(a).label("last_active"),
    ).select_from(a)


def _rich_rows(session: OrmSession, query: Select[Any]) -> list[Row]:
    rows = []
    for mapping in session.execute(query).mappings():
        row = dict(mapping)
        row["preview"] = _shape_preview(row.pop("_preview_raw", ""))
        rows.append(row)
    return rows


def _full_row(session: OrmSession, session_id: str) -> Row | None:
    found = (
        session.execute(select(literal_column("*")).select_from(SESSIONS).where(S.id == session_id))
        .mappings()
        .first()
    )
    return dict(found) if found is not None else None


def _strip_punctuation(expr: ColumnElement[Any]) -> ColumnElement[Any]:
    for char in SEARCH_PUNCTUATION:
        expr = func.replace(expr, char, "", type_=TEXT())
    return expr


def _contains(haystack: ColumnElement[Any], needle: str) -> ColumnElement[bool]:
    """Case-insensitive substring test without LIKE, so `%` and `_` in the needle are
    literal. Both sides go through SQL lower() so they fold the same way."""
    return position_of(func.lower(haystack), func.lower(literal(needle, TEXT()))) > 0


def _cwd_under(column: ColumnElement[Any], prefix: str) -> ColumnElement[bool]:
    """`column` equals `prefix` or lies below it, with `/` or `\\` as the separator.
    A prefix comparison instead of LIKE: paths are case-sensitive and may hold `%`/`_`."""
    base = prefix.rstrip("/\\")
    head = func.substr(column, 1, len(base) + 1)
    return or_(column == base, head.in_([base + "/", base + "\\"]))


def _has_marker(model_config: Any, key: str) -> bool:
    if not isinstance(model_config, str):
        return False
    try:
        parsed = json.loads(model_config)
    except ValueError:
        return False
    return isinstance(parsed, dict) and parsed.get(key) is not None


def _json_object(model_config: Any) -> dict[str, Any] | None:
    if not isinstance(model_config, str):
        return None
    try:
        parsed = json.loads(model_config)
    except ValueError:
        return None
    return parsed if isinstance(parsed, dict) else None


def _text(value: Any) -> Any:
    return scrub(value) if isinstance(value, str) else value


# --------------------------------------------------------------------------- filters


@dataclass(frozen=True)
class _Filters:
    source: str | None = None
    sources: Sequence[str] | None = None
    exclude_sources: Sequence[str] | None = None
    cwd_prefix: str | None = None
    min_message_count: int = 0
    include_archived: bool = False
    archived_only: bool = False
    listable_only: bool = True

    def conditions(self, a: NamedFromClause) -> list[ColumnElement[bool]]:
        conds: list[ColumnElement[bool]] = []
        if self.listable_only:
            conds.append(_is_listable(a))
        wanted = ([self.source] if self.source else []) + list(self.sources or [])
        if wanted:
            conds.append(a.c.source.in_(wanted))
        if self.exclude_sources:
            conds.append(a.c.source.not_in(list(self.exclude_sources)))
        if self.cwd_prefix:
            conds.append(_cwd_under(a.c.cwd, self.cwd_prefix))
        if self.min_message_count and self.min_message_count > 0:
            conds.append(a.c.message_count >= self.min_message_count)
        if self.archived_only:
            conds.append(a.c.archived != 0)
        elif not self.include_archived:
            conds.append(a.c.archived == 0)
        return conds


# --------------------------------------------------------------------------- lineage


def _end_reason(session: OrmSession, session_id: str) -> str | None:
    return session.execute(select(S.end_reason).where(S.id == session_id)).scalar_one_or_none()


def _exists(session: OrmSession, session_id: str) -> bool:
    return session.execute(select(S.id).where(S.id == session_id)).first() is not None


def _has_messages(session: OrmSession, session_id: str) -> bool:
    return (
        session.execute(select(M.id).where(M.session_id == session_id).limit(1)).first() is not None
    )


def compression_tip(session: OrmSession, session_id: str) -> str:
    """The live end of a compression chain (behaviour.md 5.3); the input when there is
    no continuation, also for unknown ids."""
    current = session_id
    seen = {session_id}
    for _ in range(MAX_LINEAGE_HOPS):
        if _end_reason(session, current) != COMPRESSION:
            break
        child = SESSIONS.alias("c")
        # Prefer a child that was itself compressed (the chain goes on), then a live one.
        rank = case(
            (child.c.end_reason == COMPRESSION, 0), (child.c.ended_at.is_(None), 1), else_=2
        )
        nxt = session.execute(
            select(child.c.id)
            .where(
                child.c.parent_session_id == current,
                _is_continuation(child),
                child.c.id.not_in(list(seen)),
            )
            .order_by(
                rank,
                _last_active(child).desc(),
                child.c.started_at.desc(),
                child.c.id.desc(),
            )
            .limit(1)
        ).scalar_one_or_none()
        if nxt is None:
            break
        seen.add(nxt)
        current = nxt
    return current


def compression_ancestors(session: OrmSession, session_id: str) -> list[str]:
    """Ancestors reached through parents ended by compression, nearest first. A branch
    child starts a conversation of its own, so the walk stops there."""
    chain: list[str] = []
    seen = {session_id}
    current = session_id
    for _ in range(MAX_LINEAGE_HOPS):
        row = session.execute(
            select(S.parent_session_id, S.model_config).where(S.id == current)
        ).first()
        if row is None or not row.parent_session_id or row.parent_session_id in seen:
            break
        if _has_marker(row.model_config, BRANCH_MARKER):
            break
        if _end_reason(session, row.parent_session_id) != COMPRESSION:
            break
        current = row.parent_session_id
        seen.add(current)
        chain.append(current)
    return chain


def compression_lineage(session: OrmSession, session_id: str) -> list[str]:
    if not _exists(session, session_id):
        return []
    ancestors = compression_ancestors(session, session_id)
    root = ancestors[-1] if ancestors else session_id
    chain = [root]
    current = root
    for _ in range(MAX_LINEAGE_HOPS):
        if _end_reason(session, current) != COMPRESSION:
            break
        child = SESSIONS.alias("c")
        nxt = session.execute(
            select(child.c.id)
            .where(
                child.c.parent_session_id == current,
                _marker(child.c.model_config, BRANCH_MARKER).is_(None),
                child.c.id.not_in(chain),
            )
            .order_by(child.c.started_at, child.c.id)
            .limit(1)
        ).scalar_one_or_none()
        if nxt is None:
            break
        chain.append(nxt)
        current = nxt
    return chain if session_id in chain else [session_id]


def ancestor_ids(session: OrmSession, session_id: str) -> list[str]:
    """Every ancestor through `parent_session_id`, nearest first."""
    chain: list[str] = []
    seen = {session_id}
    current = session_id
    for _ in range(MAX_LINEAGE_HOPS):
        parent = session.execute(
            select(S.parent_session_id).where(S.id == current)
        ).scalar_one_or_none()
        if not parent or parent in seen:
            break
        seen.add(parent)
        chain.append(parent)
        current = parent
    return chain


def descendant_ids(session: OrmSession, session_id: str) -> list[str]:
    """Every descendant through `parent_session_id`, level by level (at most 100)."""
    found: list[str] = []
    seen = {session_id}
    frontier = [session_id]
    for _ in range(MAX_LINEAGE_HOPS):
        level: list[str] = []
        for chunk in _chunks(frontier):
            rows = session.execute(
                select(S.id).where(S.parent_session_id.in_(chunk)).order_by(S.started_at, S.id)
            ).scalars()
            for child_id in rows:
                if child_id not in seen:
                    seen.add(child_id)
                    level.append(child_id)
        if not level:
            break
        found.extend(level)
        frontier = level
    return found


def delegate_descendants(session: OrmSession, session_id: str) -> set[str]:
    """Rows whose `_delegate_from` names a collected id, or delegate-marked children of
    one, walked to a fixed point (behaviour.md section 9)."""
    collected = {session_id}
    frontier = [session_id]
    a = SESSIONS.alias("d")
    delegate_of = _marker(a.c.model_config, DELEGATE_MARKER)
    while frontier:
        new: set[str] = set()
        for chunk in _chunks(frontier):
            rows = session.execute(
                select(a.c.id).where(
                    or_(
                        delegate_of.in_(chunk),
                        and_(a.c.parent_session_id.in_(chunk), delegate_of.is_not(None)),
                    )
                )
            ).scalars()
            new.update(r for r in rows if r not in collected)
        collected |= new
        frontier = sorted(new)
    collected.discard(session_id)
    return collected


# The CTE sits inside the IN (...) so the statement starts with UPDATE: Python's sqlite3
# only reports a rowcount for statements it recognises as DML by their first keyword.
# UNION (not UNION ALL) makes both walks stop at a cycle.
_LINEAGE_MEMBERS = """
  WITH RECURSIVE
    up(id) AS (
      SELECT :sid
      UNION
      SELECT p.id FROM up
        JOIN sessions c ON c.id = up.id
        JOIN sessions p ON p.id = c.parent_session_id
      WHERE p.end_reason = 'compression'
    ),
    down(id) AS (
      SELECT :sid
      UNION
      SELECT c.id FROM down
        JOIN sessions p ON p.id = down.id
        JOIN sessions c ON c.parent_session_id = p.id
      WHERE p.end_reason = 'compression'
    )
  SELECT id FROM up UNION SELECT id FROM down
"""
# Both statements are assembled from this module's constants only (no input).
_LINEAGE = (
    "UPDATE sessions SET {column} = :value WHERE id IN ("  # noqa: S608
    + _LINEAGE_MEMBERS
    + ")"
)
_LINEAGE_SELECT = text(
    "SELECT id FROM sessions WHERE id IN ("  # noqa: S608
    + _LINEAGE_MEMBERS
    + ") ORDER BY id"
)
# One statement per flag: the column name is a constant of this module, never input.
_LINEAGE_UPDATES = {
    column: text(_LINEAGE.format(column=column)) for column in ("archived", "pinned")
}


def lineage_members(session: OrmSession, session_id: str) -> list[str]:
    """The existing ids `set_session_archived` / `set_session_pinned` would touch for
    `session_id`: ancestors and descendants linked through parents ended by compression."""
    return [str(r) for r in session.execute(_LINEAGE_SELECT, {"sid": session_id}).scalars()]


def _set_lineage_flag(session: OrmSession, column: str, session_id: str, value: Any) -> bool:
    """Sets a flag on the whole compression lineage: ancestors and descendants linked
    through parents ended by compression."""
    result = session.execute(_LINEAGE_UPDATES[column], {"sid": session_id, "value": flag(value)})
    return _rowcount(result) > 0


# --------------------------------------------------------------------------- repository


class SessionRepository:
    """The `sessions` aggregate. `flush`, when given, runs before the reads the original
    precedes with a flush of queued token counts (so they see this process's deltas)."""

    def __init__(self, store: Store, *, flush: Callable[[], object] | None = None) -> None:
        self.store = store
        self._flush_hook = flush

    def _flush(self) -> None:
        if self._flush_hook is not None:
            self._flush_hook()

    def _update(self, session_id: str, **values: Any) -> int:
        statement = update(SESSIONS).where(S.id == session_id).values(**values)
        return self.store.write(lambda session: _rowcount(session.execute(statement)))

    # ----------------------------------------------------------------- lifecycle

    def create_session(self, session_id: str, source: str, **kwargs: Any) -> str:
        unknown = sorted(set(kwargs) - CREATE_KWARGS)
        if unknown:
            raise TypeError(f"create_session() got an unexpected keyword argument {unknown[0]!r}")
        values = {name: _text(kwargs.get(name)) for name in CREATE_KWARGS}
        config = kwargs.get("model_config")
        values["model_config"] = json.dumps(config) if config else None
        has_parent = bool(kwargs.get("parent_session_id"))

        def work(session: OrmSession) -> str:
            params = {**values, "id": session_id, "source": _text(source), "started_at": now()}
            session.execute(_UPSERT, params)
            if has_parent:
                self._inherit_from_parent(session, session_id)
            return session_id

        return self.store.write(work)

    @staticmethod
    def _inherit_from_parent(session: OrmSession, session_id: str) -> None:
        parent_id = session.execute(
            select(S.parent_session_id).where(S.id == session_id)
        ).scalar_one_or_none()
        if not parent_id:
            return
        parent = _full_row(session, parent_id)
        if parent is None:
            return
        names = list(INHERITED_FROM_PARENT)
        if parent.get("end_reason") == COMPRESSION:
            # A compression continuation is the same conversation: keep its gateway origin.
            names += INHERITED_ACROSS_COMPRESSION
        values = {
            name: func.coalesce(S[name], parent[name])
            for name in names
            if parent.get(name) is not None
        }
        if values:
            session.execute(update(SESSIONS).where(S.id == session_id).values(**values))

    def ensure_session(
        self, session_id: str, source: str = "unknown", model: str | None = None, **kwargs: Any
    ) -> str:
        return self.create_session(session_id, source, model=model, **kwargs)

    def end_session(self, session_id: str, end_reason: str) -> None:
        # First reason wins: a session already ended keeps its time and reason.
        statement = (
            update(SESSIONS)
            .where(S.id == session_id, S.ended_at.is_(None))
            .values(ended_at=now(), end_reason=end_reason)
        )
        self.store.write(lambda session: session.execute(statement))

    def reopen_session(self, session_id: str) -> None:
        self._update(session_id, ended_at=None, end_reason=None)

    def promote_to_session_reset(self, session_id: str, reason: str = "session_reset") -> bool:
        """Mark a deliberate reset even over an automatic close, so stale-route recovery
        cannot resurrect the session; explicit end reasons are kept."""
        if not session_id:
            return False

        def work(session: OrmSession) -> bool:
            statement = (
                update(SESSIONS)
                .where(
                    S.id == session_id,
                    or_(S.ended_at.is_(None), S.end_reason.in_(RECOVERABLE_END_REASONS)),
                )
                .values(ended_at=now(), end_reason=reason)
            )
            return _rowcount(session.execute(statement)) > 0

        try:
            return self.store.write(work)
        except Exception as exc:  # the original's contract: any failure reads as "no change"
            log.debug("promote_to_session_reset(%s) failed: %s", session_id, exc)
            return False

    def prune_empty_ghost_sessions(self, sessions_dir: str | Path | None = None) -> int:
        """Delete the empty rows a TUI leaves behind when it is opened and closed without
        a message (spec section 2): source `tui`, untitled, ended, started more than
        24 hours ago and without any message row. Their children (if any) are orphaned;
        their transcript files under `sessions_dir` are removed afterwards."""
        from .maintenance import _delete_ids, _remove_session_files  # circular at import

        cutoff = now() - GHOST_AGE

        def work(session: OrmSession) -> list[str]:
            ids = list(
                session.execute(
                    select(S.id)
                    .where(
                        S.source == "tui",
                        or_(S.title.is_(None), S.title == ""),
                        S.ended_at.is_not(None),
                        S.started_at < cutoff,
                        ~exists().where(M.session_id == S.id),
                    )
                    .order_by(S.id)
                ).scalars()
            )
            if ids:
                _delete_ids(session.connection(), ids)
            return ids

        deleted = self.store.write(work)
        _remove_session_files(sessions_dir, deleted)
        return len(deleted)

    def finalize_orphaned_compression_sessions(self) -> int:
        """End (`orphaned_compression`, now) the continuations a crashed compression left
        open (spec section 2): still open, no API call made, started more than 7 days
        ago, holding messages, and whose parent ended with `compression`."""
        parent = SESSIONS.alias("p")
        ts = now()
        statement = (
            update(SESSIONS)
            .where(
                S.ended_at.is_(None),
                func.coalesce(S.api_call_count, 0) == 0,
                S.started_at < ts - ORPHANED_COMPRESSION_AGE,
                exists().where(M.session_id == S.id),
                exists().where(
                    parent.c.id == S.parent_session_id, parent.c.end_reason == COMPRESSION
                ),
            )
            .values(ended_at=ts, end_reason=ORPHANED_COMPRESSION)
        )
        return self.store.write(lambda session: _rowcount(session.execute(statement)))

    # ----------------------------------------------------------------- reads

    def get_session(self, session_id: str) -> Row | None:
        self._flush()
        with self.store.read() as session:
            return _full_row(session, session_id)

    def resolve_session_id(self, id_or_prefix: str) -> str | None:
        """An exact id, else the id that uniquely starts with the prefix."""
        if not id_or_prefix:
            return None
        with self.store.read() as session:
            if _exists(session, id_or_prefix):
                return id_or_prefix
            pattern = escape_like(id_or_prefix) + "%"
            matches = (
                session.execute(
                    select(S.id)
                    .where(S.id.like(pattern, escape="\\"))
                    .order_by(S.started_at.desc())
                    .limit(2)
                )
                .scalars()
                .all()
            )
        return matches[0] if len(matches) == 1 else None

    # ----------------------------------------------------------------- settings

    def update_system_prompt(self, session_id: str, system_prompt: str | None) -> None:
        self._update(session_id, system_prompt=_text(system_prompt))

    def update_session_meta(
        self, session_id: str, model_config_json: str | None, model: str | None = None
    ) -> None:
        self._flush()
        self._update(
            session_id, model_config=model_config_json, model=func.coalesce(model, S.model)
        )

    def update_session_model(self, session_id: str, model: str | None) -> None:
        """A model switch drops the browser's model lock and the prompt snapshot (it was
        assembled for the old model)."""
        self._flush()

        def work(session: OrmSession) -> None:
            stored = session.execute(
                select(S.model_config).where(S.id == session_id)
            ).scalar_one_or_none()
            config = _json_object(stored)
            new_config = stored
            if config is not None and BROWSER_LOCK_KEY in config:
                del config[BROWSER_LOCK_KEY]
                new_config = json.dumps(config)
            session.execute(
                update(SESSIONS)
                .where(S.id == session_id)
                .values(model=model, model_config=new_config, system_prompt=None)
            )

        self.store.write(work)

    def update_session_runtime_lock(
        self,
        session_id: str,
        *,
        model: str | None = None,
        provider: str | None = None,
        model_options: Any = None,
        route_source: str | None = None,
        confirmed: bool = False,
    ) -> None:
        def work(session: OrmSession) -> None:
            row = session.execute(select(S.model_config).where(S.id == session_id)).first()
            if row is None:
                return
            config = _json_object(row.model_config) or {}
            config[BROWSER_LOCK_KEY] = {
                "provider": provider,
                "model": model,
                "model_options": model_options,
                "route_source": route_source,
                "confirmed": bool(confirmed),
                "updated_at": now(),
            }
            session.execute(
                update(SESSIONS)
                .where(S.id == session_id)
                .values(
                    model_config=json.dumps(config),
                    model=func.coalesce(model, S.model),
                    system_prompt=None,
                )
            )

        self.store.write(work)

    def update_session_billing_route(
        self,
        session_id: str,
        *,
        provider: str | None,
        base_url: str | None,
        billing_mode: str | None = None,
    ) -> None:
        self._flush()
        self._update(
            session_id,
            billing_provider=provider,
            billing_base_url=base_url,
            billing_mode=func.coalesce(billing_mode, S.billing_mode),
            system_prompt=None,
        )

    def update_session_cwd(
        self,
        session_id: str,
        cwd: str | None,
        git_branch: str | None = None,
        git_repo_root: str | None = None,
    ) -> None:
        if not session_id or not cwd:
            return
        values: dict[str, Any] = {"cwd": _text(cwd)}
        for name, value in (("git_branch", git_branch), ("git_repo_root", git_repo_root)):
            if isinstance(value, str) and value.strip():
                values[name] = _text(value.strip())
        self._update(session_id, **values)

    def backfill_repo_roots(self, cwd_to_root: Mapping[str, str]) -> int:
        """Record repository roots discovered later; a root already recorded is kept."""
        pairs = [
            (cwd, root)
            for cwd, root in cwd_to_root.items()
            if isinstance(cwd, str) and cwd and isinstance(root, str) and root
        ]
        if not pairs:
            return 0

        def work(session: OrmSession) -> int:
            changed = 0
            for cwd, root in pairs:
                statement = (
                    update(SESSIONS)
                    .where(S.cwd == cwd, or_(S.git_repo_root.is_(None), S.git_repo_root == ""))
                    .values(git_repo_root=root)
                )
                changed += _rowcount(session.execute(statement))
            return changed

        return self.store.write(work)

    def set_session_archived(self, session_id: str, archived: bool) -> bool:
        return self.store.write(
            lambda session: _set_lineage_flag(session, "archived", session_id, archived)
        )

    def set_session_pinned(self, session_id: str, pinned: bool) -> bool:
        return self.store.write(
            lambda session: _set_lineage_flag(session, "pinned", session_id, pinned)
        )

    def set_expiry_finalized(self, session_id: str, finalized: bool = True) -> None:
        if not session_id:
            return
        self._update(session_id, expiry_finalized=flag(finalized))

    # ----------------------------------------------------------------- compression state

    def record_compression_failure_cooldown(
        self, session_id: str, cooldown_until: float, error: str | None = None
    ) -> None:
        try:
            self._update(
                session_id,
                compression_failure_cooldown_until=cooldown_until,
                compression_failure_error=_text(error),
            )
        except SQLAlchemyError as exc:  # a cooldown is advisory; never fail the turn
            log.warning("could not record compression cooldown for %s: %s", session_id, exc)

    def get_compression_failure_cooldown(self, session_id: str) -> dict[str, Any] | None:
        with self.store.read() as session:
            row = session.execute(
                select(S.compression_failure_cooldown_until, S.compression_failure_error).where(
                    S.id == session_id
                )
            ).first()
        if row is None or row.compression_failure_cooldown_until is None:
            return None
        try:
            until = float(row.compression_failure_cooldown_until)
        except (TypeError, ValueError):
            return None
        remaining = until - now()
        if remaining <= 0:
            return None
        return {
            "cooldown_until": until,
            "remaining_seconds": remaining,
            "error": row.compression_failure_error,
        }

    def clear_compression_failure_cooldown(self, session_id: str) -> None:
        try:
            self._update(
                session_id,
                compression_failure_cooldown_until=None,
                compression_failure_error=None,
            )
        except SQLAlchemyError as exc:
            log.warning("could not clear compression cooldown for %s: %s", session_id, exc)

    def _get_counter(self, session_id: str, column: str) -> int:
        with self.store.read() as session:
            value = session.execute(
                select(S[column]).where(S.id == session_id)
            ).scalar_one_or_none()
        if value is None:
            return 0
        try:
            return max(0, int(value))
        except (TypeError, ValueError):
            return 0

    def get_compression_fallback_streak(self, session_id: str) -> int:
        return self._get_counter(session_id, "compression_fallback_streak")

    def set_compression_fallback_streak(self, session_id: str, value: int) -> None:
        self._update(session_id, compression_fallback_streak=max(0, int(value)))

    def get_compression_ineffective_count(self, session_id: str) -> int:
        return self._get_counter(session_id, "compression_ineffective_count")

    def set_compression_ineffective_count(self, session_id: str, value: int) -> None:
        self._update(session_id, compression_ineffective_count=max(0, int(value)))

    # ----------------------------------------------------------------- lineage

    def get_compression_tip(self, session_id: str) -> str:
        with self.store.read() as session:
            return compression_tip(session, session_id)

    def get_compression_lineage(self, session_id: str) -> list[str]:
        with self.store.read() as session:
            return compression_lineage(session, session_id)

    def find_live_compression_child(self, parent_session_id: str) -> Row | None:
        """The unique open continuation of a compressed session; None when there is
        none or when several compete (the caller must not guess)."""
        with self.store.read() as session:
            if _end_reason(session, parent_session_id) != COMPRESSION:
                return None
            child = SESSIONS.alias("c")
            ids = (
                session.execute(
                    select(child.c.id)
                    .where(
                        child.c.parent_session_id == parent_session_id,
                        child.c.ended_at.is_(None),
                        _is_continuation(child),
                    )
                    .limit(2)
                )
                .scalars()
                .all()
            )
            if len(ids) != 1:
                return None
            return _full_row(session, ids[0])

    def get_session_delete_targets(self, session_id: str) -> list[str]:
        with self.store.read() as session:
            if not _exists(session, session_id):
                return []
            return [session_id, *sorted(delegate_descendants(session, session_id))]

    def ancestors(self, session_id: str) -> list[str]:
        with self.store.read() as session:
            return ancestor_ids(session, session_id)

    def descendants(self, session_id: str) -> list[str]:
        with self.store.read() as session:
            return descendant_ids(session, session_id)

    def get_conversation_root(self, session_id: str) -> str:
        chain = self.ancestors(session_id)
        return chain[-1] if chain else session_id

    def resolve_resume_session_id(self, session_id: str) -> str:
        """Where a resume should land: the compression tip, then the deepest newest
        continuation that actually has messages (a child created but never written to
        would resume into an empty transcript)."""
        if not session_id:
            return session_id
        with self.store.read() as session:
            current = compression_tip(session, session_id)
            best = current if _has_messages(session, current) else None
            seen = {current}
            for _ in range(MAX_RESUME_HOPS):
                child = SESSIONS.alias("c")
                nxt = session.execute(
                    select(child.c.id)
                    .where(
                        child.c.parent_session_id == current,
                        _is_continuation(child),
                        child.c.id.not_in(list(seen)),
                    )
                    .order_by(child.c.started_at.desc(), child.c.id.desc())
                    .limit(1)
                ).scalar_one_or_none()
                if nxt is None:
                    break
                seen.add(nxt)
                current = nxt
                if _has_messages(session, current):
                    best = current
        return best or session_id

    # ----------------------------------------------------------------- listing

    def list_sessions_rich(
        self,
        source: str | None = None,
        sources: Sequence[str] | None = None,
        exclude_sources: Sequence[str] | None = None,
        cwd_prefix: str | None = None,
        limit: int | None = 20,
        offset: int = 0,
        include_children: bool = False,
        min_message_count: int = 0,
        project_compression_tips: bool = True,
        order_by_last_active: bool = False,
        include_archived: bool = False,
        archived_only: bool = False,
        id_query: str | None = None,
        search_query: str | None = None,
        compact_rows: bool = False,
        include_pinned: bool = False,
    ) -> list[Row]:
        self._flush()
        filters = _Filters(
            source=source,
            sources=sources,
            exclude_sources=exclude_sources,
            cwd_prefix=cwd_prefix,
            min_message_count=min_message_count,
            include_archived=include_archived,
            archived_only=archived_only,
            listable_only=not include_children,
        )
        s = _alias(SESSIONS, "s")
        if order_by_last_active:
            base, order = _by_chain_activity(s, filters, compact_rows, id_query, search_query)
        else:
            base = _rich_select(s, compact_rows).where(*filters.conditions(s))
            order = [s.c.started_at.desc(), s.c.id.desc()]
        page_query = base.order_by(*order).offset(offset or 0)
        if limit is not None:
            page_query = page_query.limit(limit)
        with self.store.read() as session:
            rows = _rich_rows(session, page_query)
            if include_pinned:
                on_page = [row["id"] for row in rows]
                pinned = base.where(s.c.pinned != 0).order_by(s.c.started_at.desc(), s.c.id.desc())
                rows += [r for r in _rich_rows(session, pinned) if r["id"] not in on_page]
            if project_compression_tips and not include_children:
                rows = [self._project(session, row, compact_rows) for row in rows]
        return rows

    @staticmethod
    def _project(session: OrmSession, row: Row, compact: bool) -> Row:
        """Show a compressed conversation as its live tip, keeping the root's start time
        and totals, and say where the lineage began."""
        if row.get("end_reason") != COMPRESSION:
            return row
        root_id = row["id"]
        tip_id = compression_tip(session, root_id)
        if tip_id == root_id:
            return row
        t = _alias(SESSIONS, "s")
        tips = _rich_rows(session, _rich_select(t, compact).where(t.c.id == tip_id))
        if not tips:
            return row
        projected = dict(row)
        for name in PROJECTED_FIELDS:
            if name in tips[0]:
                projected[name] = tips[0][name]
        projected["_lineage_root_id"] = root_id
        return projected

    def get_session_rich_row(self, session_id: str, compact_rows: bool = False) -> Row | None:
        self._flush()
        s = _alias(SESSIONS, "s")
        with self.store.read() as session:
            rows = _rich_rows(session, _rich_select(s, compact_rows).where(s.c.id == session_id))
        return rows[0] if rows else None

    def search_sessions_by_id(
        self,
        query: str,
        limit: int = 20,
        include_archived: bool = True,
        source: str | None = None,
        sources: Sequence[str] | None = None,
        exclude_sources: Sequence[str] | None = None,
    ) -> list[Row]:
        """Listing rows whose id (or an id of their forward compression chain) holds
        `query`, case-insensitively: exact ids first, then prefixes, then the rest, each
        group in last-activity order (spec section 6.6)."""
        needle = (query or "").strip().lower()
        if not needle or limit <= 0:
            return []
        rows = self.list_sessions_rich(
            source=source,
            sources=sources,
            exclude_sources=exclude_sources,
            limit=limit * 4,
            order_by_last_active=True,
            include_archived=include_archived,
            id_query=query.strip(),
        )

        def rank(row: Row) -> int:
            ids = [str(row[k]).lower() for k in ("id", "_lineage_root_id") if row.get(k)]
            if needle in ids:
                return 0
            if any(i.startswith(needle) for i in ids):
                return 1
            return 2 if any(needle in i for i in ids) else 3

        return sorted(rows, key=rank)[:limit]

    def search_sessions(
        self,
        source: str | None = None,
        limit: int | None = 20,
        offset: int = 0,
        workspace_key: str | None = None,
    ) -> list[Row]:
        """Every session (children and archived included), most recently active first."""
        s = SESSIONS.alias("s")
        last_active = _last_active(s).label("last_active")
        query = select(literal_column("s.*"), last_active).select_from(s)
        if source:
            query = query.where(s.c.source == source)
        if workspace_key:
            no_root = or_(s.c.git_repo_root.is_(None), s.c.git_repo_root == "")
            query = query.where(
                or_(
                    s.c.git_repo_root == workspace_key,
                    and_(no_root, _cwd_under(s.c.cwd, workspace_key)),
                )
            )
        query = query.order_by(last_active.desc(), s.c.started_at.desc(), s.c.id.desc())
        query = query.offset(offset or 0)
        if limit is not None:
            query = query.limit(limit)
        with self.store.read() as session:
            return [dict(row) for row in session.execute(query).mappings()]

    def session_count(
        self,
        source: str | None = None,
        sources: Sequence[str] | None = None,
        cwd_prefix: str | None = None,
        min_message_count: int = 0,
        include_archived: bool = False,
        archived_only: bool = False,
        exclude_children: bool = False,
        exclude_sources: Sequence[str] | None = None,
    ) -> int:
        filters = _Filters(
            source=source,
            sources=sources,
            exclude_sources=exclude_sources,
            cwd_prefix=cwd_prefix,
            min_message_count=min_message_count,
            include_archived=include_archived,
            archived_only=archived_only,
            listable_only=exclude_children,
        )
        s = SESSIONS.alias("s")
        query = select(func.count()).select_from(s).where(*filters.conditions(s))
        with self.store.read() as session:
            return int(session.execute(query).scalar_one())

    def session_count_by_source(
        self,
        *,
        include_archived: bool = False,
        archived_only: bool = False,
        exclude_children: bool = False,
    ) -> dict[str, int]:
        filters = _Filters(
            include_archived=include_archived,
            archived_only=archived_only,
            listable_only=exclude_children,
        )
        s = SESSIONS.alias("s")
        # Rows written before sources existed carry '' or NULL; they came from the CLI.
        key = func.coalesce(func.nullif(s.c.source, ""), "cli").label("source_key")
        count = func.count().label("n")
        query = (
            select(key, count)
            .select_from(s)
            .where(*filters.conditions(s))
            .group_by(key)
            .order_by(count.desc(), key)
        )
        with self.store.read() as session:
            return {str(r.source_key): int(r.n) for r in session.execute(query)}

    def list_cron_job_runs(self, job_id: str, limit: int = 20, offset: int = 0) -> list[Row]:
        """Runs of one cron job, newest first: an index range over the id prefix, so the
        cost follows the page size, not the whole cron history."""
        prefix = f"cron_{job_id}_"
        upper = prefix[:-1] + chr(ord(prefix[-1]) + 1)
        s = SESSIONS.alias("s")
        query = (
            _rich_select(s, False)
            .where(s.c.source == "cron", s.c.id >= prefix, s.c.id < upper)
            .order_by(s.c.started_at.desc(), s.c.id.desc())
            .limit(limit)
            .offset(offset or 0)
        )
        with self.store.read() as session:
            return _rich_rows(session, query)

    def distinct_session_cwds(self, include_archived: bool = False) -> list[dict[str, Any]]:
        conds: list[ColumnElement[bool]] = [S.cwd.is_not(None), func.trim(S.cwd) != ""]
        if not include_archived:
            conds.append(S.archived == 0)
        last_active = func.max(func.coalesce(S.ended_at, S.started_at, 0)).label("last_active")
        query = (
            select(S.cwd, func.count().label("sessions"), last_active)
            .where(*conds)
            .group_by(S.cwd)
            .order_by(S.cwd)
        )
        with self.store.read() as session:
            return [
                {
                    "cwd": r.cwd,
                    "sessions": int(r.sessions or 0),
                    "last_active": float(r.last_active or 0),
                }
                for r in session.execute(query)
            ]

    def list_skill_scaffolded_sessions(self, limit: int = 200) -> list[Row]:
        """Titled sessions whose first user message (by timestamp, then id; NULL content
        skipped) is a `/skill` invocation, newest start first: their titles were made
        from the expanded skill body rather than the request. Rows are `{id, title,
        content}` with the full first-turn content (decoded), so a caller can re-derive
        what the user typed and re-title the session (spec section 7.2)."""
        m = MESSAGES.alias("m")
        first = (
            select(m.c.id)
            .where(m.c.session_id == S.id, m.c.role == "user", m.c.content.is_not(None))
            .order_by(m.c.timestamp, m.c.id)
            .limit(1)
            .scalar_subquery()
        )
        query = (
            select(S.id, S.title, M.content)
            .select_from(SESSIONS.join(MESSAGES, M.id == first))
            .where(
                S.title.is_not(None),
                func.substr(M.content, 1, len(SKILL_INVOCATION_PREFIX)) == SKILL_INVOCATION_PREFIX,
            )
            .order_by(S.started_at.desc(), S.id.desc())
            .limit(max(0, int(limit)))
        )
        with self.store.read() as session:
            return [
                {"id": r.id, "title": r.title, "content": decode_content(r.content)}
                for r in session.execute(query)
            ]

    def get_first_assistant_text(self, session_id: str) -> str:
        """The text of the session's first assistant message with content (by timestamp,
        then id; inactive rows included, as in the original); "" when there is none or
        its content is structured (spec section 7.2, used to re-title `/skill` sessions)."""
        query = (
            select(M.content)
            .where(M.session_id == session_id, M.role == "assistant", M.content.is_not(None))
            .order_by(M.timestamp, M.id)
            .limit(1)
        )
        with self.store.read() as session:
            stored = session.execute(query).scalar_one_or_none()
        decoded = decode_content(stored)
        return decoded if isinstance(decoded, str) else ""


# --------------------------------------------------------------------------- helpers


_UPSERT = text(
    "INSERT INTO sessions (id, source, user_id, model, model_config, system_prompt, "
    "parent_session_id, started_at, session_key, chat_id, chat_type, thread_id, cwd, "
    "profile_name, git_repo_root) VALUES (:id, :source, :user_id, :model, :model_config, "
    ":system_prompt, :parent_session_id, :started_at, :session_key, :chat_id, :chat_type, "
    ":thread_id, :cwd, :profile_name, :git_repo_root) "
    # An existing row only gets its gaps filled; source, user_id and started_at stay.
    "ON CONFLICT (id) DO UPDATE SET "
    "model = COALESCE(sessions.model, excluded.model), "
    "model_config = COALESCE(sessions.model_config, excluded.model_config), "
    "system_prompt = COALESCE(sessions.system_prompt, excluded.system_prompt), "
    "session_key = COALESCE(sessions.session_key, excluded.session_key), "
    "chat_id = COALESCE(sessions.chat_id, excluded.chat_id), "
    "chat_type = COALESCE(sessions.chat_type, excluded.chat_type), "
    "thread_id = COALESCE(sessions.thread_id, excluded.thread_id), "
    "parent_session_id = COALESCE(sessions.parent_session_id, excluded.parent_session_id), "
    "cwd = COALESCE(sessions.cwd, excluded.cwd), "
    "profile_name = COALESCE(sessions.profile_name, excluded.profile_name), "
    "git_repo_root = COALESCE(sessions.git_repo_root, excluded.git_repo_root)"
)


def escape_like(value: str) -> str:
    """`value` as a literal inside a LIKE pattern with `ESCAPE '\\'`."""
    return value.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")


def _by_chain_activity(
    s: NamedFromClause,
    filters: _Filters,
    compact: bool,
    id_query: str | None,
    search_query: str | None,
) -> tuple[Select[Any], list[Any]]:
    """The listing ordered by the newest activity anywhere in each row's forward
    compression chain, with the id/title search applied over that chain in SQL."""
    seed = SESSIONS.alias("seed")
    chain = (
        select(seed.c.id.label("root_id"), seed.c.id.label("member_id"))
        .where(*filters.conditions(seed))
        .cte("chain", recursive=True)
    )
    parent = SESSIONS.alias("cp")
    child = SESSIONS.alias("cc")
    chain = chain.union(
        select(chain.c.root_id, child.c.id)
        .select_from(
            chain.join(parent, parent.c.id == chain.c.member_id).join(
                child, child.c.parent_session_id == parent.c.id
            )
        )
        .where(parent.c.end_reason == COMPRESSION, _is_continuation(child))
    )
    member = SESSIONS.alias("cm")
    stats_columns: list[Any] = [
        chain.c.root_id,
        func.max(_last_active(member)).label("activity"),
    ]
    id_needle = (id_query or "").strip()
    search_needle = (search_query or "").strip()
    if id_needle:
        stats_columns.append(_any(_contains(member.c.id, id_needle)).label("id_hit"))
    if search_needle:
        stats_columns.append(_any(_search_hit(member, search_needle)).label("search_hit"))
    stats = (
        select(*stats_columns)
        .select_from(chain.join(member, member.c.id == chain.c.member_id))
        .group_by(chain.c.root_id)
        .subquery("stats")
    )
    query = _rich_select(s, compact).join(stats, stats.c.root_id == s.c.id)
    if id_needle:
        query = query.where(stats.c.id_hit == 1)
    if search_needle:
        query = query.where(stats.c.search_hit == 1)
    return query, [stats.c.activity.desc(), s.c.started_at.desc(), s.c.id.desc()]


def _any(condition: ColumnElement[bool]) -> ColumnElement[Any]:
    return func.max(case((condition, 1), else_=0))


def _search_hit(member: NamedFromClause, needle: str) -> ColumnElement[bool]:
    title = func.coalesce(member.c.title, "")
    hits = [_contains(member.c.id, needle), _contains(title, needle)]
    # Only titles get the squashed pass: ids are mostly digits and separators, so a
    # squashed short query ("#2" -> "2") would match nearly every id.
    squashed = "".join(ch for ch in needle if ch not in SEARCH_PUNCTUATION)
    if squashed:
        hits.append(_contains(_strip_punctuation(title), squashed))
    return or_(*hits)
