"""The error types hermes-store raises. Each message says what to do next."""

from __future__ import annotations

import datetime
import sqlite3


class StoreError(Exception):
    """Base class of every error hermes-store raises on purpose."""


def newer_than_this_code(where: str, found: str, supported: str) -> str:
    """The one message every command and entry point gives for a database written by a
    newer hermes-store or Hermes: `found` is what the file records (`schema_version 24`,
    `revision 0025`), `supported` the newest this code knows."""
    place = f" {where}" if where else ""
    return (
        f"the database{place} is newer than this hermes-store: it records {found}, and this "
        f"hermes-store knows up to {supported}. Upgrade hermes-store (pip install --upgrade "
        "hermes-store), then run the command again; nothing was changed"
    )


class SchemaTooNew(StoreError):
    """The database was written by a newer schema than this code knows (a newer
    upstream `schema_version`, or a hermes-store revision this code does not have)."""

    def __init__(self, found: int | str, supported: int | str, url: str = "") -> None:
        self.found = found
        self.supported = supported
        self.where = url
        super().__init__(
            newer_than_this_code(
                url, _recorded(found, "schema_version"), _recorded(supported, "schema_version")
            )
        )

    def __reduce__(self) -> tuple[type, tuple[int | str, int | str, str]]:
        return (type(self), (self.found, self.supported, self.where))


def _recorded(value: int | str, name: str) -> str:
    """`schema_version 24` for a number, the text as it is otherwise (`revision 0025`)."""
    return f"{name} {value}" if isinstance(value, int) else value


class NotAHermesDatabase(StoreError):
    """The file holds tables but is not a Hermes state database."""


class NotAtHead(StoreError):
    """The schema is behind the code; `hermes-store upgrade` fixes it."""


class SchemaBehind(NotAtHead):
    """A database older than the schema this code reads and writes: `missing` names the
    tables and columns (or the version) it lacks, `command` the upgrade that adds them.
    Nothing was changed."""

    def __init__(self, where: str, state: str, missing: list[str], command: str) -> None:
        self.where = where
        self.state = state
        self.missing = list(missing)
        self.command = command
        lacks = f"; it lacks {_grouped(self.missing)}" if self.missing else ""
        super().__init__(
            f"the database {where} is older than this hermes-store ({state}){lacks}. "
            f"Back it up, then upgrade it with: {command} (nothing was changed)"
        )

    def __reduce__(self) -> tuple[type, tuple[str, str, list[str], str]]:
        return (type(self), (self.where, self.state, self.missing, self.command))


def _grouped(missing: list[str]) -> str:
    """`table a, table b, column t.x, column t.y` as `the tables a, b; columns of t: x, y`."""
    tables = [item.removeprefix("table ") for item in missing if item.startswith("table ")]
    columns: dict[str, list[str]] = {}
    others = []
    for item in missing:
        if item.startswith("column ") and "." in item:
            table, _, column = item.removeprefix("column ").partition(".")
            columns.setdefault(table, []).append(column)
        elif not item.startswith("table "):
            others.append(item)
    parts = []
    if tables:
        parts.append(f"the table{'s' if len(tables) > 1 else ''} {', '.join(tables)}")
    parts += [f"columns of {table}: {', '.join(names)}" for table, names in columns.items()]
    return "; ".join(parts + others)


class DatabaseMissing(StoreError):
    """The PostgreSQL server has no database of the name in the URL."""

    def __init__(self, name: str, server: str, then: str = "hermes-store upgrade") -> None:
        self.name = name
        self.server = server
        self.then = then
        super().__init__(
            f"the PostgreSQL server {server} has no database {name!r}; create it with: "
            f"createdb -E UTF8 -T template0 {name} (as a role that may create databases; "
            f"add -h/-p/-U for another server or user), then run: {then}"
        )

    def __reduce__(self) -> tuple[type, tuple[str, str, str]]:
        return (type(self), (self.name, self.server, self.then))


class LockTimeout(StoreError):
    """Another process held a lock this operation needed (SQLite's write lock, the
    PostgreSQL migration lock or a row lock) for the whole wait. The step that waited
    changed nothing; steps committed before it stay."""

    def __init__(
        self,
        where: str,
        waited: float,
        holders: str,
        retry_hint: str,
        what: str = "the write lock",
    ) -> None:
        self.where = where
        self.waited = waited
        self.holders = holders
        self.retry_hint = retry_hint
        self.what = what
        super().__init__(
            f"another process held {what} on {where} for the whole {waited:.0f} s this "
            f"command waited ({holders}); the step that waited changed nothing. Let that "
            f"process finish (a long import, prune or upgrade, or a transaction left open), "
            f"then {retry_hint}"
        )

    def __reduce__(self) -> tuple[type, tuple[str, float, str, str, str]]:
        return (type(self), (self.where, self.waited, self.holders, self.retry_hint, self.what))


class DatabaseLocked(LockTimeout, sqlite3.OperationalError):
    """SQLite answered "database is locked" for the whole retry of a unit of work:
    another connection held a lock it needed (a writer's, or in DELETE mode a reader's
    shared lock that a COMMIT waits out). Nothing of the unit was written. Also the
    standard library's `sqlite3.OperationalError`, as the original raises it there, so
    code that catches that goes on catching it."""

    def __init__(
        self,
        where: str,
        waited: float,
        holders: str,
        retry_hint: str,
        what: str = "the write lock",
    ) -> None:
        super().__init__(where, waited, holders, retry_hint, what)
        self.args = (f"database is locked: {self.args[0]}",)
        self.sqlite_errorcode = sqlite3.SQLITE_BUSY
        self.sqlite_errorname = "SQLITE_BUSY"


class StoreBusy(StoreError, TimeoutError):
    """Every connection of the Store's pool stayed in use (by this process's other
    threads) for the whole wait for one; nothing was done. `waited` is that wait in
    seconds, `size` how many connections the pool holds at most."""

    def __init__(self, where: str, waited: float, size: int) -> None:
        self.where = where
        self.waited = waited
        self.size = size
        super().__init__(
            f"all {size} connections of this process's Store for {where} stayed in use for "
            f"the whole {waited:.0f} s this call waited for one, so it did nothing. Fewer "
            "calls at once (a smaller worker pool), or shorter ones (a lower "
            "HERMES_SEARCH_TIMEOUT_MS), let it through; then retry"
        )

    def __reduce__(self) -> tuple[type, tuple[str, float, int]]:
        return (type(self), (self.where, self.waited, self.size))


class StoreClosed(StoreError):
    """The Store (or the SessionDB / AsyncStore over it) was closed; open a new one."""


class MigrationError(StoreError):
    """A migration refused to run (for example a downgrade that would lose data)."""


class BackupFailed(StoreError):
    """The backup a command takes before it changes an SQLite file could not be made;
    the database was not changed."""


class FTSUnavailable(StoreError):
    """The linked SQLite lacks FTS5 or the trigram tokenizer."""


class DatabaseNotWritable(StoreError):
    """The database file or its directory cannot be written."""


class StorageFull(DatabaseNotWritable):
    """The disk holding the database is full; the write was rolled back."""


class ReadOnlyStore(DatabaseNotWritable):
    """A write asked of a store opened with `read_only=True` (a `Store`, `AsyncStore` or
    `SessionDB`), on either backend; nothing was written. `where` names the database."""

    def __init__(self, where: str) -> None:
        self.where = where
        super().__init__(
            f"the store for {where} was opened read-only (read_only=True), so it does not "
            "write; nothing was written. Open it without read_only to write"
        )

    def __reduce__(self) -> tuple[type, tuple[str]]:
        return (type(self), (self.where,))


class SessionNotFound(StoreError, LookupError):
    def __init__(self, session_id: str) -> None:
        self.session_id = session_id
        super().__init__(f"session {session_id!r} does not exist")

    def __reduce__(self) -> tuple[type, tuple[str]]:
        # rebuilt from the id, not the message (crossing a process boundary)
        return (type(self), (self.session_id,))


class InvalidTitle(StoreError, ValueError):
    """A title that is too long after sanitising (the original raises ValueError)."""


class TitleInUse(StoreError, ValueError):
    def __init__(self, title: str, holder: str) -> None:
        self.title = title
        self.holder = holder
        super().__init__(f"Title '{title}' is already in use by session {holder}")


class CompressionSessionClosedError(StoreError, RuntimeError):
    def __init__(self, session_id: str) -> None:
        self.session_id = session_id
        super().__init__(
            f"Session '{session_id}' is closed by compression; adopt its live continuation "
            "before appending messages"
        )


class CompressionSessionBusyError(StoreError, RuntimeError):
    def __init__(self, message: str, session_id: str | None = None) -> None:
        self.session_id = session_id
        super().__init__(message)


class InvalidInput(StoreError, ValueError):
    """Input that cannot be stored as given (for example content over the size limit)."""


class InvalidRedactionPattern(InvalidInput):
    """A redaction pattern that cannot be used: a regular expression that does not
    compile, one that matches the empty string, or a name that is not a short lowercase
    word. `name` is the pattern's name as given (the expression itself may hold part of a
    secret, so it is never quoted)."""

    def __init__(self, name: str, why: str) -> None:
        self.name = name
        super().__init__(f"redaction pattern {name!r}: {why}")


class ChangeCursorExpired(StoreError, LookupError):
    """A change-feed cursor older than what the database still keeps: the changes after
    it were trimmed. `cursor` is the one given, `oldest` the oldest cursor that still
    resumes; start over from a full read of what the reader mirrors, then follow from
    `latest()`."""

    def __init__(self, cursor: int, oldest: int) -> None:
        self.cursor = cursor
        self.oldest = oldest
        super().__init__(
            f"the change-feed cursor {cursor} has expired: the changes through position "
            f"{oldest} were trimmed, so changes after {cursor} can no longer be listed. "
            "Read the current state again and follow from ChangeFeed.latest()"
        )

    def __reduce__(self) -> tuple[type, tuple[int, int]]:
        return (type(self), (self.cursor, self.oldest))


class TurnHeld(StoreError, RuntimeError):
    """Another holder's turn lease on the session is live; `holder` holds it until
    `expires_at` (epoch seconds), `remaining` seconds after it was refused. Try again
    after it, or wait for its release."""

    def __init__(
        self, session_id: str, holder: str, expires_at: float, remaining: float | None = None
    ) -> None:
        self.session_id = session_id
        self.holder = holder
        self.expires_at = expires_at
        self.remaining = remaining
        left = "" if remaining is None else f", {max(remaining, 0.0):.1f} s from now"
        super().__init__(
            f"the turn of session {session_id!r} is held by {holder!r} until "
            f"{_utc(expires_at)}{left}; try again after it or once it is released"
        )

    def __reduce__(self) -> tuple[type, tuple[str, str, float, float | None]]:
        return (type(self), (self.session_id, self.holder, self.expires_at, self.remaining))


def _utc(epoch: float) -> str:
    """Epoch seconds as a readable UTC time (the number itself when out of range)."""
    try:
        moment = datetime.datetime.fromtimestamp(epoch, tz=datetime.UTC)
    except (OverflowError, OSError, ValueError):
        return f"{epoch:.3f} (epoch seconds)"
    return moment.strftime("%Y-%m-%d %H:%M:%S.") + f"{moment.microsecond // 1000:03d} UTC"


class StaleTurn(StoreError, RuntimeError):
    """A write or a lease call made with a fencing token that is not the session's
    current one (a newer grant exists, the turn was released, or the token is ahead of
    every grant: never handed out); nothing was written. `current` is the session's
    token now (0 when no turn was ever granted)."""

    def __init__(self, session_id: str, token: int, current: int, why: str = "") -> None:
        self.session_id = session_id
        self.token = token
        self.current = current
        self.why = why
        if why:
            reason = why
        elif token > current:
            reason = (
                f"the token is unknown: the session's turns have only reached token {current} "
                "(it was never granted here: from another database, or made up)"
            )
        else:
            reason = f"a newer turn (token {current}) was granted"
        super().__init__(
            f"turn token {token} of session {session_id!r} is stale: {reason}; nothing "
            "was written. Acquire the turn again before writing"
        )

    def __reduce__(self) -> tuple[type, tuple[str, int, int, str]]:
        return (type(self), (self.session_id, self.token, self.current, self.why))


class TimeOutOfRange(InvalidInput):
    """A time (epoch seconds) outside what every layer computes with: years 1 to 9999 UTC
    (SQLite's date functions, PostgreSQL's to_timestamp and Python's datetime all cover
    them). `field` names the value; nothing was written."""

    def __init__(self, field: str, value: float) -> None:
        self.field = field
        self.value = value
        super().__init__(
            f"{field} {value!r} is not a time hermes-store can store: give epoch seconds "
            "from -62135596800 to 253402300799 (0001-01-01 to 9999-12-31 UTC); nothing "
            "was written"
        )

    def __reduce__(self) -> tuple[type, tuple[str, float]]:
        return (type(self), (self.field, self.value))


class QueryTooComplex(InvalidInput):
    """A search query past a limit on the work of one search (docs/search.md); `limit`
    is that limit, and the message names it."""

    def __init__(self, message: str, limit: float) -> None:
        self.limit = limit
        super().__init__(message)

    def __reduce__(self) -> tuple[type, tuple[str, float]]:
        # rebuilt from its parts (crossing a process boundary)
        return (type(self), (str(self), self.limit))


class SearchTimedOut(QueryTooComplex):
    """A search that ran past its time budget (`limit`, in milliseconds;
    HERMES_SEARCH_TIMEOUT_MS) and was stopped; nothing was changed."""


class InvalidURL(StoreError, ValueError):
    """A database URL that cannot be parsed, or names a database or driver hermes-store
    does not run on. Raised before anything is opened."""


class NotADatabaseFile(NotAHermesDatabase):
    """The path names something SQLite cannot use as a database file: a directory, or a
    file that is not an SQLite database at all. Nothing was changed."""


class AmbiguousSessionPrefix(StoreError, LookupError):
    """A session id prefix that matches more than one session."""

    def __init__(self, prefix: str, matches: list[str], more: bool = False) -> None:
        self.prefix = prefix
        self.matches = matches
        self.more = more
        count = f"more than {len(matches)}" if more else str(len(matches))
        shown = ", ".join(matches) + (", ..." if more else "")
        super().__init__(
            f"prefix {prefix!r} matches {count} sessions: {shown}; give more of the id"
        )

    def __reduce__(self) -> tuple[type, tuple[str, list[str], bool]]:
        return (type(self), (self.prefix, self.matches, self.more))


class CopyError(StoreError):
    """`hermes-store copy` refused or could not finish; the message says what to do."""


class CopyValueError(CopyError, ValueError):
    """A source value the target cannot store as it is (a NUL character in text for
    PostgreSQL, for example). Nothing of the batch holding it was written."""

    def __init__(self, table: str, key: object, column: str, why: str, target: str) -> None:
        self.table = table
        self.key = key
        self.column = column
        super().__init__(
            f"{table} row with primary key {key!r}: column {column} {why}; nothing of its "
            f"batch was written to {target}. Fix that value in the source (the copy never "
            "changes it), then run the same command with --resume"
        )


class DatabaseCorrupt(StoreError):
    """SQLite reported damage it cannot work around. Raised after the transaction was
    rolled back, so the failed operation wrote nothing."""

    def __init__(self, where: str, detail: str, fts_only: bool = False) -> None:
        self.where = where
        self.detail = detail
        self.fts_only = fts_only
        if fts_only:
            message = (
                f"the full-text index of {where} is damaged ({detail}); nothing was written. "
                f"Run `hermes-store fts rebuild --url {where}`, then `hermes-store check "
                f"--url {where}`; if the rebuild fails, restore the file from a backup"
            )
        else:
            message = (
                f"the database {where} is damaged ({detail}); nothing was written. "
                f"Run `hermes-store check --url {where}` to see what is wrong, then restore "
                f"the file from a backup (`sqlite3 {where} .recover` salvages what is readable)"
            )
        super().__init__(message)

    def __reduce__(self) -> tuple[type, tuple[str, str, bool]]:
        # rebuilt from its parts, not the message (crossing a process boundary)
        return (type(self), (self.where, self.detail, self.fts_only))


class DatabaseUnavailable(StoreError):
    """The database server could not be reached, or kept failing with faults worth waiting
    out, for the whole retry budget. Nothing of the failed operation was applied, unless
    `outcome_unknown` says that its last COMMIT got no answer and could not be checked."""

    def __init__(
        self,
        server: str,
        waited: float,
        attempts: int,
        cause: str,
        outcome_unknown: bool = False,
    ) -> None:
        self.server = server
        self.waited = waited
        self.attempts = attempts
        self.cause = cause
        self.outcome_unknown = outcome_unknown
        if outcome_unknown:
            applied = (
                "the last attempt's COMMIT got no answer and the server could not be asked "
                "whether it was applied: check before repeating it"
            )
        else:
            applied = "nothing was applied"
        super().__init__(
            f"{server} was unavailable for {waited:.1f} s ({attempts} attempt"
            f"{'s' if attempts != 1 else ''}; last error: {cause}); {applied}. Check that "
            "the server is running and reachable, then retry"
        )

    def __reduce__(self) -> tuple[type, tuple[str, float, int, str, bool]]:
        # rebuilt from its parts, not the message (crossing a process boundary)
        return (
            type(self),
            (self.server, self.waited, self.attempts, self.cause, self.outcome_unknown),
        )


class SQLiteOnly(StoreError, AttributeError):
    """An internal of the original SQLite class (`SessionDB._conn`, `_lock`,
    `_execute_write`) asked for on another backend. An AttributeError, so that code which
    probes for it with `getattr(db, "_conn", None)` falls back as it would on a class
    without it."""

    def __init__(self, feature: str, instead: str) -> None:
        self.feature = feature
        self.instead = instead
        super().__init__(
            f"{feature} is the original's SQLite connection internals and does not exist on "
            f"PostgreSQL; use {instead}"
        )


class DriverMissing(StoreError, ValueError):
    """The database driver a URL needs is not installed (PostgreSQL's psycopg: the
    `postgres` extra). A ValueError, as an unusable URL is."""


class RestoreConflict(StoreError, ValueError):
    """A trashed session cannot be restored: a live row took one of its keys since it was
    trashed (ids are kept on restore, so one of the two must go first). `taken` names
    them; `what` says what they are ("session id" when a live session has the id,
    "Google ADK session (app, user, id)", or "row" for another unique key). Nothing was
    restored."""

    def __init__(self, session_id: str, taken: list[str], what: str = "session id") -> None:
        self.session_id = session_id
        self.taken = taken
        self.what = what
        shown = ", ".join(repr(t) for t in taken[:5]) + (" ..." if len(taken) > 5 else "")
        holder = "session" if what == "session id" else "row"
        super().__init__(
            f"cannot restore session {session_id!r}: a live {holder} now has the {what} "
            f"{shown}; delete or rename it first. Nothing was restored"
        )

    def __reduce__(self) -> tuple[type, tuple[str, list[str], str]]:
        return (type(self), (self.session_id, self.taken, self.what))


class EncryptionKeyError(NotADatabaseFile):
    """A SQLite file that cannot be read with the encryption key this process has (docs/
    encryption.md): none for an encrypted file, a wrong one, or one for a file that is not
    encrypted. A NotADatabaseFile, as SQLite itself calls such a file "not a database".
    The message never holds the key. Nothing was changed."""


class EncryptionKeyRequired(EncryptionKeyError):
    """The file is encrypted (or is not an SQLite file at all), and no key was given."""


class WrongEncryptionKey(EncryptionKeyError):
    """A key was given, and the encrypted file does not open with it."""


class NotEncrypted(EncryptionKeyError):
    """A key was given for a file that is not encrypted (an SQLite file in plain text), or
    `hermes-store decrypt` was asked to decrypt one."""


class AlreadyEncrypted(StoreError):
    """`hermes-store encrypt` was asked to encrypt a file that is encrypted already."""


class EncryptionUnavailable(DriverMissing):
    """A key was given, but this process cannot encrypt: the `encryption` extra
    (`sqlcipher3`) is not installed, or the process drives SQLite through another library
    already (one library per process: hermes_store/sqlite/driver.py)."""


class FileInUse(StoreError):
    """A command that replaces a SQLite file (`hermes-store encrypt`, `decrypt`) found
    another process with it open. Nothing was changed."""
