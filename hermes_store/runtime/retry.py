"""The retry policy: which errors are worth another attempt, and how long to wait.

SQLite: the original's 15 attempts with 20-150 ms random sleeps on "database is
locked/busy" (random, so waiting writers do not wake in lockstep, #3385). Optionally a
time budget instead of an attempt count, the form later upstream versions use (#74478).

PostgreSQL: the faults of a server (it restarts, fails over, terminates connections, or
a transaction meets contention; `pg_faults` says which) are waited out for a time budget,
30 s by default, with exponential backoff and full jitter (so clients reconnecting after
a restart do not arrive together). Each attempt runs the whole unit of work on a fresh
connection. Past the budget the caller gets one DatabaseUnavailable naming the server.
"""

from __future__ import annotations

import random
import sqlite3
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

from sqlalchemy.exc import DBAPIError, PendingRollbackError

from ..errors import DatabaseUnavailable
from ..postgresql import faults as pg_faults
from ..sqlite import driver as sqlite_driver

T = TypeVar("T")


def sqlite_busy(exc: BaseException) -> bool | None:
    """For an error SQLite raised: whether it is lock contention (busy or locked); None
    for an error that is not SQLite's."""
    orig = exc.orig if isinstance(exc, DBAPIError) else exc
    if not isinstance(orig, sqlite_driver.OperationalError):
        return None
    code = getattr(orig, "sqlite_errorcode", None)
    if code is not None:
        return code & 0xFF in (sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED)
    text = str(orig).lower()
    return "locked" in text or "busy" in text


def is_retryable(exc: BaseException) -> bool:
    """SQLite lock contention, or a transient PostgreSQL fault (a lost connection
    included, whether the driver or SQLAlchemy reports it)."""
    busy = sqlite_busy(exc)
    return pg_faults.is_transient(exc) if busy is None else busy


def first_line(exc: BaseException) -> str:
    orig = exc.orig if isinstance(exc, DBAPIError) and exc.orig is not None else exc
    lines = str(orig).strip().splitlines()
    return " ".join(lines[0].split()) if lines else type(orig).__name__


@dataclass(frozen=True)
class RetryPolicy:
    attempts: int = 15
    min_sleep: float = 0.020
    max_sleep: float = 0.150
    budget_seconds: float | None = None  # when set, retry until this much time has passed
    #: PostgreSQL: how long server faults are waited out, and the longest pause between
    #: two attempts (the backoff doubles from min_sleep up to it)
    server_budget_seconds: float = 30.0
    server_max_sleep: float = 0.5

    def run(
        self,
        unit_of_work: Callable[[], T],
        *,
        server: str | None = None,
        in_doubt: Callable[[], bool] | None = None,
    ) -> T:
        """Run `unit_of_work` (a whole transaction) until it succeeds or the policy ends.

        `server` names the database in DatabaseUnavailable; `in_doubt()` says whether the
        unit's last COMMIT went unanswered (then that error says its outcome is unknown).
        """
        started = time.monotonic()
        try:
            return unit_of_work()
        # PendingRollbackError: a statement sent on a connection that an earlier error
        # invalidated, which only a fresh connection gets past
        except RETRIED as exc:
            failed = exc
        return self.resume(failed, unit_of_work, started, server=server, in_doubt=in_doubt)

    def resume(
        self,
        failed: BaseException,
        unit_of_work: Callable[[], T],
        started: float,
        *,
        server: str | None = None,
        in_doubt: Callable[[], bool] | None = None,
    ) -> T:
        """Go on as `run` would after the first attempt of `unit_of_work`, begun at
        `started` (time.monotonic), failed with `failed`: raised again at once unless it
        is retried, else the attempts that are left. For a caller that makes its first
        attempt itself, so that an attempt that succeeds costs nothing here."""
        exc = failed
        attempt = 1
        server_faults = 0
        while True:
            if not isinstance(exc, RETRIED) or not is_retryable(exc):
                raise exc
            elapsed = time.monotonic() - started
            if not isinstance(exc, DBAPIError) or not isinstance(
                exc.orig, sqlite_driver.OperationalError
            ):
                server_faults += 1
                left = self.server_budget_seconds - elapsed
                if left <= 0:
                    raise DatabaseUnavailable(
                        server or "the PostgreSQL server",
                        elapsed,
                        attempt,
                        first_line(exc),
                        outcome_unknown=bool(in_doubt and in_doubt()),
                    ) from exc
                doubled = self.min_sleep * 2 ** min(server_faults, 16)
                ceiling = min(self.server_max_sleep, doubled)
                sleep = min(random.uniform(self.min_sleep, ceiling), left)
            elif self.budget_seconds is not None:
                if elapsed >= self.budget_seconds:
                    raise exc
                sleep = min(
                    random.uniform(self.min_sleep, self.max_sleep),
                    self.budget_seconds - elapsed,
                )
            elif attempt >= self.attempts:
                raise exc
            else:
                sleep = random.uniform(self.min_sleep, self.max_sleep)
            time.sleep(max(0.0, sleep))
            attempt += 1
            try:
                return unit_of_work()
            except RETRIED as again:
                exc = again


#: What a retry policy looks at: a driver error as SQLAlchemy raises it, a statement sent
#: on a connection an earlier error invalidated (PendingRollbackError), a COMMIT in doubt.
RETRIED = (DBAPIError, PendingRollbackError, pg_faults.CommitInDoubt)

DEFAULT_RETRY = RetryPolicy()
