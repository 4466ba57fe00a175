"""One search query, read once: every reading the planner and the backends need, built
when the search starts and never re-derived from the text afterwards.

- `sanitized`: the original's reading (docs/reference/behaviour.md 6.2), repeats merged
  (limits.py); what SQLite's FTS5 is asked with.
- `fts5`: that text read by FTS5's rules (`reading.parse_fts5`), which PostgreSQL
  rebuilds as a tsquery; `fts5_error` says why FTS5 would reject it.
- `tokens` / `raw` / `words`: what the trigram, CJK and LIKE routes read.
- `literal`: the reading that finds what people type (`reading.read_query`), repeats
  merged; empty when its operators are misplaced.
- `topup_terms`: the terms of the pending-range scan while a backfill runs.
"""

from __future__ import annotations

from dataclasses import dataclass

from . import limits
from . import query as q
from .reading import Parsed, QuerySyntaxError, Term, has_literals, parse_fts5, read_query

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
        sanitized = "" if blank else limits.collapse_fts5(q.sanitize_fts5_query(typed))
        raw, tokens = q.route_tokens(sanitized)
        collapsed = limits.collapse_tokens(tokens)
        try:
            fts5, error = _frozen(parse_fts5(sanitized)), None
        except QuerySyntaxError as exc:
            fts5, error = (), str(exc)
        try:
            literal = () if blank else _frozen(limits.collapse_parsed(read_query(typed)))
        except QuerySyntaxError:
            literal = ()  # the original's reading decides (FTS5 rejects it too)
        return cls(
            text=typed,
            sanitized=sanitized,
            raw=raw,
            tokens=tuple(collapsed),
            words=tuple(dict.fromkeys(q.terms(collapsed))),
            fts5=fts5,
            fts5_error=error,
            literal=literal,
            topup_terms=tuple(dict.fromkeys(q.topup_terms(sanitized))),
            has_cjk=q.contains_cjk(sanitized),
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
        return [t for t in self.words if q.contains_cjk(t)]

    @property
    def trigram_answers_cjk(self) -> bool:
        """Trigrams need three characters: a CJK term shorter than that is found by a
        scan only."""
        return q.cjk_count(self.raw) >= 3 and all(q.cjk_count(t) >= 3 for t in self.cjk_terms)

    @property
    def retries_on_trigrams(self) -> bool:
        """A zero-hit word query whose terms all have 3 or more characters is asked
        again by substring (Latin text glued to CJK, #54242)."""
        return bool(self.words) and all(len(t) >= 3 for t in self.words)
