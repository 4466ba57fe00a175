"""The cost the redaction policy adds to an append (docs/redaction.md): the same
messages (benchmarks/corpus.py fresh_messages: user, tool and assistant rows with tool
calls, 5-80 words) appended to two fresh SQLite databases at head, one store with the
built-in policy and one without, interleaved sample by sample so that both see the same
machine; p50 / p95 and their ratio, measured in one run. With a PostgreSQL server, the
same on two scratch databases.

    python -m benchmarks.redaction [--quick] [--json PATH]
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path
from typing import Any

from . import postgres
from .corpus import EPOCH, fresh_messages
from .stats import comparison


def _append_rows(backend: str, plain_url: str, redacting_url: str, n: int) -> list[dict[str, Any]]:
    from hermes_store import MessageRepository, RedactionPolicy, SessionRepository, Store

    messages = list(fresh_messages(39, n + 3, EPOCH))
    samples: dict[str, list[float]] = {"off": [], "on": []}
    with (
        Store(plain_url, redaction=RedactionPolicy.off()) as plain,
        Store(redacting_url, redaction=RedactionPolicy()) as redacting,
    ):
        repos = {}
        for name, store in (("off", plain), ("on", redacting)):
            SessionRepository(store).create_session("bench", "cli")
            repos[name] = MessageRepository(store)
        for i, message in enumerate(messages):
            fields = {k: v for k, v in message.items() if k != "role"}
            for variant in ("off", "on") if i % 2 else ("on", "off"):
                started = time.perf_counter()
                repos[variant].append_message("bench", message["role"], **fields)
                if i >= 3:  # warm-up
                    samples[variant].append(time.perf_counter() - started)
        # the policy alone, on the same messages' text, without the database
        policy = RedactionPolicy()
        started = time.perf_counter()
        for message in messages:
            policy.redact_fields(message)
        per_message_us = (time.perf_counter() - started) / len(messages) * 1e6
    row = comparison("append one", "off", samples["off"], "on", samples["on"])
    return [{"backend": backend, **row, "policy_alone_us": round(per_message_us, 1)}]


def run(quick: bool) -> dict[str, Any]:
    from hermes_store import migrate

    n = 200 if quick else 2000
    rows: list[dict[str, Any]] = []
    skipped: dict[str, str] = {}
    with tempfile.TemporaryDirectory(prefix="hermes-redact-") as tmp:
        urls = [f"sqlite:///{Path(tmp) / name}" for name in ("off.db", "on.db")]
        for url in urls:
            migrate.upgrade(url, fts_min_pause=0)
        rows += _append_rows("sqlite", urls[0], urls[1], n)
    admin = postgres.admin_url()
    reason = postgres.unavailable(admin)
    if reason is not None:
        skipped["postgresql"] = reason
    else:
        with (
            postgres.scratch_database(admin, "_redact_off") as off,
            postgres.scratch_database(admin, "_redact_on") as on,
        ):
            migrate.upgrade(off)
            migrate.upgrade(on)
            rows += _append_rows("postgresql", off, on, n // 2)
    return {"rows": rows, "skipped": skipped}


def print_table(result: dict[str, Any]) -> None:
    print("append one message with the built-in redaction policy against without it, ms")
    print(
        f"{'backend':<11} {'off p50':>8} {'p95':>7} {'on p50':>8} {'p95':>7} "
        f"{'ratio p50':>10} {'p95':>6} {'policy alone us':>16}"
    )
    for row in result["rows"]:
        print(
            f"{row['backend']:<11} {row['off_p50_ms']:>8.3f} {row['off_p95_ms']:>7.3f} "
            f"{row['on_p50_ms']:>8.3f} {row['on_p95_ms']:>7.3f} {row['ratio_p50']:>10.2f} "
            f"{row['ratio_p95']:>6.2f} {row['policy_alone_us']:>16.1f}"
        )
    for backend, why in result["skipped"].items():
        print(f"skipped {backend}: {why}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.redaction", description=__doc__)
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
