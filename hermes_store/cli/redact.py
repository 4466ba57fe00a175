"""`redact`: replace secrets in what is already stored (docs/redaction.md). A dry run by
default, counts per pattern, never a matched text."""

from __future__ import annotations

import argparse
from typing import Any

from ..errors import InvalidRedactionPattern
from ._args import _batch_arg, _open_store, _wait_arg, with_formats, with_url
from ._output import _cell, _num, _print_csv, _print_json, _print_table


def _pattern_arg(text: str) -> tuple[str, str]:
    from ..redaction import parse_pattern_arg

    try:
        return parse_pattern_arg(text)
    except InvalidRedactionPattern as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _cmd_redact(args: argparse.Namespace) -> int:
    import os
    from pathlib import Path

    from ..redaction import PATTERNS_ENV, RedactionPolicy, read_patterns
    from ..repositories.redaction import RedactionRepository

    pairs: list[tuple[str, str]] = []
    env_file = os.environ.get(PATTERNS_ENV, "").strip()
    if env_file:
        pairs += read_patterns(Path(env_file))
    for path in args.patterns_file or ():
        pairs += read_patterns(Path(path))
    pairs += args.pattern or []
    policy = RedactionPolicy(builtin=not args.no_builtin, patterns=pairs)
    with _open_store(args.url, write=args.apply, wait=args.wait if args.apply else None) as store:
        run = RedactionRepository(store, policy).redact_stored(
            apply=args.apply, batch=args.batch, restart=args.restart
        )
    rows = [{"pattern": name, "count": run.counts.get(name, 0)} for name in policy.names]
    if args.json:
        _print_json(
            {
                "applied": run.applied,
                "counts": {r["pattern"]: r["count"] for r in rows},
                "rows_scanned": run.rows_scanned,
                "rows_matched": run.rows_matched,
                "resumed_after": run.resumed_after,
                "last_id": run.last_id,
                "fingerprint": run.fingerprint,
            }
        )
        return 0
    if args.csv:
        _print_csv(rows, ("pattern", "count"))
        return 0
    verb = "replaced" if run.applied else "found (dry run: nothing written; --apply writes)"
    start = f"after message {run.resumed_after}" if run.resumed_after else "from the first message"
    print(
        f"{_num(run.rows_scanned)} messages read {start}; {_num(run.rows_matched)} with a "
        f"secret; {_num(run.replacements)} matches {verb}"
    )
    _print_table(
        ("PATTERN", "MATCHES"),
        [[_cell(r["pattern"]), _num(r["count"])] for r in rows],
        right=range(1, 2),
    )
    return 0


def add_parsers(sub: Any) -> None:
    redact = with_url(
        sub.add_parser(
            "redact",
            help="replace secrets in stored messages (a dry run unless --apply)",
        )
    )
    redact.add_argument(
        "--apply", action="store_true", help="write the redacted values (default: count only)"
    )
    redact.add_argument(
        "--pattern",
        action="append",
        type=_pattern_arg,
        metavar="NAME=REGEX",
        help="a pattern of your own, besides the built-in ones (repeatable)",
    )
    redact.add_argument(
        "--patterns-file",
        action="append",
        metavar="FILE",
        help="a file of patterns, one NAME=REGEX a line (repeatable); "
        "$HERMES_STORE_REDACT_PATTERNS is read too",
    )
    redact.add_argument(
        "--no-builtin", action="store_true", help="only your own patterns, not the built-in ones"
    )
    redact.add_argument(
        "--batch",
        type=_batch_arg,
        default=500,
        metavar="N",
        help="messages per batch; each applied batch is one short write (default 500)",
    )
    redact.add_argument(
        "--restart",
        action="store_true",
        help="walk every message, not only those after the last applied run of these patterns",
    )
    redact.add_argument(
        "--wait",
        type=_wait_arg,
        default=20.0,
        metavar="SECONDS",
        help="with --apply: wait this long for a lock another process holds (default 20)",
    )
    with_formats(redact)
    redact.set_defaults(func=_cmd_redact)
