"""Copying a whole database to another URL: SQLite -> PostgreSQL, PostgreSQL -> SQLite,
SQLite -> SQLite.

The target is brought to head by `migrate.upgrade` first; the copy moves rows only, never
DDL, so the target has exactly the shape the migrations give its dialect. Every table is
read in keyset batches (ORDER BY the primary key, WHERE key > last, LIMIT n) inside one
read transaction on the source, so memory stays bounded and the rows come from one
snapshot. Each batch is one write transaction on the target: an interrupted copy leaves a
prefix of every table, and `resume=True` continues after the target's largest key.

What is not copied, and why:

* FTS5 virtual and shadow tables, the Alembic version table: the target's own migrations
  and triggers build them.
* `state_meta` keys that describe a SQLite file's own FTS index (`FTS_LOCAL_KEYS`): they
  are true of the source's index, not of the target's; copying them would make the
  target's backfill index rows a second time.
* Tables and columns the models do not know (a later build's leftovers): listed in the
  report as `not_copied`.

The project's own tables (`hermes_store_*` other than the version table: the idempotency
keys, the turn leases) are models too, so they are copied and verified like the rest: a
retry against the copy must still find the keys of the appends it retries, and a token
granted on the source stays fenced on the copy. The change feed and the
activity table (`NOT_COPIED_TABLES`) describe one database: the target's triggers write
its own as the rows go in.

Verification compares row counts and a SHA-256 per table over the rows in key order, each
value encoded with a type tag so both dialects give the same digest for the same data.
Key order must be the same on both sides, so text keys are compared byte-wise on
PostgreSQL (COLLATE "C"), which is SQLite's BINARY order for UTF-8.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sqlalchemy import (
    Connection,
    Engine,
    Table,
    bindparam,
    column,
    delete,
    func,
    insert,
    inspect,
    select,
    table,
    tuple_,
    update,
)
from sqlalchemy.engine import URL
from sqlalchemy.exc import DBAPIError
from sqlalchemy.sql.elements import ColumnElement
from sqlalchemy.sql.expression import TableClause
from sqlalchemy.types import TEXT

from .. import migrate
from ..config import SCHEMA_VERSION, resolve_url, shown_url, sqlite_path
from ..contract import FTS_TABLE, FTS_TRASH_PREFIX, NOT_COPIED_TABLES, VERSION_TABLE
from ..contract import META_FTS_LOCAL_KEYS as FTS_LOCAL_KEYS
from ..errors import CopyError, CopyValueError
from ..models import metadata
from ..repositories import telegram
from ..runtime.backends import dialect_for
from ..runtime.engine import make_engine
from ..runtime.retry import DEFAULT_RETRY
from .dialects import MigrationDialect

DEFAULT_BATCH_SIZE = 1000

#: The Telegram topic tables, defined by their owner (not in the models).
TELEGRAM_TABLES = telegram.TABLES

# --------------------------------------------------------------------------- results


@dataclass(frozen=True)
class TableDigest:
    """Rows and content digest of one table on both sides."""

    table: str
    rows_source: int
    rows_target: int
    digest_source: str
    digest_target: str

    @property
    def ok(self) -> bool:
        return self.rows_source == self.rows_target and self.digest_source == self.digest_target

    def as_dict(self) -> dict[str, Any]:
        return {
            "table": self.table,
            "rows_source": self.rows_source,
            "rows_target": self.rows_target,
            "digest_source": self.digest_source,
            "digest_target": self.digest_target,
            "ok": self.ok,
        }


@dataclass(frozen=True)
class CopyProgress:
    """Reported after every committed batch."""

    table: str
    rows_done: int  # rows of `table` now in the target (including a resumed prefix)
    rows_total: int  # rows of `table` in the source snapshot
    overall_done: int
    overall_total: int
    batches: int  # batches committed by this run so far


ProgressCallback = Callable[[CopyProgress], None]


@dataclass
class CopyReport:
    source: str
    target: str
    resumed: bool
    batch_size: int
    copied: dict[str, int] = field(default_factory=dict)  # rows written by this run
    batches: int = 0
    sequences: dict[str, int] = field(default_factory=dict)  # next id is above this
    not_copied: list[str] = field(default_factory=list)
    tables: list[TableDigest] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return all(t.ok for t in self.tables)

    def as_dict(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "source": self.source,
            "target": self.target,
            "resumed": self.resumed,
            "batch_size": self.batch_size,
            "batches": self.batches,
            "copied": dict(self.copied),
            "sequences": dict(self.sequences),
            "not_copied": list(self.not_copied),
            "tables": [t.as_dict() for t in self.tables],
        }


# --------------------------------------------------------------------------- tables


@dataclass(frozen=True)
class _Spec:
    """One table to copy: its columns in model order and its primary key."""

    model: Table
    columns: tuple[str, ...]
    pk: tuple[str, ...]  # empty: no primary key (copied and digested whole)

    @property
    def name(self) -> str:
        return self.model.name

    def clause(self) -> TableClause:
        # Untyped columns: values pass through as the driver returns them, so what is
        # digested and written is what is stored (no type processing on either side).
        return table(self.name, *(column(c) for c in self.columns))

    def key_positions(self) -> tuple[int, ...]:
        return tuple(self.columns.index(k) for k in self.pk)

    def self_references(self) -> tuple[tuple[str, str], ...]:
        """(column, referenced column) of foreign keys into the table itself."""
        return tuple(
            (fk.parent.name, fk.column.name)
            for fk in self.model.foreign_keys
            if fk.column.table is self.model
        )


def _spec(model: Table) -> _Spec:
    return _Spec(
        model=model,
        columns=tuple(c.name for c in model.columns),
        pk=tuple(c.name for c in model.primary_key.columns),
    )


def _specs(present: set[str]) -> list[_Spec]:
    """Parents before children; the Telegram tables only where they exist."""
    specs = [_spec(t) for t in metadata.sorted_tables if t.name not in NOT_COPIED_TABLES]
    specs += [_spec(t) for t in TELEGRAM_TABLES if t.name in present]
    return specs


def _filters(spec: _Spec, t: TableClause) -> list[ColumnElement[bool]]:
    if spec.name == "state_meta":
        return [t.c.key.not_in(sorted(FTS_LOCAL_KEYS))]
    return []


def _key_columns(spec: _Spec, t: TableClause, conn: Connection) -> list[ColumnElement[Any]]:
    backend = dialect_for(conn).migration
    return [
        backend.key_order(t.c[name], is_text=isinstance(spec.model.c[name].type, TEXT))
        for name in spec.pk
    ]


def _after(keys: Sequence[ColumnElement[Any]], last: tuple[Any, ...]) -> ColumnElement[bool]:
    if len(keys) == 1:
        return keys[0] > bindparam(None, last[0])
    return tuple_(*keys) > tuple_(*(bindparam(None, v) for v in last))


def _select_batch(
    conn: Connection, spec: _Spec, last: tuple[Any, ...] | None, limit: int
) -> list[tuple[Any, ...]]:
    t = spec.clause()
    keys = _key_columns(spec, t, conn)
    stmt = select(*(t.c[c] for c in spec.columns)).where(*_filters(spec, t))
    if last is not None:
        stmt = stmt.where(_after(keys, last))
    stmt = stmt.order_by(*keys).limit(limit)
    return [tuple(r) for r in conn.execute(stmt)]


def _select_all(conn: Connection, spec: _Spec) -> list[tuple[Any, ...]]:
    t = spec.clause()
    return [tuple(r) for r in conn.execute(select(*(t.c[c] for c in spec.columns)))]


def _count(conn: Connection, spec: _Spec) -> int:
    t = spec.clause()
    stmt = select(func.count()).select_from(t).where(*_filters(spec, t))
    return int(conn.execute(stmt).scalar() or 0)


def _max_key(conn: Connection, spec: _Spec) -> tuple[Any, ...] | None:
    t = spec.clause()
    keys = _key_columns(spec, t, conn)
    stmt = (
        select(*(t.c[k] for k in spec.pk))
        .where(*_filters(spec, t))
        .order_by(*(k.desc() for k in keys))
        .limit(1)
    )
    row = conn.execute(stmt).first()
    return None if row is None else tuple(row)


def iter_rows(
    conn: Connection, spec: _Spec, batch_size: int = DEFAULT_BATCH_SIZE
) -> Iterator[tuple[Any, ...]]:
    """Every row of a keyed table in key order, `batch_size` at a time."""
    positions = spec.key_positions()
    last: tuple[Any, ...] | None = None
    while True:
        rows = _select_batch(conn, spec, last, batch_size)
        yield from rows
        if len(rows) < batch_size:
            return
        last = tuple(rows[-1][p] for p in positions)


# --------------------------------------------------------------------------- digests


def _encode(value: Any) -> bytes:
    """A value as type tag, length and payload: the same bytes whichever dialect returned
    it, and no two different values (or types) alike."""
    if value is None:
        return b"N;"
    if isinstance(value, bool):  # a driver's boolean is an integer 0/1 in the schema
        value = int(value)
    if isinstance(value, int):
        payload, tag = str(value).encode(), b"I"
    elif isinstance(value, float):
        payload, tag = repr(value).encode(), b"F"
    elif isinstance(value, str):
        # surrogatepass: a lone surrogate a legacy file holds must digest, not crash
        payload, tag = value.encode("utf-8", "surrogatepass"), b"S"
    elif isinstance(value, bytes | bytearray | memoryview):
        payload, tag = bytes(value), b"B"
    else:
        payload, tag = f"{type(value).__name__}:{value}".encode(), b"O"
    return tag + str(len(payload)).encode() + b":" + payload


def _encode_row(row: Sequence[Any]) -> bytes:
    return b"".join(_encode(v) for v in row) + b"\n"


def table_digest(
    conn: Connection, spec: _Spec, batch_size: int = DEFAULT_BATCH_SIZE, *, absent: bool = False
) -> tuple[int, str]:
    """(rows, SHA-256) of a table: rows in key order (a table without a key, which is
    small, in the order of its encoded rows). An absent table digests as an empty one."""
    digest = hashlib.sha256()
    digest.update(_encode_row([spec.name, *spec.columns]))
    rows = 0
    if absent:
        return rows, digest.hexdigest()
    if spec.pk:
        for row in iter_rows(conn, spec, batch_size):
            digest.update(_encode_row(row))
            rows += 1
    else:
        for encoded in sorted(_encode_row(r) for r in _select_all(conn, spec)):
            digest.update(encoded)
            rows += 1
    return rows, digest.hexdigest()


# --------------------------------------------------------------------------- databases


def _render(url: URL) -> str:
    return shown_url(url)


def _tables(conn: Connection) -> set[str]:
    return set(inspect(conn).get_table_names())


def _revision(conn: Connection, tables: set[str]) -> tuple[str | None, int | None]:
    """(Alembic revision, upstream schema_version) of any dialect."""
    revision = None
    if VERSION_TABLE in tables:
        t = table(VERSION_TABLE, column("version_num"))
        value = conn.execute(select(t.c.version_num)).scalar()
        revision = None if value is None else str(value)
    stored = None
    if "schema_version" in tables:
        t = table("schema_version", column("version"))
        value = conn.execute(select(func.max(t.c.version))).scalar()
        stored = None if value is None else int(value)
    return revision, stored


def _at_head(conn: Connection, tables: set[str]) -> bool:
    return _revision(conn, tables) == (migrate.HEAD, SCHEMA_VERSION)


def _open_read_only(url: URL, role: str = "source") -> Engine:
    path = sqlite_path(url)
    if path is not None and not path.is_file():
        raise CopyError(f"no {role} database at {path}")
    return make_engine(url, read_only=True)


@contextmanager
def _snapshot(engine: Engine) -> Iterator[Connection]:
    """One read transaction, so every batch read through it sees the same state."""
    with engine.connect() as conn:
        conn = dialect_for(conn).migration.snapshot(conn)
        try:
            yield conn
        finally:
            conn.rollback()


def _check_source(conn: Connection, url: URL) -> set[str]:
    tables = _tables(conn)
    revision, stored = _revision(conn, tables)
    if (revision, stored) == (migrate.HEAD, SCHEMA_VERSION):
        return tables
    if not tables:
        raise CopyError(f"the source {_render(url)} is empty: nothing to copy")
    if stored is not None and stored > SCHEMA_VERSION:
        raise CopyError(
            f"the source {_render(url)} has schema_version {stored}, newer than the "
            f"{SCHEMA_VERSION} this hermes-store supports; upgrade hermes-store"
        )
    what = f"at revision {revision}" if revision else "not managed by hermes-store yet"
    raise CopyError(
        f"the source {_render(url)} is {what} (head is {migrate.HEAD}); copy reads only "
        f"databases at head and never changes its source: first run "
        f"hermes-store upgrade --url '{_render(url)}'"
    )


def _not_copied(conn: Connection, tables: set[str], specs: list[_Spec]) -> list[str]:
    known = {s.name for s in specs}
    skipped = sorted(
        t
        for t in tables
        if t not in known
        and t != VERSION_TABLE
        and t not in NOT_COPIED_TABLES
        and not t.startswith((FTS_TABLE, "sqlite_", FTS_TRASH_PREFIX))
    )
    insp = inspect(conn)
    for spec in specs:
        if spec.name not in tables:
            continue
        for col in insp.get_columns(spec.name):
            if col["name"] not in spec.columns and not col.get("computed"):
                skipped.append(f"{spec.name}.{col['name']}")
    return skipped


def _rows_present(conn: Connection, tables: set[str], specs: list[_Spec]) -> list[str]:
    """Tables of the target that hold data (a fresh upgrade's own rows do not count)."""
    found = []
    for spec in specs:
        if spec.name not in tables or not spec.pk:
            continue
        t = spec.clause()
        if conn.execute(select(t.c[spec.columns[0]]).where(*_filters(spec, t)).limit(1)).first():
            found.append(spec.name)
    return found


def _prepare_target(url: URL, specs: list[_Spec], resume: bool) -> None:
    """Refuse a target holding data (without resume), before anything touches it; then
    bring it to head."""
    path = sqlite_path(url)
    exists = path is None or (path.is_file() and path.stat().st_size > 0)
    if exists:
        engine = make_engine(url, read_only=True)
        try:
            with engine.connect() as conn:
                tables = _tables(conn)
                holding = _rows_present(conn, tables, specs)
                at_head = _at_head(conn, tables)
                conn.rollback()
        finally:
            engine.dispose()
        if holding and not resume:
            raise CopyError(
                f"the target {_render(url)} already holds data ({', '.join(holding)}); "
                "copy into an empty database, or pass --resume to continue an interrupted "
                "copy (nothing was changed)"
            )
        if holding and not at_head:
            raise CopyError(
                f"the target {_render(url)} holds data but is not at revision "
                f"{migrate.HEAD}, so it is not an interrupted copy; nothing was changed"
            )
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
    # Deferred: a fresh target has nothing to backfill, and a resumed one is finished
    # (and checked) after the rows are in.
    migrate.upgrade(url, defer_fts_backfill=True, fts_min_pause=0)


def _create_telegram_tables(conn: Connection, specs: list[_Spec]) -> None:
    wanted = {s.name for s in specs} & {t.name for t in TELEGRAM_TABLES}
    present = _tables(conn)
    conn.rollback()
    if not wanted or wanted <= present:
        return
    with conn.begin():
        telegram.create_tables(conn)


@contextmanager
def _target_connection(engine: Engine) -> Iterator[Connection]:
    """A connection for the copy's write transactions (see MigrationDialect.copy_target)."""
    with engine.connect() as conn:
        yield dialect_for(conn).migration.copy_target(conn)


def _check_values(
    spec: _Spec,
    rows: Sequence[tuple[Any, ...]],
    types: dict[str, str],
    target: str,
    backend: MigrationDialect,
) -> None:
    """Fail before a batch is written if the target cannot hold one of its values as it
    is; the error names the row and the column."""
    positions = spec.key_positions()
    for i, col in enumerate(spec.columns):
        kind = types.get(col)
        if kind is None:
            continue
        for row in rows:
            why = None if row[i] is None else backend.unfit_value(row[i], kind)
            if why is not None:
                key = tuple(row[p] for p in positions)
                raise CopyValueError(spec.name, key[0] if len(key) == 1 else key, col, why, target)


def _db_error(spec: _Spec, rows: Sequence[tuple[Any, ...]], exc: DBAPIError) -> CopyError:
    positions = spec.key_positions()

    def key(row: tuple[Any, ...]) -> Any:
        values = tuple(row[p] for p in positions)
        return values[0] if len(values) == 1 else values

    detail = " ".join(str(exc.orig or exc).split())
    where = f" (primary keys {key(rows[0])!r} to {key(rows[-1])!r})" if positions else ""
    return CopyError(
        f"writing a batch of {spec.name}{where} to the target failed, so that batch was "
        f"rolled back: {detail}"
    )


class _Writer:
    """Writes batches of one table to the target, one transaction each."""

    def __init__(self, conn: Connection, spec: _Spec, target: str) -> None:
        self.conn = conn
        self.spec = spec
        self.target = target
        self.backend = backend = dialect_for(conn).migration
        self.types = backend.value_types(conn, spec.name)
        # a parent later in key order is linked afterwards by _fix_self_references
        per_statement = backend.checks_foreign_keys_per_statement
        self.deferred = spec.self_references() if per_statement else ()
        self.t = spec.clause()

    def _dicts(self, rows: Sequence[tuple[Any, ...]]) -> list[dict[str, Any]]:
        out = [dict(zip(self.spec.columns, row, strict=True)) for row in rows]
        for col, ref in self.deferred:
            wanted = {d[col] for d in out if d[col] is not None}
            if not wanted:
                continue
            ref_col = self.t.c[ref]
            present = set(
                self.conn.execute(select(ref_col).where(ref_col.in_(sorted(wanted)))).scalars()
            )
            for d in out:
                if d[col] is not None and d[col] not in present:
                    d[col] = None
        return out

    def write(self, rows: Sequence[tuple[Any, ...]], *, replace: bool = False) -> None:
        if self.types is not None:
            _check_values(self.spec, rows, self.types, self.target, self.backend)

        def attempt() -> None:
            with self.conn.begin():
                if replace:
                    self.conn.execute(delete(self.t))
                if rows:
                    self.conn.execute(insert(self.t), self._dicts(rows))

        try:
            DEFAULT_RETRY.run(attempt)
        except DBAPIError as exc:
            raise _db_error(self.spec, rows, exc) from exc


def _fix_self_references(src: Connection, dst: Connection, spec: _Spec, batch_size: int) -> None:
    """Set the self-references held back while their parent was not yet copied."""
    refs = spec.self_references()
    if not refs or not dialect_for(dst).migration.checks_foreign_keys_per_statement:
        return
    t = spec.clause()
    positions = spec.key_positions()
    batch: list[tuple[Any, ...]] = []

    def flush() -> None:
        if not batch:
            return
        with dst.begin():
            for col, _ref in refs:
                i = spec.columns.index(col)
                stmt = (
                    update(t)
                    .where(*(t.c[k] == bindparam(f"k_{k}") for k in spec.pk))
                    .where(t.c[col].is_(None))
                    .values({col: bindparam(f"v_{col}")})
                )
                params = [
                    {
                        **{f"k_{k}": row[p] for k, p in zip(spec.pk, positions, strict=True)},
                        f"v_{col}": row[i],
                    }
                    for row in batch
                    if row[i] is not None
                ]
                if params:
                    try:
                        dst.execute(stmt, params)
                    except DBAPIError as exc:
                        raise _db_error(spec, batch, exc) from exc
        batch.clear()

    for row in iter_rows(src, spec, batch_size):
        if any(row[spec.columns.index(col)] is not None for col, _ in refs):
            batch.append(row)
            if len(batch) >= batch_size:
                flush()
    flush()


# --------------------------------------------------------------------------- sequences


def _integer_key(spec: _Spec) -> str | None:
    if len(spec.pk) != 1:
        return None
    name = spec.pk[0]
    return name if spec.model.c[name].type.python_type is int else None


def _sequence_floor(conn: Connection, spec: _Spec, col: str) -> int:
    """The largest id the database has handed out for `spec`'s key: its largest row, or
    more when rows at the end were deleted (SQLite's sqlite_sequence, a PostgreSQL
    sequence)."""
    t = spec.clause()
    highest = int(conn.execute(select(func.max(t.c[col]))).scalar() or 0)
    return max(highest, dialect_for(conn).migration.ids_handed_out(conn, spec.name, col))


def _raise_sequence(conn: Connection, spec: _Spec, col: str, floor: int) -> None:
    """Make the target's next id larger than every id the source handed out."""
    dialect_for(conn).migration.raise_id_counter(conn, spec.name, col, floor)


# --------------------------------------------------------------------------- public API


def _same_database(a: URL, b: URL) -> bool:
    pa, pb = sqlite_path(a), sqlite_path(b)
    if pa is not None and pb is not None:
        return Path(pa).resolve() == Path(pb).resolve()
    return a.render_as_string(hide_password=False) == b.render_as_string(hide_password=False)


def copy_database(
    source_url: str | URL,
    target_url: str | URL,
    *,
    resume: bool = False,
    batch_size: int = DEFAULT_BATCH_SIZE,
    on_progress: ProgressCallback | None = None,
) -> CopyReport:
    """Copy every row of the database at `source_url` (at head; never changed) into the
    one at `target_url` (brought to head; must be empty unless `resume`), then verify.

    An exception from `on_progress` stops the copy after a committed batch; run again
    with `resume=True` to continue."""
    if batch_size < 1:
        raise CopyError(f"the batch size must be at least 1, not {batch_size}")
    source, target = resolve_url(source_url), resolve_url(target_url)
    if _same_database(source, target):
        raise CopyError("the source and the target are the same database")
    report = CopyReport(
        source=_render(source), target=_render(target), resumed=resume, batch_size=batch_size
    )
    src_engine = _open_read_only(source)
    try:
        with _snapshot(src_engine) as src:
            src_tables = _check_source(src, source)
            specs = _specs(src_tables)
            report.not_copied = _not_copied(src, src_tables, specs)
            _prepare_target(target, specs, resume)
            dst_engine = make_engine(target)
            try:
                _copy_rows(src, src_tables, dst_engine, specs, batch_size, report, on_progress)
                dialect_for(dst_engine).migration.finish_copy(dst_engine)
            finally:
                dst_engine.dispose()
    finally:
        src_engine.dispose()
    report.tables = verify(source, target, batch_size=batch_size)
    return report


def _copy_rows(
    src: Connection,
    src_tables: set[str],
    dst_engine: Engine,
    specs: list[_Spec],
    batch_size: int,
    report: CopyReport,
    on_progress: ProgressCallback | None,
) -> None:
    totals = {s.name: _count(src, s) for s in specs if s.name in src_tables}
    overall_total = sum(totals.values())
    with _target_connection(dst_engine) as dst:
        _create_telegram_tables(dst, specs)
        dst_tables = _tables(dst)
        dst.rollback()
        done = {s.name: _count(dst, s) if s.pk else 0 for s in specs if s.name in src_tables}
        dst.rollback()
        target = report.target

        def progress(spec: _Spec) -> None:
            if on_progress is not None:
                on_progress(
                    CopyProgress(
                        table=spec.name,
                        rows_done=done[spec.name],
                        rows_total=totals[spec.name],
                        overall_done=sum(done.values()),
                        overall_total=overall_total,
                        batches=report.batches,
                    )
                )

        for spec in specs:
            if spec.name not in src_tables or spec.name not in dst_tables:
                continue
            writer = _Writer(dst, spec, target)
            dst.rollback()
            copied = 0
            if not spec.pk:
                rows = _select_all(src, spec)
                writer.write(rows, replace=True)
                copied = len(rows)
                done[spec.name] = copied
                report.batches += 1
                report.copied[spec.name] = copied
                progress(spec)
                continue
            last = _max_key(dst, spec)
            dst.rollback()
            positions = spec.key_positions()
            while True:
                rows = _select_batch(src, spec, last, batch_size)
                if not rows:
                    break
                writer.write(rows)
                copied += len(rows)
                done[spec.name] += len(rows)
                report.batches += 1
                report.copied[spec.name] = copied
                last = tuple(rows[-1][p] for p in positions)
                progress(spec)
                if len(rows) < batch_size:
                    break
            report.copied[spec.name] = copied
        for spec in specs:
            if spec.name in src_tables and spec.name in dst_tables:
                _fix_self_references(src, dst, spec, batch_size)
        for spec in specs:
            col = _integer_key(spec)
            if col is None or spec.name not in src_tables:
                continue
            floor = _sequence_floor(src, spec, col)
            _raise_sequence(dst, spec, col, floor)
            report.sequences[spec.name] = floor


def verify(
    source_url: str | URL, target_url: str | URL, *, batch_size: int = DEFAULT_BATCH_SIZE
) -> list[TableDigest]:
    """Row counts and content digests of every copied table on both databases (neither is
    changed). A table missing on one side counts as empty there."""
    source, target = resolve_url(source_url), resolve_url(target_url)
    src_engine = _open_read_only(source)
    try:
        dst_engine = _open_read_only(target, "target")
    except CopyError:
        src_engine.dispose()
        raise
    try:
        with _snapshot(src_engine) as src, _snapshot(dst_engine) as dst:
            src_tables, dst_tables = _tables(src), _tables(dst)
            specs = _specs(src_tables | dst_tables)
            out = []
            for spec in specs:
                rows_s, digest_s = table_digest(
                    src, spec, batch_size, absent=spec.name not in src_tables
                )
                rows_t, digest_t = table_digest(
                    dst, spec, batch_size, absent=spec.name not in dst_tables
                )
                out.append(TableDigest(spec.name, rows_s, rows_t, digest_s, digest_t))
            return out
    finally:
        src_engine.dispose()
        dst_engine.dispose()
