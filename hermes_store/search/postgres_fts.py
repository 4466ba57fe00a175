"""Search on PostgreSQL: the generated tsvector with its GIN index for words, pg_trgm for
substrings and CJK, and an ILIKE scan, in the roles FTS5, the trigram index and LIKE
play on SQLite (planner.py orders them).

The user's query goes through the same sanitiser as on SQLite, and the FTS5 query it
yields is then read by FTS5's own rules (`reading.parse_fts5`) and rebuilt as a tsquery
from bound parameters; what FTS5 would reject as a syntax error answers nothing here
too. The text normalisation (ASCII punctuation separates words) and the trigram
expression are those of migrations/_pg_search.py, so the indexes serve these queries.
"""

from __future__ import annotations

import re
from functools import lru_cache
from typing import Any

from sqlalchemy import TextClause, text

from ..contract import PG_SEARCH_VECTOR_COLUMN as VECTOR
from ..contract import PG_WORD_PUNCTUATION
from . import query as q
from .backend import Hit, Params, SearchBackend, Snippet
from .common import CONTEXT_CHARS, Filters, decode_preview, oldest_first, ranked_order
from .reading import TRIGRAM_CHARS, Parsed, Term, fold, parse_fts5
from .snippets import substring_snippet, terms_snippet

#: The punctuation the generated search vector splits words at (the shared contract).
PUNCTUATION = PG_WORD_PUNCTUATION
#: The expression the pg_trgm index of revision 0023 covers (migrations/_pg_search.py):
#: a query must spell it the same way for the planner to use the index.
TRIGRAM_TEXT = (
    "(COALESCE(m.content, '') || ' ' || COALESCE(m.tool_name, '') || ' ' "
    "|| COALESCE(m.tool_calls, ''))"
)
_PUNCT_RE = re.compile(r"[!-/:-@\[-`{-~]+")
_UPPER = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"
_COLUMN_TEXTS = tuple(f"COALESCE(m.{c}, '')" for c in ("content", "tool_name", "tool_calls"))


def caseless(term: str) -> bool:
    """True when no character of `term` has a case mapping (CJK, digits, punctuation):
    then `x ILIKE p` and `x LIKE p` match the same rows (lower-casing the text cannot
    produce a character that has no case, nor change one), and LIKE compares bytes where
    ILIKE lower-cases every row first, several times slower on a scan."""
    return all(c.lower() == c == c.upper() for c in term)


def _like_op(term: str) -> str:
    return "LIKE" if caseless(term) else "ILIKE"


def _words(text: str) -> list[str]:
    return [w for w in _PUNCT_RE.sub(" ", text).split() if w]


def _term_sql(term: Term, params: dict[str, Any]) -> str:
    name = f"w{len(params)}"
    if term.prefix:
        words = _words(term.text)
        if not words:
            params[name] = ""
            return "to_tsquery('simple', :" + name + ")"
        quoted = ["'" + w.replace("\\", "\\\\").replace("'", "''") + "'" for w in words]
        params[name] = " <-> ".join(quoted) + ":*"
        return f"to_tsquery('simple', :{name})"
    params[name] = term.text
    return f"phraseto_tsquery('simple', regexp_replace(:{name}, '{PUNCTUATION}', ' ', 'g'))"


def _tsquery_sql(parsed: Parsed, params: dict[str, Any]) -> str:
    """SQL building the tsquery from bound parameters (never from query text)."""
    alternatives = []
    for group in parsed:
        parts = []
        for negated, term in group:
            sql = _term_sql(term, params)
            parts.append(f"!!({sql})" if negated else f"({sql})")
        alternatives.append("(" + " && ".join(parts) + ")")
    return "(" + " || ".join(alternatives) + ")"


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


class PostgresSearch(SearchBackend):
    dialect = "postgresql"
    word_route = "tsvector"
    # the window is read row by row (see _messages): ILIKE over a row's text costs ~3 us
    literal_window = 1_024

    def _run(self, sql: str, filters: Filters, params: dict[str, Any]) -> list[Any]:
        # No savepoint: the SQLite routes need one because they catch FTS5 errors and fall
        # back to another route in the same transaction; nothing here catches (the query
        # is validated first and every value is bound), and a SAVEPOINT/RELEASE pair is
        # two more round trips per search on a server.
        statement = filters.statement(sql)
        return list(self.conn.execute(statement, {**filters.params, **params}).mappings())

    def word_hits(
        self, sanitized: str, filters: Filters, sort: str | None, limit: int, offset: int
    ) -> list[Hit]:
        parsed = parse_fts5(sanitized)
        params: dict[str, Any] = {}
        query_sql = _tsquery_sql(parsed, params)
        sql = _select(
            filters,
            f"m.{VECTOR} @@ hq.query",
            _order(sort),
            rank=f"ts_rank_cd(m.{VECTOR}, hq.query)",
            source=f"(SELECT {query_sql} AS query) AS hq, ",
        )
        rows = self._run(sql, filters, {**params, "limit": limit, "offset": offset})
        terms = [term for group in parsed for negated, term in group if not negated]
        return [_hit(r, terms_snippet(decode_preview(r["content"]), terms)) for r in rows]

    def substring_hits(
        self, tokens: list[str], filters: Filters, sort: str | None, limit: int, offset: int
    ) -> list[Hit] | None:
        """Every token a case-insensitive substring of the row's three columns
        (operators as FTS5 reads them), non-tool rows only, as the v23 trigram index."""
        if filters.wants_tool_rows:
            return None
        params: dict[str, Any] = {}
        alternatives: list[list[str]] = [[]]
        negate = False
        for token in tokens:
            if token in q.OPERATORS:
                if token == "OR":
                    alternatives.append([])
                negate = token == "NOT"
                continue
            name = f"p{len(params)}"
            params[name] = q.like_pattern(token.strip('"'))
            clause = f"{TRIGRAM_TEXT} {_like_op(token)} :{name} ESCAPE '\\'"
            alternatives[-1].append(f"NOT ({clause})" if negate else clause)
            negate = False
        groups = [" AND ".join(g) for g in alternatives if g]
        if not groups:
            return None
        where = " OR ".join(f"({g})" for g in groups)
        order = "m.timestamp ASC" if oldest_first(sort) else "m.timestamp DESC"
        sql = _select(filters, f"m.role <> 'tool' AND ({where})", f"{order}, m.id DESC")
        rows = self._run(sql, filters, {**params, "limit": limit, "offset": offset})
        needles = [t.strip('"') for t in q.terms(tokens)]
        return [_hit(r, substring_snippet(decode_preview(r["content"]), needles)) for r in rows]

    def like_operator(self, term: str) -> str:
        return _like_op(term)

    def scan(self, where: str, filters: Filters, params: Params, snippet: Snippet) -> list[Hit]:
        sql = _select(filters, f"({where})", "m.timestamp DESC, m.id DESC")
        return [_hit(r, snippet(r["content"])) for r in self._run(sql, filters, params)]

    # --- id sets for the literal tier -------------------------------------------------------

    def word_ids(self, terms: list[Term], params: dict[str, Any], *, floor: bool) -> str:
        query_sql = _tsquery_sql([[(False, term) for term in terms]], params)
        return f"SELECT m.id FROM {_messages(floor)} WHERE m.{VECTOR} @@ {query_sql}"  # noqa: S608

    def attach_context(self, hits: list[Hit]) -> None:
        # the lateral join the routes' own statements use, for hits found elsewhere
        if not hits:
            return
        sql = f"SELECT m.id, ctx.* FROM messages AS m{_CONTEXT} WHERE m.id = ANY(:ids)"  # noqa: S608
        rows = self.conn.execute(_context_by_id(sql), {"ids": [h["id"] for h in hits]}).all()
        found = {hit_id: _context(roles, contents) for hit_id, roles, contents in rows}
        for hit in hits:
            hit["context"] = found.get(hit["id"], [])

    def literal_ids(
        self, literal: str, params: Params, *, trigram: bool, words: bool, floor: bool
    ) -> str:
        n = len(params)
        params[f"lit{n}"] = fold(literal)
        params[f"pat{n}"] = q.like_pattern(literal)
        like, refine = _contains(literal, f"lit{n}", f"pat{n}")
        vouched = []  # the rows an index vouches for (the module docstring of literal.py)
        if trigram:
            # the partial index's predicate and expression: pg_trgm's index serves it
            vouched.append("m.role <> 'tool'")
        if words:
            phrase = _term_sql(Term(literal, prefix=False, phrase=True), params)
            tool_rows = " AND m.role = 'tool'" if trigram else ""
            vouched.append(f"m.{VECTOR} @@ {phrase}{tool_rows}")
        if not vouched and len(literal) >= TRIGRAM_CHARS:
            vouched.append("m.role <> 'tool'")
        if floor:
            # the window is read once, the text tested once per row
            scope = f" AND ({' OR '.join(vouched)})" if vouched else ""
            return f"SELECT m.id FROM {_messages(floor)} WHERE {like}{scope}{refine}"  # noqa: S608
        # one SELECT per index, each served by it
        return " UNION ".join(
            f"SELECT m.id FROM messages AS m WHERE {v} AND {like}{refine}"  # noqa: S608
            for v in vouched or ["TRUE"]
        )


def _messages(floor: bool) -> str:
    """The rows an id set is taken from: with `floor`, the window of the newest ids,
    read row by row. OFFSET 0 keeps the planner from reaching for pg_trgm's index, whose
    selectivity estimate for a long pattern is far too low: it would fetch and recheck
    every candidate in the table to keep the few in the window."""
    return "(SELECT * FROM messages WHERE id > :floor OFFSET 0) AS m" if floor else "messages AS m"


#: The only characters whose lowercase is an ASCII letter (Unicode's case mappings):
#: U+0130 (dotted capital I -> i) and U+212A (KELVIN SIGN -> k).
_LOWER_TO_ASCII = "\u0130\u212a"
_LOWER_TO_ASCII_SQL = " || ".join(f"chr({ord(c)})" for c in _LOWER_TO_ASCII)
_NOT_ASCII_SQL = " || ".join("chr(65533)" for _ in _LOWER_TO_ASCII)  # U+FFFD


def _folds_into_ascii(literal: str) -> bool:
    return any(c in literal for c in _LOWER_TO_ASCII)


def _ascii_folded(text: str, literal: str) -> str:
    """`text` with ASCII letters folded, as far as finding an ASCII `literal` in it goes:
    lower() once the two characters it would fold into ASCII letters are replaced by a
    non-ASCII one (about 6x cheaper than translate() over the alphabet, which scans it
    per character). A literal holding other characters needs the exact fold."""
    if literal.isascii():
        return f"lower(translate({text}, {_LOWER_TO_ASCII_SQL}, {_NOT_ASCII_SQL}))"
    return f"translate({text}, '{_UPPER}', '{_UPPER.lower()}')"


def _contains(literal: str, needle: str, pattern: str) -> tuple[str, str]:
    """SQL for "the row's text contains :needle by `reading.fold`", in two parts: a
    (I)LIKE over TRIGRAM_TEXT, which pg_trgm's index serves, and what refines it. The
    three columns are searched as one (TRIGRAM_TEXT joins them with spaces, which a
    literal without whitespace cannot span), else one by one in the refinement. A
    caseless literal is a plain LIKE. Otherwise ILIKE (every locale folds ASCII letters:
    a superset) decides for a row of ASCII text, and `_ascii_folded` for any other row."""
    like = f"{TRIGRAM_TEXT} {_like_op(literal)} :{pattern} ESCAPE '\\'"
    spans_columns = any(c.isspace() for c in literal)
    texts = list(_COLUMN_TEXTS) if spans_columns else [TRIGRAM_TEXT]
    if caseless(literal):
        if not spans_columns:
            return like, ""
        checks = [f"{t} LIKE :{pattern} ESCAPE '\\'" for t in texts]
    else:
        # ILIKE decides alone for a row of ASCII text, unless the literal holds one of the
        # characters that lowercase to an ASCII letter (ILIKE would match `k` for U+212A)
        ilike_decides = not _folds_into_ascii(literal)
        checks = [
            (f"{t} ILIKE :{pattern} ESCAPE '\\' AND " if spans_columns else "")
            + (f"(octet_length({t}) = char_length({t}) OR " if ilike_decides else "(")
            + f"strpos({_ascii_folded(t, literal)}, :{needle}) > 0)"
            for t in texts
        ]
    return like, " AND (" + " OR ".join(f"({c})" for c in checks) + ")"
