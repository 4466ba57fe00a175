"""One search query, read once: the only module that reads a query's text. Everything
the planner and the backends need is read here when a search starts (`SearchQuery.read`)
and never re-derived from the text afterwards.

- The original's sanitiser (`sanitize_fts5_query`, docs/reference/behaviour.md 6.2),
  step by step; what survives may still be an FTS5 syntax error (`don't`, `a,b`), which
  the routes answer with no results instead of raising.
- Two readings side by side:
  - `parse_fts5(sanitized)`: the original's reading. The sanitiser's output read by
    FTS5's own rules (barewords, "phrases", prefix `*`, AND / OR / NOT in capitals,
    implicit AND, NOT > AND > OR), which the PostgreSQL backend rebuilds as a tsquery;
    QuerySyntaxError where FTS5 would reject the query.
  - `read_query(query)`: the reading that finds what people type. The query as typed is
    split at whitespace (a balanced `"…"` stays inside its token); a token that is
    exactly a quoted phrase, an operator or a run of letters and digits (optionally with
    a trailing `*`) means what it means to FTS5; any other token (`don't`, `50%`,
    `src/main.py`, `.env`, `-rf`, `C++`, `foo_bar`, `a:b`, `[tag]`) is a *literal*: it
    matches a message that contains that text (see `fold` for "ignoring case").
  The planner answers a query with literals by the second reading first and then tops
  the page up with whatever the first reading finds, so a message holding the literal
  ranks above one that only holds its words, and nothing the original finds is lost.
- Repeats merged (`collapse_*`), only where that leaves the matching rows as they are
  (limits.py says why: a repeat is one more pass over an index).
- `SearchQuery`: every reading of one query, as the planner and the backends take it:
  - `sanitized`: the original's reading, repeats merged; what SQLite's FTS5 is asked with.
  - `fts5`: that text read by FTS5's rules (`parse_fts5`), which PostgreSQL rebuilds as a
    tsquery; `fts5_error` says why FTS5 would reject it.
  - `tokens` / `raw` / `words`: what the trigram, CJK and LIKE routes read.
  - `literal`: the reading that finds what people type (`read_query`), repeats merged;
    empty when its operators are misplaced.
  - `topup_terms`: the terms of the pending-range scan while a backfill runs.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from ..runtime.engine import scrub_surrogates

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


# --- repeats merged (limits.py's docstring says which) ---------------------------------


def _well_placed(tokens: list[str]) -> bool:
    """Every operator between two terms (FTS5 rejects the query otherwise)."""
    previous_is_operator = True  # nothing to the left of the first token
    for token in tokens:
        is_operator = token in OPERATORS
        if is_operator and previous_is_operator:
            return False
        previous_is_operator = is_operator
    return not previous_is_operator


def collapse_tokens(tokens: list[str]) -> list[str]:
    """`tokens` (FTS5's reading: terms, and AND / OR / NOT in capitals) without the
    repeats that do not change what they match (limits.py's docstring); `tokens`
    itself when nothing repeats."""
    if not _well_placed(tokens):
        return tokens
    alternatives: list[list[str]] = [[]]
    for token in tokens:
        if token == "OR":
            alternatives.append([])
        else:
            alternatives[-1].append(token)
    kept: list[list[str]] = []
    seen: set[frozenset[str] | tuple[str, ...]] = set()
    for alternative in alternatives:
        key: frozenset[str] | tuple[str, ...]
        if "NOT" in alternative:
            key = tuple(alternative)
        else:
            alternative = _without_repeats(alternative)
            key = frozenset(alternative) - {"AND"}
        if key not in seen:
            seen.add(key)
            kept.append(alternative)
    collapsed = [token for n, alt in enumerate(kept) for token in (["OR"] if n else []) + alt]
    return tokens if collapsed == tokens else collapsed


def _without_repeats(alternative: list[str]) -> list[str]:
    """An alternative of AND-ed terms (implicit, or with an explicit AND before them)
    without a term seen before in it, nor the AND that stood before the repeat."""
    out: list[str] = []
    seen: set[str] = set()
    pending_and = False
    for token in alternative:
        if token == "AND":
            pending_and = True
            continue
        if token not in seen:
            seen.add(token)
            out += ["AND", token] if pending_and else [token]
        pending_and = False
    return out


def collapse_fts5(sanitized: str) -> str:
    """The sanitised query without repeated terms, as FTS5 reads it; unchanged when
    nothing repeats. A query FTS5 rejects stays rejected: the first of each token is
    kept, the one FTS5 cannot read included."""
    tokens = fts5_tokens(sanitized)
    collapsed = collapse_tokens(tokens)
    return sanitized if collapsed is tokens else " ".join(collapsed)


def collapse_parsed(parsed: Parsed) -> Parsed:
    """The literal reading without repeated terms in a group, nor repeated groups."""
    kept: list[list[tuple[bool, Term]]] = []
    seen: set[frozenset[object]] = set()
    for group in parsed:
        unique = list(dict.fromkeys(group))
        key = frozenset(unique)
        if key not in seen:
            seen.add(key)
            kept.append(unique)
    return kept


Reading = tuple[tuple[tuple[bool, Term], ...], ...]


def _frozen(parsed: Parsed) -> Reading:
    return tuple(tuple(group) for group in parsed)


@dataclass(frozen=True)
class SearchQuery:
    """Every reading of one query (the module docstring). Build it with `read`."""

    text: str
    sanitized: str
    raw: str
    tokens: tuple[str, ...]
    words: tuple[str, ...]
    fts5: Reading
    fts5_error: str | None
    literal: Reading
    topup_terms: tuple[str, ...]
    has_cjk: bool

    @classmethod
    def read(cls, text: str | None) -> SearchQuery:
        """Read `text` (None or blank: a query that finds nothing)."""
        typed = text or ""
        blank = not typed.strip()
        sanitized = "" if blank else collapse_fts5(sanitize_fts5_query(typed))
        raw, tokens = route_tokens(sanitized)
        collapsed = collapse_tokens(tokens)
        try:
            fts5, error = _frozen(parse_fts5(sanitized)), None
        except QuerySyntaxError as exc:
            fts5, error = (), str(exc)
        try:
            literal = () if blank else _frozen(collapse_parsed(read_query(typed)))
        except QuerySyntaxError:
            literal = ()  # the original's reading decides (FTS5 rejects it too)
        return cls(
            text=typed,
            sanitized=sanitized,
            raw=raw,
            tokens=tuple(collapsed),
            words=tuple(dict.fromkeys(terms(collapsed))),
            fts5=fts5,
            fts5_error=error,
            literal=literal,
            topup_terms=tuple(dict.fromkeys(topup_terms(sanitized))),
            has_cjk=contains_cjk(sanitized),
        )

    @property
    def has_literals(self) -> bool:
        return has_literals(self.literal)

    @property
    def searchable(self) -> bool:
        """False for a query the original answers with nothing (its sanitiser empties
        it: `(`, `:`, `*`) and that holds no literal either."""
        return bool(self.sanitized) or self.has_literals

    @property
    def fts5_positive_terms(self) -> list[Term]:
        """The terms of FTS5's reading a hit holds (not the negated ones): its snippet
        marks them."""
        return [term for group in self.fts5 for negated, term in group if not negated]

    @property
    def cjk_terms(self) -> list[str]:
        return [t for t in self.words if contains_cjk(t)]

    @property
    def trigram_answers_cjk(self) -> bool:
        """Trigrams need three characters: a CJK term shorter than that is found by a
        scan only."""
        return cjk_count(self.raw) >= 3 and all(cjk_count(t) >= 3 for t in self.cjk_terms)

    @property
    def retries_on_trigrams(self) -> bool:
        """A zero-hit word query whose terms all have 3 or more characters is asked
        again by substring (Latin text glued to CJK, #54242)."""
        return bool(self.words) and all(len(t) >= 3 for t in self.words)
