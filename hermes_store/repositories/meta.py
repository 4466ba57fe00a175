"""`state_meta`: string key/value pairs (maintenance throttles, FTS bookkeeping, and keys
other Hermes modules own). Unknown keys are preserved; the table is never cleared."""

from __future__ import annotations

from sqlalchemy import Connection, delete, select

from ..models import StateMeta
from ..store import Store
from ._dialect import upsert_insert
from ._encoding import scrub

MetaValue = str | int | float | None


def _text(value: MetaValue) -> str | None:
    # Every value is stored as text, as the original does (a float epoch becomes '1.5').
    return None if value is None else scrub(str(value))


class MetaRepository:
    def __init__(self, store: Store) -> None:
        self.store = store

    def get_meta(self, key: str, *, session: Connection | None = None) -> str | None:
        """The value, or None when the key is missing. With `session`, read inside that
        unit of work (so it sees the caller's own uncommitted writes)."""
        stmt = select(StateMeta.value).where(StateMeta.key == key)
        if session is not None:
            return session.execute(stmt).scalar_one_or_none()
        with self.store.read() as s:
            return s.execute(stmt).scalar_one_or_none()

    def set_meta(self, key: str, value: MetaValue, *, session: Connection | None = None) -> None:
        """Upsert; with `session` the statement joins the caller's transaction (the
        original's `cursor=` argument), otherwise it is its own write."""

        def work(s: Connection) -> None:
            stmt = upsert_insert(s, StateMeta).values(key=key, value=_text(value))
            s.execute(
                stmt.on_conflict_do_update(
                    index_elements=[StateMeta.key], set_={"value": stmt.excluded.value}
                )
            )

        if session is not None:
            work(session)
        else:
            self.store.write(work)

    def delete_meta(self, key: str, *, session: Connection | None = None) -> bool:
        """True if the key existed."""

        def work(s: Connection) -> bool:
            result = s.execute(delete(StateMeta).where(StateMeta.key == key))
            return result.rowcount > 0

        return work(session) if session is not None else self.store.write(work)

    def list_meta_prefix(self, prefix: str) -> dict[str, str | None]:
        """Every key starting with `prefix` (taken literally: `%` and `_` are not
        wildcards), ordered by key."""
        stmt = (
            select(StateMeta.key, StateMeta.value)
            .where(StateMeta.key.startswith(prefix, autoescape=True))
            .order_by(StateMeta.key)
        )
        with self.store.read() as s:
            rows = s.execute(stmt).all()
        # SQLite's LIKE ignores ASCII case; keys are case-sensitive.
        return {k: v for k, v in rows if k.startswith(prefix)}
