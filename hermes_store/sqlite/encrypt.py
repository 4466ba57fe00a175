"""`hermes-store encrypt` and `decrypt`: a SQLite file converted in place between plain
text and SQLCipher's encryption (docs/encryption.md).

The conversion copies the whole database into a new file beside it (SQLCipher's
`sqlcipher_export` into a database attached with the target's key: tables, indexes, FTS5
indexes, triggers, views and their rows), checks that every table holds as many rows in
the copy, and puts the copy in the file's place with one atomic rename. The original is
backed up first (backup.py). It refuses to run while another process has the file open:
one that kept its descriptor would go on writing to the file that was replaced. While it
copies, checks the copy and renames it, it holds the file's exclusive lock, so no other
connection commits to the original in between. Open descriptors are found through /proc
(Linux); elsewhere that lock is all there is.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sqlalchemy import ClauseElement, Select, column, func, quoted_name, select, table
from sqlalchemy.dialects import sqlite

from ..errors import (
    AlreadyEncrypted,
    FileInUse,
    MigrationError,
    NotADatabaseFile,
    NotEncrypted,
    WrongEncryptionKey,
)
from ..runtime.engine import check_writable, create_private_file
from ..runtime.waiting import _command_line
from . import driver as sqlite_driver
from . import encryption
from .backup import backup_sqlite
from .encryption import Key
from .file import is_plain_sqlite, refuse_directory

#: How long the conversion waits for another connection's lock before it refuses
BUSY_TIMEOUT_S = 2.0
_ATTACHED = "hermes_store_converted"
_COMPANIONS = ("-wal", "-shm", "-journal")
_SQLITE = sqlite.dialect()


@dataclass(frozen=True)
class Converted:
    """What `encrypt_file` or `decrypt_file` did."""

    path: Path
    encrypted: bool  # the file's state now
    backup: Path | None
    journal_mode: str
    tables: int  # tables copied (their row counts checked)
    mode: int = 0o600  # the file's permission bits, kept from the original


def encrypt_file(path: str | os.PathLike[str], key: Key, *, backup: bool = True) -> Converted:
    """Encrypt the plain SQLite file `path` in place with `key` (a passphrase, or 32 raw
    bytes). AlreadyEncrypted for a file that is encrypted already."""
    return _convert(Path(path), key, encrypting=True, backup=backup)


def decrypt_file(path: str | os.PathLike[str], key: Key, *, backup: bool = True) -> Converted:
    """Decrypt the SQLCipher file `path` in place, which `key` opens, to a plain SQLite
    file the original Hermes reads. NotEncrypted for a plain file."""
    return _convert(Path(path), key, encrypting=False, backup=backup)


def other_openers(path: Path, *, this_process: bool = False) -> list[str]:
    """The other processes (and this one too, with `this_process`) that have `path` (or
    its -wal/-shm/-journal) open, as `pid N: command line`, from /proc (Linux; elsewhere
    none can be named)."""
    try:
        targets = {str(Path(f"{path}{suffix}").resolve()) for suffix in ("", *_COMPANIONS)}
        entries = list(Path("/proc").iterdir())
    except OSError:
        return []
    found: list[str] = []
    for entry in entries:
        if not entry.name.isdigit() or (int(entry.name) == os.getpid() and not this_process):
            continue
        try:
            descriptors = list((entry / "fd").iterdir())
        except OSError:
            continue
        for fd in descriptors:
            try:
                if os.readlink(fd) in targets:
                    found.append(f"pid {entry.name}: {_command_line(int(entry.name))}")
                    break
            except OSError:
                continue
    return found


def _refuse_in_use(path: Path, command: str, *, this_process: bool = False) -> None:
    holders = other_openers(path, this_process=this_process)
    if holders:
        raise FileInUse(
            f"{path} is open in another process or store ({'; '.join(holders)}): stop it "
            f"(Hermes, a gateway, another hermes-store; close this process's Store of it) "
            f"and run hermes-store {command} again. Nothing was changed"
        )


def _open(driver: sqlite_driver.Driver, path: Path, key: Key | None) -> Any:
    conn = driver.module.connect(str(path), isolation_level=None, timeout=BUSY_TIMEOUT_S)
    try:
        # with NO_KEY: plain, whatever is configured (only SQLCipher's logging switched off)
        encryption.unlock(conn, path, encryption.NO_KEY if key is None else key)
    except BaseException:
        conn.close()
        raise
    return conn


def _attach_key(key: Key | None) -> str:
    """The key as ATTACH ... KEY takes it, as a bound parameter ('' attaches a plain file)."""
    if key is None:
        return ""
    encryption.check_key(key)
    return f"x'{key.hex()}'" if isinstance(key, bytes) else key


def _refuse_wrong_state(
    driver: sqlite_driver.Driver, path: Path, key: Key, encrypting: bool
) -> None:
    plain = is_plain_sqlite(path)
    if encrypting and plain is False:
        try:
            _open(driver, path, key).close()
        except WrongEncryptionKey:
            raise AlreadyEncrypted(
                f"{path} is not a plain SQLite file: it is encrypted already (with another "
                "key than the one given), or it is not a database. Nothing was changed"
            ) from None
        raise AlreadyEncrypted(
            f"{path} is encrypted already (the key given opens it). Nothing was changed"
        )
    if not encrypting:
        refuse_plain(path)


def refuse_plain(path: Path) -> None:
    """NotEncrypted when `path` is a plain SQLite file: there is nothing to decrypt."""
    if is_plain_sqlite(path):
        raise NotEncrypted(
            f"{path} is not encrypted (a plain SQLite file): there is nothing to decrypt. "
            "Nothing was changed"
        )


def _counts(conn: Any, schema: str) -> dict[str, int]:
    """The row count of every ordinary table in `schema` (names from sqlite_master, quoted)."""
    master = table("sqlite_master", column("type"), column("name"), column("sql"), schema=schema)
    listed = select(master.c.name).where(
        master.c.type == "table",
        master.c.name.not_like("sqlite_%"),
        master.c.sql.not_like("CREATE VIRTUAL TABLE%"),
    )
    names = [str(row[0]) for row in conn.execute(_sqlite_text(listed))]
    return {
        name: int(conn.execute(_sqlite_text(_count_of(name, schema))).fetchone()[0])
        for name in names
    }


def _count_of(name: str, schema: str) -> Select[Any]:
    """count(*) of `schema`'s table `name`, the name always quoted."""
    return select(func.count()).select_from(table(quoted_name(name, True), schema=schema))


def _sqlite_text(statement: ClauseElement) -> str:
    """A Core statement as SQLite text with its constants inline, for a driver connection."""
    return str(statement.compile(dialect=_SQLITE, compile_kwargs={"literal_binds": True}))


def _fsync(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _convert(path: Path, key: Key, *, encrypting: bool, backup: bool) -> Converted:
    command = "encrypt" if encrypting else "decrypt"
    encryption.check_key(key)
    driver = sqlite_driver.require_encryption(f"hermes-store {command}")
    refuse_directory(path)
    if not path.is_file() or path.stat().st_size == 0:
        raise NotADatabaseFile(f"{path} does not exist or is empty: nothing to {command}")
    check_writable(path)
    # first, with no descriptor of ours on it: this process's own stores count as well,
    # and nothing may hold a lock that reading the header below would drop
    _refuse_in_use(path, command, this_process=True)
    _refuse_wrong_state(driver, path, key, encrypting)
    source_key, target_key = (None, key) if encrypting else (key, None)
    # opens the file with its key (a wrong one is refused here, before any copy is made)
    source = _open(driver, path, source_key)
    try:
        _refuse_in_use(path, command)  # one that opened it meanwhile
        journal_mode = str(source.execute("PRAGMA journal_mode").fetchone()[0]).lower()
        made = None
        if backup:
            made = _backup(path, source_key, "plain" if encrypting else "encrypted")
        target = path.with_name(f".{path.name}.{command}ing-{os.getpid()}")
        for leftover in (target, *(Path(f"{target}{s}") for s in _COMPANIONS)):
            leftover.unlink(missing_ok=True)  # this process's name: a crashed run's copy
        create_private_file(target)
        try:
            # the source keeps the file's exclusive lock from the copy until the rename
            # (locking_mode=EXCLUSIVE): no other connection can commit to the file that is
            # about to be replaced while the copy is checked
            tables = _export(source, target, target_key, path, journal_mode)
            _finish(driver, target, target_key, journal_mode)
            left = [s for s in _COMPANIONS if Path(f"{path}{s}").exists()]
            if any(Path(f"{path}{s}").stat().st_size for s in left if s != "-shm"):
                raise MigrationError(
                    f"{path} has a journal with changes in it ({', '.join(left)}) after the "
                    "copy was made: another process wrote to it. Nothing was changed; run "
                    f"hermes-store {command} again once nothing else has it open"
                )
            for suffix in left:
                Path(f"{path}{suffix}").unlink(missing_ok=True)
            mode = _take_mode_and_owner(path, target)
            os.replace(target, path)
            source.close()  # its lock now covers only the replaced inode
            source = None
            _fsync(path.parent)
        except BaseException:
            for leftover in (target, *(Path(f"{target}{s}") for s in _COMPANIONS)):
                leftover.unlink(missing_ok=True)
            raise
    finally:
        if source is not None:
            source.close()
    return Converted(path, encrypting, made, journal_mode, tables, mode)


def _take_mode_and_owner(original: Path, copy: Path) -> int:
    """Give `copy` the permission bits of `original` and, when this process may (root),
    its owner; else its group where this user belongs to it. The converted file is
    then read by whoever read the original (a gateway sharing its group, Hermes when
    root ran the conversion). The bits given."""
    st = original.stat()
    mine = copy.stat()
    if (st.st_uid, st.st_gid) != (mine.st_uid, mine.st_gid):
        try:
            if os.geteuid() == 0:
                os.chown(copy, st.st_uid, st.st_gid)
            elif st.st_gid != mine.st_gid:
                os.chown(copy, -1, st.st_gid)
        except PermissionError:
            pass  # a group this user is not in: the copy keeps the user's own
    mode = st.st_mode & 0o7777
    os.chmod(copy, mode)  # after chown, which may clear set-id bits
    return mode


def _backup(path: Path, key: Key | None, label: str) -> Path:
    return backup_sqlite(path, label, key=encryption.NO_KEY if key is None else key)


def _export(source: Any, target: Path, key: Key | None, path: Path, journal_mode: str) -> int:
    """Copy the database open on `source` into `target` (attached with `key`) under the
    source's exclusive lock, which it keeps after the copy (until `source` is closed); the
    number of tables copied, each with its rows counted."""
    # main only: the attached copy is opened again by _finish
    source.execute("PRAGMA main.locking_mode=EXCLUSIVE")
    source.execute(f"ATTACH DATABASE ? AS {_ATTACHED} KEY ?", (str(target), _attach_key(key)))
    try:
        try:
            source.execute("BEGIN EXCLUSIVE")
        except sqlite_driver.OperationalError as exc:
            raise FileInUse(
                f"{path} is locked by another connection ({exc}): stop what writes to it and "
                "run the command again. Nothing was changed"
            ) from None
        try:
            source.execute(f"SELECT sqlcipher_export('{_ATTACHED}')")
            for pragma in ("user_version", "application_id"):
                value = int(source.execute(f"PRAGMA main.{pragma}").fetchone()[0])
                source.execute(f"PRAGMA {_ATTACHED}.{pragma} = {value}")
            before, after = _counts(source, "main"), _counts(source, _ATTACHED)
            if before != after:
                differ = sorted(
                    n for n in before.keys() | after.keys() if before.get(n) != after.get(n)
                )
                raise MigrationError(
                    f"the converted copy of {path} does not hold the same rows (tables "
                    f"{', '.join(differ)}); nothing was changed"
                )
            source.execute("COMMIT")
            if journal_mode == "wal":
                # the frames other writers committed before are in the copy; emptied
                # here, a -wal with anything in it before the rename means a writer
                # got past the lock
                source.execute("PRAGMA main.wal_checkpoint(TRUNCATE)")
        except BaseException:
            if source.in_transaction:
                source.execute("ROLLBACK")
            raise
    finally:
        source.execute(f"DETACH DATABASE {_ATTACHED}")
    return len(before)


def _finish(driver: sqlite_driver.Driver, target: Path, key: Key | None, journal_mode: str) -> None:
    """Give the copy the original's journal mode, check it, and flush it to disk."""
    conn = _open(driver, target, key)
    try:
        if journal_mode == "wal":
            conn.execute("PRAGMA journal_mode=WAL")
        verdict = str(conn.execute("PRAGMA quick_check").fetchone()[0])
        if verdict != "ok":
            raise MigrationError(
                f"the converted copy failed its check ({verdict}); nothing was changed"
            )
    finally:
        conn.close()
    _fsync(target)
