"""hermes-store's own: on PostgreSQL, the word index with the RUM access method where
the `rum` extension is available, so that a search's newest matches come from the index
in id order (docs/search-at-scale.md); GIN stays where it is not. SQLite: nothing.

RUM is not part of PostgreSQL itself (Debian's postgresql-15-rum; offered by the major
managed services): the extension is created only when pg_available_extensions lists it,
and a server that lists it but refuses to create it (a role without the right) keeps
GIN as well; the upgrade never fails for want of RUM. The index keeps its name, which
the search and the drift checks know (contract.PG_SEARCH_VECTOR_INDEX); which method it
uses is read from the catalogue (hermes_store.search.index_method).
"""

from __future__ import annotations

import sqlalchemy as sa

from hermes_store._migrations import _ops
from hermes_store.contract import PG_SEARCH_VECTOR_COLUMN, PG_SEARCH_VECTOR_INDEX

revision = "hs0003"
down_revision = "hs0002"
branch_labels = None
depends_on = None

_AVAILABLE = "SELECT 1 FROM pg_available_extensions WHERE name = 'rum'"
_METHOD = (
    "SELECT am.amname FROM pg_class AS c JOIN pg_am AS am ON am.oid = c.relam"
    " WHERE c.oid = to_regclass(:name)"
)
# The id is attached to each entry: `ORDER BY id <=| n` then walks the matches in id
# order straight from the index.
RUM_INDEX = (
    f"CREATE INDEX {PG_SEARCH_VECTOR_INDEX} ON messages USING rum "
    f"({PG_SEARCH_VECTOR_COLUMN} rum_tsvector_addon_ops, id) "
    f"WITH (attach = 'id', to = '{PG_SEARCH_VECTOR_COLUMN}')"
)
GIN_INDEX = (
    f"CREATE INDEX {PG_SEARCH_VECTOR_INDEX} ON messages USING gin ({PG_SEARCH_VECTOR_COLUMN})"
)


def _method() -> object:
    return _ops.scalar(_METHOD, {"name": PG_SEARCH_VECTOR_INDEX})


def _create_rum_extension(conn: sa.Connection) -> bool:
    """True once the extension is in this database; a refusal (no privilege) is rolled
    back to a savepoint, leaving the migration's transaction usable."""
    if _ops.scalar(_AVAILABLE) is None:
        return False
    savepoint = conn.begin_nested()
    try:
        conn.execute(sa.text("CREATE EXTENSION IF NOT EXISTS rum"))
    except sa.exc.DBAPIError:
        savepoint.rollback()
        return False
    savepoint.commit()
    return True


def upgrade() -> None:
    if not _ops.is_postgresql() or _method() == "rum":
        return
    if _create_rum_extension(_ops.bind()):
        _ops.execute(f"DROP INDEX IF EXISTS {PG_SEARCH_VECTOR_INDEX}")
        _ops.execute(RUM_INDEX)


def _drop_rum_extension(conn: sa.Connection) -> None:
    """The extension goes with the index unless something else uses it (DROP without
    CASCADE refuses then, and the refusal is rolled back to a savepoint)."""
    savepoint = conn.begin_nested()
    try:
        conn.execute(sa.text("DROP EXTENSION IF EXISTS rum"))
    except sa.exc.DBAPIError:
        savepoint.rollback()
        return
    savepoint.commit()


def downgrade() -> None:
    if not _ops.is_postgresql() or _method() != "rum":
        return
    _ops.execute(f"DROP INDEX IF EXISTS {PG_SEARCH_VECTOR_INDEX}")
    _ops.execute(GIN_INDEX)
    _drop_rum_extension(_ops.bind())
