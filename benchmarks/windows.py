"""Two versions of the search code on one loaded PostgreSQL database, measured in the
same run: `python -m benchmarks.windows URL [--before REV]`.

The code at REV (default: main) is extracted with `git archive` into a scratch
directory; a child process imports it from there (the editable install of this tree
set aside), another child imports this tree. They run in alternating rounds, each
round timing every query, so both see the same machine load; the table gives each
query's p50 and p95 over all rounds, before and after, with the 1-minute load average.
The database is one `benchmarks.scale.load` filled, e.g. 1M messages:

    python -c "from benchmarks import scale; scale.load(URL, 1_000_000, 10_000, 23)"
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from . import corpus
from .stats import load_average, percentiles

ROOT = Path(__file__).resolve().parents[1]
#: every search row of the benchmark's table
QUERIES = tuple(corpus.QUERIES.values())


def _child(url: str, code: str | None, samples: int, queries: list[str]) -> dict[str, Any]:
    """Time each of `queries` `samples` times (after two warm-up searches) with the code in
    `code` (None: this tree)."""
    if code is not None:
        sys.meta_path[:] = [f for f in sys.meta_path if "editable" not in repr(f).lower()]
        sys.path.insert(0, code)
    import time

    from hermes_store.search import search_messages
    from hermes_store.store import Store

    store = Store(url)
    out: dict[str, Any] = {"module": sys.modules["hermes_store"].__file__, "rows": {}}
    try:
        for query in queries:
            times = []
            hits: list[int] = []
            for n in range(samples + 2):
                with store.read() as conn:
                    started = time.perf_counter()
                    found = search_messages(conn, query)
                    elapsed = time.perf_counter() - started
                if n >= 2:
                    times.append(elapsed)
                hits = [int(h["id"]) for h in found]
            out["rows"][query] = {"samples": times, "hits": hits}
    finally:
        store.close()
    return out


def _run_child(url: str, code: str | None, samples: int, queries: list[str]) -> dict[str, Any]:
    args = [sys.executable, "-m", "benchmarks.windows", "--child", "--samples", str(samples)]
    args += ["--code", code] if code else []
    args += [f"--query={query}" for query in queries]
    done = subprocess.run([*args, url], cwd=ROOT, capture_output=True, text=True, check=True)
    result: dict[str, Any] = json.loads(done.stdout)
    return result


def compare(
    url: str, before: str, rounds: int, samples: int, queries: list[str] | None = None
) -> list[dict[str, Any]]:
    """Each of `queries` (default: every search row) before and after, in alternating
    rounds."""
    queries = list(queries or QUERIES)
    with tempfile.TemporaryDirectory(prefix="hs-before-") as scratch:
        archive = subprocess.run(
            ["git", "archive", before, "hermes_store"], cwd=ROOT, capture_output=True, check=True
        )
        subprocess.run(["tar", "-x", "-C", scratch], input=archive.stdout, check=True)
        sides: dict[str, dict[str, list[float]]] = {"before": {}, "after": {}}
        loads: list[float] = []
        same: dict[str, bool] = {}
        for _ in range(rounds):
            got = {
                "before": _run_child(url, scratch, samples, queries),
                "after": _run_child(url, None, samples, queries),
            }
            loads.append(load_average())
            if not got["before"]["module"].startswith(scratch):
                raise RuntimeError(f"the before side imported {got['before']['module']}")
            for side, result in got.items():
                for query, row in result["rows"].items():
                    sides[side].setdefault(query, []).extend(row["samples"])
            for query in queries:
                hits = [got[s]["rows"][query]["hits"] for s in ("before", "after")]
                same[query] = same.get(query, True) and hits[0] == hits[1]
    rows = []
    for query in queries:
        b50, b95 = percentiles(sides["before"][query])
        a50, a95 = percentiles(sides["after"][query])
        rows.append(
            {
                "query": query,
                "before_p50_ms": b50,
                "before_p95_ms": b95,
                "after_p50_ms": a50,
                "after_p95_ms": a95,
                "same_page": same[query],
                "load": f"{min(loads):.1f}-{max(loads):.1f}",
            }
        )
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.windows", description=__doc__)
    parser.add_argument("url", help="a loaded PostgreSQL database (SQLAlchemy URL)")
    parser.add_argument("--before", default="main", help="the git revision measured first")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--samples", type=int, default=10, help="per query and round")
    parser.add_argument(
        "--query", action="append", help="a query to time (repeatable; default: every row)"
    )
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--code", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        print(json.dumps(_child(args.url, args.code, args.samples, args.query or list(QUERIES))))
        return 0
    rows = compare(args.url, args.before, args.rounds, args.samples, args.query)
    print(f"{'query':<24} | before p50/p95 ms    | after p50/p95 ms     | same page | load")
    for row in rows:
        print(
            f"{row['query']:<24} | {row['before_p50_ms']:8.2f} / {row['before_p95_ms']:8.2f} "
            f"| {row['after_p50_ms']:8.2f} / {row['after_p95_ms']:8.2f} "
            f"| {'yes' if row['same_page'] else 'NO':<9} | {row['load']}"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
