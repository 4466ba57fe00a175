"""Session titles (docs/reference/behaviour.md sections 5.1 and 5.2).

Non-NULL titles are unique (`idx_sessions_title_unique`); the one exception to "taken
means refused" is a compression continuation, which takes the title over from its
ancestor, because both segments are one conversation to the user.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from sqlalchemy import (
    ColumnElement,
    Connection,
    and_,
    bindparam,
    exists,
    literal_column,
    or_,
    select,
    update,
)

from ..errors import InvalidTitle, TitleInUse
from ..runtime.engine import (
    DriverWrite,
    Prepared,
    all_dicts,
    all_tuples,
    first_tuple,
    first_value,
)
from . import turns
from ._dialect import lock_key
from ._paging import NO_OFFSET
from ._sql import alias, all_columns, escape_like
from ._tables import SESSIONS, S
from .encoding import scrub
from .lineage import compression_ancestors

if TYPE_CHECKING:
    from ..store import Store

MAX_TITLE_LENGTH = 100

# Rule 3: C0 controls and DEL; tab, LF and CR survive until the whitespace collapse.
_CONTROL = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")
# Rule 4: zero-width, bidirectional-override and other invisible formatting characters.
_INVISIBLE = re.compile("[\u200b-\u200f\u2028-\u202e\u2060-\u2069\ufeff\ufffc\ufff9-\ufffb]")
_NUMBERED = re.compile(r"^(?P<base>.*) #(?P<n>\d+)$", re.S)


def sanitize_title(title: Any) -> str | None:
    """The cleaned title, None when nothing is left; InvalidTitle when too long."""
    if not title:
        return None
    if not isinstance(title, str):
        raise TypeError(f"title must be a string, got {type(title).__name__}")
    cleaned = scrub(title) or ""
    cleaned = _CONTROL.sub("", cleaned)
    cleaned = _INVISIBLE.sub("", cleaned)
    cleaned = " ".join(cleaned.split())
    if not cleaned:
        return None
    if len(cleaned) > MAX_TITLE_LENGTH:
        raise InvalidTitle(f"Title too long ({len(cleaned)} chars, max {MAX_TITLE_LENGTH})")
    return cleaned


def _numbered_pattern(base: str) -> str:
    """LIKE pattern for `<base> #...` with the base's own wildcards made literal."""
    return escape_like(base) + " #%"


# Titles are read and set on every turn of a titled conversation, so these statements
# are prepared once per dialect.
_TITLE_OF = Prepared(select(S.title).where(S.id == bindparam("id")))
_BY_TITLE = Prepared(all_columns(SESSIONS).where(S.title == bindparam("title")))
_HOLDER = Prepared(
    select(S.id).where(S.title == bindparam("title"), S.id != bindparam("id")).limit(1)
)
_SET_TITLE = Prepared(
    update(SESSIONS).where(S.id == bindparam("id")).values(title=bindparam("new_title"))
)
_SET_IF_UNTITLED = Prepared(
    update(SESSIONS)
    .where(S.id == bindparam("id"), S.title.is_(None))
    .values(title=bindparam("new_title"))
)
_ONE: ColumnElement[Any] = literal_column("1")
_NUMBERED_NEWEST_ID = (
    select(S.id)
    .where(S.title.like(bindparam("pattern"), escape="\\"))
    .order_by(S.started_at.desc(), S.id.desc())
    .limit(_ONE)
    .offset(NO_OFFSET)
)
_EXACT_ID = select(S.id).where(S.title == bindparam("title")).limit(_ONE).offset(NO_OFFSET)
_LINEAGE_TITLES = Prepared(
    select(S.title).where(
        or_(S.title == bindparam("title"), S.title.like(bindparam("pattern"), escape="\\"))
    )
)


#: resolve_session_by_title in one statement: the newest `<title> #<n>` holder's id, whether
#: a session holds `title` itself (titles are unique: one at most), and its id.
_NEWEST_IN_LINEAGE = Prepared(
    select(
        _NUMBERED_NEWEST_ID.scalar_subquery(),
        exists(_EXACT_ID),
        _EXACT_ID.scalar_subquery(),
    )
)


# The title writes as statements alone (`DriverWrite`, SQLite): the first gives the
# answer, or no row where another session holds the title (the write is then made through
# a Connection by `_set_title` / `_set_title_if_untitled`, which hand the title over from
# a compression ancestor or raise TitleInUse); the UPDATE follows in the same transaction.
_HOLDER_ROW = alias(SESSIONS, "holder")
_HELD_BY_ANOTHER = exists(
    select(_HOLDER_ROW.c.id).where(
        _HOLDER_ROW.c.title == bindparam("new_title"), _HOLDER_ROW.c.id != bindparam("id")
    )
)
#: Whether session :id exists (set_session_title's answer), if no other holds :new_title.
_TITLE_FREE = Prepared(
    select(exists(select(S.id).where(S.id == bindparam("id")))).where(~_HELD_BY_ANOTHER)
)
#: Whether session :id is untitled (set_auto_title_if_empty's answer), unless it is and
#: another holds :new_title; no row for an unknown id either (the Connection path says
#: False).
_UNTITLED_FREE = Prepared(
    select(S.title.is_(None)).where(
        S.id == bindparam("id"), ~and_(S.title.is_(None), _HELD_BY_ANOTHER)
    )
)


def _claim_title(conn: Connection, session_id: str, title: str) -> None:
    """Free `title` for `session_id`: a compression ancestor hands it over, anyone else
    keeps it and the caller gets TitleInUse. On PostgreSQL two writers claiming one title
    are serialised by a lock on the title (SQLite: the write lock already is)."""
    lock_key(conn, "title:" + title)
    holder = _HOLDER.scalar(conn, {"title": title, "id": session_id})
    if holder is None:
        return
    if holder not in compression_ancestors(conn, session_id):
        raise TitleInUse(title, holder)
    _SET_TITLE.run(conn, {"id": holder, "new_title": None})


def _set_title(conn: Connection, session_id: str, title: str | None) -> bool:
    if title is not None:
        _claim_title(conn, session_id, title)
    return _SET_TITLE.run(conn, {"id": session_id, "new_title": title}) > 0


def _set_title_if_untitled(conn: Connection, session_id: str, title: str) -> bool:
    row = _TITLE_OF.first(conn, {"id": session_id})
    if row is None or row[0] is not None:
        return False
    _claim_title(conn, session_id, title)
    return _SET_IF_UNTITLED.run(conn, {"id": session_id, "new_title": title}) > 0


class TitleRepository:
    """Session titles: unique when set, with numbered successors for a lineage.

    Args:
        store: the Store the repository works on.
    """

    def __init__(self, store: Store) -> None:
        self.store = store

    def set_session_title(
        self, session_id: str, title: Any, *, turn_token: int | None = None
    ) -> bool:
        """True if the row was updated; False for an unknown id. An empty title clears
        it. The conflict check runs first, so a taken title raises even for an unknown id.

        Args:
            session_id: the session's id.
            title: the title.
            turn_token: a token from TurnRepository.acquire_turn; the write is made only while
                it is the session's current turn (StaleTurn otherwise, nothing written).
        """
        clean = sanitize_title(title)
        token = turns.check_token(turn_token)

        def work(conn: Connection) -> bool:
            if token is not None:
                turns.require_turn(conn, session_id, token)
            return _set_title(conn, session_id, clean)

        if token is not None:
            return self.store.write(work)
        params = {"id": session_id, "new_title": clean}
        return bool(self.store.write(work, call=self._title_write(_TITLE_FREE, _SET_TITLE, params)))

    def set_auto_title_if_empty(self, session_id: str, title: Any) -> bool:
        """Like set_session_title, but never replaces a title (a user's rename made while
        the title was being generated wins); the emptiness check shares the transaction.

        Args:
            session_id: the session's id.
            title: the title.
        """
        clean = sanitize_title(title)
        if clean is None:
            return False
        params = {"id": session_id, "new_title": clean}
        call = self._title_write(_UNTITLED_FREE, _SET_IF_UNTITLED, params)
        return bool(
            self.store.write(
                lambda conn: _set_title_if_untitled(conn, session_id, clean), call=call
            )
        )

    def _title_write(
        self, answer: Prepared, change: Prepared, params: dict[str, Any]
    ) -> Callable[[], DriverWrite | None] | None:
        """The `call` of `Store.write` that sends `answer` and `change` at the driver
        (SQLite); None elsewhere."""
        store = self.store
        if not store.dialect.in_process:
            return None
        dialect = store.engine.dialect
        write = DriverWrite(lambda: (answer.bound(dialect, params), change.bound(dialect, params)))
        return lambda: write

    def get_session_title(self, session_id: str) -> str | None:
        """The session's title; None when it has none or is unknown.

        Args:
            session_id: the session's id.
        """
        title = self.store.read_one(_TITLE_OF, {"id": session_id}, first_value)
        return None if title is None else str(title)

    def get_session_by_title(self, title: str) -> dict[str, Any] | None:
        """The full row of the session with exactly this title, None if there is none.

        Args:
            title: the title.
        """
        if not title:
            return None
        rows = self.store.read_one(_BY_TITLE, {"title": title}, all_dicts)
        return rows[0] if rows else None

    def resolve_session_by_title(self, title: str) -> str | None:
        """The newest `<title> #N` session if any exists (the live end of a numbered
        lineage, even over an exact match), else the exact match.

        Args:
            title: the title.
        """
        if not title:
            return None
        params = {"pattern": _numbered_pattern(title), "title": title}
        row = self.store.read_one(_NEWEST_IN_LINEAGE, params, first_tuple)
        assert row is not None  # a SELECT without FROM gives one row
        numbered, held, exact = row
        if numbered is not None:
            return str(numbered)
        return str(exact) if held else None

    def get_next_title_in_lineage(self, base_title: str) -> str:
        """`<base> #<n+1>` after the highest number in use; the unnumbered original
        counts as #1. The base itself when nothing carries it yet.

        Args:
            base_title: the title whose numbered successor (`title #2`, ...) is wanted.
        """
        match = _NUMBERED.match(base_title)
        base = match.group("base") if match else base_title
        params = {"title": base, "pattern": _numbered_pattern(base)}
        titles = [str(row[0]) for row in self.store.read_one(_LINEAGE_TITLES, params, all_tuples)]
        if not titles:
            return base
        highest = 1
        for existing in titles:
            suffix = existing[len(base) + 2 :] if existing != base else ""
            if suffix.isdecimal():
                highest = max(highest, int(suffix))
        return f"{base} #{highest + 1}"
