"""What the commands share besides output: argument types, the `--url` option, and the
store a command opens."""

from __future__ import annotations

import argparse
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

from ._output import _report_wait, _wait_every

if TYPE_CHECKING:
    from ..store import Store


def _batch_arg(text: str) -> int:
    value = _count_arg(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a whole number >= 1, got {text!r}")
    return value


def _count_arg(text: str) -> int:
    return _whole_number(text, 0)


def _hits_arg(text: str) -> int:
    return _whole_number(text, 1)


def _whole_number(text: str, minimum: int) -> int:
    """A count given on the command line, from `minimum` up to the largest LIMIT both
    databases take (a larger one would reach the driver as an integer overflow)."""
    try:
        value = int(text)
    except ValueError:
        value = minimum - 1
    from ..repositories._paging import MAX_ROWS

    if not minimum <= value <= MAX_ROWS:
        raise argparse.ArgumentTypeError(
            f"expected a whole number from {minimum} to {MAX_ROWS}, got {text!r}"
        )
    return value


def _finite_amount(text: str, unit: str) -> float:
    """A finite number >= 0 given on the command line (NaN and infinity refused)."""
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 0 <= value < float("inf"):
        raise argparse.ArgumentTypeError(f"expected a number of {unit} >= 0, got {text!r}")
    return value


def _days_arg(text: str) -> float:
    return _finite_amount(text, "days")


def _wait_arg(text: str) -> float:
    return _finite_amount(text, "seconds")


def _zone_arg(text: str) -> str:
    from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

    try:
        ZoneInfo(text)
    except (ZoneInfoNotFoundError, ValueError):
        raise argparse.ArgumentTypeError(
            f"expected a time zone name such as UTC or Europe/Berlin, got {text!r}"
        ) from None
    return text


#: What `--wait` waits for, and how long by default (waiting.DEFAULT_WAIT_S).
_WAIT_HELP = (
    "wait this long for a lock another process holds, saying so every few seconds (default 20)"
)


@contextmanager
def _open_store(
    url: str | None, *, write: bool = False, wait: float | None = None
) -> Iterator[Store]:
    """The database at `url`, refused (with what to do) unless the repositories can serve
    it. The store makes its own pooled engine, so the reads of one command (an export reads
    once per session) reuse their connections. A command that only reads opens the file
    read-only, so it changes nothing (not its bytes, its mode, its journal mode, nor the
    -wal/-shm files it had) and works on a file it may not write and on a state.db the
    original v23 code wrote that hermes-store has not adopted; one that writes closes the
    store at the end (its TRUNCATE checkpoint). With `wait`, a write waits for another
    process's lock that long, saying so (`_report_wait`), then ends with LockTimeout."""
    from ..config import resolve_url
    from ..store import Store

    if wait is None or not write:
        store = Store(url, read_only=not write)
    else:
        from ..migrate import lock_waiter
        from ..runtime.waiting import WaitingRetry, shorten_pg_lock_waits

        waiter = lock_waiter(resolve_url(url), None, wait, _report_wait, every=_wait_every())
        store = Store(url, retry=WaitingRetry.for_waiter(waiter))
        shorten_pg_lock_waits(store.engine, min(waiter.every, 2.0))
        if waiter.find_holders is None:
            waiter.find_holders = _pg_holders(store)
    try:
        yield store
    finally:
        if write:
            store.close()
        else:
            store.dispose()


def _pg_holders(store: Store) -> Callable[[], str]:
    from ..runtime.waiting import pg_lock_holders

    return lambda: pg_lock_holders(store.engine, migration=False)


def with_url(p: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """`p` with the `--url` option every command that opens one database takes."""
    p.add_argument(
        "--url",
        help="database URL or path (default: $HERMES_STORE_URL, else $HERMES_HOME/state.db)",
    )
    return p


def with_formats(p: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """`p` with `--json` and `--csv`, one or the other."""
    formats = p.add_mutually_exclusive_group()
    formats.add_argument("--json", action="store_true", help="print JSON")
    formats.add_argument(
        "--csv", action="store_true", help="print CSV (a header row, then one row per record)"
    )
    return p
