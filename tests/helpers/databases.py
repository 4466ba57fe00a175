"""The legacy fixture databases and raw access to SQLite files, bypassing hermes-store.

The fixtures written by the original Hermes code live in the repository
(tests/fixtures/legacy; `HERMES_STORE_FIXTURES` names another directory) and are only ever
copied: opening them in place would create sidecar files or change them."""

from __future__ import annotations

import hashlib
import os
import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Connection, Engine, create_engine
from sqlalchemy.pool import NullPool

REPO_ROOT = Path(__file__).resolve().parents[2]
IN_REPO_FIXTURES = REPO_ROOT / "tests" / "fixtures" / "legacy"
FIXTURES_ENV = "HERMES_STORE_FIXTURES"
#: Schema versions the original stored (3 never existed as a stored version).
EXPECTED_VERSIONS: tuple[int, ...] = (1, 2, *range(4, 24))


def fixtures_dir() -> Path:
    override = os.environ.get(FIXTURES_ENV)
    if override:
        return Path(override).expanduser().resolve()
    return IN_REPO_FIXTURES


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


def _require_fixtures() -> Path:
    directory = fixtures_dir()
    if not directory.is_dir():
        pytest.skip(
            f"legacy fixture databases not found at {directory} "
            f"(set {FIXTURES_ENV} to the directory holding state_vNN.db)"
        )
    return directory


# --------------------------------------------------------------------------- helpers


def sqlite_connect(database: Path | str, **kwargs: Any) -> sqlite3.Connection:
    """A DB-API connection through the SQLite library this process drives (the driver
    under test): two copies of SQLite in one process do not see each other's POSIX locks
    on a file, and closing it in one drops the other's (hermes_store/sqlite/driver.py)."""
    from hermes_store.sqlite import driver

    return driver.current().connect(str(database), **kwargs)


def url_for(path: Path | str) -> str:
    """An absolute SQLite URL for a file path."""
    return f"sqlite:///{Path(path).resolve()}"


def plain_engine(url_or_path: Path | str) -> Engine:
    """A plain SQLAlchemy engine (no hermes-store listeners) for inspecting a file, through
    the SQLite library this process drives (see sqlite_connect)."""
    from hermes_store.sqlite import driver

    url = str(url_or_path)
    if "://" not in url:
        url = url_for(url)
    if url.startswith("sqlite"):
        return create_engine(url, poolclass=NullPool, module=driver.current().module)
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
    from hermes_store.migration import schema_snapshot

    with connect(url_or_path) as conn:
        return schema_snapshot.snapshot(conn)


def _sort_key(row: tuple[Any, ...]) -> str:
    return repr(row)


def dump(path: Path | str) -> dict[str, list[tuple[Any, ...]]]:
    """Every row of every table (ordinary, virtual, FTS shadow, sqlite_sequence, the
    Alembic version table), in a deterministic order."""
    # A read-write handle (used only to read): a read-only one would leave -wal/-shm
    # files behind on a WAL database.
    con = sqlite_connect(path)
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
    con = sqlite_connect(path, timeout=5, isolation_level=None)
    if foreign_keys:
        con.execute("PRAGMA foreign_keys=ON")
    return con


#: A process that opens `Store(argv[1])` and, inside one write transaction, inserts a
#: session with 200 messages, sets its counter and another session's title, prints
#: "inside" and sleeps: the kill -9 tests kill it there.
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
    sqlite_connect = staticmethod(sqlite_connect)
    sha256_file = staticmethod(sha256_file)
    role_content_sha256 = staticmethod(role_content_sha256)




# --------------------------------------------------------------------------- journal modes

#: Both journal modes a state.db meets in the field: DELETE where the linked SQLite has
#: the WAL-reset bug (a new file there, as the original picks), WAL elsewhere and on
#: files the original wrote on a fixed SQLite. The reliability tests run in both.
JOURNAL_MODES: tuple[str, ...] = ("delete", "wal")


def set_journal_mode(path: Path | str, mode: str) -> None:
    """Put the SQLite file at `path` in `mode` (a WAL file stays WAL for every later
    connection, and hermes-store never switches a WAL file back)."""
    con = sqlite_connect(path, isolation_level=None)
    try:
        got = con.execute(f"PRAGMA journal_mode={mode}").fetchone()[0]
    finally:
        con.close()
    assert str(got).lower() == mode, f"{path} is in journal mode {got}, not {mode}"


def journal_mode(path: Path | str) -> str:
    con = sqlite_connect(f"file:{Path(path)}?mode=ro", uri=True)
    try:
        return str(con.execute("PRAGMA journal_mode").fetchone()[0]).lower()
    finally:
        con.close()


#: how many messages grow_legacy adds
EXTRA = 3000


def grow_legacy(path: Path, db, version: int) -> None:  # type: ignore[no-untyped-def]
    """EXTRA messages through the fixture's own triggers (one existing session)."""
    con = db.raw(path)
    try:
        session = con.execute("SELECT id FROM sessions ORDER BY id LIMIT 1").fetchone()[0]
        con.execute("BEGIN")
        con.executemany(
            "INSERT INTO messages (session_id, role, content, timestamp) VALUES (?, ?, ?, ?)",
            (
                (session, "user" if i % 2 else "assistant", f"demotion{i} filler text", 2e9 + i)
                for i in range(EXTRA)
            ),
        )
        con.execute("COMMIT")
        con.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    finally:
        con.close()
