"""Encryption at rest on SQLite through SQLCipher (docs/encryption.md), on real files.

A process drives every SQLite file through one library and the suite's process drives the
standard library's, so the tests that encrypt run on sqlcipher3 in a child pytest
(tests/helpers/drivers.py), skipped with the reason where sqlcipher3 is not installed.
The tests of what a process without sqlcipher3 as its driver says run here.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import os
import sqlite3
import subprocess
import sys
import traceback
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest
from helpers.databases import url_for

from hermes_store import migrate
from hermes_store.errors import (
    AlreadyEncrypted,
    EncryptionKeyError,
    EncryptionKeyRequired,
    EncryptionUnavailable,
    FileInUse,
    InvalidInput,
    NotADatabaseFile,
    NotEncrypted,
    WrongEncryptionKey,
)
from hermes_store.sqlite import driver as driver_choice

pytestmark = pytest.mark.sqlite_only
on_sqlcipher = pytest.mark.parametrize("sqlite_driver", ["sqlcipher3"], indirect=True)

KEY = "correct horse 'battery' staple"
WRONG = "incorrect horse battery staple"
#: a word no page of an encrypted file may hold in plain text
MARKER = "zebracornflux"


def _plain_store_file(path: Path, messages: int = 5) -> Path:
    """A plain database at head with a session of `messages` messages, each holding MARKER."""
    from hermes_store import MessageRepository, SessionRepository, Store

    migrate.upgrade(url_for(path), fts_min_pause=0)
    with Store(url_for(path)) as store:
        SessionRepository(store).create_session("s1", "cli", model="hermes-4")
        for n in range(messages):
            MessageRepository(store).append_message(
                "s1", "user", f"flights to Kyoto number {n} {MARKER}"
            )
    return path


def _encrypted_store_file(path: Path, key: Any = KEY, messages: int = 5) -> Path:
    from hermes_store import MessageRepository, SessionRepository, Store
    from hermes_store.sqlite.encryption import forget_key, register_key

    register_key(path, key)
    try:
        migrate.upgrade(url_for(path), fts_min_pause=0)
    finally:
        forget_key(path)
    with Store(url_for(path), key=key) as store:
        SessionRepository(store).create_session("s1", "cli", model="hermes-4")
        for n in range(messages):
            MessageRepository(store).append_message(
                "s1", "user", f"flights to Kyoto number {n} {MARKER}"
            )
    return path


def _bytes_on_disk(path: Path) -> bytes:
    return b"".join(
        Path(f"{path}{s}").read_bytes() for s in ("", "-wal") if Path(f"{path}{s}").exists()
    )


def _counts(store: Any) -> tuple[int, int]:
    with store.read() as conn:
        sessions = conn.exec_driver_sql("SELECT count(*) FROM sessions").scalar()
        messages = conn.exec_driver_sql("SELECT count(*) FROM messages").scalar()
    return int(sessions), int(messages)


def _files(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir() if p.name != "hermes_home")


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


# ------------------------------------------------------------------ on sqlcipher3 (child)


@on_sqlcipher
def test_an_encrypted_file_is_unreadable_without_its_key(
    tmp_path: Path, sqlite_driver: str
) -> None:
    from hermes_store import SearchRepository, Store

    path = _encrypted_store_file(tmp_path / "state.db")
    assert MARKER.encode() not in _bytes_on_disk(path)
    assert b"Kyoto" not in _bytes_on_disk(path)
    assert not path.read_bytes().startswith(b"SQLite format 3\x00")
    stdlib = sqlite3.connect(path)
    try:
        with pytest.raises(sqlite3.DatabaseError, match="file is not a database"):
            stdlib.execute("SELECT count(*) FROM sqlite_master").fetchall()
    finally:
        stdlib.close()

    with pytest.raises(EncryptionKeyRequired) as no_key:
        Store(url_for(path))
    assert isinstance(no_key.value, NotADatabaseFile)
    with pytest.raises(WrongEncryptionKey):
        Store(url_for(path), key=WRONG)
    with pytest.raises(WrongEncryptionKey):
        Store(url_for(path), read_only=True, key=WRONG)

    asked: list[int] = []

    def key_source() -> str:
        asked.append(1)
        return KEY

    with Store(url_for(path), key=key_source) as store:
        assert _counts(store) == (1, 5)
        search = SearchRepository(store)
        assert len(search.search_messages("kyoto")) == 5  # the word index
        assert len(search.search_messages("racornfl")) == 5  # the trigram index
    assert asked, "the key source was never asked"


@on_sqlcipher
def test_sqlcipher_files_get_wal_by_the_wal_reset_rule(tmp_path: Path, sqlite_driver: str) -> None:
    from hermes_store import Store
    from hermes_store.migrate import sqlite_storage

    driver = driver_choice.current()
    assert driver.name == "sqlcipher3"
    assert driver.wal_safe  # SQLCipher 4.19 bundles SQLite 3.53.4, which has the fix
    path = _encrypted_store_file(tmp_path / "state.db")
    with Store(url_for(path), key=KEY) as store, store.read() as conn:
        storage = sqlite_storage(conn)
    assert storage.journal_mode == "wal"
    assert storage.encrypted.startswith("yes (SQLCipher 4.")


@on_sqlcipher
def test_a_key_given_for_a_plain_file_is_refused(tmp_path: Path, sqlite_driver: str) -> None:
    from hermes_store import Store

    path = _plain_store_file(tmp_path / "state.db")
    before = _digest(path)
    with pytest.raises(NotEncrypted, match="not encrypted"):
        Store(url_for(path), key=KEY)
    assert _digest(path) == before
    with Store(url_for(path)) as store:  # without a key it is the plain file it was
        assert _counts(store) == (1, 5)


@on_sqlcipher
def test_the_key_never_reaches_output_logs_or_errors(
    tmp_path: Path,
    sqlite_driver: str,
    caplog: pytest.LogCaptureFixture,
    capfd: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from hermes_store import Store
    from hermes_store.sqlite.encrypt import decrypt_file, encrypt_file

    caplog.set_level(logging.DEBUG)
    secret = "s3cr3t-Passphrase-'quoted'"
    encrypted = _encrypted_store_file(tmp_path / "enc.db", key=secret)
    plain = _plain_store_file(tmp_path / "plain.db")
    failures: list[BaseException] = []

    def failing(call: Any) -> None:
        with pytest.raises(EncryptionKeyError) as caught:
            call()
        failures.append(caught.value)

    failing(lambda: Store(url_for(encrypted), key=secret[::-1]))  # wrong
    failing(lambda: Store(url_for(encrypted)))  # none
    failing(lambda: Store(url_for(plain), key=secret))  # plain file
    failing(lambda: decrypt_file(encrypted, secret + "x"))
    failing(lambda: decrypt_file(plain, secret))
    with pytest.raises(AlreadyEncrypted) as already:
        encrypt_file(encrypted, secret)
    failures.append(already.value)
    monkeypatch.setenv("HERMES_STORE_KEY", secret + "-wrong")
    failing(lambda: Store(url_for(encrypted)))
    key_file = tmp_path / "key"
    key_file.write_text(secret + "-wrong\n")
    monkeypatch.delenv("HERMES_STORE_KEY")
    monkeypatch.setenv("HERMES_STORE_KEY_FILE", str(key_file))
    failing(lambda: Store(url_for(encrypted)))
    monkeypatch.delenv("HERMES_STORE_KEY_FILE")
    with Store(url_for(encrypted), key=secret) as store:  # the right key, logged as usual
        assert _counts(store) == (1, 5)

    captured = capfd.readouterr()
    shown = [captured.out, captured.err, caplog.text]
    for failure in failures:
        shown.append("".join(traceback.format_exception(failure)))
        shown.append(repr(failure))
    for text in shown:
        assert secret not in text
        assert secret[::-1] not in text
        assert "s3cr3t" not in text  # no part of it either
    assert "hmac check failed" not in captured.err  # SQLCipher's own diagnostics are off


@on_sqlcipher
def test_encrypt_use_decrypt_loses_nothing(tmp_path: Path, sqlite_driver: str) -> None:
    from hermes_store import ChangeFeed, MessageRepository, SearchRepository, Store
    from hermes_store.sqlite.encrypt import decrypt_file, encrypt_file

    path = _plain_store_file(tmp_path / "state.db", messages=40)
    with Store(url_for(path)) as store:
        feed_before = list(ChangeFeed(store).changes(since=0, limit=1000))
    done = encrypt_file(path, KEY)
    assert done.encrypted and done.backup is not None and done.tables > 10
    assert (done.backup.stat().st_mode & 0o777) == 0o600
    assert done.backup.read_bytes().startswith(b"SQLite format 3\x00")  # the plain original
    assert MARKER.encode() not in _bytes_on_disk(path)
    assert not [p.name for p in tmp_path.iterdir() if "ing-" in p.name]  # no temporary left

    with Store(url_for(path), key=KEY) as store:
        assert _counts(store) == (1, 40)
        assert len(SearchRepository(store).search_messages("kyoto", limit=100)) == 40
        feed = list(ChangeFeed(store).changes(since=0, limit=1000))
        assert [c.position for c in feed] == [c.position for c in feed_before]
        MessageRepository(store).append_message("s1", "assistant", f"Kyoto it is {MARKER}")
        newest = list(ChangeFeed(store).changes(since=feed[-1].position))
        assert [c.kind for c in newest] and newest[0].session_id == "s1"
    assert MARKER.encode() not in _bytes_on_disk(path)

    back = decrypt_file(path, KEY)
    assert not back.encrypted and back.backup is not None
    assert not back.backup.read_bytes().startswith(b"SQLite format 3\x00")  # still encrypted
    raw = sqlite3.connect(path)  # the standard library reads it again, FTS5 included
    try:
        assert raw.execute("SELECT count(*) FROM messages").fetchone() == (41,)
        hits = raw.execute(
            "SELECT count(*) FROM messages_fts WHERE messages_fts MATCH 'kyoto'"
        ).fetchone()
        assert hits == (41,)
        assert raw.execute("PRAGMA journal_mode").fetchone() == ("wal",)
    finally:
        raw.close()
    with Store(url_for(path)) as store:
        assert _counts(store) == (1, 41)
        assert len(SearchRepository(store).search_messages("racornfl", limit=100)) == 41


@on_sqlcipher
def test_conversions_refuse_a_file_already_in_the_state_asked(
    tmp_path: Path, sqlite_driver: str
) -> None:
    from hermes_store.sqlite.encrypt import decrypt_file, encrypt_file

    encrypted = _encrypted_store_file(tmp_path / "enc.db")
    plain = _plain_store_file(tmp_path / "plain.db")
    before = {p: _digest(p) for p in (encrypted, plain)}
    with pytest.raises(AlreadyEncrypted, match="encrypted already"):
        encrypt_file(encrypted, KEY)
    with pytest.raises(AlreadyEncrypted, match="another key"):
        encrypt_file(encrypted, WRONG)
    with pytest.raises(NotEncrypted, match="nothing to decrypt"):
        decrypt_file(plain, KEY)
    with pytest.raises(WrongEncryptionKey):
        decrypt_file(encrypted, WRONG)
    with pytest.raises(InvalidInput, match="32 bytes"):
        encrypt_file(plain, b"short")
    assert {p: _digest(p) for p in (encrypted, plain)} == before
    assert _files(tmp_path) == ["enc.db", "plain.db"]  # no backups


@on_sqlcipher
def test_conversion_refuses_a_file_another_process_has_open(
    tmp_path: Path, sqlite_driver: str
) -> None:
    from hermes_store.sqlite.encrypt import encrypt_file

    path = _plain_store_file(tmp_path / "state.db")
    before = _digest(path)
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sqlite3, sys; c = sqlite3.connect(sys.argv[1]); "
            "c.execute('SELECT count(*) FROM sessions').fetchall(); print('open', flush=True); "
            "sys.stdin.read()",
            str(path),
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "open"
        with pytest.raises(FileInUse, match=f"pid {holder.pid}"):
            encrypt_file(path, KEY)
    finally:
        assert holder.stdin is not None
        holder.stdin.close()
        holder.wait(timeout=30)
    assert _digest(path) == before
    assert _files(tmp_path) == ["state.db"]
    from hermes_store import Store

    with Store(url_for(path)) as store:  # this process's own store counts too
        assert _counts(store) == (1, 5)
        with pytest.raises(FileInUse, match=f"pid {os.getpid()}"):
            encrypt_file(path, KEY)
    assert _digest(path) == before
    assert encrypt_file(path, KEY, backup=False).encrypted  # once it has let go


_WINDOW_WRITER = (
    "import sqlite3, sys\n"
    "c = sqlite3.connect(sys.argv[1], timeout=0.2)\n"
    "try:\n"
    "    c.execute('CREATE TABLE written_during_the_check (x)')\n"
    "    c.commit()\n"
    "except sqlite3.OperationalError as exc:\n"
    "    print(exc)\n"
    "else:\n"
    "    print('written')\n"
)


@on_sqlcipher
@pytest.mark.parametrize("journal", ["wal", "delete"])
def test_a_write_while_the_copy_is_checked_is_locked_out(
    tmp_path: Path, sqlite_driver: str, journal: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another process that writes while the copy is checked (quick_check, the slow part)
    is held off by the lock: its commit can never land in the file that is replaced."""
    from hermes_store.sqlite import encrypt as sqlite_encrypt

    path = _plain_store_file(tmp_path / "state.db")
    with closing(sqlite3.connect(path)) as raw:
        raw.execute(f"PRAGMA journal_mode={journal}")
    outcome: list[str] = []
    check = sqlite_encrypt._finish

    def check_while_another_process_writes(*args: Any) -> None:
        done = subprocess.run(
            [sys.executable, "-c", _WINDOW_WRITER, str(path)],
            capture_output=True,
            text=True,
            timeout=60,
            check=True,
        )
        outcome.append(done.stdout.strip())
        check(*args)

    monkeypatch.setattr(sqlite_encrypt, "_finish", check_while_another_process_writes)
    assert sqlite_encrypt.encrypt_file(path, KEY, backup=False).encrypted
    assert outcome == ["database is locked"]
    from hermes_store import Store

    with Store(url_for(path), key=KEY) as store:
        assert _counts(store) == (1, 5)


@on_sqlcipher
def test_a_conversion_keeps_the_file_s_mode_and_owner(tmp_path: Path, sqlite_driver: str) -> None:
    """The converted file gets the original's permission bits (and, when root converts it,
    its owner and group); the backup stays 0600."""
    from hermes_store.sqlite.encrypt import decrypt_file, encrypt_file

    path = _plain_store_file(tmp_path / "state.db")
    path.chmod(0o640)  # shared with a gateway in the same group
    owner = (path.stat().st_uid, path.stat().st_gid)
    if os.geteuid() == 0:
        owner = (4321, 4322)  # what `sudo hermes-store encrypt` must not take over
        os.chown(path, *owner)
    done = encrypt_file(path, KEY)
    assert done.mode == 0o640
    after = path.stat()
    assert (after.st_mode & 0o7777, (after.st_uid, after.st_gid)) == (0o640, owner)
    assert done.backup is not None and (done.backup.stat().st_mode & 0o777) == 0o600
    path.chmod(0o604)
    decrypt_file(path, KEY, backup=False)
    after = path.stat()
    assert (after.st_mode & 0o7777, (after.st_uid, after.st_gid)) == (0o604, owner)


@on_sqlcipher
def test_an_encrypted_legacy_file_upgrades(
    legacy_db: Any, sqlite_driver: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from hermes_store import SearchRepository, Store
    from hermes_store.migration.head import HEAD_REVISION
    from hermes_store.sqlite.encrypt import encrypt_file

    path = Path(legacy_db(20))
    with closing(sqlite3.connect(path)) as raw:
        messages = raw.execute("SELECT count(*) FROM messages").fetchone()[0]
        word = raw.execute(
            "SELECT content FROM messages WHERE content GLOB '*[a-z][a-z][a-z][a-z][a-z]*' "
            "ORDER BY id LIMIT 1"
        ).fetchone()
    assert messages > 0 and word is not None
    encrypt_file(path, KEY, backup=False)
    monkeypatch.setenv("HERMES_STORE_KEY", KEY)
    migrate.upgrade(url_for(path), fts_min_pause=0)
    assert migrate.current(url_for(path)).alembic_revision == HEAD_REVISION
    with Store(url_for(path)) as store:
        with store.read() as conn:
            assert conn.exec_driver_sql("SELECT count(*) FROM messages").scalar() == messages
        first = next(w for w in str(word[0]).split() if w.isalpha() and len(w) >= 5)
        assert SearchRepository(store).search_messages(first)
    assert not path.read_bytes().startswith(b"SQLite format 3\x00")


@on_sqlcipher
def test_async_store_and_raw_keys(tmp_path: Path, sqlite_driver: str) -> None:
    from hermes_store import AsyncStore

    raw_key = os.urandom(32)
    path = _encrypted_store_file(tmp_path / "state.db", key=raw_key)

    async def main() -> int:
        store = await AsyncStore.open(url_for(path), key=lambda: raw_key)
        try:
            return len(await store.search.search_messages("kyoto"))
        finally:
            await store.aclose()

    assert asyncio.run(main()) == 5
    # the same key written as text: x'<64 hex digits>'
    from hermes_store import Store

    with Store(url_for(path), key=f"x'{raw_key.hex()}'") as store:
        assert _counts(store) == (1, 5)
    with pytest.raises(WrongEncryptionKey):
        Store(url_for(path), key=os.urandom(32))


@on_sqlcipher
def test_two_stores_of_one_file_keep_the_key_until_both_close(
    tmp_path: Path, sqlite_driver: str
) -> None:
    from hermes_store import Store

    path = _encrypted_store_file(tmp_path / "state.db")
    first = Store(url_for(path), key=KEY)
    second = Store(url_for(path), key=KEY)
    first.close()
    second.engine.dispose()  # its next unit of work opens a new connection
    assert _counts(second) == (1, 5)
    second.close()
    with pytest.raises(EncryptionKeyRequired):
        Store(url_for(path))


@on_sqlcipher
def test_each_store_takes_back_exactly_its_own_key(
    tmp_path: Path, sqlite_driver: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A Store that fails to open forgets the key it registered; a Store's close takes back
    its own registration, not one made after it by someone else."""
    from hermes_store import Store
    from hermes_store.errors import InvalidURL, NotAtHead
    from hermes_store.sqlite import encryption

    monkeypatch.delenv(encryption.KEY_ENV, raising=False)
    monkeypatch.delenv(encryption.KEY_FILE_ENV, raising=False)
    missing = tmp_path / "missing.db"
    with pytest.raises(NotAtHead, match="no hermes-store database"):
        Store(url_for(missing), key=KEY)
    assert encryption.key_for(missing) is None

    path = _encrypted_store_file(tmp_path / "state.db")
    with monkeypatch.context() as env:
        env.setenv("HERMES_STORE_JOURNAL_MODE", "bogus")  # refused as the engine is made
        with pytest.raises(InvalidURL, match="HERMES_STORE_JOURNAL_MODE"):
            Store(url_for(path), key=KEY)
    assert encryption.key_for(path) is None

    store = Store(url_for(path), key=KEY)
    other = encryption.register_key(path, WRONG)
    store.close()
    assert encryption.key_for(path) == WRONG  # the later registration is still there
    encryption.forget_key(path, other)
    assert encryption.key_for(path) is None


@on_sqlcipher
def test_the_facade_and_a_backup_of_an_encrypted_file(
    tmp_path: Path, sqlite_driver: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from hermes_store.compat import SessionDB
    from hermes_store.sqlite.backup import backup_sqlite

    path = _encrypted_store_file(tmp_path / "state.db")
    monkeypatch.setenv("HERMES_STORE_KEY", KEY)
    db = SessionDB(path)
    try:
        assert db._conn is not None
        assert db._conn.execute("SELECT count(*) FROM messages").fetchone()[0] == 5
    finally:
        db.close()
    copy = backup_sqlite(path, "test")
    assert MARKER.encode() not in copy.read_bytes()
    from hermes_store import Store

    with Store(url_for(copy)) as store:  # the copy opens with the same key
        assert _counts(store) == (1, 5)


# ------------------------------------------------------------------ in this process


def test_a_key_with_a_driver_that_cannot_encrypt_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from hermes_store import Store

    path = _plain_store_file(tmp_path / "state.db")
    assert not driver_choice.current().encrypts  # the suite's process: the standard library
    with pytest.raises(EncryptionUnavailable, match="cannot encrypt") as caught:
        Store(url_for(path), key=KEY)
    assert KEY not in str(caught.value)
    monkeypatch.setenv("HERMES_STORE_KEY", KEY)
    for setting in ("sqlite3", "pysqlite3"):
        with pytest.raises(EncryptionUnavailable, match=f"{driver_choice.DRIVER_ENV}={setting}"):
            driver_choice.choose(setting)
    with pytest.raises(EncryptionUnavailable, match="cannot encrypt"):
        Store(url_for(path))  # a key in the environment: never a silent plain-text file


def test_an_encrypted_file_is_named_as_such_without_sqlcipher(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A file SQLCipher wrote, opened by a process that cannot decrypt: the typed error
    that says what to install, not "file is not a database"."""
    from hermes_store import Store

    if not _has_cipher():
        pytest.skip("sqlcipher3 is not installed: no encrypted file can be written")
    path = tmp_path / "state.db"
    write = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys, sqlcipher3.dbapi2 as d; c = d.connect(sys.argv[1]); "
            "c.execute(\"PRAGMA key = 'k'\"); c.execute('CREATE TABLE t(x)'); c.commit()",
            str(path),
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert write.returncode == 0, write.stderr
    with pytest.raises(EncryptionKeyRequired, match="encryption extra"):
        Store(url_for(path))


def _has_cipher() -> bool:
    import importlib.util

    return importlib.util.find_spec("sqlcipher3") is not None
