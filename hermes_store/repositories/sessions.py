"""Sessions: creation and lifecycle, per-session settings, compression state, and the
repository's views of lineage and listings (docs/reference/behaviour.md sections 2, 4.2, 5.3 and 7).

Rows come back as plain dicts of the full `sessions` row (`SELECT *`), so columns this
code does not know (added by a newer Hermes or a fork) come back too. Missing sessions
give None, False, [] or 0 rather than an exception, as the original does.

The rules live in their own modules: lineage (links and walks) in `lineage.py`,
listings in `listing.py`, previews in `_preview.py`, deletion in `deletion.py`. Each
unit of work is a module-level function taking the transaction's connection.
"""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Callable, Mapping, Sequence
from functools import cache, lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from sqlalchemy import (
    TEXT,
    BigInteger,
    ColumnElement,
    Connection,
    and_,
    bindparam,
    exists,
    func,
    literal_column,
    null,
    or_,
    select,
    text,
    update,
)

from ..runtime.engine import (
    DriverWrite,
    Prepared,
    all_dicts,
    all_tuples,
    first_tuple,
    first_value,
)
from . import turns
from ._paging import (
    NO_OFFSET,
    bound_limit,
    limit_of,
    row_limit,
    row_offset,
    written,
)
from ._preview import SKILL_INVOCATION_PREFIX
from ._sql import (
    ADVISORY_FAILURES,
    alias,
    all_columns,
    escape_like,
    rowcount,
)
from ._tables import MESSAGES, SESSIONS, M, S
from ._tag_names import check_tags
from .deletion import delete_ids, remove_session_files
from .encoding import decode_content, flag, now, scrub, time_in_range
from .lineage import (
    ANCESTRY,
    COMPRESSION,
    DELETE_TARGET_ROWS,
    INHERITED_ACROSS_COMPRESSION,
    INHERITED_FROM_PARENT,
    LINEAGE_FLAG_UPDATES,
    LIVE_CONTINUATION_ROWS,
    LIVE_CONTINUATIONS,
    RESUME_WALK,
    TIP_WALK,
    ancestors_from,
    compression_lineage,
    compression_tip,
    delegates_among,
    descendant_ids,
    is_recoverable,
    json_object,
    lineage_flag_params,
    resume_answer,
    resume_target,
    session_exists,
    walked,
)
from .listing import (
    ListingFilters,
    activity_page,
    activity_page_params,
    count_statement,
    list_page,
    rich_row_by_id,
    rich_select,
    source_counts_statement,
    with_previews,
)
from .rows import CompressionCooldown, ListingRow, SessionRow

if TYPE_CHECKING:
    from ..store import Store

log = logging.getLogger(__name__)


Row = dict[str, Any]

BROWSER_LOCK_KEY = "browser_model_lock"
#: prune_empty_ghost_sessions / finalize_orphaned_compression_sessions age thresholds.
GHOST_AGE = 24 * 3600.0
ORPHANED_COMPRESSION_AGE = 7 * 86400.0
ORPHANED_COMPRESSION = "orphaned_compression"

_UPSERT = Prepared(
    text(
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
)
_FULL_ROW = Prepared(all_columns(SESSIONS).where(S.id == bindparam("id")))
_COOLDOWN = Prepared(
    select(S.compression_failure_cooldown_until, S.compression_failure_error).where(
        S.id == bindparam("id")
    )
)
#: The content of the session's first assistant message with any, by timestamp then id.
_FIRST_ASSISTANT_TEXT = Prepared(
    select(M.content)
    .where(M.session_id == bindparam("id"), M.role == "assistant", M.content.is_not(None))
    .order_by(M.timestamp, M.id)
    .limit(literal_column("1"))
    .offset(NO_OFFSET)
)


#: The end, on a session not yet ended (the first reason wins).
_END = Prepared(
    update(SESSIONS)
    .where(S.id == bindparam("sid"), S.ended_at.is_(None))
    .values(ended_at=bindparam("at"), end_reason=bindparam("reason"))
)
_REOPEN = Prepared(
    update(SESSIONS).where(S.id == bindparam("sid")).values(ended_at=null(), end_reason=null())
)
#: A model switch on SQLite where `_switch_model` would leave `model_config` as it is:
#: its text cannot hold the browser's lock as a key when it is not text at all, or holds
#: neither the key's name nor a backslash (a JSON escape could spell the name). A row
#: back: switched; none (an unknown session, or a config that may hold the lock) has the
#: switch made by `_switch_model`, which says which.
_SWITCH_MODEL_KEEPING_CONFIG = Prepared(
    update(SESSIONS)
    .where(
        S.id == bindparam("sid"),
        or_(
            func.typeof(S.model_config) != "text",
            and_(
                func.instr(S.model_config, BROWSER_LOCK_KEY) == 0,
                func.instr(S.model_config, "\\") == 0,
            ),
        ),
    )
    .values(model=bindparam("model_name"), system_prompt=null())
    .returning(S.id)
)


@lru_cache(maxsize=64)
def _setter(names: tuple[str, ...], keep: tuple[str, ...]) -> Prepared:
    """UPDATE of session :sid setting each column of `names` to :v_<name>; a column in
    `keep` keeps its value where :v_<name> is None."""
    values: dict[str, Any] = {}
    for name in names:
        given = bindparam(f"v_{name}", type_=S[name].type)
        values[name] = func.coalesce(given, S[name]) if name in keep else given
    return Prepared(update(SESSIONS).where(S.id == bindparam("sid")).values(values))


@cache
def _session_value(column: str) -> Prepared:
    """One column of one session's row (:id)."""
    return Prepared(select(S[column]).where(S.id == bindparam("id")))


@lru_cache(maxsize=16)
def _cron_runs(limit: int | None) -> Prepared:
    """Runs of one cron job, newest first: the ids in [:low, :high) (an index range over
    the `cron_<job>_` prefix), a page of `limit` rows (written in, `_paging.written`;
    None: :limit) from :offset."""
    s = alias(SESSIONS, "s")
    return Prepared(
        rich_select(s, False)
        .where(
            s.c.source == "cron",
            s.c.id >= bindparam("low", type_=TEXT()),
            s.c.id < bindparam("high", type_=TEXT()),
        )
        .order_by(s.c.started_at.desc(), s.c.id.desc())
        .limit(limit_of(limit))
        .offset(bindparam("offset", type_=BigInteger()))
    )


@lru_cache(maxsize=16)
def _skill_scaffolded(limit: int | None) -> Prepared:
    """Titled sessions whose first user message (by timestamp, then id; NULL content
    skipped) starts with the `/skill` invocation prefix, newest start first, `limit` rows
    (written in, `_paging.written`; None: :limit)."""
    m = MESSAGES.alias("m")
    first = (
        select(m.c.id)
        .where(m.c.session_id == S.id, m.c.role == "user", m.c.content.is_not(None))
        .order_by(m.c.timestamp, m.c.id)
        .limit(1)
        .scalar_subquery()
    )
    return Prepared(
        select(S.id, S.title, M.content)
        .select_from(SESSIONS.join(MESSAGES, M.id == first))
        .where(
            S.title.is_not(None),
            func.substr(M.content, 1, len(SKILL_INVOCATION_PREFIX)) == SKILL_INVOCATION_PREFIX,
        )
        .order_by(S.started_at.desc(), S.id.desc())
        .limit(limit_of(limit))
        .offset(NO_OFFSET)
    )


@cache
def _session_cwds(include_archived: bool) -> Prepared:
    """Each working directory with its number of sessions and last activity."""
    conds: list[ColumnElement[bool]] = [S.cwd.is_not(None), func.trim(S.cwd) != ""]
    if not include_archived:
        conds.append(S.archived == 0)
    activity = func.max(func.coalesce(S.ended_at, S.started_at, 0)).label("last_active")
    return Prepared(
        select(S.cwd, func.count().label("sessions"), activity)
        .where(*conds)
        .group_by(S.cwd)
        .order_by(S.cwd)
    )


def _first_values(cursor: Any) -> list[Any]:
    """Every row's first value (a `read_one` consumer)."""
    return [row[0] for row in all_tuples(cursor)]


def _text(value: Any) -> Any:
    return scrub(value) if isinstance(value, str) else value


def full_row(conn: Connection, session_id: str) -> Row | None:
    """The whole `sessions` row, or None."""
    rows = _FULL_ROW.dicts(conn, {"id": session_id})
    return rows[0] if rows else None


# --------------------------------------------------------------------------- units of work


def _create(conn: Connection, values: dict[str, Any], has_parent: bool) -> str:
    _UPSERT.run(conn, {**values, "started_at": now()})
    if has_parent:
        _inherit_from_parent(conn, values["id"])
    return str(values["id"])


def _inherit_from_parent(conn: Connection, session_id: str) -> None:
    parent_id = conn.execute(
        select(S.parent_session_id).where(S.id == session_id)
    ).scalar_one_or_none()
    if not parent_id:
        return
    parent = full_row(conn, parent_id)
    if parent is None:
        return
    names = list(INHERITED_FROM_PARENT)
    if parent.get("end_reason") == COMPRESSION:
        # A compression continuation is the same conversation: keep its gateway origin.
        names += INHERITED_ACROSS_COMPRESSION
    values = {
        name: func.coalesce(S[name], parent[name]) for name in names if parent.get(name) is not None
    }
    if values:
        conn.execute(update(SESSIONS).where(S.id == session_id).values(**values))


def _promote_to_reset(conn: Connection, session_id: str, reason: str) -> bool:
    statement = (
        update(SESSIONS)
        .where(
            S.id == session_id,
            is_recoverable(SESSIONS),
        )
        .values(ended_at=now(), end_reason=reason)
    )
    return rowcount(conn.execute(statement)) > 0


def _delete_ghosts(conn: Connection, cutoff: float) -> list[str]:
    ids = list(
        conn.execute(
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
        delete_ids(conn, ids)
    return ids


def _switch_model(conn: Connection, session_id: str, model: str | None) -> None:
    stored = conn.execute(select(S.model_config).where(S.id == session_id)).scalar_one_or_none()
    config = json_object(stored)
    new_config = stored
    if config is not None and BROWSER_LOCK_KEY in config:
        del config[BROWSER_LOCK_KEY]
        new_config = json.dumps(config)
    conn.execute(
        update(SESSIONS)
        .where(S.id == session_id)
        .values(model=model, model_config=new_config, system_prompt=None)
    )


def _lock_runtime(
    conn: Connection, session_id: str, model: str | None, lock: dict[str, Any]
) -> None:
    row = conn.execute(select(S.model_config).where(S.id == session_id)).first()
    if row is None:
        return
    config = json_object(row.model_config) or {}
    config[BROWSER_LOCK_KEY] = lock
    conn.execute(
        update(SESSIONS)
        .where(S.id == session_id)
        .values(
            model_config=json.dumps(config),
            model=func.coalesce(model, S.model),
            system_prompt=None,
        )
    )


def _backfill_repo_roots(conn: Connection, pairs: list[tuple[str, str]]) -> int:
    changed = 0
    for cwd, root in pairs:
        statement = (
            update(SESSIONS)
            .where(S.cwd == cwd, or_(S.git_repo_root.is_(None), S.git_repo_root == ""))
            .values(git_repo_root=root)
        )
        changed += rowcount(conn.execute(statement))
    return changed


def _prefix_matches(conn: Connection, prefix: str, limit: int) -> list[str]:
    """At most `limit` ids that start with `prefix` (LIKE wildcards in it taken
    literally), in id order: the one order every prefix lookup uses, so an ambiguous
    prefix names the same sessions each time (Hermes ids begin with their start time,
    so id order is also oldest first)."""
    pattern = escape_like(prefix) + "%"
    statement = select(S.id).where(S.id.like(pattern, escape="\\")).order_by(S.id).limit(limit)
    return list(conn.execute(statement).scalars())


def _unique_prefix_match(conn: Connection, prefix: str) -> str | None:
    if session_exists(conn, prefix):
        return prefix
    matches = _prefix_matches(conn, prefix, 2)
    return matches[0] if len(matches) == 1 else None


# --------------------------------------------------------------------------- repository


class SessionRepository:
    """The `sessions` aggregate. `flush`, when given, runs before the reads the original
    precedes with a flush of queued token counts (so they see this process's deltas).

    Args:
        store: the Store the repository works on.
        flush: called before the reads that must see this process's queued token counts.
    """

    def __init__(self, store: Store, *, flush: Callable[[], object] | None = None) -> None:
        self.store = store
        self._flush_hook = flush

    def _flush(self) -> None:
        if self._flush_hook is not None:
            self._flush_hook()

    def _update(
        self,
        session_id: str,
        turn_token: int | None = None,
        *,
        keep: tuple[str, ...] = (),
        **values: Any,
    ) -> int:
        """Set `values` on the session's row (those named in `keep` only where given, not
        None); the rows changed. One UPDATE, a write of its own (`Store.write_one`),
        unless a turn token has the turn checked first in the same transaction."""
        statement = _setter(tuple(values), keep)
        params = {f"v_{name}": value for name, value in values.items()}
        params["sid"] = session_id
        token = turns.check_token(turn_token)
        if token is None:
            return self.store.write_one(statement, params)

        def work(conn: Connection) -> int:
            turns.require_turn(conn, session_id, token)
            return statement.run(conn, params)

        return self.store.write(work)

    # ----------------------------------------------------------------- lifecycle

    def create_session(
        self,
        /,
        session_id: str,
        source: str,
        *,
        model: str | None = None,
        model_config: Mapping[str, Any] | None = None,
        system_prompt: str | None = None,
        user_id: str | None = None,
        session_key: str | None = None,
        chat_id: str | None = None,
        chat_type: str | None = None,
        thread_id: str | None = None,
        parent_session_id: str | None = None,
        cwd: str | None = None,
        profile_name: str | None = None,
        git_repo_root: str | None = None,
    ) -> str:
        """Create the session, or fill the gaps of an existing row (its source, user and
        start time stay); a child inherits its parent's workspace fields, and a
        compression continuation also its gateway origin. Returns `session_id`.

        Args:
            session_id: the session's id.
            source: the source (cli, telegram, discord, cron, ...).
            model: the model's name.
            model_config: the model's settings (stored as JSON).
            system_prompt: the assembled system prompt.
            user_id: the user's id on the platform.
            session_key: the gateway's key for the conversation.
            chat_id: the gateway chat's id.
            chat_type: the kind of chat (dm, group, channel, ...).
            thread_id: the gateway thread's id (a Telegram topic).
            parent_session_id: the parent session's id.
            cwd: the working directory of the session.
            profile_name: the Hermes profile the session runs under.
            git_repo_root: the root of the git repository the working directory lies in.
        """
        given = {
            "model": model,
            "system_prompt": system_prompt,
            "user_id": user_id,
            "session_key": session_key,
            "chat_id": chat_id,
            "chat_type": chat_type,
            "thread_id": thread_id,
            "parent_session_id": parent_session_id,
            "cwd": cwd,
            "profile_name": profile_name,
            "git_repo_root": git_repo_root,
        }
        values = {name: _text(value) for name, value in given.items()}
        values["model_config"] = json.dumps(model_config) if model_config else None
        values["id"] = session_id
        values["source"] = _text(source)
        has_parent = bool(parent_session_id)
        store = self.store

        def work(conn: Connection) -> str:
            return _create(conn, values, has_parent)

        if has_parent or not store.dialect.in_process:
            return store.write(work)
        # One statement: sent at the kept writer's driver, stamped once the write lock is
        # held (as `_create` stamps it), so start times rise with the order of writes.
        dialect = store.engine.dialect
        write = DriverWrite(
            lambda: (_UPSERT.bound(dialect, {**values, "started_at": now()}),), rowcount=True
        )
        store.write(work, call=lambda: write)
        return str(values["id"])

    def ensure_session(
        self,
        /,
        session_id: str,
        source: str = "unknown",
        model: str | None = None,
        *,
        model_config: Mapping[str, Any] | None = None,
        system_prompt: str | None = None,
        user_id: str | None = None,
        session_key: str | None = None,
        chat_id: str | None = None,
        chat_type: str | None = None,
        thread_id: str | None = None,
        parent_session_id: str | None = None,
        cwd: str | None = None,
        profile_name: str | None = None,
        git_repo_root: str | None = None,
    ) -> str:
        """`create_session` with the original's defaults for a row that may not exist.

        Args:
            session_id: the session's id.
            source: the source, used if the session has to be created.
            model: the model's name.
            model_config: the model's settings (stored as JSON).
            system_prompt: the assembled system prompt.
            user_id: the user's id on the platform.
            session_key: the gateway's key for the conversation.
            chat_id: the gateway chat's id.
            chat_type: the kind of chat (dm, group, channel, ...).
            thread_id: the gateway thread's id (a Telegram topic).
            parent_session_id: the parent session's id.
            cwd: the working directory of the session.
            profile_name: the Hermes profile the session runs under.
            git_repo_root: the root of the git repository the working directory lies in.
        """
        return self.create_session(
            session_id,
            source,
            model=model,
            model_config=model_config,
            system_prompt=system_prompt,
            user_id=user_id,
            session_key=session_key,
            chat_id=chat_id,
            chat_type=chat_type,
            thread_id=thread_id,
            parent_session_id=parent_session_id,
            cwd=cwd,
            profile_name=profile_name,
            git_repo_root=git_repo_root,
        )

    def end_session(self, session_id: str, end_reason: str) -> None:
        """Record the end; the first reason wins (an ended session keeps its time and
        reason).

        Args:
            session_id: the session's id.
            end_reason: why the session ended (the first reason given is kept).
        """
        self.store.write_one(_END, {"sid": session_id, "at": now(), "reason": end_reason})

    def reopen_session(self, session_id: str) -> None:
        """Clear the end time and reason, so the session accepts messages again.

        Args:
            session_id: the session's id.
        """
        self.store.write_one(_REOPEN, {"sid": session_id})

    def promote_to_session_reset(self, session_id: str, reason: str = "session_reset") -> bool:
        """Mark a deliberate reset even over an automatic close, so stale-route recovery
        cannot resurrect the session; explicit end reasons are kept.

        Args:
            session_id: the session's id.
            reason: the end reason recorded on the promoted session.
        """
        if not session_id:
            return False
        try:
            return self.store.write(lambda conn: _promote_to_reset(conn, session_id, reason))
        except Exception as exc:  # the original's contract: any failure reads as "no change"
            log.debug("promote_to_session_reset(%s) failed: %s", session_id, exc)
            return False

    def prune_empty_ghost_sessions(self, sessions_dir: str | Path | None = None) -> int:
        """Delete the empty rows a TUI leaves behind when it is opened and closed without
        a message (docs/reference/behaviour.md 2): source `tui`, untitled, ended, started more than
        24 hours ago and without any message row. Their children (if any) are orphaned;
        their transcript files under `sessions_dir` are removed afterwards.

        Args:
            sessions_dir: where the sessions' files live; a deleted session's files are
                removed from it (None: none are).
        """
        cutoff = now() - GHOST_AGE
        deleted = self.store.write(lambda conn: _delete_ghosts(conn, cutoff))
        remove_session_files(sessions_dir, deleted)
        return len(deleted)

    def finalize_orphaned_compression_sessions(self) -> int:
        """End (`orphaned_compression`, now) the continuations a crashed compression left
        open (docs/reference/behaviour.md 2): still open, no API call made, started more than 7 days
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
        return self.store.write(lambda conn: rowcount(conn.execute(statement)))

    # ----------------------------------------------------------------- reads

    def get_session(self, session_id: str) -> Row | None:
        """The whole row (keys as `SessionRow` has them), or None for an unknown id.

        Args:
            session_id: the session's id.
        """
        self._flush()
        rows = self.store.read_one(_FULL_ROW, {"id": session_id}, all_dicts)
        return rows[0] if rows else None

    def resolve_session_id(self, id_or_prefix: str) -> str | None:
        """An exact id, else the id that uniquely starts with the prefix.

        Args:
            id_or_prefix: a whole session id, or the start of one.
        """
        if not id_or_prefix:
            return None
        return self.store.read(lambda conn: _unique_prefix_match(conn, id_or_prefix))

    def session_ids_with_prefix(self, prefix: str, limit: int) -> list[str]:
        """The ids that start with `prefix`, in id order.

        Args:
            prefix: the start of a session id; `%`, `_` and `\\` in it are literal.
            limit: at most this many ids are returned.
        """
        return self.store.read(lambda conn: _prefix_matches(conn, prefix, limit))

    # ----------------------------------------------------------------- settings

    def update_system_prompt(
        self, session_id: str, system_prompt: str | None, *, turn_token: int | None = None
    ) -> None:
        """Store the assembled system prompt snapshot.

        Args:
            session_id: the session's id.
            system_prompt: the assembled system prompt.
            turn_token: a token from TurnRepository.acquire_turn; the write is made only while
                it is the session's current turn (StaleTurn otherwise, nothing written).
        """
        self._update(session_id, turn_token, system_prompt=_text(system_prompt))

    def update_session_meta(
        self,
        session_id: str,
        model_config_json: str | None,
        model: str | None = None,
        *,
        turn_token: int | None = None,
    ) -> None:
        """Replace `model_config` (JSON text) and, when given, the model.

        Args:
            session_id: the session's id.
            model_config_json: the model's settings, as JSON text.
            model: the model's name.
            turn_token: a token from TurnRepository.acquire_turn; the write is made only while
                it is the session's current turn (StaleTurn otherwise, nothing written).
        """
        self._flush()
        self._update(
            session_id,
            turn_token,
            keep=("model",),
            model_config=model_config_json,
            model=model,
        )

    def update_session_model(self, session_id: str, model: str | None) -> None:
        """A model switch drops the browser's model lock and the prompt snapshot (it was
        assembled for the old model).

        Args:
            session_id: the session's id.
            model: the model's name.
        """
        self._flush()
        store = self.store

        def work(conn: Connection) -> None:
            _switch_model(conn, session_id, model)

        if not (store.dialect.in_process and store.engine.dialect.update_returning):
            store.write(work)
            return
        params = {"sid": session_id, "model_name": model}
        bound = (_SWITCH_MODEL_KEEPING_CONFIG.bound(store.engine.dialect, params),)
        write = DriverWrite(lambda: bound)
        store.write(work, call=lambda: write)

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
        """Record the browser's model lock in `model_config` (and the model, when given);
        the prompt snapshot is dropped. Nothing happens for an unknown id.

        Args:
            session_id: the session's id.
            model: the model's name.
            provider: the model provider.
            model_options: the model options, stored in `browser_model_lock`.
            route_source: what chose the route, stored in `browser_model_lock`.
            confirmed: the lock's `confirmed` flag, stored in `browser_model_lock`.
        """
        lock = {
            "provider": provider,
            "model": model,
            "model_options": model_options,
            "route_source": route_source,
            "confirmed": bool(confirmed),
            "updated_at": now(),
        }
        self.store.write(lambda conn: _lock_runtime(conn, session_id, model, lock))

    def update_session_billing_route(
        self,
        session_id: str,
        *,
        provider: str | None,
        base_url: str | None,
        billing_mode: str | None = None,
    ) -> None:
        """Record where calls are billed (the mode is kept when not given); the prompt
        snapshot is dropped.

        Args:
            session_id: the session's id.
            provider: the model provider.
            base_url: the API base URL the session is billed through.
            billing_mode: how the provider bills (subscription, metered, ...), when known.
        """
        self._flush()
        self._update(
            session_id,
            keep=("billing_mode",),
            billing_provider=provider,
            billing_base_url=base_url,
            billing_mode=billing_mode,
            system_prompt=None,
        )

    def update_session_cwd(
        self,
        session_id: str,
        cwd: str | None,
        git_branch: str | None = None,
        git_repo_root: str | None = None,
    ) -> None:
        """Record the working directory (and the git branch and root when non-blank);
        nothing happens without a session id and a directory.

        Args:
            session_id: the session's id.
            cwd: the working directory of the session.
            git_branch: the git branch of the working directory.
            git_repo_root: the root of the git repository the working directory lies in.
        """
        if not session_id or not cwd:
            return
        values: dict[str, Any] = {"cwd": _text(cwd)}
        for name, value in (("git_branch", git_branch), ("git_repo_root", git_repo_root)):
            if isinstance(value, str) and value.strip():
                values[name] = _text(value.strip())
        self._update(session_id, **values)

    def backfill_repo_roots(self, cwd_to_root: Mapping[str, str]) -> int:
        """Record repository roots discovered later; a root already recorded is kept.

        Args:
            cwd_to_root: working directory -> git repository root, for the sessions that
                have no root yet.
        """
        pairs = [
            (cwd, root)
            for cwd, root in cwd_to_root.items()
            if isinstance(cwd, str) and cwd and isinstance(root, str) and root
        ]
        if not pairs:
            return 0
        return self.store.write(lambda conn: _backfill_repo_roots(conn, pairs))

    def set_session_archived(self, session_id: str, archived: bool) -> bool:
        """Archive (or unarchive) the session's whole compression lineage.

        Args:
            session_id: the session's id.
            archived: True to archive the session, False to bring it back.
        """
        params = lineage_flag_params(session_id, archived)
        return self.store.write_one(LINEAGE_FLAG_UPDATES["archived"], params) > 0

    def set_session_pinned(self, session_id: str, pinned: bool) -> bool:
        """Pin (or unpin) the session's whole compression lineage.

        Args:
            session_id: the session's id.
            pinned: True to pin the session, False to unpin it.
        """
        params = lineage_flag_params(session_id, pinned)
        return self.store.write_one(LINEAGE_FLAG_UPDATES["pinned"], params) > 0

    def set_expiry_finalized(self, session_id: str, finalized: bool = True) -> None:
        """Mark that the gateway has finished the session's expiry work.

        Args:
            session_id: the session's id.
            finalized: whether the session's expiry handling is done.
        """
        if not session_id:
            return
        self._update(session_id, expiry_finalized=flag(finalized))

    # ----------------------------------------------------------------- compression state

    def record_compression_failure_cooldown(
        self, session_id: str, cooldown_until: float, error: str | None = None
    ) -> None:
        """Remember that compression failed and must not be retried before
        `cooldown_until` (advisory: a failure to record it is logged, never raised).

        Args:
            session_id: the session's id.
            cooldown_until: epoch seconds until which compression is not retried.
            error: why compression failed, as text.
        """
        if (
            isinstance(cooldown_until, int | float)
            and not isinstance(cooldown_until, bool)
            and not (math.isfinite(cooldown_until) and time_in_range(cooldown_until))
        ):
            # refused as every time outside what the backends compute with is, but
            # advisory: logged, not raised
            log.warning(
                "compression cooldown for %s not recorded: %r is not a time from year 1 to 9999",
                session_id,
                cooldown_until,
            )
            return
        try:
            self._update(
                session_id,
                compression_failure_cooldown_until=cooldown_until,
                compression_failure_error=_text(error),
            )
        except ADVISORY_FAILURES as exc:  # advisory; never fail the turn
            log.warning("could not record compression cooldown for %s: %s", session_id, exc)

    def get_compression_failure_cooldown(self, session_id: str) -> CompressionCooldown | None:
        """`{cooldown_until, remaining_seconds, error}` while a cooldown runs, else None.

        Args:
            session_id: the session's id.
        """
        row = self.store.read_one(_COOLDOWN, {"id": session_id}, first_tuple)
        if row is None or row[0] is None:
            return None
        cooldown_until, error = row
        try:
            until = float(cooldown_until)
        except (TypeError, ValueError):
            return None
        remaining = until - now()
        if remaining <= 0:
            return None
        return {
            "cooldown_until": until,
            "remaining_seconds": remaining,
            "error": error,
        }

    def clear_compression_failure_cooldown(self, session_id: str) -> None:
        """End a compression cooldown (advisory, as recording it).

        Args:
            session_id: the session's id.
        """
        try:
            self._update(
                session_id,
                compression_failure_cooldown_until=None,
                compression_failure_error=None,
            )
        except ADVISORY_FAILURES as exc:
            log.warning("could not clear compression cooldown for %s: %s", session_id, exc)

    def _get_counter(self, session_id: str, column: str) -> int:
        value = self.store.read_one(_session_value(column), {"id": session_id}, first_value)
        if value is None:
            return 0
        try:
            return max(0, int(value))
        except (TypeError, ValueError):
            return 0

    def get_compression_fallback_streak(self, session_id: str) -> int:
        """How many compressions in a row fell back to the simple summary (0 if unknown).

        Args:
            session_id: the session's id.
        """
        return self._get_counter(session_id, "compression_fallback_streak")

    def set_compression_fallback_streak(self, session_id: str, value: int) -> None:
        """Set the fallback streak (negative values count as 0).

        Args:
            session_id: the session's id.
            value: the number of consecutive compressions that fell back.
        """
        self._update(session_id, compression_fallback_streak=max(0, int(value)))

    def get_compression_ineffective_count(self, session_id: str) -> int:
        """How many compressions in a row saved too little (0 if unknown).

        Args:
            session_id: the session's id.
        """
        return self._get_counter(session_id, "compression_ineffective_count")

    def set_compression_ineffective_count(self, session_id: str, value: int) -> None:
        """Set the ineffective-compression count (negative values count as 0).

        Args:
            session_id: the session's id.
            value: the number of compressions that saved too little.
        """
        self._update(session_id, compression_ineffective_count=max(0, int(value)))

    # ----------------------------------------------------------------- lineage

    def get_compression_tip(self, session_id: str) -> str:
        """The live end of the session's compression chain (the id itself if none).

        Args:
            session_id: the session's id.
        """
        ids = walked(self.store.read_one(TIP_WALK, {"sid": session_id}, _first_values))
        if ids is None:  # a cycle: the walk that skips what it has seen
            return self.store.read(lambda conn: compression_tip(conn, session_id))
        return str(ids[-1]) if ids else session_id

    def get_compression_lineage(self, session_id: str) -> list[str]:
        """The compression chain the session belongs to, root first ([] if unknown).

        Args:
            session_id: the session's id.
        """
        return self.store.read(lambda conn: compression_lineage(conn, session_id))

    def find_live_compression_child(self, parent_session_id: str) -> SessionRow | None:
        """The unique open continuation of a compressed session; None when there is
        none or when several compete (the caller must not guess).

        Args:
            parent_session_id: the parent session's id.
        """
        params = {"parent": parent_session_id}
        # the ids first: a whole row's fifty columns cost a driver more to describe than
        # the narrow read costs, and most sessions asked have no continuation or several;
        # the rows are then read again whole, the answer taken from that read alone
        if len(self.store.read_one(LIVE_CONTINUATIONS, params, all_tuples)) != 1:
            return None
        rows = self.store.read_one(LIVE_CONTINUATION_ROWS, params, all_dicts)
        return cast("SessionRow", rows[0]) if len(rows) == 1 else None

    def get_session_delete_targets(self, session_id: str) -> list[str]:
        """What deleting the session removes: itself, then its delegate runs.

        Args:
            session_id: the session's id.
        """
        rows = self.store.read_one(DELETE_TARGET_ROWS, {"id": session_id}, all_tuples)
        if not any(row[0] == 0 for row in rows):
            return []
        marked = [(str(sid), parent, str(of)) for kind, sid, parent, of in rows if kind == 1]
        return [session_id, *sorted(delegates_among(marked, [session_id]) - {session_id})]

    def ancestors(self, session_id: str) -> list[str]:
        """Every ancestor through `parent_session_id`, nearest first.

        Args:
            session_id: the session's id.
        """
        parents = self.store.read_one(ANCESTRY, {"sid": session_id}, _first_values)
        return ancestors_from(session_id, parents)

    def descendants(self, session_id: str) -> list[str]:
        """Every descendant through `parent_session_id`, level by level.

        Args:
            session_id: the session's id.
        """
        return self.store.read(lambda conn: descendant_ids(conn, session_id))

    def get_conversation_root(self, session_id: str) -> str:
        """The farthest ancestor (the id itself for a root or an unknown id).

        Args:
            session_id: the session's id.
        """
        chain = self.ancestors(session_id)
        return chain[-1] if chain else session_id

    def resolve_resume_session_id(self, session_id: str) -> str:
        """Where a resume should land: the compression tip, then the deepest newest
        continuation that actually has messages (a child created but never written to
        would resume into an empty transcript).

        Args:
            session_id: the session's id.
        """
        if not session_id:
            return session_id
        rows = self.store.read_one(RESUME_WALK, {"sid": session_id}, all_tuples)
        found = resume_answer(session_id, rows)
        if found is None:  # a cycle: the walks that skip what they have seen
            return self.store.read(lambda conn: resume_target(conn, session_id))
        return found

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
        include_delegates: bool = False,
        tags: Sequence[str] | None = None,
    ) -> list[ListingRow]:
        """A page of listing rows (the full row or `compact_rows`, plus `preview` and
        `last_active`), newest start first or, with `order_by_last_active`, by the newest
        activity in each conversation's compression chain (where `id_query` and
        `search_query` filter by id / title over the chain). Roots and branches only
        unless `include_children`; a compressed root is shown as its live tip.

        `include_delegates` (hermes-store's, not the original's) also lists the sessions
        tagged as delegate runs (`_delegate_from` in `model_config`), which the original
        hides: among them untitled root sessions with tool calls and at most 25 messages,
        a cron job's run say, that revision 0016, like the original's v16 migration,
        tagged as orphaned delegate runs (`_delegate_from = '__orphaned__'`).

        Args:
            source: the source (cli, telegram, discord, cron, ...).
            sources: only sessions from these sources.
            exclude_sources: leave out sessions from these sources.
            cwd_prefix: only sessions whose working directory is this path or lies under it.
            limit: at most this many rows.
            offset: skip this many rows first.
            include_children: also sessions that have a parent (continuations, branches).
            min_message_count: only sessions with at least this many messages.
            project_compression_tips: show a compressed root as its live continuation.
            order_by_last_active: order by the latest activity in each compression chain
                instead of by start time.
            include_archived: also archived sessions.
            archived_only: only archived sessions.
            id_query: only sessions whose id (or that of another session in their
                compression chain) contains this text.
            search_query: only sessions whose title (or that of another session in their
                compression chain) contains this text.
            compact_rows: return the listing's compact columns instead of the whole row.
            include_pinned: also append the pinned sessions that match the same filters but
                fall outside the page.
            include_delegates: also sessions tagged as delegate runs, hidden by default.
            tags: only sessions carrying every one of these tags (hermes-store's own,
                `TagRepository`).
        """
        self._flush()
        filters = ListingFilters(
            source=source,
            sources=sources,
            exclude_sources=exclude_sources,
            cwd_prefix=cwd_prefix,
            min_message_count=min_message_count,
            include_archived=include_archived,
            archived_only=archived_only,
            listable_only=not include_children,
            include_delegates=include_delegates,
            tags=None if tags is None else check_tags(tags),
        )
        rows = self.store.read(
            lambda conn: list_page(
                conn,
                filters,
                limit=limit,
                offset=offset,
                compact=compact_rows,
                by_chain_activity=order_by_last_active,
                id_query=id_query,
                search_query=search_query,
                include_pinned=include_pinned,
                project_tips=project_compression_tips,
            )
        )
        return cast("list[ListingRow]", rows)

    def get_session_rich_row(
        self, session_id: str, compact_rows: bool = False
    ) -> ListingRow | None:
        """One listing row (not projected onto its tip), or None.

        Args:
            session_id: the session's id.
            compact_rows: return the listing's compact columns instead of the whole row.
        """
        self._flush()
        statement = rich_row_by_id(compact_rows)
        rows = with_previews(self.store.read_one(statement, {"id": session_id}, all_dicts))
        return cast("ListingRow", rows[0]) if rows else None

    def search_sessions_by_id(
        self,
        query: str,
        limit: int = 20,
        include_archived: bool = True,
        source: str | None = None,
        sources: Sequence[str] | None = None,
        exclude_sources: Sequence[str] | None = None,
    ) -> list[ListingRow]:
        """Listing rows whose id (or an id of their forward compression chain) holds
        `query`, case-insensitively: exact ids first, then prefixes, then the rest, each
        group in last-activity order (docs/reference/behaviour.md 6.6).

        Args:
            query: the search text.
            limit: at most this many rows.
            include_archived: also archived sessions.
            source: the source (cli, telegram, discord, cron, ...).
            sources: only sessions from these sources.
            exclude_sources: leave out sessions from these sources.
        """
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

        def rank(row: ListingRow) -> int:
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
    ) -> list[ListingRow]:
        """Every session (children and archived included), most recently active first,
        optionally of one source or one workspace (a git root, else a directory tree).
        Despite its name this filters, it does not search text: see `SearchRepository`.

        Args:
            source: the source (cli, telegram, discord, cron, ...).
            limit: at most this many rows.
            offset: skip this many rows first.
            workspace_key: only sessions of this workspace: its git root, or (with no root
                recorded) a working directory at or under it.
        """
        wanted = row_limit(limit)
        limit_in_sql = None if wanted is None else written(wanted)
        statement = activity_page(
            bool(source), bool(workspace_key), wanted is not None, limit_in_sql
        )
        params = activity_page_params(source, workspace_key, wanted, row_offset(offset))
        rows = self.store.read_one(statement, params, all_dicts)
        return cast("list[ListingRow]", rows)

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
        """How many sessions the listing filters select.

        Args:
            source: the source (cli, telegram, discord, cron, ...).
            sources: only sessions from these sources.
            cwd_prefix: only sessions whose working directory is this path or lies under it.
            min_message_count: only sessions with at least this many messages.
            include_archived: also archived sessions.
            archived_only: only archived sessions.
            exclude_children: leave out sessions that have a parent (compression
                continuations, branches, delegate runs).
            exclude_sources: leave out sessions from these sources.
        """
        filters = ListingFilters(
            source=source,
            sources=sources,
            exclude_sources=exclude_sources,
            cwd_prefix=cwd_prefix,
            min_message_count=min_message_count,
            include_archived=include_archived,
            archived_only=archived_only,
            listable_only=exclude_children,
        )
        statement, params = count_statement(filters.shape()), filters.params()
        return int(self.store.read_one(statement, params, first_value))

    def session_count_by_source(
        self,
        *,
        include_archived: bool = False,
        archived_only: bool = False,
        exclude_children: bool = False,
    ) -> dict[str, int]:
        """Sessions per source, most first ('' and NULL sources count as `cli`).

        Args:
            include_archived: also archived sessions.
            archived_only: only archived sessions.
            exclude_children: leave out sessions that have a parent (compression
                continuations, branches, delegate runs).
        """
        filters = ListingFilters(
            include_archived=include_archived,
            archived_only=archived_only,
            listable_only=exclude_children,
        )
        statement = source_counts_statement(filters.shape())
        params = filters.params()
        return {str(key): int(n) for key, n in self.store.read_one(statement, params, all_tuples)}

    def list_cron_job_runs(self, job_id: str, limit: int = 20, offset: int = 0) -> list[Row]:
        """Runs of one cron job, newest first: an index range over the id prefix, so the
        cost follows the page size, not the whole cron history.

        Args:
            job_id: the cron job's id.
            limit: at most this many rows.
            offset: skip this many rows first.
        """
        prefix = f"cron_{job_id}_"
        rows = bound_limit(limit)
        params = {
            "low": prefix,
            "high": prefix[:-1] + chr(ord(prefix[-1]) + 1),
            "limit": rows,
            "offset": row_offset(offset),
        }
        statement = _cron_runs(written(rows))
        return with_previews(self.store.read_one(statement, params, all_dicts))

    def distinct_session_cwds(self, include_archived: bool = False) -> list[dict[str, Any]]:
        """Each working directory with its number of sessions and last activity.

        Args:
            include_archived: also archived sessions.
        """
        statement = _session_cwds(bool(include_archived))
        return [
            {"cwd": cwd, "sessions": int(sessions or 0), "last_active": float(last or 0)}
            for cwd, sessions, last in self.store.read_one(statement, {}, all_tuples)
        ]

    def list_skill_scaffolded_sessions(self, limit: int = 200) -> list[Row]:
        """Titled sessions whose first user message (by timestamp, then id; NULL content
        skipped) is a `/skill` invocation, newest start first: their titles were made
        from the expanded skill body rather than the request. Rows are `{id, title,
        content}` with the full first-turn content (decoded), so a caller can re-derive
        what the user typed and re-title the session (docs/reference/behaviour.md 7.2).

        Args:
            limit: at most this many rows.
        """
        params = {"limit": bound_limit(limit)}
        statement = _skill_scaffolded(written(params["limit"]))
        return [
            {"id": sid, "title": title, "content": decode_content(content)}
            for sid, title, content in self.store.read_one(statement, params, all_tuples)
        ]

    def get_first_assistant_text(self, session_id: str) -> str:
        """The text of the session's first assistant message with content (by timestamp,
        then id; inactive rows included, as in the original); "" when there is none or
        its content is structured (docs/reference/behaviour.md 7.2, used to re-title
        `/skill` sessions).

        Args:
            session_id: the session's id.
        """
        stored = self.store.read_one(_FIRST_ASSISTANT_TEXT, {"id": session_id}, first_value)
        decoded = decode_content(stored)
        return decoded if isinstance(decoded, str) else ""


__all__ = ["SessionRepository", "full_row"]
