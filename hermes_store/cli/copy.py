"""`copy`: a whole database to another URL, verified."""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING, Any

from ._args import _batch_arg
from ._output import _cell, _num, _print_json, _print_table, _printable

if TYPE_CHECKING:
    from ..migration.copy import CopyProgress


def _cmd_copy(args: argparse.Namespace) -> int:
    from tqdm import tqdm

    from ..migration.copy import DEFAULT_BATCH_SIZE, copy_database

    bar: Any = None

    def progress(p: CopyProgress) -> None:
        nonlocal bar
        if bar is None:
            bar = tqdm(total=p.overall_total, desc="copy", unit="row", delay=2.0, disable=None)
        bar.set_postfix_str(p.table, refresh=False)
        bar.n = p.overall_done
        bar.refresh()

    try:
        report = copy_database(
            args.source,
            args.target,
            resume=args.resume,
            batch_size=args.batch_size or DEFAULT_BATCH_SIZE,
            on_progress=progress,
        )
    except KeyboardInterrupt:
        # the generic advice ("run the same command again") would be refused here
        print(
            "hermes-store: interrupted; continue with the same command and --resume",
            file=sys.stderr,
        )
        return 130
    finally:
        if bar is not None:
            bar.close()
    if args.json:
        _print_json(report.as_dict())
        return 0 if report.ok else 1
    copied = sum(report.copied.values())
    print(
        f"copied {_num(copied)} rows in {report.batches} batches: "
        f"{_printable(report.source, lines=False)} -> {_printable(report.target, lines=False)}"
        f"{' (resumed)' if report.resumed else ''}"
    )
    rows = []
    for t in report.tables:
        digest = t.digest_source[:12]
        if t.digest_target != t.digest_source:
            digest += f" != {t.digest_target[:12]}"
        rows.append(
            (
                _cell(t.table),
                _num(t.rows_source),
                _num(t.rows_target),
                digest,
                "ok" if t.ok else "DIFF",
            )
        )
    _print_table(("TABLE", "ROWS SOURCE", "ROWS TARGET", "DIGEST", "OK"), rows, right=(1, 2))
    for name in report.not_copied:
        print(f"not copied (unknown to hermes-store): {_cell(name)}")
    if not report.ok:
        print("the target differs from the source (was the source written during the copy?)")
    return 0 if report.ok else 1


def add_parsers(sub: Any) -> None:
    cp = sub.add_parser(
        "copy", help="copy a whole database to another URL (SQLite <-> PostgreSQL), verified"
    )
    cp.add_argument("--from", dest="source", metavar="URL", required=True, help="source (at head)")
    cp.add_argument(
        "--to", dest="target", metavar="URL", required=True, help="target (empty or new)"
    )
    cp.add_argument(
        "--resume", action="store_true", help="continue an interrupted copy into the target"
    )
    cp.add_argument(
        "--batch-size",
        type=_batch_arg,
        metavar="N",
        help="rows per transaction (default 1000)",
    )
    cp.add_argument("--json", action="store_true")
    cp.set_defaults(func=_cmd_copy)
