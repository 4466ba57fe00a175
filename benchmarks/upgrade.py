"""The upgrade rows: large generated legacy databases brought to head.

For each shape (`v9`: the fixture's L1 index, so revisions 0010/0011 replace it; `v22`: the
L3 inline pair with their `_content` copies, which 0023 replaces) a legacy file of the
chosen size is generated (benchmarks/legacy_corpus.py; not timed), checked to be adopted
exactly like its fixture, and upgraded by `migrate.upgrade` in a subprocess
(benchmarks/upgrade_child.py): total time, migration-transaction time, number and total of
backfill and teardown steps, the longest single write transaction and peak RSS.
The floor is a raw FTS5 'rebuild' of both v23 indexes on the upgraded file (the indexing
work the chunked backfill spreads over many transactions).

Targets (issue 5): peak RSS flat as the corpus grows; no write transaction longer than one
500-id chunk costs.

    python -m benchmarks.upgrade [--upgrade-size 1m] [--upgrade-shapes v9,v22]
                                 [--upgrade-cache DIR] [--upgrade-check] [--json PATH]
"""

from __future__ import annotations

import argparse
import json
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from . import corpus, legacy_corpus

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
        "--upgrade-throttle",
        action="store_true",
        help="keep the backfill's between-step sleeps (4 x step time) in the total",
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


def run_upgrade(
    directory: Path,
    shape: str,
    size: str,
    *,
    seed: int = 23,
    cache: Path | None = None,
    check: bool = False,
    throttle: bool = False,
) -> dict[str, Any]:
    legacy, built = legacy_file(directory, shape, size, seed=seed, cache=cache)
    adoption = legacy_corpus.check_adoptable(shape, legacy)
    conn = sqlite3.connect(str(legacy))
    n_messages = int(conn.execute("SELECT COUNT(*) FROM messages").fetchone()[0])
    conn.close()
    file_mb = legacy.stat().st_size / 2**20
    proc = subprocess.run(
        [sys.executable, "-m", "benchmarks.upgrade_child", str(legacy)]
        + (["--throttle"] if throttle else []),
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    if proc.returncode != 0:
        raise SystemExit(f"upgrade subprocess failed:\n{proc.stderr}")
    result: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    checks = _post_checks(legacy, directory) if check else None
    # floor: the same indexing as one raw FTS5 rebuild of both v23 indexes
    raw = sqlite3.connect(str(legacy), isolation_level=None)
    started = time.perf_counter()
    raw.execute("BEGIN IMMEDIATE")
    raw.execute("INSERT INTO messages_fts(messages_fts) VALUES ('rebuild')")
    raw.execute("INSERT INTO messages_fts_trigram(messages_fts_trigram) VALUES ('rebuild')")
    raw.execute("COMMIT")
    floor_s = time.perf_counter() - started
    raw.close()
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
    )
    for suffix in ("", "-wal", "-shm"):
        Path(str(legacy) + suffix).unlink(missing_ok=True)
    return result


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
            throttle=args.upgrade_throttle,
        )
        print(
            f"upgrade {shape}: {row['messages']} messages, legacy file "
            f"{row['legacy_file_mb']:.0f} MB (generated in {row['generate_s']:.1f} s, not measured)"
        )
        rows.append(row)
    return rows


def table_lines(rows: list[dict[str, Any]]) -> list[tuple[str, str, str, str]]:
    """One line per upgrade for the main table (floor, hermes-store, ratio)."""
    return [
        (
            f"upgrade {r['shape']}->0023 ({r['messages']} msgs)",
            f"{r['floor_rebuild_s'] * 1000:.0f} ms (raw rebuild)",
            f"{r['total_s'] * 1000:.0f} ms total",
            f"{r['total_s'] / r['floor_rebuild_s']:5.2f}x" if r["floor_rebuild_s"] else "-",
        )
        for r in rows
    ]


def print_details(rows: list[dict[str, Any]]) -> None:
    for r in rows:
        print(
            f"\nupgrade {r['shape']} ({r['messages']} msgs, {r['legacy_file_mb']:.0f} MB): "
            f"total {r['total_s']:.2f} s = migration txn {r['migration_txn_s'] * 1000:.0f} ms "
            f"+ {r['backfill_steps']} backfill steps {r['backfill_s']:.2f} s "
            f"+ {r['teardown_steps']} teardown steps {r['teardown_s']:.2f} s "
            f"+ {r['other_txns']} small txns {r['other_s'] * 1000:.0f} ms + "
            + ("throttle sleeps/other" if r.get("throttled") else "other (unthrottled)")
            + f"\n  longest write txn {r['longest_write_txn_s'] * 1000:.1f} ms "
            f"({r['longest_write_txn_kind']}; longest backfill step "
            f"{r['longest_backfill_step_s'] * 1000:.1f} ms, longest teardown step "
            f"{r['longest_teardown_step_s'] * 1000:.1f} ms); peak RSS {r['peak_rss_mb']:.0f} MB "
            f"(after imports {r['baseline_rss_mb']:.0f} MB)"
            f"\n  step p50 / p99: backfill {r['backfill_step_p50_s'] * 1000:.1f} / "
            f"{r['backfill_step_p99_s'] * 1000:.1f} ms, teardown "
            f"{r['teardown_step_p50_s'] * 1000:.1f} / {r['teardown_step_p99_s'] * 1000:.1f} ms"
        )
        if r.get("checks"):
            print("  checks: integrity_check ok, FTS integrity ok, object set = fresh database")


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
