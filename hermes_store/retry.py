"""The write retry policy: which errors are worth another attempt, and how long to wait.

Default: the original's 15 attempts with 20-150 ms random sleeps on "database is
locked/busy" (random, so waiting writers do not wake in lockstep, #3385). Optionally a
time budget instead of an attempt count (upstream later moved to 20 s, #74478).
"""

from __future__ import annotations

import random
import sqlite3
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

from sqlalchemy.exc import DBAPIError, OperationalError

T = TypeVar("T")

_PG_RETRYABLE = {"40001", "40P01"}  # serialization failure, deadlock detected


def is_retryable(exc: BaseException) -> bool:
    """SQLite lock contention, or a PostgreSQL serialization failure / deadlock."""
    orig = exc.orig if isinstance(exc, DBAPIError) else exc
    if isinstance(orig, sqlite3.OperationalError):
        code = getattr(orig, "sqlite_errorcode", None)
        if code is not None:
            return code & 0xFF in (sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED)
        text = str(orig).lower()
        return "locked" in text or "busy" in text
    sqlstate = getattr(orig, "sqlstate", None) or getattr(orig, "pgcode", None)
    return sqlstate in _PG_RETRYABLE


@dataclass(frozen=True)
class RetryPolicy:
    attempts: int = 15
    min_sleep: float = 0.020
    max_sleep: float = 0.150
    budget_seconds: float | None = None  # when set, retry until this much time has passed

    def run(self, unit_of_work: Callable[[], T]) -> T:
        """Run `unit_of_work` (a whole transaction) until it succeeds or the policy ends."""
        started = time.monotonic()
        attempt = 0
        while True:
            attempt += 1
            try:
                return unit_of_work()
            except (OperationalError, DBAPIError) as exc:
                if not is_retryable(exc):
                    raise
                elapsed = time.monotonic() - started
                if self.budget_seconds is not None:
                    if elapsed >= self.budget_seconds:
                        raise
                    sleep = min(
                        random.uniform(self.min_sleep, self.max_sleep),
                        self.budget_seconds - elapsed,
                    )
                elif attempt >= self.attempts:
                    raise
                else:
                    sleep = random.uniform(self.min_sleep, self.max_sleep)
                time.sleep(max(0.0, sleep))


DEFAULT_RETRY = RetryPolicy()
