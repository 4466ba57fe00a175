"""PostgreSQL faults: which errors a fresh connection may cure, and what became of a write
whose COMMIT got no answer.

Classification is by SQLSTATE and by the driver's error class, never by message text
(messages are translated with the server's `lc_messages`). Transient: the connection
class (08...), an administrator, crash or idle-timeout termination (57P01, 57P02,
57P05, 25P03), a server starting up or shutting down (57P03), too many connections
(53300), and contention (40001 serialization failure, 40P01 deadlock, 55P03
lock_timeout). A psycopg OperationalError without a SQLSTATE is the driver's own report
of a connection that failed or broke (refused, reset, closed mid-query), and SQLAlchemy's
PendingRollbackError for a connection it invalidated says the same; libpq gives a
failed login no SQLSTATE either, so a failed connection attempt is retried only while
PQping says the server does not accept connections. Anything else (a constraint, a
syntax error, bad input, a refused login) is not retried.

A write is applied at most once. The hard case is a connection lost after COMMIT was sent
and before its answer arrived: the transaction may have committed. Just before COMMIT the
write path reads the transaction's id (`pg_current_xact_id_if_assigned()`, one round trip
per write that changed something) and the backend's pid. If the COMMIT then fails, the next
attempt first asks the server, on its fresh connection, what became of that transaction
(`pg_xact_status`): committed, and the earlier result is returned without running the work
again; aborted, and the work runs again. A transaction still "in progress" can only be
one whose client is gone with a COMMIT that may be in flight: its backend is terminated
(only while it still holds that transaction), which makes the outcome final, and the check
is repeated. Transaction ids are global to the server, so the check works through
PgBouncer in transaction pooling mode (the id is read inside the transaction, and asked
about on any server connection).

A server that crashed (immediate shutdown, power loss) hands out again the ids of
transactions whose WAL it lost, so after a restart (`pg_postmaster_start_time()`
changed) "committed" is believed only for an id below the first one the restarted server
handed out, which the checkpoint it started with records; an id at or above it was lost,
COMMIT included. An id below it may still be another transaction's: a crash, then a life
of the server too short for this client to reach, in which the lost id was handed out
again and committed, then another restart. So after a restart a write that appended
messages, which names one of its rows (id, session, role and content: `note_witness`),
is believed committed only where that row is found; other writes are taken at the
status's word, which a single restart makes exact. When the restart checkpoint has been
superseded (or the server is another one, after a failover) the outcome cannot be known:
DatabaseUnavailable with `outcome_unknown`, never a guess. Cost: one round trip per
write that changed something, on the success path, none for a work that reads the marker
in a statement of its own (`note_transaction`: the one-call append; `WriteOnce.noted` where
that call is committed without a SQLAlchemy Connection, pipelined.commit_call).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from sqlalchemy import Connection, text
from sqlalchemy.engine import URL
from sqlalchemy.exc import DBAPIError, PendingRollbackError

from ..errors import DatabaseUnavailable

#: SQLAlchemy's code for a statement sent on a connection it invalidated within the
#: transaction (a driver error said the connection was lost): the session is gone with
#: the server's backend, as after any other lost connection.
INVALIDATED_CONNECTION = "8s2b"

TRANSIENT_SQLSTATES = frozenset(
    {
        "57P01",  # admin_shutdown (fast shutdown, pg_terminate_backend)
        "57P02",  # crash_shutdown (another backend crashed)
        "57P03",  # cannot_connect_now (starting up, shutting down, in recovery)
        "57P05",  # idle_session_timeout
        "25P03",  # idle_in_transaction_session_timeout
        "53300",  # too_many_connections
        "40001",  # serialization_failure
        "40P01",  # deadlock_detected
        "55P03",  # lock_not_available (lock_timeout)
    }
)
#: Class 08, connection exception, whole: PgBouncer reports a server it cannot reach as
#: 08P01, which PostgreSQL itself uses for a protocol violation.
TRANSIENT_CLASSES = ("08",)


class CommitInDoubt(Exception):
    """An earlier attempt's transaction is still in progress on a backend this client lost;
    its backend has been asked to end. Retried like a server fault."""


def _driver_error(exc: BaseException) -> BaseException:
    return exc.orig if isinstance(exc, DBAPIError) and exc.orig is not None else exc


def is_transient(exc: BaseException) -> bool:
    """True for a PostgreSQL fault that the same unit of work, run again on a fresh
    connection, may get past."""
    if isinstance(exc, CommitInDoubt):
        return True
    if isinstance(exc, PendingRollbackError):
        return exc.code == INVALIDATED_CONNECTION
    orig = _driver_error(exc)
    if not type(orig).__module__.startswith("psycopg"):
        return False
    import psycopg

    if not isinstance(orig, psycopg.Error):
        return False
    sqlstate = orig.sqlstate
    if sqlstate is None:
        # The driver's own report: the connection could not be made or broke under it,
        # or its replies stopped making sense ("received 2 results from command
        # 'COMMIT'": a pooler cut off from its server mid-answer). Either way the
        # connection is done for; a fresh one, with the COMMIT check, is safe.
        if isinstance(orig, psycopg.InternalError):
            return True
        return isinstance(orig, psycopg.OperationalError) and not _login_refused(orig)
    return sqlstate in TRANSIENT_SQLSTATES or sqlstate.startswith(TRANSIENT_CLASSES)


def _login_refused(orig: Any) -> bool:
    """A connection attempt that failed (libpq gives such failures no SQLSTATE) to a server
    that is up and accepting connections: it refused this login (no such database or role,
    a wrong password), which waiting does not cure.

    Asked with libpq's PQping, which tells a server that accepts connections from one
    starting up, shutting down or not answering. The server may have come up since the
    failure, so a ping that says "up" is followed by one more attempt: refused only if that
    fails too while the server still answers pings (a server cannot go down and come back
    between the two)."""
    from psycopg import pq
    from psycopg.conninfo import make_conninfo

    pgconn = getattr(orig, "pgconn", None)
    if pgconn is None or pgconn.server_version:
        return False  # it had been connected: a connection lost, not a login refused
    params = {
        option.keyword.decode(): option.val.decode()
        for option in pgconn.info
        if option.val is not None
    }
    try:
        conninfo = make_conninfo("", **params).encode()
        if pq.PGconn.ping(conninfo) not in (pq.Ping.OK, pq.Ping.NO_ATTEMPT):
            return False
        again = pq.PGconn.connect(conninfo)
        try:
            if again.status == pq.ConnStatus.OK:
                return False
        finally:
            again.finish()
        return pq.PGconn.ping(conninfo) in (pq.Ping.OK, pq.Ping.NO_ATTEMPT)
    except Exception:  # noqa: BLE001 (no answer to the question: treat as a lost server)
        return False


def describe_server(url: URL) -> str:
    """Host, port and database of a PostgreSQL URL, never its password."""
    host = url.host or "localhost"
    if url.query.get("host"):
        host = str(url.query["host"])
    port = url.port or 5432
    return f"the PostgreSQL server {host}:{port} (database {url.database or url.username})"


#: A statement answering, in one boolean, whether a write's own change is in the
#: database, with its parameters (`note_witness`).
Witness = tuple[str, Mapping[str, Any]]


@dataclass(frozen=True)
class _Marker:
    xid: int  # xid8: 64 bits, epoch included, never wraps
    backend_pid: int
    server_started: str  # pg_postmaster_start_time(): which life of the server it was
    witness: Witness | None = None


#: Connection.info key of a marker a unit of work read itself (`note_transaction`).
_NOTED = "hermes_noted_transaction"


def note_transaction(conn: Connection, xid: str | None, backend_pid: int, started: str) -> None:
    """Hand the write path the marker of `conn`'s transaction, read by the work itself in
    a statement it had to send anyway (the one-call append returns it), so that the
    commit-outcome check costs no round trip of its own. A transaction's id does not
    change once assigned, so later statements of the same work leave it valid."""
    if xid is not None:
        conn.info[_NOTED] = _Marker(int(xid), int(backend_pid), started)


#: Connection.info key of a witness a unit of work gave without a marker (`note_witness`).
_WITNESS = "hermes_write_witness"


def note_witness(conn: Connection, witness: Witness) -> None:
    """Hand the write path a statement telling whether the unit of work on `conn`
    committed (one of the rows it wrote, found as written), for the commit-outcome check
    after a restart (`WriteOnce._after_restart`). The transaction is atomic, so any row
    it wrote stands for all of it."""
    conn.info[_WITNESS] = witness


class WriteOnce:
    """One call of Store.write on PostgreSQL: remembers the transaction of an attempt whose
    COMMIT was sent, so that the next attempt can find out whether it was applied.

    Use: at the start of every attempt `committed_earlier(conn)` (True: return `result`,
    the work is done); after the work, just before COMMIT, `before_commit(conn, result)`.
    """

    def __init__(self, server: str) -> None:
        self.server = server
        self._marker: _Marker | None = None
        self.result: Any = None

    @property
    def in_doubt(self) -> bool:
        """An attempt's COMMIT got no answer and its outcome is not known yet."""
        return self._marker is not None

    def before_commit(self, conn: Connection, result: Any) -> None:
        noted = conn.info.pop(_NOTED, None)
        witness = conn.info.pop(_WITNESS, None)
        if noted is not None:
            # the work read its transaction's marker itself (the one-call append)
            self._marker, self.result = replace(noted, witness=witness), result
            return
        row = conn.execute(
            text(
                "SELECT pg_current_xact_id_if_assigned()::text, pg_backend_pid(),"
                " pg_postmaster_start_time()::text"
            )
        ).one()
        # No transaction id: the work changed nothing, so running it again is harmless.
        self._marker = (
            None if row[0] is None else _Marker(int(row[0]), int(row[1]), row[2], witness)
        )
        self.result = result

    def noted(
        self,
        xid: str | None,
        backend_pid: int,
        started: str,
        witness: Witness | None,
        result: Any,
    ) -> None:
        """`before_commit` for a work that ran without a SQLAlchemy Connection (a call
        committed bare, pipelined.commit_call) and read its transaction's marker itself:
        None for `xid` when it changed nothing."""
        self._marker = (
            None if xid is None else _Marker(int(xid), int(backend_pid), started, witness)
        )
        self.result = result

    def committed_earlier(self, conn: Connection) -> bool:
        """Whether an earlier attempt of this write committed (then its result stands).
        Raises CommitInDoubt while that cannot be known yet, DatabaseUnavailable (outcome
        unknown) when it never can be."""
        # a marker or witness noted by an attempt that did not commit
        conn.info.pop(_NOTED, None)
        conn.info.pop(_WITNESS, None)
        marker = self._marker
        if marker is None:
            return False
        # An id at or past the one this transaction gets was never handed out by this
        # server (a failover to a replica that lagged): pg_xact_status would raise. (This
        # assigns the checking transaction an id: only on this rare path.)
        row = conn.execute(
            text(
                "SELECT CASE WHEN CAST(:xid AS xid8) >= pg_current_xact_id()"
                " THEN 'unknown to this server' ELSE pg_xact_status(CAST(:xid AS xid8)) END,"
                " pg_postmaster_start_time()::text, c.checkpoint_lsn = c.redo_lsn, c.next_xid"
                " FROM pg_control_checkpoint() c"
            ),
            {"xid": str(marker.xid)},
        ).one()
        status, started, restart_checkpoint, next_xid = row
        if started != marker.server_started:
            committed = self._after_restart(
                conn, status, bool(restart_checkpoint), str(next_xid)
            )
        elif status == "in progress":
            # Its client (an earlier attempt) is gone, so nobody will COMMIT it unless that
            # COMMIT is already in flight; ending the backend settles it either way.
            conn.execute(
                text(
                    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                    " WHERE pid = :pid AND backend_xid::text = :xid32"
                ),
                {"pid": marker.backend_pid, "xid32": str(marker.xid % 2**32)},
            )
            raise CommitInDoubt(f"transaction {marker.xid} of an earlier attempt is in progress")
        else:
            # committed; or aborted, never seen, or too old to be known (NULL, which cannot
            # happen within a retry budget): it did not commit
            committed = status == "committed"
        self._marker = None
        return committed

    def _after_restart(
        self, conn: Connection, status: str, restart_checkpoint: bool, next_xid: str
    ) -> bool:
        """The server restarted since the COMMIT was sent. After a crash it hands out again
        the transaction ids whose WAL it lost, so "committed" may describe another
        transaction. The checkpoint a restart begins with (a shutdown or end-of-recovery
        checkpoint: its redo point is the checkpoint itself) records the first id it
        handed out: an id at or above it was lost with its WAL, commit record included.
        An id below it was handed out before this life began, but not necessarily in the
        life the COMMIT was sent in: if the server restarted more than once since (a
        crash, then a life too short for this client to reach, then another restart),
        the life in between may have handed the lost id out again and committed it, and
        nothing on the server tells how many lives there were. So where the work gave a
        witness, "committed" is believed only if the work's own change is found; a work
        without one is taken at the status's word, as a single restart allows."""
        assert self._marker is not None
        if status in ("aborted", "unknown to this server"):
            return False
        if not restart_checkpoint:
            # a later checkpoint since the restart: the first id handed out is not known
            raise DatabaseUnavailable(
                self.server,
                0.0,
                1,
                "the server restarted while a COMMIT was in flight, and checkpointed since",
                outcome_unknown=True,
            )
        epoch, _, xid = next_xid.partition(":")
        if self._marker.xid >= (int(epoch) << 32) + int(xid):
            return False
        if status == "in progress":
            raise CommitInDoubt(f"transaction {self._marker.xid} is in progress")
        if status != "committed" or self._marker.witness is None:
            # without a witness the status is taken as the write's own: wrong only if the
            # server restarted more than once since (docs/postgresql.md)
            return status == "committed"
        statement, params = self._marker.witness
        return bool(conn.execute(text(statement), dict(params)).scalar())
