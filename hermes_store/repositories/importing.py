"""Importing exported sessions entry by entry: any number of them, from a list or a file
(a JSON list, one exported session, or JSON Lines), each bad entry listed with its reason
and the rest imported.

An entry is a session with its messages, written whole or not at all. Every entry is
checked before anything is written, by the rules `import_sessions` applies
(`export_import.entry_problem`), so SQLite and PostgreSQL refuse the same entries for the
same reasons. Parents come before their children (an export lists children first) and an
entry whose parent was refused is held back, so that importing the fixed file again
brings both in, linked. One rule of `import_sessions` is left out: the size limits of
a single session (messages, bytes), since what the store holds its own export must bring
back. Valid entries are written in batches within `import_sessions`' limits of one call,
one transaction each (an entry larger than those is a batch of its own); inside it,
titles already in use (in the database, or earlier in the batch) are refused before the
insert. Should the database still refuse a batch (another writer took a title
meanwhile, or a constraint the checks do not know), the batch is rolled back and its
halves written in turn, down to single entries, so only the entries it refuses are lost.
"""

from __future__ import annotations

import codecs
import json
import re
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import IO, TYPE_CHECKING, Any, cast

from sqlalchemy import Connection
from sqlalchemy.exc import DataError, DBAPIError, IntegrityError

from ..errors import InvalidInput
from ..redaction import RedactionPolicy
from .deletion import existing_ids
from .export_import import (
    DUPLICATE_ID,
    IMPORT_MAX_DEPTH,
    IMPORT_MAX_MESSAGES_TOTAL,
    IMPORT_MAX_SESSIONS,
    IMPORT_MAX_TOTAL_BYTES,
    entry_problem,
    entry_weight,
    import_entries,
    stored_title,
    titles_in_use,
    too_deep,
)

if TYPE_CHECKING:
    from ..store import Store

#: Called with the number of entries handled since its last call, as the import goes
#: (`len(source)` is the total).
Progress = Callable[[int], object]

#: What the database raises for an entry it will not store (as opposed to a lost
#: connection or a full disk, which stop the import).
_REFUSED = (IntegrityError, DataError, InvalidInput)

# JSON strings, brackets and separators; everything else (numbers, literals, white
# space) lies between them. Enough to find where values begin and end without parsing.
_JSON_TOKENS = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"|[][{},:]')


@dataclass(frozen=True)
class ImportEntry:
    """One session of an import source, before it is read in full."""

    index: int  # its position in the source, from 0
    label: str  # where it is: `line 3` (JSONL) or `[2]` (a list)
    session_id: str | None
    parent_id: str | None
    where: int  # JSONL: the byte offset of its line; otherwise its index
    problem: str | None = None  # known before reading it (too deep to parse)


class ImportSource:
    """The entries of an import and how to read each; `len()` counts them.

    A JSONL file is scanned line by line and each entry read again when it is imported,
    so only one batch is in memory: the file must stay open until the import ends."""

    def __init__(self, entries: Sequence[ImportEntry], load: Callable[[ImportEntry], Any]):
        self.entries = list(entries)
        self.load = load

    def __len__(self) -> int:
        return len(self.entries)

    @classmethod
    def from_list(cls, sessions: Sequence[Any]) -> ImportSource:
        values = list(sessions)
        entries = [ImportEntry(i, f"[{i}]", *_keys(v), i) for i, v in enumerate(values)]
        return cls(entries, lambda entry: values[entry.where])

    @classmethod
    def from_file(cls, fp: IO[bytes], name: str) -> ImportSource:
        """The entries of a JSON list, a single exported session, or JSONL. A file that
        is not JSON raises InvalidInput naming `name` (and the line, for JSONL)."""
        bom = codecs.BOM_UTF8
        fp.seek(0)
        chunk = fp.read(65536).removeprefix(bom)
        first = b""
        while chunk and not first:
            first = chunk.lstrip()[:1]
            chunk = fp.read(65536)
        if not first:
            return cls([], lambda entry: None)
        if first == b"{":
            fp.seek(0)
            head = b""
            for raw in fp:
                if raw.strip():
                    head = raw.removeprefix(bom)
                    break
            try:
                jsonl = isinstance(json.loads(head), dict)
            except RecursionError:
                # A pretty-printed document opens with a lone brace: a first line that
                # nests this deep is a JSONL entry.
                jsonl = True
            except ValueError:
                jsonl = False  # a pretty-printed session (`sessions export ID`)
            if jsonl:
                return cls._from_jsonl(fp, name)
        elif first != b"[":
            raise InvalidInput(
                f"{name}: expected a JSON list of exported sessions or JSONL (one per line)"
            )
        fp.seek(0)
        try:
            text = fp.read().decode("utf-8-sig")
            document = json.loads(text)
        except RecursionError:
            return cls._from_deep_document(text, name)
        except ValueError as exc:  # UnicodeDecodeError too
            raise InvalidInput(f"{name}: not valid JSON ({exc})") from None
        return cls.from_list(document if isinstance(document, list) else [document])

    @classmethod
    def _from_jsonl(cls, fp: IO[bytes], name: str) -> ImportSource:
        entries: list[ImportEntry] = []
        fp.seek(0)
        offset = 0
        for number, raw in enumerate(fp, start=1):
            start, offset = offset, offset + len(raw)
            line = raw.removeprefix(codecs.BOM_UTF8).strip()
            if not line:
                continue
            label, index = f"line {number}", len(entries)
            try:
                value = json.loads(line)
            except RecursionError:
                text = line.decode("utf-8", "replace")
                entries.append(ImportEntry(index, label, *_outline(text)[1:], start, _DEEP))
                continue
            except ValueError as exc:
                raise InvalidInput(f"{name}: line {number}: invalid JSON ({exc})") from None
            entries.append(ImportEntry(index, label, *_keys(value), start))

        def load(entry: ImportEntry) -> Any:
            fp.seek(entry.where)
            return json.loads(fp.readline().removeprefix(codecs.BOM_UTF8))

        return cls(entries, load)

    @classmethod
    def _from_deep_document(cls, text: str, name: str) -> ImportSource:
        """A JSON document nesting too deeply for the parser as a whole: its values are
        found without parsing, and only those within the depth limit are parsed."""
        entries: list[ImportEntry] = []
        values: list[Any] = []
        for index, element in enumerate(_elements(text, name)):
            depth, sid, parent = _outline(element)
            if depth > IMPORT_MAX_DEPTH:
                entries.append(ImportEntry(index, f"[{index}]", sid, parent, index, _DEEP))
                values.append(None)
                continue
            try:
                value = json.loads(element)
            except ValueError as exc:
                raise InvalidInput(f"{name}: [{index}]: not valid JSON ({exc})") from None
            entries.append(ImportEntry(index, f"[{index}]", *_keys(value), index))
            values.append(value)
        return cls(entries, lambda entry: values[entry.where])


_DEEP = too_deep("session")


def _keys(value: Any) -> tuple[str | None, str | None]:
    """(id, parent id) of an entry, each None unless it is usable text."""
    if not isinstance(value, dict):
        return None, None
    sid, parent = value.get("id"), value.get("parent_session_id")
    return _usable(sid), _usable(parent)


def _usable(value: Any) -> str | None:
    if not isinstance(value, str) or not value:
        return None
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return None  # a lone surrogate: it could be neither stored nor shown
    return value


def _elements(text: str, name: str) -> Iterator[str]:
    """The text of each value of a JSON list (or of the one value of another document)."""
    body = text.strip()
    if not body.startswith("["):
        yield body
        return
    depth = 0
    start = 1
    end: int | None = None
    pieces: list[str] = []
    for token in _JSON_TOKENS.finditer(body):
        char = token.group()
        if char in "[{":
            depth += 1
        elif char in "]}":
            depth -= 1
            if depth == 0:
                pieces.append(body[start : token.start()])
                end = token.end()
                break
        elif char == "," and depth == 1:
            pieces.append(body[start : token.start()])
            start = token.end()
    if end is None or body[end:].strip():
        raise InvalidInput(f"{name}: not valid JSON (the list does not end where it should)")
    if pieces == [""] or (len(pieces) == 1 and not pieces[0].strip()):
        return
    yield from (piece.strip() for piece in pieces)


def _outline(text: str) -> tuple[int, str | None, str | None]:
    """(nesting depth, id, parent id) of the JSON value in `text`, read from its tokens
    without parsing it, for a value too deep to parse."""
    depth = top = 0
    key: str | None = None
    expect_key = False
    found: dict[str, str | None] = {}
    for token in _JSON_TOKENS.finditer(text):
        char = token.group()
        if char in "[{":
            depth += 1
            top = max(top, depth)
            expect_key = depth == 1 and char == "{"
            if depth == 2:
                key = None  # a container is no id
        elif char in "]}":
            depth -= 1
        elif depth != 1:
            continue
        elif char == ",":
            expect_key = True
        elif char == ":":
            expect_key = False
        elif char.startswith('"'):
            string = json.loads(char)
            if expect_key:
                key = string
            elif key in ("id", "parent_session_id"):
                found.setdefault(key, _usable(string))
            expect_key = False
    return top, found.get("id"), found.get("parent_session_id")


def parents_first(entries: Sequence[ImportEntry]) -> list[int]:
    """Source order, except that an entry whose parent comes later moves to just after
    it. A parent link is kept only when the parent is in the database or in the same
    write, and an export lists the newest sessions (the children) first, so in source
    order a link across two batches would be dropped."""
    first: dict[str, int] = {}
    for index, entry in enumerate(entries):
        if entry.session_id is not None:
            first.setdefault(entry.session_id, index)
    placed = [False] * len(entries)
    order: list[int] = []
    for index in range(len(entries)):
        chain: list[int] = []
        seen: set[int] = set()
        at: int | None = index
        while at is not None and not placed[at] and at not in seen:  # a cycle stops too
            chain.append(at)
            seen.add(at)
            parent = entries[at].parent_id
            at = first.get(parent) if parent is not None else None
        for link in reversed(chain):
            placed[link] = True
            order.append(link)
    return order


@dataclass
class ImportReport:
    """What an import did: sessions imported, skipped (already present) and detached
    (their parent link dropped), and one `{entry, index, error[, session_id]}` per entry
    not imported, in source order."""

    imported: int = 0
    skipped: int = 0
    detached: int = 0
    errors: list[dict[str, Any]] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.errors

    def as_dict(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "imported": self.imported,
            "skipped": self.skipped,
            "detached": self.detached,
            "errors": self.errors,
        }


@dataclass(frozen=True)
class _Item:
    entry: ImportEntry
    value: dict[str, Any]


@dataclass
class _Written:
    """One write's result: `import_entries`' counts and the entries it refused."""

    result: dict[str, Any] | None
    refused: list[tuple[int, str, str]]  # (position in the batch, reason, session id)


def held_back(parent: str) -> str:
    return f"held back: its parent {parent} has errors"


def _write(
    conn: Connection,
    batch: Sequence[_Item],
    lost: frozenset[str],
    redaction: RedactionPolicy | None = None,
) -> _Written:
    """Write `batch` in the caller's transaction, less the entries whose title is in use
    and those whose parent is refused (`lost`, or refused here). Pure apart from the
    database, since a retried transaction runs it again."""
    values = [item.value for item in batch]
    existing = existing_ids(conn, [v["id"] for v in values])
    wanted = {t for v in values if v["id"] not in existing and (t := stored_title(v))}
    holders = titles_in_use(conn, wanted)
    lost_here = set(lost)
    refused: list[tuple[int, str, str]] = []
    kept: list[dict[str, Any]] = []
    for position, value in enumerate(values):
        sid, parent = value["id"], value.get("parent_session_id")
        title = stored_title(value) if sid not in existing else None
        if isinstance(parent, str) and parent in lost_here:
            reason = held_back(parent)
        elif title is not None and title in holders:
            reason = f"title {title!r} is already used by session {holders[title]}"
        else:
            if title is not None:
                holders[title] = sid
            kept.append(value)
            continue
        refused.append((position, reason, sid))
        lost_here.add(sid)
    return _Written(import_entries(conn, kept, redaction) if kept else None, refused)


def _refusal(exc: Exception) -> str:
    """The first line of why a write was refused: the driver's message for the database's
    refusals, the encoder's own for a value it cannot store."""
    if not isinstance(exc, DBAPIError):
        return str(exc)
    cause = exc.orig if exc.orig is not None else exc
    lines = str(cause).strip().splitlines()
    return "refused by the database: " + (lines[0] if lines else type(cause).__name__)


class _Import:
    def __init__(self, store: Store, source: ImportSource, progress: Progress | None) -> None:
        self.store = store
        self.source = source
        self.progress = progress
        self.report = ImportReport()
        self.seen: set[str] = set()  # ids met so far: a second entry with one is refused
        self.lost: set[str] = set()  # ids of refused entries: their children are held back
        self.handled = 0
        self.reported = 0

    def run(self) -> ImportReport:
        for batch in self._batches():
            self._write_batch(batch)
            self._advance()
        self._advance()
        self.report.errors.sort(key=lambda problem: int(problem["index"]))
        return self.report

    def _advance(self) -> None:
        if self.progress is not None and self.handled > self.reported:
            self.progress(self.handled - self.reported)
            self.reported = self.handled

    def _refuse(self, entry: ImportEntry, reason: str, sid: str | None = None) -> None:
        sid = sid or entry.session_id
        problem: dict[str, Any] = {"entry": entry.label, "index": entry.index, "error": reason}
        if sid is not None:
            problem["session_id"] = sid
            # A refused second entry of an id leaves the first one's children alone.
            if reason != DUPLICATE_ID:
                self.lost.add(sid)
        self.report.errors.append(problem)

    def _checked(self, entry: ImportEntry) -> dict[str, Any] | None:
        """The entry's value if it passes every rule; otherwise it is refused."""
        self.handled += 1
        parent = entry.parent_id
        problem: tuple[str, str | None] | None
        if parent is not None and parent in self.lost:
            problem = held_back(parent), None
        elif entry.problem is not None:
            problem = entry.problem, None
        else:
            value = self.source.load(entry)
            problem = entry_problem(value, self.seen)
            if problem is None:
                return cast(dict[str, Any], value)  # entry_problem refuses anything else
        if entry.session_id is not None:
            self.seen.add(entry.session_id)
        self._refuse(entry, *problem)
        return None

    def _batches(self) -> Iterator[list[_Item]]:
        """The valid entries, parents first, in batches within `import_sessions`' limits
        (entries, bytes and messages of one call); an entry beyond them alone."""
        batch: list[_Item] = []
        size = messages = 0
        for index in parents_first(self.source.entries):
            entry = self.source.entries[index]
            value = self._checked(entry)
            if value is None:
                continue
            value_size, value_messages = entry_weight(value)
            if batch and (
                len(batch) >= IMPORT_MAX_SESSIONS
                or size + value_size > IMPORT_MAX_TOTAL_BYTES
                or messages + value_messages > IMPORT_MAX_MESSAGES_TOTAL
            ):
                yield batch
                batch, size, messages = [], 0, 0
            batch.append(_Item(entry, value))
            size += value_size
            messages += value_messages
        if batch:
            yield batch

    def _write_batch(self, batch: list[_Item]) -> None:
        """One transaction for `batch`. If the database refuses it, it was rolled back
        whole: its halves are written in turn, down to the single entry refused, so one
        bad entry costs a few more transactions rather than one per entry of the batch.
        Parents stay ahead of their children, and a refusal in the first half is known
        (its children held back) before the second is written."""
        try:
            redaction = self.store.redaction
            written = self.store.write(
                partial(_write, batch=batch, lost=frozenset(self.lost), redaction=redaction)
            )
        except _REFUSED as exc:
            if len(batch) == 1:
                self._refuse(batch[0].entry, _refusal(exc), batch[0].value["id"])
                return
            middle = len(batch) // 2
            self._write_batch(batch[:middle])
            self._write_batch(batch[middle:])
            return
        self._record(batch, written)

    def _record(self, batch: Sequence[_Item], written: _Written) -> None:
        for position, reason, sid in written.refused:
            self._refuse(batch[position].entry, reason, sid)
        if written.result is not None:
            self.report.imported += int(written.result["imported"])
            self.report.skipped += int(written.result["skipped"])
            self.report.detached += int(written.result["detached"])


def run_import(
    store: Store, source: ImportSource, progress: Progress | None = None
) -> ImportReport:
    """Import every valid entry of `source`; see the module's docstring."""
    return _Import(store, source, progress).run()
