"""PostgreSQL at scale: 10,000,000 messages in 100,000 sessions (`python -m benchmarks
--size 10m --postgres-only`; never in CI nor in the smoke test: it takes the better part
of an hour on two cores and about 30 GB of disk).

The corpus is generated straight into a scratch database with COPY: a database at head
(`migrate.upgrade`, so the word index is RUM where the extension is available), its
messages indexes, foreign key, activity and change-feed triggers set aside while two COPY
streams load the rows, then built again as the revisions define them (each session's
activity computed in one statement), then VACUUM (ANALYZE). Message bodies come from
a pool drawn by benchmarks/corpus.py's text generator (the same planted terms at the same
rates, so every search row has hits), shorter than the 1M corpus's (a user turn 4-40
words, an assistant turn 10-60, tool output 10-60): the load is bound by computing the
tsvector of every row, and shorter bodies keep it within the hour.

Rows, each with the 1-minute load average when it was measured: every search of the
main table (corpus.QUERIES, then the zero-hit ones of corpus.ZERO_HIT_QUERIES), listing
20 recent sessions, loading one 100-message conversation, and 8 writer processes
appending one message at a time to their own sessions for WRITE_SECONDS (appends/s in
all, p50/p99 of one append).
"""

from __future__ import annotations

import io
import json
import multiprocessing
import random
import statistics
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

from . import corpus, postgres
from .stats import load_average, timings

MESSAGES = 10_000_000
SESSIONS = 100_000
WRITERS = 8
WRITE_SECONDS = 20.0
SEARCH_ITERATIONS = 30
READ_ITERATIONS = 100
#: distinct bodies per role; each message takes one
POOL = 20_000
_COPY_CHUNK = 4 << 20  # bytes per write to the COPY stream

_MESSAGE_COLUMNS = "session_id, role, content, tool_call_id, tool_calls, tool_name, timestamp"
_SESSION_COLUMNS = "id, source, model, started_at, message_count, cwd"


def _escape(value: str) -> str:
    """A value in COPY's text format."""
    return (
        value.replace("\\", "\\\\").replace("\t", "\\t").replace("\n", "\\n").replace("\r", "\\r")
    )


class _Pool:
    """Pre-escaped bodies for each role, drawn by corpus.py's generator."""

    def __init__(self, seed: int) -> None:
        rng = random.Random(seed)
        text = corpus._Text(rng)  # noqa: SLF001 (the corpus's own text, planted terms included)
        self.user = [_escape(text.mixed(4, 40)) for _ in range(POOL)]
        self.assistant = [_escape(text.mixed(10, 60)) for _ in range(POOL)]
        self.tool = [
            _escape(
                rng.choice(corpus.CODE_SNIPPETS) if rng.random() < 0.5 else text.english(10, 60)
            )
            for _ in range(POOL)
        ]
        self.calls = [
            _escape(
                json.dumps(
                    [
                        {
                            "id": f"call_{n:08x}",
                            "type": "function",
                            "function": {"name": rng.choice(corpus.TOOLS), "arguments": "{}"},
                        }
                    ]
                )
            )
            for n in range(1024)
        ]


def session_id(n: int) -> str:
    return f"scale_{n:07d}"


def _session_lines(first: int, last: int, count: int, rng: random.Random) -> Iterator[str]:
    for n in range(first, last):
        started = corpus.EPOCH + n * 300.0
        source, model = rng.choice(corpus.SOURCES), rng.choice(corpus.MODELS)
        yield f"{session_id(n)}\t{source}\t{model}\t{started}\t{count}\t/home/dev/p{n % 30}\n"


def _message_lines(
    first: int, last: int, per_session: int, pool: _Pool, rng: random.Random
) -> Iterator[str]:
    """Sessions [first, last): user, assistant (with a tool call), tool, assistant, ..."""
    pick = rng.randrange
    for n in range(first, last):
        sid = session_id(n)
        ts = corpus.EPOCH + n * 300.0
        for j in range(per_session):
            ts += 1.5
            turn = j % 4
            if turn == 0:
                yield f"{sid}\tuser\t{pool.user[pick(POOL)]}\t\\N\t\\N\t\\N\t{ts}\n"
            elif turn == 1:
                calls = pool.calls[pick(len(pool.calls))]
                yield f"{sid}\tassistant\t{pool.assistant[pick(POOL)]}\t\\N\t{calls}\t\\N\t{ts}\n"
            elif turn == 2:
                body = pool.tool[pick(POOL)]
                yield f"{sid}\ttool\t{body}\tcall_{n:x}_{j}\t\\N\tterminal\t{ts}\n"
            else:
                yield f"{sid}\tassistant\t{pool.assistant[pick(POOL)]}\t\\N\t\\N\t\\N\t{ts}\n"


def _copy(url: str, table: str, columns: str, lines: Iterator[str]) -> None:
    import psycopg

    with psycopg.connect(_dsn(url), autocommit=True) as conn:
        conn.execute("SET synchronous_commit = off")
        with conn.cursor() as cur, cur.copy(f"COPY {table} ({columns}) FROM STDIN") as copy:
            buffer = io.StringIO()
            for line in lines:
                buffer.write(line)
                if buffer.tell() >= _COPY_CHUNK:
                    copy.write(buffer.getvalue())
                    buffer = io.StringIO()
            copy.write(buffer.getvalue())


def _dsn(url: str) -> str:
    from sqlalchemy.engine import make_url

    return make_url(url).set(drivername="postgresql").render_as_string(hide_password=False)


def _execute(url: str, statements: list[str]) -> None:
    import psycopg

    with psycopg.connect(_dsn(url), autocommit=True) as conn:
        conn.execute("SET maintenance_work_mem = '1GB'")
        for statement in statements:
            conn.execute(statement)  # type: ignore[arg-type]


def _parallel(jobs: list[Callable[[], None]]) -> None:
    errors: list[BaseException] = []

    def run(job: Callable[[], None]) -> None:
        try:
            job()
        except BaseException as exc:  # noqa: BLE001 (raised again below)
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(job,)) for job in jobs]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if errors:
        raise errors[0]


def load(url: str, messages: int, sessions: int, seed: int) -> dict[str, float]:
    """The database at head, then the corpus by COPY, indexes and the foreign key after."""
    import psycopg

    from hermes_store import migrate

    timings: dict[str, float] = {}
    started = time.perf_counter()
    migrate.upgrade(url)
    with psycopg.connect(_dsn(url), autocommit=True) as conn:
        indexes = [
            (name, definition)
            for name, definition in conn.execute(
                "SELECT indexname, indexdef FROM pg_indexes WHERE tablename = 'messages'"
                " AND indexname <> 'messages_pkey'"
            ).fetchall()
        ]
        foreign_keys = conn.execute(
            "SELECT conname, pg_get_constraintdef(oid) FROM pg_constraint"
            " WHERE conrelid = 'messages'::regclass AND contype = 'f'"
        ).fetchall()
        for name, _ in foreign_keys:
            conn.execute(f'ALTER TABLE messages DROP CONSTRAINT "{name}"')  # type: ignore[arg-type]
        for name, _ in indexes:
            conn.execute(f'DROP INDEX "{name}"')  # type: ignore[arg-type]
        conn.execute("ALTER TABLE messages SET (autovacuum_enabled = false)")
        for table, trigger in _bulk_load_triggers(conn):
            conn.execute(f'ALTER TABLE {table} DISABLE TRIGGER "{trigger}"')  # type: ignore[arg-type]
    timings["migrate_s"] = time.perf_counter() - started

    mark = time.perf_counter()
    pool = _Pool(seed)
    per_session = messages // sessions
    session_lines = _session_lines(0, sessions, per_session, random.Random(seed))
    _copy(url, "sessions", _SESSION_COLUMNS, session_lines)
    half = sessions // 2
    _parallel(
        [
            lambda: _copy(
                url,
                "messages",
                _MESSAGE_COLUMNS,
                _message_lines(0, half, per_session, pool, random.Random(seed + 1)),
            ),
            lambda: _copy(
                url,
                "messages",
                _MESSAGE_COLUMNS,
                _message_lines(half, sessions, per_session, pool, random.Random(seed + 2)),
            ),
        ]
    )
    timings["copy_s"] = time.perf_counter() - mark

    mark = time.perf_counter()
    # the two search indexes are the long builds: one connection each
    search = [d for n, d in indexes if "search_vector" in n or "trgm" in n]
    rest = [d for n, d in indexes if d not in search]
    rest += [f'ALTER TABLE messages ADD CONSTRAINT "{n}" {d}' for n, d in foreign_keys]
    _parallel([lambda d=d: _execute(url, [d]) for d in search] + [lambda: _execute(url, rest)])
    timings["index_s"] = time.perf_counter() - mark

    mark = time.perf_counter()
    with psycopg.connect(_dsn(url), autocommit=True) as conn:
        for table, trigger in _bulk_load_triggers(conn):
            conn.execute(f'ALTER TABLE {table} ENABLE TRIGGER "{trigger}"')  # type: ignore[arg-type]
        conn.execute(_ACTIVITY_BACKFILL)
    timings["activity_s"] = time.perf_counter() - mark

    mark = time.perf_counter()
    _execute(url, ["ALTER TABLE messages RESET (autovacuum_enabled)", "VACUUM (ANALYZE)"])
    timings["vacuum_analyze_s"] = time.perf_counter() - mark
    timings["total_s"] = time.perf_counter() - started
    return timings


#: The triggers a bulk load turns off: the session-activity triggers (per row they read
#: the session's newest message, a scan while the messages indexes are set aside) and the
#: change feed's (a load is no change anyone follows). Activity is filled in afterwards.
_BULK_LOAD_TRIGGER_PATTERNS = ("hermes_store_activity_%", "hermes_store_feed_%")

_ACTIVITY_BACKFILL = """
INSERT INTO hermes_store_session_activity (session_id, last_active)
SELECT s.id, COALESCE(m.newest, s.started_at)
FROM sessions AS s
LEFT JOIN (SELECT session_id, MAX(timestamp) AS newest FROM messages GROUP BY session_id) AS m
  ON m.session_id = s.id
ON CONFLICT (session_id) DO UPDATE SET last_active = EXCLUDED.last_active
"""


def _bulk_load_triggers(conn: Any) -> list[tuple[str, str]]:
    rows = conn.execute(
        "SELECT tgrelid::regclass::text, tgname FROM pg_trigger"
        " WHERE NOT tgisinternal AND tgrelid IN ('messages'::regclass, 'sessions'::regclass)"
        " AND (tgname LIKE %s OR tgname LIKE %s)",
        _BULK_LOAD_TRIGGER_PATTERNS,
    ).fetchall()
    return [(table, name) for table, name in rows]


def _row(name: str, samples: list[float], **extra: Any) -> dict[str, Any]:
    ordered = sorted(samples)

    def at(q: float) -> float:
        return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))] * 1000

    return {
        "operation": name,
        "n": len(samples),
        "p50_ms": statistics.median(ordered) * 1000,
        "p95_ms": at(0.95),
        "p99_ms": at(0.99),
        "load": load_average(),
        **extra,
    }


def _writer(url: str, number: int, start_at: float, seconds: float) -> list[float]:
    """One writer process: its own session, one message per append until the time is up."""
    from hermes_store.repositories.messages import MessageRepository
    from hermes_store.repositories.sessions import SessionRepository
    from hermes_store.store import Store

    rng = random.Random(number)
    text = corpus._Text(rng)  # noqa: SLF001
    bodies = [text.mixed(10, 60) for _ in range(200)]
    store = Store(url)
    try:
        sid = f"writer_{number}_{int(start_at)}"
        SessionRepository(store).create_session(sid, "cli")
        messages = MessageRepository(store)
        while time.time() < start_at:
            time.sleep(0.001)
        samples = []
        end = start_at + seconds
        n = 0
        while time.time() < end:
            began = time.perf_counter()
            messages.append_message(sid, "user" if n % 2 else "assistant", bodies[n % 200])
            samples.append(time.perf_counter() - began)
            n += 1
        return samples
    finally:
        store.close()


def measure(url: str, sessions: int, *, writers: int = WRITERS) -> list[dict[str, Any]]:
    from hermes_store.repositories.messages import MessageRepository
    from hermes_store.repositories.sessions import SessionRepository
    from hermes_store.search import search_messages
    from hermes_store.store import Store

    rows: list[dict[str, Any]] = []
    store = Store(url)
    try:
        for name, query in corpus.all_queries().items():

            def run(i: int, query: str = query) -> list[dict[str, Any]]:
                with store.read() as conn:
                    return search_messages(conn, query)

            found = len(run(0))
            rows.append(
                _row(corpus.row_label(name, query), timings(run, SEARCH_ITERATIONS), hits=found)
            )
            print(_line(rows[-1]), flush=True)
        listing = SessionRepository(store)
        rows.append(
            _row(
                "list 20 recent sessions",
                timings(lambda i: listing.list_sessions_rich(limit=20), READ_ITERATIONS),
            )
        )
        print(_line(rows[-1]), flush=True)
        picks = random.Random(7)
        targets = [session_id(picks.randrange(sessions)) for _ in range(READ_ITERATIONS + 3)]
        loader = MessageRepository(store)
        loaded = len(loader.get_messages(targets[0]))
        rows.append(
            _row(
                f"load a conversation ({loaded} messages)",
                timings(lambda i: loader.get_messages(targets[i]), READ_ITERATIONS),
            )
        )
        print(_line(rows[-1]), flush=True)
    finally:
        store.close()
    rows.append(write_row(url, writers))
    print(_line(rows[-1]), flush=True)
    return rows


def write_row(url: str, writers: int, seconds: float = WRITE_SECONDS) -> dict[str, Any]:
    context = multiprocessing.get_context("spawn")
    start_at = time.time() + 5.0  # every writer connected and its session made
    with context.Pool(writers) as workers:
        results = workers.starmap(_writer, [(url, n, start_at, seconds) for n in range(writers)])
    samples = [s for result in results for s in result]
    return _row(
        f"{writers} writer processes, append one message",
        samples,
        appends_per_s=len(samples) / seconds,
    )


def _line(row: dict[str, Any]) -> str:
    extra = ""
    if "appends_per_s" in row:
        extra = f" | {row['appends_per_s']:8.0f} appends/s"
    elif "hits" in row:
        extra = f" | {row['hits']} hits"
    return (
        f"{row['operation']:<48} | p50 {row['p50_ms']:8.3f} | p95 {row['p95_ms']:8.3f}"
        f" | p99 {row['p99_ms']:8.3f} ms | load {row['load']:4.1f}{extra}"
    )


def run(messages: int = MESSAGES, sessions: int = SESSIONS, seed: int = 23) -> dict[str, Any]:
    """Load, measure, print; the scratch database is dropped afterwards."""
    admin = postgres.admin_url()
    reason = postgres.unavailable(admin)
    if reason is not None:
        print(f"PostgreSQL rows skipped: {reason}")
        return {"skipped": reason}
    # the code measured is the code there was when the run started, not after its load
    import hermes_store.repositories.messages
    import hermes_store.repositories.sessions
    import hermes_store.search  # noqa: F401

    with postgres.scratch_database(admin) as url:
        print(f"loading {messages:,} messages in {sessions:,} sessions by COPY ...", flush=True)
        timings = load(url, messages, sessions, seed)
        method = _index_method(url)
        print(
            f"loaded in {timings['total_s']:.0f} s: migrate {timings['migrate_s']:.0f} s, "
            f"COPY {timings['copy_s']:.0f} s, indexes {timings['index_s']:.0f} s, "
            f"VACUUM (ANALYZE) {timings['vacuum_analyze_s']:.0f} s; word index: {method}",
            flush=True,
        )
        rows = measure(url, sessions)
    return {
        "messages": messages,
        "sessions": sessions,
        "load": timings,
        "index": method,
        "rows": rows,
    }


def _index_method(url: str) -> str:
    from sqlalchemy import create_engine
    from sqlalchemy.pool import NullPool

    from hermes_store.search.index_method import read_index_method

    engine = create_engine(url, poolclass=NullPool)
    try:
        with engine.connect() as conn:
            return read_index_method(conn)
    finally:
        engine.dispose()
