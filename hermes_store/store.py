"""Store: an engine plus units of work.

`store.write(fn)` runs `fn(session)` in one BEGIN IMMEDIATE transaction (row locks and
READ COMMITTED on PostgreSQL, later), retried as a whole by the store's RetryPolicy on
lock contention, so `fn` must not have side effects outside the database. Every 50th
successful write runs a PASSIVE WAL checkpoint; `close()` runs a TRUNCATE checkpoint.
`store.read()` gives a Session in a deferred transaction that never takes the write lock.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TypeVar

from sqlalchemy import Engine, text
from sqlalchemy.engine import URL
from sqlalchemy.orm import Session
from sqlalchemy.pool import QueuePool

from .config import JournalPolicy, resolve_url
from .engine import BEGIN_MODE, make_engine
from .retry import DEFAULT_RETRY, RetryPolicy

log = logging.getLogger(__name__)

T = TypeVar("T")

CHECKPOINT_EVERY = 50


class Store:
    def __init__(
        self,
        url: str | URL | None = None,
        *,
        retry: RetryPolicy = DEFAULT_RETRY,
        checkpoint_every: int = CHECKPOINT_EVERY,
        journal: JournalPolicy | None = None,
        read_only: bool = False,
        engine: Engine | None = None,
    ) -> None:
        self.url = resolve_url(url)
        self.read_only = read_only
        self.retry = retry
        self.checkpoint_every = checkpoint_every
        self.engine = engine or make_engine(
            # pooled, so the connect-time pragmas run once per connection, not per unit
            self.url,
            read_only=read_only,
            journal=journal,
            poolclass=QueuePool,
            pool_size=5,
        )
        self._writer = self.engine.execution_options(**{BEGIN_MODE: "IMMEDIATE"})
        self._write_lock = threading.Lock()
        self._writes = 0
        self._closed = False

    @property
    def dialect(self) -> str:
        return self.engine.dialect.name

    def write(self, work: Callable[[Session], T]) -> T:
        """Run `work` in one write transaction, retried as a unit on lock contention."""

        def attempt() -> tuple[T, int]:
            with self._write_lock, Session(self._writer, expire_on_commit=False) as session:
                with session.begin():
                    # BEGIN IMMEDIATE now, not at `work`'s first statement: the lock is
                    # held before `work` runs, and contention never surfaces inside it
                    session.connection()
                    result = work(session)
                self._writes += 1  # under the lock: concurrent writers must not lose counts
                return result, self._writes

        result, writes = self.retry.run(attempt)
        if self.checkpoint_every and writes % self.checkpoint_every == 0:
            self.checkpoint("PASSIVE")
        return result

    @contextmanager
    def read(self) -> Iterator[Session]:
        """A Session for reading; its deferred transaction ends when the block does."""
        with Session(self.engine, expire_on_commit=False) as session:
            session.begin()
            try:
                if self.dialect == "sqlite":
                    # Take the read lock now, under the retry policy: in DELETE mode a
                    # stream of committing writers (this store's other threads included)
                    # can keep a reader out for longer than one busy timeout.
                    self.retry.run(lambda: session.execute(text("PRAGMA schema_version")))
                yield session
            finally:
                # A read has nothing to commit; rolling back also ends a transaction that
                # an error inside it (a damaged FTS index, say) left unusable.
                session.rollback()

    def checkpoint(self, mode: str = "PASSIVE") -> None:
        if self.dialect != "sqlite" or self.read_only:
            return
        if mode not in ("PASSIVE", "FULL", "RESTART", "TRUNCATE"):
            raise ValueError(f"unknown checkpoint mode {mode!r}")
        try:
            with self.engine.connect() as conn:
                conn.connection.driver_connection.execute(  # type: ignore[union-attr]
                    f"PRAGMA wal_checkpoint({mode})"
                )
        except Exception as exc:  # noqa: BLE001 (a checkpoint is best effort)
            log.debug("wal_checkpoint(%s) failed: %s", mode, exc)

    @property
    def writes(self) -> int:
        return self._writes

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self.checkpoint("TRUNCATE")
        self.engine.dispose()

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
