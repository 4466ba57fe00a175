"""`stats`: tokens and cost by model and by day; `--space`: where the space goes."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from typing import Any

from ..errors import InvalidInput
from ._args import _hits_arg, _open_store, _wait_arg, _zone_arg, with_formats, with_url
from ._output import _cell, _money, _num, _print_csv, _print_json, _print_table, _usd

_TOKEN_HEADERS = ("INPUT", "OUTPUT", "CACHE READ", "CACHE WRITE", "REASONING")
_COST_FIELDS = ("estimated_cost_usd", "actual_cost_usd")


def _usage_cells(row: dict[str, Any]) -> list[str]:
    from ..repositories.usage import TOKEN_FIELDS

    return [*(_num(row.get(f)) for f in TOKEN_FIELDS), *(_usd(row.get(f)) for f in _COST_FIELDS)]


def _totals(rows: Sequence[dict[str, Any]]) -> dict[str, Any]:
    from ..repositories.usage import TOKEN_FIELDS

    return {f: sum(r.get(f) or 0 for r in rows) for f in (*TOKEN_FIELDS, *_COST_FIELDS)}


#: each view's key in `--json`
_JSON_KEYS = {"model": "by_model", "day": "by_day", "model,day": "by_model_day"}
#: `stats --csv`: one table, the view a row belongs to first (`model`, `day`, `model,day`)
_CSV_COLUMNS = (
    "view",
    "day",
    "model",
    "sessions",
    "message_count",
    "input_tokens",
    "output_tokens",
    "cache_read_tokens",
    "cache_write_tokens",
    "reasoning_tokens",
    "api_call_count",
    *_COST_FIELDS,
)

#: `stats --by` values: one breakdown, or the per-model-per-day view.
STATS_VIEWS = ("model", "day", "model,day")


def _stats_view(text: str) -> str:
    parts = [p.strip() for p in text.split(",") if p.strip()]
    if sorted(parts) == ["day", "model"]:
        return "model,day"
    if len(parts) == 1 and parts[0] in STATS_VIEWS:
        return parts[0]
    raise argparse.ArgumentTypeError(f"expected one of {', '.join(STATS_VIEWS)}, got {text!r}")


#: `stats --space --csv`: one table, the section a row belongs to first
_SPACE_CSV_COLUMNS = (
    "section",
    "name",
    "kind",
    "table",
    "session_id",
    "message_id",
    "tool_name",
    "messages",
    "bytes",
)


def _cmd_space(args: argparse.Namespace) -> int:
    from ..repositories.space import DEFAULT_SCAN_SECONDS, DEFAULT_TOP, SpaceRepository

    if args.by is not None or args.tz is not None:
        raise InvalidInput("--by and --tz are for the usage views, not --space")
    if args.full_scan and args.scan_seconds is not None:
        raise InvalidInput(
            "--full-scan reads every message and --scan-seconds stops early: give one"
        )
    if args.full_scan:
        seconds = None
    else:
        seconds = DEFAULT_SCAN_SECONDS if args.scan_seconds is None else args.scan_seconds
    top = DEFAULT_TOP if args.top is None else args.top
    with _open_store(args.url) as store:
        report = SpaceRepository(store).space_report(top=top, scan_seconds=seconds)
    if args.json:
        _print_json(report)
        return 0
    if args.csv:
        rows: list[dict[str, Any]] = [{"section": "object", **o} for o in report["objects"]]
        rows += [{"section": "session", **s} for s in report["largest_sessions"]]
        rows += [{"section": "tool_output", **t} for t in report["largest_tool_outputs"]]
        _print_csv(rows, _SPACE_CSV_COLUMNS)
        return 0
    method = {
        "dbstat": "exact, from SQLite's dbstat",
        "estimate": "estimated: this SQLite has no dbstat; rows times sampled row sizes, "
        "scaled to the file's used pages",
        "postgresql": "from PostgreSQL's relation sizes",
    }[report["method"]]
    total, free = report["database_bytes"], report["free_bytes"]
    print(f"space by object ({method}); database {_num(total)} bytes", end="")
    print("" if free is None else f", {_num(free)} of them free pages", end="\n")
    _print_table(
        ("NAME", "KIND", "TABLE", "BYTES"),
        [
            [_cell(o["name"], 48), o["kind"], _cell(o["table"], 32), _num(o["bytes"])]
            for o in report["objects"]
        ],
        right=range(3, 4),
    )
    scan = report["scan"]
    covered = (
        "every message"
        if scan["complete"]
        else (
            f"the newest {_num(scan['rows_scanned'])} messages (ids from {scan['from_id']}; "
            "the scan stopped at its time limit: --scan-seconds, --full-scan)"
        )
    )
    print()
    print(f"largest sessions, by the bytes of their messages ({covered})")
    _print_table(
        ("SESSION", "MESSAGES", "BYTES"),
        [
            [_cell(s["session_id"], 40), _num(s["messages"]), _num(s["bytes"])]
            for s in report["largest_sessions"]
        ],
        right=range(1, 3),
    )
    print()
    print("largest tool outputs, by the bytes of their content")
    _print_table(
        ("MESSAGE", "SESSION", "TOOL", "BYTES"),
        [
            [
                str(t["message_id"]),
                _cell(t["session_id"], 40),
                _cell(t["tool_name"] or "", 24),
                _num(t["bytes"]),
            ]
            for t in report["largest_tool_outputs"]
        ],
        right=(0, 3),
    )
    return 0


def _cmd_stats(args: argparse.Namespace) -> int:
    from ..repositories.usage import UsageRepository

    if args.space:
        return _cmd_space(args)
    if args.top is not None or args.scan_seconds is not None or args.full_scan:
        raise InvalidInput("--top, --scan-seconds and --full-scan go with --space")
    zone = "UTC" if args.tz is None else args.tz

    with _open_store(args.url) as store:
        usage = UsageRepository(store)
        by_model = usage.usage_by_model() if args.by in (None, "model") else None
        by_day = usage.usage_by_day(time_zone=zone) if args.by in (None, "day") else None
        by_model_day = (
            usage.usage_by_model_and_day(time_zone=zone) if args.by == "model,day" else None
        )
    views = {"model": by_model, "day": by_day, "model,day": by_model_day}
    if args.json:
        _print_json(
            {
                _JSON_KEYS[view]: [_money(r) for r in rows]
                for view, rows in views.items()
                if rows is not None
            }
        )
        return 0
    if args.csv:
        _print_csv(
            [{"view": view, **_money(r)} for view, rows in views.items() for r in rows or ()],
            _CSV_COLUMNS,
        )
        return 0
    usage_headers = (*_TOKEN_HEADERS, "EST. COST", "ACTUAL COST")
    if by_model_day is not None:
        print(
            f"tokens and cost by day the session started ({_cell(zone)}), and model "
            "(auxiliary tasks too)"
        )
        if by_model_day:
            _print_table(
                ("DAY", "MODEL", "SESSIONS", *usage_headers),
                [
                    [_cell(r.get("day")), _cell(r.get("model") or "(none)", 40)]
                    + [_num(r.get("sessions"))]
                    + _usage_cells(r)
                    for r in by_model_day
                ]
                + [["total", "", ""] + _usage_cells(_totals(by_model_day))],
                right=range(2, 10),
            )
        else:
            print("no usage recorded")
    if by_model is not None:
        print("tokens and cost by model (main loop and auxiliary tasks)")
        if by_model:
            _print_table(
                ("MODEL", "SESSIONS", *usage_headers),
                [
                    [_cell(r.get("model") or "(none)", 40), _num(r.get("sessions"))]
                    + _usage_cells(r)
                    for r in by_model
                ]
                + [["total", ""] + _usage_cells(_totals(by_model))],
                right=range(1, 9),
            )
        else:
            print("no usage recorded")
    if by_model is not None and by_day is not None:
        print()
    if by_day is not None:
        print(f"tokens and cost by day the session started ({_cell(zone)})")
        if by_day:
            _print_table(
                ("DAY", "SESSIONS", *usage_headers),
                [[_cell(r.get("day")), _num(r.get("sessions"))] + _usage_cells(r) for r in by_day]
                + [
                    ["total", _num(sum(r.get("sessions") or 0 for r in by_day))]
                    + _usage_cells(_totals(by_day))
                ],
                right=range(1, 9),
            )
        else:
            print("no sessions")
    return 0


def add_parsers(sub: Any) -> None:
    stats = with_url(sub.add_parser("stats", help="tokens and cost by model and by day"))
    stats.add_argument(
        "--by",
        type=_stats_view,
        metavar="VIEW",
        help="model, day, or model,day (one row per day and model); default: by model and by day",
    )
    stats.add_argument(
        "--tz",
        type=_zone_arg,
        metavar="ZONE",
        help="the time zone whose days the by-day views count in (default UTC)",
    )
    stats.add_argument(
        "--space",
        action="store_true",
        help="where the space goes: bytes of each table, index and FTS index, the largest "
        "sessions and tool outputs",
    )
    stats.add_argument(
        "--top",
        type=_hits_arg,
        metavar="N",
        help="with --space: how many of the largest sessions and tool outputs (default 10)",
    )
    stats.add_argument(
        "--scan-seconds",
        type=_wait_arg,
        metavar="SECONDS",
        help="with --space: stop the scan for the largest ones after this long, newest "
        "messages first (default 10)",
    )
    stats.add_argument(
        "--full-scan",
        action="store_true",
        help="with --space: scan every message, however long it takes",
    )
    with_formats(stats)
    stats.set_defaults(func=_cmd_stats)
