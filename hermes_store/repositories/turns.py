"""Turn leases with fencing tokens (`hermes_store_turns`, revision hs0002).

One writer per turn: `acquire_turn(session_id, holder, ttl)` grants the session's turn
and returns a token one larger than any granted for that session before; writes given
`turn_token=` (appends, system prompt, session meta and title updates) check, inside
their own write transaction, that the token is still the session's current one, and are
refused with StaleTurn otherwise. A lease that has expired may be taken over by anyone;
the takeover's grant is a newer token, so the previous holder's late writes are refused
whatever its clock says. An expired lease nobody has taken over still writes: safety
comes from the token, the expiry only says when another holder may take the turn.

Serialisation: on SQLite every write transaction holds the database's write lock, so a
grant and a checked write never interleave. On PostgreSQL a grant locks the turn row
FOR UPDATE and a checked write reads it FOR SHARE, both held until commit: a write that
read the token before a grant commits before the grant does, and one that reads it after
sees the new token. Expiry is judged by the database server's clock on PostgreSQL (every
host agrees on it) and by this machine's on SQLite (the file is local).

Skewed clocks (SQLite): a process whose clock runs ahead writes an expiry that far
ahead. Every lease stores the ttl its grant (or last renewal) asked for (revision
hs0006), and is judged to expire at most that many seconds after it is read: a contender
that finds an expiry beyond now + ttl writes now + ttl back, so the lease ends within
its ttl of being seen, by whichever clock reads it. Leases from before hs0006 have no ttl
and are bounded by MAX_TTL.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypeVar, cast

from sqlalchemy import Connection, Table, bindparam, null, select, update

from ..contract import TURNS_TABLE, TURNS_TTL_COLUMN
from ..errors import InvalidInput, StaleTurn, TurnHeld
from ..models import TurnLease
from ..runtime.backends import dialect_for
from ..runtime.engine import Prepared
from ._dialect import PreparedUpsert
from ._own_tables import needing

if TYPE_CHECKING:
    from ..store import Store

T = TypeVar("T")

#: The longest lease granted at once; a turn that needs longer renews it.
MAX_TTL = 86_400.0
#: The longest holder name and session id a turn takes (characters): a holder names a
#: worker or a host, and both appear in every TurnHeld a contender gets; a longer session
#: id would not fit PostgreSQL's index on the turns table.
MAX_HOLDER_LENGTH = 500
MAX_SESSION_ID_LENGTH = 500

_TURNS = cast(Table, TurnLease.__table__)
_LEASE = _TURNS.c

# Every statement of a turn call, prepared once per dialect: `require_turn` runs inside
# each append made with a turn token.
_ENSURE = PreparedUpsert(
    lambda insert: (
        insert(_TURNS)
        .values(session_id=bindparam("s"), holder=null(), token=0, expires_at=0)
        .on_conflict_do_nothing(index_elements=[_LEASE.session_id])
    )
)
#: What the turn calls need (the ttl column from hs0006), for the refusal on an older
#: database (a read-only open accepts any database of v23 shape).
_TURN_TABLES = (TURNS_TABLE, f"{TURNS_TABLE}.{TURNS_TTL_COLUMN}")
_THIS_TURN = _LEASE.session_id == bindparam("s")
_READ_ROW = select(_LEASE.holder, _LEASE.token, _LEASE.expires_at, _LEASE.ttl).where(_THIS_TURN)
_READ = Prepared(_READ_ROW)
# FOR SHARE / FOR UPDATE on PostgreSQL; SQLite's compiler renders no row lock (the write
# transaction holds the database's write lock).
_READ_SHARED = Prepared(_READ_ROW.with_for_update(read=True))
_READ_LOCKED = Prepared(_READ_ROW.with_for_update())
_GRANT = Prepared(
    update(_TURNS)
    .where(_THIS_TURN)
    .values(
        holder=bindparam("h"),
        token=bindparam("t"),
        expires_at=bindparam("e"),
        ttl=bindparam("seconds"),
    )
)
_EXTEND = Prepared(
    update(_TURNS).where(_THIS_TURN).values(expires_at=bindparam("e"), ttl=bindparam("seconds"))
)
_BOUND = Prepared(update(_TURNS).where(_THIS_TURN).values(expires_at=bindparam("e")))
_RELEASE = Prepared(update(_TURNS).where(_THIS_TURN).values(holder=null(), expires_at=0))


@dataclass(frozen=True)
class Turn:
    """A session's turn as stored: `holder` is None once released; `expires_at` is the
    expiry bounded by the lease's ttl from when it was read (see the module docstring);
    `live` says whether the lease had not yet expired then."""

    session_id: str
    holder: str | None
    token: int
    expires_at: float
    live: bool


def _now(conn: Connection) -> float:
    return dialect_for(conn).sql.clock(conn)


def _shown(value: object) -> str:
    text_ = repr(value)
    return text_ if len(text_) <= 80 else text_[:60] + f"... ({len(text_)} characters)"


def _check_session_id(session_id: object) -> str:
    if not isinstance(session_id, str) or not session_id:
        raise InvalidInput(
            f"a turn needs a session id (a non-empty string), not {_shown(session_id)}"
        )
    if len(session_id) > MAX_SESSION_ID_LENGTH:
        raise InvalidInput(
            f"a turn's session id may be at most {MAX_SESSION_ID_LENGTH} characters long "
            f"(this one has {len(session_id)})"
        )
    return session_id


def _check_holder(holder: object) -> str:
    if not isinstance(holder, str) or not holder:
        raise InvalidInput(f"a turn's holder must be a non-empty string, not {_shown(holder)}")
    if len(holder) > MAX_HOLDER_LENGTH:
        raise InvalidInput(
            f"a turn's holder may be at most {MAX_HOLDER_LENGTH} characters long "
            f"(this one has {len(holder)}): name the worker or host, not more"
        )
    return holder


def _check_ttl(ttl: object) -> float:
    if isinstance(ttl, bool) or not isinstance(ttl, int | float):
        raise InvalidInput(f"a turn's ttl is a number of seconds, not {_shown(ttl)}")
    try:
        value = float(ttl)
    except OverflowError:
        value = math.inf
    if not math.isfinite(value) or value <= 0 or value > MAX_TTL:
        raise InvalidInput(
            f"a turn's ttl must be above 0 and at most {MAX_TTL:g} s, not {_shown(ttl)}"
        )
    return value


def _bounded(expires_at: float, ttl: float | None, now: float) -> float:
    """The expiry a lease is judged by: never more than its ttl after `now` (an expiry
    further ahead was written by a clock that runs ahead of this one)."""
    return min(expires_at, now + (MAX_TTL if ttl is None else ttl))


def check_token(token: object) -> int | None:
    """The token as given, after checking it is usable (None: no token)."""
    if token is None:
        return None
    if isinstance(token, bool) or not isinstance(token, int) or token < 1:
        raise InvalidInput(f"a turn token is a positive integer from acquire_turn, not {token!r}")
    return token


def require_turn(conn: Connection, session_id: str, token: int) -> None:
    """Refuse the write this transaction is making unless `token` is the session's
    current turn token and the turn is not released (StaleTurn). Call it inside the
    write transaction, before anything is written; the row stays locked until commit."""
    row = _READ_SHARED.first(conn, {"s": session_id})
    if row is None:
        raise StaleTurn(session_id, token, 0, "no turn was ever granted for the session")
    holder, current = row[0], int(row[1])
    if current != token:
        raise StaleTurn(session_id, token, current)
    if holder is None:
        raise StaleTurn(session_id, token, current, "the turn was released")


def _locked(conn: Connection, session_id: str) -> tuple[str | None, int, float, float | None]:
    _ENSURE.run(conn, {"s": session_id})
    row = _READ_LOCKED.first(conn, {"s": session_id})
    assert row is not None  # inserted above if it was missing
    return row[0], int(row[1]), float(row[2]), None if row[3] is None else float(row[3])


def _acquire(conn: Connection, session_id: str, holder: str, ttl: float) -> int | TurnHeld:
    """The token granted, or the TurnHeld to raise once this transaction committed (it
    may have written a bound on the live lease, which must stay)."""
    current_holder, token, stored_expiry, granted_ttl = _locked(conn, session_id)
    now = _now(conn)
    expires_at = _bounded(stored_expiry, granted_ttl, now)
    if current_holder is not None and current_holder != holder and expires_at > now:
        if expires_at < stored_expiry:
            _BOUND.run(conn, {"s": session_id, "e": expires_at})
        return TurnHeld(session_id, current_holder, expires_at, expires_at - now)
    granted = token + 1
    _GRANT.run(conn, {"s": session_id, "h": holder, "t": granted, "e": now + ttl, "seconds": ttl})
    return granted


def _renew(conn: Connection, session_id: str, token: int, ttl: float) -> float:
    current_holder, current, _, _ = _locked(conn, session_id)
    if current != token:
        raise StaleTurn(session_id, token, current)
    if current_holder is None:
        raise StaleTurn(session_id, token, current, "the turn was released")
    expires_at = _now(conn) + ttl
    _EXTEND.run(conn, {"s": session_id, "e": expires_at, "seconds": ttl})
    return expires_at


def _release(conn: Connection, session_id: str, token: int) -> bool:
    current_holder, current, _, _ = _locked(conn, session_id)
    if current != token or current_holder is None:
        return False
    _RELEASE.run(conn, {"s": session_id})
    return True


def _current(conn: Connection, session_id: str) -> Turn | None:
    row = _READ.first(conn, {"s": session_id})
    if row is None or int(row[1]) == 0:
        return None
    holder = None if row[0] is None else str(row[0])
    now = _now(conn)
    expires_at = _bounded(float(row[2]), None if row[3] is None else float(row[3]), now)
    live = holder is not None and expires_at > now
    return Turn(session_id, holder, int(row[1]), expires_at, live)


class TurnRepository:
    """Turn leases of sessions: acquire, renew, release, and what is current.

    Args:
        store: the Store the repository works on.
    """

    def __init__(self, store: Store) -> None:
        self.store = store

    def _write(self, work: Callable[[Connection], T]) -> T:
        return needing(self.store, _TURN_TABLES, "a turn lease", lambda: self.store.write(work))

    def acquire_turn(self, session_id: str, holder: str, ttl: float) -> int:
        """Grant `holder` the session's turn for `ttl` seconds and return its fencing
        token, one larger than any granted for the session before. Raises TurnHeld while
        another holder's lease is live. The same holder acquiring again gets a new
        token, and its older one is stale from then on (a retry fences its original).

        Args:
            session_id: the session's id.
            holder: who takes the turn (a worker's or host's name, not empty).
            ttl: seconds the lease lasts (above 0, at most MAX_TTL).
        """
        sid, who, seconds = _check_session_id(session_id), _check_holder(holder), _check_ttl(ttl)
        granted = self._write(lambda conn: _acquire(conn, sid, who, seconds))
        if isinstance(granted, TurnHeld):
            raise granted
        return granted

    def renew_turn(self, session_id: str, token: int, ttl: float) -> float:
        """Extend the lease of `token` to `ttl` seconds from now (also after it expired,
        as long as nobody took the turn over); returns the new expiry. StaleTurn if the
        token is no longer current or the turn was released.

        Args:
            session_id: the session's id.
            token: the token acquire_turn returned.
            ttl: seconds from now the lease lasts (above 0, at most MAX_TTL).
        """
        sid, seconds = _check_session_id(session_id), _check_ttl(ttl)
        checked = check_token(token)
        if checked is None:
            raise InvalidInput("renew_turn needs the token acquire_turn returned")
        return self._write(lambda conn: _renew(conn, sid, checked, seconds))

    def release_turn(self, session_id: str, token: int) -> bool:
        """End the lease of `token`; True if it was the current one, False when it was
        stale or already released (nothing changes then). A released token writes no
        more; the next grant is a newer token.

        Args:
            session_id: the session's id.
            token: the token acquire_turn returned.
        """
        sid = _check_session_id(session_id)
        checked = check_token(token)
        if checked is None:
            raise InvalidInput("release_turn needs the token acquire_turn returned")
        return self._write(lambda conn: _release(conn, sid, checked))

    def current_turn(self, session_id: str) -> Turn | None:
        """The session's turn as stored, None if none was ever granted.

        Args:
            session_id: the session's id.
        """
        sid = _check_session_id(session_id)
        return needing(
            self.store,
            _TURN_TABLES,
            "a turn lease",
            lambda: self.store.read(lambda conn: _current(conn, sid)),
        )
