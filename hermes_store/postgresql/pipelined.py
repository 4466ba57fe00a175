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
"""

from __future__ import annotations

from functools import cache
from typing import Any

from sqlalchemy import Connection


def first_row(conn: Connection, sql: str, params: Any) -> tuple[Any, ...] | None:
    """Execute `sql` (a statement compiled for the psycopg dialect) on `conn` and return
    its first row. When `conn`'s transaction has not reached the server yet, its BEGIN
    goes in the same round trip as the statement; otherwise the statement is sent as
    `exec_driver_sql` would send it."""
    import psycopg

    driver = conn.connection.driver_connection
    if (
        not isinstance(driver, psycopg.Connection)
        or driver.autocommit
        or driver.info.transaction_status != psycopg.pq.TransactionStatus.IDLE
        or not psycopg.Pipeline.is_supported()
        # the flag restored below by hand; a psycopg without it takes the ordinary path
        or not hasattr(driver, "_autocommit")
        or not conn.in_transaction()
        or _watched(conn)
    ):
        found = conn.exec_driver_sql(sql, params).first()
        return None if found is None else tuple(found)
    cursor = None
    try:
        begin = _begin_statement(driver.isolation_level, driver.read_only, driver.deferrable)
        driver.autocommit = True  # psycopg sends no BEGIN of its own
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
    finally:
        if cursor is not None:
            cursor.close()
    return None if row is None else tuple(row)


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
