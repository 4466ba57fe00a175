"""`sessions list|show|export|import|prune|delete|restore|trash|tag`."""

from __future__ import annotations

import argparse
import json
import os
import stat
import sys
import tempfile
import textwrap
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from ..errors import (
    AmbiguousSessionPrefix,
    InvalidInput,
    SchemaBehind,
    SessionNotFound,
    StoreError,
)
from ._args import _WAIT_HELP, _count_arg, _days_arg, _open_store, _wait_arg, with_formats, with_url
from ._output import (
    _cell,
    _count_bar,
    _iso,
    _iso_times,
    _json_default,
    _JSONOut,
    _money,
    _num,
    _print_csv,
    _print_json,
    _print_table,
    _printable,
    _usd,
    _when,
)

if TYPE_CHECKING:
    from ..store import Store


DAY = 86400.0
#: `sessions delete --keep-days`' default (TrashRepository's own).
DEFAULT_KEEP_DAYS = 30.0


PREFIX_MATCHES_SHOWN = 5


def _resolve(store: Store, id_or_prefix: str) -> str:
    """An exact id, else the one id that starts with the prefix (read-only commands);
    SessionNotFound, or AmbiguousSessionPrefix naming the first sessions it matches in
    the repository's prefix order (id order)."""
    from ..repositories.sessions import SessionRepository

    sessions = SessionRepository(store)
    found = sessions.resolve_session_id(id_or_prefix)
    if found is not None:
        return found
    matches = sessions.session_ids_with_prefix(id_or_prefix, PREFIX_MATCHES_SHOWN + 1)
    if len(matches) > 1:
        raise AmbiguousSessionPrefix(
            id_or_prefix,
            matches[:PREFIX_MATCHES_SHOWN],
            more=len(matches) > PREFIX_MATCHES_SHOWN,
        )
    raise SessionNotFound(id_or_prefix)


#: `sessions list --json/--csv`: the fields of a listed session, in this order
_LIST_FIELDS = ("id", "source", "title", "started_at", "message_count", "preview")


def _cmd_sessions_list(args: argparse.Namespace) -> int:
    from ..repositories.sessions import SessionRepository

    with _open_store(args.url) as store:
        rows = SessionRepository(store).list_sessions_rich(
            source=args.source,
            limit=args.limit or None,
            include_delegates=args.include_delegates,
            tags=args.tag,
        )
    listed = [
        {
            "id": r["id"],
            "source": r.get("source"),
            "title": r.get("title"),
            "started_at": _iso(r.get("started_at")),
            "message_count": int(r.get("message_count") or 0),
            "preview": r.get("preview") or "",
        }
        for r in rows
    ]
    if args.json:
        _print_json(listed)
        return 0
    if args.csv:
        _print_csv(listed, _LIST_FIELDS)
        return 0
    if not listed:
        print("no sessions")
        return 0
    _print_table(
        ("ID", "STARTED (UTC)", "SOURCE", "MSGS", "TITLE", "PREVIEW"),
        [
            (
                _cell(r["id"]),
                _when(row.get("started_at")),
                _cell(r["source"]),
                _num(r["message_count"]),
                _cell(r["title"], 32),
                _cell(r["preview"], 60),
            )
            for r, row in zip(listed, rows, strict=True)
        ],
        right=(3,),
    )
    return 0


def _content_text(content: Any) -> str:
    """Decoded message content as text: strings as they are, the text parts of a
    multimodal list, `[image_url]`-style markers for other parts, JSON otherwise."""
    if content is None:
        return ""
    if isinstance(content, bytes):
        return content.decode("utf-8", "replace")
    if isinstance(content, str):
        return content
    parts = content if isinstance(content, list) else [content]
    shown = []
    for part in parts:
        if isinstance(part, dict) and isinstance(part.get("text"), str):
            shown.append(part["text"])
        elif isinstance(part, dict) and "type" in part:
            shown.append(f"[{part['type']}]")
        else:
            shown.append(json.dumps(part, ensure_ascii=False, default=_json_default))
    return "\n".join(shown)


def _tool_call_names(tool_calls: Any) -> list[str]:
    if not tool_calls:
        return []
    names = []
    for call in tool_calls if isinstance(tool_calls, list) else [tool_calls]:
        function = call.get("function") if isinstance(call, dict) else None
        name = function.get("name") if isinstance(function, dict) else None
        if name is None and isinstance(call, dict):
            name = call.get("name")
        names.append(str(name or "?"))
    return names


def _cmd_sessions_show(args: argparse.Namespace) -> int:
    from ..repositories.messages import MessageRepository
    from ..repositories.sessions import SessionRepository

    with _open_store(args.url) as store:
        session_id = _resolve(store, args.id)
        row = SessionRepository(store).get_session(session_id)
        if row is None:
            raise SessionNotFound(args.id)
        messages = MessageRepository(store).get_messages(session_id)
    if args.json:
        _print_json(
            {
                "session": _money(_iso_times(row)),
                "messages": [
                    {
                        "id": m.get("id"),
                        "role": m.get("role"),
                        "content": m.get("content"),
                        "tool_call_id": m.get("tool_call_id"),
                        "tool_name": m.get("tool_name"),
                        "tool_calls": m.get("tool_calls"),
                        "timestamp": _iso(m.get("timestamp")),
                    }
                    for m in messages
                ],
            }
        )
        return 0
    ended = (
        f"{_when(row.get('ended_at'))} ({row.get('end_reason') or 'no reason'})"
        if row.get("ended_at") is not None
        else "open"
    )
    cost = row.get("actual_cost_usd") or row.get("estimated_cost_usd")
    for label, value in (
        ("session", row["id"]),
        ("title", row.get("title") or ""),
        ("source", row.get("source")),
        ("model", row.get("model") or ""),
        ("started", _when(row.get("started_at")) + " UTC"),
        ("ended", ended),
        ("parent", row.get("parent_session_id") or ""),
        ("messages", f"{len(messages)} active ({_num(row.get('message_count'))} counted)"),
        (
            "tokens",
            f"input {_num(row.get('input_tokens'))}, output {_num(row.get('output_tokens'))}, "
            f"cache read {_num(row.get('cache_read_tokens'))}, "
            f"cache write {_num(row.get('cache_write_tokens'))}, "
            f"reasoning {_num(row.get('reasoning_tokens'))}",
        ),
        ("cost", _usd(cost) if cost is not None else "unknown"),
    ):
        print(f"{label + ':':<10} {_cell(value)}")
    for m in messages:
        tool = f" {_cell(m['tool_name'])}" if m.get("tool_name") else ""
        print(f"\n#{m.get('id')}  {_when(m.get('timestamp'))}  {_cell(m.get('role'))}{tool}")
        text = _content_text(m.get("content"))
        if text:
            print(textwrap.indent(_printable(text), "    ", lambda _line: True))
        for name in _tool_call_names(m.get("tool_calls")):
            print(f"    -> tool call: {_cell(name)}")
    return 0


@contextmanager
def _output(target: str | None) -> Iterator[TextIO]:
    """stdout for None or `-`; a FIFO or a character device (a pipe someone reads,
    /dev/null, a terminal) opened and written as a stream, never replaced; else a file
    that appears, complete, only on success (it is written next to the target and
    renamed; mode 0600, as exports hold conversations). Other special files (a block
    device, a socket, a directory) are refused with InvalidInput."""
    if target is None or target == "-":
        yield sys.stdout
        sys.stdout.flush()
        return
    path = Path(target)
    try:
        mode: int | None = path.stat().st_mode
    except FileNotFoundError:
        mode = None
    if mode is not None and not stat.S_ISREG(mode):
        with _stream(path, mode) as fp:
            yield fp
        return
    directory = path.parent
    if not directory.is_dir():
        raise OSError(f"cannot write {path}: directory {directory} does not exist")
    fd, partial = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".part", dir=directory)
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="\n") as fp:
            yield fp
        os.replace(partial, path)
    except BaseException:
        with suppress(OSError):
            os.unlink(partial)
        raise


def _special_kind(mode: int) -> str:
    if stat.S_ISDIR(mode):
        return "a directory"
    if stat.S_ISBLK(mode):
        return "a block device"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "not a regular file"


@contextmanager
def _stream(path: Path, mode: int) -> Iterator[TextIO]:
    """`path`, a FIFO or a character device, opened for writing as it is: no temporary
    file, no rename, no truncation (a rename would put a regular file in its place)."""
    if not (stat.S_ISFIFO(mode) or stat.S_ISCHR(mode)):
        raise InvalidInput(
            f"cannot write the export to {path}: it is {_special_kind(mode)}; give a regular "
            "file (written whole, then renamed into place), a FIFO or a character device"
        )
    # a FIFO blocks here until someone opens it for reading, as `cat > FIFO` does
    fd = os.open(path, os.O_WRONLY | os.O_NOCTTY)
    try:
        opened = os.fstat(fd).st_mode
        if stat.S_IFMT(opened) != stat.S_IFMT(mode):
            raise InvalidInput(f"cannot write the export to {path}: it was replaced meanwhile")
    except BaseException:
        os.close(fd)
        raise
    with os.fdopen(fd, "w", encoding="utf-8", newline="\n") as fp:
        yield fp


def _dumps(session: Any, indent: int | None) -> str:
    return json.dumps(session, indent=indent, ensure_ascii=False, default=_json_default)


def _write_sessions(
    fp: _JSONOut, sessions: Iterable[dict[str, Any]], fmt: str, *, single: bool
) -> int:
    """JSONL (one session per line), one JSON object, or a JSON list written item by item
    (memory stays at one session either way)."""
    if fmt == "jsonl":
        from ..repositories.maintenance import MaintenanceRepository

        return MaintenanceRepository.write_jsonl(fp, sessions)
    count = 0
    if single:
        for session in sessions:
            fp.write(_dumps(session, 2) + "\n")
            count += 1
        return count
    fp.write("[")
    for session in sessions:
        fp.write(("\n" if count == 0 else ",\n") + textwrap.indent(_dumps(session, 2), "  "))
        count += 1
    fp.write("\n]\n" if count else "]\n")
    return count


def _counting(items: Iterable[dict[str, Any]], advance: Callable[[int], Any]) -> Iterator[Any]:
    for item in items:
        yield item
        advance(1)


def _cmd_sessions_export(args: argparse.Namespace) -> int:
    from ..repositories.maintenance import MaintenanceRepository
    from ..repositories.sessions import SessionRepository

    fmt = args.format or ("json" if args.id is not None else "jsonl")
    with _open_store(args.url) as store:
        repo = MaintenanceRepository(store)
        if args.id is not None:
            exported = repo.export_session(_resolve(store, args.id))
            if exported is None:
                raise SessionNotFound(args.id)
            with _output(args.output) as fp:
                count = _write_sessions(_JSONOut(fp), [exported], fmt, single=True)
        else:
            total = SessionRepository(store).session_count(include_archived=True)
            with _output(args.output) as fp, _count_bar("export", total, "session") as advance:
                count = _write_sessions(
                    _JSONOut(fp), _counting(repo.export_all(), advance), fmt, single=False
                )
    if args.output not in (None, "-"):
        print(f"exported {count} session(s) to {_printable(args.output, lines=False)}")
    return 0


def _cmd_sessions_import(args: argparse.Namespace) -> int:
    from ..repositories.maintenance import ImportSource, MaintenanceRepository

    path = Path(args.file)
    with _open_store(args.url, write=True) as store, path.open("rb") as fp:
        source = ImportSource.from_file(fp, str(path))
        with _count_bar("import", len(source), "session") as advance:
            report = MaintenanceRepository(store).import_each(source, progress=advance)
    if args.json:
        _print_json(report.as_dict())
        return 0 if report.ok else 1
    print(f"imported {report.imported} session(s), skipped {report.skipped} already present")
    if report.detached:
        print(
            f"{report.detached} parent link(s) dropped: the parent is neither in the database"
            " nor in the file, or the link would make a cycle"
        )
    if report.errors:
        print(f"{len(report.errors)} entr{'y' if len(report.errors) == 1 else 'ies'} not imported:")
        for problem in report.errors:
            sid = f" (session {problem['session_id']})" if "session_id" in problem else ""
            print(_printable(f"  {problem['entry']}{sid}: {problem['error']}"))
        print("fix them and run the import again (sessions already imported are skipped)")
        return 1
    return 0


#: Sessions per prune_sessions call, so the prune's progress bar can move.
PRUNE_STEP = 1000


def _cmd_sessions_prune(args: argparse.Namespace) -> int:
    from ..repositories.maintenance import MaintenanceRepository
    from ..repositories.pruning import prune_bounds
    from ..repositories.trash import TrashRepository

    cutoff = time.time() - args.older_than * DAY
    deleting = args.yes and not args.dry_run
    with _open_store(args.url, write=deleting, wait=args.wait) as store:
        repo = MaintenanceRepository(store)
        candidates = repo.list_prune_candidates(source=args.source, last_active_before=cutoff)
        if args.dry_run:
            _print_prune_candidates(candidates, args.json)
            if args.source is None and not args.json:
                expired = _expired_trash(TrashRepository(store))
                if expired:
                    print(f"and {expired} trash entr{'y' if expired == 1 else 'ies'} past "
                          "their time would be emptied")  # fmt: skip
            return 0
        if not args.yes:
            raise StoreError(
                f"this deletes {len(candidates)} ended session(s) inactive for more than "
                f"{args.older_than:g} day(s) with their messages; add --yes to delete them "
                "(--dry-run lists them)"
            )
        deleted = 0
        with _count_bar("prune", len(candidates), "session") as advance:
            for bound in prune_bounds(candidates, cutoff, PRUNE_STEP):
                count = repo.prune_sessions(None, args.source, last_active_before=bound)
                deleted += count
                advance(count)
        # the trash's entries are emptied by time alone; with --source the prune is about
        # one source's sessions, so the trash is left to `sessions trash --expired`
        emptied = 0
        if args.source is None:
            emptied = TrashRepository(store).empty_trash(expired_only=True)
    if args.json:
        _print_json({"deleted": deleted, "trash_emptied": emptied})
    else:
        print(f"deleted {deleted} session(s)")
        if emptied:
            print(f"emptied {emptied} trash entr{'y' if emptied == 1 else 'ies'} past their time")
    return 0


def _expired_trash(trash: Any) -> int:
    """The trash entries past their time; 0 for a file read as it is that has no trash
    yet (below revision hs0007: a dry run changes nothing and asks for no upgrade)."""
    moment = time.time()
    try:
        entries = trash.list_trash()
    except SchemaBehind:
        return 0
    return sum(1 for entry in entries if entry.expires_at <= moment)


def _print_prune_candidates(candidates: Sequence[dict[str, Any]], as_json: bool) -> None:
    if as_json:
        _print_json([_iso_times(c) for c in candidates])
        return
    if candidates:
        _print_table(
            ("ID", "LAST ACTIVE (UTC)", "SOURCE", "MSGS", "TITLE"),
            [
                (
                    _cell(c["id"]),
                    _when(c.get("last_active")),
                    _cell(c.get("source")),
                    _num(c.get("message_count")),
                    _cell(c.get("title"), 40),
                )
                for c in candidates
            ],
            right=(3,),
        )
    print(f"{len(candidates)} session(s) would be deleted (dry run: nothing was changed)")


def _cmd_sessions_delete(args: argparse.Namespace) -> int:
    from ..repositories.maintenance import MaintenanceRepository
    from ..repositories.sessions import SessionRepository
    from ..repositories.trash import TrashRepository
    from ..repositories.trash import tree as trash_tree

    with _open_store(args.url, write=args.yes) as store:
        if args.permanent:
            targets = SessionRepository(store).get_session_delete_targets(args.id)
            if not targets:
                raise SessionNotFound(args.id)
            delegates = len(targets) - 1
            what = f"session {args.id}" + (f" and {delegates} delegate run(s)" if delegates else "")
            if not args.yes:
                raise StoreError(
                    f"this deletes {what} with their messages for good; add --yes to delete"
                )
            if not MaintenanceRepository(store).delete_session(args.id):
                raise SessionNotFound(args.id)
            if args.json:
                _print_json({"deleted": sorted(targets)})
            else:
                print(f"deleted {_printable(what, lines=False)}")
            return 0
        if not args.yes:
            if SessionRepository(store).get_session(args.id) is None:
                raise SessionNotFound(args.id)
            others = len(store.read(lambda conn: trash_tree(conn, args.id))) - 1
            what = f"session {args.id}" + (f" and {others} descendant session(s)" if others else "")
            raise StoreError(
                f"this moves {what} with their messages to the trash for "
                f"{args.keep_days:g} day(s), where they are kept until then; add --yes to "
                "move them (--permanent deletes for good, as the original does)"
            )
        entry = TrashRepository(store).trash_session(args.id, keep_days=args.keep_days)
    if args.json:
        _print_json(_iso_times(entry.as_dict()))
        return 0
    others = entry.sessions - 1
    what = f"session {args.id}" + (f" and {others} descendant session(s)" if others else "")
    print(
        f"moved {_printable(what, lines=False)} ({entry.messages} message(s)) to the trash "
        f"until {_when(entry.expires_at)} UTC; "
        f"`hermes-store sessions restore {_printable(args.id, lines=False)}` brings it back"
    )
    return 0


def _cmd_sessions_restore(args: argparse.Namespace) -> int:
    from ..repositories.trash import TrashRepository

    with _open_store(args.url, write=True) as store:
        report = TrashRepository(store).restore_session(args.id)
    if args.json:
        _print_json(report.as_dict())
        return 0
    print(
        f"restored {len(report.sessions)} session(s) with {report.messages} message(s): "
        + _printable(", ".join(report.sessions), lines=False)
    )
    for sid, title in report.retitled.items():
        print(_printable(f"  {sid}: its title was taken meanwhile; now titled {title!r}"))
    if report.detached_from is not None:
        print(
            _printable(
                f"  {report.session_id}: its parent {report.detached_from} is gone; "
                "restored as a root session"
            )
        )
    for chat, thread in report.topic_bindings_skipped:
        print(
            _printable(
                f"  Telegram topic {chat}/{thread}: another session is bound to it now; "
                "its binding was not restored"
            )
        )
    return 0


def _cmd_sessions_trash(args: argparse.Namespace) -> int:
    from ..repositories.trash import TrashRepository

    emptying = args.empty or args.expired
    with _open_store(args.url, write=emptying and args.yes) as store:
        trash = TrashRepository(store)
        if emptying:
            if not args.yes:
                which = "past their time" if args.expired else "all"
                raise StoreError(
                    f"this deletes trashed sessions ({which}) for good; add --yes to empty"
                )
            emptied = trash.empty_trash(expired_only=args.expired)
            if args.json:
                _print_json({"emptied": emptied})
            else:
                print(f"emptied {emptied} trash entr{'y' if emptied == 1 else 'ies'}")
            return 0
        entries = trash.list_trash()
    if args.json:
        _print_json([_iso_times(e.as_dict()) for e in entries])
        return 0
    if not entries:
        print("the trash is empty")
        return 0
    _print_table(
        ("SESSION", "TRASHED (UTC)", "EXPIRES (UTC)", "SESSIONS", "MSGS", "SOURCE", "TITLE"),
        [
            (
                _cell(e.session_id),
                _when(e.trashed_at),
                _when(e.expires_at),
                _num(e.sessions),
                _num(e.messages),
                _cell(e.source),
                _cell(e.title, 32),
            )
            for e in entries
        ],
        right=(3, 4),
    )
    return 0


def _cmd_sessions_tag(args: argparse.Namespace) -> int:
    from ..repositories.tags import TagRepository

    writing = args.action in ("add", "remove", "set")
    if args.action in ("add", "remove") and not args.tags:
        raise InvalidInput(f"`sessions tag ID {args.action}` needs at least one TAG")
    if args.action == "list" and args.tags:
        raise InvalidInput("`sessions tag ID list` takes no TAG (add, remove or set do)")
    with _open_store(args.url, write=writing) as store:
        tags = TagRepository(store)
        if args.action == "add":
            result = tags.add_tags(args.id, args.tags)
        elif args.action == "remove":
            result = tags.remove_tags(args.id, args.tags)
        elif args.action == "set":
            result = tags.set_tags(args.id, args.tags)
        else:
            result = tags.get_tags(args.id)
    if args.json:
        _print_json({"session_id": args.id, "tags": result})
    elif result:
        for tag in result:
            print(_printable(tag, lines=False))
    else:
        print("no tags")
    return 0


def add_parsers(sub: Any) -> None:
    ses = sub.add_parser(
        "sessions",
        help="list, show, export, import, prune, delete (to the trash), restore and tag sessions",
    )
    ses_sub = ses.add_subparsers(dest="sessions_command", required=True)

    ls = with_url(ses_sub.add_parser("list", help="sessions, newest first"))
    ls.add_argument("--source", help="only sessions from this source (cli, telegram, ...)")
    ls.add_argument(
        "--limit", type=_count_arg, default=20, help="at most N sessions (default 20; 0: all)"
    )
    ls.add_argument(
        "--include-delegates",
        action="store_true",
        help="also list delegate runs, including untitled root sessions that migration "
        "0016 (like the original) tagged as orphaned delegate runs",
    )
    ls.add_argument(
        "--tag",
        action="append",
        metavar="TAG",
        help="only sessions carrying this tag (repeatable: every one of them)",
    )
    with_formats(ls)
    ls.set_defaults(func=_cmd_sessions_list)

    show = with_url(ses_sub.add_parser("show", help="a session and its messages"))
    show.add_argument("id", help="session id (or a unique prefix of one)")
    show.add_argument("--json", action="store_true")
    show.set_defaults(func=_cmd_sessions_show)

    exp = with_url(ses_sub.add_parser("export", help="one session (JSON) or every session (JSONL)"))
    exp.add_argument("id", nargs="?", help="session id (or a unique prefix); default: all")
    exp.add_argument("--output", "-o", metavar="FILE", help="write to FILE (default: stdout)")
    exp.add_argument(
        "--format",
        choices=("json", "jsonl"),
        help="json (default for one session; a list for all) or jsonl (default for all)",
    )
    exp.set_defaults(func=_cmd_sessions_export)

    imp = with_url(
        ses_sub.add_parser("import", help="import exported sessions (JSON list or JSONL)")
    )
    imp.add_argument("file", metavar="FILE")
    imp.add_argument("--json", action="store_true")
    imp.set_defaults(func=_cmd_sessions_import)

    prune = with_url(
        ses_sub.add_parser("prune", help="delete ended sessions inactive for DAYS days")
    )
    prune.add_argument("--older-than", metavar="DAYS", type=_days_arg, required=True)
    prune.add_argument("--source", help="only sessions from this source")
    prune.add_argument("--dry-run", action="store_true", help="list what would be deleted")
    prune.add_argument("--yes", action="store_true", help="really delete")
    prune.add_argument("--wait", type=_wait_arg, default=20.0, metavar="SECONDS", help=_WAIT_HELP)
    prune.add_argument("--json", action="store_true")
    prune.set_defaults(func=_cmd_sessions_prune)

    rm = with_url(
        ses_sub.add_parser(
            "delete", help="move a session and its child sessions to the trash (or delete)"
        )
    )
    rm.add_argument("id", help="the exact session id")
    rm.add_argument("--yes", action="store_true", help="really move (or delete)")
    rm.add_argument(
        "--keep-days",
        type=_days_arg,
        default=DEFAULT_KEEP_DAYS,
        metavar="DAYS",
        help=f"days in the trash before a prune may empty it (default {DEFAULT_KEEP_DAYS:g})",
    )
    rm.add_argument(
        "--permanent",
        action="store_true",
        help="delete for good instead (the session and its delegate runs; other children "
        "are kept and detached)",
    )
    rm.add_argument("--json", action="store_true")
    rm.set_defaults(func=_cmd_sessions_delete)

    rs = with_url(ses_sub.add_parser("restore", help="bring a trashed session back"))
    rs.add_argument("id", help="the exact id of the trashed session")
    rs.add_argument("--json", action="store_true")
    rs.set_defaults(func=_cmd_sessions_restore)

    tr = with_url(ses_sub.add_parser("trash", help="list the trash, or empty it"))
    tr.add_argument("--empty", action="store_true", help="delete every trashed session for good")
    tr.add_argument(
        "--expired", action="store_true", help="delete only the entries past their time"
    )
    tr.add_argument("--yes", action="store_true", help="really empty")
    tr.add_argument("--json", action="store_true")
    tr.set_defaults(func=_cmd_sessions_trash)

    tg = with_url(ses_sub.add_parser("tag", help="list, add, remove or set a session's tags"))
    tg.add_argument("id", help="the exact session id")
    tg.add_argument(
        "action",
        nargs="?",
        default="list",
        choices=("list", "add", "remove", "set"),
        help="list (default), add, remove, or set (replace them all)",
    )
    tg.add_argument("tags", nargs="*", metavar="TAG")
    tg.add_argument("--json", action="store_true")
    tg.set_defaults(func=_cmd_sessions_tag)
