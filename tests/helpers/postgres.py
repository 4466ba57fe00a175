"""A PostgreSQL database of its own for each test, cloned from a template at head."""

from __future__ import annotations

import hashlib
import os
import queue
import threading
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from sqlalchemy import create_engine, text
from sqlalchemy.pool import NullPool

#: The server the tests use (the machine's own; trust auth). Each test gets its own
#: database, created from template0 (or a template at head) and dropped afterwards.
PG_ENV = "HERMES_STORE_TEST_PG"
PG_ADMIN_URL = os.environ.get(PG_ENV, "postgresql+psycopg://root@127.0.0.1:5432/test")
_pg_state: dict[str, str | None] = {}


def pg_unavailable() -> str | None:
    """None when the test server answers, else the reason it cannot be used."""
    if "reason" not in _pg_state:
        try:
            import psycopg  # noqa: F401
        except ImportError:
            _pg_state["reason"] = "psycopg is not installed (pip install -e '.[postgres]')"
            return _pg_state["reason"]
        engine = create_engine(PG_ADMIN_URL, poolclass=NullPool)
        try:
            with engine.connect() as conn:
                conn.execute(text("SELECT 1"))
            _pg_state["reason"] = None
        except Exception as exc:  # noqa: BLE001 (any failure means: no server)
            _pg_state["reason"] = f"no PostgreSQL server at {PG_ADMIN_URL}: {exc}"
        finally:
            engine.dispose()
    return _pg_state["reason"]


def require_pg() -> None:
    """Skip without a server, except in CI, where a skipped PostgreSQL suite is a failure."""
    reason = pg_unavailable()
    if reason is None:
        return
    if os.environ.get("CI"):
        pytest.fail(f"CI must run the PostgreSQL tests: {reason}")
    pytest.skip(reason)


def _admin_execute(sql: str) -> None:
    engine = create_engine(PG_ADMIN_URL, poolclass=NullPool, isolation_level="AUTOCOMMIT")
    try:
        with engine.connect() as conn:
            conn.execute(text(sql))
    finally:
        engine.dispose()


def _pg_url(name: str) -> str:
    from sqlalchemy.engine import make_url

    return make_url(PG_ADMIN_URL).set(database=name).render_as_string(hide_password=False)


def _head_template() -> str:
    """A database at head that per-test databases are cloned from (CREATE DATABASE ...
    TEMPLATE copies files: far cheaper than replaying 23 revisions per test). One per
    test process and per state of the migrations, so a changed revision is never stale."""
    if "template" in _pg_state:
        return str(_pg_state["template"])
    from hermes_store import migrate

    digest = hashlib.sha256()
    for path in sorted(Path(migrate.script_location()).rglob("*.py")):
        digest.update(path.read_bytes())
    # per process: concurrent pytest runs (and their workers) never share a template
    name = f"hs_tpl_{os.getpid()}_{digest.hexdigest()[:12]}"
    _admin_execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    _admin_execute(f'CREATE DATABASE "{name}" TEMPLATE template0 ENCODING \'UTF8\'')
    migrate.upgrade(_pg_url(name))
    _pg_state["template"] = name
    return name


class _DatabaseMaker:
    """Creates the next test's database ahead and drops the last one behind, on a thread of
    its own (one per test process): a DROP DATABASE waits for a checkpoint of the whole
    server, and neither that wait nor the copy of the template needs to hold up a test.
    Every test still gets a database nobody else has used, cloned from the same template,
    and `drain()` (at the end of the session) drops what is left."""

    def __init__(self) -> None:
        self._jobs: queue.Queue[tuple[str, str] | None] = queue.Queue()
        self._lock = threading.Lock()
        #: template -> databases created from it and not handed out yet
        self._ready: dict[str, list[str]] = {}
        #: templates with a creation queued
        self._pending: set[str] = set()
        self.errors: list[str] = []
        self._thread: threading.Thread | None = None

    def _run(self) -> None:
        while (job := self._jobs.get()) is not None:
            action, name = job
            try:
                if action == "create":
                    made = _create_from(name)
                    with self._lock:
                        self._ready.setdefault(name, []).append(made)
                else:
                    _admin_execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
            except Exception as exc:  # noqa: BLE001 (a test whose database was not made
                # ahead makes its own; a database left behind fails the next test)
                if action == "drop":
                    self.errors.append(f"{name}: {exc}")
            finally:
                if action == "create":
                    with self._lock:
                        self._pending.discard(name)

    def _submit(self, action: str, name: str) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="pg-databases", daemon=True)
            self._thread.start()
        self._jobs.put((action, name))

    def take(self, template: str) -> str:
        """A new database cloned from `template`: one made ahead if there is one (and the
        next one queued), else one made now."""
        if self.errors:
            errors, self.errors = self.errors, []
            raise RuntimeError(f"an earlier test's database could not be dropped: {errors}")
        with self._lock:
            ready = self._ready.get(template)
            name = ready.pop() if ready else None
            queue_next = template not in self._pending
            if queue_next:
                self._pending.add(template)
        if queue_next:
            self._submit("create", template)
        return name if name is not None else _create_from(template)

    def give_back(self, name: str) -> None:
        self._submit("drop", name)

    def drain(self) -> list[str]:
        """Finish the queued work and drop the databases made ahead; the drops that
        failed since the last test."""
        if self._thread is not None:
            self._jobs.put(None)
            self._thread.join()
            self._thread = None
        with self._lock:
            left = [name for names in self._ready.values() for name in names]
            self._ready.clear()
        for name in left:
            _admin_execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        errors, self.errors = self.errors, []
        return errors


def _create_from(template: str) -> str:
    name = f"hs_test_{uuid.uuid4().hex[:16]}"
    _admin_execute(f'CREATE DATABASE "{name}" TEMPLATE "{template}" ENCODING \'UTF8\'')
    return name


databases = _DatabaseMaker()


@contextmanager
def pg_database(*, at_head: bool = False) -> Iterator[str]:
    """A new PostgreSQL database (its URL), empty or at head, dropped after the exit."""
    require_pg()
    name = databases.take(_head_template() if at_head else "template0")
    try:
        yield _pg_url(name)
    finally:
        databases.give_back(name)


# The word index at head has two forms (revision hs0003): RUM where the server offers the
# extension, GIN where it does not. The committed dump (tests/migrations/schema/postgresql_head.sql)
# holds the GIN form; a dump from a server with RUM is read in that form, so the schema
# tests judge everything else the same on both kinds of server
# (tests/search/test_search_bounds.py checks which form a database has, and why).
_RUM_EXTENSION = "\n\nCREATE EXTENSION rum;"
_RUM_INDEX = (
    "CREATE INDEX idx_messages_search_vector ON messages USING rum (search_vector "
    'rum_tsvector_addon_ops, id) WITH (attach=id, "to"=search_vector);'
)
_GIN_INDEX = "CREATE INDEX idx_messages_search_vector ON messages USING gin (search_vector);"


def with_gin_word_index(dump: str) -> str:
    """`dump` (schema_snapshot.dump_text) with a RUM word index read as the GIN one."""
    if _RUM_INDEX not in dump:
        return dump
    return dump.replace(_RUM_EXTENSION, "", 1).replace(_RUM_INDEX, _GIN_INDEX)
