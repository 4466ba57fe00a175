"""The same workload on PostgreSQL, next to hermes-store's SQLite numbers from the same run.

A fresh database `hs_bench_<pid>` on the server (HERMES_STORE_BENCH_PG, else
HERMES_STORE_TEST_PG, else postgresql+psycopg://root@127.0.0.1:5432/test names the server
and the database to connect to for CREATE/DROP) is brought to head by `migrate.upgrade`
and loaded from the generated SQLite database by `copy.copy_database` (what `hermes-store
copy` runs: keyset batches, then a per-table digest check), timed. Then `VACUUM
(ANALYZE)`: statistics for the planner and GIN pending lists merged, the state autovacuum
reaches on a settled database.

The operations are the hermes-store calls of the SQLite rows, on a `Store(pg_url)` and,
alternately call by call, on a fresh SQLite copy of the same file: on a busy machine
(other processes, or other clients of the server) both sides see the same moment, so
the ratio means something; the main table's SQLite numbers are kept in the JSON beside.
The database is dropped afterwards. Without a server the rows are skipped, with the
reason.

    python -m benchmarks.postgres explain URL [QUERY ...]

prints EXPLAIN (ANALYZE, BUFFERS) of the statements those searches issue.
"""

from __future__ import annotations

import gc
import os
import shutil
import statistics
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from . import corpus
from .stats import comparison

DEFAULT_ADMIN_URL = "postgresql+psycopg://root@127.0.0.1:5432/test"
BATCH = 50

def admin_url() -> str:
    return (
        os.environ.get("HERMES_STORE_BENCH_PG")
        or os.environ.get("HERMES_STORE_TEST_PG")
        or DEFAULT_ADMIN_URL
    )


def unavailable(url: str) -> str | None:
    """None when the server answers, else why it cannot be used."""
    try:
        import psycopg  # noqa: F401
    except ImportError:
        return "psycopg is not installed (pip install -e '.[postgres]')"
    from sqlalchemy import create_engine, text
    from sqlalchemy.pool import NullPool

    engine = create_engine(url, poolclass=NullPool, connect_args={"connect_timeout": 5})
    try:
        with engine.connect() as conn:
            conn.execute(text("SELECT 1"))
    except Exception as exc:  # noqa: BLE001 (any failure means: no server)
        return f"no PostgreSQL server at {url}: {str(exc).splitlines()[0]}"
    finally:
        engine.dispose()
    return None


def _admin(url: str, sql: str) -> None:
    from sqlalchemy import create_engine, text
    from sqlalchemy.pool import NullPool

    engine = create_engine(url, poolclass=NullPool, isolation_level="AUTOCOMMIT")
    try:
        with engine.connect() as conn:
            conn.execute(text(sql))
    finally:
        engine.dispose()


@contextmanager
def scratch_database(admin: str, suffix: str = "") -> Iterator[str]:
    """A fresh database for the run, dropped afterwards (whatever happens); a `suffix`
    gives a second one beside it."""
    from sqlalchemy.engine import make_url

    name = f"hs_bench_{os.getpid()}{suffix}"
    _admin(admin, f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    _admin(admin, f"CREATE DATABASE \"{name}\" TEMPLATE template0 ENCODING 'UTF8'")
    try:
        yield make_url(admin).set(database=name).render_as_string(hide_password=False)
    finally:
        _admin(admin, f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def load(source_db: Path, pg_url: str) -> dict[str, Any]:
    """Bring the database to head, copy the corpus in, VACUUM (ANALYZE); timed."""
    from sqlalchemy import create_engine
    from sqlalchemy.pool import NullPool

    from hermes_store import migrate
    from hermes_store.migration import copy

    started = time.perf_counter()
    migrate.upgrade(pg_url)
    migrated = time.perf_counter()
    report = copy.copy_database(f"sqlite:///{source_db}", pg_url, batch_size=5000)
    copied = time.perf_counter()
    if not report.ok:
        raise SystemExit(f"copy to PostgreSQL failed its verification: {report.as_dict()}")
    engine = create_engine(pg_url, poolclass=NullPool, isolation_level="AUTOCOMMIT")
    try:
        with engine.connect() as conn:
            conn.exec_driver_sql("VACUUM (ANALYZE)")
    finally:
        engine.dispose()
    analyzed = time.perf_counter()
    return {
        "migrate_s": migrated - started,
        "copy_s": copied - migrated,
        "vacuum_analyze_s": analyzed - copied,
        "total_s": analyzed - started,
        "rows": sum(report.copied.values()),
        "messages": report.copied.get("messages", 0),
    }


def _measure_pair(
    lite: Callable[[int], Any], pg: Callable[[int], Any], n: int, warmup: int = 3
) -> tuple[list[float], list[float]]:
    """Both backends sample by sample, alternately: the same moment of a busy machine."""
    for i in range(warmup):
        lite(-1 - i)
        pg(-1 - i)
    lite_samples, pg_samples = [], []
    gc.collect()
    for i in range(n):
        started = time.perf_counter()
        lite(i)
        middle = time.perf_counter()
        pg(i)
        lite_samples.append(middle - started)
        pg_samples.append(time.perf_counter() - middle)
    return lite_samples, pg_samples


def run_ops(
    pg_url: str,
    sqlite_db: Path,
    sessions: list[corpus.SessionSpec],
    targets: Sequence[str],
    iterations: dict[str, int],
) -> list[dict[str, Any]]:
    """The hermes-store calls of the SQLite rows (same inputs, same order) on both a
    Store(pg_url) and a Store(sqlite_db), interleaved."""
    from hermes_store.repositories.messages import MessageRepository
    from hermes_store.repositories.sessions import SessionRepository
    from hermes_store.search import search_messages
    from hermes_store.store import Store

    stores = {"sqlite": Store(str(sqlite_db)), "pg": Store(pg_url)}
    messages = {k: MessageRepository(v) for k, v in stores.items()}
    session_repo = {k: SessionRepository(v) for k, v in stores.items()}
    start_ts = max(s.started_at for s in sessions) + 3600
    rows: list[dict[str, Any]] = []

    def pair(name: str, make: Callable[[str], Callable[[int], Any]], n: int) -> None:
        lite, pg = _measure_pair(make("sqlite"), make("pg"), n)
        rows.append(comparison(name, "sqlite", lite, "pg", pg))

    try:
        n = iterations["append_one"]
        fresh = list(corpus.fresh_messages(101, n + 10, start_ts))

        def append_one(kind: str) -> Callable[[int], Any]:
            def run(i: int) -> None:
                m = fresh[i % len(fresh)]
                messages[kind].append_message(
                    targets[i % len(targets)],
                    m["role"],
                    m.get("content"),
                    tool_calls=m.get("tool_calls"),
                    timestamp=m.get("timestamp"),
                )

            return run

        pair("append one", append_one, n)

        batches = [
            list(corpus.fresh_messages(200 + b, BATCH, start_ts + 10_000 * b)) for b in range(8)
        ]
        pair(
            f"append batch ({BATCH})",
            lambda kind: (
                lambda i: messages[kind].append_messages(
                    targets[i % len(targets)], batches[i % len(batches)]
                )
            ),
            iterations["append_batch"],
        )

        sizes = {s.id: len(s.messages) for s in sessions}
        mean_len = statistics.mean(sizes[t] for t in targets)
        pair(
            f"get messages (avg {mean_len:.0f} rows)",
            lambda kind: lambda i: messages[kind].get_messages(targets[i % len(targets)]),
            iterations["get"],
        )
        pair(
            "list 20 recent sessions",
            lambda kind: lambda i: session_repo[kind].list_sessions_rich(limit=20),
            iterations["list"],
        )
        for name, query in corpus.all_queries().items():
            with stores["pg"].read() as sess:
                corpus.check_hits(name, query, search_messages(sess, query))

            def search(kind: str, query: str = query) -> Callable[[int], Any]:
                def run(i: int) -> None:
                    with stores[kind].read() as sess:
                        search_messages(sess, query)

                return run

            pair(corpus.row_label(name, query), search, iterations["search"])
    finally:
        for store in stores.values():
            store.close()
    return rows


def run(
    source_db: Path,
    sessions: list[corpus.SessionSpec],
    sqlite_rows: list[dict[str, Any]],
    *,
    targets: Sequence[str],
    iterations: dict[str, int],
) -> dict[str, Any]:
    """{"skipped": reason} without a server, else the load timings and the rows: each
    operation on PostgreSQL and on a fresh SQLite copy of `source_db` (interleaved,
    sample by sample; both start from the same rows and get the same appends), with the
    ratio pg/sqlite, and the SQLite numbers of the main table for reference."""
    admin = admin_url()
    reason = unavailable(admin)
    if reason is not None:
        return {"skipped": reason, "server": admin}
    from sqlalchemy import create_engine, text
    from sqlalchemy.pool import NullPool

    engine = create_engine(admin, poolclass=NullPool)
    try:
        with engine.connect() as conn:
            version = str(conn.execute(text("SHOW server_version")).scalar())
    finally:
        engine.dispose()
    with scratch_database(admin) as pg_url:
        loading = load(source_db, pg_url)
        print(
            f"postgresql {version}: loaded {loading['messages']} messages "
            f"({loading['rows']} rows) in {loading['total_s']:.1f} s = migrate "
            f"{loading['migrate_s']:.1f} s + copy_database {loading['copy_s']:.1f} s "
            f"+ VACUUM (ANALYZE) {loading['vacuum_analyze_s']:.1f} s"
        )
        sqlite_db = source_db.with_name("postgres_pair.db")
        shutil.copyfile(source_db, sqlite_db)
        try:
            pg_rows = run_ops(pg_url, sqlite_db, sessions, targets, iterations)
        finally:
            sqlite_db.unlink(missing_ok=True)
            for suffix in ("-wal", "-shm"):
                sqlite_db.with_name(sqlite_db.name + suffix).unlink(missing_ok=True)
    by_name = {r["operation"]: r for r in sqlite_rows}
    for row in pg_rows:
        main = by_name.get(row["operation"])
        if main is not None:
            row["sqlite_main_table_p50_ms"] = main["store_p50_ms"]
            row["sqlite_main_table_p95_ms"] = main["store_p95_ms"]
    return {"server": admin, "version": version, "load": loading, "rows": pg_rows}


def print_table(result: dict[str, Any]) -> None:
    if "skipped" in result:
        print(f"\nPostgreSQL rows skipped: {result['skipped']}")
        return
    print(
        f"\nPostgreSQL {result['version']} vs SQLite, both hermes-store, measured alternately "
        "(sample by sample) in the same window"
    )
    head = (
        "operation",
        "sqlite p50/p95 ms",
        "postgres p50/p95 ms",
        "ratio pg/sqlite p50 (p95)",
        "load",
    )
    lines = []
    for r in result["rows"]:
        lite = "-"
        if "sqlite_p50_ms" in r:
            lite = f"{r['sqlite_p50_ms']:8.3f} / {r['sqlite_p95_ms']:8.3f}"
        ratio = f"{r['ratio_p50']:5.2f}x ({r['ratio_p95']:.2f}x)" if "ratio_p50" in r else "-"
        pg = f"{r['pg_p50_ms']:8.3f} / {r['pg_p95_ms']:8.3f}"
        lines.append((r["operation"], lite, pg, ratio, f"{r.get('load', 0.0):.1f}"))
    widths = [max(len(x[i]) for x in (head, *lines)) for i in range(5)]

    def fmt(cells: tuple[str, ...]) -> str:
        return " | ".join(c.ljust(w) for c, w in zip(cells, widths, strict=True))

    print(fmt(head))
    print("-+-".join("-" * w for w in widths))
    for line in lines:
        print(fmt(line))


def explain(pg_url: str, queries: Sequence[str]) -> None:
    """EXPLAIN (ANALYZE, BUFFERS) of every statement `search_messages` issues for each
    query, on a database that is already loaded (the benchmark drops its own; `--keep`
    keeps the SQLite files, and `load(DIR / "base.db", url)` or `hermes-store copy` moves
    one to a database of your own)."""
    from sqlalchemy import event

    from hermes_store.search import search_messages
    from hermes_store.store import Store

    store = Store(pg_url)
    captured: list[tuple[str, Any]] = []

    def capture(conn: Any, cursor: Any, statement: str, params: Any, *rest: Any) -> None:
        captured.append((statement, params))

    event.listen(store.engine, "before_cursor_execute", capture)
    try:
        for query in queries:
            captured.clear()
            with store.read() as sess:
                started = time.perf_counter()
                hits = search_messages(sess, query)
                elapsed = (time.perf_counter() - started) * 1000
            print(
                f"===== {query!r}: {len(hits)} hits, {elapsed:.2f} ms, {len(captured)} statements"
            )
            raw = store.engine.raw_connection()
            try:
                cur = raw.cursor()
                for statement, params in captured:
                    print(statement)
                    if statement.startswith("EXPLAIN"):  # the search's own estimate
                        continue
                    cur.execute("EXPLAIN (ANALYZE, BUFFERS) " + statement, params)
                    for (line,) in cur.fetchall():
                        print("    " + line)
                raw.rollback()
            finally:
                raw.close()
    finally:
        store.close()


def main(argv: list[str] | None = None) -> int:
    import argparse

    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.postgres",
        description="EXPLAIN (ANALYZE, BUFFERS) the statements of PostgreSQL searches",
    )
    parser.add_argument("command", choices=("explain",))
    parser.add_argument("url", help="a loaded PostgreSQL database (SQLAlchemy URL)")
    parser.add_argument("queries", nargs="*", help="default: the benchmark's queries")
    args = parser.parse_args(argv)
    explain(args.url, args.queries or list(corpus.all_queries().values()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
