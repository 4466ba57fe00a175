"""Where the database URL comes from, and the numbers the write path uses."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote_plus

from sqlalchemy.engine import URL, make_url
from sqlalchemy.exc import ArgumentError

from .errors import InvalidURL

URL_ENV = "HERMES_STORE_URL"
HOME_ENV = "HERMES_HOME"

#: The newest upstream schema version this code writes and understands.
SCHEMA_VERSION = 23


def hermes_home() -> Path:
    """`$HERMES_HOME`, else `~/.hermes` (the original's rule)."""
    env = os.environ.get(HOME_ENV)
    return Path(env).expanduser() if env else Path.home() / ".hermes"


def default_db_path() -> Path:
    return hermes_home() / "state.db"


def sqlite_url(path: str | os.PathLike[str]) -> URL:
    return URL.create("sqlite", database=str(Path(path).expanduser().absolute()))


def resolve_url(url: str | os.PathLike[str] | URL | None = None) -> URL:
    """An explicit URL, else `HERMES_STORE_URL`, else `$HERMES_HOME/state.db`.

    A plain filesystem path is accepted wherever a URL is, and means SQLite. A URL that
    cannot be parsed, or names another database or driver, raises InvalidURL.
    """
    if url is None:
        url = os.environ.get(URL_ENV) or None
    if url is None:
        return sqlite_url(default_db_path())
    if isinstance(url, URL):
        return _supported(url)
    if isinstance(url, os.PathLike):
        return sqlite_url(url)
    if "://" not in url:
        if _LIBPQ_STRING.match(url):
            raise InvalidURL(
                f"{shown_url(url)} is a libpq connection string, not a database URL: write "
                "it as postgresql://user:password@host:port/dbname (for a file of that "
                "name, write ./ before it)"
            )
        return sqlite_url(url)
    try:
        parsed = make_url(url)
    except (ArgumentError, ValueError) as exc:  # ValueError: a port that is not a number
        raise InvalidURL(
            f"cannot read the database URL {shown_url(url)} ({_masked(str(exc))}); give a "
            f"file path, {_FORMS}"
        ) from None
    if parsed.drivername in ("postgresql", "postgres"):
        # the driver hermes-store ships with (the `postgres` extra), not psycopg2
        parsed = parsed.set(drivername="postgresql+psycopg")
    return _supported(parsed)


_FORMS = "sqlite:////absolute/path/state.db or postgresql://user@host/dbname"

#: The dialect+driver pairs the engine's connection rules are written for: pysqlite's
#: sqlite3 connections (pragmas, explicit BEGIN) and psycopg 3's adapters (NUL escaping).
SUPPORTED_DRIVERS = {"sqlite": "pysqlite", "postgresql": "psycopg"}


def _supported(url: URL) -> URL:
    backend, driver = url.get_backend_name(), url.get_driver_name()
    if url.host and "@" in url.host:
        # The URL parser ends the password at its first "@": the rest of the password
        # would be taken for a host name and looked up in DNS, and the error would quote it.
        host = shown_url(url.set(host=url.host.rpartition("@")[2]))
        raise InvalidURL(
            f"the database URL {host} (as far as it can be shown) has an '@' in its host "
            "name, so its password holds an unencoded '@': write it as %40 (percent-encode "
            "the password)"
        )
    shown = shown_url(url)
    if backend not in SUPPORTED_DRIVERS:
        raise InvalidURL(
            f"unsupported database {backend!r} in {shown}: hermes-store runs on SQLite and "
            f"PostgreSQL ({_FORMS})"
        )
    if driver != SUPPORTED_DRIVERS[backend]:
        raise InvalidURL(
            f"unsupported driver {driver!r} in {shown}: hermes-store uses "
            f"{backend}+{SUPPORTED_DRIVERS[backend]} (write {backend}:// for it)"
        )
    return url


#: Query parameters that hold a credential: libpq's `password` and `sslpassword`, and
#: anything named alike (`passwd`, `pwd`, a token or secret a proxy or driver takes).
_SECRET_KEY = re.compile(r"pass(?:word|wd|phrase)|pwd|secret|token", re.IGNORECASE)
#: A credential parameter with its value, in a URL's query or a libpq `key=value` string.
_SECRET_PARAM = re.compile(
    r"(?P<key>(?:^|[?&;\s])[^=&;\s]*(?:pass(?:word|wd|phrase)|pwd|secret|token)[^=&;\s]*\s*=)"
    r"\s*(?:'(?:[^'\\]|\\.)*'|[^&;\s]*)",
    re.IGNORECASE,
)
#: A libpq connection string (`host=db dbname=hermes ...`), which is not a URL.
_LIBPQ_STRING = re.compile(
    r"\s*(?:host|hostaddr|port|dbname|user|password|passfile|service|sslmode)\s*=",
    re.IGNORECASE,
)


def shown_url(url: URL | str) -> str:
    """A database URL as people may see it (output, error messages, logs): the password
    of its user and every credential query parameter (`password`, `sslpassword`, ...) as
    `***`. A string that does not parse as a URL is masked as text (`_masked`)."""
    if isinstance(url, str):
        return _masked(url)
    secret = {key for key in url.query if _SECRET_KEY.search(key)}
    if not secret:
        return url.render_as_string(hide_password=True)
    # rendered as SQLAlchemy renders a query (sorted keys, quote_plus), which would
    # write the mask itself as %2A%2A%2A
    params = []
    for key in sorted(url.query):
        values = url.query[key]
        for value in (values,) if isinstance(values, str) else values:
            params.append(f"{quote_plus(key)}={'***' if key in secret else quote_plus(value)}")
    return url.set(query={}).render_as_string(hide_password=True) + "?" + "&".join(params)


def _masked(text: str) -> str:
    """Text that may hold a URL (one that did not parse, or a parser's message about
    it), with anything between `://` and the last `@` and the value of every credential
    parameter hidden: it is echoed in an error message, which ends up in logs."""
    scheme, sep, rest = text.partition("://")
    if sep and "@" in rest:
        text = f"{scheme}://***@{rest.rpartition('@')[2]}"
    return _SECRET_PARAM.sub(lambda m: f"{m['key']}***", text)


def sqlite_path(url: URL) -> Path | None:
    """The file behind a SQLite URL, or None for memory databases and other dialects."""
    if url.get_backend_name() != "sqlite":
        return None
    database = url.database
    if not database or database == ":memory:" or database.startswith("file:"):
        return None
    return Path(database)


@dataclass(frozen=True)
class JournalPolicy:
    """How the journal mode of a SQLite file is chosen.

    `mode="auto"` follows the original: keep a WAL file WAL, otherwise use WAL unless the
    linked SQLite has the WAL-reset bug, in which case new files use DELETE.
    """

    mode: str = "auto"  # "auto", "wal" or "delete"

    def __post_init__(self) -> None:
        if self.mode not in JOURNAL_MODES:
            raise ValueError(f"journal mode must be auto, wal or delete, not {self.mode!r}")

    @classmethod
    def from_env(cls) -> JournalPolicy:
        """`$HERMES_STORE_JOURNAL_MODE` (auto, wal or delete), else auto. Operators who
        keep their files in DELETE mode as containment set it to `delete`."""
        value = os.environ.get(JOURNAL_ENV, "").strip().lower() or "auto"
        if value not in JOURNAL_MODES:
            raise InvalidURL(f"{JOURNAL_ENV}={value!r}: choose auto, wal or delete")
        return cls(mode=value)


JOURNAL_ENV = "HERMES_STORE_JOURNAL_MODE"
JOURNAL_MODES = ("auto", "wal", "delete")


def where(url: URL) -> str:
    """How an error names the database: the file's path, else the URL without its
    credentials."""
    path = sqlite_path(url)
    return str(path) if path is not None else shown_url(url)
