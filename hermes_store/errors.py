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
