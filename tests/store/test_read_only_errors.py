"""Typed errors of reading without writing (issue 35, items 12, 13 and 16).

- A WAL-mode file in a directory this user may not write: SQLite cannot create the WAL
  index (`-shm`) a read needs, so every read is refused with DatabaseNotWritable naming
  it (a DELETE-mode file reads there as it is). File modes do not stop root, so the
  scenario runs under `setpriv` without CAP_DAC_OVERRIDE (helpers/filesystem.py), where
  they stop it as they stop a user.
- Any write on a read-only store is ReadOnlyStore (a DatabaseNotWritable), the same on
  both backends, both SQLite drivers and both journal modes.
- A read-only open leaves no -wal/-shm behind: not beside a symbolic link's target, and
  not when the store is never closed (it is tidied when collected, or at exit).

Each SQLite scenario runs in a subprocess per driver: the driver is chosen once per process
(HERMES_STORE_SQLITE_DRIVER).
"""

from __future__ import annotations

import json
import os
import pickle
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from helpers.databases import set_journal_mode
from helpers.filesystem import without_file_mode_override

from hermes_store import migrate
from hermes_store.errors import DatabaseNotWritable, ReadOnlyStore
from hermes_store.repositories.messages import MessageRepository
from hermes_store.repositories.sessions import SessionRepository
from hermes_store.store import Store

DRIVERS = ["sqlite3", "pysqlite3"]
JOURNALS = ["wal", "delete"]
SIDECARS = ("-wal", "-shm", "-journal")


def _run(
    driver: str, code: str, *args: str, prefix: list[str] | None = None
) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "HERMES_STORE_SQLITE_DRIVER": driver}
    return subprocess.run(
        [*(prefix or []), sys.executable, "-c", code, *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=False,
    )


def _cli(
    driver: str, *args: str, prefix: list[str] | None = None
) -> subprocess.CompletedProcess[str]:
    return _run(
        driver, "from hermes_store.cli import main; raise SystemExit(main())", *args, prefix=prefix
    )


def _database(path: Path, journal: str) -> Path:
    """A database at head holding one session and one message, closed (no companions)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    migrate.upgrade(str(path), fts_min_pause=0)
    with Store(str(path)) as store:
        SessionRepository(store).create_session("s", "cli")
        MessageRepository(store).append_message("s", "user", "kept")
    set_journal_mode(path, journal)
    assert _companions(path) == []
    return path


def _companions(path: Path) -> list[str]:
    return sorted(s for s in SIDECARS if Path(f"{path}{s}").exists())


@pytest.fixture
def locked_directory(tmp_path: Path) -> Iterator[Path]:
    """A directory (mode 0555) this test's subprocesses may not write."""
    directory = tmp_path / "ro"
    directory.mkdir()
    yield directory
    directory.chmod(0o755)


_READ = r"""
import json, sys
from hermes_store.store import Store
from hermes_store.repositories.messages import MessageRepository
try:
    with Store(sys.argv[1], read_only=True) as store:
        read = [m["content"] for m in MessageRepository(store).get_messages("s")]
    print(json.dumps(["read", read]))
except Exception as exc:
    from hermes_store.errors import DatabaseNotWritable
    print(json.dumps([type(exc).__name__, str(exc), isinstance(exc, DatabaseNotWritable)]))
"""


@pytest.mark.parametrize("journal", JOURNALS)
@pytest.mark.parametrize("driver", DRIVERS)
def test_a_wal_file_in_a_directory_this_user_cannot_write(
    locked_directory: Path, driver: str, journal: str
) -> None:
    prefix = without_file_mode_override()
    path = _database(locked_directory / "state.db", journal)
    locked_directory.chmod(0o555)
    done = _run(driver, _READ, str(path), prefix=prefix)
    assert done.returncode == 0, done.stderr
    outcome = json.loads(done.stdout)
    if journal == "delete":
        assert outcome == ["read", ["kept"]]
    else:
        kind, message, typed = outcome
        assert (kind, typed) == ("DatabaseNotWritable", True), outcome
        assert f"{path}-shm" in message and str(locked_directory) in message, message
    for command in (["sessions", "list"], ["stats"], ["current"], ["check"]):
        ran = _cli(driver, *command, "--url", str(path), prefix=prefix)
        if journal == "delete":
            assert ran.returncode in (0, 1), (command, ran.stderr)  # check: 1 for a warning
            assert "Traceback" not in ran.stderr
            continue
        assert ran.returncode == 2, (command, ran.stdout, ran.stderr)
        (line,) = ran.stderr.splitlines()
        assert line.startswith("hermes-store: error: "), line
        assert f"{path}-shm" in line, (command, line)
    assert _companions(path) == []


_WRITE = r"""
import json, sys
from sqlalchemy import text
from hermes_store.compat import SessionDB
from hermes_store.errors import ReadOnlyStore
from hermes_store.repositories.housekeeping import HousekeepingRepository
from hermes_store.repositories.messages import MessageRepository
from hermes_store.repositories.sessions import SessionRepository
from hermes_store.repositories.telegram import TelegramTopicRepository
from hermes_store.store import Store

outcomes = {}

def attempt(name, write):
    try:
        write()
    except Exception as exc:
        outcomes[name] = [type(exc).__name__, isinstance(exc, ReadOnlyStore), str(exc)]
    else:
        outcomes[name] = ["written", False, ""]

with Store(sys.argv[1], read_only=True) as store:
    attempt("append", lambda: MessageRepository(store).append_message("s", "user", "no"))
    attempt("create", lambda: SessionRepository(store).create_session("t", "cli"))
    attempt("write", lambda: store.write(lambda conn: conn.execute(text("DELETE FROM messages"))))

    def in_a_read_block():
        with store.read() as conn:
            conn.execute(text("DELETE FROM messages"))

    attempt("statement in a read", in_a_read_block)
    # writes that do not go through Store.write (VACUUM, FTS merges, a table rebuild)
    attempt("vacuum", lambda: HousekeepingRepository(store).vacuum())
    attempt("fts optimize", lambda: HousekeepingRepository(store).optimize_fts())
    attempt("fts rebuild", lambda: HousekeepingRepository(store).rebuild_fts())
    telegram = TelegramTopicRepository(store)
    attempt("telegram migration", telegram.apply_telegram_topic_migration)
url = sys.argv[1]
db = SessionDB(url=url, read_only=True) if "://" in url else SessionDB(url, read_only=True)
attempt("facade append", lambda: db.append_message("s", "user", "no"))
db.close()
print(json.dumps(outcomes))
"""

_WRITES = [
    "append",
    "create",
    "write",
    "statement in a read",
    "vacuum",
    "fts optimize",
    "fts rebuild",
    "telegram migration",
    "facade append",
]


def _assert_refused(outcomes: dict[str, list[Any]], place: str) -> None:
    assert sorted(outcomes) == sorted(_WRITES)
    for name, (kind, typed, message) in outcomes.items():
        assert (kind, typed) == ("ReadOnlyStore", True), (name, kind, message)
        assert place in message and "nothing was written" in message, (name, message)


@pytest.mark.parametrize("journal", JOURNALS)
@pytest.mark.parametrize("driver", DRIVERS)
def test_every_write_on_a_read_only_store_is_read_only_store(
    tmp_path: Path, driver: str, journal: str
) -> None:
    path = _database(tmp_path / "state.db", journal)
    before = path.read_bytes()
    done = _run(driver, _WRITE, str(path))
    assert done.returncode == 0, done.stderr
    _assert_refused(json.loads(done.stdout), str(path))
    assert path.read_bytes() == before
    assert _companions(path) == []


def test_every_write_on_a_read_only_store_is_read_only_store_on_postgresql(
    pg_fresh_db: str,
) -> None:
    from hermes_store.config import resolve_url, shown_url

    with Store(pg_fresh_db) as store:
        SessionRepository(store).create_session("s", "cli")
        MessageRepository(store).append_message("s", "user", "kept")
    done = _run("sqlite3", _WRITE, pg_fresh_db)
    assert done.returncode == 0, done.stderr
    _assert_refused(json.loads(done.stdout), shown_url(resolve_url(pg_fresh_db)))
    with Store(pg_fresh_db, read_only=True) as store:
        assert [m["content"] for m in MessageRepository(store).get_messages("s")] == ["kept"]
        with pytest.raises(ReadOnlyStore) as refused:
            store.write(lambda conn: None)
    assert isinstance(refused.value, DatabaseNotWritable)
    # it crosses a process boundary (AsyncStore's workers, multiprocessing) unchanged
    copy = pickle.loads(pickle.dumps(refused.value))
    assert type(copy) is ReadOnlyStore and str(copy) == str(refused.value)


_LEAVE = r"""
import gc, json, os, sys
from pathlib import Path
from hermes_store.store import Store
from hermes_store.repositories.messages import MessageRepository

link, target, how = sys.argv[1:4]
store = Store(link, read_only=True)
read = [m["content"] for m in MessageRepository(store).get_messages("s")]
during = sorted(n for n in os.listdir(Path(target).parent) if n != "state.db")
if how == "close":
    store.close()
elif how == "collect":
    del store
    gc.collect()
after = sorted(n for n in os.listdir(Path(target).parent) if n != "state.db")
print(json.dumps([read, during, after]))
"""


@pytest.mark.parametrize("how", ["close", "collect", "exit"])
@pytest.mark.parametrize("journal", JOURNALS)
@pytest.mark.parametrize("driver", DRIVERS)
def test_a_read_only_store_leaves_no_companions_beside_a_link_target(
    tmp_path: Path, driver: str, journal: str, how: str
) -> None:
    """Opened through a symbolic link in another directory; closed, dropped without
    closing (collected), or left open until the interpreter exits."""
    target = _database(tmp_path / "data" / "state.db", journal)
    (tmp_path / "links").mkdir()
    link = tmp_path / "links" / "state.db"
    link.symlink_to(target)
    before = target.read_bytes()
    done = _run(driver, _LEAVE, str(link), str(target), how)
    assert done.returncode == 0, done.stderr
    read, during, after = json.loads(done.stdout)
    assert read == ["kept"]
    if journal == "wal":
        # the reader had them, beside the target: the tidy-up has something to do
        assert during == ["state.db-shm", "state.db-wal"], during
    if how != "exit":
        assert after == [], after  # tidied by close() or by the collection itself
    assert _companions(target) == [] and _companions(link) == []
    assert sorted(p.name for p in link.parent.iterdir()) == ["state.db"]
    assert target.read_bytes() == before


def test_an_async_read_only_store_refuses_writes_the_same_way(backend_url: str) -> None:
    import asyncio

    from hermes_store import aio

    async def main() -> None:
        async with aio.AsyncStore(backend_url, read_only=True) as store:
            with pytest.raises(ReadOnlyStore):
                await store.messages.append_message("s", "user", "no")
            with pytest.raises(ReadOnlyStore):
                await store.sessions.create_session("t", "cli")
            assert await store.sessions.get_session("t") is None

    asyncio.run(main())
