"""hermes-store vs the raw-sqlite3 floor, in one run, on two copies of one database.

    python -m benchmarks [--size 10k|100k|1m] [--quick] [--smoke] [--json PATH] [--keep DIR]
                         [--skip-upgrade] [--upgrade-size SIZE] [--upgrade-shapes v9,v22]
                         [--no-postgres]
    python -m benchmarks --size 10m --postgres-only [--json PATH]

The second form is PostgreSQL alone at 10,000,000 messages (benchmarks/scale.py; never in
CI nor in the smoke test).

A third table runs create/append/load/list in each SQLite journal mode (DELETE and WAL on
the standard library's SQLite, WAL on the `sqlite` extra's pysqlite3; see
benchmarks/journal_modes.py), with ratios against DELETE measured in the same run.

Rows: append one message, append a batch of 50, get a session's messages, list 20
recent sessions, search (word, "phrase", prefix*, OR, 2-char CJK, 3+-char CJK, and
literals: `don't`, `99.5%`, an e-mail address, a path, a flag, a literal with a word, a
2-character literal, `the.`; benchmarks/corpus.py QUERIES; then the zero-hit searches of
ZERO_HIT_QUERIES: a misspelling extending a frequent word, one inside a word, a random
string, a literal found nowhere, ten of those OR-ed), each as
p50 / p95 milliseconds against the floor (benchmarks/raw_floor.py: the same statements on
the stdlib sqlite3 module), and one "upgrade" row per legacy shape (benchmarks/upgrade.py:
a generated v9- or v22-shaped file brought to head in a subprocess; total time, migration
transaction, longest write transaction, peak RSS); its floor is a raw FTS5 'rebuild' of
both v23 indexes on the upgraded file, the work the chunked backfill does.

A second table runs the same operations on PostgreSQL (benchmarks/postgres.py) beside
hermes-store's SQLite numbers; `--no-postgres` skips it, and without a server its rows
are skipped with the reason ("postgres": {"skipped": ...} in the JSON).

Then two asyncio tables: concurrent chats on `AsyncStore`, its thread pool against a
native asyncio path on PostgreSQL (benchmarks/concurrent.py: 200 and 1,000 chats, 20
with --quick; `--no-concurrent` skips it), and hermes-store beside the agent frameworks'
session stores on one workload (benchmarks/peers.py: 200 chats, 20 with --quick; rows of
stores that are not installed say so; `--no-peers` skips it).

The per-turn calls of an agent (benchmarks/per_turn.py): hermes-store beside the agent
frameworks' stores called in rotation in one thread, on SQLite through each driver and on
PostgreSQL, each row's ratio to the best peer (200 calls per store and row, 20 with
--quick; `--no-per-turn` skips it).

Last, the change feed (benchmarks/feed.py): a poll at 100k changes against 10k, and an
append with the feed's triggers against one without them, on both backends
(`--no-feed` skips it).

The facade beside the original (benchmarks/facade.py): `hermes_store.compat.SessionDB`
against Hermes's own v23 `SessionDB`, every per-call operation in rotation on the same
SQLite library; optional, run only with `--original DIR` (or `$HERMES_ORIGINAL`) naming a
directory holding the original's `hermes_state.py` (never part of this project), and
skipped with a line otherwise (20 calls per operation on the small data with --quick).

And encryption at rest (benchmarks/encryption.py): an append, a word and a substring
search and a Store's open on a SQLCipher-encrypted copy against the plain file, both on
sqlcipher3 in one child process (`--no-encryption` skips it; skipped, saying so, where
sqlcipher3 is not installed).
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import shutil
import sqlite3
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from . import (
    NO_PEERS_ENV,
    concurrent,
    corpus,
    encryption,
    facade,
    feed,
    journal_modes,
    peers,
    per_turn,
    postgres,
    scale,
    upgrade,
)
from .raw_floor import Floor, bulk_load, connect, create_schema, record_statements
from .stats import comparison

BATCH = 50


#: --smoke: a few calls per row, enough to run every row's code (its numbers mean nothing)
SMOKE_ITERATIONS = {"append_one": 10, "append_batch": 3, "get": 5, "list": 5, "search": 3}


def _iterations(quick: bool, smoke: bool = False) -> dict[str, int]:
    if smoke:
        return dict(SMOKE_ITERATIONS)
    if quick:
        return {"append_one": 200, "append_batch": 20, "get": 40, "list": 30, "search": 30}
    return {"append_one": 1000, "append_batch": 100, "get": 200, "list": 100, "search": 100}


def _measure(fn: Callable[[int], Any], n: int, warmup: int = 3) -> list[float]:
    for i in range(warmup):
        fn(-1 - i)
    samples = []
    gc.collect()
    for i in range(n):
        started = time.perf_counter()
        fn(i)
        samples.append(time.perf_counter() - started)
    return samples


def build_database(directory: Path, sessions: list[corpus.SessionSpec]) -> tuple[Path, Path]:
    """One generated database at head, copied: (floor copy, hermes-store copy)."""
    base = directory / "base.db"
    create_schema(base)
    conn = connect(base)
    bulk_load(conn, sessions)
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.execute("ANALYZE")  # hermes-store never runs it; neither copy gets an advantage
    conn.close()
    floor_db, store_db = directory / "floor.db", directory / "store.db"
    for target in (floor_db, store_db):
        shutil.copyfile(base, target)
    return floor_db, store_db


def _pick_sessions(sessions: list[corpus.SessionSpec], count: int) -> list[str]:
    """Sessions spread over the size distribution (sorted by length, evenly sampled)."""
    by_size = sorted(sessions, key=lambda s: (len(s.messages), s.id))
    picked = {by_size[(i * len(by_size)) // count].id for i in range(count)}
    return sorted(picked)


def run_ops(
    floor_db: Path,
    store_db: Path,
    sessions: list[corpus.SessionSpec],
    quick: bool,
    smoke: bool = False,
) -> list[dict[str, Any]]:
    from hermes_store.repositories.messages import MessageRepository
    from hermes_store.repositories.sessions import SessionRepository
    from hermes_store.search import search_messages
    from hermes_store.store import Store

    its = _iterations(quick, smoke)
    floor = Floor(floor_db)
    store = Store(str(store_db))
    messages = MessageRepository(store)
    session_repo = SessionRepository(store)
    targets = _pick_sessions(sessions, 64)
    start_ts = max(s.started_at for s in sessions) + 3600
    rows: list[dict[str, Any]] = []

    def pair(name: str, f_fn: Callable[[int], Any], s_fn: Callable[[int], Any], n: int) -> None:
        rows.append(comparison(name, "floor", _measure(f_fn, n), "store", _measure(s_fn, n)))

    try:
        # -- append one
        n = its["append_one"]
        fresh = list(corpus.fresh_messages(101, n + 10, start_ts))

        def f_one(i: int) -> None:
            floor.append_message(targets[i % len(targets)], fresh[i % len(fresh)])

        def s_one(i: int) -> None:
            m = fresh[i % len(fresh)]
            messages.append_message(
                targets[i % len(targets)],
                m["role"],
                m.get("content"),
                tool_calls=m.get("tool_calls"),
                timestamp=m.get("timestamp"),
            )

        pair("append one", f_one, s_one, n)

        # -- append batch of 50
        n = its["append_batch"]
        batches = [
            list(corpus.fresh_messages(200 + b, BATCH, start_ts + 10_000 * b)) for b in range(8)
        ]

        def f_batch(i: int) -> None:
            floor.append_messages(targets[i % len(targets)], batches[i % len(batches)])

        def s_batch(i: int) -> None:
            messages.append_messages(targets[i % len(targets)], batches[i % len(batches)])

        pair(f"append batch ({BATCH})", f_batch, s_batch, n)

        # -- get a session's messages (sizes across the distribution)
        n = its["get"]
        sizes = {s.id: len(s.messages) for s in sessions}
        mean_len = statistics.mean(sizes[t] for t in targets)

        pair(
            f"get messages (avg {mean_len:.0f} rows)",
            lambda i: floor.get_messages(targets[i % len(targets)]),
            lambda i: messages.get_messages(targets[i % len(targets)]),
            n,
        )

        # -- list 20 recent sessions
        n = its["list"]
        listing = record_statements(
            store.engine, lambda: session_repo.list_sessions_rich(limit=20)
        )
        pair(
            "list 20 recent sessions",
            lambda i: floor.replay(listing),
            lambda i: session_repo.list_sessions_rich(limit=20),
            n,
        )

        # -- search: the floor replays the statements hermes-store sent for the same query
        n = its["search"]
        for name, query in corpus.all_queries().items():

            def s_search(i: int, query: str = query) -> list[dict[str, Any]]:
                with store.read() as sess:
                    return search_messages(sess, query)

            corpus.check_hits(name, query, s_search(0))
            statements = record_statements(store.engine, lambda: s_search(0))
            pair(
                corpus.row_label(name, query),
                lambda i, statements=statements: floor.replay(statements),
                s_search,
                n,
            )
    finally:
        floor.close()
        store.close()
    return rows


def _fmt_ms(p50: float, p95: float) -> str:
    return f"{p50:8.3f} / {p95:8.3f}"


def print_table(rows: list[dict[str, Any]], upgrades: list[dict[str, Any]]) -> None:
    head = ("operation", "floor p50/p95 ms", "hermes-store p50/p95 ms", "ratio p50 (p95)", "load")
    lines = [
        (
            r["operation"],
            _fmt_ms(r["floor_p50_ms"], r["floor_p95_ms"]),
            _fmt_ms(r["store_p50_ms"], r["store_p95_ms"]),
            f"{r['ratio_p50']:5.2f}x ({r['ratio_p95']:.2f}x)",
            f"{r['load']:.1f}",
        )
        for r in rows
    ]
    lines += [(*line, "") for line in upgrade.table_lines(upgrades)]
    widths = [max(len(str(x[i])) for x in (head, *lines)) for i in range(5)]

    def fmt(cells: tuple[str, ...]) -> str:
        return " | ".join(str(c).ljust(w) for c, w in zip(cells, widths, strict=True))

    print(fmt(head))
    print("-+-".join("-" * w for w in widths))
    for line in lines:
        print(fmt(line))
    upgrade.print_details(upgrades)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks", description=__doc__)
    parser.add_argument("--size", choices=("10k", "100k", "1m", "10m"), default="10k")
    parser.add_argument("--quick", action="store_true", help="~5k messages, under a minute")
    parser.add_argument(
        "--smoke",
        action="store_true",
        help="--quick with a few calls per row: every row runs, its numbers mean nothing "
        "(the test suite's smoke test)",
    )
    parser.add_argument("--json", type=Path, help="write the results here")
    parser.add_argument("--seed", type=int, default=23)
    parser.add_argument("--keep", type=Path, help="keep the databases in this directory")
    upgrade.add_arguments(parser)
    parser.add_argument("--no-postgres", action="store_true", help="skip the PostgreSQL rows")
    parser.add_argument(
        "--no-concurrent", action="store_true", help="skip the concurrent-chat table"
    )
    parser.add_argument(
        "--no-peers", action="store_true", help="skip the agent-framework comparison"
    )
    parser.add_argument("--no-feed", action="store_true", help="skip the change-feed table")
    parser.add_argument(
        "--no-encryption", action="store_true", help="skip the encryption-at-rest table"
    )
    parser.add_argument(
        "--no-per-turn", action="store_true", help="skip the per-turn comparison with the peers"
    )
    parser.add_argument(
        "--original",
        type=Path,
        help="the original Hermes v23 hermes_state.py's directory, for the facade table "
        f"(else ${facade.ENV}; skipped without it)",
    )
    parser.add_argument(
        "--postgres-only",
        action="store_true",
        help="with --size 10m: PostgreSQL at 10M messages (benchmarks/scale.py), nothing else",
    )
    args = parser.parse_args(argv)
    if args.size == "10m" or args.postgres_only:
        if not (args.size == "10m" and args.postgres_only):
            parser.error("--size 10m runs with --postgres-only (and --postgres-only with it)")
        result = scale.run(seed=args.seed)
        if args.json:
            args.json.write_text(json.dumps(result, indent=2) + "\n")
        return 0

    if args.smoke:
        args.quick = True
        os.environ[NO_PEERS_ENV] = "1"  # the child processes of per_turn inherit it
    size = "quick" if args.quick else args.size
    started = time.perf_counter()
    sessions = corpus.generate(corpus.SIZES[size], seed=args.seed)
    print(
        f"corpus: {corpus.message_count(sessions)} messages in {len(sessions)} sessions "
        f"(seed {args.seed}); sqlite {sqlite3.sqlite_version}, python {sys.version.split()[0]}"
    )
    with tempfile.TemporaryDirectory(prefix="hermes-bench-") as tmp:
        directory = args.keep or Path(tmp)
        directory.mkdir(parents=True, exist_ok=True)
        floor_db, store_db = build_database(directory, sessions)
        print(f"databases built in {time.perf_counter() - started:.1f} s")
        rows = run_ops(floor_db, store_db, sessions, args.quick, args.smoke)
        pg = None
        if not args.no_postgres:
            pg = postgres.run(
                directory / "base.db",
                sessions,
                rows,
                targets=_pick_sessions(sessions, 64),
                iterations=_iterations(args.quick, args.smoke),
            )
        journal = journal_modes.run(
            directory, directory / "base.db", _iterations(args.quick, args.smoke)["append_one"] // 2
        )
        upgrades = upgrade.run_all(args, directory)
    chats = None
    if not args.no_concurrent:
        print("concurrent chats:")
        chats = concurrent.run([20] if args.quick else [200, 1000], turns=3)
    compared = None
    if not args.no_peers:
        print("agent-framework session stores:")
        compared = peers.run(20 if args.quick else 200, turns=3)
    turns = None
    if not args.no_per_turn:
        print("per-turn calls beside the agent frameworks' stores:")
        turns = per_turn.run(20 if args.quick else 200)
    beside: dict[str, Any] = {"skipped": "no original given"}
    original = facade.original_from(args.original)
    if original is None or not (original / "hermes_state.py").is_file():
        print(
            "facade beside the original: skipped (give --original DIR or "
            f"${facade.ENV}; `python -m benchmarks.facade` says how to get it)"
        )
    else:
        print("the facade beside the original:")
        beside = facade.run(original.resolve(), 20 if args.quick else 100, quick=args.quick)
    changes = None
    if not args.no_feed:
        print("change feed:")
        changes = feed.run(args.quick)
    encrypted = None
    if not args.no_encryption:
        print("encryption at rest:")
        encrypted = encryption.run(*((2_000, 30) if args.quick else (10_000, 200)))
    print()
    print_table(rows, upgrades)
    journal_modes.print_table(journal)
    if pg is not None:
        postgres.print_table(pg)
    if chats is not None:
        print()
        concurrent.print_table(chats)
    if compared is not None:
        print()
        peers.print_table(compared)
    if turns is not None:
        print()
        per_turn.print_table(turns)
    if "columns" in beside:
        print()
        facade.print_table(beside)
    if changes is not None:
        print()
        feed.print_table(changes)
    if encrypted is not None:
        print()
        encryption.print_table(encrypted)
    elapsed = time.perf_counter() - started
    print(f"\n{elapsed:.1f} s")
    if args.json:
        payload = {
            "size": size,
            "messages": corpus.message_count(sessions),
            "sessions": len(sessions),
            "seed": args.seed,
            "sqlite": sqlite3.sqlite_version,
            "python": sys.version.split()[0],
            "elapsed_s": elapsed,
            "rows": rows,
            "upgrades": upgrades,
            "journal_modes": journal,
            "postgres": pg,
            "concurrent": chats,
            "peers": compared,
            "per_turn": turns,
            "facade": beside,
            "feed": changes,
            "encryption": encrypted,
        }
        args.json.write_text(json.dumps(payload, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
