"""Output for every command: JSON, tables, times, escaped text, progress bars and
lines, and the lines about a wait for another process's lock."""

from __future__ import annotations

import csv
import json
import os
import sys
import time
import unicodedata
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, TextIO

if TYPE_CHECKING:
    from ..runtime.waiting import Waiting
    from ..search.maintenance import Progress


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


#: Money (every `*_cost_usd` field) in `--json` and `--csv` is rounded to this many
#: decimals: sums of stored floats carry binary noise (0.030399999999999996), and a
#: millionth of a dollar is finer than any price.
MONEY_DECIMALS = 6


def _money(record: dict[str, Any]) -> dict[str, Any]:
    """`record` with its money fields rounded to MONEY_DECIMALS."""
    return {
        k: round(float(v), MONEY_DECIMALS) if k.endswith("_cost_usd") and _is_epoch(v) else v
        for k, v in record.items()
    }


def _csv_cell(value: Any) -> str:
    """One CSV cell holding what `--json` holds: null as empty, true/false as JSON writes
    them, a list or object as its JSON text; text with the characters that could drive a
    terminal escaped, as everywhere else the command prints."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list | dict):
        value = json.dumps(value, ensure_ascii=False, sort_keys=True, default=_json_default)
    elif isinstance(value, bytes | bytearray | memoryview):
        value = _json_default(value)
    return _printable(str(value))


def _print_csv(records: Sequence[dict[str, Any]], columns: Sequence[str]) -> None:
    """`records` as CSV (RFC 4180, a header row first): `columns` in that order, then any
    other field the records have, by name."""
    extra = sorted({k for r in records for k in r} - set(columns))
    fields = [*columns, *extra]
    out = csv.writer(sys.stdout)
    out.writerow(fields)
    for record in records:
        out.writerow([_csv_cell(record.get(f)) for f in fields])


def _print_json(data: Any) -> None:
    text = json.dumps(data, indent=2, ensure_ascii=False, sort_keys=True, default=_json_default)
    print(_json_text(text))


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
        "trashed_at",
        "expires_at",
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
