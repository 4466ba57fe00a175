"""Redacting what is already stored: `RedactionRepository.redact_stored`, behind
`hermes-store redact` (docs/redaction.md).

The messages are walked in id order, a batch at a time. Each batch is read in a read
transaction and matched outside any lock; only the rows with a match are written, in one
short write transaction through the store's retry (so a running Hermes waits at most
for one batch's update), which reads them again under the write lock and redacts what it
finds then: a row changed meanwhile is redacted as it is now, never overwritten with what
was read before. Updating a row updates its search entries: on SQLite the v23 FTS
triggers delete the old text from `messages_fts` and `messages_fts_trigram` and index the
new one; on PostgreSQL `search_vector` is a generated column and the trigram indexes
are expression indexes.

Progress is kept in `state_meta` under CURSOR_KEY as `<policy fingerprint>:<last id>`,
written in the same transaction as the rows it covers, so an interrupted run resumes
after the last batch it committed, and a run of the same policy later walks only the
rows added since. A dry run reads the same rows and writes nothing.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import TYPE_CHECKING, Any

from sqlalchemy import Connection, bindparam, func, select, update

from ..errors import InvalidInput
from ..redaction import REDACTED_FIELDS, RedactionPolicy
from ._sql import chunks
from ._state_meta import set_value
from ._tables import MESSAGES, META, K, M

if TYPE_CHECKING:
    from ..store import Store

#: state_meta key of a run's progress: "<policy fingerprint>:<last message id done>".
CURSOR_KEY = "hermes_store_redact_cursor"
DEFAULT_BATCH = 500
#: Batches without a match between two writes of the cursor: a resumed run reads at most
#: this many batches again, and a clean file is walked with few writes.
CURSOR_EVERY = 20

_COLUMNS = tuple(M[name] for name in REDACTED_FIELDS)


@dataclass
class RedactionRun:
    """What a run found (a dry run) or changed (`applied`).

    Attributes:
        applied: whether rows were written (False: a dry run).
        counts: replacements by pattern name (never the matched text).
        rows_scanned: messages read.
        rows_matched: messages with at least one match (written, when applied).
        resumed_after: the id after which this run started (0: from the first message).
        last_id: the last message id walked (the cursor's new value when applied).
        complete: whether every message up to the run's start was walked.
        fingerprint: the policy's fingerprint (docs/redaction.md).
    """

    applied: bool
    counts: dict[str, int] = field(default_factory=dict)
    rows_scanned: int = 0
    rows_matched: int = 0
    resumed_after: int = 0
    last_id: int = 0
    complete: bool = False
    fingerprint: str = ""

    @property
    def replacements(self) -> int:
        """Matches replaced (or found, in a dry run), all patterns together."""
        return sum(self.counts.values())


#: Called after each batch with the run so far.
Progress = Callable[[RedactionRun], None]


def _redacted_row(
    policy: RedactionPolicy, row: Sequence[Any], counts: Counter[str]
) -> dict[str, Any]:
    """The columns of `row` (id first, then REDACTED_FIELDS) that redaction changes."""
    changed: dict[str, Any] = {}
    for name, stored in zip(REDACTED_FIELDS, row[1:], strict=True):
        redacted = policy.redact_stored(name, stored, counts)
        if redacted is not stored:
            changed[name] = redacted
    return changed


def _read_batch(conn: Connection, after: int, high: int, batch: int) -> list[Sequence[Any]]:
    query = select(M.id, *_COLUMNS).where(M.id > after, M.id <= high).order_by(M.id).limit(batch)
    return list(conn.execute(query).all())


def _write_batch(
    conn: Connection,
    policy: RedactionPolicy,
    ids: list[int],
    cursor: str | None,
) -> tuple[Counter[str], int]:
    """Redact the rows `ids` as they are now, under the write lock, and record the cursor;
    (replacements by pattern, rows changed). Pure apart from the database: a retried
    transaction runs it again."""
    counts: Counter[str] = Counter()
    changed_rows = 0
    query = select(M.id, *_COLUMNS).where(M.id.in_(bindparam("ids", expanding=True)))
    # a batch has no upper bound: the ids are bound a chunk at a time, below the
    # database's limit of parameters per statement
    for chunk in chunks(ids):
        for row in conn.execute(query.order_by(M.id), {"ids": chunk}).all():
            changed = _redacted_row(policy, row, counts)
            if changed:
                conn.execute(update(MESSAGES).where(M.id == row[0]).values(changed))
                changed_rows += 1
    if cursor is not None:
        set_value(conn, CURSOR_KEY, cursor)
    return counts, changed_rows


def _cursor(conn: Connection) -> str | None:
    query = select(K.value).select_from(META).where(K.key == bindparam("k"))
    value = conn.execute(query, {"k": CURSOR_KEY}).scalar()
    return None if value is None else str(value)


class RedactionRepository:
    """Applies a redaction policy to the messages already stored.

    Args:
        store: the Store the repository works on.
        policy: the patterns to apply (default: the store's own policy, which must then
            be enabled).
    """

    def __init__(self, store: Store, policy: RedactionPolicy | None = None) -> None:
        self.store = store
        self.policy = store.redaction if policy is None else policy

    def redaction_cursor(self) -> tuple[str, int] | None:
        """(policy fingerprint, last message id done) of the last applied run, or None."""
        value = self.store.read(_cursor)
        if value is None:
            return None
        fingerprint, _, last = value.partition(":")
        try:
            return fingerprint, int(last)
        except ValueError:
            return None

    def redact_stored(
        self,
        *,
        apply: bool = False,
        batch: int = DEFAULT_BATCH,
        restart: bool = False,
        progress: Progress | None = None,
    ) -> RedactionRun:
        """Find (dry run) or replace (`apply`) the policy's matches in the stored
        messages' REDACTED_FIELDS, walking ids in batches of `batch`; returns the counts
        per pattern, never a matched text.

        A run of the same policy starts after the last batch an applied run committed
        (`restart` starts from the first message); the run ends at the newest message
        that existed when it started.

        Raises InvalidInput for a policy without patterns or a batch below 1.

        Args:
            apply: write the redacted values (False: count only, write nothing).
            batch: messages read per batch (each applied batch is one write transaction).
            restart: walk every message, not only those after the cursor.
            progress: called after each batch with the run so far.
        """
        policy = self.policy
        if not policy.compiled:
            raise InvalidInput(
                "the redaction policy is off (no patterns): pass a RedactionPolicy, or set "
                "HERMES_STORE_REDACT=on"
            )
        if batch < 1:
            raise InvalidInput(f"a redaction batch is at least 1 message, not {batch}")
        run = RedactionRun(applied=apply, fingerprint=policy.fingerprint)
        counts: Counter[str] = Counter()
        saved = None if restart else self.redaction_cursor()
        after = saved[1] if saved is not None and saved[0] == run.fingerprint else 0
        run.resumed_after = run.last_id = after
        high = self.store.read(lambda conn: conn.execute(select(func.max(M.id))).scalar())
        high = int(high or 0)
        quiet = 0
        saved_through = after
        while after < high:
            rows = self.store.read(partial(_read_batch, after=after, high=high, batch=batch))
            if not rows:
                break
            last = int(rows[-1][0])
            found: Counter[str] = Counter()
            hits = [int(row[0]) for row in rows if _redacted_row(policy, row, found)]
            run.rows_scanned += len(rows)
            quiet = quiet + 1 if not hits else 0
            if not apply:
                counts.update(found)
                run.rows_matched += len(hits)
            elif hits or quiet >= CURSOR_EVERY:
                written, changed = self.store.write(
                    partial(
                        _write_batch, policy=policy, ids=hits, cursor=f"{run.fingerprint}:{last}"
                    )
                )
                counts.update(written)
                run.rows_matched += changed
                saved_through, quiet = last, 0
            after = run.last_id = last
            run.counts = dict(counts)
            if progress is not None:
                progress(run)
        if apply and run.last_id > saved_through:
            cursor = f"{run.fingerprint}:{run.last_id}"
            self.store.write(partial(_write_batch, policy=policy, ids=[], cursor=cursor))
        run.counts = dict(counts)
        run.complete = True
        return run
