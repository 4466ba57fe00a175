"""`search`: message text search."""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING, Any

from ._args import _hits_arg, _open_store, with_formats, with_url
from ._output import _cell, _iso_times, _print_csv, _print_json

if TYPE_CHECKING:
    pass


#: `search --csv`: the columns of a hit, in this order (context: its JSON text)
_SEARCH_COLUMNS = (
    "session_id",
    "id",
    "role",
    "tool_name",
    "timestamp",
    "source",
    "model",
    "session_started",
    "snippet",
    "context",
)


def _cmd_search(args: argparse.Namespace) -> int:
    from ..repositories.search import SearchRepository

    # one read unit of the store: a PostgreSQL fault mid-search runs the search again
    with _open_store(args.url) as store:
        hits = SearchRepository(store).search_messages(
            args.query,
            source_filter=args.source,
            role_filter=args.role,
            limit=args.limit,
            tags=args.tag,
        )
    if args.json:
        _print_json([_iso_times(hit) for hit in hits])
        _warn(hits)
        return 0
    if args.csv:
        _print_csv([_iso_times(hit) for hit in hits], _SEARCH_COLUMNS)
        _warn(hits)
        return 0
    for hit in hits:
        session, role, snippet = _cell(hit["session_id"]), _cell(hit["role"]), _cell(hit["snippet"])
        print(f"{session}  #{hit['id']}  {role:<9} {snippet}")
    if not hits:
        print("no matches")
    _warn(hits)
    return 0


def _warn(hits: Any) -> None:
    # why the hits may leave out matches (a zero-hit retry stopped at its budget): on
    # stderr, so that --json stays one document
    for warning in getattr(hits, "warnings", ()):
        print(f"warning: {warning}", file=sys.stderr)


def add_parsers(sub: Any) -> None:
    find = with_url(sub.add_parser("search", help="search message text"))
    find.add_argument("query")
    find.add_argument("--source", action="append", help="only this source (repeatable)")
    find.add_argument("--role", action="append", help="only this role (repeatable)")
    find.add_argument(
        "--tag",
        action="append",
        metavar="TAG",
        help="only sessions carrying this tag (repeatable: every one of them)",
    )
    find.add_argument(
        "--limit", type=_hits_arg, default=20, metavar="N", help="at most N hits (default 20)"
    )
    with_formats(find)
    find.set_defaults(func=_cmd_search)
