"""Search on PostgreSQL: the generated tsvector with its GIN index for words, pg_trgm for
substrings and CJK, and an ILIKE scan, in the roles FTS5, the trigram index and LIKE
play on SQLite (planner.py orders them).

The user's query goes through the same sanitiser as on SQLite, and the FTS5 query it
yields is then read by FTS5's own rules (`query.parse_fts5`) and rebuilt as a tsquery
from bound parameters (`_tsquery`, built from the reading's shape: `tsquery_params`
binds its text); what FTS5 would reject as a syntax error answers nothing here
too. The text normalisation (ASCII punctuation separates words) and the trigram
expression are those of migrations/_pg_search.py, so the indexes serve these queries.

Each route's statement is built whole by one function (`word_statement`,
`word_window_statement`, `word_page_statement`, `word_estimate_statement`,
`substring_statement`, `substring_window_statement`, `page_statement`,
`probe_statement`, `scan_statement`, `scan_span_statement`), in Core, once per shape;
tests/search/route_sql/postgresql/ holds the SQL each renders.
"""

from __future__ import annotations

import math
import re
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from functools import lru_cache, reduce
from operator import add
from typing import Any, TypeVar

from sqlalchemy import (
    ARRAY,
    BindParameter,
    ClauseElement,
    ColumnElement,
    Executable,
    FromClause,
    Select,
    Text,
    UnaryExpression,
    and_,
    bindparam,
    case,
    cast,
    column,
    func,
    literal_column,
    not_,
    or_,
    select,
    table,
    text,
    true,
    tuple_,
    union_all,
)
from sqlalchemy.dialects import postgresql
from sqlalchemy.dialects.postgresql import aggregate_order_by
from sqlalchemy.exc import DBAPIError
from sqlalchemy.ext.compiler import compiles
from sqlalchemy.sql.operators import custom_op
from sqlalchemy.types import NullType

from ..contract import PG_SEARCH_VECTOR_COLUMN as VECTOR
from ..contract import PG_SEARCH_VECTOR_INDEX, PG_WORD_PUNCTUATION
from . import limits
from . import query as q
from .backend import (
    CONTEXT_CHARS,
    MESSAGES,
    ONE,
    TRANSACTION_ENDS_WITH_SEARCH,
    ZERO,
    Edge,
    Filters,
    FilterShape,
    Hit,
    IdSelect,
    IndexMethod,
    LikeShape,
    Params,
    RouteStatement,
    SearchBackend,
    Snippet,
    decode_preview,
    filter_conditions,
    has_lists,
    id_window,
    like_condition,
    m,
    oldest_first,
    reads_sessions,
    s,
    substring_snippet,
    terms_snippet,
    time_direction,
)
from .query import TRIGRAM_CHARS, Parsed, QuerySyntaxError, SearchQuery, Term

#: The punctuation the generated search vector splits words at (the shared contract).
PUNCTUATION = PG_WORD_PUNCTUATION
_PUNCT_RE = re.compile(r"[!-/:-@\[-`{-~]+")
_T = TypeVar("_T")


def caseless(term: str) -> bool:
    """True when no character of `term` has a case mapping (CJK, digits, punctuation):
    then `x ILIKE p` and `x LIKE p` match the same rows (lower-casing the text cannot
    produce a character that has no case, nor change one), and LIKE compares bytes where
    ILIKE lower-cases every row first, which a scan pays for on every row."""
    return all(c.lower() == c == c.upper() for c in term)


def _like_op(term: str) -> str:
    return "LIKE" if caseless(term) else "ILIKE"


def _words(text: str) -> list[str]:
    return [w for w in _PUNCT_RE.sub(" ", text).split() if w]


def _quoted(words: list[str]) -> list[str]:
    """Each word as a tsquery lexeme literal."""
    return ["'" + w.replace("\\", "\\\\").replace("'", "''") + "'" for w in words]


#: One term of FTS5's reading as the tsquery takes it: (negated, prefix, phrase: more
#: than one word). The SQL of a reading depends on these only; its text is bound.
TermShape = tuple[bool, bool, bool]
ReadingShape = tuple[tuple[TermShape, ...], ...]

_SIMPLE: ColumnElement[Any] = literal_column("'simple'")
_PUNCTUATION: ColumnElement[Any] = literal_column("'" + PUNCTUATION.replace("'", "''") + "'")
_SPACE: ColumnElement[Any] = literal_column("' '")
_GLOBALLY: ColumnElement[Any] = literal_column("'g'")
#: A tsquery that matches no row: a lexeme holding a space, which the parser that
#: builds the search vector never makes.
_NO_ROW: ColumnElement[Any] = literal_column("$$' '$$::tsquery")
#: Above every message id: RUM orders by the distance to it, a float8, exact below 2**53.
_NEWEST_ID: ColumnElement[Any] = literal_column(str(2**53))


def _is_phrase(term: Term) -> bool:
    return len(_words(term.text)) > 1


def reading_shape(reading: Parsed) -> ReadingShape:
    return tuple(
        tuple((negated, term.prefix, _is_phrase(term)) for negated, term in group)
        for group in reading
    )


def tsquery_params(reading: Parsed, prefix: str = "w") -> Params:
    """The bound values of `_tsquery` for `reading`: `<prefix><k>` for the k-th term
    (its words as a phrase, a prefix on the last one for a prefix term), and
    `<prefix>l<k>` for a positive phrase's words in any order (`_matches`)."""
    params: Params = {}
    terms = [(negated, term) for group in reading for negated, term in group]
    for k, (negated, term) in enumerate(terms):
        words = _quoted(_words(term.text))
        if term.prefix:
            params[f"{prefix}{k}"] = " <-> ".join(words) + ":*" if words else ""
        else:
            params[f"{prefix}{k}"] = term.text
        if not negated and _is_phrase(term):
            loose = " & ".join(words) + ":*" if term.prefix else term.text
            params[f"{prefix}l{k}"] = loose
    return params


def _term_query(name: str, prefix: bool, *, loose: bool = False) -> ColumnElement[Any]:
    """One term's tsquery from the bound :name: a prefix term's lexemes as they are
    (tsquery_params quotes them), any other term's text cut into words at the
    punctuation the search vector splits at, as a phrase (as the AND of its words with
    `loose`)."""
    if prefix:
        return func.to_tsquery(_SIMPLE, bindparam(name))
    words = func.regexp_replace(bindparam(name), _PUNCTUATION, _SPACE, _GLOBALLY)
    return (func.plainto_tsquery if loose else func.phraseto_tsquery)(_SIMPLE, words)


def _positive(query: ColumnElement[Any]) -> ColumnElement[Any]:
    """A positive term's tsquery, or one matching no row when the term's text holds no
    word: FTS5 matches nothing for an empty phrase, where PostgreSQL drops an empty
    operand of && (`"..." NOT b` would find every row without b)."""
    return case((func.numnode(query) == ZERO, _NO_ROW), else_=query)


def _tsquery(shape: ReadingShape, prefix: str = "w", *, loose: bool = False) -> ColumnElement[Any]:
    """The tsquery of a reading of this shape, from bound parameters only (never from
    query text; tsquery_params gives them). `loose`: each positive phrase as the AND of
    its words, a query every row of the exact one matches (see _matches)."""
    alternatives: list[ColumnElement[Any]] = []
    k = 0
    for group in shape:
        parts: list[ColumnElement[Any]] = []
        for negated, is_prefix, phrase in group:
            if negated:
                parts.append(UnaryExpression(_term_query(f"{prefix}{k}", is_prefix), operator=_NOT))
            elif loose and phrase:
                parts.append(_positive(_term_query(f"{prefix}l{k}", is_prefix, loose=True)))
            else:
                parts.append(_positive(_term_query(f"{prefix}{k}", is_prefix)))
            k += 1
        alternatives.append(reduce(lambda a, b: a.op("&&")(b), parts).self_group())
    return reduce(lambda a, b: a.op("||")(b), alternatives).self_group()


_NOT: custom_op[Any] = custom_op("!!")


def _matches(shape: ReadingShape, row: FromClause = m, prefix: str = "w") -> ColumnElement[bool]:
    """The condition "the row matches the tsquery", in the form the word index answers
    quickly. The index holds no positions (RUM's attached id takes their place), so a
    positive phrase is asked of it as the AND of its words, and the row's own vector is
    checked for the query by ts_match_vq (which no index serves): RUM's scan of a phrase
    reads far more than the AND's (docs/search-at-scale.md). Negated terms stay as they
    are, so the index's query matches every row the exact one matches."""
    vector = row.c[VECTOR]
    full = _tsquery(shape, prefix)
    if not any(phrase for group in shape for negated, _, phrase in group if not negated):
        return vector.op("@@")(full)
    loose = _tsquery(shape, prefix, loose=True)
    return and_(vector.op("@@")(loose), func.ts_match_vq(vector, full))


def trigram_text(row: FromClause) -> ColumnElement[Any]:
    """The expression the pg_trgm index of revision 0023 covers (migrations/_pg_search.py):
    a query must spell it the same way for the planner to use the index."""
    blank: ColumnElement[Any] = literal_column("''")
    space: ColumnElement[Any] = literal_column("' '")
    parts = [func.coalesce(row.c[name], blank) for name in ("content", "tool_name", "tool_calls")]
    return (
        parts[0].op("||")(space).op("||")(parts[1]).op("||")(space).op("||")(parts[2]).self_group()
    )


#: trigram_text as PostgreSQL renders it (EXPLAINs of the index in the tests)
TRIGRAM_TEXT = str(
    trigram_text(m).compile(dialect=postgresql.psycopg.dialect(paramstyle="named"))  # type: ignore[no-untyped-call]
)
#: constants of the literal tier's conditions, written into the SQL: the role must be a
#: constant for the planner to prove pg_trgm's partial index (role <> 'tool') applies
_BLANK: ColumnElement[Any] = literal_column("''")
_TOOL: ColumnElement[Any] = literal_column("'tool'")


_NOT_HIT_KEYS = ("content", "rank", "context_roles", "context_contents")


def _context(roles: list[Any], contents: list[Any]) -> list[dict[str, str]]:
    return [
        {"role": str(role), "content": decode_preview(content)[:CONTEXT_CHARS]}
        for role, content in zip(roles, contents, strict=True)
    ]


def _hit(row: Any, snippet: str) -> Hit:
    hit = {k: v for k, v in row.items() if k not in _NOT_HIT_KEYS}
    hit["snippet"] = snippet
    hit["context"] = _context(row["context_roles"], row["context_contents"])
    return hit


#: query_canceled: statement_timeout (or a cancel request) stopped the statement
_QUERY_CANCELED = "57014"
# The search's settings, for the rest of its transaction only (set_config's `true`),
# with the values they replace, which the search puts back when it ends (the caller's
# transaction may go on). statement_timeout: the search's limit, never above one the
# session already has (none when :ms is NULL). work_mem: PostgresSearch.work_mem, never
# below the session's own. jit: off, because a search's statements are bounded by
# windows and LIMITs the planner cannot see in bound parameters (an estimate's
# `id > :floor` is planned as a third of the table), and compiling a plan it thinks
# large costs more than the statement runs. The OFFSET 0 fence reads the old values
# before set_config changes them; SHOW's form ("2s", "1min") read as an interval gives
# its milliseconds (pg_settings costs half a millisecond).
_SEARCH_SETTINGS = text(
    "SELECT old.setting, old.ms,"
    " set_config('statement_timeout', COALESCE(old.ms::text, old.setting), true),"
    " old.work_mem, set_config('work_mem', CASE WHEN pg_size_bytes(old.work_mem)"
    " < pg_size_bytes(:work_mem) THEN :work_mem ELSE old.work_mem END, true),"
    " old.jit, set_config('jit', 'off', true) FROM"
    " (SELECT setting, work_mem, jit, CASE WHEN CAST(:ms AS bigint) IS NULL THEN NULL"
    " WHEN ms > 0 AND ms < CAST(:ms AS bigint) THEN ms"
    " ELSE CAST(:ms AS bigint) END AS ms FROM"
    " (SELECT current_setting('statement_timeout') AS setting,"
    " current_setting('work_mem') AS work_mem, current_setting('jit') AS jit,"
    " CAST(extract(epoch FROM"
    " CAST(current_setting('statement_timeout') AS interval)) * 1000 AS bigint) AS ms"
    " OFFSET 0) AS now) AS old"
)
_PUT_BACK = text(
    "SELECT set_config('statement_timeout', :ms, true), set_config('work_mem', :work_mem, true),"
    " set_config('jit', :jit, true)"
)
_SET_LIMIT = text("SELECT set_config('statement_timeout', :ms, true)")
#: the largest statement_timeout PostgreSQL accepts (INT_MAX milliseconds)
_LONGEST_TIMEOUT_MS = 2**31 - 1

#: The access method of the word index (`PostgresSearch.index_method`): "rum" where
#: revision hs0003 found the RUM extension available, else "gin". to_regclass resolves
#: the name on the search path, as the search's statements do.
INDEX_METHOD = text(
    "SELECT am.amname FROM pg_class AS c JOIN pg_am AS am ON am.oid = c.relam"
    " WHERE c.oid = to_regclass(:name)"
)
#: Key of the method in the DBAPI connection's `info`: read once per pooled connection
#: (an upgrade that changes it runs on a connection of its own).
_INDEX_METHOD_KEY = "hermes_store_search_index_method"


#: How long the planner's statistics read above are kept on a pooled connection: they
#: only weigh a search's routes against each other (ANALYZE changes them no faster).
STATISTICS_TTL = 60.0
_TABLE_ROWS_KEY = "hermes_store_search_table_rows"
_COMMON_WORDS_KEY = "hermes_store_search_common_words"
_WORD_RE = re.compile(r"[0-9A-Za-z]+")


@dataclass(frozen=True)
class CommonWords:
    """ANALYZE's most common lexemes and the fraction of the rows holding each; the
    planner estimates a lexeme not listed at min(0.005, rarest / 2), below `rarest`."""

    frequencies: Mapping[str, float]
    rarest: float


def common_words(row: Any) -> CommonWords | None:
    """The statistics of COMMON_WORDS's row (a mapping); None when ANALYZE has kept none."""
    if row is None or not row["words"] or not row["freqs"]:
        return None
    words: list[str] = list(row["words"])
    freqs = [float(f) for f in row["freqs"][: len(words)]]
    return CommonWords(dict(zip(words, freqs, strict=True)), min(freqs))


def density_bound(parsed: Parsed, words: CommonWords) -> float | None:
    """An upper bound of the planner's estimate of the fraction of the rows the query
    matches: an OR's groups summed, each group at most its rarest positive word (a
    negated term only lowers it; a term of no word is asked as a lexeme that is never
    listed). None when a term's lexemes cannot be known here (a prefix, a word beside
    ASCII letters and digits, whose lexeme the parser decides)."""
    total = 0.0
    for group in parsed:
        rarest: float | None = None
        for negated, term in group:
            if negated:
                continue
            if term.prefix:
                return None
            lexemes = _words(term.text)
            if not all(_WORD_RE.fullmatch(word) for word in lexemes):
                return None
            listed = (words.frequencies.get(w.lower(), words.rarest) for w in lexemes)
            found = min(listed, default=words.rarest)
            rarest = found if rarest is None else min(rarest, found)
        if rarest is None:
            return None
        total += rarest
    return min(total, 1.0)


def estimated_rows(plan: Any) -> float:
    """The rows an EXPLAIN (FORMAT JSON) plan estimates its statement returns."""
    return float(plan[0]["Plan"]["Plan Rows"])


def walk_pays(matches: float, rows: float, window: int, span: int, row_cost: float) -> bool:
    """Whether walking the ids at the table's end is expected to fill the window within
    the span (with a margin of half again, the estimate being an estimate) at a lower
    cost than the word index's: the index's work grows with the matches, the walk's
    with the rows read until `window` matches are found (`rows / matches` per match),
    each row costing `row_cost` index matches."""
    if matches <= 0 or rows <= 0:
        return False
    to_read = window * rows / matches
    return to_read * 1.5 <= span and to_read * row_cost < matches


#: a run of characters pg_trgm takes trigrams from (letters and digits)
_TRIGRAM_RUN = re.compile(r"[^\W_]+")


def _needles(token: str) -> list[str]:
    """What a row's lower-cased text holds wherever pg_trgm's index hands the row over
    for the pattern `%token%`: each inner trigram of a word of 3 or more characters (a
    trigram of letters and digits is in a row's trigrams exactly when the row's text
    holds it), and a word of 2 characters itself (pg_trgm asks for it padded at a word
    boundary: a superset here). A word of one character says next to nothing."""
    needles: list[str] = []
    for word in _TRIGRAM_RUN.findall(token.strip('"').lower()):
        if len(word) >= TRIGRAM_CHARS:
            needles += [word[i : i + TRIGRAM_CHARS] for i in range(len(word) - 2)]
        elif len(word) == 2:
            needles.append(word)
    return list(dict.fromkeys(needles))


# --- the routes' statements, one builder each (tests/search/route_sql/postgresql/) --------


def _hit_columns(row: FromClause) -> list[ColumnElement[Any]]:
    return [
        row.c[name] for name in ("id", "session_id", "role", "content", "timestamp", "tool_name")
    ]


def _context_lines(hit: FromClause) -> FromClause:
    """The context of the hit `hit`, in the search statement itself (the SQLite backend
    asks once more for all hits, which costs nothing in-process but a round trip here):
    the previous message of the session, the hit, the next one, ordered by (timestamp,
    id) as backend.attach_context orders them."""
    n = MESSAGES.alias("n")
    here, there = tuple_(n.c.timestamp, n.c.id), tuple_(hit.c.timestamp, hit.c.id)
    before = (
        select(ZERO.label("pos"), n.c.role, n.c.content)
        .where(n.c.session_id == hit.c.session_id, here < there)
        .order_by(n.c.timestamp.desc(), n.c.id.desc())
        .limit(ONE)
        .correlate(hit)
    )
    itself = select(ONE, hit.c.role, hit.c.content).correlate(hit)
    after = (
        select(literal_column("2"), n.c.role, n.c.content)
        .where(n.c.session_id == hit.c.session_id, here > there)
        .order_by(n.c.timestamp.asc(), n.c.id.asc())
        .limit(ONE)
        .correlate(hit)
    )
    lines = union_all(before, itself, after).subquery("c")
    return (
        select(
            func.array_agg(aggregate_order_by(lines.c.role, lines.c.pos)).label("context_roles"),
            func.array_agg(aggregate_order_by(lines.c.content, lines.c.pos)).label(
                "context_contents"
            ),
        )
        .select_from(lines)
        .lateral("ctx")
    )


Order = Callable[[FromClause], list[Any]]


def _page(
    filters: FilterShape,
    where: ColumnElement[bool],
    order: Order,
    *,
    query: FromClause | None = None,
) -> Select[Any]:
    """The page of hits: messages matching `where` (and the filters), in `order`, with
    their session's columns and their context (and with `query`, the tsquery `hq`, each
    ranked by ts_rank_cd). Every message has its session (foreign key), so unless a
    filter reads the session, the page is cut from messages alone and only its rows are
    joined to sessions (a common word matches thousands of rows)."""
    ranked = [] if query is None else [func.ts_rank_cd(m.c[VECTOR], query.c.query).label("rank")]
    rows: FromClause = m if query is None else query.join(m, true())
    session = [s.c.source, s.c.model, s.c.started_at.label("session_started")]
    if reads_sessions(filters):
        page = (
            select(*_hit_columns(m), *session, *ranked)
            .select_from(rows.join(s, s.c.id == m.c.session_id))
            .where(where, *filter_conditions(filters))
            .order_by(*order(m))
            .limit(bindparam("limit"))
            .offset(bindparam("offset"))
            .subquery("page")
        )
    else:
        cut = (
            select(*_hit_columns(m), *ranked)
            .select_from(rows)
            .where(where, *filter_conditions(filters))
            .order_by(*order(m))
            .limit(bindparam("limit"))
            .offset(bindparam("offset"))
            .subquery("cut")
        )
        page = (
            select(*_hit_columns(cut), *session, *([cut.c.rank] if ranked else []))
            .select_from(cut.join(s, s.c.id == cut.c.session_id))
            .subquery("page")
        )
    context = _context_lines(page)
    return (
        select(*page.c, *context.c).select_from(page.join(context, true())).order_by(*order(page))
    )


def _ranked(sort: str | None) -> Order:
    """A ranked route's order: by ts_rank_cd (after the timestamp for a time sort)."""
    direction = time_direction(sort)

    def order(row: FromClause) -> list[Any]:
        rank = row.c.rank if "rank" in row.c else literal_column("rank")
        by_rank = [rank.desc(), row.c.id]
        if direction is None:
            return by_rank
        return [row.c.timestamp.asc() if direction == "ASC" else row.c.timestamp.desc(), *by_rank]

    return order


def _by_time(oldest: bool) -> Order:
    """A time-ordered route's order: by timestamp, newest first (oldest with `oldest`)."""

    def order(row: FromClause) -> list[Any]:
        return [row.c.timestamp.asc() if oldest else row.c.timestamp.desc(), row.c.id.desc()]

    return order


Walk = Callable[[FromClause], Any]


def _first(
    filters: FilterShape, where: ColumnElement[bool], walk: Walk, *, fenced: bool = False
) -> Select[Any]:
    """The ids of the first :window rows matching `where` and the filters, in `walk`.
    `fenced`: every match found first, behind an OFFSET 0 fence, then the window."""
    rows = m.join(s, s.c.id == m.c.session_id) if reads_sessions(filters) else m
    found = select(m.c.id).select_from(rows).where(where, *filter_conditions(filters))
    if fenced:
        fence = found.offset(ZERO).subquery("m")
        found = select(fence.c.id).order_by(walk(fence))
    else:
        found = found.order_by(walk(m))
    return found.limit(bindparam("window")).correlate(None)


def _walk(oldest: bool) -> Walk:
    """Walking the primary key: newest first (oldest first with `oldest`)."""
    return lambda row: row.c.id.asc() if oldest else row.c.id.desc()


def _query(shape: ReadingShape) -> FromClause:
    """The tsquery, computed once per statement: `hq.query`."""
    return select(_tsquery(shape).label("query")).subquery("hq")


@lru_cache(maxsize=256)
def word_statement(
    shape: ReadingShape, filters: FilterShape, sort: str | None, method: IndexMethod
) -> RouteStatement:
    """The word route, bounded (limits.RANK_WINDOW): the newest :window matches of the
    tsquery in id order (oldest first for sort="oldest"), then the page of them by
    ts_rank_cd (by timestamp first for a time sort). With RUM the index hands the
    matches over in id order (`<=|` / `|=>` on the attached id), so the window costs
    what it holds; with GIN every match is found (cheaply: ids only, nothing ranked)
    before the window is kept. Parameters: the tsquery's (tsquery_params), :window,
    :limit, :offset."""
    oldest = oldest_first(sort)

    def by_distance(row: FromClause) -> Any:
        # RUM hands the matches over in id order: by the distance to 0 or to _NEWEST_ID
        return row.c.id.op("|=>")(ZERO) if oldest else row.c.id.op("<=|")(_NEWEST_ID)

    walk = by_distance if method == "rum" else _walk(oldest)
    candidates = _first(filters, _matches(shape), walk)
    where = m.c.id.in_(candidates)
    statement = _page(filters, where, _ranked(sort), query=_query(shape))
    return RouteStatement(statement, expanding=has_lists(filters))


def _span(
    filters: FilterShape,
    where: Callable[[FromClause], ColumnElement[bool]],
    *,
    oldest: bool = False,
) -> RouteStatement:
    """The ids of the newest :window rows matching `where` among the newest :span ids
    (with `oldest`, the oldest among the oldest), the primary key walked from that end.
    The OFFSET 0 fence keeps the planner from the indexes (which find every match in the
    table before the window's are kept)."""
    end_id = func.min(MESSAGES.c.id) if oldest else func.max(MESSAGES.c.id)
    end = select(end_id).correlate(None).scalar_subquery()
    in_span = (
        MESSAGES.c.id < end + bindparam("span")
        if oldest
        else MESSAGES.c.id > end - bindparam("span")
    )
    recent = (
        select(*MESSAGES.c)
        .where(in_span)
        .order_by(MESSAGES.c.id.asc() if oldest else MESSAGES.c.id.desc())
        .offset(ZERO)
        .subquery("m")
    )
    rows = recent.join(s, s.c.id == recent.c.session_id) if reads_sessions(filters) else recent
    statement = (
        select(recent.c.id)
        .select_from(rows)
        .where(where(recent), *filter_conditions(filters, recent))
        .order_by(recent.c.id.asc() if oldest else recent.c.id.desc())
        .limit(bindparam("window"))
    )
    return RouteStatement(statement, expanding=has_lists(filters))


@lru_cache(maxsize=256)
def word_window_statement(
    shape: ReadingShape, filters: FilterShape, oldest: bool
) -> RouteStatement:
    """The ids of the newest :window matches of the tsquery among the newest :span ids
    (the oldest among the oldest with `oldest`), read row by row walking the primary key
    from that end (stopping once :window are found): for a word in a few percent of the
    rows that is a few ten thousand rows whatever the table holds, where the word index
    reads every match (RUM's ordered scan reads the term's whole posting list before it
    hands over the first id). Parameters: the tsquery's, :span, :window."""
    return _span(filters, lambda row: _matches(shape, row), oldest=oldest)


@lru_cache(maxsize=256)
def word_page_statement(
    shape: ReadingShape, filters: FilterShape, sort: str | None
) -> RouteStatement:
    """The page, by ts_rank_cd (by timestamp first for a time sort), of the ids :ids a
    window gave. Parameters: the tsquery's, :ids, :limit, :offset."""
    where = m.c.id == func.any(bindparam("ids"))
    statement = _page(filters, where, _ranked(sort), query=_query(shape))
    return RouteStatement(statement, expanding=has_lists(filters))


class _Explain(Executable, ClauseElement):
    """EXPLAIN (FORMAT JSON) of a statement: its plan, nothing read."""

    inherit_cache = False

    def __init__(self, statement: Select[Any]) -> None:
        self.statement = statement


@compiles(_Explain)
def _explain(element: _Explain, compiler: Any, **kw: Any) -> str:
    return "EXPLAIN (FORMAT JSON) " + str(compiler.process(element.statement, **kw))


@lru_cache(maxsize=256)
def word_estimate_statement(shape: ReadingShape, filters: FilterShape) -> RouteStatement:
    """The plan of the tsquery's matches (the filters applied), whose estimate of the
    rows is the planner's, from the statistics ANALYZE keeps of each lexeme's frequency
    (EXPLAIN: nothing is read). Parameters: the tsquery's."""
    rows = m.join(s, s.c.id == m.c.session_id) if reads_sessions(filters) else m
    matches = m.c[VECTOR].op("@@")(_tsquery(shape))
    found = select(m.c.id).select_from(rows).where(matches, *filter_conditions(filters))
    return RouteStatement(_Explain(found), expanding=has_lists(filters))


#: The plan of the whole table, whose estimate of the rows is the planner's.
TABLE_ESTIMATE = RouteStatement(_Explain(select(MESSAGES.c.id)))


def _common_words() -> Select[Any]:
    """ANALYZE's most common lexemes of the search vector (`most_common_elems`) and the
    fraction of the rows holding each (`most_common_elem_freqs`, the smallest and largest
    of those after them): the statistics the planner estimates a tsquery's matches from."""
    stats = table(
        "pg_stats",
        *(
            column(c)
            for c in (
                "most_common_elems",
                "most_common_elem_freqs",
                "schemaname",
                "tablename",
                "attname",
                "inherited",
            )
        ),
    ).alias("s")
    relation = table("pg_class", column("oid"), column("relname"), column("relnamespace")).alias(
        "c"
    )
    namespace = table("pg_namespace", column("oid"), column("nspname")).alias("n")
    return (
        select(
            cast(cast(stats.c.most_common_elems, Text), ARRAY(Text)).label("words"),
            stats.c.most_common_elem_freqs.label("freqs"),
        )
        .select_from(
            stats.join(
                relation, relation.c.oid == func.to_regclass(literal_column("'messages'"))
            ).join(namespace, namespace.c.oid == relation.c.relnamespace)
        )
        .where(
            stats.c.schemaname == namespace.c.nspname,
            stats.c.tablename == relation.c.relname,
            stats.c.attname == bindparam("vector", VECTOR, type_=NullType()),
            not_(stats.c.inherited),
        )
    )


COMMON_WORDS = RouteStatement(_common_words())


SubstringShape = tuple[tuple[tuple[bool, str], ...], ...]


def substring_shape(tokens: Sequence[str]) -> tuple[SubstringShape, Params] | None:
    """The substring route's shape (each OR-alternative's tokens as FTS5 reads the
    operators: negated, and LIKE or ILIKE) and its patterns :p0..; None when no token is
    left to look for."""
    params: Params = {}
    groups: list[tuple[tuple[bool, str], ...]] = []
    for group in q.or_groups(tokens):
        shaped = []
        for token, negated in group:
            params[f"p{len(params)}"] = q.like_pattern(token.strip('"'))
            shaped.append((negated, _like_op(token)))
        if shaped:
            groups.append(tuple(shaped))
    return (tuple(groups), params) if groups else None


def _substring_where(shape: SubstringShape, row: FromClause = m) -> ColumnElement[bool]:
    """The substring route's condition on the row (operators as FTS5 reads them): non-tool
    rows whose trigram_text holds the tokens, each pattern :p<k>."""
    text_of_row = trigram_text(row)
    alternatives = []
    k = 0
    for group in shape:
        clauses = []
        for negated, operator in group:
            pattern: BindParameter[Any] = bindparam(f"p{k}")
            k += 1
            if operator == "ILIKE":
                clause = text_of_row.ilike(pattern, escape="\\")
            else:
                clause = text_of_row.like(pattern, escape="\\")
            clauses.append(not_(clause) if negated else clause)
        alternatives.append(and_(*clauses))
    return and_(row.c.role != literal_column("'tool'"), or_(*alternatives))


@lru_cache(maxsize=256)
def substring_statement(
    shape: SubstringShape, filters: FilterShape, sort: str | None, fenced: bool
) -> RouteStatement:
    """The substring route (pg_trgm) over the whole table, bounded (limits.time_window):
    the newest :window matches in id order, then the page of them by timestamp.
    Parameters: :p0.., :window, :limit, :offset. `fenced` (a zero-hit retry whose
    candidates are known to be few): every match found first, behind an OFFSET 0
    fence, then the window: the planner guesses a pattern's matches from a sample, and
    for a guess of many (ten patterns OR-ed) walks the primary key testing every row
    instead of asking pg_trgm's index."""
    oldest = oldest_first(sort)
    candidates = _first(filters, _substring_where(shape), _walk(oldest), fenced=fenced)
    statement = _page(filters, m.c.id.in_(candidates), _by_time(oldest))
    return RouteStatement(statement, expanding=has_lists(filters))


@lru_cache(maxsize=256)
def substring_window_statement(
    shape: SubstringShape, filters: FilterShape, oldest: bool
) -> RouteStatement:
    """The ids of the newest :window matches of the substring route among the newest
    :span ids, read row by row walking the primary key newest first (stopping once
    :window are found), where pg_trgm's bitmap finds every match in the table before the
    newest are kept; a term in 1 % of the rows fills a window of 64 after about 6,400
    rows (with `oldest`, the oldest among the oldest :span ids)."""
    return _span(filters, lambda row: _substring_where(shape, row), oldest=oldest)


@lru_cache(maxsize=64)
def page_statement(filters: FilterShape, oldest: bool) -> RouteStatement:
    """The page (by timestamp, newest first; oldest first with `oldest`) of the ids
    :ids a window gave (the substring route's, a scan's)."""
    where = m.c.id == func.any(bindparam("ids"))
    return RouteStatement(_page(filters, where, _by_time(oldest)), expanding=has_lists(filters))


def probe_shape(tokens: Sequence[str]) -> tuple[tuple[int, ...], Params] | None:
    """The zero-hit retry's probe: the needles (`_needles`) of each OR-alternative's
    positive tokens, counted per alternative, and bound as :n0..; None when no token is
    left to look for."""
    if not any(t not in q.OPERATORS for t in tokens):
        return None
    params: Params = {}
    counts = []
    for group in q.or_groups(tokens):
        before = len(params)
        for token, negated in group:
            for needle in [] if negated else _needles(token):
                params[f"n{len(params)}"] = needle
        counts.append(len(params) - before)
    return tuple(counts), params


@lru_cache(maxsize=64)
def probe_statement(shape: tuple[int, ...]) -> RouteStatement:
    """Among the newest :sample ids, read row by row: the rows read (`sampled`), and the
    candidates pg_trgm's index would hand over to the substring route (`candidates`):
    non-tool rows holding every needle of some OR-alternative (a negated token narrows
    nothing the index reads; an alternative with no needle is every row). The
    lower-cased text is made once per row, each needle a strpos in it."""
    newest = select(func.max(MESSAGES.c.id)).correlate(None).scalar_subquery()
    is_text = case((m.c.role != literal_column("'tool'"), func.lower(trigram_text(m))))
    sample = (
        select(is_text.label("t"))
        .select_from(m)
        .where(m.c.id > newest - bindparam("sample"))
        .offset(ZERO)
        .subquery("m")
    )
    alternatives = []
    k = 0
    for count in shape:
        needles = [func.strpos(sample.c.t, bindparam(f"n{k + i}")) > ZERO for i in range(count)]
        k += count
        alternatives.append(and_(*needles) if needles else true())
    candidate = and_(sample.c.t.is_not(None), or_(*alternatives))
    statement = select(
        func.count().label("sampled"),
        func.count().filter(candidate).label("candidates"),
    ).select_from(sample)
    return RouteStatement(statement)


@lru_cache(maxsize=64)
def scan_statement(filters: FilterShape, like: LikeShape) -> RouteStatement:
    """A LIKE scan, bounded (limits.time_window): the newest :window rows matching the
    terms (backend.like_condition) in id order (the primary key walked from the end),
    then the page of them by timestamp, newest first."""
    candidates = _first(filters, like_condition(like), _walk(False))
    statement = _page(filters, m.c.id.in_(candidates), _by_time(False))
    return RouteStatement(statement, expanding=has_lists(filters))


@lru_cache(maxsize=64)
def scan_span_statement(filters: FilterShape, like: LikeShape) -> RouteStatement:
    """A LIKE scan's newest :window matches among the newest :span ids (`_span`)."""
    return _span(filters, lambda row: like_condition(like, row))


def _context_by_id() -> Select[Any]:
    """The context of hits found elsewhere (the literal tier): the lateral join the
    routes' own statements use, for the ids :ids."""
    context = _context_lines(m)
    return (
        select(m.c.id, *context.c)
        .select_from(m.join(context, true()))
        .where(m.c.id == func.any(bindparam("ids")))
    )


CONTEXT_BY_ID = RouteStatement(_context_by_id())


class PostgresSearch(SearchBackend):
    dialect = "postgresql"
    word_route = "tsvector"
    # The first window is read row by row (see _messages), so it is kept small. pg_trgm
    # ignores punctuation, so a literal whose letters and digits are common (`the.` in
    # 0.8 % of the rows, `the` in 25 %) has far more index candidates than hits: a
    # literal seen often enough in the first window is looked for in a second one, read
    # row by row, rather than in the whole table (docs/benchmarks.md has the figures).
    # A rarer literal is looked for in windows of 65,536 then 524,288 ids read through
    # the indexes, their candidates kept in the window, before the whole table: the
    # index scans cost the same, but only the window's candidates are read and checked,
    # where the whole table's grow with the table (docs/search-at-scale.md).
    literal_window = 1_024
    literal_widest_window = 16_384
    literal_index_windows = (65_536, 524_288)
    # The index windows cost what the literal's posting lists hold, which grows with the
    # table; a second window read row by row costs what it holds. In a large table, two
    # hits in the first window are enough to size one (the figures:
    # docs/search-at-scale.md).
    literal_sparse_sizing_hits = 2
    literal_sparse_table_rows = 3_000_000
    # pg_trgm's GIN scan reads a literal's posting lists in the whole table for any
    # window: about 8 ms per literal per 10M rows, paid by each index window and by an
    # index span. Up to two literals in 10M ids (with room for the gaps a sequence
    # leaves) keep their index windows; ten OR'ed literals there would spend 250 ms in
    # them before the estimate (docs/search-at-scale.md).
    literal_index_rows = 24_000_000
    #: the newest ids the substring route reads row by row before pg_trgm's bitmap
    substring_span = 16_384
    #: the ids at the table's end (newest, or oldest for sort="oldest") a frequent word's
    #: window may be read from row by row, and what reading one costs in matches of the
    #: word index's ordered scan (measured in docs/search-at-scale.md); `walk_pays`
    #: weighs the two
    word_span = 65_536
    word_row_cost = 2.0
    #: The work_mem a search's statements get at least (for its transaction only). RUM's
    #: ordered scan sorts the matches it reads by id in work_mem, and spills them to
    #: disk at PostgreSQL's default of 4MB (what that costs at 10M rows:
    #: docs/search-at-scale.md).
    work_mem = "16MB"
    #: the statement_timeout in force during a time-limited search, in milliseconds
    _statement_ms = 0

    @contextmanager
    def time_limit(self, budget_ms: float | None) -> Iterator[None]:
        # statement_timeout stops the statement running at the deadline (check_time
        # lowers it as the deadline nears), and no statement starts past it
        started = time.monotonic()
        ms = None if budget_ms is None else min(max(1, round(budget_ms)), _LONGEST_TIMEOUT_MS)
        settings = {"ms": ms, "work_mem": self.work_mem}
        row = self.conn.execute(_SEARCH_SETTINGS, settings).one()
        old, limit_ms, _, old_work_mem, _, old_jit, _ = row
        put_back = {"ms": old, "work_mem": old_work_mem, "jit": old_jit}
        self._statement_ms = 0 if limit_ms is None else int(limit_ms)
        try:
            with super().time_limit(None if limit_ms is None else float(limit_ms)):
                yield
        except DBAPIError as exc:
            # a cancel that came before the limit was someone else's (pg_cancel_backend)
            late = limit_ms is not None and (time.monotonic() - started) * 1000 >= limit_ms
            if getattr(exc.orig, "sqlstate", None) == _QUERY_CANCELED and late:
                raise self.timed_out() from exc
            raise  # the transaction failed: nothing more can run in it
        except Exception:
            # no statement failed (SearchTimedOut between statements, a caller's error):
            # the caller's transaction goes on with its own settings
            self._put_back(put_back)
            raise
        self._put_back(put_back)

    def index_method(self, *, cached: bool = True) -> IndexMethod:
        info = self.conn.connection.info
        known = info.get(_INDEX_METHOD_KEY) if cached else None
        if known in ("rum", "gin"):
            return "rum" if known == "rum" else "gin"
        found = self.conn.execute(INDEX_METHOD, {"name": PG_SEARCH_VECTOR_INDEX}).scalar()
        method: IndexMethod = "rum" if found == "rum" else "gin"
        if cached:
            info[_INDEX_METHOD_KEY] = method
        return method

    def _put_back(self, settings: dict[str, str]) -> None:
        if not self.conn.get_execution_options().get(TRANSACTION_ENDS_WITH_SEARCH):
            self.conn.execute(_PUT_BACK, settings)

    def check_time(self) -> None:
        super().check_time()
        if self.deadline is None:
            return
        # A statement may run for the statement_timeout in force: lowered to the time
        # left once that overshoots the deadline by more than a tenth of the budget, so
        # a search ends within 1.1 budgets. A quick search never pays the round trip.
        left_ms = (self.deadline - time.monotonic()) * 1000
        if self._statement_ms - left_ms > self.budget_ms / 10:
            self._statement_ms = max(1, math.ceil(left_ms))
            self.conn.execute(_SET_LIMIT, {"ms": str(self._statement_ms)})

    # The routes' statements run without a savepoint: the SQLite routes need one because
    # they catch FTS5 errors and fall back to another route in the same transaction;
    # nothing here catches (the query is validated first and every value is bound), and
    # a SAVEPOINT/RELEASE pair is two more round trips per search on a server.

    def word_hits(
        self, query: SearchQuery, filters: Filters, sort: str | None, limit: int, offset: int
    ) -> list[Hit]:
        if query.fts5_error is not None:
            raise QuerySyntaxError(query.fts5_error)
        window = limits.rank_window(limit, offset)
        page = {"limit": limit, "offset": offset}
        ids = self._word_window(query, filters, window, oldest=oldest_first(sort))
        shape, params = reading_shape(query.fts5), tsquery_params(query.fts5)
        if ids is not None:
            statement = word_page_statement(shape, filters.shape, sort)
            rows = self.run(statement, filters, {**params, **page, "ids": ids})
        else:
            statement = word_statement(shape, filters.shape, sort, self.index_method())
            rows = self.run(statement, filters, {**params, **page, "window": window})
        terms = query.fts5_positive_terms
        return [_hit(r, terms_snippet(decode_preview(r["content"]), terms)) for r in rows]

    def _word_window(
        self, query: SearchQuery, filters: Filters, window: int, *, oldest: bool
    ) -> list[int] | None:
        """The ids of the newest `window` matches (the oldest, with `oldest`), read from
        the newest (oldest) WORD_SPAN ids row by row, when the planner's estimates say
        that pays (`walk_pays`) and the span holds that many (then they are the newest
        (oldest) of the whole table, the ids the word index would hand over); None
        otherwise (the word index is asked). The planner is asked (EXPLAIN) only when
        ANALYZE's most common words leave the walk possible, so a rare word, which most
        are, costs no round trip here."""
        rows = self._table_rows()
        words = self._common_words()
        bound = None if words is None else density_bound(query.fts5, words)
        # the margin: the cached statistics may lag the planner's by a minute of growth
        # or an ANALYZE, and its estimate is rounded to whole rows
        if bound is not None and not self._walk_pays(bound * rows * 1.5 + 1, rows, window):
            return None
        shape, params = reading_shape(query.fts5), tsquery_params(query.fts5)
        estimate = word_estimate_statement(shape, filters.shape)
        plan = self.run_tuples(estimate, filters, params)[0][0]
        if not self._walk_pays(estimated_rows(plan), rows, window):
            return None
        statement = word_window_statement(shape, filters.shape, oldest)
        found = self.run(statement, filters, {**params, "span": self.word_span, "window": window})
        ids = [int(row["id"]) for row in found]
        return ids if len(ids) >= window else None

    def _walk_pays(self, matches: float, rows: float, window: int) -> bool:
        # fewer matches than the window: a walk could not fill it, the index answers
        return matches >= window and walk_pays(
            matches, rows, window, self.word_span, self.word_row_cost
        )

    def sizes_by_density(self, found: int) -> bool:
        if super().sizes_by_density(found):
            return True
        return (
            found >= self.literal_sparse_sizing_hits
            and self._table_rows() >= self.literal_sparse_table_rows
        )

    def _table_rows(self) -> float:
        """The planner's estimate of the rows of messages (a density needs no more)."""
        return self._planner_statistic(
            _TABLE_ROWS_KEY,
            lambda: estimated_rows(TABLE_ESTIMATE.tuples(self.conn, {})[0][0]),
        )

    def _common_words(self) -> CommonWords | None:
        return self._planner_statistic(
            _COMMON_WORDS_KEY,
            lambda: common_words(next(iter(COMMON_WORDS.dicts(self.conn, {})), None)),
        )

    def _planner_statistic(self, key: str, read: Callable[[], _T]) -> _T:
        """`read()`, kept on the pooled connection for STATISTICS_TTL seconds."""
        info = self.conn.connection.info
        cached = info.get(key)
        now = time.monotonic()
        if cached is not None and now - cached[0] < STATISTICS_TTL:
            value: _T = cached[1]
            return value
        value = read()
        info[key] = (now, value)
        return value

    def substring_hits(
        self,
        query: SearchQuery,
        filters: Filters,
        sort: str | None,
        limit: int,
        offset: int,
        *,
        bounded: bool = False,
    ) -> list[Hit] | None:
        """Every token a case-insensitive substring of the row's three columns
        (operators as FTS5 reads them), non-tool rows only, as the v23 trigram index.
        `bounded`: SearchBackend.substring_hits (`_retry_span`)."""
        built = substring_shape(query.tokens)
        if filters.wants_tool_rows or built is None:
            return None
        shape, params = built
        window = limits.time_window(limit, offset)
        page = {"limit": limit, "offset": offset}
        oldest = oldest_first(sort)
        over_budget = self._retry_span(query) if bounded else None
        if over_budget is not None:
            span, estimate = over_budget
            statement = substring_window_statement(shape, filters.shape, oldest)
            found = self.run(statement, filters, {**params, "span": span, "window": window})
            in_span = [int(row["id"]) for row in found]
            if len(in_span) < window:  # older matches may exist: the span is all that was read
                self.warnings.append(limits.retry_warning(query.text, span, estimate))
            page_of = page_statement(filters.shape, oldest)
            rows = self.run(page_of, filters, {**page, "ids": in_span}) if in_span else []
            return self._substring_page(query, rows)
        # a retry within its budget asks pg_trgm for the whole table at once: few
        # candidates, and a span read row by row would find next to nothing
        ids = None if oldest or bounded else self._substring_window(shape, params, filters, window)
        if ids is not None:
            rows = self.run(page_statement(filters.shape, False), filters, {**page, "ids": ids})
        else:
            statement = substring_statement(shape, filters.shape, sort, bounded)
            rows = self.run(statement, filters, {**params, **page, "window": window})
        return self._substring_page(query, rows)

    def _substring_page(self, query: SearchQuery, rows: list[Any]) -> list[Hit]:
        needles = [t.strip('"') for t in q.terms(query.tokens)]
        return [_hit(r, substring_snippet(decode_preview(r["content"]), needles)) for r in rows]

    def _retry_span(self, query: SearchQuery) -> tuple[int, float] | None:
        """None when the zero-hit retry may ask pg_trgm's index for the whole table: the
        newest limits.RETRY_SAMPLE ids, read row by row, put its candidates at
        limits.RETRY_CHECKS or fewer. Otherwise (the newest ids to read row by row, the
        estimate): limits.RETRY_CHECKS rows shared among the query's tokens (each a
        pattern tested on every row read), whatever the table holds."""
        built = probe_shape(query.tokens)
        if built is None:
            return None
        shape, params = built
        self.check_time()
        sampled, candidates = probe_statement(shape).tuples(
            self.conn, {**params, "sample": limits.RETRY_SAMPLE}
        )[0]
        estimate = self.retry_estimate(int(candidates), int(sampled), self._table_rows())
        if estimate <= limits.RETRY_CHECKS:
            return None
        patterns = max(1, len(q.terms(query.tokens)))
        return max(1, limits.RETRY_CHECKS // patterns), estimate

    def _substring_window(
        self, shape: SubstringShape, params: Params, filters: Filters, window: int
    ) -> list[int] | None:
        """The ids of the newest `window` matches when the newest SUBSTRING_SPAN ids hold
        that many (then they are the newest of the whole table too, and the page is the
        one the whole table gives); None when the span holds fewer (the whole table is
        asked, pg_trgm's bitmap)."""
        statement = substring_window_statement(shape, filters.shape, False)
        spanned = {**params, "span": self.substring_span, "window": window}
        found = self.run(statement, filters, spanned)
        ids = [int(row["id"]) for row in found]
        return ids if len(ids) >= window else None

    def like_operator(self, term: str) -> str:
        return _like_op(term)

    def scan(
        self, like: LikeShape, filters: Filters, params: Params, snippet: Snippet
    ) -> list[Hit]:
        # The newest SUBSTRING_SPAN ids first, read row by row, then the whole table: the
        # planner's estimate of a LIKE pattern's matches comes from a sample of the rows
        # and can swing after an ANALYZE (a 2-character CJK term estimated at 15 rows,
        # 1,164 in the table, got a parallel scan of the whole table sorted by id instead
        # of the primary key walked newest first, several times slower).
        spanned = {**params, "span": self.substring_span}
        found = self.run(scan_span_statement(filters.shape, like), filters, spanned)
        ids = [int(row["id"]) for row in found]
        if len(ids) >= params["window"]:
            rows = self.run(page_statement(filters.shape, False), filters, {**params, "ids": ids})
        else:
            rows = self.run(scan_statement(filters.shape, like), filters, params)
        return [_hit(r, snippet(r["content"])) for r in rows]

    # --- id sets for the literal tier -------------------------------------------------------

    def word_ids(self, terms: list[Term], params: dict[str, Any], *, edge: Edge | None) -> IdSelect:
        parsed: Parsed = [[(False, term) for term in terms]]
        prefix = f"w{len(params)}_"
        params.update(tsquery_params(parsed, prefix))
        return _word_ids(reading_shape(parsed), prefix, edge)

    def attach_context(self, hits: list[Hit]) -> None:
        # the lateral join the routes' own statements use, for hits found elsewhere
        if not hits:
            return
        rows = self.tuples(CONTEXT_BY_ID, {"ids": [h["id"] for h in hits]})
        found = {hit_id: _context(roles, contents) for hit_id, roles, contents in rows}
        for hit in hits:
            hit["context"] = found.get(hit["id"], [])

    def literal_ids(
        self, literal: str, params: Params, *, trigram: bool, words: bool, edge: Edge | None
    ) -> IdSelect:
        windowed = edge is not None
        shape = _literal_shape(literal, params, trigram=trigram, words=words, window=windowed)
        return _literal_ids(shape, edge)

    def literal_candidates(
        self, literal: str, params: Params, *, trigram: bool, words: bool, edge: Edge | None
    ) -> tuple[IdSelect | None, ColumnElement[bool] | None]:
        if edge:  # the window is an id set, read row by row (_messages)
            return super().literal_candidates(
                literal, params, trigram=trigram, words=words, edge=edge
            )
        # the page's own condition: one bitmap scan of the indexes, each row read once
        # and checked once, and the page cut from it (no id set joined back to messages)
        shape = _literal_shape(literal, params, trigram=trigram, words=words, window=False)
        return None, _holds(shape, False, m)

    def literal_estimate(
        self, literals: list[tuple[str, bool, bool]], params: Params
    ) -> Select[Any]:
        # the ids above :floor read row by row (OFFSET 0, as _messages), each literal's
        # index arms tested as the indexes would hand the row over: pg_trgm for the
        # trigrams it takes from _index_pattern (_pattern_needles), the word index for
        # the AND of its words. With pg_trgm's arm the word index's adds tool rows only
        # (a non-tool row holding the words holds their trigrams): a row's search vector
        # is read for tool rows only, and its text lower-cased for the others only.
        specs: list[_EstimateSpec] = []
        for literal, trigram, words in literals:
            needles: tuple[tuple[str, bool], ...] | None = None
            if trigram:
                needles = ()
                for needle, anchored in _pattern_needles(literal):
                    name = f"n{len(params)}"
                    params[name] = needle
                    needles += ((name, anchored),)
            phrase = None
            if words:
                phrase = _tsquery_values(Term(literal, prefix=False, phrase=True), params)
            specs.append((needles, phrase, len(literal) >= TRIGRAM_CHARS))
        return _literal_estimate(tuple(specs))

    @staticmethod
    def literal_page(
        rows: FromClause, where: list[ColumnElement[bool]], *, oldest: bool
    ) -> Select[Any]:
        # Every matching row first (a bitmap scan of the indexes), then the page: without
        # the fence the planner may walk the primary key newest first testing each row,
        # which for a literal that stopped appearing long ago reads most of the table
        # (it guesses how often a pattern matches from a sample of rows).
        found = (
            select(m.c.id, m.c.timestamp).select_from(rows).where(*where).offset(ZERO).subquery("m")
        )
        return (
            select(found.c.id)
            .order_by(found.c.id.asc() if oldest else found.c.id.desc())
            .limit(bindparam("limit"))
        )


@lru_cache(maxsize=4)
def _messages(edge: Edge | None) -> FromClause:
    """The rows an id set is taken from: with `edge`, the window of ids at that end of
    the table, read row by row. OFFSET 0 keeps the planner from reaching for pg_trgm's
    index, whose selectivity estimate for a long pattern is far too low: it would fetch
    and recheck every candidate in the table to keep the few in the window."""
    if edge is None:
        return m
    return select(MESSAGES).where(id_window(MESSAGES.c.id, edge)).offset(ZERO).subquery("m")


#: A literal's condition as its statement depends on it: (the name of its LIKE pattern,
#: whether it is caseless, trigram, its words' tsquery (the parameters' prefix and the
#: reading's shape) or None)
_LiteralShape = tuple[str, bool, bool, tuple[str, ReadingShape] | None]


def _tsquery_values(term: Term, params: Params) -> tuple[str, ReadingShape]:
    """The values of `term`'s tsquery added to `params`: (their prefix, the reading's
    shape), from which `_matches` and `_tsquery` build it."""
    parsed: Parsed = [[(False, term)]]
    prefix = f"w{len(params)}_"
    params.update(tsquery_params(parsed, prefix))
    return prefix, reading_shape(parsed)


def _literal_shape(
    literal: str, params: Params, *, trigram: bool, words: bool, window: bool
) -> _LiteralShape:
    """`literal`'s values added to `params` (its LIKE pattern, pg_trgm's pattern outside
    a window, its words), and the shape of its condition (`_holds`)."""
    name = f"pat{len(params)}"
    params[name] = q.like_pattern(literal)
    if trigram and not window:
        params[f"idx{name}"] = _index_pattern(literal)
    phrase = _tsquery_values(Term(literal, prefix=False, phrase=True), params) if words else None
    return name, caseless(literal), trigram, phrase


def _holds_literal(
    literal: str,
    params: Params,
    row: FromClause,
    *,
    trigram: bool,
    words: bool,
    window: bool,
) -> ColumnElement[bool]:
    """`_holds` for `literal`, its values added to `params`."""
    shape = _literal_shape(literal, params, trigram=trigram, words=words, window=window)
    return _holds(shape, window, row)


@lru_cache(maxsize=256)
def _holds(shape: _LiteralShape, window: bool, row: FromClause) -> ColumnElement[bool]:
    """A condition on the message `row`: its text contains the literal of `shape` by
    `query.fold`, among the rows the indexes vouch for (the module docstring of
    literal.py). Outside the window each vouching index is asked in its own OR arm,
    which PostgreSQL reads as one bitmap scan of both, and every row it gives is
    checked; in the window, read row by row, the rows are told apart by role and words
    and checked, without pg_trgm's pattern (it folds case by the database's locale, and
    adds nothing to the check where that folds ASCII letters as query.fold does; a
    Turkish locale does not). Built once per shape: Core builds an expression slower
    than PostgreSQL plans a small statement."""
    name, is_caseless, trigram, phrase = shape
    check = _exact_check(is_caseless, name, row)
    arms: list[ColumnElement[bool]] = []
    if trigram and window:
        arms.append(row.c.role != _TOOL)
    elif trigram:
        # the partial index's predicate and expression: pg_trgm's index serves the arm
        pattern: BindParameter[Any] = bindparam(f"idx{name}")
        indexed = trigram_text(row)
        like = (
            indexed.like(pattern, escape="\\")
            if is_caseless
            else indexed.ilike(pattern, escape="\\")
        )
        arms.append(and_(row.c.role != _TOOL, like))
    if phrase is not None:
        prefix, reading = phrase
        arms.append(_matches(reading, row, prefix))
    return and_(or_(*arms), check) if arms else check


@lru_cache(maxsize=256)
def _literal_ids(shape: _LiteralShape, edge: Edge | None) -> IdSelect:
    """PostgresSearch.literal_ids' statement: the ids of the rows `_holds` keeps."""
    rows = _messages(edge)
    return select(rows.c.id).select_from(rows).where(_holds(shape, edge is not None, rows))


@lru_cache(maxsize=256)
def _word_ids(reading: ReadingShape, prefix: str, edge: Edge | None) -> IdSelect:
    """PostgresSearch.word_ids' statement: the ids of the rows matching the reading."""
    rows = _messages(edge)
    return select(rows.c.id).select_from(rows).where(_matches(reading, rows, prefix))


#: A literal of the estimate: (pg_trgm's needles as (parameter, anchored), or None
#: without the trigram index; its words' tsquery as `_tsquery_values`, or None; whether
#: it has 3 characters or more)
_EstimateSpec = tuple[tuple[tuple[str, bool], ...] | None, tuple[str, ReadingShape] | None, bool]


@lru_cache(maxsize=64)
def _literal_estimate(specs: tuple[_EstimateSpec, ...]) -> Select[Any]:
    """PostgresSearch.literal_estimate's statement (see there)."""
    sample = (
        select(
            m.c[VECTOR].label("v"),
            case((m.c.role != _TOOL, func.lower(trigram_text(m)))).label("t"),
        )
        .where(m.c.id > bindparam("floor"))
        .offset(ZERO)
        .subquery("m")
    )
    vector, lowered = sample.c.v, sample.c.t
    counts: list[ColumnElement[Any]] = []
    for needles, phrase, long in specs:
        arms: list[ColumnElement[bool]] = []
        if needles is not None:
            found: list[ColumnElement[bool]] = []
            for name, anchored in needles:
                needle: BindParameter[Any] = bindparam(name)
                found.append(
                    lowered.op("~")(needle) if anchored else func.strpos(lowered, needle) > ZERO
                )
            arms.append(and_(lowered.is_not(None), *found))
        if phrase is not None:
            prefix, reading = phrase
            tool = [lowered.is_(None)] if needles is not None else []
            loose = _tsquery(reading, prefix, loose=True)
            arms.append(and_(*tool, vector.op("@@")(loose)))
        if not arms:  # no index: every row of the scan is checked
            arms.append(lowered.is_not(None) if long else true())
        counts.append(func.count().filter(or_(*arms)))
    return select(reduce(add, counts)).select_from(sample)


def _exact_check(is_caseless: bool, pattern: str, row: FromClause) -> ColumnElement[bool]:
    """The condition "the row's content, tool name or tool calls contain :pattern (a LIKE
    pattern of `literal`) by `query.fold`". ILIKE under the "C" collation folds ASCII
    letters and nothing else, which is `query.fold` exactly (under the database's
    collation it may fold more, a superset fit for the index and never the answer).
    Column by column: a literal is not found across two columns, and the columns are
    not joined again for every row."""
    found: BindParameter[Any] = bindparam(pattern)
    texts = [func.coalesce(row.c[name], _BLANK) for name in ("content", "tool_name", "tool_calls")]
    if is_caseless:
        return or_(*(t.like(found, escape="\\") for t in texts))
    return or_(*(t.collate("C").ilike(found, escape="\\") for t in texts))


#: a run of characters pg_trgm takes trigrams from (letters and digits)
_TRIGRAM_WORD = re.compile(r"([^\W_]+)")


def _pattern_needles(literal: str) -> list[tuple[str, bool]]:
    """What a row's lower-cased text holds wherever pg_trgm's index hands the row over
    for `_index_pattern(literal)`, as (needle, anchored): a needle to find (strpos), or
    with `anchored` a regular expression. Each word of the pattern gives its inner
    trigrams; where a kept separator bounds it, pg_trgm pads it with spaces and asks
    for its edge trigrams too: a word of the row starting (ending) with its first (last)
    two characters, or a one-character word standing alone. A superset of the index's
    candidates (the trigrams may come from different words), as an estimate wants."""
    parts = _TRIGRAM_WORD.split(literal)
    separators, words = parts[0::2], parts[1::2]

    def kept(n: int) -> bool:  # separator n stays in the pattern (_index_pattern)
        neighbours = words[max(n - 1, 0) : n + 1]
        return bool(separators[n]) and not all(len(w) >= TRIGRAM_CHARS for w in neighbours)

    edge = "([^[:alnum:]]|^)", "([^[:alnum:]]|$)"
    needles: list[tuple[str, bool]] = []
    for n, word in enumerate(w.lower() for w in words):
        left, right = kept(n), kept(n + 1)
        needles += [(word[i : i + TRIGRAM_CHARS], False) for i in range(len(word) - 2)]
        if len(word) == 1 and left:
            needles.append((edge[0] + word + (edge[1] if right else ""), True))
        elif len(word) > 1:
            needles += [(edge[0] + word[:2], True)] if left else []
            needles += [(word[-2:] + edge[1], True)] if right else []
    return list(dict.fromkeys(needles))


def _index_pattern(literal: str) -> str:
    """The LIKE pattern pg_trgm's index is asked with: `literal` with each run of
    other characters next to a word of 3 or more characters (or next to the literal's
    end) turned into `%`. It matches every row the literal matches (and some more,
    which the check drops), and it leaves out the trigrams pg_trgm makes of a word's
    edges (`"  c"`, `" co"`, `"ig "` of `.config/`), the most common trigrams of any
    text, so the index intersects the short posting lists of the words' inner trigrams
    only. A word of one or two
    characters has no inner trigram, so its edges and separators are kept."""
    parts = _TRIGRAM_WORD.split(literal)  # separator, word, separator, ..., separator
    separators, words = parts[0::2], parts[1::2]
    pieces = ["%"]  # "%" is a wildcard, every other piece escaped text
    for n, separator in enumerate(separators):
        neighbours = words[max(n - 1, 0) : n + 1]  # the words on either side
        if separator and neighbours and all(len(w) >= TRIGRAM_CHARS for w in neighbours):
            if pieces[-1] != "%":
                pieces.append("%")
        elif separator:
            pieces.append(q.like_escape(separator))
        if n < len(words):
            pieces.append(q.like_escape(words[n]))
    if pieces[-1] != "%":
        pieces.append("%")
    return "".join(pieces)
