"""`fts backfill` and `fts rebuild`: full-text index maintenance."""

from __future__ import annotations

import argparse
import time
from typing import TYPE_CHECKING, Any

from ._args import with_url
from ._output import _cell, _progress_bar

if TYPE_CHECKING:
    pass


def _cmd_fts(args: argparse.Namespace) -> int:
    from .. import migrate
    from ..search.maintenance import BackfillStats

    if args.fts_command == "rebuild":
        migrate.rebuild_fts(args.url)
        print("fts: rebuilt both indexes")
        return 0
    started = time.monotonic()
    stats = BackfillStats()
    with _progress_bar("fts backfill") as progress:
        migrate.finish_fts(args.url, on_progress=progress, stats=stats)
    print(f"fts: {_cell(migrate.current(args.url).fts.describe())}")  # type: ignore[union-attr]
    print(
        f"summary: {stats.rows_indexed} messages indexed, {stats.tables_removed} legacy FTS "
        f"tables removed, {time.monotonic() - started:.1f} s"
    )
    return 0


def add_parsers(sub: Any) -> None:
    fts = sub.add_parser("fts", help="full-text index maintenance")
    fts_sub = fts.add_subparsers(dest="fts_command", required=True)
    with_url(fts_sub.add_parser("backfill", help="finish a pending chunked backfill"))
    with_url(fts_sub.add_parser("rebuild", help="rebuild both indexes from the messages"))
    fts.set_defaults(func=_cmd_fts)
