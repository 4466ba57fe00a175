"""What bounds the work of one search, whatever its query (docs/search.md, "How search reads a
query"): a term repeated in a query is read once, a query may hold at most MAX_TERMS
terms, and a search runs for at most HERMES_SEARCH_TIMEOUT_MS milliseconds.

Repeats are merged (query.py's `collapse_*`) only where that leaves the matching rows as
they are, reading by reading:

- FTS5's reading (the sanitised query, and the tokens the trigram route and PostgreSQL's
  substring route read): within an OR-alternative without NOT every term is AND-ed (the
  implicit AND and the explicit one alike), so a repeated term goes, and an alternative
  holding the same terms as an earlier one goes. An alternative with NOT is kept as
  typed: FTS5 binds NOT tighter than `AND` but looser than the implicit AND (`a NOT b c`
  is `a NOT (b c)`), so its terms are not interchangeable. A phrase is one term: inside
  it a repeated word is part of what it matches. Misplaced operators leave the query as
  typed, for FTS5 to reject.
- The literal reading (`query.read_query`): each group is set algebra (its positive
  terms intersected, its negated ones taken away), so repeats in a group and repeated
  groups go.

In the rank (bm25) a term then counts once, as if typed once: a repeat would cost one
more pass over the term's index entries, and a query holds up to 2,048 characters.
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterable, Sequence
from typing import Any

from ..errors import QueryTooComplex, SearchTimedOut
from .query import Parsed, Term, terms, words_of

#: The most terms one query may hold once repeats are merged (each word of a phrase and
#: each literal counting as one). Past it a search refuses the query (QueryTooComplex):
#: every term is one more pass over an index, and a LIKE-scanned term (a CJK term of one
#: or two characters) one more test of every message.
MAX_TERMS = 32
TIMEOUT_ENV = "HERMES_SEARCH_TIMEOUT_MS"
#: The time one search may take, in milliseconds, unless HERMES_SEARCH_TIMEOUT_MS says
#: otherwise (0: no limit).
DEFAULT_TIMEOUT_MS = 10_000.0

#: Bounded work per query: a ranked route (bm25 on SQLite, ts_rank_cd on PostgreSQL)
#: ranks the newest this many matches the index hands over in id order (newest ids
#: first; oldest first for sort="oldest"; the page, when it is longer), not every
#: match. Wherever a query has at most this many matches the page is the one ranking
#: them all gives; past it, an older match ranks only once newer ones no longer fill the
#: window (docs/search-at-scale.md).
RANK_WINDOW = 1_024
#: A scan (the LIKE route, the pending-range top-up) and PostgreSQL's substring route,
#: whose order is a time order ids already follow as rows are appended: the newest this
#: many matches in id order (at least a page), then ordered by timestamp.
TIME_WINDOW = 64

#: The zero-hit retry (a word query that matched no word, asked again by substring:
#: planner.py) checks about this many candidate rows at most. The trigram indexes hand
#: over every row holding the query's trigrams, and a misspelling that extends a
#: frequent word (`postgress`) shares all its trigrams but one with it: millions of
#: candidates in a large table, none holding the query. Where the newest rows say the
#: table holds more candidates than this, the retry reads only as many of the newest
#: rows as the budget allows and says so in the result's warnings (SearchHits).
RETRY_CHECKS = 4_096
#: The newest ids the retry samples to estimate its candidates in the whole table.
RETRY_SAMPLE = 2_048
# The literal tier (literal.py) keeps to the same budget where its windows fall short: a
# literal found nowhere whose indexes hand over many candidates (`~/.config/zephyr.yaml`
# beside thousands of rows holding `config` and `zephyr`) is estimated from the same
# sample, and past RETRY_CHECKS only the newest ids that hold about that many candidates
# are read, with a warning when they do not hold a whole page (a table spanning at most
# literal.SMALL_TABLE_CHECKS budgets of ids is read whole, without the estimate).


class SearchHits(list[dict[str, Any]]):
    """The hits of a search (a list, as the original returns), with `warnings`: why the
    answer may leave out matches that exist (empty when it cannot)."""

    def __init__(self, hits: Iterable[dict[str, Any]] = (), warnings: Iterable[str] = ()) -> None:
        super().__init__(hits)
        self.warnings: tuple[str, ...] = tuple(warnings)


def retry_warning(query: str, newest: int, candidates: float) -> str:
    """The warning of a zero-hit retry that read only the `newest` ids of the table."""
    return (
        f"no word matched {query!r}, and its substring search read only the newest "
        f"{newest:,} messages: the whole table holds about {candidates:,.0f} candidate "
        f"messages, more than one search checks ({RETRY_CHECKS:,}), so older messages "
        "holding it as a substring are not shown; search for whole words or a longer "
        "substring"
    )


def literal_warning(literals: Sequence[str], newest: int, candidates: float) -> str:
    """The warning of a literal search that read only the `newest` ids of the table."""
    shown = ", ".join(repr(literal) for literal in literals)
    return (
        f"the literal search for {shown} read only the newest {newest:,} messages: its "
        f"indexes hand over about {candidates:,.0f} candidate messages in the whole table, "
        f"more than one search checks ({RETRY_CHECKS:,}), so older messages holding it "
        "are not shown; add a rarer word or literal, or filter by source or role"
    )


def rank_window(limit: int, offset: int) -> int:
    """The matches a ranked route ranks: RANK_WINDOW, or the page when it is longer (a
    caller asking for 10,000 hits gets every one of them, newest first)."""
    return max(RANK_WINDOW, limit + offset)


def time_window(limit: int, offset: int) -> int:
    """The matches a time-ordered route reads: TIME_WINDOW, or the page when it is
    longer."""
    return max(TIME_WINDOW, limit + offset)


def timeout_ms() -> float | None:
    """The time budget of a search in milliseconds, None for no limit."""
    raw = os.environ.get(TIMEOUT_ENV)
    try:
        value = DEFAULT_TIMEOUT_MS if raw is None or not raw.strip() else float(raw)
    except ValueError:
        value = DEFAULT_TIMEOUT_MS
    return value if value > 0 and math.isfinite(value) else None


def _weight(term: Term) -> int:
    # a phrase is matched word by word, a repeat inside it included
    return max(1, len(words_of(term.text))) if term.phrase else 1


def _weighed(reading: Parsed) -> int:
    return sum(_weight(term) for group in reading for _, term in group)


def check_terms(tokens: Sequence[str], fts5: Parsed, parsed: Parsed) -> None:
    """QueryTooComplex when the query holds more than MAX_TERMS terms once its repeats
    are merged, read any of the ways a search reads it: the route tokens (each word of a
    phrase one token), FTS5's reading of the sanitised query (empty where FTS5 rejects
    it: that costs nothing) and the literal reading (each word of a phrase one term; a
    literal one term)."""
    count = max(len(terms(tokens)), _weighed(fts5), _weighed(parsed))
    if count > MAX_TERMS:
        raise QueryTooComplex(
            f"the search query holds {count} terms (words, each word of a phrase, and "
            f"literals; a repeated one counted once); a search reads at most {MAX_TERMS}: "
            "leave some out",
            MAX_TERMS,
        )


def timed_out(budget_ms: float) -> SearchTimedOut:
    return SearchTimedOut(
        f"the search ran past its time limit of {budget_ms:.0f} ms ({TIMEOUT_ENV}) and "
        "was stopped: search for fewer or rarer terms, or filter by source or role",
        budget_ms,
    )
