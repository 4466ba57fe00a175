"""`state_meta`: string key/value pairs (maintenance throttles, FTS bookkeeping, and keys
other Hermes modules own). Unknown keys are preserved; the table is never cleared."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, TypeVar

from sqlalchemy import Connection, bindparam, delete, select

from ..runtime.engine import Prepared, first_value
from ._state_meta import MetaValue, set_statement, set_value, stored_text
from ._tables import META, K

if TYPE_CHECKING:
    from ..store import Store

T = TypeVar("T")


# Meta keys are read and written by every maintenance throttle and search top-up, so the
# statements are prepared once per dialect (the upsert, set_value, in _state_meta.py).
_GET = Prepared(select(K.value).where(K.key == bindparam("key")))
_DELETE = Prepared(delete(META).where(K.key == bindparam("key")))


def _get(conn: Connection, key: str) -> str | None:
    value = _GET.scalar(conn, {"key": key})
    return None if value is None else str(value)


def _delete(conn: Connection, key: str) -> bool:
    return _DELETE.run(conn, {"key": key}) > 0


class MetaRepository:
    """`state_meta`: string key/value pairs, read and written one key at a time.

    Args:
        store: the Store the repository works on.
    """

    def __init__(self, store: Store) -> None:
        self.store = store

    @staticmethod
    def _run(
        conn: Connection | None,
        unit: Callable[[Callable[[Connection], T]], T],
        work: Callable[[Connection], T],
    ) -> T:
        """`work` on the caller's `conn` (joining its transaction), else in a unit of
        work of its own (`unit`: the store's read or write)."""
        return work(conn) if conn is not None else unit(work)

    def get_meta(self, key: str, *, conn: Connection | None = None) -> str | None:
        """The value, or None when the key is missing. With `conn`, read inside that
        unit of work (so it sees the caller's own uncommitted writes).

        Args:
            key: the key.
            conn: a Connection of a unit of work to run in (its transaction is joined);
                None: a unit of work of its own.
        """
        if conn is not None:
            return _get(conn, key)
        value = self.store.read_one(_GET, {"key": key}, first_value)
        return None if value is None else str(value)

    def set_meta(self, key: str, value: MetaValue, *, conn: Connection | None = None) -> None:
        """Upsert; with `conn` the statement joins the caller's transaction (the
        original's `cursor=` argument), otherwise it is its own write.

        Args:
            key: the key.
            value: the value (stored as text; None stores NULL).
            conn: a Connection of a unit of work to run in (its transaction is joined);
                None: a unit of work of its own.
        """
        if conn is not None:
            set_value(conn, key, value)
            return
        statement = set_statement(self.store.dialect.sql.insert)
        self.store.write_one(statement, {"key": key, "value": stored_text(value)})

    def delete_meta(self, key: str, *, conn: Connection | None = None) -> bool:
        """True if the key existed.

        Args:
            key: the key.
            conn: a Connection of a unit of work to run in (its transaction is joined);
                None: a unit of work of its own.
        """
        return self._run(conn, self.store.write, lambda unit: _delete(unit, key))

    def list_meta_prefix(self, prefix: str) -> dict[str, str | None]:
        """Every key starting with `prefix` (taken literally: `%` and `_` are not
        wildcards), ordered by key.

        Args:
            prefix: the start of the ids (taken literally: no wildcards).
        """
        stmt = (
            select(K.key, K.value).where(K.key.startswith(prefix, autoescape=True)).order_by(K.key)
        )
        rows = self.store.read(lambda conn: conn.execute(stmt).all())
        # SQLite's LIKE ignores ASCII case; keys are case-sensitive.
        return {k: v for k, v in rows if k.startswith(prefix)}
