"""What encryption at rest (SQLCipher, docs/encryption.md) costs an append and a search.

    python -m benchmarks.encryption [--messages N] [--iterations N] [--json PATH]

One child process on sqlcipher3 (the SQLite library is chosen once per process,
hermes_store.sqlite.driver), so both files run on the same SQLite 3.53.4 and the ratio is
the encryption alone: a plain file, and a copy of it encrypted with `hermes-store
encrypt`'s code, both in WAL mode, each through its own `Store`. Rows, each p50 / p95 in
milliseconds for the plain file and the encrypted one, and their ratio, measured
alternately in one run: append one message, a word search (FTS5), a substring search
(the trigram index), and opening a Store (its first connection: `PRAGMA key` with a
passphrase runs SQLCipher's PBKDF2, a raw 32-byte key skips it). Skipped, saying so,
where sqlcipher3 is not installed.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

from . import corpus

PASSPHRASE = "benchmark passphrase, not a secret"
RAW_KEY = bytes(range(32))
WORD = "checkpoint"  # a corpus word (corpus.WORDS)
SUBSTRING = "eckpoi"  # inside it: only the trigram index answers


def _percentiles(samples: list[float]) -> dict[str, float]:
    ordered = sorted(samples)
    p95 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.95))]
    return {"p50_ms": statistics.median(ordered) * 1000, "p95_ms": p95 * 1000}


def _timed(call: Callable[[], Any]) -> float:
    start = time.perf_counter()
    call()
    return time.perf_counter() - start


def _fill(path: Path, messages: int) -> None:
    from hermes_store import migrate
    from hermes_store.repositories.messages import MessageRepository
    from hermes_store.repositories.sessions import SessionRepository
    from hermes_store.store import Store

    migrate.upgrade(str(path))
    batch: list[dict[str, Any]] = []
    with Store(str(path)) as store:
        sessions, repo = SessionRepository(store), MessageRepository(store)
        session = 0
        for n, message in enumerate(corpus.fresh_messages(23, messages, corpus.EPOCH)):
            if n % 200 == 0:
                session += 1
                sessions.create_session(f"s{session}", "cli", model="hermes-4")
            batch.append(message)
            if len(batch) == 50 or n == messages - 1:
                repo.append_messages(f"s{session}", batch)
                batch = []


def _child(directory: Path, messages: int, iterations: int) -> dict[str, Any]:
    from hermes_store.repositories.messages import MessageRepository
    from hermes_store.repositories.search import SearchRepository
    from hermes_store.repositories.sessions import SessionRepository
    from hermes_store.sqlite import driver as sqlite_driver
    from hermes_store.sqlite.encrypt import encrypt_file
    from hermes_store.store import Store

    driver = sqlite_driver.current()
    plain, encrypted, raw = (directory / n for n in ("plain.db", "enc.db", "raw.db"))
    _fill(plain, messages)
    shutil.copyfile(plain, encrypted)
    shutil.copyfile(plain, raw)
    encrypt_file(encrypted, PASSPHRASE, backup=False)
    encrypt_file(raw, RAW_KEY, backup=False)

    samples: dict[str, dict[str, list[float]]] = {}

    def sample(row: str, variant: str, seconds: float) -> None:
        samples.setdefault(row, {}).setdefault(variant, []).append(seconds)

    stores = {
        "plain": Store(str(plain)),
        "encrypted": Store(str(encrypted), key=PASSPHRASE),
    }
    try:
        for store in stores.values():
            SessionRepository(store).create_session("bench", "cli", model="hermes-4")
        fresh = corpus.fresh_messages(7, iterations * 2, corpus.EPOCH + 10**7)
        for _ in range(iterations):
            for variant, store in stores.items():  # alternately: drift hits both alike
                message = next(fresh)
                repo, search = MessageRepository(store), SearchRepository(store)
                append = partial(repo.append_message, "bench", **message)
                sample("append one message", variant, _timed(append))
                sample("search: word", variant, _timed(partial(search.search_messages, WORD)))
                substring = partial(search.search_messages, SUBSTRING)
                sample("search: substring (trigram)", variant, _timed(substring))
        hits = {
            variant: len(SearchRepository(store).search_messages(WORD))
            for variant, store in stores.items()
        }
    finally:
        for store in stores.values():
            store.close()
    opens: dict[str, tuple[Path, str | bytes | None]] = {
        "plain": (plain, None),
        "encrypted": (encrypted, PASSPHRASE),
        "raw key": (raw, RAW_KEY),
    }

    def open_and_close(path: Path, key: str | bytes | None) -> None:
        Store(str(path), key=key).close()

    for _ in range(max(3, iterations // 20)):
        for variant, (path, key) in opens.items():
            sample("open a Store", variant, _timed(partial(open_and_close, path, key)))
    rows = []
    for row, variants in samples.items():
        measured = {v: _percentiles(s) for v, s in variants.items()}
        base = measured["plain"]["p50_ms"]
        rows.append(
            {
                "row": row,
                **{v: m for v, m in measured.items()},
                "ratio_p50": {
                    v: m["p50_ms"] / base for v, m in measured.items() if v != "plain"
                },
            }
        )
    return {
        "driver": f"{driver.name} {driver.sqlite_version_text}",
        "messages": messages,
        "iterations": iterations,
        "word_hits": hits,
        "bytes": {"plain": plain.stat().st_size, "encrypted": encrypted.stat().st_size},
        "rows": rows,
    }


def run(messages: int = 10_000, iterations: int = 200) -> dict[str, Any]:
    """The table, measured in a child process on sqlcipher3; {"skipped": why} without it."""
    if importlib.util.find_spec("sqlcipher3") is None:
        return {"skipped": "sqlcipher3 is not installed (pip install 'hermes-store[encryption]')"}
    with tempfile.TemporaryDirectory(prefix="hermes-bench-encryption-") as scratch:
        env = {k: v for k, v in os.environ.items() if not k.startswith("HERMES_STORE_")}
        env["HERMES_STORE_SQLITE_DRIVER"] = "sqlcipher3"
        out = Path(scratch, "result.json")
        command = [
            sys.executable, "-m", "benchmarks.encryption", "--child", scratch,
            "--messages", str(messages), "--iterations", str(iterations), "--json", str(out),
        ]  # fmt: skip
        done = subprocess.run(command, env=env, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            raise RuntimeError(f"the encryption benchmark's child failed:\n{done.stderr}")
        result: dict[str, Any] = json.loads(out.read_text())
        return result


def print_table(result: dict[str, Any]) -> None:
    if "skipped" in result:
        print(f"encryption at rest: skipped ({result['skipped']})")
        return
    print(
        f"encryption at rest ({result['driver']}, {result['messages']:,} messages, "
        f"{result['iterations']} iterations; p50 / p95 ms, ratio of p50s to the plain file)"
    )
    print(f"{'':30} {'plain':>17} {'encrypted':>17} {'ratio':>7} {'raw key':>17} {'ratio':>7}")
    for row in result["rows"]:
        cells = [f"{row['row']:30}"]
        for variant in ("plain", "encrypted", "raw key"):
            if variant not in row:
                continue
            cells.append(f"{row[variant]['p50_ms']:8.3f} /{row[variant]['p95_ms']:8.3f}")
            if variant != "plain":
                cells.append(f"{row['ratio_p50'][variant]:6.2f}x")
        print(" ".join(cells))
    sizes = result["bytes"]
    print(f"file size: plain {sizes['plain']:,} bytes, encrypted {sizes['encrypted']:,} bytes")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.encryption")
    parser.add_argument("--messages", type=int, default=10_000)
    parser.add_argument("--iterations", type=int, default=200)
    parser.add_argument("--json", type=Path)
    parser.add_argument("--child", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child is not None:
        result = _child(args.child, args.messages, args.iterations)
    else:
        result = run(args.messages, args.iterations)
        print_table(result)
    if args.json is not None:
        args.json.write_text(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
