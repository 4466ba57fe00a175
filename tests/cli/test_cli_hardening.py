"""The command line against hostile input and hostile surroundings: stored text that
would drive the terminal, export targets that are not regular files, limits out of
range, URL options that make no sense, a process file-size limit (issue 28, items 7, 8
and 10). Every test runs the real command (`python -m hermes_store.cli`) or the real
repositories on real SQLite files and the real PostgreSQL server."""

from __future__ import annotations

import json
import os
import select
import sqlite3
import stat
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from helpers.raw_sql import RawConnection

from hermes_store.repositories.coordination import AsyncDelegationRepository
from hermes_store.repositories.messages import MessageRepository
from hermes_store.repositories.sessions import SessionRepository
from hermes_store.repositories.telegram import TelegramTopicRepository
from hermes_store.repositories.usage import UsageRepository
from hermes_store.store import Store

#: What a stored string may hold to take over a terminal: OSC 52 (write the clipboard),
#: CSI (colours, clear screen), the 8-bit CSI (C1 0x9b), a bare CR, DEL and a
#: right-to-left override.
HOSTILE = "\x1b]52;c;cHduZWQ=\x07\x1b[2J\x1b[31m\x9b2J\r\x7f\u202e"
#: Characters none of the human-readable outputs may contain.
RAW_CONTROLS = ("\x1b", "\x07", "\x9b", "\r", "\x7f", "\u202e")


def run_cli(
    *args: str, env: dict[str, str] | None = None, timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    """The command's output as the terminal would get it: bytes decoded without the
    newline translation of text mode, which would turn a raw CR into LF."""
    done = subprocess.run(
        [sys.executable, "-m", "hermes_store.cli", *args],
        capture_output=True,
        env={**os.environ, **(env or {})},
        timeout=timeout,
        check=False,
    )
    return subprocess.CompletedProcess(
        done.args,
        done.returncode,
        done.stdout.decode("utf-8", "surrogateescape"),
        done.stderr.decode("utf-8", "surrogateescape"),
    )


def one_line_error(result: subprocess.CompletedProcess[str]) -> str:
    """The single `hermes-store: error: ...` line of a failed command (exit 2)."""
    assert result.returncode == 2, (result.returncode, result.stdout, result.stderr)
    assert "Traceback" not in result.stderr, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("hermes-store: error: "), lines
    return lines[0]


def no_raw_controls(text: str) -> None:
    found = [ascii(c) for c in RAW_CONTROLS if c in text]
    assert not found, f"raw {found} reach the terminal: {text!r}"


@pytest.fixture
def small_db(fresh_db: str) -> str:
    store = Store(fresh_db)
    try:
        for n in range(3):
            SessionRepository(store).create_session(f"s{n}", "cli")
            MessageRepository(store).append_message(f"s{n}", "user", f"hello {n}")
    finally:
        store.close()
    return fresh_db


# --------------------------------------------------------------------------- 8. terminal


@pytest.fixture
def hostile_db(fresh_db: str) -> str:
    """Two sessions whose id, source, title, roles, tool names, tool calls and content
    all carry HOSTILE (titles are sanitised on the way in, so the title is set the way a
    legacy file or another writer could have left it)."""
    store = Store(fresh_db)
    try:
        sessions = SessionRepository(store)
        messages = MessageRepository(store)
        for n in (1, 2):
            sid = f"evil{HOSTILE}{n}"
            sessions.create_session(sid, f"cli{HOSTILE}", model=f"model{HOSTILE}")
            messages.append_message(sid, f"user{HOSTILE}", f"deploy now {HOSTILE}")
            messages.append_message(
                sid,
                f"tool{HOSTILE}",
                f"deploy output {HOSTILE}",
                tool_name=f"sh{HOSTILE}",
                tool_calls=[{"function": {"name": f"run{HOSTILE}"}}],
            )
            UsageRepository(store).update_token_counts(sid, 10, 5, model=f"model{HOSTILE}")
    finally:
        store.close()
    con = sqlite3.connect(fresh_db.removeprefix("sqlite:///"))
    with con:
        con.execute("UPDATE sessions SET title = 'title' || id, ended_at = 1.0")
    con.close()
    return fresh_db


def test_stored_control_sequences_are_escaped_in_every_human_output(hostile_db: str) -> None:
    sid = f"evil{HOSTILE}1"
    shows_stored_text = [
        ("search", "deploy"),
        ("sessions", "list"),
        ("sessions", "show", sid),
        ("sessions", "prune", "--older-than", "0", "--dry-run"),
        ("stats",),
    ]
    refused = [
        ("sessions", "delete", sid),  # without --yes: the error names the session
        ("sessions", "show", "evil"),  # ambiguous: the error lists the stored ids
        ("sessions", "show", f"nothing{HOSTILE}"),
    ]
    for args in shows_stored_text:
        result = run_cli(*args, "--url", hostile_db)
        assert result.returncode == 0, (args, result.stderr)
        no_raw_controls(result.stdout)
        no_raw_controls(result.stderr)
        # shown escaped, not dropped: what is stored stays visible
        assert "\\x1b]52;c;cHduZWQ=\\x07" in result.stdout, (args, result.stdout)
    for args in refused:
        result = run_cli(*args, "--url", hostile_db)
        no_raw_controls(result.stdout)
        no_raw_controls(result.stderr)
        assert "\\x1b]52" in one_line_error(result), args
    shown = run_cli("sessions", "show", sid, "--url", hostile_db).stdout
    for escaped in ("\\u202e", "\\x9b", "\\x0d", "\\x7f"):
        assert escaped in shown, (escaped, shown)
    for needle in ("user", "tool", "sh", "run", "titleevil", "model", "cli"):
        assert f"{needle}\\x1b]52" in shown, (needle, shown)


def _strings(value: Any) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [s for v in value.values() for s in _strings(v)]
    if isinstance(value, list):
        return [s for v in value for s in _strings(v)]
    return []


def test_json_output_escapes_every_control_and_round_trips(hostile_db: str) -> None:
    sid = f"evil{HOSTILE}1"
    for args in (
        ("search", "deploy", "--json"),
        ("sessions", "list", "--json"),
        ("sessions", "show", sid, "--json"),
        ("sessions", "export"),
        ("sessions", "export", sid),
    ):
        result = run_cli(*args, "--url", hostile_db)
        assert result.returncode == 0, (args, result.stderr)
        no_raw_controls(result.stdout)
        assert "\\u001b]52" in result.stdout and "\\u202e" in result.stdout, args
        text = result.stdout
        values = (
            [json.loads(line) for line in text.splitlines()]
            if args[1:2] == ("export",) and len(args) == 2
            else json.loads(text)
        )
        assert any(HOSTILE in text for text in _strings(values)), args  # the value itself


def test_argument_errors_escape_what_the_user_typed(fresh_db: str) -> None:
    result = run_cli("sessions", "list", f"extra{HOSTILE}")
    no_raw_controls(result.stderr)
    assert "extra\\x1b]52" in one_line_error(result)


# --------------------------------------------------------------------------- 7. export -o


def _read_fifo_while(proc: subprocess.Popen[str], fd: int) -> bytes:
    """Everything written to the FIFO whose read end is `fd` (non-blocking) until the
    writer is done and the FIFO drained."""
    data = b""
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        ready, _, _ = select.select([fd], [], [], 0.2)
        chunk = b""
        if ready:
            try:
                chunk = os.read(fd, 65536)
            except BlockingIOError:
                chunk = b""
        data += chunk
        if not chunk:
            if proc.poll() is not None:
                return data
            time.sleep(0.05)  # no writer yet: the read end reports end of file at once
    raise AssertionError("the export did not finish")


def test_export_to_a_fifo_streams_into_it(small_db: str, tmp_path: Path) -> None:
    fifo = tmp_path / "sessions.fifo"
    os.mkfifo(fifo)
    fd = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)
    try:
        proc = subprocess.Popen(
            [sys.executable, "-m", "hermes_store.cli", "sessions", "export", "-o", str(fifo)]
            + ["--url", small_db],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        data = _read_fifo_while(proc, fd)
        out, err = proc.communicate(timeout=60)
    finally:
        os.close(fd)
    assert proc.returncode == 0, err
    assert stat.S_ISFIFO(os.stat(fifo).st_mode), "the FIFO was replaced by a regular file"
    assert sorted(json.loads(line)["id"] for line in data.decode().splitlines()) == [
        "s0",
        "s1",
        "s2",
    ]
    assert "exported 3 session(s)" in out
    assert not [p.name for p in tmp_path.iterdir() if p.name.endswith(".part")]


def _device(path: Path, kind: int, major: int, minor: int) -> None:
    try:
        os.mknod(path, kind | 0o666, os.makedev(major, minor))
    except (PermissionError, OSError) as exc:
        pytest.skip(f"cannot create a device node here: {exc}")


def test_export_to_a_character_device_writes_through_it(small_db: str, tmp_path: Path) -> None:
    # a private node of /dev/null (1, 3): the machine's own /dev/null is never at risk
    null = tmp_path / "null"
    _device(null, stat.S_IFCHR, 1, 3)
    try:
        with open(null, "w") as probe:
            probe.write("x")
    except OSError as exc:
        pytest.skip(f"device nodes do not work on this file system: {exc}")
    result = run_cli("sessions", "export", "-o", str(null), "--url", small_db)
    assert result.returncode == 0, result.stderr
    assert stat.S_ISCHR(os.stat(null).st_mode), "the device node was replaced by a file"
    assert os.stat(null).st_rdev == os.makedev(1, 3)
    assert not [p.name for p in tmp_path.iterdir() if p.name.endswith(".part")]


def test_export_refuses_a_block_device_and_leaves_it(small_db: str, tmp_path: Path) -> None:
    # a node for a device number nothing answers to: never a real disk
    disk = tmp_path / "disk"
    _device(disk, stat.S_IFBLK, 259, 999_999)
    line = one_line_error(run_cli("sessions", "export", "-o", str(disk), "--url", small_db))
    assert str(disk) in line and "block device" in line
    assert stat.S_ISBLK(os.stat(disk).st_mode)


def test_export_to_a_regular_file_still_replaces_it_whole(small_db: str, tmp_path: Path) -> None:
    target = tmp_path / "out.jsonl"
    target.write_text("old\n")
    result = run_cli("sessions", "export", "-o", str(target), "--url", small_db)
    assert result.returncode == 0, result.stderr
    assert len(target.read_text().splitlines()) == 3
    assert stat.S_IMODE(target.stat().st_mode) == 0o600


# --------------------------------------------------------------------------- 10. limits


@pytest.mark.parametrize(
    "args",
    [
        ("search", "deploy", "--limit", "99999999999999999999"),
        ("search", "deploy", "--limit", "-1"),
        ("sessions", "list", "--limit", "99999999999999999999"),
        ("sessions", "list", "--limit", "-5"),
    ],
)
def test_limit_out_of_range_is_a_clear_error(small_db: str, args: tuple[str, ...]) -> None:
    line = one_line_error(run_cli(*args, "--url", small_db))
    assert "--limit" in line and args[-1] in line and "--help" in line, line


def test_bogus_prepare_threshold_is_a_clear_error(pg_fresh_db: str) -> None:
    for value in ("bogus", "-3"):
        line = one_line_error(
            run_cli("current", "--url", f"{pg_fresh_db}?prepare_threshold={value}")
        )
        assert "prepare_threshold" in line and value in line
    good = run_cli("current", "--url", f"{pg_fresh_db}?prepare_threshold=none")
    assert good.returncode == 0, good.stderr


def _seed_listing(raw: RawConnection) -> list[str]:
    """Five cron sessions of one job, each with a user message; five delegations; five
    unbound Telegram sessions of one user."""
    ids = []
    for n in range(5):
        sid = f"cron_job1_{n}"
        ids.append(sid)
        raw.execute(
            "INSERT INTO sessions (id, source, started_at) VALUES (?, 'cron', ?)", (sid, 100.0 + n)
        )
        raw.execute(
            "INSERT INTO sessions (id, source, user_id, started_at)"
            " VALUES (?, 'telegram', 'u1', ?)",
            (f"tg{n}", 50.0 + n),
        )
        raw.execute(
            "INSERT INTO async_delegations (delegation_id, origin_session, state, dispatched_at,"
            " updated_at, task_json) VALUES (?, 'origin', 'running', ?, ?, '{}')",
            (f"d{n}", 10.0 + n, 10.0 + n),
        )
    return ids


def test_negative_and_huge_limits_behave_alike_on_both_backends(backend_url: str) -> None:
    """A negative limit means no limit (SQLite's LIMIT -1, which the original passed
    through), a negative offset none; a limit beyond 64 bits is no limit either."""
    raw = RawConnection(backend_url)
    try:
        ids = _seed_listing(raw)
    finally:
        raw.close()
    store = Store(backend_url)
    try:
        sessions = SessionRepository(store)
        messages = MessageRepository(store)
        for sid in ids:
            messages.append_message(sid, "user", f"hi {sid}")
            messages.append_message(sid, "assistant", "hello")
        huge = 10**20
        for limit in (-1, -7, huge):
            listed = sessions.list_sessions_rich(limit=limit, offset=-3)
            assert len(listed) == 10, limit
            assert len(sessions.search_sessions(limit=limit, offset=-1)) == 10, limit
            assert len(sessions.list_cron_job_runs("job1", limit=limit, offset=-1)) == 5, limit
            assert len(messages.get_messages(ids[0], limit=limit, offset=-2)) == 2, limit
            assert len(messages.list_recent_user_messages(ids[0], limit=limit)) == 1, limit
            delegations = AsyncDelegationRepository(store).list_by_state(limit=limit)
            assert len(delegations) == 5, limit
            telegram = TelegramTopicRepository(store)
            unlinked = telegram.list_unlinked_telegram_sessions_for_user(
                chat_id="c1", user_id="u1", limit=limit
            )
            assert len(unlinked) == 5, limit
            assert sessions.list_skill_scaffolded_sessions(limit=limit) == [], limit
        around = messages.get_messages(ids[0])[0]["id"]
        assert len(messages.get_messages_around(ids[0], around, window=huge)["window"]) == 2
        # the documented edges stay: 0 is an empty page, None no limit
        assert sessions.list_sessions_rich(limit=0) == []
        assert len(sessions.list_sessions_rich(limit=None)) == 10
        assert len(sessions.list_sessions_rich(limit=3, offset=8)) == 2
        assert sessions.list_sessions_rich(limit=3, offset=huge) == []
    finally:
        store.close()


# --------------------------------------------------------------------------- 10. EFBIG

_FILL_UNDER_LIMIT = r"""
import os, resource, signal, sys
from hermes_store.config import JournalPolicy
from hermes_store.errors import StorageFull
from hermes_store.repositories.messages import MessageRepository
from hermes_store.store import Store

path, mode = sys.argv[1], sys.argv[2]
store = Store(path, journal=JournalPolicy(mode))
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
limit = os.path.getsize(path) + 400_000
resource.setrlimit(resource.RLIMIT_FSIZE, (limit, resource.RLIM_INFINITY))
messages = MessageRepository(store)
stored = 0
try:
    for i in range(10_000):
        messages.append_message("s", "user", f"m{i} " + os.urandom(2_000).hex())
        stored += 1
    print("never failed")
except Exception as exc:
    print(stored, type(exc).__name__, isinstance(exc, StorageFull), str(exc), sep="\n")
    try:
        messages.append_message("s", "user", "again " + os.urandom(3_000).hex())
    except StorageFull:
        print("again: StorageFull")
store.close()
"""


@pytest.mark.parametrize("mode", ["delete", "wal"])
def test_a_file_size_limit_is_a_typed_storage_error(fresh_db: str, mode: str) -> None:
    path = fresh_db.removeprefix("sqlite:///")
    store = Store(fresh_db)
    SessionRepository(store).create_session("s", "cli")
    store.close()
    done = subprocess.run(
        [sys.executable, "-c", _FILL_UNDER_LIMIT, path, mode],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    stored, kind, typed, message = int(lines[0]), lines[1], lines[2], lines[3]
    assert stored > 0 and kind == "StorageFull" and typed == "True", done.stdout
    assert "file-size limit" in message and "ulimit -f" in message and path in message, message
    assert lines[4] == "again: StorageFull"
    # nothing that was acknowledged is lost, nothing else was written, the file is sound
    con = sqlite3.connect(path)
    try:
        assert con.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
        assert con.execute("SELECT COUNT(*) FROM messages").fetchone()[0] == stored
    finally:
        con.close()


def test_cli_import_under_a_file_size_limit_says_so(small_db: str, tmp_path: Path) -> None:
    source = tmp_path / "big.jsonl"
    with source.open("w") as fp:
        for n in range(40):
            entry: dict[str, Any] = {
                "id": f"big{n}",
                "source": "cli",
                "started_at": 1000.0 + n,
                "messages": [
                    {"role": "user", "content": os.urandom(4_000).hex(), "timestamp": 1000.0 + n}
                ],
            }
            fp.write(json.dumps(entry) + "\n")
    path = small_db.removeprefix("sqlite:///")
    limit = os.path.getsize(path) + 150_000
    script = (
        "import resource, runpy, signal, sys;"
        "signal.signal(signal.SIGXFSZ, signal.SIG_IGN);"
        f"resource.setrlimit(resource.RLIMIT_FSIZE, ({limit}, resource.RLIM_INFINITY));"
        "sys.argv = ['hermes-store', *sys.argv[1:]];"
        "runpy.run_module('hermes_store.cli', run_name='__main__')"
    )
    result = subprocess.run(
        [sys.executable, "-c", script, "sessions", "import", str(source), "--url", small_db],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    line = one_line_error(result)
    assert "file-size limit" in line and "ulimit -f" in line, line
    # SQLite may leave the failed transaction's journal behind (after an I/O error its
    # pager rolls back on the next open that may write): this one rolls it back
    con = sqlite3.connect(path)
    try:
        assert con.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
        assert con.execute("SELECT COUNT(*) FROM sessions").fetchone()[0] == 3
    finally:
        con.close()


def test_a_missing_postgresql_driver_is_a_one_line_error() -> None:
    """Without the `postgres` extra a PostgreSQL URL says what to install, no traceback."""
    code = (
        "import sys; sys.modules['psycopg'] = None\n"  # as if it were not installed
        "from hermes_store.cli import main\n"
        "raise SystemExit(main(['check', '--url', 'postgresql://me@127.0.0.1/x']))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 2
    assert "Traceback" not in done.stderr
    assert "pip install 'hermes-store[postgres]'" in done.stderr
