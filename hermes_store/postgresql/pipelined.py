"""A unit of work's first statement sent together with its BEGIN.

psycopg, outside autocommit, opens a transaction by sending BEGIN on its own and waiting
for the answer before it sends the statement that needed it (in pipeline mode too: it
syncs right after its BEGIN), a round trip that carries nothing. Here the BEGIN is sent
by hand instead, in one pipeline with the statement, so both reach the server in one
write and come back in one answer. The pipeline ends (a Sync, which inside the open
transaction commits nothing) before the rows are read, so the statement's whole answer,
a transaction id included, is in hand before the unit of work goes on; COMMIT is sent
afterwards as usual, by psycopg. A write whose COMMIT gets no answer is therefore
resolved exactly as before (faults.py).

psycopg would send its own BEGIN in front of the hand-written one unless the connection
is in autocommit, so it is switched to autocommit for the pipeline (the switch is local:
nothing is sent) and, once the transaction is open, left exactly as psycopg leaves a
transaction it began itself: autocommit off, in transaction, committed or rolled back by
`commit()` and `rollback()`. The BEGIN names what psycopg's would (the connection's
isolation level, read-only and deferrable settings).

Errors leave as SQLAlchemy's, through the connection's own handling: a lost connection
is invalidated (and the pool's older connections with it) and the engine's error events
run. A connection whose statements someone watches (execute or cursor-execute
listeners, such as tracing instrumentation, or echo) takes the ordinary path, where
those see every statement with its context as SQLAlchemy promises, and so does one
outside a SQLAlchemy transaction (its BEGIN is SQLAlchemy's to account for).

A write that is that one statement and nothing else (a plain append: `Call`) needs no
SQLAlchemy Connection at all: `commit_call` checks a driver connection out of the pool,
sends BEGIN and the call, hands the transaction's marker to the commit-outcome check and
commits, and a Connection is made around the checked-out connection only when an error
has to be reported through it: the Connection, its transaction object and their event
checks are Python that every append would otherwise run (docs/benchmarks.md,
"hermes-store's Python in an append, taken apart"). An attempt that follows an unanswered
COMMIT goes through a Connection, on which the outcome check runs.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from typing import Any, Final

from sqlalchemy import Connection, Engine

from . import faults as pg_faults


def first_row(conn: Connection, sql: str, params: Any) -> tuple[Any, ...] | None:
    """Execute `sql` (a statement compiled for the psycopg dialect) on `conn` and return
    its first row. When `conn`'s transaction has not reached the server yet, its BEGIN
    goes in the same round trip as the statement; otherwise the statement is sent as
    `exec_driver_sql` would send it."""
    import psycopg

    driver = conn.connection.driver_connection
    if not _pipelines(driver) or not conn.in_transaction() or _watched(conn):
        found = conn.exec_driver_sql(sql, params).first()
        return None if found is None else tuple(found)
    try:
        row = _begin_with(driver, sql, params)
    except psycopg.Error as exc:
        # raises the DBAPIError, after invalidating a connection the server dropped
        conn._handle_dbapi_exception(exc, sql, params, None, None)
        raise  # not reached: the handler always raises
    except Exception:
        # as through exec_driver_sql: a value the driver cannot encode (a lone
        # surrogate) leaves as itself, for the store's typed errors
        raise
    except BaseException as exc:
        # an interrupt left the protocol mid-way: the connection is invalidated
        conn._handle_dbapi_exception(exc, sql, params, None, None)
        raise  # not reached: the handler always raises
    return row


def _pipelines(driver: Any) -> bool:
    """Whether a BEGIN can be sent by hand on `driver`: a psycopg connection outside
    autocommit with no transaction open, whose psycopg has pipelines."""
    import psycopg

    return (
        isinstance(driver, psycopg.Connection)
        # the flag set and restored below by hand; a psycopg without it takes the
        # ordinary path
        and hasattr(driver, "_autocommit")
        and not driver.autocommit
        # the status as libpq has it (`driver.info` builds an object per reading)
        and driver.pgconn.transaction_status == _IDLE
        and _has_pipelines()
    )


@cache
def _has_pipelines() -> bool:
    """Whether this process's psycopg and libpq have pipeline mode (fixed once loaded)."""
    import psycopg

    return bool(psycopg.Pipeline.is_supported())


def _begin_with(driver: Any, sql: str, params: Any) -> tuple[Any, ...] | None:
    """BEGIN and `sql` in one pipeline on `driver` (`_pipelines`); the first row of
    `sql`'s answer. Errors are the driver's."""
    begin = _begin_statement(driver.isolation_level, driver.read_only, driver.deferrable)
    cursor = None
    try:
        # psycopg sends no BEGIN of its own. Set as its public setter would (whose one
        # check, no transaction open, `_pipelines` made), without the setter's lock and
        # generator: each append would run them.
        driver._autocommit = True
        try:
            cursor = driver.cursor()
            with driver.pipeline():
                cursor.execute(begin, prepare=False)
                cursor.execute(sql, params)
        finally:
            # the transaction is open (or the connection lost): the state psycopg itself
            # is in after beginning one, which its public setter refuses to enter
            driver._autocommit = False
        row = cursor.fetchone()
    finally:
        if cursor is not None:
            cursor.close()
    return None if row is None else tuple(row)


@dataclass(frozen=True)
class Call:
    """A unit of work that is one statement (compiled for the psycopg dialect) whose
    first row is its whole answer: the result, then its transaction's marker (id, backend
    pid, server start), as the one-call append returns them. `witness` names, from the
    result, a row the work wrote (pg_faults.note_witness), or is None. `stamped` names a
    parameter `commit_call` sets to the clock (`time.time()`) once it holds a connection,
    just before sending: a time the call is judged by (the one-call append's `at`) then
    leaves out a wait for the pool or for a new connection."""

    sql: str
    params: Any
    witness: Callable[[Any], pg_faults.Witness] | None = None
    stamped: str | None = None

    def run(self, conn: Connection) -> Any:
        """Run the call inside the unit of work on `conn` (its BEGIN pipelined with it
        when the transaction has not reached the server yet); its result."""
        row = first_row(conn, self.sql, self.params)
        assert row is not None  # the statement returns one row or raises
        pg_faults.note_transaction(conn, row[1], row[2], row[3])
        if self.witness is not None:
            pg_faults.note_witness(conn, self.witness(row[0]))
        return row[0]


#: What `commit_call` returns when the call has to go through a SQLAlchemy Connection.
NOT_RUN: Final = object()


def commit_call(engine: Engine, call: Call, once: pg_faults.WriteOnce) -> Any:
    """Run `call` as a whole write on a driver connection checked out of `engine`'s pool,
    without SQLAlchemy's Connection and transaction objects: BEGIN and the call in one
    round trip, its marker handed to `once` (`WriteOnce.noted`), then COMMIT, then the
    connection back to the pool. The pool, its accounting and its invalidation work as
    for any checkout, and errors leave as they do through a Connection: a driver error
    is handled by a Connection made around the checked-out connection only then (the
    DBAPIError raised, a lost connection invalidated with the pool's older ones, the
    engine's error events run). NOT_RUN, having sent nothing, where statements are
    watched (the engine's or Connection's listeners, echo), execution options are set
    on the engine, or the connection cannot take a hand-written BEGIN: then the caller
    runs the write through a Connection."""
    import psycopg

    if _engine_watched(engine):
        return NOT_RUN
    dialect = engine.dialect
    try:
        fairy = engine.raw_connection()
    except dialect.loaded_dbapi.Error as exc:
        # as Connection() reports a failed checkout
        Connection._handle_dbapi_exception_noconnection(exc, dialect, engine)
        raise  # not reached: the handler always raises
    handled = False
    sql: str | None = call.sql
    params = call.params
    try:
        driver: Any = fairy.driver_connection
        if not _pipelines(driver):
            return NOT_RUN
        if call.stamped is not None:
            params = {**params, call.stamped: time.time()}
        try:
            row = _begin_with(driver, call.sql, params)
            assert row is not None  # the statement returns one row or raises
            result = row[0]
            witness = None if call.witness is None else call.witness(result)
            once.noted(row[1], row[2], row[3], witness, result)
            sql = None  # a COMMIT's error is reported without a statement, as SQLAlchemy's
            driver.commit()
        except psycopg.Error as exc:
            handled = True
            _handle(engine, fairy, exc, sql, params)
        except Exception:
            # a value the driver cannot encode (a lone surrogate) leaves as itself, for
            # the store's typed errors; the pool's reset rolls the transaction back
            raise
        except BaseException as exc:
            # an interrupt left the protocol mid-way: the connection is invalidated
            handled = True
            _handle(engine, fairy, exc, sql, params)
        return result
    finally:
        if not handled:
            # back to the pool, which rolls back whatever is left open
            fairy.close()


def _handle(engine: Engine, fairy: Any, exc: BaseException, sql: str | None, params: Any) -> None:
    """Raise `exc` as a Connection on `fairy` would, then return `fairy` through it."""
    conn = Connection(engine, connection=fairy)
    try:
        conn._handle_dbapi_exception(exc, sql, None if sql is None else params, None, None)
    finally:
        conn.close()


def _engine_watched(engine: Engine) -> bool:
    """Whether a Connection of `engine` would do more than hand statements to the driver:
    listeners on it, its engine or its dialect, echo, or execution options."""
    return bool(
        # a listener on the Connection class sets this flag on the class; without one,
        # SQLAlchemy 2.0's class has no such attribute (its instances set theirs)
        getattr(Connection, "_has_events", False)
        or getattr(engine, "_has_events", True)
        or getattr(engine.dialect, "_has_events", True)
        or engine._should_log_info()
        or engine._execution_options
    )


def _watched(conn: Connection) -> bool:
    """Whether listeners or echo watch `conn`'s statements."""
    if not (getattr(conn, "_has_events", True) or getattr(conn.engine, "_has_events", True)):
        # the flags SQLAlchemy itself checks before it dispatches any connection event:
        # with neither set, no listener was ever added (reading each event's listeners
        # through the joined dispatch costs more than the rest of the checks together);
        # a SQLAlchemy without the flags takes the full check below
        return bool(conn._echo)
    dispatch = conn.dispatch
    return bool(
        conn._echo
        or dispatch.before_execute
        or dispatch.after_execute
        or dispatch.before_cursor_execute
        or dispatch.after_cursor_execute
    )


#: libpq's status of a connection with no transaction open (psycopg.pq.TransactionStatus.IDLE).
_IDLE: Final = 0


@cache
def _begin_statement(isolation_level: Any, read_only: bool | None, deferrable: bool | None) -> str:
    """The BEGIN psycopg would send on a connection with these settings."""
    from psycopg import IsolationLevel

    parts = ["BEGIN"]
    if isolation_level is not None:
        level = IsolationLevel(isolation_level).name.replace("_", " ")
        parts.append(f"ISOLATION LEVEL {level}")
    if read_only is not None:
        parts.append("READ ONLY" if read_only else "READ WRITE")
    if deferrable is not None:
        parts.append("DEFERRABLE" if deferrable else "NOT DEFERRABLE")
    return " ".join(parts)
