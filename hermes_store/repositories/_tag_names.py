"""What a session tag may be: a short printable label, checked in one place for the
repositories, the listing and search filters and the command line."""

from __future__ import annotations

from sqlalchemy import Connection

from ..contract import TAGS_TABLE
from ..errors import InvalidInput, SchemaBehind

#: The longest tag (characters, after trimming): a label, not a note.
MAX_TAG_LENGTH = 100


def _shown(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:60] + f"... ({len(text)} characters)"


def check_tag(tag: object) -> str:
    """The tag trimmed of surrounding whitespace; InvalidInput unless it is a non-empty
    string of at most MAX_TAG_LENGTH characters without control characters (a NUL cannot
    be stored on PostgreSQL, a newline breaks every listing) or lone surrogates."""
    if not isinstance(tag, str):
        raise InvalidInput(f"a tag is a string, not {_shown(tag)}")
    trimmed = tag.strip()
    if not trimmed:
        raise InvalidInput("a tag cannot be empty")
    if len(trimmed) > MAX_TAG_LENGTH:
        raise InvalidInput(
            f"a tag may be at most {MAX_TAG_LENGTH} characters long (this one has {len(trimmed)})"
        )
    for ch in trimmed:
        code = ord(ch)
        if code < 0x20 or code == 0x7F or 0xD800 <= code <= 0xDFFF:
            raise InvalidInput(f"a tag cannot contain the character U+{code:04X}: {_shown(tag)}")
    return trimmed


def check_tags(tags: object) -> list[str]:
    """Each tag checked, duplicates dropped, in the order given; a lone string is refused
    (it would be read as its characters)."""
    if isinstance(tags, str) or not hasattr(tags, "__iter__"):
        raise InvalidInput(f"tags are a list of strings, not {_shown(tags)}")
    checked: list[str] = []
    for tag in tags:
        value = check_tag(tag)
        if value not in checked:
            checked.append(value)
    return checked


def require_tags_table(conn: Connection) -> None:
    """SchemaBehind naming the upgrade when the database has no tags table (one opened
    read-only that predates revision hs0007), instead of the driver's "no such table"
    (or, inside a search, which reads an unreadable query as no match, nothing found)."""
    if conn.dialect.has_table(conn, TAGS_TABLE):
        return
    from ..migration.read_only import place_of, upgrade_command

    url = conn.engine.url
    database = url.database or ""
    if database.startswith("file:"):
        # a read-only SQLite open's URI (file:PATH?mode=ro): name the file as given
        url = url.set(database=database.removeprefix("file:").split("?", 1)[0], query={})
    raise SchemaBehind(
        place_of(url),
        "a tag filter needs hermes-store's own tables, which this database was never "
        "upgraded to",
        [f"table {TAGS_TABLE}"],
        upgrade_command(url),
    )
