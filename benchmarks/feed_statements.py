"""What the change feed's triggers cost on PostgreSQL, per row (revisions hs0002-hs0005)
against per statement (hs0006), each against the same database with no feed triggers:
deleting a session of 5,000 messages, appending one message, appending a batch of 50.

    python -m benchmarks.feed_statements [--quick] [--json PATH]

Three fresh databases at head: "statement" as the head makes it; "row" with hs0002's
per-row capture and numbering triggers put back in place of hs0006's; "bare" with the
feed's triggers dropped. Samples run in turn on the three (the order rotating), so that
all see the same machine. Ratios are p50 of a variant over p50 of "bare". The session a
delete removes is filled by one INSERT ... SELECT before each sample (not timed).
hs0005's last-activity triggers are dropped from all three (they are the same in each,
so only the feed is measured). Skipped, with
the reason, without a PostgreSQL server.
"""

from __future__ import annotations

import argparse
import importlib
import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from . import postgres
from .feed import _drop_feed_triggers
from .stats import load_average, percentiles

VARIANTS = ("bare", "row", "statement")
DELETE_SIZE = 5_000


def _per_row_triggers(store: Any) -> None:
    """Put hs0002's per-row triggers (capture and numbering) back on a database at head,
    and its logged pending table."""
    from sqlalchemy import text

    from hermes_store.contract import CHANGES_PENDING_TABLE, FEED_OBJECT_PREFIX

    hs0002 = importlib.import_module(
        "hermes_store._migrations.versions.hs0002_change_feed_and_turns"
    )
    function_of = {
        "sessions": f"{FEED_OBJECT_PREFIX}capture_session",
        "messages": f"{FEED_OBJECT_PREFIX}capture_message",
        "session_model_usage": f"{FEED_OBJECT_PREFIX}capture_usage",
    }

    def work(conn: Any) -> None:
        conn.execute(text(f"ALTER TABLE {CHANGES_PENDING_TABLE} SET LOGGED"))
        for function, values in hs0002.PG_CAPTURE_FUNCTIONS.items():
            conn.execute(
                text(f"CREATE OR REPLACE FUNCTION {function}() {hs0002._pg_capture(values)}")
            )
        for name, table, event, kind, *_ in hs0002.CAPTURES:
            trigger = FEED_OBJECT_PREFIX + name
            conn.execute(text(f"DROP TRIGGER IF EXISTS {trigger} ON {table}"))
            conn.execute(
                text(
                    f"CREATE TRIGGER {trigger} AFTER {event} ON {table} FOR EACH ROW "
                    f"EXECUTE FUNCTION {function_of[table]}('{kind}')"
                )
            )
        conn.execute(text(hs0002.PG_STAMP))
        stamp = hs0002.PG_STAMP_TRIGGER
        conn.execute(text(f"DROP TRIGGER IF EXISTS {stamp} ON {CHANGES_PENDING_TABLE}"))
        conn.execute(
            text(
                f"CREATE CONSTRAINT TRIGGER {stamp} AFTER INSERT ON {CHANGES_PENDING_TABLE} "
                "DEFERRABLE INITIALLY DEFERRED FOR EACH ROW "
                f"EXECUTE FUNCTION {hs0002.PG_STAMP_FUNCTION}()"
            )
        )

    store.write(work)


def _drop_activity_triggers(store: Any) -> int:
    """hs0005's triggers that keep the last-activity table: the same in every variant,
    dropped so that only the feed is measured."""
    from sqlalchemy import text

    from hermes_store.contract import ACTIVITY_OBJECT_PREFIX

    def work(conn: Any) -> int:
        found = conn.execute(
            text(
                "SELECT t.tgname, c.relname FROM pg_trigger t JOIN pg_class c "
                "ON c.oid = t.tgrelid WHERE NOT t.tgisinternal "
                "AND left(t.tgname::text, length(:p)) = :p"
            ),
            {"p": ACTIVITY_OBJECT_PREFIX},
        ).all()
        for name, table in found:
            conn.execute(text(f'DROP TRIGGER "{name}" ON "{table}"'))
        return len(found)

    return int(store.write(work))


def _fill(store: Any, session_id: str, count: int) -> None:
    from sqlalchemy import text

    from hermes_store.repositories.sessions import SessionRepository

    SessionRepository(store).create_session(session_id, "cli")
    store.write(
        lambda conn: conn.execute(
            text(
                "INSERT INTO messages (session_id, role, content, timestamp) "
                "SELECT :s, 'user', 'message ' || i, i FROM generate_series(1, :n) AS i"
            ),
            {"s": session_id, "n": count},
        )
    )


def _measure(urls: dict[str, str], quick: bool) -> list[dict[str, Any]]:
    from hermes_store.repositories.maintenance import MaintenanceRepository
    from hermes_store.repositories.messages import MessageRepository
    from hermes_store.repositories.sessions import SessionRepository
    from hermes_store.store import Store

    stores = {name: Store(url) for name, url in urls.items()}
    try:
        assert _drop_feed_triggers(stores["bare"]) > 0
        for store in stores.values():
            assert _drop_activity_triggers(store) > 0
        _per_row_triggers(stores["row"])
        for store in stores.values():
            SessionRepository(store).create_session("bench", "cli")
        batch = [{"role": "assistant", "content": "an answer " * 20}] * 50

        def delete_big(store: Any, i: int) -> Callable[[], Any]:
            _fill(store, f"big{i}", DELETE_SIZE)
            return lambda: MaintenanceRepository(store).delete_session(f"big{i}")

        def append_one(store: Any, i: int) -> Callable[[], Any]:
            return lambda: MessageRepository(store).append_message("bench", "user", "hi " * 20)

        def append_batch(store: Any, i: int) -> Callable[[], Any]:
            return lambda: MessageRepository(store).append_messages("bench", batch)

        ops: list[tuple[str, Callable[[Any, int], Callable[[], Any]], int]] = [
            (f"delete a {DELETE_SIZE:,}-message session", delete_big, 3 if quick else 9),
            ("append one", append_one, 50 if quick else 200),
            ("append batch of 50", append_batch, 10 if quick else 40),
        ]
        rows = []
        for operation, prepare, n in ops:
            samples: dict[str, list[float]] = {v: [] for v in VARIANTS}
            for i in range(n + 2):
                order = VARIANTS[i % 3 :] + VARIANTS[: i % 3]
                for variant in order:
                    call = prepare(stores[variant], i)
                    started = time.perf_counter()
                    call()
                    if i >= 2:  # warm-up
                        samples[variant].append(time.perf_counter() - started)
            p50 = {v: percentiles(samples[v])[0] for v in VARIANTS}
            rows.append(
                {
                    "operation": operation,
                    "n": n,
                    **{f"{v}_p50_ms": p50[v] for v in VARIANTS},
                    "row_ratio": p50["row"] / p50["bare"],
                    "statement_ratio": p50["statement"] / p50["bare"],
                    "load": load_average(),
                }
            )
        return rows
    finally:
        for store in stores.values():
            store.close()


def run(quick: bool) -> dict[str, Any]:
    from hermes_store import migrate

    admin = postgres.admin_url()
    reason = postgres.unavailable(admin)
    if reason is not None:
        return {"rows": [], "skipped": {"postgresql": reason}}
    with (
        postgres.scratch_database(admin, "_bare") as bare,
        postgres.scratch_database(admin, "_row") as row,
        postgres.scratch_database(admin, "_statement") as statement,
    ):
        urls = {"bare": bare, "row": row, "statement": statement}
        for url in urls.values():
            migrate.upgrade(url)
        return {"rows": _measure(urls, quick), "skipped": {}}


def print_table(result: dict[str, Any]) -> None:
    print("PostgreSQL feed triggers, per row (hs0002) and per statement (hs0006), p50 ms")
    print(
        f"{'operation':<32} {'no feed':>8} {'per row':>8} {'ratio':>6} {'per stmt':>9} {'ratio':>6}"
    )
    for row in result["rows"]:
        print(
            f"{row['operation']:<32} {row['bare_p50_ms']:>8.2f} {row['row_p50_ms']:>8.2f} "
            f"{row['row_ratio']:>6.2f} {row['statement_p50_ms']:>9.2f} "
            f"{row['statement_ratio']:>6.2f}"
        )
    for backend, why in result["skipped"].items():
        print(f"skipped {backend}: {why}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.feed_statements", description=__doc__
    )
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    result = run(args.quick)
    print_table(result)
    if args.json:
        args.json.write_text(json.dumps(result, indent=2), encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
