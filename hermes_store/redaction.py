"""Redaction of secrets in messages before they are stored (docs/redaction.md).

A `RedactionPolicy` is a list of named patterns: the built-in ones (API keys of the
common providers, bearer tokens, private-key blocks, passwords in URLs, `key = value`
assignments of secrets, `.env` lines such as `PGPASSWORD=...`) and the user's own. Each
match is replaced by `[REDACTED:<name>]`; a pattern with a group named `secret` has only
that group replaced, so the text around it (`Authorization: Bearer`, `postgresql://user:`
... `@host`) stays readable and searchable.

A `Store` applies its policy to every message it writes (appends, batches, compaction,
import, the agent adapters, a restore from the trash), before the values reach the
database, so neither the rows nor the FTS indexes
built from them ever hold a matched secret; `hermes-store redact`
(hermes_store/repositories/redaction.py) applies it to what is already stored.

The policy is off unless asked for: the original Hermes stores what it is given, and a
store that rewrites text by default would surprise its users. One switch turns it on:
`HERMES_STORE_REDACT=on` in the environment (read by every `Store`, the command and the
`SessionDB` drop-in), or `Store(url, redaction=RedactionPolicy())` in code.

This module needs nothing but the standard library and the error types, so the Store
can hold a policy without importing the repositories.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .errors import InvalidInput, InvalidRedactionPattern

REDACT_ENV = "HERMES_STORE_REDACT"
PATTERNS_ENV = "HERMES_STORE_REDACT_PATTERNS"

#: What a match becomes; a value holding it is never matched again, so a second run
#: over redacted text finds nothing.
MARKER = "[REDACTED:{name}]"
_MARKER_START = "[REDACTED:"
#: A pattern's name: it is printed in reports and written into the text, so it is short
#: and plain.
_NAME = re.compile(r"[a-z0-9][a-z0-9-]{0,39}")

#: The message fields a policy redacts: everything a model or a tool wrote or was sent.
#: `display_metadata` is one: the agent integrations keep the whole item or event there
#: (its text, call arguments and tool output) and hand it back from there. Ids, names,
#: roles and `display_kind` are left alone.
REDACTED_FIELDS = (
    "content",
    "api_content",
    "tool_calls",
    "reasoning",
    "reasoning_content",
    "reasoning_details",
    "codex_reasoning_items",
    "codex_message_items",
    "display_metadata",
)
#: Of those, the ones stored as JSON text (content is JSON only behind its prefix).
JSON_FIELDS = frozenset(
    {
        "tool_calls",
        "reasoning_details",
        "codex_reasoning_items",
        "codex_message_items",
        "display_metadata",
    }
)
#: Fields an append may be given as JSON text: parsed before they are redacted string by
#: string, as storing them parses them (text that does not parse is stored as nothing).
_PARSED_ON_APPEND = frozenset({"tool_calls", "display_metadata"})
#: The `\x00json:` prefix of structured content (repositories/encoding.py).
_CONTENT_JSON_PREFIX = "\x00json:"

_KEYWORDS = (
    r"api[_-]?key|apikey|secret[_-]?key|client[_-]?secret|access[_-]?token|auth[_-]?token"
    r"|refresh[_-]?token|private[_-]?key|password|passwd|passphrase|secret|token"
)

#: (name, expression, literals one of which a text must hold for the expression to be
#: tried; `~word`: the text lowercased holds `word`). Order matters: a block or a more
#: specific key is replaced before a broader pattern could take part of it.
BUILTIN_PATTERNS: tuple[tuple[str, str, tuple[str, ...]], ...] = (
    (
        "private-key",
        r"-----BEGIN[A-Z0-9 ]*PRIVATE KEY-----(?:.*?-----END[A-Z0-9 ]*PRIVATE KEY-----|.*\Z)",
        ("PRIVATE KEY-----",),
    ),
    ("anthropic-key", r"(?<![A-Za-z0-9_-])sk-ant-[A-Za-z0-9_-]{20,}", ("sk-ant-",)),
    (
        "openai-key",
        r"(?<![A-Za-z0-9_-])sk-(?!ant-)(?:proj-|svcacct-|admin-)?[A-Za-z0-9_-]{20,}",
        ("sk-",),
    ),
    ("aws-access-key", r"(?<![A-Z0-9])(?:AKIA|ASIA)[0-9A-Z]{16}(?![A-Z0-9])", ("AKIA", "ASIA")),
    (
        "github-token",
        r"(?<![A-Za-z0-9_])(?:gh[pousr]_[A-Za-z0-9]{36,}|github_pat_[A-Za-z0-9_]{22,})",
        ("gh", "github_pat_"),
    ),
    ("slack-token", r"(?<![A-Za-z0-9])xox[abposre]-[A-Za-z0-9-]{10,}", ("xox",)),
    ("google-api-key", r"(?<![A-Za-z0-9_-])AIza[0-9A-Za-z_-]{35}(?![0-9A-Za-z_-])", ("AIza",)),
    ("bearer-token", r"(?i:bearer)\s+(?P<secret>[A-Za-z0-9._~+/=-]{16,})", ("~bearer",)),
    (
        "url-password",
        r"(?<![A-Za-z0-9+.-])[A-Za-z][A-Za-z0-9+.-]*://[^\s:/?#@\"'<>]+:"
        r"(?P<secret>[^\s/?#@\"'<>]+)@",
        ("://",),
    ),
    (
        "aws-secret-key",
        r"(?i)(?<![A-Za-z0-9])aws_secret_access_key[\"']?\s*[:=]\s*[\"']?"
        r"(?P<secret>[A-Za-z0-9/+=]{40})(?![A-Za-z0-9/+=])",
        ("~aws_secret_access_key",),
    ),
    (
        # `.env` and shell assignments: an upper-case name ending in a secret's suffix
        # (PGPASSWORD, MYSQL_PWD, HERMES_STORE_KEY), `=` with no space around it (as
        # the shell requires, which keeps `x = y` in code and prose out), the value
        # through its closing quote or to the end of the line (`$NAME`, a reference to
        # another variable, is no secret)
        "env-secret",
        r"(?<![A-Za-z0-9_])[A-Z][A-Z0-9_]*(?:_KEY|_SECRET|_TOKEN|PASSWORD|PASSWD|_PWD)=(?!=)"
        r"(?P<quote>[\"'])?(?P<secret>(?(quote)[^\n\"']+|[^\s\"'\\$](?:[^\n\"']*[^\s\"'\\])?))",
        ("KEY=", "SECRET=", "TOKEN=", "PASSWORD=", "PASSWD=", "PWD="),
    ),
    (
        "generic-secret",
        rf"(?i)(?<![A-Za-z0-9])(?:{_KEYWORDS})[\"']?\s*[:=]\s*[\"']?"
        r"(?P<secret>[^\s\"',;&<>]{8,})",
        ("~key", "~secret", "~token", "~pass"),
    ),
)


@dataclass(frozen=True)
class RedactionPattern:
    """One named pattern, compiled. `hints`: literals one of which a text must contain
    for the expression to be tried at all (a substring test costs far less than a
    regular-expression scan, and most messages hold no secret)."""

    name: str
    regex: re.Pattern[str]
    hints: tuple[str, ...] = ()
    builtin: bool = False

    def sub(self, text: str, counts: Counter[str], lowered: str | None = None) -> str:
        """`text` with this pattern's matches replaced; `lowered`: `text.lower()`, for
        the hints that ignore case."""
        if self.hints and not self._hinted(text, lowered):
            return text
        replacement = MARKER.format(name=self.name)
        secret = "secret" in self.regex.groupindex

        def replace(match: re.Match[str]) -> str:
            start, end = match.span("secret") if secret else match.span()
            if start < 0 or _MARKER_START in match.group(0):
                return match.group(0)  # already redacted, or the group did not take part
            counts[self.name] += 1
            whole = match.group(0)
            offset = match.start()
            return whole[: start - offset] + replacement + whole[end - offset :]

        return self.regex.sub(replace, text)

    def _hinted(self, text: str, lowered: str | None) -> bool:
        for hint in self.hints:
            if hint[0] == "~":
                if hint[1:] in (text.lower() if lowered is None else lowered):
                    return True
            elif hint in text:
                return True
        return False


def compile_pattern(name: str, expression: str) -> RedactionPattern:
    """A user's pattern, checked: InvalidRedactionPattern names it when its name is not
    a short lowercase word, its expression does not compile or matches empty text."""
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise InvalidRedactionPattern(
            str(name),
            "a name is 1-40 characters of a-z, 0-9 and '-', starting with a letter or digit",
        )
    if not isinstance(expression, str) or not expression:
        raise InvalidRedactionPattern(name, "the expression is empty")
    try:
        regex = re.compile(expression, re.DOTALL)
    except re.error as exc:
        where = "" if exc.pos is None else f" at position {exc.pos}"
        raise InvalidRedactionPattern(
            name, f"the regular expression does not compile: {exc.msg}{where}"
        ) from None
    if regex.search("") is not None:
        raise InvalidRedactionPattern(name, "the regular expression matches empty text")
    return RedactionPattern(name, regex)


def _builtin() -> tuple[RedactionPattern, ...]:
    return tuple(
        RedactionPattern(name, re.compile(expression, re.DOTALL), hints, builtin=True)
        for name, expression, hints in BUILTIN_PATTERNS
    )


_BUILTIN = _builtin()


@dataclass(frozen=True)
class RedactionPolicy:
    """Which secrets are replaced before messages are stored.

    Args:
        enabled: whether the policy applies at all (`RedactionPolicy.off()` is the
            disabled one, what a Store uses unless asked otherwise).
        builtin: use the built-in patterns (`BUILTIN_PATTERNS`).
        patterns: the user's own, `{name: regular expression}` (or pairs), tried after
            the built-in ones; a group named `secret` limits what is replaced.
    """

    enabled: bool = True
    builtin: bool = True
    patterns: Mapping[str, str] | Iterable[tuple[str, str]] = ()
    compiled: tuple[RedactionPattern, ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        pairs = list(self.patterns.items() if isinstance(self.patterns, Mapping) else self.patterns)
        own = [compile_pattern(name, expression) for name, expression in pairs]
        taken = {p.name for p in _BUILTIN} if self.builtin else set()
        for pattern in own:
            if pattern.name in taken:
                raise InvalidRedactionPattern(pattern.name, "the name is used twice")
            taken.add(pattern.name)
        object.__setattr__(self, "patterns", tuple(pairs))
        compiled = (*(_BUILTIN if self.builtin else ()), *own) if self.enabled else ()
        object.__setattr__(self, "compiled", compiled)

    @classmethod
    def off(cls) -> RedactionPolicy:
        """The policy that changes nothing."""
        return cls(enabled=False)

    @classmethod
    def from_env(cls) -> RedactionPolicy:
        """`$HERMES_STORE_REDACT` (`on` or `off`, default off) and, when on,
        `$HERMES_STORE_REDACT_PATTERNS`: a file of the user's own patterns, one
        `name=regular expression` a line (blank lines and lines starting with # are
        skipped)."""
        value = os.environ.get(REDACT_ENV, "").strip().lower() or "off"
        if value not in ("on", "off", "1", "0", "true", "false", "yes", "no"):
            raise InvalidInput(f"{REDACT_ENV}={value!r}: choose on or off")
        if value in ("off", "0", "false", "no"):
            return cls.off()
        path = os.environ.get(PATTERNS_ENV, "").strip()
        return cls(patterns=read_patterns(Path(path)) if path else ())

    @property
    def names(self) -> tuple[str, ...]:
        """The names of the patterns applied, in the order they are tried."""
        return tuple(p.name for p in self.compiled)

    @property
    def fingerprint(self) -> str:
        """Identifies what the policy replaces (its patterns, in order) and where (the
        REDACTED_FIELDS): a redaction run resumes only the progress of a run with the same
        fingerprint, so a field added to the list is walked from the first message."""
        digest = hashlib.sha256()
        digest.update(",".join(REDACTED_FIELDS).encode() + b"\x00")
        for pattern in self.compiled:
            digest.update(f"{pattern.name}\x00{pattern.regex.pattern}\x00".encode())
        return digest.hexdigest()[:16]

    def redact_text(self, text: str, counts: Counter[str] | None = None) -> str:
        """`text` with every match replaced; `counts` gets one per replacement, by name."""
        tally = Counter[str]() if counts is None else counts
        lowered = text.lower()
        for pattern in self.compiled:
            redacted = pattern.sub(text, tally, lowered)
            if redacted is not text:
                text, lowered = redacted, redacted.lower()
        return text

    def redact_value(self, value: Any, counts: Counter[str] | None = None) -> Any:
        """A message field's value (text, or lists and dicts of them, as given to an
        append) with every string in it redacted; other values as they are."""
        tally = Counter[str]() if counts is None else counts
        if isinstance(value, str):
            return self.redact_text(value, tally)
        if isinstance(value, list):
            return [self.redact_value(item, tally) for item in value]
        if isinstance(value, dict):
            return {key: self.redact_value(item, tally) for key, item in value.items()}
        return value

    def redact_fields(self, fields: Mapping[str, Any]) -> dict[str, Any]:
        """A message's fields (as an append takes them) with REDACTED_FIELDS redacted.
        Tool calls given as JSON text are parsed first, as storing them does."""
        out = dict(fields)
        if not self.compiled:
            return out
        for name in REDACTED_FIELDS:
            value = out.get(name)
            if value is None:
                continue
            if name in _PARSED_ON_APPEND and isinstance(value, str):
                try:
                    value = json.loads(value)
                except ValueError:
                    continue  # stored as nothing: nothing of it is kept
            out[name] = self.redact_value(value)
        return out

    def redact_stored(self, column: str, stored: Any, counts: Counter[str]) -> Any:
        """A column's stored value (as read from `messages`) redacted, in the same stored
        encoding; the value itself when nothing matched. JSON that does not parse is
        redacted as text."""
        if not isinstance(stored, str) or not self.compiled:
            return stored
        found = Counter[str]()
        if column == "content" and stored.startswith(_CONTENT_JSON_PREFIX):
            decoded = _json_or_none(stored[len(_CONTENT_JSON_PREFIX) :])
            if decoded is not None:
                redacted = self.redact_value(decoded[0], found)
                result = _CONTENT_JSON_PREFIX + json.dumps(redacted) if found else stored
                counts.update(found)
                return result
        elif column in JSON_FIELDS:
            decoded = _json_or_none(stored)
            if decoded is not None:
                redacted = self.redact_value(decoded[0], found)
                counts.update(found)
                return json.dumps(redacted) if found else stored
        result = self.redact_text(stored, found)
        counts.update(found)
        return result if found else stored


    def redact_stored_rows(self, rows: Iterable[dict[str, Any]]) -> Counter[str]:
        """Message rows as stored (dicts of their columns, as a restore from the trash
        writes them back), their REDACTED_FIELDS redacted in place; the replacements by
        pattern. A row written again is a write: it gets the policy as an append does,
        and a later `redact` run, which resumes after its cursor, would never reach its
        old id."""
        counts = Counter[str]()
        if not self.compiled:
            return counts
        for row in rows:
            for name in REDACTED_FIELDS:
                if name in row:
                    row[name] = self.redact_stored(name, row[name], counts)
        return counts


def _json_or_none(text: str) -> tuple[Any] | None:
    try:
        return (json.loads(text),)
    except ValueError:
        return None


def read_patterns(path: Path) -> list[tuple[str, str]]:
    """The user's patterns from a file: one `name=regular expression` a line; blank lines
    and lines starting with # are skipped. InvalidRedactionPattern for a line without
    `=` (named by its line number) or a pattern that does not compile."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise InvalidRedactionPattern(
            str(path), f"the patterns file cannot be read: {exc}"
        ) from None
    pairs: list[tuple[str, str]] = []
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        name, sep, expression = line.partition("=")
        if not sep:
            raise InvalidRedactionPattern(
                f"{path.name} line {number}", "expected name=regular expression"
            )
        pairs.append((name.strip(), expression))
    for name, expression in pairs:
        compile_pattern(name, expression)
    return pairs


def parse_pattern_arg(text: str) -> tuple[str, str]:
    """`name=regular expression` as typed on the command line, checked."""
    name, sep, expression = text.partition("=")
    if not sep:
        # without "=" the argument may be a pasted secret, so none of it is echoed
        raise InvalidRedactionPattern("the pattern argument", "expected name=regular expression")
    compile_pattern(name.strip(), expression)
    return name.strip(), expression
