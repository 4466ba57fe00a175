"""What differs between SQLite and PostgreSQL when hermes-store migrates, adopts, checks
and copies a database: the `migration` part of each dialect (runtime/backends.py), one
`MigrationDialect` per database kind, reached as `dialect_for(bind).migration`. Every
such difference of `migrate`, `adoption` and `copy` lives here or in the dialect's
capabilities, once; those modules stay written once for both.

The revisions have their own frozen counterpart (migrations/_dialects.py): what a
released revision does must not follow changes made here.
"""

from __future__ import annotations

import hashlib
from abc import ABC, abstractmethod
from collections import Counter
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from typing import TYPE_CHECKING, Any, ClassVar

from alembic.migration import MigrationContext
from alembic.operations import ops
from sqlalchemy import Connection, Engine, Identity, inspect, text
from sqlalchemy.sql.elements import ColumnElement

from ..contract import PG_MIGRATION_LOCK
from ..errors import CopyError, FTSUnavailable, MigrationError, NotAHermesDatabase
from ..models import metadata
from ..runtime.backends import dialect_named
from ..search import maintenance
from ..sqlite.damage import quick_check

if TYPE_CHECKING:  # adoption asks this module for its catalogue
    from .adoption import DatabaseShape

#: PostgreSQL column types and what a value must be to fit them (copy checks a batch
#: before writing it, so the error names the row; SQLite's columns take any value).
_PG_INT_RANGES = {
    "smallint": 2**15,
    "integer": 2**31,
    "bigint": 2**63,
}
_PG_TEXT_TYPES = {"text", "character varying", "character"}
_PG_FLOAT_TYPES = {"double precision", "real"}


class MigrationDialect(ABC):
    """The interface; see SQLiteMigrationDialect and PostgreSQLMigrationDialect."""

    name: ClassVar[str]
    #: PostgreSQL checks a foreign key at every statement (SQLite's copy target has them
    #: off): a row whose parent comes later in key order is linked afterwards.
    checks_foreign_keys_per_statement: ClassVar[bool]

    # -- catalogue (adoption) ---------------------------------------------------------

    @abstractmethod
    def catalogue(self, conn: Connection) -> tuple[set[str], set[str]]:
        """(tables and views, indexes) of the database's own schema."""

    @abstractmethod
    def column_flags(self, conn: Connection, table: str) -> dict[str, tuple[int, int]]:
        """column -> (notnull, position in the primary key or 0)."""

    # -- migration runs -----------------------------------------------------------------

    @abstractmethod
    def migration_transaction(
        self, conn: Connection, run: MigrationContext
    ) -> AbstractContextManager[None]:
        """One transaction around a whole Alembic run."""

    @abstractmethod
    def refuse(self, shape: DatabaseShape) -> None:
        """Raise NotAHermesDatabase for a database this backend does not migrate."""

    def probe_search(self, conn: Connection) -> None:
        """Fail early when the search machinery the revisions need is missing."""
        return None

    def integrity(self, conn: Connection) -> list[str]:
        """["ok"] or the problems the database reports about its own pages."""
        return ["ok"]

    def drop_reflection_gaps(self, conn: Connection, upgrade_ops: ops.UpgradeOps) -> None:
        """Remove what autogenerate reports as drift but is how this backend stores the
        models (see each backend)."""
        return None

    # -- copy ---------------------------------------------------------------------------

    def key_order(self, column: ColumnElement[Any], *, is_text: bool) -> ColumnElement[Any]:
        """A key column to ORDER BY, so both backends order text keys byte-wise."""
        return column

    def snapshot(self, conn: Connection) -> Connection:
        """`conn` set up so every read of one copy sees the same state (a read
        transaction on SQLite is a snapshot already)."""
        return conn

    def copy_target(self, conn: Connection) -> Connection:
        """`conn` set up for the copy's write transactions."""
        return conn

    def value_types(self, conn: Connection, table: str) -> dict[str, str] | None:
        """column -> type for the columns whose values copy must check before writing
        (None: every column takes any value)."""
        return None

    def unfit_value(self, value: object, column_type: str) -> str | None:
        """Why a column of `column_type` (from value_types) cannot hold `value` as it is,
        or None when it can."""
        return None

    @abstractmethod
    def ids_handed_out(self, conn: Connection, table: str, column: str) -> int:
        """The largest id the database's counter for `table.column` has handed out (0
        when it keeps none)."""

    @abstractmethod
    def raise_id_counter(self, conn: Connection, table: str, column: str, floor: int) -> None:
        """Make the next id of `table.column` larger than `floor` (in its own transaction)."""

    def finish_copy(self, engine: Engine) -> None:
        """Whatever the target needs once every row is in."""
        return None


class SQLiteMigrationDialect(MigrationDialect):
    name = "sqlite"
    checks_foreign_keys_per_statement = False

    def catalogue(self, conn: Connection) -> tuple[set[str], set[str]]:
        rows = conn.execute(text("SELECT type, name FROM sqlite_master")).all()
        tables = {str(r.name) for r in rows if r.type in ("table", "view")}
        return tables, {str(r.name) for r in rows if r.type == "index"}

    def column_flags(self, conn: Connection, table: str) -> dict[str, tuple[int, int]]:
        rows = conn.exec_driver_sql(f'PRAGMA table_info("{table}")').mappings().all()
        return {str(r["name"]): (int(r["notnull"]), int(r["pk"])) for r in rows}

    @contextmanager
    def migration_transaction(self, conn: Connection, run: MigrationContext) -> Iterator[None]:
        """Foreign keys off for the run (a PRAGMA inside a transaction does nothing, so
        it is set before BEGIN) and checked before commit: a run that would add
        violations is rolled back whole."""
        driver = conn.connection.driver_connection
        assert driver is not None
        driver.execute("PRAGMA foreign_keys=OFF")
        try:
            with run.begin_transaction():
                before = _fk_violations(conn)
                sessions_before = _session_ids_digest(conn)
                yield
                sessions_changed = sessions_before not in (None, _session_ids_digest(conn))
                # (messages rows that already pointed nowhere count as new here: the run
                # removed session ids, so refusing is the safe answer)
                new = _fk_violations(conn, with_messages=sessions_changed) - before
                if new:
                    details = ", ".join(f"{t} -> {p}: {n}" for (t, p), n in sorted(new.items()))
                    raise MigrationError(
                        f"the migration would leave foreign-key violations ({details}); "
                        "nothing was changed"
                    )
        finally:
            driver.execute("PRAGMA foreign_keys=ON")

    def refuse(self, shape: DatabaseShape) -> None:
        if shape.kind == "foreign":
            raise NotAHermesDatabase(
                "the database holds tables but no Hermes sessions/messages tables; "
                "point --url at a Hermes state.db"
            )

    def probe_search(self, conn: Connection) -> None:
        try:
            conn.exec_driver_sql(
                "CREATE VIRTUAL TABLE temp._hermes_fts5_probe USING fts5(x, tokenize='trigram')"
            )
            conn.exec_driver_sql("DROP TABLE temp._hermes_fts5_probe")
        except Exception as exc:  # noqa: BLE001
            version = conn.exec_driver_sql("select sqlite_version()").scalar()
            raise FTSUnavailable(
                f"this SQLite ({version}) lacks FTS5 or its trigram tokenizer ({exc}); "
                "use a Python linked against SQLite 3.34+"
            ) from exc

    def integrity(self, conn: Connection) -> list[str]:
        return quick_check(conn)

    def drop_reflection_gaps(self, conn: Connection, upgrade_ops: ops.UpgradeOps) -> None:
        """Two differences autogenerate reports on SQLite that are not drift:

        * a PRIMARY KEY column other than a rowid alias reports notnull=0 in PRAGMA
          table_info (SQLite permits NULL keys there) while the model says NOT NULL;
        * SQLAlchemy's SQLite reflection does not read ON DELETE from an inline
          `REFERENCES ... ON DELETE CASCADE`; PRAGMA foreign_key_list does, so the pair
          (remove_fk, add_fk) is dropped only when the pragma confirms the model's action.
        """
        for table_ops in list(upgrade_ops.ops):
            if not isinstance(table_ops, ops.ModifyTableOps):
                continue
            model = metadata.tables.get(table_ops.table_name)
            if model is None:
                continue
            pk = {c.name for c in model.primary_key.columns}
            kept: list[ops.MigrateOperation] = []
            fk_drops = {}
            for op in table_ops.ops:
                if isinstance(op, ops.AlterColumnOp) and op.column_name in pk:
                    op.modify_nullable = None
                    if not op.has_changes():
                        continue
                if isinstance(op, ops.DropConstraintOp) and op.constraint_type == "foreignkey":
                    fk_drops[id(op)] = op
                kept.append(op)
            actions = _fk_ondelete(conn, table_ops.table_name)
            for op in list(kept):
                if not isinstance(op, ops.CreateForeignKeyOp):
                    continue
                key = (op.local_cols[0], op.referent_table) if len(op.local_cols) == 1 else None
                wanted = str((op.kw or {}).get("ondelete") or "NO ACTION").upper()
                if key is None or actions.get(key) != wanted:
                    continue
                twin = next(
                    (
                        d
                        for d in kept
                        if isinstance(d, ops.DropConstraintOp)
                        and id(d) in fk_drops
                        and list(d.to_constraint().columns.keys()) == list(op.local_cols)  # type: ignore[attr-defined]
                    ),
                    None,
                )
                if twin is not None:
                    kept.remove(twin)
                    kept.remove(op)
            table_ops.ops = kept
            if not kept:
                upgrade_ops.ops.remove(table_ops)

    def copy_target(self, conn: Connection) -> Connection:
        """Foreign keys off (set outside a transaction, where SQLite honours it): a
        self-referencing row can come before its parent in key order, and the copy must
        reproduce the source even where the original left dangling references."""
        driver = conn.connection.driver_connection
        assert driver is not None
        driver.execute("PRAGMA foreign_keys=OFF")
        return conn.execution_options(hermes_begin="IMMEDIATE")

    def ids_handed_out(self, conn: Connection, table: str, column: str) -> int:
        has_sequence = conn.execute(
            text("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'sqlite_sequence'")
        ).first()
        if has_sequence is None:
            return 0
        seq = conn.execute(
            text("SELECT seq FROM sqlite_sequence WHERE name = :t"), {"t": table}
        ).scalar()
        return int(seq or 0)

    def raise_id_counter(self, conn: Connection, table: str, column: str, floor: int) -> None:
        with conn.begin():
            autoincrement = conn.execute(
                text(
                    "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = :t "
                    "AND upper(sql) LIKE '%AUTOINCREMENT%'"
                ),
                {"t": table},
            ).first()
            if autoincrement is None or floor <= 0:
                return
            updated = conn.execute(
                text("UPDATE sqlite_sequence SET seq = :f WHERE name = :t AND seq < :f"),
                {"t": table, "f": floor},
            ).rowcount
            if not updated:
                conn.execute(
                    text(
                        "INSERT INTO sqlite_sequence (name, seq) SELECT :t, :f WHERE NOT EXISTS "
                        "(SELECT 1 FROM sqlite_sequence WHERE name = :t)"
                    ),
                    {"t": table, "f": floor},
                )

    def finish_copy(self, engine: Engine) -> None:
        """The triggers indexed every copied row; finish anything pending, insist on a
        clean integrity check (rebuilding once if it is not), then a TRUNCATE
        checkpoint."""
        maintenance.run_backfill(engine, pacing=maintenance.Pacing.unpaced())

        def errors() -> list[str]:
            with engine.connect() as conn:
                found = maintenance.integrity_errors(conn)
                conn.rollback()
            return found

        if errors():
            maintenance.rebuild(engine)
            still = errors()
            if still:
                raise CopyError(f"the target's FTS index fails its integrity check: {still[0]}")
        with engine.connect() as conn:
            conn.exec_driver_sql("PRAGMA wal_checkpoint(TRUNCATE)")


#: The one child table whose full foreign-key check reads every row: O(messages), seconds
#: on a large file, twice, inside the migration's write transaction. Its one key,
#: session_id -> sessions(id), can only break if a message's session_id changes or a
#: session id disappears. No revision writes messages.session_id (a revision that ever
#: does must check it itself); a vanished session id is caught by comparing a digest of
#: the sessions ids before and after the run (O(sessions), flat memory), and then messages
#: is checked in full.
_BIG_CHILD = "messages"


def _fk_ondelete(conn: Connection, table: str) -> dict[tuple[str, ...], str]:
    rows = conn.exec_driver_sql(f'PRAGMA foreign_key_list("{table}")').mappings().all()
    return {(str(r["from"]), str(r["table"])): str(r["on_delete"]).upper() for r in rows}


def _fk_tables(conn: Connection) -> list[str]:
    rows = conn.exec_driver_sql(
        "SELECT name FROM sqlite_master WHERE type = 'table' AND sql LIKE '%REFERENCES%' "
        "ORDER BY name"
    ).scalars()
    return [str(name) for name in rows]


def _fk_violations(conn: Connection, *, with_messages: bool = False) -> Counter[tuple[str, str]]:
    found: Counter[tuple[str, str]] = Counter()
    for table in _fk_tables(conn):
        if table == _BIG_CHILD and not with_messages:
            continue
        rows = conn.exec_driver_sql(f'PRAGMA foreign_key_check("{table}")').all()
        found.update((str(r[0]), str(r[2])) for r in rows)
    return found


def _session_ids_digest(conn: Connection) -> str | None:
    if (
        conn.exec_driver_sql(
            "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'sessions'"
        ).first()
        is None
    ):
        return None
    digest = hashlib.sha256()
    for (session_id,) in conn.exec_driver_sql("SELECT id FROM sessions ORDER BY id"):
        digest.update(str(session_id).encode("utf-8", "surrogatepass") + b"\x00")
    return digest.hexdigest()


class PostgreSQLMigrationDialect(MigrationDialect):
    name = "postgresql"
    checks_foreign_keys_per_statement = True

    def catalogue(self, conn: Connection) -> tuple[set[str], set[str]]:
        # Only the schema on the search_path counts (one database may hold several).
        names = inspect(conn)
        return set(names.get_table_names()) | set(names.get_view_names()), set()

    def column_flags(self, conn: Connection, table: str) -> dict[str, tuple[int, int]]:
        info = inspect(conn)
        pk = info.get_pk_constraint(table).get("constrained_columns") or []
        return {
            str(c["name"]): (
                int(not c["nullable"]),
                pk.index(c["name"]) + 1 if c["name"] in pk else 0,
            )
            for c in info.get_columns(table)
        }

    @contextmanager
    def migration_transaction(self, conn: Connection, run: MigrationContext) -> Iterator[None]:
        """One transaction (PostgreSQL's DDL is transactional) holding an advisory lock,
        so that two hosts deploying at once migrate one after the other; the second then
        finds the database at head (READ COMMITTED: it reads the version after the
        lock)."""
        with run.begin_transaction():
            conn.execute(text("SELECT pg_advisory_xact_lock(:k)"), {"k": PG_MIGRATION_LOCK})
            yield

    def refuse(self, shape: DatabaseShape) -> None:
        # (the original never wrote to PostgreSQL: nothing there is adopted)
        if shape.kind in ("foreign", "legacy"):
            raise NotAHermesDatabase(
                "the PostgreSQL schema holds tables hermes-store did not create "
                f"({', '.join(sorted(shape.extra_tables or ['sessions', 'messages']))}); "
                "use an empty database or schema (hermes-store copy moves a state.db in)"
            )

    def drop_reflection_gaps(self, conn: Connection, upgrade_ops: ops.UpgradeOps) -> None:
        """messages.id is an identity on PostgreSQL (revision 0001); the model says
        autoincrement, which is the same promise, but autogenerate reads it as a default."""
        for table_ops in list(upgrade_ops.ops):
            if not isinstance(table_ops, ops.ModifyTableOps) or table_ops.table_name != "messages":
                continue
            kept = []
            for op in table_ops.ops:
                if (
                    isinstance(op, ops.AlterColumnOp)
                    and op.column_name == "id"
                    and isinstance(op.existing_server_default, Identity)
                ):
                    op.modify_server_default = False
                    if not op.has_changes():
                        continue
                kept.append(op)
            table_ops.ops = kept
            if not kept:
                upgrade_ops.ops.remove(table_ops)

    def key_order(self, column: ColumnElement[Any], *, is_text: bool) -> ColumnElement[Any]:
        # COLLATE "C" is byte order, which is SQLite's BINARY order for UTF-8
        return column.collate("C") if is_text else column

    def snapshot(self, conn: Connection) -> Connection:
        return conn.execution_options(isolation_level="REPEATABLE READ")

    def value_types(self, conn: Connection, table: str) -> dict[str, str] | None:
        rows = conn.execute(
            text(
                "SELECT column_name, data_type FROM information_schema.columns "
                "WHERE table_schema = current_schema() AND table_name = :t"
            ),
            {"t": table},
        )
        return {str(r[0]): str(r[1]) for r in rows}

    def unfit_value(self, value: object, column_type: str) -> str | None:
        held = type(value).__name__
        if column_type in _PG_TEXT_TYPES:
            # NUL characters are escaped by the driver (engine.install_pg_text_adapters)
            return None if isinstance(value, str) else f"holds a {held} value in a text column"
        if column_type in _PG_INT_RANGES:
            bound = _PG_INT_RANGES[column_type]
            if not isinstance(value, int):
                return f"holds a {held} value in an {column_type} column"
            if not -bound <= value < bound:
                return f"value {value} does not fit PostgreSQL {column_type}"
            return None
        if column_type in _PG_FLOAT_TYPES and not isinstance(value, int | float):
            return f"holds a {held} value in a {column_type} column"
        return None

    def _sequence(self, conn: Connection, table: str, column: str) -> str | None:
        value = conn.execute(
            text("SELECT pg_get_serial_sequence(:t, :c)"), {"t": table, "c": column}
        ).scalar()
        return None if value is None else str(value)

    def ids_handed_out(self, conn: Connection, table: str, column: str) -> int:
        seq = self._sequence(conn, table, column)
        if seq is None:
            return 0
        value = conn.execute(
            text("SELECT pg_sequence_last_value(CAST(:s AS regclass))"), {"s": seq}
        ).scalar()
        return int(value or 0)

    def raise_id_counter(self, conn: Connection, table: str, column: str, floor: int) -> None:
        with conn.begin():
            seq = self._sequence(conn, table, column)
            if seq is not None and floor > 0:
                conn.execute(
                    text("SELECT setval(CAST(:s AS regclass), GREATEST(:f, 1), true)"),
                    {"s": seq, "f": floor},
                )


dialect_named("sqlite").migration = SQLiteMigrationDialect()
dialect_named("postgresql").migration = PostgreSQLMigrationDialect()
