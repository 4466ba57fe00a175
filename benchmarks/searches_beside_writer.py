"""Searches running to their time limit beside a writer, on a DELETE-mode file.

    python -m benchmarks.searches_beside_writer [--threads 10] [--limit-ms 2000]
                                                [--seconds 20] [--messages 3000]

Threads sharing one Store search for 16 one-character prefixes OR'ed (slow on the
generated messages of short random words, so each search runs to its
HERMES_SEARCH_TIMEOUT_MS), started 0.1 s apart, while a second Store appends a message
every 0.2 s. In DELETE mode a reader keeps a writer from committing; a COMMIT waits
for the readers for as long as a search may read (docs/sqlite.md). Prints, as one JSON
line: the driver, the appends, how many failed and the longest an append waited, the
searches' outcomes and the longest a search took. The driver is this process's
(HERMES_STORE_SQLITE_DRIVER picks it).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path

PREFIXES = " OR ".join(f"{c}*" for c in "0123456789abcdef")


def run(threads: int, limit_ms: int, seconds: float, count: int) -> dict[str, object]:
    os.environ["HERMES_STORE_JOURNAL_MODE"] = "delete"
    from hermes_store import migrate
    from hermes_store.errors import SearchTimedOut
    from hermes_store.repositories.messages import MessageRepository
    from hermes_store.repositories.search import SearchRepository
    from hermes_store.repositories.sessions import SessionRepository
    from hermes_store.sqlite import driver as sqlite_driver
    from hermes_store.store import Store

    with tempfile.TemporaryDirectory() as scratch:
        url = f"sqlite:///{Path(scratch, 'state.db')}"
        migrate.upgrade(url, fts_min_pause=0)
        readers = Store(url)
        SessionRepository(readers).create_session("w", "cli")
        rnd = random.Random(35)
        for start in range(0, count, 500):
            batch = [
                " ".join(f"{rnd.getrandbits(20):x}" for _ in range(60))
                for _ in range(min(500, count - start))
            ]
            MessageRepository(readers).append_messages(
                "w", [{"role": "tool", "content": c} for c in batch]
            )
        os.environ["HERMES_SEARCH_TIMEOUT_MS"] = str(limit_ms)
        writer = Store(url)
        SessionRepository(writer).create_session("s", "cli")
        stop = threading.Event()
        outcomes: list[str] = []
        durations: list[float] = []

        def search() -> None:
            while not stop.is_set():
                began = time.monotonic()
                try:
                    SearchRepository(readers).search_messages(PREFIXES)
                    outcomes.append("completed")
                except SearchTimedOut:
                    outcomes.append("timed out")
                except Exception as exc:  # noqa: BLE001 (every other error is reported)
                    outcomes.append(type(exc).__name__)
                durations.append(time.monotonic() - began)

        workers = [threading.Thread(target=search) for _ in range(threads)]
        for worker in workers:
            worker.start()
            time.sleep(0.1)
        waits: list[float] = []
        failures: list[str] = []
        messages = MessageRepository(writer)
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            began = time.monotonic()
            try:
                messages.append_message("s", "user", "beside the searches")
            except Exception as exc:  # noqa: BLE001 (every failure is reported)
                failures.append(f"{type(exc).__name__}: {str(exc)[:80]}")
            waits.append(time.monotonic() - began)
            time.sleep(0.2)
        stop.set()
        for worker in workers:
            worker.join()
        writer.close()
        readers.close()
    return {
        "driver": sqlite_driver.current().name,
        "threads": threads,
        "limit_ms": limit_ms,
        "appends": len(waits),
        "failed": len(failures),
        "longest_append_s": round(max(waits), 2),
        "searches": dict(Counter(outcomes)),
        "longest_search_s": round(max(durations, default=0.0), 2),
        "first_failure": failures[0] if failures else None,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=10)
    parser.add_argument("--limit-ms", type=int, default=2000)
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--messages", type=int, default=3000)
    args = parser.parse_args()
    print(json.dumps(run(args.threads, args.limit_ms, args.seconds, args.messages)))


if __name__ == "__main__":
    main()
