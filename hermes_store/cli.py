"""The `hermes-store` command: argument parsing, progress bars and output only; the work
happens in hermes_store.migrate."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from sqlalchemy.exc import SQLAlchemyError

from . import migrate
from .errors import StoreError
from .search.maintenance import Progress


@contextmanager
def _progress_bar(label: str) -> Iterator[Callable[[Progress], None]]:
    """A bar that appears only when the work takes more than two seconds on a terminal."""
    from tqdm import tqdm

    bar: Any = None

    def update(progress: Progress) -> None:
        nonlocal bar
        if progress.total <= 0:
            return
        if bar is None:
            bar = tqdm(total=progress.total, desc=label, unit="id", delay=2.0, disable=None)
        bar.n = progress.indexed
        bar.refresh()

    try:
        yield update
    finally:
        if bar is not None:
            bar.close()


def _print_json(data: Any) -> None:
    print(json.dumps(data, indent=2, ensure_ascii=False, sort_keys=True))


def _cmd_upgrade(args: argparse.Namespace) -> int:
    with _progress_bar("FTS backfill") as progress:
        report = migrate.upgrade(
            args.url, defer_fts_backfill=args.defer_fts_backfill, on_progress=progress
        )
    adopted = (
        f" (adopted a Hermes database at schema_version {report.adopted_from})"
        if report.adopted_from is not None
        else ""
    )
    print(f"revision {report.before or 'none'} -> {report.after}{adopted}")
    if report.fts is not None:
        print(f"fts: {report.fts.describe()}")
        if report.fts.backfill_pending:
            print("finish the FTS backfill later with: hermes-store fts backfill")
    return 0


def _cmd_current(args: argparse.Namespace) -> int:
    status = migrate.current(args.url)
    if args.json:
        _print_json(status.as_dict())
        return 0
    print(f"database:        {status.url} ({status.kind})")
    print(f"revision:        {status.alembic_revision or 'none'} (head {status.head})")
    print(f"schema_version:  {status.schema_version}")
    if status.kind == "legacy":
        print(
            f"adopt at:        revision {status.stamp_revision:04d}"
            if status.stamp_revision
            else "adopt at:        base (every revision runs)"
        )
    if status.fts is not None:
        print(f"fts:             {status.fts.describe()}")
    return 0


def _cmd_check(args: argparse.Namespace) -> int:
    report = migrate.check(args.url)
    if args.json:
        _print_json(
            {
                "ok": report.ok,
                "status": report.status.as_dict(),
                "quick_check": report.quick_check,
                "fts_errors": report.fts_errors,
                "schema_drift": report.schema_drift,
                "tolerated_differences": report.tolerated,
            }
        )
    else:
        print(
            f"at head:       {'yes' if report.status.at_head else 'no (run hermes-store upgrade)'}"
        )
        print(f"quick_check:   {'; '.join(report.quick_check)}")
        print(f"fts integrity: {'ok' if not report.fts_errors else '; '.join(report.fts_errors)}")
        print(f"schema drift:  {'none' if not report.schema_drift else len(report.schema_drift)}")
        for line in report.schema_drift:
            print(f"  {line}")
        if report.tolerated:
            print(
                f"kept as found: {len(report.tolerated)} extra column(s)/index(es) or legacy"
                " declarations the original wrote (not errors)"
            )
    return 0 if report.ok else 1


def _cmd_fts(args: argparse.Namespace) -> int:
    if args.fts_command == "rebuild":
        migrate.rebuild_fts(args.url)
        print("fts: rebuilt both indexes")
        return 0
    with _progress_bar("FTS backfill") as progress:
        migrate.finish_fts(args.url, on_progress=progress)
    print(f"fts: {migrate.current(args.url).fts.describe()}")  # type: ignore[union-attr]
    return 0


def _cmd_search(args: argparse.Namespace) -> int:
    from .search import search_messages

    engine = migrate.open_engine_at_head(args.url)
    try:
        with engine.connect() as conn:
            hits = search_messages(
                conn,
                args.query,
                source_filter=args.source,
                role_filter=args.role,
                limit=args.limit,
            )
    finally:
        engine.dispose()
    if args.json:
        _print_json(hits)
        return 0
    for hit in hits:
        snippet = " ".join(str(hit["snippet"] or "").split())
        print(f"{hit['session_id']}  #{hit['id']}  {hit['role']:<9} {snippet}")
    if not hits:
        print("no matches")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="hermes-store", description="Hermes Agent session store: migrations and checks"
    )
    sub = parser.add_subparsers(dest="command", required=True)

    def with_url(p: argparse.ArgumentParser) -> argparse.ArgumentParser:
        p.add_argument(
            "--url",
            help="database URL or path (default: $HERMES_STORE_URL, else $HERMES_HOME/state.db)",
        )
        return p

    up = with_url(sub.add_parser("upgrade", help="create, adopt or upgrade the database"))
    up.add_argument(
        "--defer-fts-backfill",
        action="store_true",
        help="leave the chunked FTS backfill for `hermes-store fts backfill`",
    )
    up.set_defaults(func=_cmd_upgrade)

    cur = with_url(sub.add_parser("current", help="revision, schema_version and FTS state"))
    cur.add_argument("--json", action="store_true")
    cur.set_defaults(func=_cmd_current)

    chk = with_url(sub.add_parser("check", help="at head? quick_check, FTS integrity, drift"))
    chk.add_argument("--json", action="store_true")
    chk.set_defaults(func=_cmd_check)

    find = with_url(sub.add_parser("search", help="search message text"))
    find.add_argument("query")
    find.add_argument("--source", action="append", help="only this source (repeatable)")
    find.add_argument("--role", action="append", help="only this role (repeatable)")
    find.add_argument("--limit", type=int, default=20)
    find.add_argument("--json", action="store_true")
    find.set_defaults(func=_cmd_search)

    fts = sub.add_parser("fts", help="full-text index maintenance")
    fts_sub = fts.add_subparsers(dest="fts_command", required=True)
    with_url(fts_sub.add_parser("backfill", help="finish a pending chunked backfill"))
    with_url(fts_sub.add_parser("rebuild", help="rebuild both indexes from the messages"))
    fts.set_defaults(func=_cmd_fts)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return int(args.func(args))
    except StoreError as exc:
        print(f"hermes-store: error: {exc}", file=sys.stderr)
    except SQLAlchemyError as exc:
        detail = str(getattr(exc, "orig", None) or exc).splitlines()[0]
        print(f"hermes-store: error: database error: {detail}", file=sys.stderr)
    except OSError as exc:
        print(f"hermes-store: error: {exc}", file=sys.stderr)
    except KeyboardInterrupt:
        print("hermes-store: interrupted; run the same command again to resume", file=sys.stderr)
        return 130
    return 2


if __name__ == "__main__":
    sys.exit(main())
