"""The change feed (`hermes_store_changes`, revision hs0002): what was created, appended,
updated and deleted, in commit order, for tools that follow the store.

Cursor: a change's `position`. `changes(since=c)` lists the changes after position `c`
(0: from the oldest kept), oldest first; a reader stores the position of the last change
it has handled and resumes from it, so nothing is missed and nothing repeated, across
restarts. Positions grow in commit order on both backends (see the revision): a reader
that sees position n has every position below n visible too, so "position > cursor"
never skips a change committed late. Positions may have gaps (a trimmed range); never
compute them, only compare.

Retention: the triggers keep at least the newest `retention_rows` changes (1,000,000 by
default; `set_retention`), and `trim` drops older ones on demand. A cursor below the
trimmed range raises ChangeCursorExpired: the reader has missed changes and must read
the state again. Listing, the expiry check and the newest position come from one
statement, so one snapshot: a page is never cut by a trim that runs beside it.

Following: `follow` polls (SQLite: one indexed range read per interval, whose cost does
not grow with the table); on PostgreSQL it also LISTENs on FEED_CHANNEL, so a commit
wakes it at once; it polls while the listening connection cannot be made or has failed,
and LISTENs again once the server takes a connection (after a restart, say).
`follow_async` is the same for asyncio code.
"""

from __future__ import annotations

import asyncio
import logging
import math
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, Protocol, TypeVar, cast

from sqlalchemy import (
    BigInteger,
    Connection,
    Select,
    Table,
    bindparam,
    case,
    delete,
    func,
    select,
    true,
    update,
)
from sqlalchemy.engine import URL

from ..contract import (
    CHANGES_TABLE,
    FEED_CHANNEL,
    FEED_RETENTION_ROWS,
    FEED_STATE_TABLE,
    FEED_TRIMMED_THROUGH,
)
from ..errors import ChangeCursorExpired, InvalidInput
from ..models import ChangeRecord, FeedState
from ._own_tables import needing

if TYPE_CHECKING:
    from ..store import Store

log = logging.getLogger(__name__)

T = TypeVar("T")

#: Every kind a change can have (the versioned part of the feed: a new kind is added
#: here and in the docs, an existing one never changes meaning).
KINDS = (
    "session.created",
    "session.updated",
    "session.deleted",
    "message.appended",
    "message.updated",
    "message.deleted",
    "usage.updated",
)
DEFAULT_BATCH = 500
MAX_BATCH = 10_000
DEFAULT_POLL_INTERVAL = 0.5
#: The longest a PostgreSQL follower waits for a notification before it looks at `stop`.
STOP_CHECK = 0.5
#: Pauses between attempts to LISTEN again after the connection was lost (seconds).
RELISTEN_FIRST_PAUSE = 0.25
RELISTEN_MAX_PAUSE = 10.0

_CHANGES = cast(Table, ChangeRecord.__table__)
_STATE_TABLE = cast(Table, FeedState.__table__)
_C = _CHANGES.c
_F = _STATE_TABLE.c


def _page_statement() -> Select[Any]:
    # one statement, one snapshot: the trimmed mark, the newest position and the page
    marks = select(
        select(func.coalesce(func.max(_F.value), 0))
        .where(_F.name == FEED_TRIMMED_THROUGH)
        .scalar_subquery()
        .label("trimmed"),
        select(func.max(_C.position)).scalar_subquery().label("latest"),
    ).subquery("s")
    page = (
        select(_C.position, _C.kind, _C.session_id, _C.message_id, _C.at)
        .where(_C.position > bindparam("since"))
        .order_by(_C.position)
        .limit(bindparam("n"))
        .subquery("c")
    )
    return (
        select(
            marks.c.trimmed,
            marks.c.latest,
            page.c.position,
            page.c.kind,
            page.c.session_id,
            page.c.message_id,
            page.c.at,
        )
        .select_from(marks.outerjoin(page, true()))
        .order_by(page.c.position)
    )


_PAGE = _page_statement()
# The counter's name is bound as `state_name`: a statement that updates the table keeps
# its columns' own names for the values it sets.
_STATE = select(_F.value).where(_F.name == bindparam("state_name"))
_NEW_VALUE = bindparam("v", type_=BigInteger())
_RAISE_STATE = (
    update(_STATE_TABLE)
    .where(_F.name == bindparam("state_name"))
    .values(value=case((_F.value < _NEW_VALUE, _NEW_VALUE), else_=_F.value))
)
_SET_STATE = update(_STATE_TABLE).where(_F.name == bindparam("state_name")).values(value=_NEW_VALUE)
_DELETE_THROUGH = delete(_CHANGES).where(_C.position <= bindparam("p"))
_FIRST_AT_OR_AFTER = (
    select(_C.position).where(_C.at >= bindparam("t")).order_by(_C.position).limit(1)
)
_FEED_TABLES = (CHANGES_TABLE, FEED_STATE_TABLE)
_NEWEST = select(func.max(_C.position))


@dataclass(frozen=True)
class Change:
    """One change: `kind` (one of KINDS) to `session_id` (and `message_id` for the
    message.* kinds) at `at` (epoch seconds), ordered by `position`, the cursor."""

    position: int
    kind: str
    session_id: str
    message_id: int | None
    at: float

    @property
    def cursor(self) -> int:
        """What to pass as `since` to resume after this change."""
        return self.position


#: Positions are 64-bit signed integers on both backends.
MAX_POSITION = 2**63 - 1


def _check_cursor(since: object, what: str = "a change-feed cursor") -> int:
    if isinstance(since, bool) or not isinstance(since, int) or not 0 <= since <= MAX_POSITION:
        raise InvalidInput(
            f"{what} is a position (an integer from 0 to 2**63 - 1), not {_shown(since)}"
        )
    return since


def _shown(value: object) -> str:
    """`value` for an error message, cut short: a message must stay readable."""
    text_ = repr(value) if not isinstance(value, int) else str(value)
    return text_ if len(text_) <= 80 else text_[:60] + f"... ({len(text_)} characters)"


def _check_batch(limit: object) -> int:
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_BATCH:
        raise InvalidInput(f"a change-feed page holds 1 to {MAX_BATCH} changes, not {limit!r}")
    return limit


def _seconds(value: object) -> float | None:
    """`value` as a finite float, None when it is not a finite number."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    try:
        seconds = float(value)
    except OverflowError:
        return None
    return seconds if math.isfinite(seconds) else None


def _check_interval(seconds: object) -> float:
    value = _seconds(seconds)
    if value is None or not value > 0:
        raise InvalidInput(
            f"a poll interval is a positive number of seconds, not {_shown(seconds)}"
        )
    return value


def _check_idle_timeout(seconds: object) -> float | None:
    if seconds is None:
        return None
    value = _seconds(seconds)
    if value is None or value < 0:
        raise InvalidInput(
            "idle_timeout is a number of seconds (>= 0) or None (never stop), "
            f"not {_shown(seconds)}"
        )
    return value


def _page(conn: Connection, since: int, limit: int) -> list[Change]:
    rows = conn.execute(_PAGE, {"since": since, "n": limit}).all()
    trimmed = int(rows[0][0])
    latest = max(trimmed, 0 if rows[0][1] is None else int(rows[0][1]))
    # 0 means "from the oldest change kept", whatever has been trimmed
    if 0 < since < trimmed:
        raise ChangeCursorExpired(since, trimmed)
    if since > latest:
        raise InvalidInput(
            f"the change-feed cursor {since} is ahead of the feed, whose newest position is "
            f"{latest}: it comes from another database (or one restored from a backup); "
            "read the state again and follow from latest()"
        )
    return [
        Change(
            position=int(r[2]),
            kind=str(r[3]),
            session_id=str(r[4]),
            message_id=None if r[5] is None else int(r[5]),
            at=float(r[6]),
        )
        for r in rows
        if r[2] is not None
    ]


def _latest(conn: Connection) -> int:
    newest = conn.execute(_NEWEST).scalar()
    trimmed = conn.execute(_STATE, {"state_name": FEED_TRIMMED_THROUGH}).scalar()
    return max(int(newest or 0), int(trimmed or 0))


def _trim(conn: Connection, through: int | None, older_than: float | None) -> int:
    newest = int(conn.execute(_NEWEST).scalar() or 0)
    target = newest if through is None else min(through, newest)
    if older_than is not None:
        first_kept = conn.execute(_FIRST_AT_OR_AFTER, {"t": older_than}).scalar()
        if first_kept is not None:
            target = min(target, int(first_kept) - 1)
    if target > 0:
        conn.execute(_RAISE_STATE, {"v": target, "state_name": FEED_TRIMMED_THROUGH})
        conn.execute(_DELETE_THROUGH, {"p": target})
    return int(conn.execute(_STATE, {"state_name": FEED_TRIMMED_THROUGH}).scalar() or 0)


# --------------------------------------------------------------------------- waiting


def _listen_conninfo(url: URL) -> str:
    """The libpq URI of the store's server, for a connection of psycopg's own."""
    return url.set(drivername="postgresql").render_as_string(hide_password=False)


class _Waiter(Protocol):
    def wait(self, seconds: float) -> None: ...

    def close(self) -> None: ...


class _Sleeper:
    """Polling: wait out the interval (or until `stop` is set)."""

    def __init__(self, stop: threading.Event | None) -> None:
        self._stop = stop or threading.Event()

    def wait(self, seconds: float) -> None:
        self._stop.wait(seconds)

    def close(self) -> None:
        pass


class _Relisten:
    """When a lost LISTEN connection is tried again: at once after it is lost (a server
    restart ends every connection; the follower's next read already reconnected the
    pool), then after doubling pauses while the server still refuses, up to
    RELISTEN_MAX_PAUSE seconds. Until it is back the follower polls, every pause."""

    def __init__(self) -> None:
        self.due = 0.0
        self.pause = RELISTEN_FIRST_PAUSE

    def ready(self) -> bool:
        return time.monotonic() >= self.due

    def failed(self) -> None:
        """Note a failed attempt: the next one comes after the pause, which doubles."""
        self.due = time.monotonic() + self.pause
        self.pause = min(self.pause * 2, RELISTEN_MAX_PAUSE)

    def until_due(self, seconds: float) -> float:
        """`seconds`, or less when the next attempt is due sooner."""
        return max(0.0, min(seconds, self.due - time.monotonic()))

    def lost(self) -> None:
        self.due, self.pause = 0.0, RELISTEN_FIRST_PAUSE


class _Listener:
    """PostgreSQL: LISTEN on a connection of its own (autocommit, outside the pool) and
    wake on the first notification or after the interval, whichever comes first. When
    that connection cannot be made or fails (a server restart), the follower polls and
    LISTENs again as soon as the server takes the connection (`_Relisten`)."""

    def __init__(self, url: URL, stop: threading.Event | None) -> None:
        self._sleeper = _Sleeper(stop)
        self._stop = stop
        self._url = url
        self._conn: Any = None
        self._relisten = _Relisten()
        self._listen()

    def _listen(self) -> bool:
        import psycopg

        try:
            self._conn = psycopg.connect(
                _listen_conninfo(self._url), autocommit=True, connect_timeout=10
            )
            self._conn.execute(f"LISTEN {FEED_CHANNEL}")
        except psycopg.Error as exc:
            log.info("change feed: LISTEN unavailable (%s); polling meanwhile", exc)
            self.close()
            return False
        return True

    def wait(self, seconds: float) -> None:
        import psycopg

        if self._conn is None:
            if self._relisten.ready():
                if self._listen():
                    # changes may have committed while nobody listened: read first
                    return
                self._relisten.failed()
            self._sleeper.wait(self._relisten.until_due(seconds))
            return
        deadline = time.monotonic() + seconds
        try:
            # in slices, so that a `stop` set meanwhile is seen within STOP_CHECK seconds
            while (left := deadline - time.monotonic()) > 0:
                if self._stop is not None and self._stop.is_set():
                    return
                for _ in self._conn.notifies(timeout=min(left, STOP_CHECK), stop_after=1):
                    return
        except psycopg.Error as exc:
            log.info("change feed: the LISTEN connection failed (%s); listening again", exc)
            self.close()
            self._relisten.lost()

    def close(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            conn.close()


class _AsyncListener:
    """`_Listener` for asyncio: psycopg's AsyncConnection, so waiting never blocks the
    loop; a lost connection is made again the same way."""

    def __init__(self) -> None:
        self._conn: Any = None
        self._url: URL | None = None
        self._relisten = _Relisten()

    async def start(self, url: URL) -> None:
        self._url = url
        await self._listen()

    async def _listen(self) -> bool:
        import psycopg

        assert self._url is not None
        try:
            self._conn = await psycopg.AsyncConnection.connect(
                _listen_conninfo(self._url), autocommit=True, connect_timeout=10
            )
            await self._conn.execute(f"LISTEN {FEED_CHANNEL}")
        except psycopg.Error as exc:
            log.info("change feed: LISTEN unavailable (%s); polling meanwhile", exc)
            await self.close()
            return False
        return True

    async def wait(self, seconds: float) -> None:
        if self._conn is None:
            # polling: SQLite, or PostgreSQL until LISTEN works (again); no psycopg needed
            if self._url is not None:
                if self._relisten.ready():
                    if await self._listen():
                        return
                    self._relisten.failed()
                seconds = self._relisten.until_due(seconds)
            await asyncio.sleep(seconds)
            return
        import psycopg

        try:
            async for _ in self._conn.notifies(timeout=seconds, stop_after=1):
                pass
        except psycopg.Error as exc:
            log.info("change feed: the LISTEN connection failed (%s); listening again", exc)
            await self.close()
            self._relisten.lost()

    async def close(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            await conn.close()


# --------------------------------------------------------------------------- the feed


class _Paging:
    """The paging step `follow` and `follow_async` share: read the page after the
    cursor, then, once its changes are handed on, say what comes next: "read" the next
    page at once (this one was full), "wait" for news, or "stop" (nothing new came for
    `idle_timeout` seconds). How to wait, and whether to stop early, is the caller's."""

    def __init__(self, feed: ChangeFeed, cursor: int, n: int, idle_timeout: float | None) -> None:
        self._feed = feed
        self._cursor = cursor
        self._n = n
        self._idle_timeout = idle_timeout
        self._last_news = time.monotonic()

    def read(self) -> list[Change]:
        """The next page (blocking: the async follower runs it on a worker thread)."""
        return self._feed.changes(self._cursor, self._n)

    def after(self, page: list[Change]) -> Literal["read", "wait", "stop"]:
        """What comes after `page`, once its changes were handed on."""
        if page:
            self._cursor = page[-1].position
            self._last_news = time.monotonic()
        if len(page) == self._n:
            return "read"
        idle = self._idle_timeout
        if idle is not None and time.monotonic() - self._last_news >= idle:
            return "stop"
        return "wait"


class ChangeFeed:
    """The store's change feed: list, follow, trim.

    Args:
        store: the Store the feed works on.
    """

    def __init__(self, store: Store) -> None:
        self.store = store

    def _read(self, work: Callable[[Connection], T]) -> T:
        return needing(self.store, _FEED_TABLES, "the change feed", lambda: self.store.read(work))

    def _write(self, work: Callable[[Connection], T]) -> T:
        return needing(self.store, _FEED_TABLES, "the change feed", lambda: self.store.write(work))

    def changes(self, since: int = 0, limit: int = DEFAULT_BATCH) -> list[Change]:
        """Up to `limit` changes after position `since`, oldest first (empty when there
        are none yet). ChangeCursorExpired when changes after `since` were trimmed;
        InvalidInput for a cursor ahead of the feed.

        Args:
            since: the cursor to list from (a change's `position`; 0 from the oldest kept).
            limit: at most this many changes (1 to MAX_BATCH).
        """
        cursor, n = _check_cursor(since), _check_batch(limit)
        return self._read(lambda conn: _page(conn, cursor, n))

    def latest(self) -> int:
        """The newest position: following from it yields only what commits from now on."""
        return self._read(_latest)

    def oldest_cursor(self) -> int:
        """The oldest cursor that still resumes (the last trimmed position, 0 if none)."""
        value = self._read(
            lambda conn: conn.execute(_STATE, {"state_name": FEED_TRIMMED_THROUGH}).scalar()
        )
        return int(value or 0)

    def trim(self, *, through: int | None = None, older_than: float | None = None) -> int:
        """Drop changes at or below position `through` and/or made before `older_than`
        (epoch seconds); with neither, every change. Returns the oldest cursor that still
        resumes; cursors below it raise ChangeCursorExpired from then on.

        Args:
            through: drop the changes at or below this position (None: no bound by
                position).
            older_than: drop the changes made before this epoch second (None: no bound
                by time).
        """
        if through is not None:
            _check_cursor(through, "through")
        before = None if older_than is None else _seconds(older_than)
        if older_than is not None and before is None:
            raise InvalidInput(
                f"older_than is epoch seconds (a finite number), not {_shown(older_than)}"
            )
        return self._write(lambda conn: _trim(conn, through, before))

    def set_retention(self, rows: int) -> None:
        """Keep at least the newest `rows` changes (the triggers trim older ones every
        1,000 positions). Applies to every writer of the database, the original's too.

        Args:
            rows: how many of the newest changes are kept at least (>= 1).
        """
        if isinstance(rows, bool) or not isinstance(rows, int) or not 1 <= rows <= MAX_POSITION:
            raise InvalidInput(
                f"retention is a number of changes (1 to 2**63 - 1), not {_shown(rows)}"
            )
        self._write(
            lambda conn: conn.execute(_SET_STATE, {"v": rows, "state_name": FEED_RETENTION_ROWS})
        )

    def follow(
        self,
        since: int = 0,
        *,
        poll_interval: float = DEFAULT_POLL_INTERVAL,
        batch: int = DEFAULT_BATCH,
        stop: threading.Event | None = None,
        idle_timeout: float | None = None,
    ) -> Iterator[Change]:
        """Every change after `since`, as it commits, forever: until `stop` is set, or
        until nothing new came for `idle_timeout` seconds. Resume a follower by passing
        the position of the last change it handled.

        Args:
            since: the cursor to resume from (a change's `position`; 0 from the oldest kept).
            poll_interval: seconds between polls where nothing pushes news (SQLite), and
                the longest wait for a missed notification on PostgreSQL.
            batch: at most this many changes are read at a time.
            stop: an Event another thread sets to end the follower (None: never).
            idle_timeout: stop after this many seconds without news (None: never).
        """
        cursor, n = _check_cursor(since), _check_batch(batch)
        interval = _check_interval(poll_interval)
        idle = _check_idle_timeout(idle_timeout)
        return self._follow(cursor, n, interval, stop, idle)

    def _follow(
        self,
        cursor: int,
        n: int,
        interval: float,
        stop: threading.Event | None,
        idle_timeout: float | None,
    ) -> Iterator[Change]:
        # listening starts before the first read, so a commit between them still wakes us
        waiter: _Waiter = (
            _Listener(self.store.url, stop)
            if self.store.dialect.sql.pushes_changes
            else _Sleeper(stop)
        )
        try:
            paging = _Paging(self, cursor, n, idle_timeout)
            while True:
                page = paging.read()
                yield from page
                step = paging.after(page)
                if step == "read":
                    continue
                if step == "stop" or (stop is not None and stop.is_set()):
                    return
                waiter.wait(interval)
        finally:
            waiter.close()

    async def follow_async(
        self,
        since: int = 0,
        *,
        poll_interval: float = DEFAULT_POLL_INTERVAL,
        batch: int = DEFAULT_BATCH,
        idle_timeout: float | None = None,
        run: Callable[[Callable[[], list[Change]]], Awaitable[list[Change]]] | None = None,
    ) -> AsyncIterator[Change]:
        """`follow` for asyncio: `async for change in feed.follow_async(since=c)`. The
        reads run through `run` (an AsyncStore's worker threads; a thread of asyncio's
        by default); waiting never blocks the loop. Stops when cancelled, or after
        `idle_timeout` seconds without news.

        Args:
            since: the cursor to resume from (a change's `position`; 0 from the oldest kept).
            poll_interval: seconds between polls where nothing pushes news (SQLite), and
                the longest wait for a missed notification on PostgreSQL.
            batch: at most this many changes are read at a time.
            idle_timeout: stop after this many seconds without news (None: never).
            run: a coroutine function that runs a blocking read off the event loop and
                returns its result (such as `AsyncStore.run`; None: `asyncio.to_thread`).
        """
        cursor, n = _check_cursor(since), _check_batch(batch)
        interval = _check_interval(poll_interval)
        idle = _check_idle_timeout(idle_timeout)
        runner = run or _to_thread
        listener = _AsyncListener()
        if self.store.dialect.sql.pushes_changes:
            await listener.start(self.store.url)
        try:
            paging = _Paging(self, cursor, n, idle)
            while True:
                page = await runner(paging.read)
                for change in page:
                    yield change
                step = paging.after(page)
                if step == "read":
                    continue
                if step == "stop":
                    return
                await listener.wait(interval)
        finally:
            await listener.close()


async def _to_thread(work: Callable[[], T]) -> T:
    return await asyncio.to_thread(work)
