"""Encryption at rest on SQLite, through SQLCipher (the `encryption` extra, docs/encryption.md).

Where a file's key comes from, in this order: a key source registered for the file
(`Store(key=...)`, `AsyncStore.open(key=...)`, `register_key`), else `HERMES_STORE_KEY`
(the key itself), else `HERMES_STORE_KEY_FILE` (a file holding it). A key is a passphrase
(text, stretched by SQLCipher's PBKDF2 on every connection it opens) or 32 raw bytes
(`bytes`, or text written `x'<64 hex digits>'`), which skip the stretching.

`unlock` runs `PRAGMA key` as the first statement of every connection to a file that has a
key, then reads the schema, so a wrong key fails there, as one typed error
(WrongEncryptionKey, NotEncrypted), not at some later statement as "file is not a database".
The key goes to SQLite on the driver connection only: never through SQLAlchemy (whose
statement logging and error messages quote the SQL), never into a URL, a log record or an
exception message.
"""

from __future__ import annotations

import os
import re
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..errors import (
    EncryptionUnavailable,
    InvalidInput,
    NotEncrypted,
    WrongEncryptionKey,
)
from . import driver as sqlite_driver

KEY_ENV, KEY_FILE_ENV = sqlite_driver.KEY_ENVS
#: A key: a passphrase (str) or 32 raw bytes.
Key = str | bytes
#: What gives a file's key when a connection opens (a keyring, a secrets manager).
KeySource = Callable[[], Key]


class NoKey:
    """Open without a key, whatever key is configured (the plain side of a conversion)."""


NO_KEY = NoKey()

_RAW_TEXT = re.compile(r"x'[0-9a-fA-F]{64}'")
_SQLITE_NOTADB = 26


class KeyRegistration:
    """What `register_key` returns: give it to `forget_key` to take back exactly that
    registration (another made before or after it stays)."""

    __slots__ = ("source",)

    def __init__(self, source: KeySource) -> None:
        self.source = source


#: per file, the key registrations made for it, the newest last (each `forget_key` takes
#: its own back, so two stores of one file each keep the key until they close)
_sources: dict[Path, list[KeyRegistration]] = {}
_sources_lock = threading.Lock()


def _canonical(path: Path) -> Path:
    return path.expanduser().resolve()


def register_key(path: str | os.PathLike[str], source: KeySource | Key) -> KeyRegistration:
    """Use `source` (a key, or a callable returning one, called for each new connection)
    for every connection this process opens to the SQLite file `path`, from now until
    `forget_key` is given the registration returned. Needs sqlcipher3 as this process's
    driver (EncryptionUnavailable)."""
    sqlite_driver.require_encryption(f"the database {path}")
    if not callable(source):
        check_key(source)  # refuse a malformed key now, not at the first connection
        fixed = source
        source = lambda: fixed  # noqa: E731
    registration = KeyRegistration(source)
    with _sources_lock:
        _sources.setdefault(_canonical(Path(path)), []).append(registration)
    return registration


def forget_key(path: str | os.PathLike[str], registration: KeyRegistration | None = None) -> None:
    """Take back `registration` (what `register_key` returned) of `path`; without one, the
    newest registration of `path`. The key stays while another registration holds it."""
    with _sources_lock:
        canonical = _canonical(Path(path))
        held = _sources.get(canonical)
        if held:
            if registration is None:
                held.pop()
            else:
                # by identity: two registrations of one key are still two
                kept = [r for r in held if r is not registration]
                held[:] = kept
        if not held:
            _sources.pop(canonical, None)


def _env_key() -> Key | None:
    value = os.environ.get(KEY_ENV)
    if value:
        return value
    key_file = os.environ.get(KEY_FILE_ENV)
    if not key_file:
        return None
    try:
        text = Path(key_file).expanduser().read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) else "it is not UTF-8 text"
        raise InvalidInput(
            f"{KEY_FILE_ENV}={key_file}: cannot read the key file ({reason})"
        ) from None
    key = text.removesuffix("\n").removesuffix("\r")
    if not key:
        raise InvalidInput(f"{KEY_FILE_ENV}={key_file}: the key file is empty")
    return key


def key_for(path: Path | None) -> Key | None:
    """The key for the SQLite file `path` (None: the file is opened without one)."""
    if path is not None:
        with _sources_lock:
            held = _sources.get(_canonical(path)) if _sources else None
            source = held[-1].source if held else None
        if source is not None:
            return source()
    return _env_key()


def has_key(path: Path | None) -> bool:
    """Whether a key is configured for `path` (without asking a key source for it)."""
    if path is not None:
        with _sources_lock:
            if _canonical(path) in _sources:
                return True
    return sqlite_driver.key_configured()


def check_key(key: Key) -> None:
    """InvalidInput for a key SQLCipher cannot take (empty, raw bytes not 32 long)."""
    _literal(key)


def _literal(key: Key) -> str:
    """The key as the operand of `PRAGMA key`. Raises InvalidInput (which names no part
    of the key) for an empty key or raw bytes of the wrong length."""
    if isinstance(key, bytes):
        if len(key) != 32:
            raise InvalidInput(
                f"a raw encryption key is 32 bytes, not {len(key)}; give 32 random bytes, "
                "or a passphrase as text"
            )
        return f"\"x'{key.hex()}'\""
    if not isinstance(key, str) or not key:
        raise InvalidInput("the encryption key is empty (or not text or bytes)")
    if "\x00" in key:
        raise InvalidInput("the encryption key holds a NUL character")
    if _RAW_TEXT.fullmatch(key):
        return f'"{key}"'
    return "'" + key.replace("'", "''") + "'"


def unlock(conn: Any, path: Path | None, key: Key | NoKey | None = None) -> None:
    """Give a fresh DB-API connection to `path` its key (`key`, else `key_for(path)`) as its
    first statement, and check the key opens the file: WrongEncryptionKey when it does not,
    NotEncrypted when the file is a plain SQLite file. Nothing when there is no key.
    sqlcipher3's own diagnostics to stderr are switched off on its connections (they
    would print a failed HMAC check for every wrong key)."""
    cipher = sqlite_driver.is_cipher(conn)
    if cipher:
        conn.execute("PRAGMA cipher_log_level = NONE")
    if key is None:
        key = key_for(path)
    if key is None or isinstance(key, NoKey):
        return
    if not cipher:
        name = sqlite_driver.module_of(conn).__name__.split(".")[0]
        raise EncryptionUnavailable(
            f"an encryption key is configured for {path or 'the database'}, but this "
            f"process drives SQLite through {name}, which cannot encrypt ("
            f"{sqlite_driver.CIPHER_INSTALL}; {sqlite_driver.DRIVER_ENV}=sqlcipher3)"
        )
    conn.execute(f"PRAGMA key = {_literal(key)}")
    try:
        conn.execute("SELECT count(*) FROM sqlite_master").fetchone()
    except sqlite_driver.DatabaseError as exc:
        if getattr(exc, "sqlite_errorcode", None) != _SQLITE_NOTADB:
            raise
        where = str(path) if path is not None else "the database"
        if path is not None and _opens_without_a_key(conn, path):
            raise NotEncrypted(
                f"{where} is not encrypted (a plain SQLite file), but an encryption key was "
                f"given for it: encrypt it first (hermes-store encrypt --url '{where}'), or "
                f"open it without a key (unset {KEY_ENV} and {KEY_FILE_ENV}). Nothing was "
                "changed"
            ) from None
        raise WrongEncryptionKey(
            f"{where} does not open with the encryption key given: the key is wrong (or the "
            "file is not a database). Nothing was changed"
        ) from None


def _opens_without_a_key(conn: Any, path: Path) -> bool:
    """Whether `path` reads as a plain SQLite file, asked of SQLite (read-only, through the
    library of `conn`), not by reading its bytes: other connections of this process may
    hold locks on it, which closing a descriptor of ours would drop."""
    module = sqlite_driver.module_of(conn)
    try:
        probe = module.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True, timeout=1.0)
    except sqlite_driver.Error:
        return False
    try:
        probe.execute("PRAGMA cipher_log_level = NONE")
        probe.execute("SELECT count(*) FROM sqlite_master").fetchone()
        return True
    except sqlite_driver.Error:
        return False
    finally:
        probe.close()


def connect(
    database: str, *, key_of: Path | None = None, key: Key | NoKey | None = None, **kwargs: Any
) -> Any:
    """A DB-API connection of this process's driver (sqlite_driver) to `database`, given
    its key before anything else runs on it: `key`, else the key of the file `key_of`
    (default: `database`, when it is a path, not a URI). Code that opens a file itself
    (backups, recovery) connects through here."""
    conn = sqlite_driver.current().connect(database, **kwargs)
    if key_of is None and not kwargs.get("uri") and database != ":memory:":
        key_of = Path(database)
    try:
        unlock(conn, key_of, key)
    except BaseException:
        conn.close()
        raise
    return conn
