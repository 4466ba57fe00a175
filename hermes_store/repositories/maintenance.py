"""Export, import, deletion, pruning and archiving (docs/reference/behaviour.md 8 and 9): the
repository over `export_import.py`, `deletion.py` and `pruning.py`.

Long deletions run as a series of short write transactions of at most `_sql.IN_CHUNK`
sessions rather than one long one: the original's writers give up after about 15
attempts, so holding the write lock for a 50,000-session prune would make them drop
writes.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any, Unpack

from sqlalchemy import ColumnElement, func, select

from ..runtime.engine import Prepared, first_value
from ._sql import IN_CHUNK
from ._tables import SESSIONS
from .deletion import (
    delete_chunk_where,
    delete_if_empty,
    delete_with_delegates,
    remove_session_files,
)
from .encoding import now
from .export_import import (
    IMPORT_MAX_DEPTH,
    IMPORT_MAX_MESSAGES_PER_SESSION,
    IMPORT_MAX_MESSAGES_TOTAL,
    IMPORT_MAX_SESSION_BYTES,
    IMPORT_MAX_SESSIONS,
    IMPORT_MAX_TOTAL_BYTES,
    SupportsWriteStr,
    export_lineage,
    export_page,
    export_session,
    import_entries,
    import_errors,
    read_jsonl,
    write_jsonl,
)
from .importing import ImportReport, ImportSource, Progress, run_import
from .pruning import (
    DAY,
    PRUNE_FILTERS,
    PruneFilters,
    archive_idle,
    archive_lineages,
    candidates_statement,
    empty_conditions,
    prune_conditions,
)

if TYPE_CHECKING:
    from ..store import Store

log = logging.getLogger(__name__)

EXPORT_PAGE = 200

_COUNT_EMPTY = Prepared(select(func.count()).select_from(SESSIONS).where(*empty_conditions()))


class MaintenanceRepository:
    """Export, import, deletion, pruning and archiving of whole sessions; long deletions
    run as a series of short write transactions.

    Args:
        store: the Store the repository works on.
        chunk_size: rows per transaction of a chunked job.
        chunk_pause: seconds to sleep between chunks of a long-running job, yielding to
            other writers.
        export_page: sessions read per query when exporting.
    """

    def __init__(
        self,
        store: Store,
        *,
        chunk_size: int = IN_CHUNK,
        chunk_pause: float = 0.0,
        export_page: int = EXPORT_PAGE,
    ) -> None:
        self.store = store
        self.chunk_size = max(1, min(int(chunk_size), IN_CHUNK))
        # Pause between deletion chunks so other processes' writers get the lock.
        self.chunk_pause = max(0.0, float(chunk_pause))
        self.export_page = max(1, int(export_page))

    # ------------------------------------------------------------------ export

    def export_session(self, session_id: str) -> dict[str, Any] | None:
        """The full session row plus its active messages, decoded; None if unknown.

        Args:
            session_id: the session's id.
        """
        return self.store.read(lambda conn: export_session(conn, session_id))

    def export_session_lineage(self, session_id: str) -> dict[str, Any] | None:
        """A compression lineage exported as one logical session
        (docs/reference/behaviour.md 8): the last segment's fields, plus `segments` (one
        `export_session` dict per segment, root first), `lineage_session_ids`, `messages`
        (all segments' active messages concatenated) and `message_count` (their total).
        None for unknown ids. Read in one transaction, so the segments are consistent
        with each other.

        Args:
            session_id: the session's id.
        """
        return self.store.read(lambda conn: export_lineage(conn, session_id))

    def export_all(self, source: str | None = None) -> Iterator[dict[str, Any]]:
        """Every session (newest start first), one export at a time.

        Keyset pages over (started_at, id); no read transaction stays open while the
        caller consumes a session, so a slow consumer never blocks a DELETE-mode writer.

        Args:
            source: the source (cli, telegram, discord, cron, ...).
        """
        after: tuple[float, str] | None = None
        while True:
            page = self.store.read(
                partial(export_page, source=source, after=after, limit=self.export_page)
            )
            if not page:
                return
            for _, sid in page:
                exported = self.export_session(sid)
                if exported is not None:  # deleted since the page was read
                    yield exported
            after = page[-1]

    @staticmethod
    def write_jsonl(fp: SupportsWriteStr, sessions: Iterable[Mapping[str, Any]]) -> int:
        """One JSON object per line; returns how many were written. Bytes content (a
        legacy oddity) is written as text, decoded as UTF-8 with replacement.

        Args:
            fp: a text stream to write to or read from.
            sessions: the sessions, as exported (a dict each).
        """
        return write_jsonl(fp, sessions)

    @staticmethod
    def read_jsonl(fp: Iterable[str]) -> Iterator[dict[str, Any]]:
        """The objects of a JSONL stream; blank lines are skipped, anything else that is
        not a JSON object raises ValueError naming the line.

        Args:
            fp: a text stream to write to or read from.
        """
        return read_jsonl(fp)

    # ------------------------------------------------------------------ import

    def import_sessions(self, sessions: Any) -> dict[str, Any]:
        """Validate every entry, then import all of them in one transaction or nothing
        (the original's contract; `import_each` imports the valid rest instead).

        Existing ids are skipped. A parent link survives only if the parent exists (in
        the database or the payload) and no cycle results; otherwise the child is
        detached. A title already in use raises the database's IntegrityError.

        Args:
            sessions: the sessions, as exported (a dict each).
        """
        errors = import_errors(sessions)
        if errors:
            return {"ok": False, "imported": 0, "skipped": 0, "detached": 0, "errors": errors}
        entries: list[dict[str, Any]] = sessions
        return self.store.write(lambda conn: import_entries(conn, entries, self.store.redaction))

    def import_each(
        self, sessions: ImportSource | Sequence[Any], *, progress: Progress | None = None
    ) -> ImportReport:
        """Import every valid entry and list each invalid one with its reason.

        `sessions` is a list of exported sessions (any number of them) or an
        `ImportSource` (`ImportSource.from_file(fp, name)` reads a JSON list, one
        exported session or JSONL). An entry is a session with its messages, imported
        whole or not at all, by the rules of `import_sessions` but its size limits on one
        session (any session the store holds comes back); a title already in use
        refuses the entry, and an entry whose parent is refused is held back, so that
        importing the fixed input again brings both in, linked. Existing ids are
        skipped. Parents are written before their children, in batches of at most
        `import_sessions`' size, one transaction each. `progress(n)` is called as
        entries are handled, `n` since its last call. Errors are listed in input order
        (`entry` is `[i]` or `line n`, `index` the position from 0).

        Args:
            sessions: the sessions, as exported (a dict each).
            progress: called with the number of entries done after each one.
        """
        source = (
            sessions if isinstance(sessions, ImportSource) else ImportSource.from_list(sessions)
        )
        return run_import(self.store, source, progress)

    # ------------------------------------------------------------------ delete

    def delete_session(
        self,
        session_id: str,
        sessions_dir: str | Path | None = None,
        expected_delete_ids: Iterable[str] | None = None,
    ) -> bool:
        """Delete a session, its messages and its delegate runs; orphan other children.
        With `expected_delete_ids`, only if exactly that set would go (what a UI showed
        the user). False for unknown ids or a mismatch.

        Args:
            session_id: the session's id.
            sessions_dir: where the sessions' files live; a deleted session's files are
                removed from it (None: none are).
            expected_delete_ids: the ids the caller expects to delete (the session and its
                delegate runs); when the set differs, nothing is deleted and the result is
                False.
        """
        if not session_id or not isinstance(session_id, str):
            return False
        expected = None if expected_delete_ids is None else set(expected_delete_ids)
        found, deleted = self.store.write(
            lambda conn: delete_with_delegates(conn, [session_id], expected)
        )
        if not found:
            return False
        remove_session_files(sessions_dir, sorted(deleted))
        return True

    def delete_session_if_empty(
        self, session_id: str, sessions_dir: str | Path | None = None
    ) -> bool:
        """Delete a session only if it is untitled (NULL or ''), has no message rows
        (inactive ones count) and no child sessions; decided and done in one write.
        Its files under `sessions_dir` are removed afterwards (docs/reference/behaviour.md 9).

        Args:
            session_id: the session's id.
            sessions_dir: where the sessions' files live; a deleted session's files are
                removed from it (None: none are).
        """
        if not session_id or not isinstance(session_id, str):
            return False
        deleted = self.store.write(lambda conn: delete_if_empty(conn, session_id))
        if deleted:
            remove_session_files(sessions_dir, [session_id])
        return deleted

    def delete_sessions(
        self, session_ids: Iterable[Any], sessions_dir: str | Path | None = None
    ) -> int:
        """The bulk form of delete_session in one transaction; returns how many of the
        given ids were deleted (non-strings, empties and unknown ids are ignored).

        Args:
            session_ids: the ids of the sessions.
            sessions_dir: where the sessions' files live; a deleted session's files are
                removed from it (None: none are).
        """
        wanted = list(dict.fromkeys(i for i in session_ids if isinstance(i, str) and i))
        if not wanted:
            return 0
        count, deleted = self.store.write(lambda conn: delete_with_delegates(conn, wanted))
        remove_session_files(sessions_dir, sorted(deleted))
        return count

    def _delete_where(
        self, conditions: Sequence[ColumnElement[bool]], sessions_dir: str | Path | None
    ) -> int:
        """Delete every session matching `conditions`, chunk by chunk, each chunk in its
        own short write that re-evaluates the conditions (a session that was reopened or
        got new messages meanwhile is spared). Children are orphaned, not cascaded."""
        deleted: list[str] = []
        last_id: str | None = None
        while True:
            chunk = partial(
                delete_chunk_where, conditions=conditions, after_id=last_id, limit=self.chunk_size
            )
            ids = self.store.write(chunk)
            if not ids:
                break
            deleted.extend(ids)
            last_id = ids[-1]
            if self.chunk_pause:
                time.sleep(self.chunk_pause)
        remove_session_files(sessions_dir, deleted)
        return len(deleted)

    # ------------------------------------------------------------------ prune

    def prune_sessions(
        self,
        /,
        older_than_days: float | None = 90,
        source: str | None = None,
        sessions_dir: str | Path | None = None,
        **filters: Unpack[PruneFilters],
    ) -> int:
        """Delete ended sessions matching every filter (docs/reference/behaviour.md 9);
        open sessions are never pruned. Returns how many were deleted.

        Args:
            older_than_days: only sessions whose last activity is older than this many days.
            source: the source (cli, telegram, discord, cron, ...).
            sessions_dir: where the sessions' files live; a deleted session's files are
                removed from it (None: none are).
            filters: which sessions: source, age and activity filters (see the method).
        """
        conditions = prune_conditions("prune_sessions", older_than_days, source, filters)
        return self._delete_where(conditions, sessions_dir)

    def list_prune_candidates(
        self,
        /,
        older_than_days: float | None = None,
        source: str | None = None,
        **filters: Unpack[PruneFilters],
    ) -> list[dict[str, Any]]:
        """What prune_sessions would delete, least recently active first.

        Args:
            older_than_days: only sessions whose last activity is older than this many days.
            source: the source (cli, telegram, discord, cron, ...).
            filters: which sessions: source, age and activity filters (see the method).
        """
        conditions = prune_conditions("list_prune_candidates", older_than_days, source, filters)
        return self.store.read(
            lambda conn: [
                dict(r) for r in conn.execute(candidates_statement(conditions)).mappings()
            ]
        )

    def archive_sessions(
        self,
        /,
        older_than_days: float | None = None,
        source: str | None = None,
        **filters: Unpack[PruneFilters],
    ) -> int:
        """Archive what `prune_sessions` would select with the same filters, lineage-wide
        like `set_session_archived` (ancestors and descendants linked through compression
        parents, open tips included). `archived` defaults to False, so already archived
        sessions are not selected again. Returns the number of selected sessions (as the
        original, which archives each candidate in turn); one write transaction.

        Args:
            older_than_days: only sessions whose last activity is older than this many days.
            source: the source (cli, telegram, discord, cron, ...).
            filters: which sessions: source, age and activity filters (see the method).
        """
        filters.setdefault("archived", False)
        conditions = prune_conditions("archive_sessions", older_than_days, source, filters)
        return self.store.write(lambda conn: archive_lineages(conn, conditions))

    # ------------------------------------------------------------------ empty / stale

    def count_empty_sessions(self) -> int:
        """Ended, unarchived sessions whose message count is 0."""
        return int(self.store.read_one(_COUNT_EMPTY, {}, first_value))

    def delete_empty_sessions(self, sessions_dir: str | Path | None = None) -> int:
        """Delete what count_empty_sessions counts; children are orphaned.

        Args:
            sessions_dir: where the sessions' files live; a deleted session's files are
                removed from it (None: none are).
        """
        return self._delete_where(empty_conditions(), sessions_dir)

    def archive_stale_sessions(
        self, idle_days: float | None, *, exclude_pinned: bool = True
    ) -> int:
        """Archive unarchived sessions idle for more than `idle_days` (open ones too),
        except compression-ended segments (their live tip carries the lineage) and, by
        default, pinned sessions. None or a negative value archives nothing.

        Args:
            idle_days: days without activity after which a session counts as stale.
            exclude_pinned: leave pinned sessions alone.
        """
        if idle_days is None or idle_days < 0:
            return 0
        cutoff = now() - float(idle_days) * DAY
        return self.store.write(lambda conn: archive_idle(conn, cutoff, exclude_pinned))


__all__ = [
    "IMPORT_MAX_DEPTH",
    "IMPORT_MAX_MESSAGES_PER_SESSION",
    "IMPORT_MAX_MESSAGES_TOTAL",
    "IMPORT_MAX_SESSIONS",
    "IMPORT_MAX_SESSION_BYTES",
    "IMPORT_MAX_TOTAL_BYTES",
    "PRUNE_FILTERS",
    "ImportReport",
    "ImportSource",
    "MaintenanceRepository",
    "SupportsWriteStr",
]
