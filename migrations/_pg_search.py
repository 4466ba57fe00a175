"""PostgreSQL's counterpart of the FTS5 layouts, frozen per revision. Never edit a
released statement: a fix is a new revision.

Word search: a generated, stored `tsvector` column over the same text the FTS5 index of
that revision covers, with a GIN index. A generated column is consistent with its row by
construction, so PostgreSQL needs no triggers, no markers and no backfill. The text is
normalised like FTS5's unicode61 tokenizer splits it (every ASCII punctuation character
separates words: `foo.bar` is `foo` and `bar`), with the `simple` configuration (lower
case, no stemming, no stop words, like unicode61). A tsvector cannot exceed 1 MB, so
only the first 100,000 characters of a message are word-indexed (at most about 9 bytes
of tsvector per character); the trigram index covers the whole text.

Substring and CJK search: pg_trgm's GIN operator class, used by ILIKE.

The search backend (hermes_store/search/postgres_fts.py) spells the same expressions;
tests check that its queries use these indexes.
"""

from __future__ import annotations

from hermes_store.contract import (
    PG_CONTENT_TRGM_INDEX,
    PG_JSON_OBJECT_FUNCTION,
    PG_SEARCH_VECTOR_COLUMN,
    PG_SEARCH_VECTOR_INDEX,
    PG_TRGM_INDEX,
    PG_WORD_INDEX_CHARS,
    PG_WORD_PUNCTUATION,
)

_COLUMN, _INDEX = PG_SEARCH_VECTOR_COLUMN, PG_SEARCH_VECTOR_INDEX


def _vector(text_sql: str) -> str:
    return (
        "to_tsvector('simple'::regconfig, regexp_replace("
        f"left({text_sql}, {PG_WORD_INDEX_CHARS}), '{PG_WORD_PUNCTUATION}', ' ', 'g'))"
    )


# v1 to v10: content only (layout L1).
L1_TEXT = "COALESCE(content, '')"
V1 = (
    f"ALTER TABLE messages ADD COLUMN IF NOT EXISTS {_COLUMN} tsvector "
    f"GENERATED ALWAYS AS ({_vector(L1_TEXT)}) STORED",
    f"CREATE INDEX IF NOT EXISTS {_INDEX} ON messages USING gin ({_COLUMN})",
)

# v11 on: content, tool name and tool calls (layouts L3 and v23).
L3_TEXT = (
    "COALESCE(content, '') || ' ' || COALESCE(tool_name, '') || ' ' || COALESCE(tool_calls, '')"
)
V11 = (
    f"DROP INDEX IF EXISTS {_INDEX}",
    f"ALTER TABLE messages DROP COLUMN IF EXISTS {_COLUMN}",
    f"ALTER TABLE messages ADD COLUMN {_COLUMN} tsvector "
    f"GENERATED ALWAYS AS ({_vector(L3_TEXT)}) STORED",
    f"CREATE INDEX IF NOT EXISTS {_INDEX} ON messages USING gin ({_COLUMN})",
)
V11_DOWN = (
    f"DROP INDEX IF EXISTS {_INDEX}",
    f"ALTER TABLE messages DROP COLUMN IF EXISTS {_COLUMN}",
    *V1,
)

# v10 to v22: a trigram index over content of every row.
V10_TRIGRAM = (
    "CREATE EXTENSION IF NOT EXISTS pg_trgm",
    f"CREATE INDEX IF NOT EXISTS {PG_CONTENT_TRGM_INDEX} ON messages "
    "USING gin (content gin_trgm_ops)",
)
V10_TRIGRAM_DOWN = (f"DROP INDEX IF EXISTS {PG_CONTENT_TRGM_INDEX}",)

# v23: the trigram index covers the three columns of non-tool rows only (tool output was
# about 90 % of message bytes and rarely what people search for by substring).
V23_TRIGRAM = (
    f"DROP INDEX IF EXISTS {PG_CONTENT_TRGM_INDEX}",
    f"CREATE INDEX IF NOT EXISTS {PG_TRGM_INDEX} ON messages USING gin (({L3_TEXT}) "
    "gin_trgm_ops) WHERE role <> 'tool'",
)
V23_TRIGRAM_DOWN = (f"DROP INDEX IF EXISTS {PG_TRGM_INDEX}", *V10_TRIGRAM[1:])

# json_valid/json_extract have no total PostgreSQL equivalent before 16 (a cast of
# malformed text raises), so model_config is read through this function, which answers
# NULL for anything that is not a JSON object, as the SQLite expressions answer NULL.
JSON_OBJECT_FUNCTION = f"""CREATE OR REPLACE FUNCTION {PG_JSON_OBJECT_FUNCTION}(doc text)
RETURNS jsonb LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE AS $$
BEGIN
    IF doc IS NULL OR left(ltrim(doc), 1) <> '{{' THEN
        RETURN NULL;
    END IF;
    RETURN doc::jsonb;
EXCEPTION WHEN others THEN
    RETURN NULL;
END
$$"""
JSON_OBJECT_FUNCTION_DOWN = f"DROP FUNCTION IF EXISTS {PG_JSON_OBJECT_FUNCTION}(text)"
