"""Turning user input into something FTS5 accepts (dialect-free).

`sanitize_fts5_query` follows the original's v23 rules step by step (docs/reference/behaviour.md
6.2); what survives may still be an FTS5 syntax error (`don't`, `a,b`), which the search
routes treat as "no results" instead of raising.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence

MAX_QUERY_CHARS = 2048
OPERATORS = frozenset({"AND", "OR", "NOT"})

_CJK_RANGES = (
    (0x4E00, 0x9FFF),
    (0x3400, 0x4DBF),
    (0x20000, 0x2A6DF),
    (0x3000, 0x303F),
    (0x3040, 0x309F),
    (0x30A0, 0x30FF),
    (0xAC00, 0xD7AF),
)
_SPECIALS = str.maketrans({c: " " for c in '+{}():"^'})
_COMPOUND = re.compile(r"\w+(?:[._-]\w+)+")
_LEADING_OP = re.compile(r"^\s*(?:AND|OR|NOT)\b", re.I)
_TRAILING_OP = re.compile(r"\b(?:AND|OR|NOT)\s*$", re.I)
_SURROGATES = re.compile("[\ud800-\udfff]")


def scrub_surrogates(value: str) -> str:
    """Lone UTF-16 surrogates cannot be encoded as UTF-8; the original stores U+FFFD."""
    return _SURROGATES.sub("\ufffd", value)


def is_cjk(char: str) -> bool:
    code = ord(char)
    return any(lo <= code <= hi for lo, hi in _CJK_RANGES)


def contains_cjk(text: str) -> bool:
    return any(is_cjk(c) for c in text)


def cjk_count(text: str) -> int:
    return sum(1 for c in text if is_cjk(c))


def _placeholder(n: int) -> str:
    # NUL is removed from queries first, and private-use characters are not \w, so a
    # placeholder can neither occur in the input nor take part in the compound rule.
    return f"\x00{chr(0xE000 + n)}\x00"


def clean(query: str) -> str:
    """The query as both readings see it: surrogates scrubbed, cut to 2048 characters,
    NUL removed."""
    return scrub_surrogates(query)[:MAX_QUERY_CHARS].replace("\x00", "")


def quote_scan(text: str) -> Iterator[tuple[str, str]]:
    """`text` left to right as ("phrase", a balanced `"…"`), ("stray", an unbalanced
    `"`) and ("char", any other character)."""
    i = 0
    while i < len(text):
        if text[i] == '"':
            end = text.find('"', i + 1)
            if end == -1:
                yield "stray", '"'
                i += 1
            else:
                yield "phrase", text[i : end + 1]
                i = end + 1
            continue
        yield "char", text[i]
        i += 1


def sanitize_fts5_query(query: str) -> str:
    phrases: list[str] = []
    out: list[str] = []
    for kind, piece in quote_scan(clean(query)):
        if kind == "phrase":
            out.append(_placeholder(len(phrases)))
            phrases.append(piece)
        else:
            out.append(" " if kind == "stray" else piece)
    text = "".join(out).translate(_SPECIALS)
    text = re.sub(r"\*+", "*", text)
    text = re.sub(r"(^|\s)\*", r"\1", text)
    text = _LEADING_OP.sub("", text, count=1)
    text = _TRAILING_OP.sub("", text, count=1)
    text = _COMPOUND.sub(lambda m: f'"{m.group(0)}"', text)
    for n, phrase in enumerate(phrases):
        text = text.replace(_placeholder(n), phrase)
    return text.strip()


def route_tokens(sanitized: str) -> tuple[str, list[str]]:
    """`raw` (surrounding quotes and spaces stripped) and its whitespace-split tokens."""
    raw = sanitized.strip('" ')
    return raw, raw.split()


def quote_tokens(tokens: list[str]) -> str:
    """Every non-operator token as an FTS5 string, operators kept as they are."""
    quoted = []
    for token in tokens:
        if token.upper() in OPERATORS:
            quoted.append(token)  # as typed: FTS5 reads only upper-case words as operators
        else:
            quoted.append('"' + token.replace('"', '""') + '"')
    return " ".join(quoted)


def or_groups(tokens: Sequence[str]) -> list[list[tuple[str, bool]]]:
    """The tokens of each OR-alternative, operators as FTS5 reads them (upper case
    only), each with whether a NOT stands right before it. An alternative may be empty
    (`a OR`)."""
    groups: list[list[tuple[str, bool]]] = [[]]
    negate = False
    for token in tokens:
        if token in OPERATORS:
            if token == "OR":
                groups.append([])
            negate = token == "NOT"
            continue
        groups[-1].append((token, negate))
        negate = False
    return groups


def terms(tokens: Sequence[str]) -> list[str]:
    return [t for t in tokens if t.upper() not in OPERATORS]


def like_escape(text: str) -> str:
    """`text` with LIKE's wildcards and the escape character (backslash) taken literally."""
    return text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")


def like_pattern(term: str) -> str:
    """`%term%` with LIKE's wildcards and the escape character taken literally."""
    return f"%{like_escape(term)}%"


def topup_terms(sanitized: str) -> list[str]:
    """Terms for the pending-range LIKE scan: phrases and words, quotes and `*` removed,
    operators (AND, OR, NOT, NEAR) dropped."""
    parts = re.findall(r'"[^"]*"|\S+', sanitized)
    out = []
    for part in parts:
        term = part.replace('"', "").replace("*", "").strip()
        if term and term.upper() not in OPERATORS | {"NEAR"}:
            out.append(term)
    return out
