"""The change feed's costs (issue 26): a follower's poll at 10k against 100k changes (the
ratio should stay near 1: a poll is one range read on the position key), and an append
with the feed's triggers against the same append with them dropped.

    python -m benchmarks.feed [--quick] [--json PATH]

Both backends; PostgreSQL rows are skipped, with the reason, without a server. The poll
rows fill `hermes_store_changes` with the rows the triggers would have written (inserted
directly: the table's size is what is measured, not how it grew), then time `changes(since)`
from the newest position (a poll with nothing new) and from 10 positions before it (a
poll that returns 10 changes). The append rows time `append_message` and
`append_messages` (50 rows) on two fresh databases, one with the feed's triggers and one
with them dropped, sample by sample in turn.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from . import postgres
from .stats import comparison, timings

if TYPE_CHECKING:
    from hermes_store.repositories.messages import MessageRepository

SMALL, LARGE = 10_000, 100_000


def _fill(store: Any, count: int) -> None:
    """Add `count` changes as the triggers write them (message.appended over 100
    sessions), positions after the newest."""
    from sqlalchemy import text

    from hermes_store.contract import CHANGES_TABLE, FEED_LAST_POSITION, FEED_STATE_TABLE

    def work(conn: Any) -> None:
        if conn.dialect.name == "postgresql":
            last = int(
                conn.execute(
                    text(f"SELECT value FROM {FEED_STATE_TABLE} WHERE name = :n FOR UPDATE"),  # noqa: S608
                    {"n": FEED_LAST_POSITION},
                ).scalar()
            )
            conn.execute(
                text(
                    f"INSERT INTO {CHANGES_TABLE} (position, kind, session_id, message_id, at) "  # noqa: S608
                    "SELECT :last + i, 'message.appended', 's' || (i % 100), i, "
                    "EXTRACT(EPOCH FROM clock_timestamp()) FROM generate_series(1, :n) i"
                ),
                {"last": last, "n": count},
            )
            conn.execute(
                text(f"UPDATE {FEED_STATE_TABLE} SET value = :v WHERE name = :n"),  # noqa: S608
                {"v": last + count, "n": FEED_LAST_POSITION},
            )
        else:
            conn.execute(
                text(
                    f"INSERT INTO {CHANGES_TABLE} (kind, session_id, message_id, at) "  # noqa: S608
                    "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n "
                    "WHERE i < :n) SELECT 'message.appended', 's' || (i % 100), i, "
                    "(julianday('now') - 2440587.5) * 86400.0 FROM n"
                ),
                {"n": count},
            )

    store.write(work)


def _drop_feed_triggers(store: Any) -> int:
    from sqlalchemy import text

    from hermes_store.contract import FEED_OBJECT_PREFIX

    def work(conn: Any) -> int:
        if conn.dialect.name == "postgresql":
            found = conn.execute(
                text(
                    "SELECT t.tgname, c.relname FROM pg_trigger t JOIN pg_class c "
                    "ON c.oid = t.tgrelid WHERE NOT t.tgisinternal "
                    "AND c.relname IN ('sessions', 'messages', 'session_model_usage') "
                    "AND left(t.tgname::text, length(:p)) = :p"
                ),
                {"p": FEED_OBJECT_PREFIX},
            ).all()
            for name, table in found:
                conn.execute(text(f'DROP TRIGGER "{name}" ON "{table}"'))
        else:
            found = conn.execute(
                text(
                    "SELECT name, tbl_name FROM sqlite_master WHERE type = 'trigger' "
                    "AND tbl_name IN ('sessions', 'messages', 'session_model_usage') "
                    "AND substr(name, 1, length(:p)) = :p"
                ),
                {"p": FEED_OBJECT_PREFIX},
            ).all()
            for name, _table in found:
                conn.execute(text(f'DROP TRIGGER "{name}"'))
        return len(found)

    return int(store.write(work))


def _poll_rows(backend: str, url: str, iterations: int) -> list[dict[str, Any]]:
    from hermes_store.repositories.changes import ChangeFeed
    from hermes_store.store import Store

    rows: list[dict[str, Any]] = []
    polls: dict[str, dict[int, list[float]]] = {"no news": {}, "10 new": {}}
    for size in (SMALL, LARGE):
        with Store(url) as store:
            _fill(store, size - ChangeFeed(store).latest())
        # reopened: the fill's WAL checkpointed at close, as a follower finds the file
        with Store(url) as store:
            feed = ChangeFeed(store)
            head = feed.latest()
            assert head >= size
            polls["no news"][size] = timings(lambda i, h=head, f=feed: f.changes(h), iterations)
            polls["10 new"][size] = timings(
                lambda i, h=head, f=feed: f.changes(h - 10), iterations
            )
    for name, by_size in polls.items():
        row = comparison(f"poll, {name}", "10k", by_size[SMALL], "100k", by_size[LARGE])
        rows.append({"backend": backend, **row})
    return rows


def _append_rows(
    backend: str, with_feed: str, without_feed: str, iterations: int
) -> list[dict[str, Any]]:
    """Appends on two fresh databases at head, one with its feed triggers dropped,
    interleaved sample by sample so that both see the same machine."""
    from hermes_store.repositories.messages import MessageRepository
    from hermes_store.repositories.sessions import SessionRepository
    from hermes_store.store import Store

    rows: list[dict[str, Any]] = []
    batch = [{"role": "assistant", "content": "an answer " * 20}] * 50
    with Store(with_feed) as fed, Store(without_feed) as bare:
        assert _drop_feed_triggers(bare) > 0
        repos = {}
        for name, store in (("with feed", fed), ("without feed", bare)):
            SessionRepository(store).create_session("bench", "cli")
            repos[name] = MessageRepository(store)
        ops: dict[str, tuple[Callable[[MessageRepository], Any], int]] = {
            "append one": (lambda m: m.append_message("bench", "user", "hello " * 20), iterations),
            "append batch of 50": (
                lambda m: m.append_messages("bench", batch),
                max(10, iterations // 10),
            ),
        }
        for op, (call, n) in ops.items():
            samples: dict[str, list[float]] = {"with feed": [], "without feed": []}
            for i in range(n + 3):
                for variant in (
                    ("with feed", "without feed") if i % 2 else ("without feed", "with feed")
                ):
                    started = time.perf_counter()
                    call(repos[variant])
                    if i >= 3:  # warm-up
                        samples[variant].append(time.perf_counter() - started)
            row = comparison(
                op, "without_feed", samples["without feed"], "with_feed", samples["with feed"]
            )
            rows.append({"backend": backend, **row})
    return rows


def run(quick: bool) -> dict[str, Any]:
    """Rows of both backends; {"skipped": {backend: reason}} for those not measured."""
    from hermes_store import migrate

    iterations = 100 if quick else 400
    rows: list[dict[str, Any]] = []
    skipped: dict[str, str] = {}
    with tempfile.TemporaryDirectory(prefix="hermes-feed-") as tmp:
        urls = [f"sqlite:///{Path(tmp) / name}" for name in ("poll.db", "fed.db", "bare.db")]
        for url in urls:
            migrate.upgrade(url, fts_min_pause=0)
        rows += _poll_rows("sqlite", urls[0], iterations)
        rows += _append_rows("sqlite", urls[1], urls[2], iterations)
    admin = postgres.admin_url()
    reason = postgres.unavailable(admin)
    if reason is not None:
        skipped["postgresql"] = reason
    else:
        with (
            postgres.scratch_database(admin, "_feed") as fed,
            postgres.scratch_database(admin, "_bare") as bare,
        ):
            migrate.upgrade(fed)
            migrate.upgrade(bare)
            rows += _poll_rows("postgresql", fed, iterations)
        with (
            postgres.scratch_database(admin, "_feed") as fed,
            postgres.scratch_database(admin, "_bare") as bare,
        ):
            migrate.upgrade(fed)
            migrate.upgrade(bare)
            rows += _append_rows("postgresql", fed, bare, iterations)
    return {"rows": rows, "skipped": skipped}


def print_table(result: dict[str, Any]) -> None:
    print("change feed (poll: 100k changes against 10k; append: with the feed's triggers")
    print("against without them), p50 / p95 ms")
    head = f"{'backend':<11} {'operation':<22} {'base p50':>9} {'p95':>8} {'other p50':>10} "
    print(head + f"{'p95':>8} {'ratio p50':>10} {'p95':>6}")
    for row in result["rows"]:
        base, other = (
            ("10k", "100k")
            if row["operation"].startswith("poll")
            else (
                "without_feed",
                "with_feed",
            )
        )
        print(
            f"{row['backend']:<11} {row['operation']:<22} {row[f'{base}_p50_ms']:>9.3f} "
            f"{row[f'{base}_p95_ms']:>8.3f} {row[f'{other}_p50_ms']:>10.3f} "
            f"{row[f'{other}_p95_ms']:>8.3f} {row['ratio_p50']:>10.2f} {row['ratio_p95']:>6.2f}"
        )
    for backend, why in result["skipped"].items():
        print(f"skipped {backend}: {why}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.feed", description=__doc__)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    result = run(args.quick)
    print_table(result)
    if args.json:
        args.json.write_text(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
