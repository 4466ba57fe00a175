"""`upgrade`, `current` and `check`: the database's revision and health."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from ._args import _WAIT_HELP, _wait_arg, with_url
from ._output import _cell, _print_json, _printable, _progress_bar, _report_wait, _wait_every

if TYPE_CHECKING:
    from .. import migrate
    from ..search.layout import FTSState


def _revision_span(revisions: Sequence[str]) -> str:
    if not revisions:
        return "0 revisions applied"
    span = revisions[0] if len(revisions) == 1 else f"{revisions[0]}..{revisions[-1]}"
    return f"{len(revisions)} revision{'s' if len(revisions) > 1 else ''} applied ({span})"


def _fts_line(fts: FTSState, url: str | None) -> tuple[str, str]:
    """The search index's state, for `upgrade` and `current` (label, text): FTS5's layout
    and triggers on SQLite; on PostgreSQL, which has no FTS5 tables or triggers, what
    serves search there instead."""
    if fts.layout != "tsvector":
        return "fts", _cell(fts.describe())
    from ..contract import PG_SEARCH_VECTOR_COLUMN
    from ..search.index_method import describe_index_method

    return "search index", (
        f"messages.{PG_SEARCH_VECTOR_COLUMN} (a generated tsvector column; word index "
        f"{_cell(describe_index_method(url))}) and pg_trgm indexes for substrings, kept "
        "current by PostgreSQL itself (no FTS5 tables, triggers or backfill)"
    )


def _cmd_upgrade(args: argparse.Namespace) -> int:
    from .. import migrate
    from ..config import resolve_url, sqlite_path
    from ..runtime.engine import secure_file_modes
    from .revisions import upgrade_backup_line

    path = sqlite_path(resolve_url(args.url))
    new_directory = path is not None and not path.parent.is_dir()
    taken: list[str] = []

    def back_up() -> None:  # once the upgrade has looked: a refused file gets no copy
        line = upgrade_backup_line(args.url, skip=args.no_backup)
        taken.extend([] if line is None else [line])

    try:
        with _progress_bar("fts backfill") as progress:
            report = migrate.upgrade(
                args.url,
                defer_fts_backfill=args.defer_fts_backfill,
                on_progress=progress,
                wait=args.wait,
                on_wait=_report_wait,
                wait_report_every=_wait_every(),
                before_writing=back_up,
            )
    except BaseException:
        for line in taken:  # where the copy is, whatever stopped the upgrade
            print(line, flush=True)
        raise
    backup = taken[0] if taken else None
    if path is not None:
        # also a file already at head, which the upgrade did not write: this is the
        # command that sets a database up
        secure_file_modes(path)
    moved = f"revision {report.before or 'none'} -> {report.after}"
    location = _printable(report.location, lines=False)
    if report.migrated_by_other:
        print(
            f"{location} was upgraded by another process while this one waited for the "
            f"lock: {moved}; this process applied no revision"
        )
    elif report.created and path is not None:
        parent = _printable(str(path.parent), lines=False)
        directory = f" (and its directory {parent})" if new_directory else ""
        print(f"created a new database at {location}{directory}: {moved}")
    elif report.created:
        print(f"created the schema in the empty database {location}: {moved}")
    elif report.revisions or report.adopted_from is not None:
        adopted = (
            f" (adopted a Hermes database at schema_version {report.adopted_from})"
            if report.adopted_from is not None
            else ""
        )
        print(f"upgraded {location}: {moved}{adopted}")
    else:
        print(f"{location} is at head already: {moved}")
    if backup is not None:
        print(backup)
    if report.fts is not None:
        label, text = _fts_line(report.fts, args.url)
        print(f"{label}: {text}")
        if report.fts.backfill_pending:
            print(
                f"finish the FTS backfill later with: hermes-store fts backfill --url '{location}'"
            )
    parts = [_revision_span(report.revisions)]
    if report.backfill is not None:
        parts.append(f"{report.backfill.rows_indexed} messages indexed")
        if report.backfill.tables_removed:
            parts.append(f"{report.backfill.tables_removed} legacy FTS tables removed")
    elif args.defer_fts_backfill:
        parts.append("FTS backfill deferred")
    parts.append(f"{report.total_s:.1f} s")
    print(f"summary: {', '.join(parts)}")
    return 0


def _cmd_current(args: argparse.Namespace) -> int:
    from .. import migrate

    status = migrate.current(args.url)
    if args.json:
        _print_json(status.as_dict())
        return 0
    print(f"database:        {_printable(status.url, lines=False)} ({status.kind})")
    print(f"revision:        {status.alembic_revision or 'none'} (head {status.head})")
    print(f"schema_version:  {status.schema_version}")
    if status.kind == "legacy":
        print(
            f"adopt at:        revision {status.stamp_revision:04d}"
            if status.stamp_revision
            else "adopt at:        base (every revision runs)"
        )
    if status.kind in ("legacy", "managed"):
        readable = (
            "yes, as it is (read-only commands and Store(url, read_only=True))"
            if status.readable
            else "no: run hermes-store upgrade first"
        )
        print(f"readable:        {readable}")
    if status.fts is not None:
        label, text = _fts_line(status.fts, args.url)
        print(f"{label + ':':<17}{text}")
    return 0


def _drift_not_judged(status: migrate.Status) -> str | None:
    """Why drift against the models (head) cannot be judged, or None if it can. A file
    that is not at head differs from head by design, by whatever its upgrade adds
    (`current` lists it), and a file from the original is not compared at all: "none"
    would be a false all-clear."""
    if status.error is not None:
        return "not checked"
    if not status.head_shaped:
        return "not judged before the upgrade (run hermes-store upgrade, then check again)"
    return None


def _cmd_check(args: argparse.Namespace) -> int:
    from .. import migrate
    from ..search.index_method import describe_index_method

    report = migrate.check(args.url)
    not_judged = _drift_not_judged(report.status)
    if args.json:
        _print_json(
            {
                "ok": report.ok,
                "status": report.status.as_dict(),
                "quick_check": report.quick_check,
                "fts_errors": report.fts_errors,
                "schema_drift": None if not_judged else report.schema_drift,
                "tolerated_differences": report.tolerated,
                "errors": report.errors,
                "storage": None if report.storage is None else report.storage.as_dict(),
            }
        )
    else:
        if report.status.error is not None:
            at_head = "unknown (the schema cannot be read)"
        elif report.status.at_head:
            at_head = "yes"
        elif report.status.head_shaped:
            # what `current` and --json say too: not at head until adopted
            at_head = (
                f"no: revision none (head {report.status.head}), not adopted by "
                "hermes-store; schema_version 23 as Hermes wrote it, which the read "
                "commands read as it is (hermes-store upgrade adopts it for writing)"
            )
        else:
            at_head = "no (run hermes-store upgrade)"
        print(f"at head:       {at_head}")
        print(f"quick_check:   {_cell('; '.join(report.quick_check))}")
        unread = report.status.error is not None
        fts = "ok" if not report.fts_errors else _cell("; ".join(report.fts_errors))
        drift = not_judged or (str(len(report.schema_drift)) if report.schema_drift else "none")
        print(f"fts integrity: {'not checked' if unread else fts}")
        print(f"schema drift:  {drift}")
        for line in [] if not_judged else report.schema_drift:
            print(f"  {_cell(line)}")
        missing = [name for names in report.status.missing.values() for name in names]
        if missing:
            print(f"missing:       {len(missing)} (the upgrade adds them)")
            for name in missing:
                print(f"  {_cell(name)}")
        if report.tolerated:
            print(
                f"kept as found: {len(report.tolerated)} extra column(s)/index(es) or legacy"
                " declarations the original wrote (not errors)"
            )
        for line in report.errors:
            print(f"error:         {_cell(line)}")
        print(f"search index:  {_cell(describe_index_method(args.url))}")
        if report.storage is not None:
            storage = report.storage
            driver = f"{storage.driver} {storage.sqlite_version}"
            print(f"sqlite:        {driver} ({storage.driver_reason})")
            mode = storage.journal_mode
            if storage.journal_mode_on_write != mode:
                mode += f", {storage.journal_mode_on_write} from the next write on"
            print(f"journal mode:  {mode} ({storage.journal_reason})")
            print(f"encrypted:     {storage.encrypted}")
    return 0 if report.ok else 1


def add_parsers(sub: Any) -> None:
    up = with_url(sub.add_parser("upgrade", help="create, adopt or upgrade the database"))
    up.add_argument(
        "--defer-fts-backfill",
        action="store_true",
        help="leave the chunked FTS backfill for `hermes-store fts backfill`",
    )
    up.add_argument("--wait", type=_wait_arg, default=20.0, metavar="SECONDS", help=_WAIT_HELP)
    up.add_argument(
        "--no-backup",
        action="store_true",
        help="do not back up an existing SQLite file before changing it",
    )
    up.set_defaults(func=_cmd_upgrade)

    cur = with_url(sub.add_parser("current", help="revision, schema_version and FTS state"))
    cur.add_argument("--json", action="store_true")
    cur.set_defaults(func=_cmd_current)

    chk = with_url(sub.add_parser("check", help="at head? quick_check, FTS integrity, drift"))
    chk.add_argument("--json", action="store_true")
    chk.set_defaults(func=_cmd_check)
