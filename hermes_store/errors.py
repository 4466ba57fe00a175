"""The error types hermes-store raises. Each message says what to do next."""

from __future__ import annotations


class StoreError(Exception):
    """Base class of every error hermes-store raises on purpose."""


class SchemaTooNew(StoreError):
    """The database was written by a newer schema than this code knows."""

    def __init__(self, found: int, supported: int, url: str = "") -> None:
        self.found = found
        self.supported = supported
        where = f" at {url}" if url else ""
        super().__init__(
            f"the database{where} has schema_version {found}, newer than the {supported} "
            f"this hermes-store supports; upgrade hermes-store (nothing was changed)"
        )


class NotAHermesDatabase(StoreError):
    """The file holds tables but is not a Hermes state database."""


class NotAtHead(StoreError):
    """The schema is behind the code; `hermes-store upgrade` fixes it."""


class MigrationError(StoreError):
    """A migration refused to run (for example a downgrade that would lose data)."""


class FTSUnavailable(StoreError):
    """The linked SQLite lacks FTS5 or the trigram tokenizer."""


class DatabaseNotWritable(StoreError):
    """The database file or its directory cannot be written."""


class StorageFull(DatabaseNotWritable):
    """The disk holding the database is full; the write was rolled back."""


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
