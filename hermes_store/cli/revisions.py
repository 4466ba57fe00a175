"""`history` and `downgrade`: the revision chain and how far back a database may go; and
the backup `upgrade` and `downgrade` take before they change an SQLite file."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import InvalidInput, MigrationError
from ._args import with_url
from ._output import _cell, _print_json, _print_table, _printable

if TYPE_CHECKING:
    from .. import migrate


def _chain() -> list[tuple[str, str]]:
    """(revision, description) of every revision, oldest first: the order they apply."""
    from alembic.script import ScriptDirectory

    from .. import migrate

    script = ScriptDirectory.from_config(migrate.make_config())
    found = [(str(s.revision), " ".join(str(s.doc or "").split())) for s in script.walk_revisions()]
    return list(reversed(found))


def _floor() -> str:
    """The lowest revision `downgrade` takes a database to: the upstream head (0023).
    Below it the revisions replay the original Hermes code's own schema versions; a file
    the original wrote was adopted at one of them, so the revisions up to there never ran
    on it, and what they would undo is the original's schema and data. hermes-store does
    not record whether it created a database or adopted one (at head the two are the same
    by design), so the floor holds for every database."""
    from ..migration.head import UPSTREAM_HEAD_REVISION

    return UPSTREAM_HEAD_REVISION


def _floor_reason(target: str) -> str:
    floor = _floor()
    return (
        f"refusing to downgrade to {target}: {floor} (the upstream head) is as far back as "
        f"hermes-store downgrade goes. Revisions up to {floor} replay the original Hermes "
        "code's own schema versions; a state.db the original wrote was adopted at one of "
        "them, so they never ran on it, and undoing them would lower schema_version below "
        "23 and drop columns, tables and the FTS layout the original needs (it has no "
        "downgrade, and would migrate the file again on its next open). hermes-store cannot "
        "tell a database it created from one it adopted, so this holds for every database; "
        "nothing was changed"
    )


def _missing(path: Path | None) -> bool:
    return path is not None and (not path.exists() or path.stat().st_size == 0)


def _status(url: str | None) -> migrate.Status | None:
    """The database's status, or None when there is no database file yet."""
    from .. import migrate
    from ..config import resolve_url, sqlite_path

    if _missing(sqlite_path(resolve_url(url))):
        return None
    return migrate.current(url)


def _cmd_history(args: argparse.Namespace) -> int:
    from ..migration.head import HEAD_REVISION

    status = _status(args.url)
    chain = _chain()
    current = status.alembic_revision if status is not None else None
    adopt_at = None
    if status is not None and status.kind == "legacy":
        from ..migration.adoption import revision_id

        adopt_at = revision_id(status.stamp_revision or 0)
    floor = _floor()
    if args.json:
        _print_json(
            {
                "database": None if status is None else status.url,
                "kind": "missing" if status is None else status.kind,
                "current": current,
                "head": HEAD_REVISION,
                "adopt_at": adopt_at,
                "downgrade_floor": floor,
                "revisions": [
                    {
                        "revision": rev,
                        "description": doc,
                        "current": rev == current,
                        "head": rev == HEAD_REVISION,
                    }
                    for rev, doc in chain
                ],
            }
        )
        return 0
    if status is None:
        print("database: none yet (hermes-store upgrade creates it at the head)")
    else:
        where = _printable(status.url, lines=False)
        print(f"database: {where} ({status.kind}), revision {current or 'none'}")
    rows = []
    for rev, doc in chain:
        notes = []
        if rev == current:
            notes.append("current")
        if rev == HEAD_REVISION:
            notes.append("head")
        if rev == adopt_at:
            notes.append("upgrade adopts this file here")
        if rev == floor:
            notes.append("downgrade goes no lower")
        mark = "*" if rev == current else ""
        shown = f"[{', '.join(notes)}] {doc}" if notes else doc
        rows.append((mark, rev, _cell(shown, 100)))
    _print_table(("", "REVISION", "DESCRIPTION (oldest first; * current)"), rows)
    return 0


def _cmd_downgrade(args: argparse.Namespace) -> int:
    from .. import migrate
    from ..config import resolve_url, sqlite_path

    target = args.revision
    order = [rev for rev, _doc in _chain()]
    if target not in order and target != "base":
        raise InvalidInput(f"unknown revision {target!r}; hermes-store history lists the revisions")
    status = _status(args.url)
    if status is None or status.kind == "empty":
        raise MigrationError("there is no hermes-store database to downgrade here")
    path = sqlite_path(resolve_url(args.url))
    where = _printable(str(path) if path is not None else status.url, lines=False)
    if status.alembic_revision is None:
        raise MigrationError(
            f"{where} was written by the original Hermes code (schema_version "
            f"{status.schema_version}) and hermes-store has not adopted it: there is nothing "
            "of hermes-store's to undo, and the original's own versions are not downgraded; "
            "nothing was changed"
        )
    now = status.alembic_revision
    if target == now:
        print(f"{where} is at revision {now} already: nothing to do")
        return 0
    if target != "base" and order.index(target) > order.index(now):
        raise MigrationError(
            f"{target} is not below the current revision {now}; go up with hermes-store "
            "upgrade; nothing was changed"
        )
    if target == "base" or order.index(target) < order.index(_floor()):
        raise MigrationError(_floor_reason(target))
    print(backup_line(path, now, skip=args.no_backup, what="downgrade"))
    migrate.downgrade(args.url, target)
    undone = list(reversed(order[order.index(target) + 1 : order.index(now) + 1]))
    print(f"downgraded {where}: revision {now} -> {target} (undid {', '.join(undone)})")
    print("hermes-store serves a database at the head only: hermes-store upgrade brings it back")
    return 0


def backup_line(path: Path | None, label: str, *, skip: bool, what: str) -> str:
    """Back up the SQLite file `path` before `what` changes it (unless `skip`), and the
    line that says where the backup is, or why there is none."""
    if path is None:
        return "backup: none (PostgreSQL: hermes-store backs up SQLite files only; use pg_dump)"
    if _missing(path):
        return "backup: none (a new database)"
    if skip:
        return "backup: none (--no-backup)"
    from ..runtime.engine import check_writable
    from ..sqlite.backup import backup_sqlite

    check_writable(path)  # a file the command cannot change gets its refusal, not a copy

    made = backup_sqlite(path, label)
    shown = _printable(str(made), lines=False)
    return f"backup: {shown} (the database before this {what}, mode 0600)"


def upgrade_backup_line(url: str | None, *, skip: bool) -> str | None:
    """`upgrade`'s backup: only when the upgrade will change an existing SQLite file (not
    at the head, or FTS work left); None when the database cannot even be looked at, which
    the upgrade then reports."""
    from .. import migrate
    from ..config import resolve_url, sqlite_path
    from ..errors import StoreError
    from ..runtime.engine import check_writable

    path = sqlite_path(resolve_url(url))
    if path is None or _missing(path) or skip:
        return backup_line(path, "", skip=skip, what="upgrade")
    try:
        check_writable(path)
        status = migrate.current(url)
    except StoreError:
        return None  # the upgrade refuses it, saying why
    fts = status.fts
    if status.at_head and (fts is None or not (fts.backfill_pending or fts.trash_tables)):
        return "backup: none (at the head already: nothing to change)"
    label = status.alembic_revision or f"v{status.schema_version or 0}"
    return backup_line(path, label, skip=False, what="upgrade")


def add_parsers(sub: Any) -> None:
    hist = with_url(
        sub.add_parser("history", help="the revisions, oldest first, and the database's current")
    )
    hist.add_argument("--json", action="store_true")
    hist.set_defaults(func=_cmd_history)

    down = with_url(
        sub.add_parser("downgrade", help="take the database back to an earlier revision")
    )
    down.add_argument("revision", metavar="REVISION", help="the revision to go back to")
    down.add_argument(
        "--no-backup",
        action="store_true",
        help="do not back up the SQLite file first",
    )
    down.set_defaults(func=_cmd_downgrade)
