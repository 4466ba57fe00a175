"""The `hermes-store` command: argument parsing, progress bars and output only; the work
happens in hermes_store.migrate and the repositories."""

from __future__ import annotations

import argparse
import json
import os
import stat
import sys
import tempfile
import textwrap
import time
import unicodedata
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager, suppress
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn, TextIO

from .errors import AmbiguousSessionPrefix, InvalidInput, SessionNotFound, StoreError

if TYPE_CHECKING:
    from . import migrate
    from .copy import CopyProgress
    from .search.maintenance import Progress
    from .store import Store
    from .waiting import Waiting

# Only the standard library and hermes_store.errors are imported up here: `--help` and a
# bad command line answer without importing SQLAlchemy, Alembic or the models (about 0.6 s
# on a slow machine). Each command imports what it uses.

DAY = 86400.0
#: Sessions per prune_sessions call, so the prune's progress bar can move.
PRUNE_STEP = 1000


#: Without a terminal (a deploy log, where tqdm shows nothing), a progress line when a
#: phase begins and then every this many seconds; HERMES_STORE_PROGRESS_EVERY overrides.
PROGRESS_EVERY_S = 10.0
PROGRESS_EVERY_ENV = "HERMES_STORE_PROGRESS_EVERY"


def _progress_every() -> float:
    try:
        return max(0.0, float(os.environ.get(PROGRESS_EVERY_ENV, PROGRESS_EVERY_S)))
    except ValueError:
        return PROGRESS_EVERY_S


class _ProgressLines:
    """The backfill's progress as plain lines on stderr, for logs: a line once a phase has
    run for the interval, then one per interval; a phase that ends sooner (every phase on
    a small file) prints none."""

    def __init__(self, label: str) -> None:
        self.label = label
        self.every = _progress_every()
        self.started = time.monotonic()
        self.last_line = self.started
        self.phase = ""
        self.phase_started = self.started
        self.last_call: float | None = None

    def __call__(self, progress: Progress) -> None:
        now = time.monotonic()
        previous, self.last_call = self.last_call, now
        if progress.total <= 0 or progress.phase == "done":
            return
        if progress.phase != self.phase:
            # reported after its first step: the phase began when the last one ended
            self.phase, self.phase_started = progress.phase, previous or now
            self.last_line = self.phase_started
        if now - self.last_line < self.every:
            return
        self.last_line = now
        if progress.phase == "backfill":
            name = self.label
            what = f"{progress.indexed}/{progress.total} ids ({progress.percent}%)"
        else:
            name = "fts teardown"
            what = f"{progress.indexed}/{progress.total} legacy FTS tables removed"
        print(f"{name}: {what} after {now - self.started:.1f} s", file=sys.stderr, flush=True)


@contextmanager
def _progress_bar(label: str) -> Iterator[Callable[[Progress], None]]:
    """On a terminal, a bar that appears only when the work takes more than two seconds;
    elsewhere, progress lines (`_ProgressLines`)."""
    if not sys.stderr.isatty():
        yield _ProgressLines(label)
        return
    from tqdm import tqdm

    bar: Any = None

    def update(progress: Progress) -> None:
        nonlocal bar
        if progress.total <= 0 or progress.phase != "backfill":
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


@contextmanager
def _count_bar(label: str, total: int | None, unit: str) -> Iterator[Callable[[int], Any]]:
    """A bar over a count of items, shown on a terminal after two seconds."""
    from tqdm import tqdm

    bar = tqdm(total=total, desc=label, unit=unit, delay=2.0, disable=None)
    try:
        yield bar.update
    finally:
        bar.close()


def _json_default(value: Any) -> Any:
    # Legacy files can hold BLOB content; show it as text, as write_jsonl does.
    if isinstance(value, bytes | bytearray | memoryview):
        return bytes(value).decode("utf-8", "replace")
    raise TypeError(f"Object of type {type(value).__name__} is not JSON serializable")


def _print_json(data: Any) -> None:
    text = json.dumps(data, indent=2, ensure_ascii=False, sort_keys=True, default=_json_default)
    print(_json_text(text))


def _revision_span(revisions: Sequence[str]) -> str:
    if not revisions:
        return "0 revisions applied"
    span = revisions[0] if len(revisions) == 1 else f"{revisions[0]}..{revisions[-1]}"
    return f"{len(revisions)} revision{'s' if len(revisions) > 1 else ''} applied ({span})"


#: Without HERMES_STORE_PROGRESS_EVERY, a line about a wait for a lock this often.
WAIT_EVERY_S = 5.0


def _wait_every() -> float:
    if PROGRESS_EVERY_ENV in os.environ:
        return _progress_every()
    return WAIT_EVERY_S


def _report_wait(waiting: Waiting) -> None:
    """A wait for another process's lock, as it happens: a line on stderr when it begins
    and every few seconds after."""
    place = _printable(waiting.place, lines=False)
    holders = _printable(waiting.holders, lines=False)
    if waiting.first:
        line = (
            f"another process holds {waiting.what} on {place} ({holders}); waiting for it "
            f"for up to {waiting.budget:g} s (--wait SECONDS changes that)"
        )
    else:
        line = (
            f"still waiting for {waiting.what} on {place}: {waiting.waited:.0f} s of "
            f"{waiting.budget:g} s ({holders})"
        )
    print(f"hermes-store: {line}", file=sys.stderr, flush=True)


def _cmd_upgrade(args: argparse.Namespace) -> int:
    from . import migrate
    from .config import resolve_url, sqlite_path
    from .engine import secure_file_modes

    path = sqlite_path(resolve_url(args.url))
    new_directory = path is not None and not path.parent.is_dir()
    with _progress_bar("fts backfill") as progress:
        report = migrate.upgrade(
            args.url,
            defer_fts_backfill=args.defer_fts_backfill,
            on_progress=progress,
            wait=args.wait,
            on_wait=_report_wait,
            wait_report_every=_wait_every(),
        )
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
    if report.fts is not None:
        print(f"fts: {_cell(report.fts.describe())}")
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
    from . import migrate

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
        print(f"fts:             {_cell(status.fts.describe())}")
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
    from . import migrate
    from .search.index_method import describe_index_method

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
            at_head = (
                "yes: schema_version 23 as Hermes wrote it, read as it is (hermes-store "
                "upgrade adopts it for writing with a Store)"
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
    return 0 if report.ok else 1


def _cmd_fts(args: argparse.Namespace) -> int:
    from . import migrate
    from .search.maintenance import BackfillStats

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


def _cmd_search(args: argparse.Namespace) -> int:
    from .repositories.search import SearchRepository

    # one read unit of the store: a PostgreSQL fault mid-search runs the search again
    with _open_store(args.url) as store:
        hits = SearchRepository(store).search_messages(
            args.query, source_filter=args.source, role_filter=args.role, limit=args.limit
        )
    if args.json:
        _print_json([_iso_times(hit) for hit in hits])
        return 0
    for hit in hits:
        session, role, snippet = _cell(hit["session_id"]), _cell(hit["role"]), _cell(hit["snippet"])
        print(f"{session}  #{hit['id']}  {role:<9} {snippet}")
    if not hits:
        print("no matches")
    return 0


# --------------------------------------------------------------------------- sessions, stats


@contextmanager
def _open_store(
    url: str | None, *, write: bool = False, wait: float | None = None
) -> Iterator[Store]:
    """The database at `url`, refused (with what to do) unless the repositories can serve
    it. The store makes its own pooled engine (an export reads once per session; a new
    connection each time costs twice as long). A command that only reads opens the file
    read-only, so it changes nothing (not its bytes, its mode, its journal mode, nor the
    -wal/-shm files it had) and works on a file it may not write and on a state.db the
    original v23 code wrote that hermes-store has not adopted; one that writes closes the
    store at the end (its TRUNCATE checkpoint). With `wait`, a write waits for another
    process's lock that long, saying so (`_report_wait`), then ends with LockTimeout."""
    from .config import resolve_url
    from .store import Store

    if wait is None or not write:
        store = Store(url, read_only=not write)
    else:
        from .migrate import lock_waiter
        from .waiting import WaitingRetry, shorten_pg_lock_waits

        waiter = lock_waiter(resolve_url(url), None, wait, _report_wait, every=_wait_every())
        store = Store(url, retry=WaitingRetry.for_waiter(waiter))
        shorten_pg_lock_waits(store.engine, min(waiter.every, 2.0))
        if waiter.find_holders is None:
            waiter.find_holders = _pg_holders(store)
    try:
        yield store
    finally:
        if write:
            store.close()
        else:
            store.engine.dispose()


def _pg_holders(store: Store) -> Callable[[], str]:
    from .waiting import pg_lock_holders

    return lambda: pg_lock_holders(store.engine, migration=False)


def _is_epoch(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _iso(value: Any) -> Any:
    """Epoch seconds as ISO 8601 in UTC with microseconds and the offset
    (`2026-12-02T13:43:33.034504+00:00`: what a float of epoch seconds holds, and read
    back by `datetime.fromisoformat`); anything else (None, a legacy oddity) as it is."""
    if not _is_epoch(value):
        return value
    try:
        return datetime.fromtimestamp(float(value), UTC).isoformat(timespec="microseconds")
    except (OverflowError, OSError, ValueError):
        return value


#: Fields that hold epoch seconds wherever a command prints them. Every `--json` output
#: shows them as ISO 8601 in UTC with microseconds (`_iso`); tables show them to the
#: second; `sessions export` alone keeps the stored epoch seconds, because `sessions
#: import` reads them back.
TIME_FIELDS = frozenset(
    {
        "started_at",
        "ended_at",
        "timestamp",
        "session_started",
        "last_active",
        "compression_failure_cooldown_until",
        "first_seen",
        "last_seen",
    }
)


def _iso_times(record: dict[str, Any]) -> dict[str, Any]:
    """`record` with its TIME_FIELDS as ISO 8601 (UTC)."""
    return {k: _iso(v) if k in TIME_FIELDS else v for k, v in record.items()}


def _when(value: Any) -> str:
    """Epoch seconds for a table: `YYYY-MM-DD HH:MM:SS` (UTC)."""
    shown = _iso(value)
    if isinstance(shown, str) and _is_epoch(value):
        return shown[:19].replace("T", " ")
    return "" if shown is None else str(shown)


# Stored text and what was typed are shown with every character that could drive the
# terminal escaped: C0 and C1 controls (ESC, CSI 0x9b, OSC ... BEL), DEL, the bidi
# controls that reorder what is displayed (U+202E, U+2066, ...), and lone surrogates
# (which stdout cannot even encode). Tab and newline stay in multi-line text.
_C0_C1 = (*range(0x20), 0x7F, *range(0x80, 0xA0))
_BIDI = (0x061C, 0x200E, 0x200F, *range(0x202A, 0x202F), *range(0x2066, 0x206A))
_SURROGATES = range(0xD800, 0xE000)
_CONTROLS = {
    **{c: f"\\x{c:02x}" for c in _C0_C1},
    **{c: f"\\u{c:04x}" for c in (*_BIDI, *_SURROGATES)},
}
_CONTROLS_KEEPING_LINES = {c: v for c, v in _CONTROLS.items() if c not in (9, 10)}
# JSON escapes C0 itself; these are the rest, written as JSON escapes (the text is still
# the same JSON: outside strings JSON is ASCII)
_JSON_ESCAPES = {c: f"\\u{c:04x}" for c in (0x7F, *range(0x80, 0xA0), *_BIDI, *_SURROGATES)}


def _printable(text: str, *, lines: bool = True) -> str:
    """`text` with every character that could drive the terminal escaped (`\\x1b`,
    `\\u202e`); tab and newline kept, unless `lines` is False (a one-line message)."""
    return text.translate(_CONTROLS_KEEPING_LINES if lines else _CONTROLS)


def _json_text(text: str) -> str:
    """JSON as json.dumps(ensure_ascii=False) writes it, with the controls it leaves
    raw (DEL, C1, bidi controls, lone surrogates) written as \\u escapes."""
    return text.translate(_JSON_ESCAPES)


class _JSONOut:
    """A text stream that JSON is written to, escaped as `_json_text` does."""

    def __init__(self, fp: TextIO) -> None:
        self.fp = fp

    def write(self, text: str) -> int:
        self.fp.write(_json_text(text))
        return len(text)


def _cell_width(ch: str) -> int:
    if unicodedata.combining(ch):
        return 0
    return 2 if unicodedata.east_asian_width(ch) in ("W", "F") else 1


def _width(text: str) -> int:
    return sum(_cell_width(ch) for ch in text)


def _cell(value: Any, limit: int | None = None) -> str:
    """One table cell: whitespace collapsed, controls escaped, clipped to `limit` columns."""
    text = _printable(" ".join(str("" if value is None else value).split()))
    if limit is None or _width(text) <= limit:
        return text
    kept: list[str] = []
    used = 0
    for ch in text:
        used += _cell_width(ch)
        if used > limit - 3:
            break
        kept.append(ch)
    return "".join(kept) + "..."


def _print_table(
    headers: Sequence[str], rows: Sequence[Sequence[str]], right: Iterable[int] = ()
) -> None:
    numeric = set(right)
    widths = [max([_width(h), *(_width(r[i]) for r in rows)]) for i, h in enumerate(headers)]
    for row in (headers, *rows):
        cells = []
        for i, text in enumerate(row):
            pad = " " * (widths[i] - _width(text))
            cells.append(pad + text if i in numeric else text + pad)
        print("  ".join(cells).rstrip())


def _num(value: Any) -> str:
    return f"{int(value or 0):,}"


def _usd(value: Any) -> str:
    return f"${float(value or 0):.4f}"


#: How many of the sessions an ambiguous prefix matches the error names.
PREFIX_MATCHES_SHOWN = 5


def _resolve(store: Store, id_or_prefix: str) -> str:
    """An exact id, else the one id that starts with the prefix (read-only commands);
    SessionNotFound, or AmbiguousSessionPrefix naming the sessions it matches."""
    from sqlalchemy import select

    from .models import HermesSession as SessionModel
    from .repositories.sessions import SessionRepository

    found = SessionRepository(store).resolve_session_id(id_or_prefix)
    if found is not None:
        return found
    with store.read() as conn:
        matches = list(
            conn.execute(
                select(SessionModel.id)
                .where(SessionModel.id.startswith(id_or_prefix, autoescape=True))
                .order_by(SessionModel.id)
                .limit(PREFIX_MATCHES_SHOWN + 1)
            ).scalars()
        )
    if len(matches) > 1:
        raise AmbiguousSessionPrefix(
            id_or_prefix,
            matches[:PREFIX_MATCHES_SHOWN],
            more=len(matches) > PREFIX_MATCHES_SHOWN,
        )
    raise SessionNotFound(id_or_prefix)


def _cmd_sessions_list(args: argparse.Namespace) -> int:
    from .repositories.sessions import SessionRepository

    with _open_store(args.url) as store:
        rows = SessionRepository(store).list_sessions_rich(
            source=args.source,
            limit=args.limit or None,
            include_delegates=args.include_delegates,
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
    from .repositories.messages import MessageRepository
    from .repositories.sessions import SessionRepository

    with _open_store(args.url) as store:
        session_id = _resolve(store, args.id)
        row = SessionRepository(store).get_session(session_id)
        if row is None:
            raise SessionNotFound(args.id)
        messages = MessageRepository(store).get_messages(session_id)
    if args.json:
        _print_json(
            {
                "session": _iso_times(row),
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
        from .repositories.maintenance import MaintenanceRepository

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
    from .repositories.maintenance import MaintenanceRepository
    from .repositories.sessions import SessionRepository

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
    from .repositories.maintenance import ImportSource, MaintenanceRepository

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


def _prune_bounds(candidates: Sequence[dict[str, Any]], cutoff: float) -> list[float]:
    """Growing `last_active_before` bounds, about PRUNE_STEP candidates apart (they come
    least recently active first) and ending at `cutoff`: pruning up to each bound in turn
    deletes exactly what one prune up to `cutoff` would, in steps a bar can count."""
    bounds: list[float] = []
    for index in range(PRUNE_STEP, len(candidates), PRUNE_STEP):
        bound = float(candidates[index]["last_active"])
        if not bounds or bound > bounds[-1]:
            bounds.append(bound)
    return [*bounds, cutoff]


def _cmd_sessions_prune(args: argparse.Namespace) -> int:
    from .repositories.maintenance import MaintenanceRepository

    cutoff = time.time() - args.older_than * DAY
    deleting = args.yes and not args.dry_run
    with _open_store(args.url, write=deleting, wait=args.wait) as store:
        repo = MaintenanceRepository(store)
        candidates = repo.list_prune_candidates(source=args.source, last_active_before=cutoff)
        if args.dry_run:
            _print_prune_candidates(candidates, args.json)
            return 0
        if not args.yes:
            raise StoreError(
                f"this deletes {len(candidates)} ended session(s) inactive for more than "
                f"{args.older_than:g} day(s) with their messages; add --yes to delete them "
                "(--dry-run lists them)"
            )
        deleted = 0
        with _count_bar("prune", len(candidates), "session") as advance:
            for bound in _prune_bounds(candidates, cutoff):
                count = repo.prune_sessions(None, args.source, last_active_before=bound)
                deleted += count
                advance(count)
    if args.json:
        _print_json({"deleted": deleted})
    else:
        print(f"deleted {deleted} session(s)")
    return 0


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
    from .repositories.maintenance import MaintenanceRepository
    from .repositories.sessions import SessionRepository

    with _open_store(args.url, write=args.yes) as store:
        targets = SessionRepository(store).get_session_delete_targets(args.id)
        if not targets:
            raise SessionNotFound(args.id)
        delegates = len(targets) - 1
        what = f"session {args.id}" + (f" and {delegates} delegate run(s)" if delegates else "")
        if not args.yes:
            raise StoreError(f"this deletes {what} with their messages; add --yes to delete")
        if not MaintenanceRepository(store).delete_session(args.id):
            raise SessionNotFound(args.id)
    print(f"deleted {_printable(what, lines=False)}")
    return 0


_TOKEN_HEADERS = ("INPUT", "OUTPUT", "CACHE READ", "CACHE WRITE", "REASONING")
_COST_FIELDS = ("estimated_cost_usd", "actual_cost_usd")


def _usage_cells(row: dict[str, Any]) -> list[str]:
    from .repositories.usage import TOKEN_FIELDS

    return [*(_num(row.get(f)) for f in TOKEN_FIELDS), *(_usd(row.get(f)) for f in _COST_FIELDS)]


def _totals(rows: Sequence[dict[str, Any]]) -> dict[str, Any]:
    from .repositories.usage import TOKEN_FIELDS

    return {f: sum(r.get(f) or 0 for r in rows) for f in (*TOKEN_FIELDS, *_COST_FIELDS)}


#: `stats --by` values: one breakdown, or the per-model-per-day view.
STATS_VIEWS = ("model", "day", "model,day")


def _stats_view(text: str) -> str:
    parts = [p.strip() for p in text.split(",") if p.strip()]
    if sorted(parts) == ["day", "model"]:
        return "model,day"
    if len(parts) == 1 and parts[0] in STATS_VIEWS:
        return parts[0]
    raise argparse.ArgumentTypeError(f"expected one of {', '.join(STATS_VIEWS)}, got {text!r}")


def _cmd_stats(args: argparse.Namespace) -> int:
    from .repositories.usage import UsageRepository

    zone = args.tz
    with _open_store(args.url) as store:
        usage = UsageRepository(store)
        by_model = usage.usage_by_model() if args.by in (None, "model") else None
        by_day = usage.usage_by_day(time_zone=zone) if args.by in (None, "day") else None
        by_model_day = (
            usage.usage_by_model_and_day(time_zone=zone) if args.by == "model,day" else None
        )
    if args.json:
        out: dict[str, Any] = {}
        if by_model is not None:
            out["by_model"] = by_model
        if by_day is not None:
            out["by_day"] = by_day
        if by_model_day is not None:
            out["by_model_day"] = by_model_day
        _print_json(out)
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


# --------------------------------------------------------------------------- copy


def _cmd_copy(args: argparse.Namespace) -> int:
    from tqdm import tqdm

    from .copy import DEFAULT_BATCH_SIZE, copy_database

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


def _batch_arg(text: str) -> int:
    value = _count_arg(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a whole number >= 1, got {text!r}")
    return value


def _count_arg(text: str) -> int:
    return _whole_number(text, 0)


def _hits_arg(text: str) -> int:
    return _whole_number(text, 1)


def _whole_number(text: str, minimum: int) -> int:
    """A count given on the command line, from `minimum` up to the largest LIMIT both
    databases take (a larger one would reach the driver as an integer overflow)."""
    try:
        value = int(text)
    except ValueError:
        value = minimum - 1
    from .repositories._paging import MAX_ROWS

    if not minimum <= value <= MAX_ROWS:
        raise argparse.ArgumentTypeError(
            f"expected a whole number from {minimum} to {MAX_ROWS}, got {text!r}"
        )
    return value


def _days_arg(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not value >= 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"expected a number of days >= 0, got {text!r}")
    return value


class _Parser(argparse.ArgumentParser):
    """argparse's parser, reporting a bad command line as every other error is reported:
    one escaped line (it quotes what was typed) and exit status 2, with where to find the
    usage. Subcommand parsers are of the same class."""

    def error(self, message: str) -> NoReturn:
        _error(f"{message} (see `{self.prog} --help`)")
        sys.exit(2)


class _Version(argparse.Action):
    """`--version`: the package's version and the schema it reads and writes."""

    def __init__(self, option_strings: Sequence[str], dest: str, **kwargs: Any) -> None:
        super().__init__(option_strings, dest, nargs=0, help="print the version and exit")

    def __call__(self, parser: argparse.ArgumentParser, *_args: Any) -> NoReturn:
        from . import __version__
        from .config import SCHEMA_VERSION

        print(
            f"hermes-store {__version__} (upstream schema_version {SCHEMA_VERSION}, "
            f"revision {SCHEMA_VERSION:04d})"
        )
        parser.exit()


def _wait_arg(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 0 <= value < float("inf"):
        raise argparse.ArgumentTypeError(f"expected a number of seconds >= 0, got {text!r}")
    return value


def _zone_arg(text: str) -> str:
    from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

    try:
        ZoneInfo(text)
    except (ZoneInfoNotFoundError, ValueError):
        raise argparse.ArgumentTypeError(
            f"expected a time zone name such as UTC or Europe/Berlin, got {text!r}"
        ) from None
    return text


#: What `--wait` waits for, and how long by default (waiting.DEFAULT_WAIT_S).
_WAIT_HELP = (
    "wait this long for a lock another process holds, saying so every few seconds (default 20)"
)


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="hermes-store",
        description="Hermes Agent session store: migrations, checks, sessions and usage",
    )
    parser.add_argument("--version", action=_Version)
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
    up.add_argument("--wait", type=_wait_arg, default=20.0, metavar="SECONDS", help=_WAIT_HELP)
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
    find.add_argument(
        "--limit", type=_hits_arg, default=20, metavar="N", help="at most N hits (default 20)"
    )
    find.add_argument("--json", action="store_true")
    find.set_defaults(func=_cmd_search)

    ses = sub.add_parser("sessions", help="list, show, export, import, prune and delete sessions")
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
    ls.add_argument("--json", action="store_true")
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

    rm = with_url(ses_sub.add_parser("delete", help="delete a session and its delegate runs"))
    rm.add_argument("id", help="the exact session id")
    rm.add_argument("--yes", action="store_true", help="really delete")
    rm.set_defaults(func=_cmd_sessions_delete)

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
        default="UTC",
        metavar="ZONE",
        help="the time zone whose days the by-day views count in (default UTC)",
    )
    stats.add_argument("--json", action="store_true")
    stats.set_defaults(func=_cmd_stats)

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

    fts = sub.add_parser("fts", help="full-text index maintenance")
    fts_sub = fts.add_subparsers(dest="fts_command", required=True)
    with_url(fts_sub.add_parser("backfill", help="finish a pending chunked backfill"))
    with_url(fts_sub.add_parser("rebuild", help="rebuild both indexes from the messages"))
    fts.set_defaults(func=_cmd_fts)
    return parser


def _error(message: str) -> None:
    """The one line an error leaves on stderr; the message may quote stored text or what
    was typed, so it is escaped like them, newlines included."""
    print(f"hermes-store: error: {_printable(message, lines=False)}", file=sys.stderr)


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    if not (sys.argv[1:] if argv is None else argv):
        parser.print_help(sys.stderr)  # `hermes-store` alone: what can it do?
        return 2
    args = parser.parse_args(argv)
    try:
        return int(args.func(args))
    except StoreError as exc:
        _error(str(exc))
    except BrokenPipeError:
        # The reader went away (`hermes-store sessions export | head`): no message, and
        # stdout goes to /dev/null so the interpreter's final flush cannot fail again.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141
    except OSError as exc:
        _error(str(exc))
    except Exception as exc:
        # SQLAlchemy is imported by the commands, not here: an error of its types can
        # only have been raised once it was
        errors = sys.modules.get("sqlalchemy.exc")
        if errors is None or not isinstance(exc, errors.SQLAlchemyError):
            raise
        detail = (str(getattr(exc, "orig", None) or exc).splitlines() or [""])[0]
        _error(f"database error: {detail}")
    except KeyboardInterrupt:
        print("hermes-store: interrupted; run the same command again to resume", file=sys.stderr)
        return 130
    return 2


if __name__ == "__main__":
    sys.exit(main())
