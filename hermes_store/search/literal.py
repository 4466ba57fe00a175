"""The literal tier: one statement answering `query.read_query`'s reading of a query
on either backend, from the id sets the backend's indexes give.

A literal L matches a row when the row's content, tool name or tool calls contain L,
ASCII letters folded (`query.fold`), and an index can vouch for the place:

- L of 3 or more characters: anywhere in a non-tool row (the trigram index, which
  covers non-tool rows only, as the v23 layout does on both backends);
- L holding letters or digits: in any row where its words stand as a phrase (the word
  index, which covers tool rows too), so in tool output a literal is found where it
  starts and ends on word boundaries;
- L shorter than 3 characters and made of punctuation only (`%`, `->`): a scan of every
  row, since no index holds it (3 or more punctuation characters: non-tool rows, by the
  trigram index).

The backend gives each literal's exact id set (`SearchBackend.literal_ids`) and each
group of words its id set, each a CTE; the query's boolean structure is set algebra
over them (INTERSECT, EXCEPT, UNION), and only the resulting ids are looked up in
`messages` (by rowid / primary key) to be filtered, ordered and cut to a page. In a
query of one group (no OR), a positive literal gives its index candidates to the set
and its check to the page (`SearchBackend.literal_candidates`): SQLite then checks
candidates newest first only until the page is full; PostgreSQL gives the page the
whole condition, which it answers with one bitmap scan of both indexes, each row read
and checked once, before the page is cut (`SearchBackend.literal_page`).

Order: every literal hit is as relevant as the next, so the most recently stored come
first (message id, newest first); `sort="newest"` orders the newest limits.time_window
hits (by id, from the same windows) by timestamp, `"oldest"` the oldest
limits.time_window hits (by id, from windows of the oldest ids) likewise, as the
other time-ordered routes keep theirs. A literal found in thousands of rows would cost
thousands of row reads to order; in id order the page is first looked for among the
newest ids only (the oldest for sort="oldest"; the backend's `literal_window`: 8,192
ids on SQLite, whose indexes seek to the bound, 1,024 on PostgreSQL, which reads the
window row by row), and a window that holds a whole page holds exactly the page the
whole table would give, since every hit outside it is further from that end of the
table. A window short of a page is followed by wider ones where the backend has them
(`SearchBackend.wider_window`; PostgreSQL only), then by the whole table, which costs
what the literal's rows (or its index candidates) cost. On PostgreSQL a second window,
read row by row, is sized by the first's density where the first showed the literal
often enough (pg_trgm ignores punctuation and so can hand over far more candidates
than a literal has rows); a rarer literal is then looked for in windows of 65,536 and
524,288 ids read through the indexes, their candidates kept in the window
(`SearchBackend.literal_window_by_index`: the indexes asked for the ids in the
window, each literal's id set and the page's rows kept there), whose reading and
checking grow with the window where the whole table's grow with the table. A window is the ids
above :floor (the newest `window` ids) or up to :ceiling (the oldest, for
sort="oldest"): `backend.id_window`.

Those windows and the whole table cost what the literals' index candidates cost, and a
literal found nowhere reads them all: pg_trgm ignores punctuation and both trigram
indexes hand over every row holding the literal's trigrams, so `~/.config/zephyr.yaml`
beside thousands of rows holding `config`, `zephyr` and `yaml` checks every one of them.
So before the whole table the candidates are estimated as the zero-hit retry's are
(limits.RETRY_CHECKS, limits.RETRY_SAMPLE): each literal's among the newest
RETRY_SAMPLE ids (`SearchBackend.literal_estimate`), summed, scaled to the table.
Within the budget the whole table follows as above; past it only the ids at the walk's
end that hold about RETRY_CHECKS candidates are read (nothing more where the windows
already read that many ids; through FTS5's rowid bounds on SQLite; on PostgreSQL row by
row up to the widest row-by-row window, through the indexes above it, each literal's id
set kept in the window), and a page they do not fill carries a warning
(`limits.literal_warning`). A page they do fill is the whole table's, as for any
window. The windows before the estimate cost what they hold, so a literal the windows
answer pays nothing for it.

pg_trgm's index hands over a literal's candidates from the whole table whatever the
window asks, so each window or span read through the indexes costs every literal's
whole posting lists. A reading whose literals times the table's ids pass the backend's
`literal_index_rows` (ten OR'ed literals in 10M ids) reads none through the indexes:
after the windows read row by row comes the estimate, and past the budget only the
newest rows are read one by one, limits.RETRY_CHECKS rows shared among its literals as
the zero-hit retry shares them among its patterns (none more where the windows read
that many), with the warning. Within the budget the whole table is read as before.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import lru_cache
from typing import Any

from sqlalchemy import CTE, ColumnElement, Select, except_, intersect, select, union

from . import limits
from .backend import (
    MESSAGES,
    SESSIONS,
    Edge,
    Filters,
    FilterShape,
    Hit,
    IdSelect,
    SearchBackend,
    filter_conditions,
    id_window,
    m,
    s,
    terms_snippet,
    time_direction,
)
from .query import TRIGRAM_CHARS, Parsed, Term, fold, words_of

#: A table spanning at most this many budgets (limits.RETRY_CHECKS) of ids is read whole
#: without estimating its candidates: the estimate is a statement of its own, and in
#: such a table the whole table's candidates cost about what the estimate and the
#: windows before it cost.
SMALL_TABLE_CHECKS = 32


def _literal_args(backend: SearchBackend, filters: Filters, literal: str) -> tuple[bool, bool]:
    """(trigram, words): which indexes vouch for `literal` (the module docstring)."""
    trigram = len(literal) >= TRIGRAM_CHARS and backend.has_trigram_index()
    # tool rows are in the word index only; the trigram set holds every other row
    words = bool(words_of(literal)) and not (trigram and filters.excludes_tool_rows)
    return trigram, words


class _Same:
    """A piece of a statement (a backend's id set or condition) in the key of
    `_assemble`, compared by identity: the backends build each piece once per shape, so
    two searches of one shape give the same pieces, and ClauseElement's `==` builds SQL
    rather than comparing. The key holds the piece, so its id is never reused while the
    key is cached."""

    __slots__ = ("piece",)

    def __init__(self, piece: Any) -> None:
        self.piece = piece

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _Same) and other.piece is self.piece

    def __hash__(self) -> int:
        return id(self.piece)


#: An id set of a group, in the order its CTE is named: (negated, the backend's SELECT,
#: whether it is a literal's set, kept in the page's window where the page has one)
_IdSet = tuple[bool, _Same, bool]
#: An AND-group: its id sets, and its conditions on the row `m` (pieces)
_Group = tuple[tuple[_IdSet, ...], tuple[_Same, ...]]


class _Statement:
    """The page's statement: the backends' pieces, gathered with their parameters by
    walking the reading (`recipe`), then assembled once per recipe (`_assemble`)."""

    def __init__(
        self,
        backend: SearchBackend,
        filters: Filters,
        *,
        edge: Edge | None,
        page_edge: Edge | None = None,
    ) -> None:
        self.backend = backend
        self.filters = filters
        self.edge = edge  # every id set in the window at that end of the table
        # the id sets from the whole indexes, the page's rows in the window at that end
        self.page_edge = page_edge
        self.params: dict[str, Any] = {}

    def _literal_args(self, literal: str) -> tuple[bool, bool]:
        return _literal_args(self.backend, self.filters, literal)

    def _literal(self, literal: str) -> IdSelect:
        """The id set of the rows holding `literal`."""
        trigram, words = self._literal_args(literal)
        return self.backend.literal_ids(
            literal, self.params, trigram=trigram, words=words, edge=self.edge
        )

    def _word_ids(self, terms: list[Term]) -> IdSelect:
        return self.backend.word_ids(terms, self.params, edge=self.edge)

    def group(self, group: Sequence[tuple[bool, Term]], *, lazy: bool) -> _Group:
        """An AND-group's id sets and conditions. `lazy`: a positive literal gives its
        candidates to the set and its check to the conditions, which the page applies
        row by row."""
        words = [term for negated, term in group if not negated and not term.literal]
        sets: list[_IdSet] = [(False, _Same(self._word_ids(words)), False)] if words else []
        conditions: list[_Same] = []
        for negated, term in group:
            if term.literal and lazy and not negated:
                trigram, in_words = self._literal_args(term.text)
                candidates, condition = self.backend.literal_candidates(
                    term.text, self.params, trigram=trigram, words=in_words, edge=self.edge
                )
                sets += [(False, _Same(candidates), False)] if candidates is not None else []
                conditions += [_Same(condition)] if condition is not None else []
            elif term.literal:
                sets.append((negated, _Same(self._literal(term.text)), True))
            elif negated:
                sets.append((True, _Same(self._word_ids([term])), False))
        return tuple(sets), tuple(conditions)

    def sql(self, parsed: Parsed, *, oldest: bool) -> Select[Any]:
        lazy = len(parsed) == 1
        groups = tuple(self.group(group, lazy=lazy) for group in parsed)
        return _assemble(
            type(self.backend).literal_page,
            groups,
            self.page_edge,
            self.filters.shape,
            self.filters.reads_sessions,
            oldest,
        )


@lru_cache(maxsize=256)
def _assemble(
    literal_page: Callable[..., Select[Any]],
    groups: tuple[_Group, ...],
    page_edge: Edge | None,
    filters: FilterShape,
    reads_sessions: bool,
    oldest: bool,
) -> Select[Any]:
    """The page's statement from its groups (one: lazy, see `_Statement.group`).

    Every id set is a CTE used once (ids0, ids1... in the order the reading gives
    them): an IN over the union of the groups, so that the page is cut from the
    matching rows only (each a rowid / primary-key lookup). The page is ids and sort
    keys only: a frequent literal matches thousands of rows, and sorting their text and
    joining their sessions cost more than finding them. A query of one group (no OR)
    leaves its literals' checks to the page, which SQLite then applies walking the
    candidates in the page's id order, only until the page is full."""
    ctes: list[CTE] = []

    def cte(ids: IdSelect) -> CTE:
        ctes.append(ids.cte(f"ids{len(ctes)}"))
        return ctes[-1]

    def group(sets: tuple[_IdSet, ...]) -> tuple[list[CTE], list[CTE]]:
        positive: list[CTE] = []
        negative: list[CTE] = []
        for negated, piece, windowed in sets:
            ids: IdSelect = piece.piece
            if windowed and page_edge:
                # the page keeps the window's ids only: so does the set, so that only the
                # window's candidates are checked (the condition reaches the indexes' scan)
                found = ids.subquery("w")
                ids = select(found.c.id).where(id_window(found.c.id, page_edge))
            (negative if negated else positive).append(cte(ids))
        return positive, negative

    ids: IdSelect | None
    where: list[ColumnElement[bool]]
    if len(groups) == 1:
        sets, conditions = groups[0]
        positive, negative = group(sets)
        where = [condition.piece for condition in conditions]
        if positive:
            ids = _set(positive, negative)
        else:
            ids = None
            where += [m.c.id.not_in(select(n.c.id)) for n in negative]
    else:
        parts = []
        for n, (sets, _) in enumerate(groups):
            positive, negative = group(sets)
            if not positive:  # read_query gives every group a positive term
                raise ValueError("an OR group of negated terms only")
            parts.append(select(_set(positive, negative).subquery(f"g{n}").c.id))
        ids, where = union(*parts), []
    if ids is not None:
        where.insert(0, m.c.id.in_(select(cte(ids).c.id)))
    if page_edge:
        where.append(id_window(m.c.id, page_edge))
    rows = m.join(s, s.c.id == m.c.session_id) if reads_sessions else m
    where += filter_conditions(filters)
    page = literal_page(rows, where, oldest=oldest)
    # the hits' rows, under names of their own: the page's `m` and `s` are its own
    hit, session = MESSAGES.alias("m"), SESSIONS.alias("s")
    return (
        select(
            hit.c.id,
            hit.c.session_id,
            hit.c.role,
            hit.c.content.label("body"),
            hit.c.tool_name,
            hit.c.tool_calls.label("calls"),
            hit.c.timestamp,
            session.c.source,
            session.c.model,
            session.c.started_at.label("session_started"),
        )
        .select_from(hit.join(session, session.c.id == hit.c.session_id))
        .where(hit.c.id.in_(page))
        .order_by(hit.c.id.asc() if oldest else hit.c.id.desc())
    )


def _set(positive: list[CTE], negative: list[CTE]) -> IdSelect:
    """The positive id sets intersected, minus the negated ones. SQLite takes no
    parenthesised compound SELECT inside another, so an intersection with something to
    take away is read from a subquery (`p`)."""
    kept: IdSelect = select(positive[0].c.id)
    if len(positive) > 1:
        kept = intersect(*(select(ids.c.id) for ids in positive))
        if negative:
            both = kept.subquery("p")
            kept = select(both.c.id)
    if not negative:
        return kept
    return except_(kept, *(select(ids.c.id) for ids in negative))


def literal_hits(
    backend: SearchBackend, parsed: Parsed, filters: Filters, sort: str | None, limit: int
) -> list[Hit]:
    """The first `limit` rows matching the literal reading: the most recently stored
    first; for a time sort the newest (or, for sort="oldest", the oldest)
    limits.time_window of them, found through the id windows that bound the work as
    for the default order, ordered by timestamp, as the other time-ordered routes keep
    theirs."""
    direction = time_direction(sort)
    if direction is None:
        rows = _windowed_page(backend, parsed, filters, limit, oldest=False)
    else:
        oldest = direction == "ASC"
        window = limits.time_window(limit, 0)
        found = _windowed_page(backend, parsed, filters, window, oldest=oldest)
        by_time = sorted(found, key=lambda row: (row["timestamp"], row["id"]), reverse=not oldest)
        rows = by_time[:limit]
    positive = [term for group in parsed for negated, term in group if not negated]
    literals = [t.text for t in positive if t.literal]
    words = [t for t in positive if not t.literal]
    folded = [fold(literal) for literal in literals]
    return [_hit(row, literals, folded, words) for row in rows]


def _windowed_page(
    backend: SearchBackend, parsed: Parsed, filters: Filters, limit: int, *, oldest: bool
) -> list[Hit]:
    """The first `limit` hits in id order (newest first, or oldest first), from the
    windows of ids at that end of the table, then from the whole table. Before the whole
    table, the literals' candidates are estimated (`_budget_span`): past
    limits.RETRY_CHECKS only the ids at that end that hold about that many are read (no
    more where the windows already read those), and a page they do not fill says so in
    `warnings`. Where the literals are too many for the table to read windows through
    the indexes (`SearchBackend.index_windows_pay`), none is, and past the budget the
    span is read row by row (the module docstring)."""
    ids = backend.id_range()
    if ids is None:
        return []
    lowest, highest = ids
    edge: Edge = "oldest" if oldest else "newest"

    def bound(span: int) -> tuple[Edge, int]:
        return (edge, lowest - 1 + span if oldest else highest - span)

    literals = _literals(parsed)
    by_index = backend.index_windows_pay(len(literals), highest - lowest + 1)
    window: int | None = backend.literal_window
    read, rows = 0, []
    while window is not None and window <= highest - lowest:
        if not by_index and backend.literal_window_by_index(window):
            break
        rows = _page(backend, parsed, filters, oldest, limit, bound(window), window)
        if len(rows) >= limit:
            return rows
        read, window = window, backend.wider_window(window, len(rows), limit)
    over = _budget_span(backend, parsed, filters, lowest, highest)
    if over is None:
        return _page(backend, parsed, filters, oldest, limit, None)
    span, estimate = over
    if not by_index:
        # read row by row, each row checked for every literal: the budget's checks
        # shared among the literals, as the zero-hit retry shares them
        span = min(span, max(1, limits.RETRY_CHECKS // len(literals)))
    if span > read:
        rows = _page(backend, parsed, filters, oldest, limit, bound(span), span)
    if len(rows) < limit:  # older hits may exist: the span is all that was read
        backend.warnings.append(limits.literal_warning(literals, max(span, read), estimate))
    return rows


def _literals(parsed: Parsed) -> list[str]:
    """Every literal of the reading, positive or negated, once (each is checked)."""
    return list(dict.fromkeys(term.text for group in parsed for _, term in group if term.literal))


def _budget_span(
    backend: SearchBackend, parsed: Parsed, filters: Filters, lowest: int, highest: int
) -> tuple[int, float] | None:
    """None when the table spans SMALL_TABLE_CHECKS * limits.RETRY_CHECKS ids or fewer,
    or when the newest limits.RETRY_SAMPLE ids put the candidates the literals' indexes
    hand over in the whole table (each literal's summed: each is checked) at
    limits.RETRY_CHECKS or fewer. Otherwise (the ids at the walk's end that hold about
    that many candidates, the estimate): reading them costs what they hold whatever
    the table holds, as the zero-hit retry's span (limits.py)."""
    literals = _literals(parsed)
    table = highest - lowest + 1
    if not literals or table <= SMALL_TABLE_CHECKS * limits.RETRY_CHECKS:
        return None  # the whole table is known to cost little: no estimate
    sample = min(limits.RETRY_SAMPLE, table)
    statement, params = estimate_statement(backend, parsed, filters, highest - sample)
    counted = backend.values(statement, params)
    estimate = backend.retry_estimate(int(counted[0][0] or 0), sample, table)
    if estimate <= limits.RETRY_CHECKS:
        return None
    return max(1, int(limits.RETRY_CHECKS * table / estimate)), estimate


def _page(
    backend: SearchBackend,
    parsed: Parsed,
    filters: Filters,
    oldest: bool,
    limit: int,
    bound: tuple[Edge, int] | None,
    window: int = 0,
) -> list[Hit]:
    """The first `limit` hits in id order (newest first, or `oldest` first), in the
    window of `window` ids at an end of the table (`bound`: the end, and the :floor or
    :ceiling id that bounds the window there), or in the whole table."""
    edge = None if bound is None else bound[0]
    statement, params = page_statement(backend, parsed, filters, edge, window, oldest=oldest)
    params["limit"] = limit
    if bound is not None:
        params["floor" if bound[0] == "newest" else "ceiling"] = bound[1]
    return backend.literal_rows(statement, filters, params)


def page_statement(
    backend: SearchBackend,
    parsed: Parsed,
    filters: Filters,
    edge: Edge | None,
    window: int = 0,
    *,
    oldest: bool,
) -> tuple[Select[Any], dict[str, Any]]:
    """The page's statement and its parameters but :limit, :floor and :ceiling: in the
    window of `window` ids at `edge` of the table, or in the whole table (no `edge`)
    (tests/search/route_sql/ pins its SQL)."""
    if edge is None:
        statement = _Statement(backend, filters, edge=None)
    elif backend.literal_window_by_index(window):
        statement = _Statement(backend, filters, edge=None, page_edge=edge)
    else:
        statement = _Statement(backend, filters, edge=edge)
    return statement.sql(parsed, oldest=oldest), statement.params


def estimate_statement(
    backend: SearchBackend, parsed: Parsed, filters: Filters, floor: int
) -> tuple[Select[Any], dict[str, Any]]:
    """`_budget_span`'s statement and its parameters: the literals' candidates above
    the id `floor`."""
    args = [(literal, *_literal_args(backend, filters, literal)) for literal in _literals(parsed)]
    params: dict[str, Any] = {"floor": floor}
    return backend.literal_estimate(args, params), params


def _hit(row: Hit, literals: list[str], folded: list[str], words: list[Term]) -> Hit:
    body = str(row["body"] or "")
    for candidate in (row["body"], row["calls"], row["tool_name"]):
        text = fold(str(candidate or ""))
        if any(literal in text for literal in folded):
            body = str(candidate)
            break
    hit = {k: v for k, v in row.items() if k not in ("body", "calls")}
    hit["snippet"] = terms_snippet(body, words, literals)
    return hit
