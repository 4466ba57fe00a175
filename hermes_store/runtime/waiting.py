"""Waiting for a lock another process holds, out loud.

A command that needs the write lock (`upgrade`, `sessions prune --yes`) retries while
another process holds it, as every writer does; here each wait is reported as it happens
(`LockWaiter`: who holds the lock, as far as this machine can tell, and how long this
command has waited of how long it will wait), and a wait that runs out ends in
LockTimeout, which says what to do, instead of the driver's "database is locked".

Who holds the lock: on SQLite, the processes this kernel lists in /proc/locks with the
write lock of the file (its RESERVED, PENDING or EXCLUSIVE byte in rollback-journal mode,
the WAL write lock in the -shm file in WAL mode); on PostgreSQL, the sessions holding
hermes-store's migration lock, or else the transactions open on the database.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from sqlalchemy import Connection, Engine, event, text
from sqlalchemy.exc import DBAPIError, PendingRollbackError

from ..config import shown_url
from ..contract import PG_MIGRATION_LOCK
from ..errors import DatabaseUnavailable, LockTimeout
from .retry import RetryPolicy, sqlite_busy

T = TypeVar("T")

#: How long a command waits for a lock unless told otherwise (`--wait SECONDS`): the
#: original's wait at open (docs/reference/behaviour.md 16.2).
DEFAULT_WAIT_S = 20.0
#: A line about a wait at most this often (HERMES_STORE_PROGRESS_EVERY sets it too).
WAIT_REPORT_EVERY_S = 5.0

# SQLite's lock bytes (its os_unix.c): the PENDING byte, RESERVED after it, the SHARED
# range after that; in the -shm file the WAL write lock is the first of the locks at 120.
_PENDING_BYTE = 0x40000000
_SHARED_LAST = _PENDING_BYTE + 2 + 510 - 1
_WAL_WRITE_LOCK = 120


@dataclass(frozen=True)
class Waiting:
    """One report of a wait: `first` for the moment it began."""

    place: str
    what: str  # "the write lock", "the migration lock"
    waited: float
    budget: float
    holders: str
    first: bool


WaitCallback = Callable[[Waiting], None]


class LockWaiter:
    """Reports a wait for a lock (the first time it is met, then at most every `every`
    seconds) and builds the LockTimeout that ends one."""

    def __init__(
        self,
        place: str,
        budget: float,
        *,
        on_wait: WaitCallback | None = None,
        holders: Callable[[], str] | None = None,
        what: str = "the write lock",
        every: float = WAIT_REPORT_EVERY_S,
        retry_hint: str = "run the same command again",
        typed: bool = True,
    ) -> None:
        self.place = place
        self.budget = budget
        self.on_wait = on_wait
        self.find_holders = holders
        self.what = what
        self.every = every
        self.retry_hint = retry_hint
        #: end a wait of a retried unit of work with LockTimeout (else the driver's error,
        #: for callers such as the SessionDB facade that expect the original's)
        self.typed = typed
        self.started: float | None = None
        self._last_report = 0.0
        self.last_holders = ""

    def holders(self) -> str:
        if self.find_holders is not None:
            try:
                found = self.find_holders()
            except Exception as exc:  # noqa: BLE001 (naming them is best effort)
                found = f"which one could not be found out: {exc}"
            if found:
                self.last_holders = found
        return self.last_holders or "which one could not be found out from here"

    def blocked(self) -> None:
        """The lock was found held (again)."""
        now = time.monotonic()
        first = self.started is None
        if first:
            self.started = now
        elif now - self._last_report < self.every:
            return
        self._last_report = now
        if self.on_wait is not None:
            self.on_wait(
                Waiting(
                    place=self.place,
                    what=self.what,
                    waited=now - (self.started or now),
                    budget=self.budget,
                    holders=self.holders(),
                    first=first,
                )
            )

    def waited(self) -> float:
        return 0.0 if self.started is None else time.monotonic() - self.started

    def timeout(self) -> LockTimeout:
        return LockTimeout(
            self.place,
            max(self.waited(), self.budget),
            self.holders(),
            f"{self.retry_hint}, or wait longer with --wait SECONDS",
            what=self.what,
        )


def is_lock_contention(exc: BaseException) -> bool:
    """Another process holds a lock this one needs: SQLite's busy/locked, PostgreSQL's
    lock_timeout (55P03)."""
    busy = sqlite_busy(exc)
    if busy is not None:
        return busy
    orig = exc.orig if isinstance(exc, DBAPIError) else exc
    return getattr(orig, "sqlstate", None) == "55P03"


@dataclass(frozen=True)
class WaitingRetry(RetryPolicy):
    """A RetryPolicy whose waits for a lock are reported to `waiter` and end, after the
    waiter's budget, in the waiter's LockTimeout (server faults stay DatabaseUnavailable)."""

    waiter: LockWaiter | None = None

    @classmethod
    def for_waiter(cls, waiter: LockWaiter) -> WaitingRetry:
        return cls(
            budget_seconds=waiter.budget,
            server_budget_seconds=waiter.budget,
            waiter=waiter,
        )

    def resume(
        self,
        failed: BaseException,
        unit_of_work: Callable[[], T],
        started: float,
        *,
        server: str | None = None,
        in_doubt: Callable[[], bool] | None = None,
    ) -> T:
        # `run` and the store's inline first attempts both go on here after a first
        # failure, so every wait is reported and ends typed whichever made the attempt
        waiter = self.waiter
        if waiter is None:
            return super().resume(failed, unit_of_work, started, server=server, in_doubt=in_doubt)

        def contended(exc: BaseException) -> bool:
            return isinstance(exc, DBAPIError | PendingRollbackError) and is_lock_contention(exc)

        def attempt() -> T:
            try:
                return unit_of_work()
            except (DBAPIError, PendingRollbackError) as exc:
                if contended(exc):
                    waiter.blocked()
                raise

        if contended(failed):
            waiter.blocked()
        try:
            return super().resume(failed, attempt, started, server=server, in_doubt=in_doubt)
        except DBAPIError as exc:
            if waiter.typed and is_lock_contention(exc):
                raise waiter.timeout() from exc
            raise
        except DatabaseUnavailable as exc:
            if waiter.typed and exc.__cause__ is not None and is_lock_contention(exc.__cause__):
                raise waiter.timeout() from exc
            raise


# --------------------------------------------------------------------------- who holds it


def _device(st: os.stat_result) -> str:
    return f"{os.major(st.st_dev):02x}:{os.minor(st.st_dev):02x}:{st.st_ino}"


def _command_line(pid: int) -> str:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return "?"
    # a URL among the arguments is shown without its credentials
    words = [
        shown_url(w) if "://" in w else w
        for w in (w.decode("utf-8", "replace") for w in raw.split(b"\0") if w)
    ]
    line = " ".join(" ".join(words).split()) or "?"
    return line if len(line) <= 80 else line[:77] + "..."


def sqlite_lock_holders(path: Path) -> str:
    """The processes holding the write lock of the SQLite file `path`, as /proc/locks
    lists them (this process left out), e.g. `pid 4242: python3 -m hermes ...`; "" when
    none can be named."""
    files: dict[str, str] = {}
    for suffix, kind in (("", "db"), ("-shm", "shm")):
        try:
            files[_device(Path(f"{path}{suffix}").stat())] = kind
        except OSError:
            continue
    try:
        table = Path("/proc/locks").read_text()
    except OSError:
        return ""
    pids: list[int] = []
    for line in table.splitlines():
        fields = line.split()
        if len(fields) < 8 or fields[1] == "->" or fields[3] != "WRITE":
            continue
        kind = files.get(fields[5], "")
        start = int(fields[6]) if fields[6].isdigit() else -1
        if kind == "db":
            held = _PENDING_BYTE <= start <= _SHARED_LAST
        else:
            held = kind == "shm" and start == _WAL_WRITE_LOCK
        pid = int(fields[4]) if fields[4].lstrip("-").isdigit() else -1
        if held and pid > 0 and pid != os.getpid() and pid not in pids:
            pids.append(pid)
    return "; ".join(f"held by pid {pid}: {_command_line(pid)}" for pid in pids)


_PG_MIGRATION_HOLDERS = text(
    "SELECT a.pid, a.application_name, a.client_addr, a.client_hostname, "
    "EXTRACT(EPOCH FROM now() - a.xact_start) AS age "
    "FROM pg_locks AS l JOIN pg_stat_activity AS a ON a.pid = l.pid "
    "WHERE l.locktype = 'advisory' AND l.granted AND l.database = "
    "(SELECT oid FROM pg_database WHERE datname = current_database()) "
    "AND ((l.classid::bigint << 32) | l.objid::bigint) = :key AND l.objsubid = 1 "
    "AND a.pid <> pg_backend_pid()"
)
_PG_OPEN_TRANSACTIONS = text(
    "SELECT pid, application_name, client_addr, client_hostname, "
    "EXTRACT(EPOCH FROM now() - xact_start) AS age "
    "FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid() "
    "AND xact_start IS NOT NULL AND backend_type = 'client backend' "
    "ORDER BY xact_start LIMIT 3"
)


def _pg_key(key: int) -> int:
    """The advisory lock key as pg_locks' classid/objid halves put it back together."""
    return key & 0xFFFFFFFFFFFFFFFF


def _describe_backends(conn: Connection, statement: object, **params: object) -> str:
    rows = conn.execute(statement, params).all()  # type: ignore[call-overload]
    described = []
    for pid, application, address, hostname, age in rows:
        client = hostname or (str(address) if address is not None else "a local socket")
        name = application or "no application_name"
        seconds = f", in a transaction for {float(age):.0f} s" if age is not None else ""
        described.append(f"PostgreSQL backend {pid} ({name}, from {client}{seconds})")
    return "; ".join(described)


def pg_lock_holders(engine: Engine, *, migration: bool) -> str:
    """Who holds hermes-store's migration lock (`migration`), else which transactions are
    open on the database: the likely holders of a row lock. "" when nobody is found."""
    with engine.connect() as conn:
        try:
            if migration:
                found = _describe_backends(
                    conn, _PG_MIGRATION_HOLDERS, key=_pg_key(PG_MIGRATION_LOCK)
                )
            else:
                found = _describe_backends(conn, _PG_OPEN_TRANSACTIONS)
        finally:
            conn.rollback()
    return f"held by {found}" if found else ""


def shorten_pg_lock_waits(engine: Engine, seconds: float) -> None:
    """PostgreSQL: make each statement of `engine`'s connections give up waiting for a lock
    after `seconds` (instead of the engine's lock_timeout), so that a WaitingRetry retries,
    and reports, every few seconds; the retry's budget decides how long the whole wait is.
    Nothing on SQLite, whose busy timeout already is short."""
    milliseconds = max(1, int(seconds * 1000))

    def on_checkout(dbapi_conn: Any, _record: Any, _proxy: Any) -> None:
        if not type(dbapi_conn).__module__.startswith("psycopg"):
            return
        # a session setting, committed at once, before the unit's transaction begins
        dbapi_conn.execute(f"SET lock_timeout = {milliseconds}")
        dbapi_conn.commit()

    event.listen(engine, "checkout", on_checkout)
