"""Session tags (`hermes_store_session_tags`, revision hs0007): any number of short
labels per session, hermes-store's own. The original Hermes ignores them; they go with
their session when it is deleted (ON DELETE CASCADE), move into the trash and back with
it, and travel with `copy` and with exports (an entry's `tags` list).

A tag is trimmed of surrounding whitespace and compared exactly (case matters); see
`_tag_names.check_tag` for what is refused.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING

from sqlalchemy import Connection, Insert, bindparam, delete, func, select

from ..contract import TAGS_TABLE
from ..errors import SessionNotFound
from ._dialect import lock_session, upsert_insert
from ._own_tables import needing
from ._sql import chunks
from ._tables import TAGS, TG, S
from ._tag_names import check_tag, check_tags

if TYPE_CHECKING:
    from ..store import Store


def _add(conn: Connection) -> Insert:
    """Add a tag unless the session has it already (rows of `s` and `t`)."""
    return (
        upsert_insert(conn, TAGS)
        .values(session_id=bindparam("s"), tag=bindparam("t"))
        .on_conflict_do_nothing(index_elements=[TG.session_id, TG.tag])
    )


_TAGS_OF = select(TG.tag).where(TG.session_id == bindparam("s")).order_by(TG.tag)


def _require_session(conn: Connection, session_id: str) -> None:
    if conn.execute(select(S.id).where(S.id == session_id)).first() is None:
        raise SessionNotFound(session_id)


def _lock_session(conn: Connection, session_id: str) -> None:
    """SessionNotFound unless the session exists, and its row lock (PostgreSQL) held, so
    that a delete or a move to the trash cannot remove it between this check and the tag
    write (which would end in a foreign-key error instead). A row the lock did not find
    is missing even where a later statement would see it (`lock_session`)."""
    if not lock_session(conn, session_id):
        raise SessionNotFound(session_id)
    _require_session(conn, session_id)


def has_tags_table(conn: Connection) -> bool:
    """Whether the database has the tags table (one opened read-only may predate hs0007)."""
    return bool(conn.dialect.has_table(conn, TAGS_TABLE))


def tags_of(conn: Connection, session_id: str) -> list[str]:
    return [str(t) for t in conn.execute(_TAGS_OF, {"s": session_id}).scalars()]


def tags_by_session(conn: Connection, ids: Sequence[str]) -> dict[str, list[str]]:
    """session id -> its tags in order, for the ids that have any."""
    stmt = (
        select(TG.session_id, TG.tag)
        .where(TG.session_id.in_(bindparam("ids", expanding=True)))
        .order_by(TG.session_id, TG.tag)
    )
    found: dict[str, list[str]] = {}
    for chunk in chunks(ids):
        for sid, tag in conn.execute(stmt, {"ids": chunk}):
            found.setdefault(str(sid), []).append(str(tag))
    return found


def add_tags(conn: Connection, session_id: str, tags: Iterable[str]) -> None:
    rows = [{"s": session_id, "t": t} for t in tags]
    if rows:
        conn.execute(_add(conn), rows)


def _session_id(session_id: object) -> str:
    if not isinstance(session_id, str) or not session_id:
        raise SessionNotFound(str(session_id))
    return session_id


class TagRepository:
    """Tags of sessions: add, remove, replace, read, and which sessions carry a tag.
    Every call on a session that does not exist (or is in the trash) raises
    SessionNotFound; a bad tag (empty, over 100 characters, a control character)
    InvalidInput.

    Args:
        store: the Store the repository works on.
    """

    def __init__(self, store: Store) -> None:
        self.store = store

    def _tables(self) -> tuple[str, ...]:
        return (TAGS_TABLE,)

    def add_tags(self, session_id: str, tags: Iterable[str]) -> list[str]:
        """Add `tags` to the session (ones it has are kept once); its tags afterwards,
        sorted.

        Args:
            session_id: the session's id.
            tags: the tags to add.
        """
        sid, wanted = _session_id(session_id), check_tags(tags)

        def work(conn: Connection) -> list[str]:
            _lock_session(conn, sid)
            add_tags(conn, sid, wanted)
            return tags_of(conn, sid)

        return needing(self.store, self._tables(), "a tag", lambda: self.store.write(work))

    def remove_tags(self, session_id: str, tags: Iterable[str]) -> list[str]:
        """Remove `tags` from the session (ones it lacks are ignored); its tags
        afterwards, sorted.

        Args:
            session_id: the session's id.
            tags: the tags to remove.
        """
        sid, unwanted = _session_id(session_id), check_tags(tags)

        def work(conn: Connection) -> list[str]:
            _lock_session(conn, sid)
            if unwanted:
                conn.execute(delete(TAGS).where(TG.session_id == sid, TG.tag.in_(unwanted)))
            return tags_of(conn, sid)

        return needing(self.store, self._tables(), "a tag", lambda: self.store.write(work))

    def set_tags(self, session_id: str, tags: Iterable[str]) -> list[str]:
        """Make `tags` the session's tags (all others removed); them, sorted.

        Args:
            session_id: the session's id.
            tags: the session's tags from now on (empty: none).
        """
        sid, wanted = _session_id(session_id), check_tags(tags)

        def work(conn: Connection) -> list[str]:
            _lock_session(conn, sid)
            conn.execute(delete(TAGS).where(TG.session_id == sid))
            add_tags(conn, sid, wanted)
            return tags_of(conn, sid)

        return needing(self.store, self._tables(), "a tag", lambda: self.store.write(work))

    def get_tags(self, session_id: str) -> list[str]:
        """The session's tags, sorted.

        Args:
            session_id: the session's id.
        """
        sid = _session_id(session_id)

        def work(conn: Connection) -> list[str]:
            _require_session(conn, sid)
            return tags_of(conn, sid)

        return needing(self.store, self._tables(), "a tag", lambda: self.store.read(work))

    def list_tags(self) -> list[tuple[str, int]]:
        """Every tag in use with how many live sessions carry it, by tag."""
        stmt = select(TG.tag, func.count()).group_by(TG.tag).order_by(TG.tag)
        return needing(
            self.store,
            self._tables(),
            "a tag",
            lambda: self.store.read(lambda conn: [(str(t), int(n)) for t, n in conn.execute(stmt)]),
        )

    def sessions_with_tag(self, tag: str) -> list[str]:
        """The ids of the live sessions carrying `tag`, in id order.

        Args:
            tag: the tag.
        """
        wanted = check_tag(tag)
        stmt = select(TG.session_id).where(TG.tag == wanted).order_by(TG.session_id)
        return needing(
            self.store,
            self._tables(),
            "a tag",
            lambda: self.store.read(lambda conn: [str(s) for s in conn.execute(stmt).scalars()]),
        )
