"""Shared fixtures for the hermes-store test suite.

Every test works on real SQLite files under its own `tmp_path`; nothing is shared
between tests (safe under pytest-xdist). The legacy fixture databases written by the
original Hermes code are located relative to the repository
(`<repo>/../shared/fixtures/legacy`) or through `HERMES_STORE_FIXTURES`, and are only
ever *copied*: opening them in place would create sidecar files or change them.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import sqlite3
import subprocess
import sys
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Connection, Engine, create_engine, text
from sqlalchemy.pool import NullPool

REPO_ROOT = Path(__file__).resolve().parents[1]
FIXTURES_ENV = "HERMES_STORE_FIXTURES"
#: Schema versions the original stored (3 never existed as a stored version).
EXPECTED_VERSIONS: tuple[int, ...] = (1, 2, *range(4, 24))


def fixtures_dir() -> Path:
    override = os.environ.get(FIXTURES_ENV)
    if override:
        return Path(override).expanduser().resolve()
    return REPO_ROOT.parent / "shared" / "fixtures" / "legacy"


def fixture_file(version: int, suffix: str = "db") -> Path:
    return fixtures_dir() / f"state_v{version:02d}.{suffix}"


def available_versions() -> list[int]:
    """Versions whose fixture database exists; the expected list when the directory is
    missing (each of those tests then skips with a reason)."""
    directory = fixtures_dir()
    if not directory.is_dir():
        return list(EXPECTED_VERSIONS)
    found = sorted(
        int(p.stem.removeprefix("state_v"))
        for p in directory.glob("state_v*.db")
        if p.stem.removeprefix("state_v").isdigit()
    )
    return found or list(EXPECTED_VERSIONS)


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """A test taking `fixture_version` runs once per fixture database present."""
    if "fixture_version" in metafunc.fixturenames:
        metafunc.parametrize("fixture_version", available_versions(), ids=lambda v: f"v{v:02d}")


def _require_fixtures() -> Path:
    directory = fixtures_dir()
    if not directory.is_dir():
        pytest.skip(
            f"legacy fixture databases not found at {directory} "
            f"(set {FIXTURES_ENV} to the directory holding state_vNN.db)"
        )
    return directory


# --------------------------------------------------------------------------- helpers


def url_for(path: Path | str) -> str:
    """An absolute SQLite URL for a file path."""
    return f"sqlite:///{Path(path).resolve()}"


def plain_engine(url_or_path: Path | str) -> Engine:
    """A plain SQLAlchemy engine (no hermes-store listeners) for inspecting a file."""
    url = str(url_or_path)
    if "://" not in url:
        url = url_for(url)
    return create_engine(url, poolclass=NullPool)


@contextmanager
def connect(url_or_path: Path | str) -> Iterator[Connection]:
    engine = plain_engine(url_or_path)
    try:
        with engine.connect() as conn:
            yield conn
    finally:
        engine.dispose()


def snapshot(url_or_path: Path | str) -> dict[str, Any]:
    from hermes_store import schema_snapshot

    with connect(url_or_path) as conn:
        return schema_snapshot.snapshot(conn)


def _sort_key(row: tuple[Any, ...]) -> str:
    return repr(row)


def dump(path: Path | str) -> dict[str, list[tuple[Any, ...]]]:
    """Every row of every table (ordinary, virtual, FTS shadow, sqlite_sequence, the
    Alembic version table), in a deterministic order."""
    # A read-write handle (used only to read): a read-only one would leave -wal/-shm
    # files behind on a WAL database.
    con = sqlite3.connect(str(path))
    try:
        names = [
            r[0]
            for r in con.execute(
                "SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name"
            )
        ]
        out: dict[str, list[tuple[Any, ...]]] = {}
        for name in names:
            rows = con.execute(f'SELECT * FROM "{name}"').fetchall()  # noqa: S608
            out[name] = sorted((tuple(r) for r in rows), key=_sort_key)
        return out
    finally:
        con.close()


def raw(path: Path | str, *, foreign_keys: bool = True) -> sqlite3.Connection:
    """A raw sqlite3 connection in autocommit mode (the caller closes it)."""
    con = sqlite3.connect(str(path), timeout=5, isolation_level=None)
    if foreign_keys:
        con.execute("PRAGMA foreign_keys=ON")
    return con


#: A process that opens `Store(argv[1])` and, inside one write transaction, inserts a
#: session with 200 messages, sets its counter and another session's title, prints
#: "inside" and sleeps: the kill -9 tests kill it there.
HANGING_WRITER = """
import sys, time
from sqlalchemy import text
from hermes_store.store import Store

store = Store(sys.argv[1])

def work(session):
    # a new session, its messages, its counter and another session's title: one
    # transaction through Store.write, killed before it commits
    session.execute(text(
        "INSERT INTO sessions (id, source, started_at) VALUES ('doomed', 'cli', 1.0)"))
    for i in range(200):
        session.execute(text(
            "INSERT INTO messages (session_id, role, content, timestamp, active, compacted)"
            " VALUES ('doomed', 'user', :c, 1.0, 1, 0)"), {"c": f"doomed {i}"})
    session.execute(text("UPDATE sessions SET message_count = 200 WHERE id = 'doomed'"))
    session.execute(text("UPDATE sessions SET title = 'half' WHERE id = 'kept'"))
    print("inside", flush=True)
    time.sleep(3600)

store.write(work)
"""


def start_hanging_writer(url: str) -> subprocess.Popen[str]:
    """HANGING_WRITER on `url`, returned once it is inside its transaction."""
    proc = subprocess.Popen(
        [sys.executable, "-c", HANGING_WRITER, url],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    line = proc.stdout.readline()
    if line.strip() != "inside":
        proc.kill()
        _, err = proc.communicate(timeout=10)
        raise AssertionError(f"the hanging writer did not start: {err}")
    return proc


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    """`hermes-store ARGS...` in a subprocess, as a user runs it; output captured."""
    return subprocess.run(
        [sys.executable, "-m", "hermes_store.cli", *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def sha256_file(path: Path | str) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def role_content_sha256(con: sqlite3.Connection, session_id: str) -> str:
    """The fixtures README's digest: per message in id order, role, 0x00, content, 0x01
    (NULL as empty)."""
    digest = hashlib.sha256()
    for role, content in con.execute(
        "SELECT role, content FROM messages WHERE session_id = ? ORDER BY id", (session_id,)
    ):
        digest.update((role or "").encode("utf-8"))
        digest.update(b"\x00")
        digest.update((content or "").encode("utf-8"))
        digest.update(b"\x01")
    return digest.hexdigest()


class DB:
    """Helper namespace handed to tests by the `db` fixture."""

    url_for = staticmethod(url_for)
    plain_engine = staticmethod(plain_engine)
    connect = staticmethod(connect)
    snapshot = staticmethod(snapshot)
    dump = staticmethod(dump)
    raw = staticmethod(raw)
    sha256_file = staticmethod(sha256_file)
    role_content_sha256 = staticmethod(role_content_sha256)


# --------------------------------------------------------------------------- PostgreSQL

#: The server the tests use (the machine's own; trust auth). Each test gets its own
#: database, created from template0 and dropped afterwards.
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


@contextmanager
def pg_database(*, at_head: bool = False) -> Iterator[str]:
    """A new PostgreSQL database (its URL), empty or at head, dropped on exit."""
    require_pg()
    name = f"hs_test_{uuid.uuid4().hex[:16]}"
    template = _head_template() if at_head else "template0"
    _admin_execute(f'CREATE DATABASE "{name}" TEMPLATE "{template}" ENCODING \'UTF8\'')
    try:
        yield _pg_url(name)
    finally:
        _admin_execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


# --------------------------------------------------------------------------- fixtures


@pytest.fixture(autouse=True)
def hermes_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Point HERMES_HOME at an empty per-test directory; never use HERMES_STORE_URL."""
    home = tmp_path / "hermes_home"
    home.mkdir()
    monkeypatch.setenv("HERMES_HOME", str(home))
    monkeypatch.delenv("HERMES_STORE_URL", raising=False)
    return home


@pytest.fixture
def db() -> type[DB]:
    return DB


@pytest.fixture
def fixtures_path() -> Path:
    return _require_fixtures()


@pytest.fixture
def legacy_db(tmp_path: Path) -> Callable[..., Path]:
    """`legacy_db(version, name=None)`: a private, writable copy of state_vNN.db."""
    counter = iter(range(1_000_000))

    def make(version: int, name: str | None = None) -> Path:
        _require_fixtures()
        source = fixture_file(version)
        if not source.is_file():
            pytest.skip(f"fixture database {source} is missing")
        target = tmp_path / (name or f"state_v{version:02d}_{next(counter)}.db")
        # copyfile, not copy: the fixtures are 0444 and the copy must be writable.
        shutil.copyfile(source, target)
        os.chmod(target, 0o644)
        for suffix in ("-wal", "-shm"):
            sidecar = Path(str(source) + suffix)
            if sidecar.exists():  # the README says there are none; be safe anyway
                shutil.copyfile(sidecar, Path(str(target) + suffix))
        return target

    return make


@pytest.fixture
def legacy_json() -> Callable[[int], dict[str, Any]]:
    def load(version: int) -> dict[str, Any]:
        _require_fixtures()
        path = fixture_file(version, "json")
        if not path.is_file():
            pytest.skip(f"fixture description {path} is missing")
        return json.loads(path.read_text(encoding="utf-8"))

    return load


@pytest.fixture
def fresh_db(tmp_path: Path) -> str:
    """The URL of a database created from nothing by `migrate.upgrade`."""
    from hermes_store import migrate

    url = url_for(tmp_path / "fresh" / "state.db")
    (tmp_path / "fresh").mkdir()
    migrate.upgrade(url, fts_min_pause=0)
    return url


@pytest.fixture
def pg_url() -> Iterator[str]:
    """The URL of a new, empty PostgreSQL database of its own (dropped afterwards)."""
    with pg_database() as url:
        yield url


@pytest.fixture
def pg_fresh_db() -> Iterator[str]:
    """A PostgreSQL database at head, of its own."""
    with pg_database(at_head=True) as url:
        yield url


@pytest.fixture(params=["sqlite", "postgresql"])
def backend_url(request: pytest.FixtureRequest) -> Iterator[str]:
    """A database at head on each backend in turn (the test runs once per backend). On
    SQLite it is the `fresh_db` file, so a test may also look at that file directly."""
    if request.param == "sqlite":
        yield request.getfixturevalue("fresh_db")
        return
    with pg_database(at_head=True) as url:
        yield url


class RawRow(dict[str, Any]):
    """A result row readable by name and by position, like sqlite3.Row."""

    def __getitem__(self, key: Any) -> Any:
        if isinstance(key, int | slice):
            return list(self.values())[key]
        return super().__getitem__(key)

    def __iter__(self) -> Iterator[Any]:  # type: ignore[override]
        return iter(list(self.values()))  # tuple(row) gives the values, as sqlite3.Row

    def __eq__(self, other: object) -> bool:
        if isinstance(other, tuple):
            return tuple(self.values()) == other
        return super().__eq__(other)

    __hash__ = None  # type: ignore[assignment]


class RawConnection:
    """Plain SQL on either backend, bypassing hermes-store (for seeding and checking):
    `?` placeholders, autocommit, rows as RawRow. On PostgreSQL text goes through the
    same NUL escape the models apply, so the tests see what the repositories see."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.dialect = "sqlite" if url.startswith("sqlite") else "postgresql"
        if self.dialect == "sqlite":
            self._con: Any = sqlite3.connect(
                url.removeprefix("sqlite:///"), isolation_level=None, timeout=5
            )
            self._con.execute("PRAGMA foreign_keys=ON")
        else:
            import psycopg
            from sqlalchemy.engine import make_url

            u = make_url(url)
            from hermes_store.engine import install_pg_text_adapters

            self._con = psycopg.connect(
                host=u.host, port=u.port or 5432, user=u.username, dbname=u.database,
                autocommit=True,
            )
            install_pg_text_adapters(self._con)

    def execute(self, sql: str, params: Any = ()) -> RawCursor:
        if self.dialect == "sqlite":
            return RawCursor(self._con.execute(sql, params), self.dialect)
        if isinstance(params, dict):
            sql = re.sub(r"(?<!:):(\w+)", r"%(\1)s", sql)
        else:
            sql = sql.replace("?", "%s")
        returning = bool(re.match(r"\s*INSERT INTO messages\b", sql, re.I)) and (
            "RETURNING" not in sql.upper()
        )
        cur = self._con.cursor()
        cur.execute(sql + (" RETURNING id" if returning else ""), params)
        result = RawCursor(cur, self.dialect)
        if returning:
            # sqlite3's lastrowid, for the one table whose ids tests use
            result.lastrowid = cur.fetchone()[0]
        return result

    def executemany(self, sql: str, rows: Any) -> None:
        for row in rows:
            self.execute(sql, row)

    def close(self) -> None:
        self._con.close()


class RawCursor:
    def __init__(self, cursor: Any, dialect: str) -> None:
        self._cursor = cursor
        self._dialect = dialect
        self.rowcount = cursor.rowcount
        self.lastrowid = getattr(cursor, "lastrowid", None)

    def _row(self, values: Any) -> RawRow | None:
        if values is None:
            return None
        names = [d[0] for d in self._cursor.description]
        return RawRow(zip(names, values, strict=True))

    def fetchone(self) -> RawRow | None:
        if self._cursor.description is None:
            return None
        return self._row(self._cursor.fetchone())

    def fetchall(self) -> list[RawRow]:
        if self._cursor.description is None:
            return []
        return [r for r in (self._row(v) for v in self._cursor.fetchall()) if r is not None]

    def __iter__(self) -> Iterator[RawRow]:
        return iter(self.fetchall())


@pytest.fixture
def raw_con(backend_url: str) -> Iterator[RawConnection]:
    """A RawConnection to the same database as the `store` fixture."""
    con = RawConnection(backend_url)
    yield con
    con.close()


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """`@pytest.mark.sqlite_only` tests (about SQLite files, FTS5, PRAGMAs) run on SQLite
    only: their PostgreSQL variants are deselected, not skipped."""
    keep, drop = [], []
    for item in items:
        callspec = getattr(item, "callspec", None)
        on_pg = callspec is not None and callspec.params.get("backend_url") == "postgresql"
        (drop if on_pg and item.get_closest_marker("sqlite_only") else keep).append(item)
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep


@pytest.fixture
def store(backend_url: str) -> Iterator[Any]:
    """A Store on a fresh database at head (SQLite, then PostgreSQL), closed afterwards."""
    from hermes_store.store import Store

    s = Store(backend_url)
    yield s
    s.close()


@pytest.fixture
def sqlite_store(fresh_db: str) -> Iterator[Any]:
    """A Store on a fresh SQLite file, for tests about SQLite itself (files, FTS5, WAL)."""
    from hermes_store.store import Store

    s = Store(fresh_db)
    yield s
    s.close()


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    template = _pg_state.get("template")
    if template:
        _admin_execute(f'DROP DATABASE IF EXISTS "{template}" WITH (FORCE)')
