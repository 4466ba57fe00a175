"""Snippets built in Python, for the hits no FTS5 `snippet()` describes (PostgreSQL's
routes and the literal tier on both backends): a window of about 40 words around the
first match, every match in it between `>>>` and `<<<`, `...` where the text was cut.

As FTS5 marks them: a bareword is one run per word, a phrase (and a hyphenated or dotted
term, which the sanitiser quotes) one run from its first word to its last with the
text's own punctuation between, a prefix term the whole word it starts; a literal is
marked exactly where it stands, case folded by `query.fold`.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from functools import lru_cache

from .query import Term, fold, words_of

_BEFORE = 100
_AFTER = 140
_PLAIN = 240


@lru_cache(maxsize=256)
def _term_pattern(text: str, prefix: bool) -> re.Pattern[str] | None:
    words = words_of(text)
    if not words:
        return None
    body = r"[\W_]+".join(re.escape(w) for w in words)
    tail = r"[^\W_]*" if prefix else r"(?![^\W_])"
    return re.compile(rf"(?<![^\W_]){body}{tail}", re.IGNORECASE)


def term_spans(body: str, terms: Iterable[Term]) -> list[tuple[int, int]]:
    spans: list[tuple[int, int]] = []
    for term in terms:
        pattern = _term_pattern(term.text, term.prefix)
        if pattern is not None:
            spans.extend(m.span() for m in pattern.finditer(body))
    return spans


def literal_spans(body: str, literals: Iterable[str]) -> list[tuple[int, int]]:
    folded = fold(body)
    spans: list[tuple[int, int]] = []
    for literal in literals:
        needle = fold(literal)
        at = folded.find(needle)
        while needle and at != -1:
            spans.append((at, at + len(needle)))
            at = folded.find(needle, at + len(needle))
    return spans


def mark(body: str, spans: list[tuple[int, int]]) -> str:
    """The window around the first span (earliest; the longest of those starting there),
    spans inside it marked, overlapping ones dropped."""
    if not spans:
        return body[:_PLAIN]
    ordered = sorted(spans, key=lambda span: (span[0], -span[1]))
    first_start, first_end = ordered[0]
    start = max(0, first_start - _BEFORE)
    end = min(len(body), first_end + _AFTER)
    if start > 0:
        start = body.find(" ", start, first_start) + 1 or start
    out = []
    cursor = start
    for span_start, span_end in ordered:
        if span_start < cursor or span_end > end:
            continue
        out.append(body[cursor:span_start])
        out.append(f">>>{body[span_start:span_end]}<<<")
        cursor = span_end
    out.append(body[cursor:end])
    return ("..." if start > 0 else "") + "".join(out) + ("..." if end < len(body) else "")


def terms_snippet(body: str, terms: Iterable[Term], literals: Iterable[str] = ()) -> str:
    return mark(body, term_spans(body, terms) + literal_spans(body, literals))


def substring_snippet(body: str, needles: Iterable[str]) -> str:
    """Trigram hits: every needle wherever it stands, ignoring case as the index does."""
    alternatives = "|".join(re.escape(n) for n in sorted(set(needles), key=len, reverse=True))
    if not alternatives:
        return body[:_PLAIN]
    pattern = re.compile(alternatives, re.IGNORECASE)
    return mark(body, [m.span() for m in pattern.finditer(body)])
