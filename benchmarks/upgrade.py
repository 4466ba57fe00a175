"""The upgrade rows: large generated legacy databases brought to head.

For each shape (`v9`: the fixture's L1 index, so revisions 0010/0011 replace it; `v22`: the
L3 inline pair with their `_content` copies, which 0023 replaces) a legacy file of the
chosen size is generated (benchmarks/legacy_corpus.py; not timed), checked to be adopted
exactly like its fixture, and upgraded by `migrate.upgrade` with its default pacing (what
`hermes-store upgrade` does) in a subprocess (benchmarks/upgrade_child.py), twice:

* alone: nobody else has the file open. Total time, migration-transaction time, number
  and total of backfill and teardown steps, the pauses taken, the longest single write
  transaction and peak RSS. The floor is a raw FTS5 'rebuild' of both v23 indexes on the
  upgraded file (the indexing work the chunked backfill spreads over many transactions);
  target (issue 16): total at most 3x the floor.
* beside an appender: a second process appends a message every `--upgrade-append-every`
  seconds the way the original v23 code writes (1 s busy timeout, 15 attempts with
  20-150 ms sleeps), from before the upgrade starts until it ends, on a fresh copy of the
  same file. Its append latency p50/p99 and failures; target: no failure, p99 < 250 ms.

The machine's load average is printed with each row: on a shared machine the numbers
move with it.

    python -m benchmarks.upgrade [--upgrade-size 1m] [--upgrade-shapes v9,v22]
                                 [--upgrade-cache DIR] [--upgrade-check] [--json PATH]
                                 [--upgrade-pacing default|unpaced|original]
                                 [--upgrade-append-every SECONDS] [--skip-upgrade-appender]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from . import corpus, legacy_corpus
from .upgrade_child import PACINGS

REPO_ROOT = Path(__file__).resolve().parents[1]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("upgrade rows")
    group.add_argument("--skip-upgrade", action="store_true")
    group.add_argument(
        "--upgrade-size",
        choices=tuple(corpus.SIZES),
        help="messages generated into each legacy file (default: --size; quick with --quick)",
    )
    group.add_argument(
        "--upgrade-shapes",
        default=",".join(legacy_corpus.SHAPES),
        help="comma-separated legacy shapes to upgrade (default: %(default)s)",
    )
    group.add_argument(
        "--upgrade-cache",
        type=Path,
        help="keep generated legacy files here and reuse them (same size and seed)",
    )
    group.add_argument(
        "--upgrade-pacing",
        choices=PACINGS,
        default="default",
        help="how the upgrade alone shares the lock: hermes-store's default, none at all "
        "(the work alone), or the original's max(0.2 s, 4 x step) (default: %(default)s)",
    )
    group.add_argument(
        "--upgrade-append-every",
        default="0.05",
        metavar="SECONDS[,SECONDS...]",
        help="the concurrent appender's interval; several (comma-separated) give one row "
        "each: one longer than Pacing.quiet (3 s) meets the alone regime every time "
        "(default: %(default)s)",
    )
    group.add_argument(
        "--skip-upgrade-appender",
        action="store_true",
        help="only the upgrade alone, not the upgrade beside an appender",
    )
    group.add_argument(
        "--upgrade-check",
        action="store_true",
        help="after each upgrade (untimed): PRAGMA integrity_check, FTS integrity-check and "
        "the object set against a fresh database",
    )


def upgrade_size(args: argparse.Namespace) -> str:
    if args.upgrade_size:
        return str(args.upgrade_size)
    return "quick" if getattr(args, "quick", False) else str(getattr(args, "size", "10k"))


def _shapes(args: argparse.Namespace) -> list[str]:
    shapes = [s.strip() for s in str(args.upgrade_shapes).split(",") if s.strip()]
    unknown = [s for s in shapes if s not in legacy_corpus.SHAPES]
    if unknown:
        raise SystemExit(f"unknown upgrade shape(s) {unknown}; known: {list(legacy_corpus.SHAPES)}")
    return shapes


def legacy_file(
    directory: Path, shape: str, size: str, *, seed: int, cache: Path | None
) -> tuple[Path, dict[str, Any]]:
    """The generated legacy file, copied into `directory` (from the cache when there)."""
    target = directory / f"legacy_{shape}_{size}.db"
    if cache is not None:
        cache.mkdir(parents=True, exist_ok=True)
        cached = cache / f"legacy_{shape}_{size}_s{seed}.db"
        if cached.exists():
            info = {"shape": shape, "cached": str(cached), "build_s": 0.0}
        else:
            info = legacy_corpus.build(shape, corpus.SIZES[size], cached, seed=seed)
        shutil.copyfile(cached, target)
    else:
        info = legacy_corpus.build(shape, corpus.SIZES[size], target, seed=seed)
    return target, info


def _object_set(path: Path) -> set[tuple[str, str]]:
    conn = sqlite3.connect(str(path))
    try:
        rows = conn.execute("SELECT type, name FROM sqlite_master").fetchall()
    finally:
        conn.close()
    return {(str(t), str(n)) for t, n in rows if not str(n).startswith("sqlite_autoindex")}


def _post_checks(path: Path, directory: Path) -> dict[str, Any]:
    """Untimed: the upgraded file is sound and has exactly a fresh database's objects."""
    from hermes_store import migrate

    conn = sqlite3.connect(str(path))
    try:
        integrity = [str(r[0]) for r in conn.execute("PRAGMA integrity_check")]
    finally:
        conn.close()
    report = migrate.check(str(path))
    fresh = directory / "fresh_reference.db"
    if not fresh.exists():
        migrate.upgrade(str(fresh), fts_min_pause=0)
    extra = sorted(_object_set(path) - _object_set(fresh))
    missing = sorted(_object_set(fresh) - _object_set(path))
    result = {
        "integrity_check": integrity,
        "fts_errors": report.fts_errors,
        "extra_objects": [f"{t} {n}" for t, n in extra],
        "missing_objects": [f"{t} {n}" for t, n in missing],
    }
    ok = integrity == ["ok"] and not report.fts_errors and not extra and not missing
    if not ok:
        raise SystemExit(f"upgraded {path.name} failed its checks: {result}")
    return result


def _load() -> str:
    one, five, _ = os.getloadavg()
    return f"{one:.2f} / {five:.2f}"


def _child(args: list[str]) -> dict[str, Any]:
    proc = subprocess.run(
        [sys.executable, "-m", "benchmarks.upgrade_child", *args],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    if proc.returncode != 0:
        raise SystemExit(f"upgrade subprocess failed:\n{proc.stderr}")
    result: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    return result


def _raw_rebuild_s(path: Path) -> tuple[float, float]:
    """The floor: the same indexing as one raw FTS5 rebuild of both v23 indexes. Returns
    (wall, CPU) seconds."""
    raw = sqlite3.connect(str(path), isolation_level=None)
    try:
        started, cpu_started = time.perf_counter(), time.process_time()
        raw.execute("BEGIN IMMEDIATE")
        raw.execute("INSERT INTO messages_fts(messages_fts) VALUES ('rebuild')")
        raw.execute("INSERT INTO messages_fts_trigram(messages_fts_trigram) VALUES ('rebuild')")
        raw.execute("COMMIT")
        return time.perf_counter() - started, time.process_time() - cpu_started
    finally:
        raw.close()


def _remove(path: Path) -> None:
    for suffix in ("", "-wal", "-shm"):
        Path(str(path) + suffix).unlink(missing_ok=True)


def run_upgrade(
    directory: Path,
    shape: str,
    size: str,
    *,
    seed: int = 23,
    cache: Path | None = None,
    check: bool = False,
    pacing: str = "default",
) -> dict[str, Any]:
    """The upgrade alone, and its floor."""
    legacy, built = legacy_file(directory, shape, size, seed=seed, cache=cache)
    adoption = legacy_corpus.check_adoptable(shape, legacy)
    conn = sqlite3.connect(str(legacy))
    n_messages = int(conn.execute("SELECT COUNT(*) FROM messages").fetchone()[0])
    conn.close()
    file_mb = legacy.stat().st_size / 2**20
    load_before = _load()
    result = _child([str(legacy), "--pacing", pacing])
    load_after = _load()
    checks = _post_checks(legacy, directory) if check else None
    floor_s, floor_cpu_s = _raw_rebuild_s(legacy)
    result.update(
        operation=f"upgrade {shape} -> 0023",
        shape=shape,
        size=size,
        messages=n_messages,
        legacy_file_mb=file_mb,
        generate_s=built.get("build_s", 0.0),
        adoption=adoption,
        checks=checks,
        floor_rebuild_s=floor_s,
        floor_rebuild_cpu_s=floor_cpu_s,
        ratio=result["total_s"] / floor_s if floor_s else None,
        # what a machine with nothing else running would show: the CPU work of both
        # plus the upgrade's pauses (wall ratios move with the load of a shared machine)
        ratio_cpu_plus_pauses=(result["cpu_s"] + result["paused_s"]) / floor_cpu_s
        if floor_cpu_s
        else None,
        load_before=load_before,
        load_after=load_after,
    )
    _remove(legacy)
    return result


def run_beside_appender(
    directory: Path,
    shape: str,
    size: str,
    *,
    seed: int = 23,
    cache: Path | None = None,
    every: float = 0.05,
) -> dict[str, Any]:
    """The default upgrade of a fresh copy while the appender writes (see the docstring)."""
    legacy, _ = legacy_file(directory, shape, size, seed=seed, cache=cache)
    stop = directory / f"stop_appender_{shape}"
    stop.unlink(missing_ok=True)
    load_before = _load()
    appender = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "benchmarks.upgrade_child",
            "--append",
            str(legacy),
            str(every),
            str(stop),
        ],
        cwd=REPO_ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert appender.stdout is not None
        if appender.stdout.readline().strip() != "ready":
            raise SystemExit(f"the appender did not start: {appender.communicate()[1]}")
        time.sleep(1.0)  # a writer that has been running for a while, as Hermes would be
        upgraded = _child([str(legacy), "--pacing", "default"])
        time.sleep(1.0)
    finally:
        stop.touch()
        out, err = appender.communicate(timeout=120)
    if appender.returncode != 0:
        raise SystemExit(f"the appender failed:\n{err}")
    appends: dict[str, Any] = json.loads(out.strip().splitlines()[-1])
    row = {
        "operation": f"upgrade {shape} -> 0023 beside an appender",
        "shape": shape,
        "size": size,
        "upgrade": upgraded,
        "appender": appends,
        "load_before": load_before,
        "load_after": _load(),
    }
    stop.unlink(missing_ok=True)
    _remove(legacy)
    return row


def run_all(args: argparse.Namespace, directory: Path) -> list[dict[str, Any]]:
    if args.skip_upgrade:
        return []
    size = upgrade_size(args)
    rows = []
    for shape in _shapes(args):
        row = run_upgrade(
            directory,
            shape,
            size,
            seed=args.seed,
            cache=args.upgrade_cache,
            check=args.upgrade_check,
            pacing=args.upgrade_pacing,
        )
        print(
            f"upgrade {shape}: {row['messages']} messages, legacy file "
            f"{row['legacy_file_mb']:.0f} MB (generated in {row['generate_s']:.1f} s, not "
            f"measured); load average (1 / 5 min) {row['load_before']} before, "
            f"{row['load_after']} after"
        )
        if not args.skip_upgrade_appender:
            row["beside_appender"] = [
                run_beside_appender(
                    directory,
                    shape,
                    size,
                    seed=args.seed,
                    cache=args.upgrade_cache,
                    every=float(every),
                )
                for every in str(args.upgrade_append_every).split(",")
                if every.strip()
            ]
        rows.append(row)
    return rows


def table_lines(rows: list[dict[str, Any]]) -> list[tuple[str, str, str, str]]:
    """Lines for the main table: the upgrade alone (floor, hermes-store, ratio) and the
    upgrade beside an appender (the appender's latency and failures)."""
    lines = []
    for r in rows:
        lines.append(
            (
                f"upgrade {r['shape']}->0023 alone ({r['messages']} msgs)",
                f"{r['floor_rebuild_s'] * 1000:.0f} ms (raw rebuild)",
                f"{r['total_s'] * 1000:.0f} ms total ({r['pacing']} pacing)",
                f"{r['ratio']:5.2f}x" if r.get("ratio") else "-",
            )
        )
        for beside in r.get("beside_appender") or ():
            a = beside["appender"]
            lines.append(
                (
                    f"upgrade {r['shape']}->0023 beside an appender",
                    f"{a['appends']} appends, 1 per {a['interval_s'] * 1000:.0f} ms",
                    f"append p50 {a['latency_p50_s'] * 1000:.1f} / p99 "
                    f"{a['latency_p99_s'] * 1000:.1f} ms",
                    f"{a['failures']} failed",
                )
            )
    return lines


def print_details(rows: list[dict[str, Any]]) -> None:
    for r in rows:
        print(
            f"\nupgrade {r['shape']} alone ({r['messages']} msgs, {r['legacy_file_mb']:.0f} MB, "
            f"{r['pacing']} pacing): total {r['total_s']:.2f} s = migration txn "
            f"{r['migration_txn_s'] * 1000:.0f} ms "
            f"+ {r['backfill_steps']} backfill steps {r['backfill_s']:.2f} s "
            f"+ {r['teardown_steps']} teardown steps {r['teardown_s']:.2f} s "
            f"+ {r['other_txns']} small txns {r['other_s'] * 1000:.0f} ms "
            f"+ {r['pauses']} pauses {r['paused_s']:.2f} s + other"
            f"\n  longest write txn {r['longest_write_txn_s'] * 1000:.1f} ms "
            f"({r['longest_write_txn_kind']}; longest backfill step "
            f"{r['longest_backfill_step_s'] * 1000:.1f} ms, longest teardown step "
            f"{r['longest_teardown_step_s'] * 1000:.1f} ms); peak RSS {r['peak_rss_mb']:.0f} MB "
            f"(after imports {r['baseline_rss_mb']:.0f} MB)"
            f"\n  step p50 / p99: backfill {r['backfill_step_p50_s'] * 1000:.1f} / "
            f"{r['backfill_step_p99_s'] * 1000:.1f} ms, teardown "
            f"{r['teardown_step_p50_s'] * 1000:.1f} / {r['teardown_step_p99_s'] * 1000:.1f} ms"
            f"\n  CPU: upgrade {r['cpu_s']:.2f} s, raw rebuild {r['floor_rebuild_cpu_s']:.2f} s; "
            f"(upgrade CPU + pauses) / rebuild CPU = {r['ratio_cpu_plus_pauses']:.2f}x"
            f"\n  load average (1 / 5 min): {r['load_before']} before, {r['load_after']} after"
        )
        if r.get("checks"):
            print("  checks: integrity_check ok, FTS integrity ok, object set = fresh database")
        for beside in r.get("beside_appender") or ():
            u, a = beside["upgrade"], beside["appender"]
            print(
                f"upgrade {r['shape']} beside an appender (1 append per "
                f"{a['interval_s'] * 1000:.0f} ms): upgrade total {u['total_s']:.2f} s "
                f"({u['pauses']} pauses {u['paused_s']:.2f} s, {u['shared_pauses']} of them "
                f"shared; other commits seen {u['foreign_commits_seen']} times); "
                f"longest write txn {u['longest_write_txn_s'] * 1000:.1f} ms "
                f"({u['longest_write_txn_kind']})"
                f"\n  appender: {a['appends']} appends, {a['failures']} failed, "
                f"{a['retried_attempts']} attempts retried; latency p50 "
                f"{a['latency_p50_s'] * 1000:.1f} ms, p99 {a['latency_p99_s'] * 1000:.1f} ms, "
                f"max {a['latency_max_s'] * 1000:.1f} ms, {a['over_250ms']} over 250 ms"
                f"\n  load average (1 / 5 min): {beside['load_before']} before, "
                f"{beside['load_after']} after"
            )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.upgrade", description=__doc__)
    parser.add_argument("--size", choices=tuple(corpus.SIZES), default="10k")
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--seed", type=int, default=23)
    parser.add_argument("--json", type=Path, help="write the rows here")
    parser.add_argument("--keep", type=Path, help="work in this directory")
    add_arguments(parser)
    args = parser.parse_args(argv)
    started = time.perf_counter()
    print(f"sqlite {sqlite3.sqlite_version}, python {sys.version.split()[0]}")
    with tempfile.TemporaryDirectory(prefix="hermes-upgrade-") as tmp:
        directory = args.keep or Path(tmp)
        directory.mkdir(parents=True, exist_ok=True)
        rows = run_all(args, directory)
    print()
    for line in table_lines(rows):
        print(" | ".join(line))
    print_details(rows)
    print(f"\n{time.perf_counter() - started:.1f} s")
    if args.json:
        args.json.write_text(json.dumps({"upgrades": rows}, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
