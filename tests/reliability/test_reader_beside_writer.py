"""Readers beside a writer, in both journal modes.

In DELETE mode a reader's shared lock keeps a writer from committing (the writer needs
the exclusive lock), so a COMMIT meets SQLITE_BUSY; SQLite then keeps the writer's
transaction open. These tests hold a read open in another process while this one writes,
through the Store, the asyncio layer and the CLI, and check that every write lands and
the writer is as good as new once the reader is gone.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time
from pathlib import Path

import pytest
from helpers.databases import journal_mode
from helpers.processes import run_cli

from hermes_store import aio
from hermes_store.config import JOURNAL_ENV
from hermes_store.errors import DatabaseLocked
from hermes_store.repositories.messages import MessageRepository
from hermes_store.repositories.sessions import SessionRepository
from hermes_store.runtime.retry import RetryPolicy
from hermes_store.search.limits import TIMEOUT_ENV
from hermes_store.store import Store

pytestmark = pytest.mark.sqlite_only

HOLD_SECONDS = 2.0

#: Holds `with store.read() as conn:` open for argv[2] seconds after one read.
LONG_READER = """
import sys, time
from hermes_store.store import Store

store = Store(sys.argv[1])
with store.read() as conn:
    conn.exec_driver_sql("SELECT count(*) FROM messages").all()
    print("holding", flush=True)
    time.sleep(float(sys.argv[2]))
    ended = time.time()  # the read transaction ends with the block, just after this
store.close()
print("released", ended, flush=True)
"""


def _start_reader(url: str, seconds: float = HOLD_SECONDS) -> subprocess.Popen[str]:
    proc = subprocess.Popen(
        [sys.executable, "-c", LONG_READER, url, str(seconds)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    line = proc.stdout.readline()
    if line.strip() != "holding":
        proc.kill()
        raise AssertionError(f"the reader did not start: {proc.communicate(timeout=10)[1]}")
    return proc


def _path(url: str) -> Path:
    return Path(url.removeprefix("sqlite:///"))


def test_a_long_read_leaves_the_writer_working(
    journal_db: str, journal: str, sqlite_driver: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # on both drivers, the file kept in its mode (pysqlite3's SQLite would make it WAL)
    monkeypatch.setenv(JOURNAL_ENV, journal)
    assert journal_mode(_path(journal_db)) == journal
    with Store(journal_db) as store:
        SessionRepository(store).create_session("s", "cli")
        messages = MessageRepository(store)
        reader = _start_reader(journal_db)
        failures: list[str] = []
        stored = after = 0
        # during the read and 30 appends after it: each waits the read out or lands at once
        while reader.poll() is None or after < 30:
            after += reader.poll() is not None
            try:
                messages.append_message("s", "user", f"turn {stored}")
                stored += 1
            except Exception as exc:  # noqa: BLE001 (every failure is a finding)
                failures.append(f"{type(exc).__name__}: {str(exc).splitlines()[0]}")
            time.sleep(0.05)
        assert reader.wait(timeout=30) == 0, reader.communicate()[1]
        assert failures == [], f"{len(failures)} failed, {stored} stored: {failures[-1]}"
        assert messages.message_count("s") == stored
        rows = messages.get_messages("s")
        assert [r["content"] for r in rows] == [f"turn {i}" for i in range(stored)]
    assert not Path(f"{_path(journal_db)}-journal").exists()


def test_chats_beside_a_long_read_all_land(journal_db: str) -> None:
    chats, turns = 20, 10

    async def chat(store: aio.AsyncStore, n: int) -> list[int]:
        await store.sessions.create_session(f"chat-{n}", "telegram")
        ids = []
        for i in range(turns):
            ids.append(await store.messages.append_message(f"chat-{n}", "user", f"{n}/{i}"))
            await asyncio.sleep(0.02)
        return ids

    async def main() -> list[list[int]]:
        async with aio.AsyncStore(journal_db) as store:
            reader = await asyncio.to_thread(_start_reader, journal_db)
            try:
                # a guard against a hang, far above what the waits add up to
                return await asyncio.wait_for(
                    asyncio.gather(*(chat(store, n) for n in range(chats))), timeout=120
                )
            finally:
                await asyncio.to_thread(reader.wait, 30)

    results = asyncio.run(main())
    assert sorted(len(ids) for ids in results) == [turns] * chats
    with Store(journal_db) as store:
        for n in range(chats):
            rows = MessageRepository(store).get_messages(f"chat-{n}")
            assert [r["content"] for r in rows] == [f"{n}/{i}" for i in range(turns)]
    assert not Path(f"{_path(journal_db)}-journal").exists()


#: Appends one message every 20 ms until the file argv[2] appears; prints ok/failed counts.
STEADY_WRITER = """
import os, sys, time
from hermes_store.store import Store
from hermes_store.repositories.messages import MessageRepository

store = Store(sys.argv[1])
messages = MessageRepository(store)
ok = failed = 0
errors = set()
print("writing", flush=True)
while not os.path.exists(sys.argv[2]) or ok < 20:
    try:
        messages.append_message("w", "user", f"steady {ok}")
        ok += 1
    except Exception as exc:
        failed += 1
        errors.add(str(exc).splitlines()[0])
    time.sleep(0.02)
store.close()
print(ok, failed, sorted(errors), flush=True)
"""


def test_export_beside_a_writer(journal_db: str, tmp_path: Path) -> None:
    with Store(journal_db) as store:
        sessions, messages = SessionRepository(store), MessageRepository(store)
        sessions.create_session("w", "cli")
        for n in range(150):
            sessions.create_session(f"old-{n}", "cli")
            messages.append_messages(
                f"old-{n}", [{"role": "user", "content": f"old {n} {i} " * 40} for i in range(20)]
            )
    stop = tmp_path / "stop"
    writer = subprocess.Popen(
        [sys.executable, "-c", STEADY_WRITER, journal_db, str(stop)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert writer.stdout is not None and writer.stdout.readline().strip() == "writing"
        out = tmp_path / "all.jsonl"
        exported = run_cli("sessions", "export", "--url", journal_db, "-o", str(out))
    finally:
        stop.touch()
        report, err = writer.communicate(timeout=120)
    assert exported.returncode == 0, exported.stderr
    lines = out.read_text(encoding="utf-8").splitlines()
    assert len(lines) >= 151
    assert writer.returncode == 0, err
    ok, failed, errors = report.split(" ", 2)
    assert (int(failed), errors.strip()) == (0, "[]")
    with Store(journal_db) as store:
        assert MessageRepository(store).message_count("w") == int(ok)


def test_a_commit_waits_out_a_read_as_long_as_a_search(
    journal_db: str, journal: str, sqlite_driver: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """In DELETE mode a write that met a reader at its COMMIT (the first attempt waits
    SQLite's busy timeout) waits at its next COMMIT (no new reader starts meanwhile) for
    as long as a search may read, HERMES_SEARCH_TIMEOUT_MS and a grace, counted from the
    start of the write: a read shorter than that delays a write of two attempts and
    never fails it, however many searches overlap (each ends at its limit,
    on either driver: tests/search/test_search_limits.py). A read longer than that (not
    a search) fails it after that wait with DatabaseLocked, typed, and nothing written.
    In WAL mode the reader holds nothing up."""
    # the file stays in its mode (pysqlite3's SQLite would make a DELETE file WAL)
    monkeypatch.setenv(JOURNAL_ENV, journal)
    with Store(journal_db) as setup:
        SessionRepository(setup).create_session("s", "cli")
    assert journal_mode(_path(journal_db)) == journal
    # the reader outlives two attempts of SQLite's own busy timeout (1 s) and a pause:
    # without the longer wait the second COMMIT would give up while it reads too
    monkeypatch.setenv(TIMEOUT_ENV, "3000")
    with Store(journal_db, retry=RetryPolicy(attempts=2)) as writer:
        messages = MessageRepository(writer)
        reader = _start_reader(journal_db, 3.0)
        try:
            messages.append_message("s", "user", "beside a read")
            appended = time.time()
        finally:
            out, err = reader.communicate(timeout=30)
        assert reader.returncode == 0, err
        released = float(out.split()[-1])
        # WAL: the append did not wait for the read; DELETE: it waited it out
        assert (appended > released) == (journal == "delete"), (appended, released)
        assert [r["content"] for r in messages.get_messages("s")] == ["beside a read"]
    monkeypatch.setenv(TIMEOUT_ENV, "300")  # waits 1.3 s for the readers
    with Store(journal_db, retry=RetryPolicy(attempts=2)) as writer:
        messages = MessageRepository(writer)
        reader = _start_reader(journal_db, 4.0)
        try:
            if journal == "wal":
                messages.append_message("s", "user", "past the wait")
            else:
                with pytest.raises(DatabaseLocked, match="database is locked"):
                    messages.append_message("s", "user", "past the wait")
        finally:
            reader.kill()
            reader.wait(timeout=30)
        expected = ["beside a read"] + (["past the wait"] if journal == "wal" else [])
        assert [r["content"] for r in messages.get_messages("s")] == expected
