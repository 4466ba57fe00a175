"""How a search query is read (dialect-free).

Two readings exist side by side:

- `parse_fts5(sanitized)`: the original's reading. The sanitiser's output read by FTS5's
  own rules (barewords, "phrases", prefix `*`, AND / OR / NOT in capitals, implicit AND,
  NOT > AND > OR), which the PostgreSQL backend rebuilds as a tsquery; QuerySyntaxError
  where FTS5 would reject the query.
- `read_query(query)`: the reading that finds what people type. The query as typed is
  split at whitespace (a balanced `"…"` stays inside its token); a token that is exactly
  a quoted phrase, an operator or a run of letters and digits (optionally with a trailing
  `*`) means what it means to FTS5; any other token (`don't`, `50%`, `src/main.py`,
  `.env`, `-rf`, `C++`, `foo_bar`, `a:b`, `[tag]`) is a *literal*: it matches a message
  that contains that text (see `fold` for "ignoring case").

The planner answers a query with literals by the second reading first and then tops the
page up with whatever the first reading finds, so a message holding the literal ranks
above one that only holds its words, and nothing the original finds is lost.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from .query import OPERATORS, clean, quote_scan

#: A literal this long or longer is looked up in the trigram index (substrings of 3).
TRIGRAM_CHARS = 3

# FTS5 barewords: letters, digits, "_", the substitute character and anything non-ASCII
_BAREWORD = re.compile(r"^[A-Za-z0-9_\x1a\u0080-\U0010ffff]+$")
_ITEM = re.compile(r'"[^"]*"\*?|[^\s"]+')
_STAR_SPLIT = re.compile(r"[^*]*\*|[^*]+")
# what unicode61 and the tsvector keep as a word: letters and digits, never "_"
_WORD_RUN = re.compile(r"[^\W_]+")
_PLAIN_WORD = re.compile(r"^[^\W_]+\*?$")
_PHRASE = re.compile(r'^"[^"]*"\*?$')
_ASCII_UPPER = str.maketrans("ABCDEFGHIJKLMNOPQRSTUVWXYZ", "abcdefghijklmnopqrstuvwxyz")


class QuerySyntaxError(ValueError):
    """The query is not valid FTS5 syntax (SQLite would raise on it too)."""


@dataclass(frozen=True)
class Term:
    text: str
    prefix: bool
    phrase: bool
    literal: bool = False


# A read query: OR of AND-groups; each group a sequence of (negated, term).
Parsed = Sequence[Sequence[tuple[bool, Term]]]
Group = list[tuple[bool, Term]]


def fold(text: str) -> str:
    """Ignoring case, for literals: ASCII letters fold to lower case, every other
    character stays as it is. The one definition both backends can apply exactly
    (SQLite's lower() folds ASCII only; PostgreSQL's lower() and ILIKE fold by the
    database's locale, so they are used to find candidates, never to decide)."""
    return text.translate(_ASCII_UPPER)


def words_of(text: str) -> list[str]:
    """The words the word indexes keep from `text` (runs of letters and digits)."""
    return _WORD_RUN.findall(text)


def _group(items: list[str | Term]) -> Parsed:
    """Operators and terms into OR-of-AND-groups, with FTS5's placement rules."""
    groups: list[Group] = [[]]
    pending: str | None = None  # "AND" / "NOT" waiting for its right operand
    for item in items:
        if isinstance(item, str):
            if not groups[-1] or pending is not None:
                raise QuerySyntaxError(f"operator {item} without a left operand")
            if item == "OR":
                groups.append([])
            else:
                pending = item
            continue
        groups[-1].append((pending == "NOT", item))
        pending = None
    if pending is not None or not groups[-1]:
        raise QuerySyntaxError("operator without a right operand")
    return groups


def _phrase_term(item: str, *, literal: bool = False) -> Term:
    prefix = item.endswith("*")
    body = item[1:-2] if prefix else item[1:-1]
    return Term(body, prefix, phrase=True, literal=literal)


def fts5_tokens(sanitized: str) -> list[str]:
    """FTS5's tokens: a `*` ends the bareword before it, so `chat*send` is `chat*` then
    `send` (implicit AND), as FTS5's lexer reads it; phrases stay whole."""
    tokens: list[str] = []
    for item in _ITEM.findall(sanitized):
        if item.startswith('"'):
            tokens.append(item)
        else:
            tokens.extend(_STAR_SPLIT.findall(item))
    return tokens


def parse_fts5(sanitized: str) -> Parsed:
    """Read a sanitised query as FTS5 reads it; QuerySyntaxError where FTS5 would fail."""
    items: list[str | Term] = []
    for item in fts5_tokens(sanitized):
        if item in OPERATORS:
            items.append(item)
        elif item.startswith('"'):
            items.append(_phrase_term(item))
        else:
            prefix = item.endswith("*")
            body = item[:-1] if prefix else item
            if not body or not _BAREWORD.match(body):
                raise QuerySyntaxError(f"{item!r} is not an FTS5 bareword")
            items.append(Term(body, prefix, phrase=False))
    return _group(items)


def _split_typed(query: str) -> list[str]:
    """Whitespace-separated tokens of the query as typed; a balanced `"…"` stays inside
    its token (spaces included), an unbalanced `"` is a character like any other (`5"`,
    `00":`), where the sanitiser makes it a space."""
    tokens: list[str] = []
    current: list[str] = []
    for kind, piece in quote_scan(query):
        if kind == "char" and piece.isspace():
            if current:
                tokens.append("".join(current))
                current = []
        else:
            current.append(piece)
    if current:
        tokens.append("".join(current))
    return tokens


def read_query(query: str) -> Parsed:
    """The query as people mean it: literals for tokens holding punctuation, FTS5's
    meaning for everything else; QuerySyntaxError for misplaced operators."""
    tokens = _split_typed(clean(query))
    # the sanitiser drops one leading and one trailing operator (any case)
    if tokens and tokens[0].upper() in OPERATORS:
        tokens = tokens[1:]
    if tokens and tokens[-1].upper() in OPERATORS:
        tokens = tokens[:-1]
    items: list[str | Term] = []
    for token in tokens:
        if token in OPERATORS:
            items.append(token)
        elif _PHRASE.match(token):
            if token.strip('"*'):
                items.append(_phrase_term(token))
        elif _PLAIN_WORD.match(token):
            prefix = token.endswith("*")
            items.append(Term(token.rstrip("*"), prefix, phrase=False))
        else:
            body = token.rstrip("*") or token  # `chat-send*`: the literal already is a prefix
            items.append(Term(body, prefix=False, phrase=False, literal=True))
    if not items:
        return []
    return _group(items)


def has_literals(parsed: Parsed) -> bool:
    return any(term.literal for group in parsed for _, term in group)


def literals_of(query: str) -> list[str]:
    """The literals of a query as typed (none when its operators are misplaced)."""
    try:
        parsed = read_query(query)
    except QuerySyntaxError:
        return []
    return [term.text for group in parsed for _, term in group if term.literal]
