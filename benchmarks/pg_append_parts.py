"""What one PostgreSQL append costs, part by part, beside LangGraph's `PostgresSaver.put`.

    python -m benchmarks.pg_append_parts [--appends 300] [--json PATH]

A plain append (no idempotency key, no turn token) is BEGIN, one call of the server
function `hermes_store_append_message` and COMMIT. On fresh databases of the server
(HERMES_STORE_BENCH_PG, else HERMES_STORE_TEST_PG, else the local test server), each
with 100 sessions at head, these run in rotation call by call (so load on the shared
machine hits them alike), each on one session after another:

- `append_message`, the repository call;
- the statement it sends, recorded from it, replayed through psycopg alone: with
  psycopg's own BEGIN (a round trip of its own, as before the pipelined BEGIN), and
  with the BEGIN in the same round trip as the call (what the repository call sends);
  the difference of the repository call from the latter is hermes-store's Python;
- that pipelined replay with `synchronous_commit = off` for the session: the COMMIT
  no longer waits for the WAL flush, which is the flush's share;
- the pipelined replay on copies without one part each: the RUM full-text index, the
  trigram index, both search indexes, the change feed's triggers, the session-activity
  trigger, and without all of them and every secondary index (a bare table);
- LangGraph's `PostgresSaver.put` of a one-message-longer conversation, as in
  `benchmarks.per_turn` (when installed).

Each replay's time before its COMMIT (the function's work: indexes, triggers) and the
COMMIT (the change feed's stamp, then the WAL flush) are given apart, with the WAL the
function call writes (EXPLAIN (ANALYZE, WAL), rolled back). Never run in CI.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import json
import statistics
import time
from collections.abc import Callable
from typing import Any

from . import postgres
from .per_turn import text_of
from .stats import load_average

SESSIONS = 100
#: the copies without one part each: statements run on a copy at head
STRIPPED: dict[str, tuple[str, ...]] = {
    "without the RUM full-text index": ("DROP INDEX idx_messages_search_vector",),
    "without the trigram index": ("DROP INDEX idx_messages_trgm",),
    "without both search indexes": (
        "DROP INDEX idx_messages_search_vector",
        "DROP INDEX idx_messages_trgm",
    ),
    "without the change feed's triggers": (
        "ALTER TABLE messages DISABLE TRIGGER hermes_store_feed_message_insert",
        "ALTER TABLE sessions DISABLE TRIGGER hermes_store_feed_session_update",
    ),
    "without the session-activity trigger": (
        "ALTER TABLE messages DISABLE TRIGGER hermes_store_activity_message_added",
    ),
    "bare: no secondary index, no trigger": (
        "DROP INDEX idx_messages_search_vector",
        "DROP INDEX idx_messages_trgm",
        "DROP INDEX hermes_store_messages_session_id",
        "DROP INDEX idx_messages_session",
        "DROP INDEX idx_messages_session_active",
        "ALTER TABLE messages DISABLE TRIGGER USER",
        "ALTER TABLE sessions DISABLE TRIGGER USER",
    ),
}
REPOSITORY = "append_message (the repository call)"
APART = "replay, BEGIN apart (3 round trips)"
PIPELINED = "replay, BEGIN pipelined (2 round trips)"
NO_FLUSH = "replay, BEGIN pipelined, synchronous_commit off"
LANGGRAPH = "LangGraph PostgresSaver.put"


def _prepare(url: str, ddl: tuple[str, ...] = ()) -> None:
    from sqlalchemy import create_engine, text
    from sqlalchemy.pool import NullPool

    from hermes_store import migrate
    from hermes_store.repositories.sessions import SessionRepository
    from hermes_store.store import Store

    migrate.upgrade(url, fts_min_pause=0)
    with Store(url) as store:
        for i in range(SESSIONS):
            SessionRepository(store).create_session(f"s{i}", "cli")
    engine = create_engine(url, poolclass=NullPool)
    with engine.begin() as conn:
        for statement in ddl:
            conn.execute(text(statement))
        conn.execute(text("ANALYZE"))
    engine.dispose()


def _record(url: str) -> tuple[str, dict[str, Any]]:
    """The statement (and parameters) one append_message sends. Recorded through a store
    of its own: an engine that ever had a listener keeps dispatching connection events
    after its removal, which would slow every later call of the measured store."""
    from sqlalchemy import event

    from hermes_store.repositories.messages import MessageRepository
    from hermes_store.store import Store

    seen: list[tuple[str, Any]] = []

    def record(conn: Any, cursor: Any, statement: str, params: Any, *rest: Any) -> None:
        seen.append((statement, params))

    with Store(url) as store:
        event.listen(store.engine, "before_cursor_execute", record)
        MessageRepository(store).append_message("s0", "user", text_of(0))
    (found,) = [(sql, dict(p)) for sql, p in seen if "hermes_store_append_message" in sql]
    return found


class Replay:
    """The recorded call on a psycopg connection of its own; `timed` keeps (before
    COMMIT, COMMIT) per call."""

    def __init__(self, url: str, sql: str, params: dict[str, Any], pipelined: bool) -> None:
        import psycopg

        self.conn = psycopg.connect(url.replace("postgresql+psycopg://", "postgresql://", 1))
        self.sql, self.params, self.pipelined = sql, params, pipelined
        self.parts: list[tuple[float, float]] = []

    def __call__(self, n: int) -> None:
        conn = self.conn
        at = time.time()
        params = {**self.params, "session_id": f"s{n % SESSIONS}", "at": at}
        params.update(content=text_of(n), timestamp=at)
        started = time.perf_counter()
        if self.pipelined:
            conn.autocommit = True
            try:
                with conn.pipeline():
                    conn.execute("BEGIN ISOLATION LEVEL READ COMMITTED", prepare=False)
                    cursor = conn.execute(self.sql, params)
            finally:
                conn._autocommit = False
        else:
            cursor = conn.execute(self.sql, params)
        cursor.fetchone()
        called = time.perf_counter()
        conn.commit()
        if n >= 0:
            self.parts.append((called - started, time.perf_counter() - called))

    def wal_bytes(self) -> int:
        """WAL one call writes (its EXPLAIN (ANALYZE, WAL), rolled back), median of 5."""
        import re

        bytes_seen = []
        for n in range(5):
            params = {**self.params, "session_id": f"s{n}"}
            # the recorded statement itself, its values bound by the driver
            explain = f"EXPLAIN (ANALYZE, WAL, COSTS OFF) {self.sql}"
            plan = "\n".join(str(r[0]) for r in self.conn.execute(explain, params))
            self.conn.rollback()
            found = re.search(r"bytes=(\d+)", plan)
            bytes_seen.append(int(found.group(1)) if found else 0)
        return int(statistics.median(bytes_seen))

    def close(self) -> None:
        self.conn.close()


def run(appends: int) -> dict[str, Any]:
    from hermes_store.repositories.messages import MessageRepository
    from hermes_store.store import Store

    admin = postgres.admin_url()
    why = postgres.unavailable(admin)
    if why is not None:
        return {"skipped": why}
    with contextlib.ExitStack() as stack:

        def database(suffix: str, ddl: tuple[str, ...] = ()) -> str:
            url = stack.enter_context(postgres.scratch_database(admin, f"_parts_{suffix}"))
            _prepare(url, ddl)
            return url

        full = database("full")
        store = stack.enter_context(Store(full))
        repo = MessageRepository(store)
        sql, params = _record(full)
        params.pop("session_id")
        calls: dict[str, Callable[[int], None]] = {
            REPOSITORY: lambda n: repo.append_message(f"s{n % SESSIONS}", "user", text_of(n)),
        }
        replays: dict[str, Replay] = {
            APART: Replay(full, sql, params, pipelined=False),
            PIPELINED: Replay(full, sql, params, pipelined=True),
            NO_FLUSH: Replay(full, sql, params, pipelined=True),
        }
        replays[NO_FLUSH].conn.execute("SET synchronous_commit = off")
        replays[NO_FLUSH].conn.commit()
        for i, (name, ddl) in enumerate(STRIPPED.items()):
            replays[f"replay {name}"] = Replay(database(str(i), ddl), sql, params, True)
        for replay in replays.values():
            stack.callback(replay.close)
        calls.update(replays)
        with contextlib.suppress(ImportError):
            from .per_turn import _langgraph_postgres

            saver = _langgraph_postgres(database("langgraph"))
            stack.callback(saver.close)
            saver.setup([f"s{i}" for i in range(SESSIONS)], "h", "t")
            calls[LANGGRAPH] = lambda n: saver.append(f"s{n % SESSIONS}", n)

        names = list(calls)
        samples: dict[str, list[float]] = {name: [] for name in names}
        gc.collect()
        for n in range(-20, appends):
            for j in range(len(names)):
                name = names[(n + j) % len(names)]
                started = time.perf_counter()
                calls[name](n)
                if n >= 0:
                    samples[name].append(time.perf_counter() - started)
        wal = {name: replay.wal_bytes() for name, replay in replays.items()}
    p50 = {name: statistics.median(t) * 1e3 for name, t in samples.items()}
    rows: dict[str, dict[str, Any]] = {}
    for name in names:
        row: dict[str, Any] = {"p50_ms": p50[name]}
        if name in replays:
            parts = replays[name].parts
            row["before_commit_ms"] = statistics.median(p[0] for p in parts) * 1e3
            row["commit_ms"] = statistics.median(p[1] for p in parts) * 1e3
            row["wal_bytes"] = wal[name]
        rows[name] = row
    return {"appends": appends, "rows": rows, "load": load_average()}


def print_table(result: dict[str, Any]) -> None:
    if "skipped" in result:
        print(f"PostgreSQL append parts: skipped ({result['skipped']})")
        return
    rows = result["rows"]
    peer = rows.get(LANGGRAPH, {}).get("p50_ms")
    print(
        f"one PostgreSQL append, part by part: {result['appends']} appends each, in rotation, "
        f"p50 ms (load {result['load']:.1f})"
    )
    print(f"  {'':<58} {'p50':>7} {'ratio':>6} {'call':>7} {'COMMIT':>7} {'WAL B':>7}")
    for name, row in rows.items():
        ratio = f"{row['p50_ms'] / peer:5.2f}x" if peer else ""
        extra = ""
        if "commit_ms" in row:
            extra = f" {row['before_commit_ms']:7.3f} {row['commit_ms']:7.3f} {row['wal_bytes']:7d}"
        print(f"  {name:<58} {row['p50_ms']:7.3f} {ratio:>6}{extra}")
    if REPOSITORY in rows and PIPELINED in rows:
        python = rows[REPOSITORY]["p50_ms"] - rows[PIPELINED]["p50_ms"]
        print(f"  hermes-store's Python (repository call - pipelined replay): {python:.3f} ms")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.pg_append_parts", description=__doc__
    )
    parser.add_argument("--appends", type=int, default=300)
    parser.add_argument("--json")
    args = parser.parse_args(argv)
    result = run(args.appends)
    print_table(result)
    if args.json:
        with open(args.json, "w") as out:
            json.dump(result, out, indent=2)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
