"""`hermes-store encrypt` / `decrypt` and every command on an encrypted file, run as real
subprocesses with the key in the environment (docs/encryption.md). Skipped where
sqlcipher3 (the `encryption` extra) is not installed."""

from __future__ import annotations

import importlib.util
import os
import sqlite3
import subprocess
import sys
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest
from helpers.databases import url_for

from hermes_store import migrate
from hermes_store.migration.head import HEAD_REVISION

pytestmark = [
    pytest.mark.sqlite_only,
    pytest.mark.skipif(
        importlib.util.find_spec("sqlcipher3") is None,
        reason="sqlcipher3 is not installed (the encryption extra; the test extra on Linux x86_64)",
    ),
]

CLI = str(Path(sys.executable).with_name("hermes-store"))
KEY = "cli-passphrase-'never-shown'"
MARKER = "quokkalantern"
#: every command run here, with everything it printed (checked for the key at the end)
OUTPUTS: list[str] = []


def run(*args: str, key: str | None = None, key_file: Path | None = None) -> Any:
    env = {k: v for k, v in os.environ.items() if not k.startswith("HERMES_STORE_")}
    if key is not None:
        env["HERMES_STORE_KEY"] = key
    if key_file is not None:
        env["HERMES_STORE_KEY_FILE"] = str(key_file)
    done = subprocess.run([CLI, *args], capture_output=True, text=True, env=env, timeout=120)
    OUTPUTS.append(done.stdout + done.stderr)
    return done


def one_line_error(done: Any) -> str:
    assert done.returncode == 2, done.stdout + done.stderr
    assert "Traceback" not in done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    return lines[0]


def _plain_file(path: Path) -> Path:
    from hermes_store import MessageRepository, SessionRepository, Store

    migrate.upgrade(url_for(path), fts_min_pause=0)
    with Store(url_for(path)) as store:
        SessionRepository(store).create_session("s1", "cli", model="hermes-4")
        for n in range(3):
            MessageRepository(store).append_message("s1", "user", f"trip to Kyoto {n} {MARKER}")
    return path


@pytest.fixture(autouse=True)
def _no_key_shown() -> Any:
    OUTPUTS.clear()
    yield
    for text in OUTPUTS:
        assert KEY not in text
        assert "never-shown" not in text


def test_encrypt_every_command_then_decrypt(tmp_path: Path) -> None:
    path = _plain_file(tmp_path / "state.db")
    url = str(path)

    refused = one_line_error(run("encrypt", "--url", url))
    assert "needs the key" in refused and "HERMES_STORE_KEY" in refused

    done = run("encrypt", "--url", url, key=KEY)
    assert done.returncode == 0, done.stderr
    backup_line = next(line for line in done.stdout.splitlines() if line.startswith("backup: "))
    backup = Path(backup_line.removeprefix("backup: ").split(" (")[0])
    assert backup.is_file() and (backup.stat().st_mode & 0o777) == 0o600
    assert "NOT encrypted" in backup_line
    assert "the original Hermes cannot open an encrypted file" in done.stdout
    assert MARKER.encode() not in path.read_bytes()
    stdlib = sqlite3.connect(path)
    try:
        with pytest.raises(sqlite3.DatabaseError, match="file is not a database"):
            stdlib.execute("SELECT 1 FROM sqlite_master").fetchall()
    finally:
        stdlib.close()  # an open descriptor would make decrypt refuse (another process)

    for args in (
        ("sessions", "list"),
        ("search", "kyoto"),
        ("check",),
        ("stats",),
        ("current",),
    ):
        missing = one_line_error(run(*args, "--url", url))
        assert "is encrypted" in missing and "no encryption key was given" in missing, args
        wrong = one_line_error(run(*args, "--url", url, key="not the key"))
        assert "does not open with the encryption key given" in wrong, args

    listing = run("sessions", "list", "--url", url, key=KEY)
    assert listing.returncode == 0 and "s1" in listing.stdout
    words = run("search", "kyoto", "--url", url, key=KEY)
    assert words.returncode == 0 and words.stdout.count(">>>Kyoto<<<") == 3
    substring = run("search", "kkalant", "--url", url, key=KEY)  # the trigram index
    assert substring.returncode == 0 and substring.stdout.count("s1") == 3
    check = run("check", "--url", url, key=KEY)
    assert check.returncode == 0, check.stdout + check.stderr
    assert "encrypted:     yes (SQLCipher 4." in check.stdout
    assert "sqlcipher3 3.53" in check.stdout
    key_file = tmp_path / "key"
    key_file.write_text(KEY + "\n")
    key_file.chmod(0o600)
    assert run("sessions", "list", "--url", url, key_file=key_file).returncode == 0

    again = one_line_error(run("encrypt", "--url", url, key=KEY))
    assert "encrypted already" in again

    back = run("decrypt", "--url", url, key=KEY)
    assert back.returncode == 0, back.stderr
    assert "decrypted (plain SQLite)" in back.stdout
    raw = sqlite3.connect(path)
    try:
        assert raw.execute("SELECT count(*) FROM messages").fetchone() == (3,)
    finally:
        raw.close()
    plain = one_line_error(run("decrypt", "--url", url, key=KEY))
    assert "not encrypted" in plain
    assert "not encrypted" in one_line_error(run("decrypt", "--url", url))  # key or none
    listing = run("sessions", "list", "--url", url)
    assert listing.returncode == 0 and "s1" in listing.stdout


def test_upgrade_of_an_encrypted_legacy_file(legacy_db: Any) -> None:
    path = Path(legacy_db(18))
    with closing(sqlite3.connect(path)) as raw:
        messages = raw.execute("SELECT count(*) FROM messages").fetchone()[0]
    assert run("encrypt", "--url", str(path), "--no-backup", key=KEY).returncode == 0
    done = run("upgrade", "--url", str(path), key=KEY)
    assert done.returncode == 0, done.stdout + done.stderr
    backup_line = next(line for line in done.stdout.splitlines() if line.startswith("backup: "))
    backup = Path(backup_line.removeprefix("backup: ").split(" (")[0])
    assert not backup.read_bytes().startswith(b"SQLite format 3\x00")  # encrypted as well
    current = run("current", "--url", str(path), key=KEY)
    assert current.returncode == 0 and HEAD_REVISION in current.stdout
    count = run("stats", "--url", str(path), "--json", key=KEY)
    assert count.returncode == 0, count.stderr
    assert messages > 0
