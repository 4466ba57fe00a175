"""`SET CONSTRAINTS ALL IMMEDIATE` and the feed's counter lock (issue 35, item 10): the
hazard docs/postgresql.md describes is real (another writer's commit waits for the
transaction that ran it), and the remedy it gives (deferring the feed's stamp trigger
again by name) leaves other writers unblocked."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import psycopg
import pytest
from sqlalchemy.engine import make_url

from hermes_store.contract import FEED_STAMP_TRIGGER
from hermes_store.repositories.sessions import SessionRepository
from hermes_store.store import Store

DOCS = Path(__file__).resolve().parents[2] / "docs"


def _connect(url: str) -> psycopg.Connection[Any]:
    u = make_url(url)
    return psycopg.connect(host=u.host, port=u.port or 5432, user=u.username, dbname=u.database)


def _other_writer_commits(url: str, holder_sql: list[str]) -> bool:
    """Whether a second writer's append commits while a first transaction that ran
    `holder_sql` and wrote is still open (False: its commit hit lock_timeout)."""
    with _connect(url) as holder, _connect(url) as other:
        for sql in holder_sql:
            holder.execute(sql)
        holder.execute("INSERT INTO messages (session_id, role, content, timestamp) "
                       "VALUES ('a', 'user', 'x', 1)")  # fmt: skip
        other.execute("SET lock_timeout = '1s'")
        other.execute("INSERT INTO messages (session_id, role, content, timestamp) "
                      "VALUES ('b', 'user', 'y', 1)")  # fmt: skip
        try:
            other.commit()
        except psycopg.errors.LockNotAvailable:
            return False
        finally:
            holder.rollback()
        return True


def test_set_constraints_all_immediate_and_the_documented_remedy(pg_fresh_db: str) -> None:
    with Store(pg_fresh_db) as store:
        for sid in ("a", "b"):
            SessionRepository(store).create_session(sid, "cli")
    assert _other_writer_commits(pg_fresh_db, [])
    assert not _other_writer_commits(pg_fresh_db, ["SET CONSTRAINTS ALL IMMEDIATE"])
    remedy = ["SET CONSTRAINTS ALL IMMEDIATE", f"SET CONSTRAINTS {FEED_STAMP_TRIGGER} DEFERRED"]
    assert _other_writer_commits(pg_fresh_db, remedy)


@pytest.mark.parametrize("page", ["postgresql.md", "change-feed.md"])
def test_the_docs_say_it_where_a_user_looks(page: str) -> None:
    text = " ".join((DOCS / page).read_text(encoding="utf-8").split())
    assert "SET CONSTRAINTS ALL IMMEDIATE" in text
    assert f"SET CONSTRAINTS {FEED_STAMP_TRIGGER} DEFERRED" in text
