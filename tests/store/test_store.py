"""The store layer on real files: connection pragmas and journal-mode rules
(docs/reference/schema.md 9), units of work with BEGIN IMMEDIATE, the retry policy, checkpoints,
file modes, read-only handles and thread safety (docs/reference/behaviour.md 16).

Locks are held by raw DB-API connections (in this thread or in a helper thread), never
by mocks; every database lives under the test's own `tmp_path`. Raw connections go
through this process's SQLite library (`sqlite_driver.current()`): a second copy of
SQLite in the process would not see the Store's POSIX locks, and closing its connection
would drop them (hermes_store/sqlite/driver.py).
"""

from __future__ import annotations

import shutil
import sqlite3
import stat
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import text
from sqlalchemy.exc import IntegrityError, OperationalError
from sqlalchemy.orm import Session

from hermes_store import migrate
from hermes_store.config import JOURNAL_ENV, JournalPolicy
from hermes_store.errors import DatabaseLocked, DatabaseNotWritable, ReadOnlyStore
from hermes_store.runtime.engine import BUSY_TIMEOUT_S, make_engine, wal_reset_vulnerable
from hermes_store.runtime.retry import RetryPolicy, is_retryable
from hermes_store.sqlite import driver as sqlite_driver
from hermes_store.store import CHECKPOINT_EVERY, Store

DEFAULT_MODE = "delete" if wal_reset_vulnerable() else "wal"
SIDECARS = ("-wal", "-shm", "-journal")

# --------------------------------------------------------------------------- helpers


def url(path: Path) -> str:
    return f"sqlite:///{path}"


def raw(path: Path, timeout: float = 5.0) -> sqlite3.Connection:
    """A raw autocommit connection through this process's SQLite library (the caller
    closes it)."""
    return sqlite_driver.current().connect(str(path), timeout=timeout, isolation_level=None)


def make_table_db(path: Path, *, wal: bool = False) -> Path:
    """A file with `t(id INTEGER PRIMARY KEY, v TEXT)`, made with a raw connection."""
    con = raw(path)
    try:
        if wal:
            assert con.execute("PRAGMA journal_mode=WAL").fetchone()[0] == "wal"
        con.execute("CREATE TABLE t (id INTEGER PRIMARY KEY, v TEXT)")
    finally:
        con.close()
    return path


def on_disk_mode(path: Path) -> str:
    con = raw(path)
    try:
        return str(con.execute("PRAGMA journal_mode").fetchone()[0]).lower()
    finally:
        con.close()


def count_rows(path: Path, where: str = "1") -> int:
    con = raw(path)
    try:
        return int(con.execute(f"SELECT count(*) FROM t WHERE {where}").fetchone()[0])
    finally:
        con.close()


def insert(value: str, row_id: int | None = None) -> Callable[[Session], None]:
    def work(session: Session) -> None:
        session.execute(text("INSERT INTO t (id, v) VALUES (:id, :v)"), {"id": row_id, "v": value})

    return work


def lock_is_free(path: Path) -> bool:
    """True when a fresh connection can take the write lock without waiting."""
    probe = raw(path, timeout=0)
    try:
        probe.execute("BEGIN IMMEDIATE")
    except sqlite_driver.OperationalError as exc:
        assert "database is locked" in str(exc)
        return False
    else:
        probe.execute("ROLLBACK")
        return True
    finally:
        probe.close()


@contextmanager
def held_write_lock(path: Path) -> Iterator[sqlite3.Connection]:
    """A raw connection holding the write lock (BEGIN IMMEDIATE) for the block, through
    this process's SQLite library: another copy's locks would not be seen (one library
    per process, hermes_store/sqlite/driver.py)."""
    holder = sqlite_driver.current().connect(str(path), timeout=5.0, isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")
    try:
        yield holder
    finally:
        holder.execute("ROLLBACK")
        holder.close()


@pytest.fixture
def table_db(tmp_path: Path) -> Path:
    return make_table_db(tmp_path / "t.db")


@pytest.fixture
def journal_table_db(tmp_path: Path, journal: str) -> Path:
    """`table_db` in each journal mode in turn."""
    return make_table_db(tmp_path / "t.db", wal=journal == "wal")


@pytest.fixture
def store(table_db: Path) -> Iterator[Store]:
    s = Store(url(table_db), check_schema=False)
    yield s
    s.close()


# --------------------------------------------------------------------------- pragmas


def test_connect_pragmas_on_write_and_read_connections(store: Store) -> None:
    def pragmas(session: Session) -> dict[str, Any]:
        return {
            name: session.execute(text(f"PRAGMA {name}")).scalar_one()
            for name in ("foreign_keys", "recursive_triggers", "busy_timeout")
        }

    expected = {"foreign_keys": 1, "recursive_triggers": 1, "busy_timeout": 1000}
    assert BUSY_TIMEOUT_S == 1.0
    assert store.write(pragmas) == expected
    with store.read() as session:
        assert pragmas(session) == expected


def test_foreign_keys_are_enforced_on_a_migrated_database(tmp_path: Path) -> None:
    db_url = url(tmp_path / "state.db")
    migrate.upgrade(db_url, fts_min_pause=0)
    with Store(db_url, check_schema=False) as s:
        with pytest.raises(IntegrityError, match="FOREIGN KEY"):
            s.write(
                lambda session: session.execute(
                    text(
                        "INSERT INTO messages (session_id, role, timestamp)"
                        " VALUES ('nope', 'user', 0)"
                    )
                )
            )


# --------------------------------------------------------------------------- journal mode


@pytest.mark.parametrize(
    ("version", "vulnerable"),
    [
        ((3, 40, 1), True),
        ((3, 7, 0), True),
        ((3, 51, 2), True),
        ((3, 45, 0), True),
        ((3, 50, 6), True),
        ((3, 51, 3), False),
        ((3, 52, 0), False),
        ((3, 50, 7), False),
        ((3, 44, 6), False),
        ((3, 44, 9), False),
        ((3, 6, 0), False),
    ],
)
def test_wal_reset_vulnerable(version: tuple[int, int, int], vulnerable: bool) -> None:
    assert wal_reset_vulnerable(version) is vulnerable


def test_this_sqlite_is_vulnerable() -> None:
    """The SQLite this process drives decides the default mode; the tests below follow it
    either way."""
    driven = sqlite_driver.current().sqlite_version
    assert wal_reset_vulnerable() is wal_reset_vulnerable(driven)


def _first_write(path: Path, journal: JournalPolicy | None = None) -> None:
    with Store(url(path), journal=journal, check_schema=False) as s:
        s.write(lambda session: session.execute(text("CREATE TABLE t (id INTEGER PRIMARY KEY)")))


def test_new_file_gets_default_mode(tmp_path: Path) -> None:
    path = tmp_path / "new.db"
    _first_write(path)
    assert on_disk_mode(path) == DEFAULT_MODE
    if wal_reset_vulnerable():
        assert DEFAULT_MODE == "delete"


def test_existing_wal_file_stays_wal(tmp_path: Path) -> None:
    path = make_table_db(tmp_path / "wal.db", wal=True)
    with Store(url(path), check_schema=False) as s:
        s.write(insert("x"))
        with s.read() as session:
            assert session.execute(text("PRAGMA journal_mode")).scalar_one() == "wal"
    assert on_disk_mode(path) == "wal"


def test_wal_policy_forces_wal_on_a_new_file(tmp_path: Path) -> None:
    path = tmp_path / "new.db"
    _first_write(path, JournalPolicy("wal"))
    assert on_disk_mode(path) == "wal"


def test_wal_policy_upgrades_a_delete_file(tmp_path: Path) -> None:
    path = make_table_db(tmp_path / "del.db")
    assert on_disk_mode(path) == "delete"
    with Store(url(path), journal=JournalPolicy("wal"), check_schema=False) as s:
        s.write(insert("x"))
    assert on_disk_mode(path) == "wal"


@pytest.mark.parametrize("policy", ["delete", "auto"])
def test_a_wal_file_is_never_downgraded(tmp_path: Path, policy: str) -> None:
    path = make_table_db(tmp_path / "wal.db", wal=True)
    with Store(url(path), journal=JournalPolicy(policy), check_schema=False) as s:
        s.write(insert("x"))
    assert on_disk_mode(path) == "wal"
    assert count_rows(path) == 1


def test_delete_policy_keeps_a_new_file_delete(tmp_path: Path) -> None:
    path = tmp_path / "new.db"
    _first_write(path, JournalPolicy("delete"))
    assert on_disk_mode(path) == "delete"
    assert not Path(f"{path}-wal").exists()


def test_unknown_journal_policy_is_refused() -> None:
    with pytest.raises(ValueError, match="journal mode"):
        JournalPolicy("memory")


# --------------------------------------------------------------------------- BEGIN modes


@pytest.mark.parametrize("wal", [False, True], ids=["delete", "wal"])
def test_writes_take_the_write_lock_before_the_callback(tmp_path: Path, wal: bool) -> None:
    path = make_table_db(tmp_path / "t.db", wal=wal)
    seen: list[bool] = []

    def work(session: Session) -> None:
        seen.append(lock_is_free(path))  # before the callback's first statement
        insert("x")(session)
        seen.append(lock_is_free(path))

    with Store(url(path), check_schema=False) as s:
        s.write(work)
        assert seen == [False, False]
        assert lock_is_free(path)  # released after commit
    assert count_rows(path) == 1


@pytest.mark.parametrize("wal", [False, True], ids=["delete", "wal"])
def test_reads_do_not_take_the_write_lock(tmp_path: Path, wal: bool) -> None:
    path = make_table_db(tmp_path / "t.db", wal=wal)
    with Store(url(path), check_schema=False) as s:
        s.write(insert("x"))
        with s.read() as session:
            assert session.execute(text("SELECT count(*) FROM t")).scalar_one() == 1
            assert lock_is_free(path)
            if wal:  # a WAL reader does not even block another writer's commit
                other = raw(path, timeout=0)
                other.execute("INSERT INTO t (v) VALUES ('other')")
                other.close()
                # the read transaction keeps its snapshot
                assert session.execute(text("SELECT count(*) FROM t")).scalar_one() == 1
    assert count_rows(path) == (2 if wal else 1)


# --------------------------------------------------------------------------- retry


def test_write_waits_out_a_lock_held_longer_than_the_busy_timeout(
    journal_table_db: Path, journal: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the file kept in its journal mode: a SQLite with the WAL-reset fix would make a
    # DELETE file WAL, and that switch fails at once, without the busy timeout, while
    # another connection holds the write lock
    monkeypatch.setenv(JOURNAL_ENV, journal)
    table_db = journal_table_db
    held = threading.Event()
    errors: list[BaseException] = []

    def hold() -> None:
        try:
            holder = raw(table_db)
            holder.execute("BEGIN IMMEDIATE")
            holder.execute("INSERT INTO t (v) VALUES ('holder')")
            held.set()
            time.sleep(1.5)
            holder.execute("COMMIT")
            holder.close()
        except BaseException as exc:
            errors.append(exc)
            held.set()

    calls = {"entered": 0, "done": 0}

    def work(session: Session) -> None:
        calls["entered"] += 1
        insert("store")(session)
        calls["done"] += 1

    thread = threading.Thread(target=hold)
    thread.start()
    try:
        assert held.wait(5)
        with Store(url(table_db), check_schema=False) as s:
            started = time.monotonic()
            s.write(work)
            elapsed = time.monotonic() - started
            assert s.writes == 1
    finally:
        thread.join()
    assert not errors
    assert elapsed > 1.0  # a single busy timeout was not enough
    assert calls == {"entered": 1, "done": 1}
    assert count_rows(table_db, "v = 'store'") == 1
    assert count_rows(table_db, "v = 'holder'") == 1


def test_read_waits_out_an_exclusive_lock(
    journal_table_db: Path, journal: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """DELETE mode: a committing writer (EXCLUSIVE) keeps readers out; a read taking
    longer than one busy timeout to get in is retried, not failed. WAL mode: the reader
    is never kept out, and sees what was committed before it began."""
    monkeypatch.setenv(JOURNAL_ENV, journal)  # kept: a fixed SQLite would make it WAL
    table_db = journal_table_db
    held = threading.Event()

    def hold() -> None:
        holder = raw(table_db)
        holder.execute("BEGIN EXCLUSIVE")
        holder.execute("INSERT INTO t (v) VALUES ('holder')")
        held.set()
        time.sleep(1.5)
        holder.execute("COMMIT")
        holder.close()

    thread = threading.Thread(target=hold)
    with Store(url(table_db), check_schema=False) as s:
        s.write(insert("store"))
        thread.start()
        try:
            assert held.wait(5)
            started = time.monotonic()
            with s.read() as session:
                values = session.execute(text("SELECT v FROM t ORDER BY id")).scalars().all()
            elapsed = time.monotonic() - started
        finally:
            thread.join()
    if journal == "delete":
        assert elapsed > 1.0
        assert values == ["store", "holder"]
    else:
        assert elapsed < 1.0
        assert values == ["store"]


def test_write_gives_up_after_the_last_attempt(
    journal_table_db: Path, journal: str, sqlite_driver: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On both drivers, in each journal mode (kept: pysqlite3's SQLite would make a
    DELETE file WAL): a write whose every attempt meets another writer's lock ends in
    DatabaseLocked after its last attempt, having run nothing."""
    monkeypatch.setenv(JOURNAL_ENV, journal)
    table_db = journal_table_db
    calls: list[int] = []

    def work(session: Session) -> None:
        calls.append(1)
        insert("x")(session)

    with Store(url(table_db), retry=RetryPolicy(attempts=2), check_schema=False) as s:
        with held_write_lock(table_db):
            started = time.monotonic()
            with pytest.raises(DatabaseLocked, match="database is locked") as raised:
                s.write(work)
            elapsed = time.monotonic() - started
        # typed, and still the error class the original raises there
        assert isinstance(raised.value, sqlite3.OperationalError)
        assert raised.value.sqlite_errorcode == sqlite3.SQLITE_BUSY
        assert isinstance(raised.value.__cause__, OperationalError)
        # nothing leaked: at most the connection the store keeps for its writes
        assert s.engine.pool.checkedout() <= 1  # type: ignore[attr-defined]
        assert s.writes == 0
        # the store still works once the lock is gone
        s.write(insert("after"))
    assert calls == []  # the lock was never won, so the callback never ran
    assert 2 * BUSY_TIMEOUT_S - 0.1 < elapsed < 2 * BUSY_TIMEOUT_S + 0.15 + 1.0
    assert count_rows(table_db) == 1


def test_a_pool_whose_every_connection_stays_busy_is_a_typed_error(backend_url: str) -> None:
    """Every connection of a Store's pool in use (by this process's other threads; here
    two open read blocks) for the whole wait for one: a read, a search and a write end in
    StoreBusy naming the pool's size, not SQLAlchemy's TimeoutError; the store works
    once a connection is back."""
    from sqlalchemy.pool import QueuePool

    from hermes_store.errors import StoreBusy
    from hermes_store.repositories.search import SearchRepository
    from hermes_store.repositories.sessions import SessionRepository

    engine = make_engine(
        backend_url, poolclass=QueuePool, pool_size=1, max_overflow=1, pool_timeout=0.2
    )
    store = Store(backend_url, engine=engine)
    sessions = SessionRepository(store)
    try:
        with store.read() as one, store.read() as two:
            one.execute(text("SELECT 1"))
            two.execute(text("SELECT 1"))
            calls: list[Callable[[], object]] = [
                lambda: sessions.list_sessions_rich(limit=5),
                lambda: SearchRepository(store).search_messages("anything"),
                lambda: sessions.create_session("busy", "cli"),
            ]
            for call in calls:
                with pytest.raises(StoreBusy, match="all 2 connections") as raised:
                    call()
                assert isinstance(raised.value, TimeoutError) and raised.value.size == 2
        sessions.create_session("after", "cli")
        assert [row["id"] for row in sessions.list_sessions_rich(limit=5)] == ["after"]
    finally:
        store.close()
        engine.dispose()


@pytest.mark.parametrize("budget", [0.3, 1.2])
def test_write_budget_bounds_the_wait(journal_table_db: Path, budget: float) -> None:
    table_db = journal_table_db
    with Store(url(table_db), retry=RetryPolicy(budget_seconds=budget), check_schema=False) as s:
        with held_write_lock(table_db):
            started = time.monotonic()
            with pytest.raises(DatabaseLocked, match="locked"):
                s.write(insert("x"))
            elapsed = time.monotonic() - started
    assert elapsed >= min(budget, BUSY_TIMEOUT_S) - 0.1
    assert elapsed < budget + BUSY_TIMEOUT_S + 0.3
    assert count_rows(table_db) == 0


def test_integrity_errors_are_not_retried(store: Store, table_db: Path) -> None:
    store.write(insert("first", row_id=1))
    calls: list[int] = []

    def work(session: Session) -> None:
        calls.append(1)
        insert("second", row_id=1)(session)

    started = time.monotonic()
    with pytest.raises(IntegrityError, match="UNIQUE"):
        store.write(work)
    assert time.monotonic() - started < 0.5
    assert calls == [1]
    assert store.writes == 1
    assert count_rows(table_db) == 1


def test_an_exception_in_the_callback_rolls_back(store: Store, table_db: Path) -> None:
    def work(session: Session) -> None:
        insert("x")(session)
        raise RuntimeError("boom")

    with pytest.raises(RuntimeError, match="boom"):
        store.write(work)
    assert count_rows(table_db) == 0
    assert lock_is_free(table_db)


def _sqlite_error(path: Path, sql: str, *, lock: bool = False) -> Any:
    """The error `sql` raises on a raw connection (of this process's SQLite library, whose
    classes are not the standard library's under pysqlite3)."""
    con = raw(path, timeout=0)
    try:
        if lock:
            with held_write_lock(path):
                con.execute(sql)
        else:
            con.execute(sql)
    except sqlite_driver.Error as exc:
        return exc
    finally:
        con.close()
    raise AssertionError(f"{sql!r} did not fail")


def test_is_retryable_classification(table_db: Path) -> None:
    busy = _sqlite_error(table_db, "BEGIN IMMEDIATE", lock=True)
    assert busy.sqlite_errorcode == sqlite3.SQLITE_BUSY
    assert is_retryable(busy)
    assert is_retryable(OperationalError("BEGIN IMMEDIATE", None, busy))

    con = raw(table_db)
    con.execute("INSERT INTO t (id, v) VALUES (1, 'a')")
    con.close()
    duplicate = _sqlite_error(table_db, "INSERT INTO t (id, v) VALUES (1, 'b')")
    assert isinstance(duplicate, sqlite_driver.IntegrityError)
    assert not is_retryable(duplicate)
    assert not is_retryable(IntegrityError("INSERT", None, duplicate))

    # decided by the result code, not by words in the message
    no_table = _sqlite_error(table_db, "SELECT * FROM locked_busy")
    assert no_table.sqlite_errorcode == sqlite3.SQLITE_ERROR
    assert "locked" in str(no_table)
    assert not is_retryable(no_table)

    ro = sqlite_driver.current().connect(f"file:{table_db}?mode=ro", uri=True, isolation_level=None)
    try:
        with pytest.raises(sqlite_driver.OperationalError) as info:
            ro.execute("INSERT INTO t (v) VALUES ('x')")
    finally:
        ro.close()
    assert getattr(info.value, "sqlite_errorcode", None) == sqlite3.SQLITE_READONLY
    assert not is_retryable(info.value)

    # extended codes reduce to their primary code
    for code, expected in ((517, True), (262, True), (5, True), (6, True), (1, False), (10, False)):
        exc = sqlite3.OperationalError("some text")
        exc.sqlite_errorcode = code
        assert is_retryable(exc) is expected, code

    # without a result code the text decides
    assert is_retryable(sqlite3.OperationalError("database is locked"))
    assert is_retryable(sqlite3.OperationalError("database table is busy"))
    assert not is_retryable(sqlite3.OperationalError("disk I/O error"))
    assert not is_retryable(ValueError("locked"))


def test_is_retryable_postgres_sqlstates() -> None:
    errors = pytest.importorskip("psycopg.errors")

    assert is_retryable(errors.SerializationFailure("40001"))
    assert is_retryable(errors.DeadlockDetected("40P01"))
    assert not is_retryable(errors.UniqueViolation("23505"))


# --------------------------------------------------------------------------- checkpoints


def _rows_in_main_file(path: Path, scratch: Path) -> int:
    """Rows present in the main database file alone (the -wal file left behind)."""
    copy = scratch / f"main-only-{time.monotonic_ns()}.db"
    shutil.copyfile(path, copy)
    return count_rows(copy)


@pytest.mark.parametrize("every", [CHECKPOINT_EVERY, 0], ids=["every50", "off"])
def test_passive_checkpoint_after_every_50th_write(tmp_path: Path, every: int) -> None:
    path = make_table_db(tmp_path / "wal.db", wal=True)
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    with Store(url(path), checkpoint_every=every, check_schema=False) as s:
        for i in range(49):
            s.write(insert(f"row {i}"))
        assert s.writes == 49
        assert _rows_in_main_file(path, scratch) == 0  # all 49 still only in the WAL
        s.write(insert("row 49"))
        assert s.writes == 50
        assert _rows_in_main_file(path, scratch) == (50 if every else 0)
        con = raw(path)
        try:
            busy, log, done = con.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
        finally:
            con.close()
        assert busy == 0 and log == done and log > 0


def test_checkpoint_rejects_unknown_modes(store: Store) -> None:
    with pytest.raises(ValueError, match="checkpoint mode"):
        store.checkpoint("EVERYTHING")


def test_close_truncates_the_wal(tmp_path: Path) -> None:
    path = make_table_db(tmp_path / "wal.db", wal=True)
    wal = Path(f"{path}-wal")
    # An idle second connection stays open, so the last-close cleanup cannot be what
    # empties the WAL: only the TRUNCATE checkpoint can.
    watcher = raw(path)
    try:
        assert watcher.execute("SELECT count(*) FROM t").fetchone()[0] == 0
        s = Store(url(path), check_schema=False)
        for i in range(5):
            s.write(insert(f"row {i}"))
        assert wal.stat().st_size > 0
        s.close()
        assert not wal.exists() or wal.stat().st_size == 0
        s.close()  # idempotent
        assert watcher.execute("SELECT count(*) FROM t").fetchone()[0] == 5
    finally:
        watcher.close()
    assert count_rows(path) == 5


def test_close_leaves_no_wal_behind(tmp_path: Path) -> None:
    path = make_table_db(tmp_path / "wal.db", wal=True)
    with Store(url(path), check_schema=False) as s:
        s.write(insert("x"))
    wal = Path(f"{path}-wal")
    assert not wal.exists() or wal.stat().st_size == 0


# --------------------------------------------------------------------------- file modes


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_file_modes_are_0600_after_a_write_and_left_alone_by_reads(tmp_path: Path) -> None:
    path = make_table_db(tmp_path / "wal.db", wal=True)
    keeper = raw(path)  # keeps -wal and -shm in existence
    try:
        keeper.execute("INSERT INTO t (v) VALUES ('x')")
        files = [path, Path(f"{path}-wal"), Path(f"{path}-shm")]
        for f in files:
            assert f.exists()
            f.chmod(0o644)
        with Store(url(path), check_schema=False) as s:
            with s.read() as session:
                session.execute(text("SELECT 1"))
            assert {str(f): _mode(f) for f in files} == {str(f): 0o644 for f in files}
            s.write(insert("y"))
            assert {str(f): _mode(f) for f in files} == {str(f): 0o600 for f in files}
    finally:
        keeper.close()


@pytest.mark.parametrize("policy", ["wal", "delete"])
def test_new_files_and_sidecars_are_0600(tmp_path: Path, policy: str) -> None:
    path = tmp_path / "new.db"
    with Store(url(path), journal=JournalPolicy(policy), check_schema=False) as s:
        s.write(lambda session: session.execute(text("CREATE TABLE t (id INTEGER PRIMARY KEY, v)")))
        s.write(insert("x"))
        present = [p for p in [path, *(Path(f"{path}{x}") for x in SIDECARS)] if p.exists()]
        assert path in present
        assert {str(p): _mode(p) for p in present} == {str(p): 0o600 for p in present}
    assert _mode(path) == 0o600


# --------------------------------------------------------------------------- read-only


@pytest.mark.parametrize("dirname", ["plain", "with space", "odd#name?x=1", "50% off"])
def test_read_only_store_reads_but_cannot_write(tmp_path: Path, dirname: str) -> None:
    """Given as a plain path (a URL string could not carry these names unescaped)."""
    directory = tmp_path / dirname
    directory.mkdir()
    path = make_table_db(directory / "t.db")
    con = raw(path)
    con.execute("INSERT INTO t (v) VALUES ('x')")
    con.close()
    before = path.read_bytes()
    with Store(str(path), read_only=True, check_schema=False) as s:
        with s.read() as session:
            assert session.execute(text("SELECT v FROM t")).scalars().all() == ["x"]
        with pytest.raises(ReadOnlyStore, match="read-only"):
            s.write(insert("y"))
    assert path.read_bytes() == before
    # nothing created elsewhere (hermes_home is the autouse fixture's)
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([dirname, "hermes_home"])
    assert [p.name for p in directory.iterdir()] == ["t.db"]
    assert count_rows(path) == 1


def test_read_only_open_of_a_missing_file(tmp_path: Path) -> None:
    path = tmp_path / "missing.db"
    with pytest.raises(DatabaseNotWritable) as info:
        Store(url(path), read_only=True, check_schema=False)
    assert str(path) in str(info.value)
    assert not path.exists()


@pytest.mark.parametrize("blocker_mode", [0o644, 0o755])
@pytest.mark.parametrize("depth", ["state.db", "sub/state.db"])
def test_make_engine_below_a_regular_file(tmp_path: Path, blocker_mode: int, depth: str) -> None:
    """Works as root too: nothing can be created below a regular file."""
    blocker = tmp_path / "not_a_directory"
    blocker.write_text("x")
    blocker.chmod(blocker_mode)
    target = blocker / depth
    with pytest.raises(DatabaseNotWritable) as info:
        make_engine(url(target))
    assert str(target) in str(info.value)
    assert blocker.read_text() == "x"


def test_make_engine_creates_missing_directories(tmp_path: Path) -> None:
    target = tmp_path / "a" / "b" / "state.db"
    engine = make_engine(url(target))
    try:
        assert target.parent.is_dir()
        with engine.connect() as conn:
            assert conn.exec_driver_sql("PRAGMA foreign_keys").scalar_one() == 1
    finally:
        engine.dispose()
    assert target.exists()


# --------------------------------------------------------------------------- threads


@pytest.mark.parametrize("policy", ["auto", "wal"])
def test_threads_share_one_store_without_losing_writes(tmp_path: Path, policy: str) -> None:
    path = make_table_db(tmp_path / "t.db", wal=policy == "wal")
    threads, per_thread = 8, 50
    errors: list[BaseException] = []
    start = threading.Barrier(threads)

    with Store(url(path), journal=JournalPolicy(policy), check_schema=False) as s:

        def run(n: int) -> None:
            try:
                start.wait()
                for i in range(per_thread):
                    s.write(insert(f"{n}:{i}"))
                    if i % 10 == 0:
                        with s.read() as session:
                            session.execute(text("SELECT count(*) FROM t")).scalar_one()
            except BaseException as exc:
                errors.append(exc)

        workers = [threading.Thread(target=run, args=(n,)) for n in range(threads)]
        for w in workers:
            w.start()
        for w in workers:
            w.join()
        assert not errors
        assert s.writes == threads * per_thread

    con = raw(path)
    try:
        values = {v for (v,) in con.execute("SELECT v FROM t")}
        total = con.execute("SELECT count(*) FROM t").fetchone()[0]
    finally:
        con.close()
    assert total == threads * per_thread
    assert values == {f"{n}:{i}" for n in range(threads) for i in range(per_thread)}


@pytest.mark.parametrize("journal", ["wal", "delete"])
def test_advisory_writes_survive_a_lock_held_past_the_retry(
    tmp_path: Path,
    journal: str,
    sqlite_driver: str,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The compression lock and the cooldown are advisory, as in the original: another
    writer holding SQLite's lock through the whole retry (DatabaseLocked inside) makes
    them log and answer False / None, never fail the turn; on both drivers, in each
    journal mode."""
    from hermes_store.repositories.coordination import CompressionLockRepository
    from hermes_store.repositories.sessions import SessionRepository

    monkeypatch.setenv(JOURNAL_ENV, journal)
    path = tmp_path / "state.db"
    migrate.upgrade(url(path), fts_min_pause=0)
    with Store(url(path), retry=RetryPolicy(attempts=1)) as s:
        mode = s.read(lambda conn: conn.exec_driver_sql("PRAGMA journal_mode").scalar())
        assert mode == journal
        SessionRepository(s).create_session("s1", "cli")
        locks, sessions = CompressionLockRepository(s), SessionRepository(s)
        with held_write_lock(path), caplog.at_level("WARNING"):
            assert locks.try_acquire("s1", "me") is False
            assert locks.refresh("s1", "me") is False
            locks.release("s1", "me")
            sessions.record_compression_failure_cooldown("s1", time.time() + 60.0)
            sessions.clear_compression_failure_cooldown("s1")
        assert "database is locked" in caplog.text
        assert locks.try_acquire("s1", "me") is True
