"""Search on PostgreSQL: the generated tsvector with its GIN index for words, pg_trgm for
substrings and CJK, and an ILIKE scan, in the roles FTS5, the trigram index and LIKE
play on SQLite (planner.py orders them).

The user's query goes through the same sanitiser as on SQLite, and the FTS5 query it
yields is then read by FTS5's own rules (`query.parse_fts5`) and rebuilt as a tsquery
from bound parameters; what FTS5 would reject as a syntax error answers nothing here
too. The text normalisation (ASCII punctuation separates words) and the trigram
expression are those of migrations/_pg_search.py, so the indexes serve these queries.
"""

from __future__ import annotations

import math
import re
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, TypeVar

from sqlalchemy import TextClause, text
from sqlalchemy.exc import DBAPIError

from ..contract import PG_SEARCH_VECTOR_COLUMN as VECTOR
from ..contract import PG_WORD_PUNCTUATION
from . import limits
from . import query as q
from .backend import (
    TRANSACTION_ENDS_WITH_SEARCH,
    Hit,
    IndexMethod,
    Params,
    SearchBackend,
    Snippet,
)
from .common import (
    CONTEXT_CHARS,
    Edge,
    Filters,
    decode_preview,
    id_window,
    oldest_first,
    ranked_order,
)
from .index_method import cached_pg_index_method, pg_index_method
from .query import TRIGRAM_CHARS, Parsed, QuerySyntaxError, Reading, SearchQuery, Term
from .snippets import substring_snippet, terms_snippet

#: The punctuation the generated search vector splits words at (the shared contract).
PUNCTUATION = PG_WORD_PUNCTUATION
#: The expression the pg_trgm index of revision 0023 covers (migrations/_pg_search.py):
#: a query must spell it the same way for the planner to use the index.
TRIGRAM_TEXT = (
    "(COALESCE(m.content, '') || ' ' || COALESCE(m.tool_name, '') || ' ' "
    "|| COALESCE(m.tool_calls, ''))"
)
#: Above every message id: RUM orders by the distance to it, a float8, exact below 2**53.
_NEWEST_ID = 2**53
_PUNCT_RE = re.compile(r"[!-/:-@\[-`{-~]+")
_T = TypeVar("_T")
_COLUMN_TEXTS = tuple(f"COALESCE(m.{c}, '')" for c in ("content", "tool_name", "tool_calls"))


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


def _term_sql(term: Term, params: dict[str, Any]) -> str:
    name = f"w{len(params)}"
    if term.prefix:
        words = _words(term.text)
        if not words:
            params[name] = ""
            return "to_tsquery('simple', :" + name + ")"
        params[name] = " <-> ".join(_quoted(words)) + ":*"
        return f"to_tsquery('simple', :{name})"
    params[name] = term.text
    return f"phraseto_tsquery('simple', regexp_replace(:{name}, '{PUNCTUATION}', ' ', 'g'))"


def _words_sql(term: Term, params: dict[str, Any]) -> str:
    """The AND of `term`'s words (a prefix on the last one for a prefix term): every row
    holding the term as a phrase holds them, in any order."""
    name = f"w{len(params)}"
    if term.prefix and _words(term.text):
        params[name] = " & ".join(_quoted(_words(term.text))) + ":*"
        return f"to_tsquery('simple', :{name})"
    params[name] = term.text
    return f"plainto_tsquery('simple', regexp_replace(:{name}, '{PUNCTUATION}', ' ', 'g'))"


def _is_phrase(term: Term) -> bool:
    return len(_words(term.text)) > 1


#: A tsquery that matches no row: a lexeme holding a space, which the parser that
#: builds the search vector never makes.
_NO_ROW = "$$' '$$::tsquery"


def _positive(sql: str) -> str:
    """A positive term's tsquery, or one matching no row when the term's text holds no
    word: FTS5 matches nothing for an empty phrase, where PostgreSQL drops an empty
    operand of && (`"..." NOT b` would find every row without b)."""
    return f"(CASE WHEN numnode({sql}) = 0 THEN {_NO_ROW} ELSE {sql} END)"


def _tsquery_sql(parsed: Parsed, params: dict[str, Any], *, loose: bool = False) -> str:
    """SQL building the tsquery from bound parameters (never from query text). `loose`:
    each positive phrase as the AND of its words, a query every row of the exact one
    matches (see _matches_sql)."""
    alternatives = []
    for group in parsed:
        parts = []
        for negated, term in group:
            if negated:
                parts.append(f"!!({_term_sql(term, params)})")
            elif loose and _is_phrase(term):
                parts.append(_positive(_words_sql(term, params)))
            else:
                parts.append(_positive(_term_sql(term, params)))
        alternatives.append("(" + " && ".join(parts) + ")")
    return "(" + " || ".join(alternatives) + ")"


def _matches_sql(parsed: Parsed, params: dict[str, Any]) -> str:
    """The condition "the row `m` matches the tsquery", in the form the word index answers
    quickly. The index holds no positions (RUM's attached id takes their place), so a
    positive phrase is asked of it as the AND of its words, and the row's own vector is
    checked for the query by ts_match_vq (which no index serves): RUM's scan of a phrase
    reads far more than the AND's (31 against 2.7 ms for a window of a three-word
    phrase at 1M rows). Negated terms stay as they are, so the index's query matches
    every row the exact one matches."""
    full = _tsquery_sql(parsed, params)
    if not any(_is_phrase(term) for group in parsed for negated, term in group if not negated):
        return f"m.{VECTOR} @@ {full}"
    loose = _tsquery_sql(parsed, params, loose=True)
    return f"(m.{VECTOR} @@ {loose} AND ts_match_vq(m.{VECTOR}, {full}))"


_SELECT = (
    "SELECT m.id, m.session_id, m.role, m.content, m.timestamp, m.tool_name, "
    "s.source, s.model, s.started_at AS session_started"
)
_MESSAGE_COLUMNS = "m.id, m.session_id, m.role, m.content, m.timestamp, m.tool_name"


def _select(
    filters: Filters, where: str, order: str, *, rank: str | None = None, source: str = ""
) -> str:
    """The page of hits: messages matching `where` (and the filters), in `order`, with
    their session's columns and their context. Every message has its session (foreign
    key), so unless a filter reads the session, the page is cut from messages alone and
    only its rows are joined to sessions (a common word matches thousands of rows)."""
    rank_col = f", {rank} AS rank" if rank else ""
    if filters.reads_sessions:
        page = (
            f"{_SELECT}{rank_col} FROM {source}messages AS m"
            f" JOIN sessions AS s ON s.id = m.session_id WHERE {where}{filters.sql}"
            f" ORDER BY {order} LIMIT :limit OFFSET :offset"
        )
    else:
        inner = (
            f"SELECT {_MESSAGE_COLUMNS}{rank_col} FROM {source}messages AS m"  # noqa: S608
            f" WHERE {where}{filters.sql} ORDER BY {order} LIMIT :limit OFFSET :offset"
        )
        page = (
            f"{_SELECT}{', m.rank' if rank else ''} FROM ({inner}) AS m"
            f" JOIN sessions AS s ON s.id = m.session_id"
        )
    return f"SELECT m.*, ctx.* FROM ({page}) AS m{_CONTEXT} ORDER BY {order}"  # noqa: S608


# The context of each hit of the page, in the search statement itself (the SQLite backend
# asks once more for all hits, which costs nothing in-process but a round trip here): the
# previous message of the session, the hit, the next one, ordered by (timestamp, id) as
# common.attach_context orders them.
_CONTEXT = (
    " CROSS JOIN LATERAL (SELECT array_agg(c.role ORDER BY c.pos) AS context_roles,"
    " array_agg(c.content ORDER BY c.pos) AS context_contents FROM ("
    "(SELECT 0 AS pos, n.role, n.content FROM messages AS n"
    " WHERE n.session_id = m.session_id AND (n.timestamp, n.id) < (m.timestamp, m.id)"
    " ORDER BY n.timestamp DESC, n.id DESC LIMIT 1)"
    " UNION ALL SELECT 1, m.role, m.content"
    " UNION ALL (SELECT 2, n.role, n.content FROM messages AS n"
    " WHERE n.session_id = m.session_id AND (n.timestamp, n.id) > (m.timestamp, m.id)"
    " ORDER BY n.timestamp ASC, n.id ASC LIMIT 1)) AS c) AS ctx"
)


def _order(sort: str | None) -> str:
    return ranked_order(sort, "rank DESC, m.id")


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


@lru_cache(maxsize=1)
def _context_by_id(sql: str) -> TextClause:
    return text(sql)


#: query_canceled: statement_timeout (or a cancel request) stopped the statement
_QUERY_CANCELED = "57014"
# The search's settings, for the rest of its transaction only (set_config's `true`),
# with the values they replace, which the search puts back when it ends (the caller's
# transaction may go on). statement_timeout: the search's limit, never above one the
# session already has (none when :ms is NULL). work_mem: PostgresSearch.work_mem, never
# below the session's own. The OFFSET 0 fence reads the old values before set_config
# changes them; SHOW's form ("2s", "1min") read as an interval gives its milliseconds
# (pg_settings costs half a millisecond).
_SEARCH_SETTINGS = text(
    "SELECT old.setting, old.ms,"
    " set_config('statement_timeout', COALESCE(old.ms::text, old.setting), true),"
    " old.work_mem, set_config('work_mem', CASE WHEN pg_size_bytes(old.work_mem)"
    " < pg_size_bytes(:work_mem) THEN :work_mem ELSE old.work_mem END, true) FROM"
    " (SELECT setting, work_mem, CASE WHEN CAST(:ms AS bigint) IS NULL THEN NULL"
    " WHEN ms > 0 AND ms < CAST(:ms AS bigint) THEN ms"
    " ELSE CAST(:ms AS bigint) END AS ms FROM"
    " (SELECT current_setting('statement_timeout') AS setting,"
    " current_setting('work_mem') AS work_mem, CAST(extract(epoch FROM"
    " CAST(current_setting('statement_timeout') AS interval)) * 1000 AS bigint) AS ms"
    " OFFSET 0) AS now) AS old"
)
_PUT_BACK = text(
    "SELECT set_config('statement_timeout', :ms, true), set_config('work_mem', :work_mem, true)"
)
_SET_LIMIT = text("SELECT set_config('statement_timeout', :ms, true)")
#: the largest statement_timeout PostgreSQL accepts (INT_MAX milliseconds)
_LONGEST_TIMEOUT_MS = 2**31 - 1


def _candidates(where: str, filters: Filters, order: str) -> str:
    """The ids of the first :window rows matching `where` and the filters, in `order`."""
    sessions = " JOIN sessions AS s ON s.id = m.session_id" if filters.reads_sessions else ""
    return (
        f"SELECT m.id FROM messages AS m{sessions} WHERE {where}{filters.sql}"  # noqa: S608
        f" ORDER BY {order} LIMIT :window"
    )


def word_sql(
    fts5: Reading, filters: Filters, sort: str | None, method: IndexMethod
) -> tuple[str, Params]:
    """The word route, bounded (limits.RANK_WINDOW): the newest :window matches of the
    tsquery in id order (oldest first for sort="oldest"), then the page of them by
    ts_rank_cd (by timestamp first for a time sort). With RUM the index hands the
    matches over in id order (`<=|` / `|=>` on the attached id), so the window costs
    what it holds; with GIN every match is found (cheaply: ids only, nothing ranked)
    before the window is kept. Parameters: the tsquery's, :window, :limit, :offset."""
    params: Params = {}
    query_sql = _tsquery_sql(fts5, params)
    oldest = oldest_first(sort)
    if method == "rum":
        walk = "m.id |=> 0" if oldest else f"m.id <=| {_NEWEST_ID}"
    else:
        walk = "m.id ASC" if oldest else "m.id DESC"
    candidates = _candidates(_matches_sql(fts5, params), filters, walk)
    return _ranked_page(query_sql, filters, sort, f"m.id IN ({candidates})"), params


def word_window_sql(fts5: Reading, filters: Filters, *, oldest: bool = False) -> tuple[str, Params]:
    """The ids of the newest :window matches of the tsquery among the newest :span ids
    (the oldest among the oldest with `oldest`), read row by row walking the primary key
    from that end (stopping once :window are found): for a word in a few percent of the
    rows that is a few ten thousand rows whatever the table holds, where the word index
    reads every match (RUM's ordered scan reads the term's whole posting list before it
    hands over the first id). Parameters: the tsquery's, :span, :window."""
    params: Params = {}
    return _span(_matches_sql(fts5, params), filters, oldest=oldest), params


def word_page_sql(fts5: Reading, filters: Filters, sort: str | None) -> tuple[str, Params]:
    """The page, by ts_rank_cd (by timestamp first for a time sort), of the ids :ids a
    window gave. Parameters: the tsquery's, :ids, :limit, :offset."""
    params: Params = {}
    return _ranked_page(_tsquery_sql(fts5, params), filters, sort, "m.id = ANY(:ids)"), params


def word_estimate_sql(fts5: Reading, filters: Filters) -> tuple[str, Params]:
    """The plan of the tsquery's matches (the filters applied), whose estimate of the
    rows is the planner's, from the statistics ANALYZE keeps of each lexeme's frequency
    (EXPLAIN: nothing is read). Parameters: the tsquery's."""
    params: Params = {}
    sessions = " JOIN sessions AS s ON s.id = m.session_id" if filters.reads_sessions else ""
    return (
        f"EXPLAIN (FORMAT JSON) SELECT m.id FROM messages AS m{sessions}"  # noqa: S608
        f" WHERE m.{VECTOR} @@ {_tsquery_sql(fts5, params)}{filters.sql}"
    ), params


#: The plan of the whole table, whose estimate of the rows is the planner's.
TABLE_ESTIMATE_SQL = "EXPLAIN (FORMAT JSON) SELECT id FROM messages"
#: ANALYZE's most common lexemes of the search vector (`most_common_elems`) and the
#: fraction of the rows holding each (`most_common_elem_freqs`, the smallest and largest
#: of those after them): the statistics the planner estimates a tsquery's matches from.
COMMON_WORDS_SQL = (
    "SELECT s.most_common_elems::text::text[] AS words, s.most_common_elem_freqs AS freqs"  # noqa: S608
    " FROM pg_stats AS s JOIN pg_class AS c ON c.oid = to_regclass('messages')"
    " JOIN pg_namespace AS n ON n.oid = c.relnamespace"
    f" WHERE s.schemaname = n.nspname AND s.tablename = c.relname AND s.attname = '{VECTOR}'"
    " AND NOT s.inherited"
)
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
    """The statistics of COMMON_WORDS_SQL's row; None when ANALYZE has kept none."""
    if row is None or not row.words or not row.freqs:
        return None
    words: list[str] = list(row.words)
    freqs = [float(f) for f in row.freqs[: len(words)]]
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


def _ranked_page(query_sql: str, filters: Filters, sort: str | None, where: str) -> str:
    return _select(
        filters,
        where,
        _order(sort),
        rank=f"ts_rank_cd(m.{VECTOR}, hq.query)",
        source=f"(SELECT {query_sql} AS query) AS hq, ",
    )


def _span(where: str, filters: Filters, *, oldest: bool = False) -> str:
    """The ids of the newest :window rows matching `where` among the newest :span ids
    (with `oldest`, the oldest among the oldest), the primary key walked from that end.
    The OFFSET 0 fence keeps the planner from the indexes (which find every match in the
    table before the window's are kept)."""
    sessions = " JOIN sessions AS s ON s.id = m.session_id" if filters.reads_sessions else ""
    span = (
        "id < (SELECT min(id) FROM messages) + :span ORDER BY id ASC"
        if oldest
        else "id > (SELECT max(id) FROM messages) - :span ORDER BY id DESC"
    )
    order = "ASC" if oldest else "DESC"
    return (
        f"SELECT m.id FROM (SELECT * FROM messages WHERE {span} OFFSET 0) AS m"  # noqa: S608
        f"{sessions} WHERE {where}{filters.sql} ORDER BY m.id {order} LIMIT :window"
    )


def _substring_where(tokens: Sequence[str], params: Params) -> str | None:
    """The substring route's condition on the row `m` (operators as FTS5 reads them),
    None when no token is left to look for."""
    alternatives: list[list[str]] = []
    for group in q.or_groups(tokens):
        clauses: list[str] = []
        for token, negated in group:
            name = f"p{len(params)}"
            params[name] = q.like_pattern(token.strip('"'))
            clause = f"{TRIGRAM_TEXT} {_like_op(token)} :{name} ESCAPE '\\'"
            clauses.append(f"NOT ({clause})" if negated else clause)
        alternatives.append(clauses)
    groups = [" AND ".join(g) for g in alternatives if g]
    if not groups:
        return None
    return "m.role <> 'tool' AND (" + " OR ".join(f"({g})" for g in groups) + ")"


def substring_sql(
    tokens: Sequence[str], filters: Filters, sort: str | None, *, fenced: bool = False
) -> tuple[str, Params] | None:
    """The substring route (pg_trgm) over the whole table, bounded (limits.time_window):
    the newest :window matches in id order, then the page of them by timestamp; None
    when no token is left to look for. Parameters: :p0.., :window, :limit, :offset.
    `fenced` (a zero-hit retry whose candidates are known to be few): every match found
    first, behind an OFFSET 0 fence, then the window: the planner guesses a pattern's
    matches from a sample, and for a guess of many (ten patterns OR-ed) walks the
    primary key testing every row instead of asking pg_trgm's index."""
    params: Params = {}
    where = _substring_where(tokens, params)
    if where is None:
        return None
    walk = "m.id ASC" if oldest_first(sort) else "m.id DESC"
    if fenced:
        sessions = " JOIN sessions AS s ON s.id = m.session_id" if filters.reads_sessions else ""
        found = f"SELECT m.id FROM messages AS m{sessions} WHERE {where}{filters.sql} OFFSET 0"  # noqa: S608
        candidates = f"SELECT m.id FROM ({found}) AS m ORDER BY {walk} LIMIT :window"  # noqa: S608
    else:
        candidates = _candidates(where, filters, walk)
    order = "m.timestamp ASC" if oldest_first(sort) else "m.timestamp DESC"
    return _select(filters, f"m.id IN ({candidates})", f"{order}, m.id DESC"), params


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


def substring_probe_sql(tokens: Sequence[str]) -> tuple[str, Params] | None:
    """Among the newest :sample ids, read row by row: the rows read (`sampled`), and the
    candidates pg_trgm's index would hand over to the substring route (`candidates`):
    non-tool rows holding every needle (`_needles`) of the positive tokens of some
    OR-alternative (a negated token narrows nothing the index reads; an alternative
    with no needle is every row). The lower-cased text is made once per row, each
    needle a strpos in it. None when no token is left to look for."""
    params: Params = {}
    alternatives: list[list[str]] = []
    for group in q.or_groups(tokens):
        checks: list[str] = []
        for token, negated in group:
            for needle in [] if negated else _needles(token):
                name = f"n{len(params)}"
                params[name] = needle
                checks.append(f"strpos(m.t, :{name}) > 0")
        alternatives.append(checks)
    if not any(t not in q.OPERATORS for t in tokens):
        return None
    groups = [" AND ".join(g) if g else "true" for g in alternatives]
    candidate = "m.t IS NOT NULL AND (" + " OR ".join(f"({g})" for g in groups) + ")"
    return (
        f"SELECT count(*) AS sampled, count(*) FILTER (WHERE {candidate}) AS candidates"  # noqa: S608
        f" FROM (SELECT CASE WHEN m.role <> 'tool' THEN lower({TRIGRAM_TEXT}) END AS t"
        " FROM messages AS m WHERE m.id > (SELECT max(id) FROM messages) - :sample"
        " OFFSET 0) AS m"
    ), params


def substring_window_sql(
    tokens: Sequence[str], filters: Filters, *, oldest: bool = False
) -> tuple[str, Params] | None:
    """The ids of the newest :window matches of the substring route among the newest
    :span ids, read row by row walking the primary key newest first (stopping once
    :window are found), where pg_trgm's bitmap finds every match in the table before the
    newest are kept; a term in 1 % of the rows fills a window of 64 after about 6,400
    rows (with `oldest`, the oldest among the oldest :span ids). None when no token is
    left."""
    params: Params = {}
    where = _substring_where(tokens, params)
    if where is None:
        return None
    return _span(where, filters, oldest=oldest), params


def substring_page_sql(filters: Filters, *, oldest: bool = False) -> str:
    """The page (by timestamp, newest first; oldest first with `oldest`) of the ids
    :ids a window gave."""
    order = "m.timestamp ASC" if oldest else "m.timestamp DESC"
    return _select(filters, "m.id = ANY(:ids)", f"{order}, m.id DESC")


def scan_sql(where: str, filters: Filters) -> str:
    """A LIKE scan, bounded (limits.time_window): the newest :window rows matching
    `where` in id order (the primary key walked from the end), then the page of them by
    timestamp, newest first."""
    candidates = _candidates(f"({where})", filters, "m.id DESC")
    return _select(filters, f"m.id IN ({candidates})", "m.timestamp DESC, m.id DESC")


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
        old, limit_ms, _, old_work_mem, _ = self.conn.execute(_SEARCH_SETTINGS, settings).one()
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
            self._put_back(old, old_work_mem)
            raise
        self._put_back(old, old_work_mem)

    def index_method(self, *, cached: bool = True) -> IndexMethod:
        return cached_pg_index_method(self.conn) if cached else pg_index_method(self.conn)

    def _put_back(self, statement_timeout: str, work_mem: str) -> None:
        if not self.conn.get_execution_options().get(TRANSACTION_ENDS_WITH_SEARCH):
            self.conn.execute(_PUT_BACK, {"ms": statement_timeout, "work_mem": work_mem})

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

    def _run(self, sql: str, filters: Filters, params: dict[str, Any]) -> list[Any]:
        # No savepoint: the SQLite routes need one because they catch FTS5 errors and fall
        # back to another route in the same transaction; nothing here catches (the query
        # is validated first and every value is bound), and a SAVEPOINT/RELEASE pair is
        # two more round trips per search on a server.
        self.check_time()
        statement = filters.statement(sql)
        return list(self.conn.execute(statement, {**filters.params, **params}).mappings())

    def word_hits(
        self, query: SearchQuery, filters: Filters, sort: str | None, limit: int, offset: int
    ) -> list[Hit]:
        if query.fts5_error is not None:
            raise QuerySyntaxError(query.fts5_error)
        window = limits.rank_window(limit, offset)
        page = {"limit": limit, "offset": offset}
        ids = self._word_window(query, filters, window, oldest=oldest_first(sort))
        if ids is not None:
            sql, params = word_page_sql(query.fts5, filters, sort)
            rows = self._run(sql, filters, {**params, **page, "ids": ids})
        else:
            sql, params = word_sql(query.fts5, filters, sort, self.index_method())
            rows = self._run(sql, filters, {**params, **page, "window": window})
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
        sql, params = word_estimate_sql(query.fts5, filters)
        self.check_time()
        plan = self.conn.execute(filters.statement(sql), {**filters.params, **params}).scalar()
        if not self._walk_pays(estimated_rows(plan), rows, window):
            return None
        sql, params = word_window_sql(query.fts5, filters, oldest=oldest)
        found = self._run(sql, filters, {**params, "span": self.word_span, "window": window})
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
            lambda: estimated_rows(self.conn.execute(text(TABLE_ESTIMATE_SQL)).scalar()),
        )

    def _common_words(self) -> CommonWords | None:
        return self._planner_statistic(
            _COMMON_WORDS_KEY,
            lambda: common_words(self.conn.execute(text(COMMON_WORDS_SQL)).one_or_none()),
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
        if filters.wants_tool_rows:
            return None
        window = limits.time_window(limit, offset)
        page = {"limit": limit, "offset": offset}
        oldest = oldest_first(sort)
        over_budget = self._retry_span(query) if bounded else None
        if over_budget is not None:
            span, estimate = over_budget
            built = substring_window_sql(query.tokens, filters, oldest=oldest)
            if built is None:
                return None
            sql, params = built
            found = self._run(sql, filters, {**params, "span": span, "window": window})
            in_span = [int(row["id"]) for row in found]
            if len(in_span) < window:  # older matches may exist: the span is all that was read
                self.warnings.append(limits.retry_warning(query.text, span, estimate))
            page_sql = substring_page_sql(filters, oldest=oldest)
            rows = self._run(page_sql, filters, {**page, "ids": in_span}) if in_span else []
            return self._substring_page(query, rows)
        # a retry within its budget asks pg_trgm for the whole table at once: few
        # candidates, and a span read row by row would find next to nothing
        ids = None if oldest or bounded else self._substring_window(query, filters, window)
        if ids is not None:
            rows = self._run(substring_page_sql(filters), filters, {**page, "ids": ids})
        else:
            built = substring_sql(query.tokens, filters, sort, fenced=bounded)
            if built is None:
                return None
            sql, params = built
            rows = self._run(sql, filters, {**params, **page, "window": window})
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
        built = substring_probe_sql(query.tokens)
        if built is None:
            return None
        sql, params = built
        self.check_time()
        sampled, candidates = self.conn.execute(
            text(sql), {**params, "sample": limits.RETRY_SAMPLE}
        ).one()
        estimate = self.retry_estimate(int(candidates), int(sampled), self._table_rows())
        if estimate <= limits.RETRY_CHECKS:
            return None
        patterns = max(1, len(q.terms(query.tokens)))
        return max(1, limits.RETRY_CHECKS // patterns), estimate

    def _substring_window(
        self, query: SearchQuery, filters: Filters, window: int
    ) -> list[int] | None:
        """The ids of the newest `window` matches when the newest SUBSTRING_SPAN ids hold
        that many (then they are the newest of the whole table too, and the page is the
        one the whole table gives); None when the span holds fewer (the whole table is
        asked, pg_trgm's bitmap) or there is nothing to look for."""
        built = substring_window_sql(query.tokens, filters)
        if built is None:
            return None
        sql, params = built
        found = self._run(sql, filters, {**params, "span": self.substring_span, "window": window})
        ids = [int(row["id"]) for row in found]
        return ids if len(ids) >= window else None

    def like_operator(self, term: str) -> str:
        return _like_op(term)

    def scan(self, where: str, filters: Filters, params: Params, snippet: Snippet) -> list[Hit]:
        # The newest SUBSTRING_SPAN ids first, read row by row, then the whole table: the
        # planner's estimate of a LIKE pattern's matches comes from a sample of the rows
        # and can swing after an ANALYZE (a 2-character CJK term estimated at 15 rows,
        # 1,164 in the table, got a parallel scan of the whole table sorted by id instead
        # of the primary key walked newest first, several times slower).
        spanned = {**params, "span": self.substring_span}
        found = self._run(_span(f"({where})", filters), filters, spanned)
        ids = [int(row["id"]) for row in found]
        if len(ids) >= params["window"]:
            rows = self._run(substring_page_sql(filters), filters, {**params, "ids": ids})
        else:
            rows = self._run(scan_sql(where, filters), filters, params)
        return [_hit(r, snippet(r["content"])) for r in rows]

    # --- id sets for the literal tier -------------------------------------------------------

    def word_ids(self, terms: list[Term], params: dict[str, Any], *, edge: Edge | None) -> str:
        matches = _matches_sql([[(False, term) for term in terms]], params)
        return f"SELECT m.id FROM {_messages(edge)} WHERE {matches}"  # noqa: S608

    def attach_context(self, hits: list[Hit]) -> None:
        # the lateral join the routes' own statements use, for hits found elsewhere
        if not hits:
            return
        self.check_time()
        sql = f"SELECT m.id, ctx.* FROM messages AS m{_CONTEXT} WHERE m.id = ANY(:ids)"  # noqa: S608
        rows = self.conn.execute(_context_by_id(sql), {"ids": [h["id"] for h in hits]}).all()
        found = {hit_id: _context(roles, contents) for hit_id, roles, contents in rows}
        for hit in hits:
            hit["context"] = found.get(hit["id"], [])

    def literal_ids(
        self, literal: str, params: Params, *, trigram: bool, words: bool, edge: Edge | None
    ) -> str:
        windowed = edge is not None
        condition = _holds_literal(literal, params, trigram=trigram, words=words, window=windowed)
        return f"SELECT m.id FROM {_messages(edge)} WHERE {condition}"  # noqa: S608

    def literal_candidates(
        self, literal: str, params: Params, *, trigram: bool, words: bool, edge: Edge | None
    ) -> tuple[str | None, str | None]:
        if edge:  # the window is an id set, read row by row (_messages)
            return super().literal_candidates(
                literal, params, trigram=trigram, words=words, edge=edge
            )
        # the page's own condition: one bitmap scan of the indexes, each row read once
        # and checked once, and the page cut from it (no id set joined back to messages)
        return None, _holds_literal(literal, params, trigram=trigram, words=words, window=False)

    def literal_page(self, rows: str, where: str, order: str) -> str:
        # Every matching row first (a bitmap scan of the indexes), then the page: without
        # the fence the planner may walk the primary key newest first testing each row,
        # which for a literal that stopped appearing long ago reads most of the table
        # (it guesses how often a pattern matches from a sample of rows).
        found = f"SELECT m.id, m.timestamp FROM {rows} WHERE {where} OFFSET 0"  # noqa: S608
        return f"SELECT m.id FROM ({found}) AS m ORDER BY {order} LIMIT :limit"  # noqa: S608


def _messages(edge: Edge | None) -> str:
    """The rows an id set is taken from: with `edge`, the window of ids at that end of
    the table, read row by row. OFFSET 0 keeps the planner from reaching for pg_trgm's
    index, whose selectivity estimate for a long pattern is far too low: it would fetch
    and recheck every candidate in the table to keep the few in the window."""
    if edge is None:
        return "messages AS m"
    return f"(SELECT * FROM messages WHERE {id_window('id', edge)} OFFSET 0) AS m"  # noqa: S608


def _holds_literal(
    literal: str, params: Params, *, trigram: bool, words: bool, window: bool
) -> str:
    """A condition on the row `m`: its text contains `literal` by `query.fold`, among
    the rows the indexes vouch for (the module docstring of literal.py). Outside the
    window each vouching index is asked in its own OR arm, which PostgreSQL reads as one
    bitmap scan of both, and every row it gives is checked; in the window, read row by
    row, the rows are told apart by role and words and checked, without pg_trgm's
    pattern (it folds case by the database's locale, and adds nothing to the check
    where that folds ASCII letters as query.fold does; a Turkish locale does not)."""
    name = f"pat{len(params)}"
    params[name] = q.like_pattern(literal)
    check = _exact_check(literal, name)
    arms = []
    if trigram and window:
        arms.append("m.role <> 'tool'")
    elif trigram:
        # the partial index's predicate and expression: pg_trgm's index serves the arm
        params[f"idx{name}"] = _index_pattern(literal)
        like = f"{TRIGRAM_TEXT} {_like_op(literal)} :idx{name} ESCAPE '\\'"
        arms.append(f"m.role <> 'tool' AND {like}")
    if words:
        arms.append(_matches_sql([[(False, Term(literal, prefix=False, phrase=True))]], params))
    scope = " OR ".join(f"({arm})" for arm in arms)
    return f"({scope}) AND {check}" if scope else check


def _exact_check(literal: str, pattern: str) -> str:
    """SQL for "the row's content, tool name or tool calls contain :pattern (a LIKE
    pattern of `literal`) by `query.fold`". ILIKE under the "C" collation folds ASCII
    letters and nothing else, which is `query.fold` exactly (under the database's
    collation it may fold more, a superset fit for the index and never the answer).
    Column by column: a literal is not found across two columns, and the columns are
    not joined again for every row."""
    operator = "LIKE" if caseless(literal) else 'COLLATE "C" ILIKE'
    checks = " OR ".join(f"{t} {operator} :{pattern} ESCAPE '\\'" for t in _COLUMN_TEXTS)
    return f"({checks})"


#: a run of characters pg_trgm takes trigrams from (letters and digits)
_TRIGRAM_WORD = re.compile(r"([^\W_]+)")


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
