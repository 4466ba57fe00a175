"""Whether the change feed limits concurrent writers on PostgreSQL (issue 37, item 4).

    python -m benchmarks.feed_writers [--writers 8] [--seconds 10] [--rounds 3] [--json PATH]

The feed numbers a transaction's changes at its commit under the lock of one counter
row (revision hs0006's stamp trigger), so the commits of every writer that captured a
change queue on that row, its commit record's flush included. If that row is what limits
the writers, appends/s rise when the numbering is taken away. Three fresh databases at
head, measured in the same run, in rounds that take the variants in turn (so that each
sees the same machine): "feed" as shipped, "no stamp" (the numbering trigger disabled:
changes are still captured, never numbered, so no transaction takes the counter row) and
"no feed" (every feed trigger dropped). Each measurement is benchmarks.scale's writer
row: `--writers` processes, each appending one message at a time to a session of its own
for `--seconds`. Rows: per variant, appends/s summed over the rounds' time, p50 / p99 of
one append, the 1-minute load average of each round, and appends/s against "feed".
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import statistics
import time
from pathlib import Path
from typing import Any

from . import postgres
from .feed import _drop_feed_triggers
from .stats import load_average

VARIANTS = ("feed", "no stamp", "no feed")


def _disable_stamp(url: str) -> None:
    from sqlalchemy import text

    from hermes_store.contract import CHANGES_PENDING_TABLE, FEED_STAMP_TRIGGER
    from hermes_store.store import Store

    with Store(url) as store:
        store.write(
            lambda conn: conn.execute(
                text(f"ALTER TABLE {CHANGES_PENDING_TABLE} DISABLE TRIGGER {FEED_STAMP_TRIGGER}")
            )
        )


def _drop_feed(url: str) -> None:
    from hermes_store.store import Store

    with Store(url) as store:
        assert _drop_feed_triggers(store) > 0


def _writer(
    urls: list[str], number: int, start_at: float, slice_s: float, slices: int
) -> list[list[float]]:
    """One writer process: a session of its own in each database; from `start_at`, for
    `slices` slices of `slice_s` seconds, one message per append to the database of the
    slice (the variants in turn, every writer on the same one at the same time). The
    samples of each variant, by the slice an append began in."""
    from hermes_store.repositories.messages import MessageRepository
    from hermes_store.repositories.sessions import SessionRepository
    from hermes_store.store import Store

    stores = [Store(url) for url in urls]
    try:
        sid = f"writer_{number}"
        repos = []
        for store in stores:
            SessionRepository(store).create_session(sid, "cli")
            repos.append(MessageRepository(store))
            repos[-1].append_message(sid, "user", "warm-up")
        samples: list[list[float]] = [[] for _ in urls]
        while time.time() < start_at:
            time.sleep(0.001)
        end = start_at + slice_s * slices
        n = 0
        while (now := time.time()) < end:
            variant = int((now - start_at) / slice_s) % len(urls)
            began = time.perf_counter()
            repos[variant].append_message(sid, "user" if n % 2 else "assistant", BODY)
            samples[variant].append(time.perf_counter() - began)
            n += 1
        return samples
    finally:
        for store in stores:
            store.close()


BODY = "a message of about the length of a chat turn, " * 4


def _samples(urls: list[str], writers: int, slice_s: float, slices: int) -> list[list[float]]:
    """Every append of every writer, by variant."""
    context = multiprocessing.get_context("spawn")
    start_at = time.time() + 8.0  # every writer connected and its sessions made
    with context.Pool(writers) as workers:
        results = workers.starmap(
            _writer, [(urls, n, start_at, slice_s, slices) for n in range(writers)]
        )
    return [[s for result in results for s in result[v]] for v in range(len(urls))]


class _WaitSampler:
    """What the writers' server backends are doing, sampled from pg_stat_activity every
    few milliseconds while they run: per database, how many times a backend was seen
    in each state ("client": idle or idle in transaction, the writer's turn; "running":
    active on the CPU; otherwise the wait event, such as Lock:transactionid, a wait for
    another transaction's row lock)."""

    def __init__(self, admin: str, names: list[str]) -> None:
        import threading

        self.counts: dict[str, dict[str, int]] = {name: {} for name in names}
        self._admin = admin
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        from sqlalchemy import create_engine, text
        from sqlalchemy.pool import NullPool

        engine = create_engine(self._admin, poolclass=NullPool, isolation_level="AUTOCOMMIT")
        query = text(
            "SELECT datname, CASE WHEN state <> 'active' THEN 'client'"
            " WHEN wait_event IS NULL THEN 'running'"
            " ELSE wait_event_type || ':' || wait_event END, count(*)"
            " FROM pg_stat_activity WHERE datname = ANY(:names)"
            " AND application_name = 'hermes-store' GROUP BY 1, 2"
        )
        try:
            with engine.connect() as conn:
                while not self._stop.wait(0.005):
                    rows = conn.execute(query, {"names": list(self.counts)}).all()
                    for name, what, count in rows:
                        mine = self.counts[str(name)]
                        mine[str(what)] = mine.get(str(what), 0) + int(count)
        finally:
            engine.dispose()

    def __enter__(self) -> _WaitSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


def _percentile(ordered: list[float], q: float) -> float:
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))] * 1000


def run(writers: int, seconds: float, slice_s: float) -> dict[str, Any]:
    from sqlalchemy.engine import make_url

    from hermes_store import migrate

    admin = postgres.admin_url()
    reason = postgres.unavailable(admin)
    if reason is not None:
        return {"skipped": reason}
    slices = max(len(VARIANTS), int(seconds * len(VARIANTS) / slice_s))
    slices -= slices % len(VARIANTS)
    with (
        postgres.scratch_database(admin, "_feed") as fed,
        postgres.scratch_database(admin, "_nostamp") as unstamped,
        postgres.scratch_database(admin, "_nofeed") as bare,
    ):
        urls = [fed, unstamped, bare]
        for url in urls:
            migrate.upgrade(url)
        _disable_stamp(unstamped)
        _drop_feed(bare)
        load_before = load_average()
        names = [str(make_url(url).database) for url in urls]
        with _WaitSampler(admin, names) as sampler:
            by_variant = _samples(urls, writers, slice_s, slices)
        load_after = load_average()
    each = slice_s * slices / len(VARIANTS)  # seconds each variant ran
    rows: list[dict[str, Any]] = []
    for variant, name, samples in zip(VARIANTS, names, by_variant, strict=True):
        ordered = sorted(samples)
        seen = sampler.counts[name]
        total = max(1, sum(seen.values()))
        rows.append(
            {
                "variant": variant,
                "appends_per_s": len(ordered) / each,
                "p50_ms": statistics.median(ordered) * 1000,
                "p99_ms": _percentile(ordered, 0.99),
                # share of the writers' backends' time in each state (the sessions made
                # before the start and idle between slices count as "client")
                "backend_states": {
                    what: round(count / total, 3)
                    for what, count in sorted(seen.items(), key=lambda kv: -kv[1])
                },
            }
        )
    base = rows[0]["appends_per_s"]
    for row in rows:
        row["ratio_to_feed"] = row["appends_per_s"] / base
    return {
        "writers": writers,
        "seconds_each": each,
        "slice_s": slice_s,
        "load": [round(load_before, 1), round(load_after, 1)],
        "rows": rows,
    }


def print_table(result: dict[str, Any]) -> None:
    if "skipped" in result:
        print(f"skipped: {result['skipped']}")
        return
    print(
        f"{result['writers']} writer processes, {result['seconds_each']:g} s each variant in"
        f" slices of {result['slice_s']:g} s taken in turn; load average before / after:"
        f" {result['load'][0]} / {result['load'][1]}"
    )
    print(f"{'variant':<9} {'appends/s':>10} {'ratio':>6} {'p50 ms':>8} {'p99 ms':>8}")
    for row in result["rows"]:
        print(
            f"{row['variant']:<9} {row['appends_per_s']:>10.0f} {row['ratio_to_feed']:>6.2f}"
            f" {row['p50_ms']:>8.2f} {row['p99_ms']:>8.2f}"
        )
    print("the writers' server backends, share of samples in each state:")
    for row in result["rows"]:
        states = ", ".join(f"{what} {share:.0%}" for what, share in row["backend_states"].items())
        print(f"  {row['variant']:<9} {states}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.feed_writers", description=__doc__)
    parser.add_argument("--writers", type=int, default=8)
    parser.add_argument("--seconds", type=float, default=20.0, help="per variant")
    parser.add_argument("--slice", type=float, default=1.0, help="seconds per turn")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    result = run(args.writers, args.seconds, args.slice)
    print_table(result)
    if args.json:
        args.json.write_text(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
