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

WORD_INDEX_CHARS = 100_000
PUNCTUATION = "[!-/:-@\\[-`{-~]+"


def _vector(text_sql: str) -> str:
    return (
        "to_tsvector('simple'::regconfig, regexp_replace("
        f"left({text_sql}, {WORD_INDEX_CHARS}), '{PUNCTUATION}', ' ', 'g'))"
    )


# v1 to v10: content only (layout L1).
L1_TEXT = "COALESCE(content, '')"
V1 = (
    "ALTER TABLE messages ADD COLUMN IF NOT EXISTS search_vector tsvector "
    f"GENERATED ALWAYS AS ({_vector(L1_TEXT)}) STORED",
    "CREATE INDEX IF NOT EXISTS idx_messages_search_vector ON messages USING gin (search_vector)",
)

# v11 on: content, tool name and tool calls (layouts L3 and v23).
L3_TEXT = (
    "COALESCE(content, '') || ' ' || COALESCE(tool_name, '') || ' ' || COALESCE(tool_calls, '')"
)
V11 = (
    "DROP INDEX IF EXISTS idx_messages_search_vector",
    "ALTER TABLE messages DROP COLUMN IF EXISTS search_vector",
    "ALTER TABLE messages ADD COLUMN search_vector tsvector "
    f"GENERATED ALWAYS AS ({_vector(L3_TEXT)}) STORED",
    "CREATE INDEX IF NOT EXISTS idx_messages_search_vector ON messages USING gin (search_vector)",
)
V11_DOWN = (
    "DROP INDEX IF EXISTS idx_messages_search_vector",
    "ALTER TABLE messages DROP COLUMN IF EXISTS search_vector",
    *V1,
)

# v10 to v22: a trigram index over content of every row.
V10_TRIGRAM = (
    "CREATE EXTENSION IF NOT EXISTS pg_trgm",
    "CREATE INDEX IF NOT EXISTS idx_messages_content_trgm ON messages "
    "USING gin (content gin_trgm_ops)",
)
V10_TRIGRAM_DOWN = ("DROP INDEX IF EXISTS idx_messages_content_trgm",)

# v23: the trigram index covers the three columns of non-tool rows only (tool output was
# about 90 % of message bytes and rarely what people search for by substring).
V23_TRIGRAM = (
    "DROP INDEX IF EXISTS idx_messages_content_trgm",
    f"CREATE INDEX IF NOT EXISTS idx_messages_trgm ON messages USING gin (({L3_TEXT}) "
    "gin_trgm_ops) WHERE role <> 'tool'",
)
V23_TRIGRAM_DOWN = ("DROP INDEX IF EXISTS idx_messages_trgm", *V10_TRIGRAM[1:])

# json_valid/json_extract have no total PostgreSQL equivalent before 16 (a cast of
# malformed text raises), so model_config is read through this function, which answers
# NULL for anything that is not a JSON object, as the SQLite expressions answer NULL.
JSON_OBJECT_FUNCTION = """CREATE OR REPLACE FUNCTION hermes_json_object(doc text)
RETURNS jsonb LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE AS $$
BEGIN
    IF doc IS NULL OR left(ltrim(doc), 1) <> '{' THEN
        RETURN NULL;
    END IF;
    RETURN doc::jsonb;
EXCEPTION WHEN others THEN
    RETURN NULL;
END
$$"""
JSON_OBJECT_FUNCTION_DOWN = "DROP FUNCTION IF EXISTS hermes_json_object(text)"

#: Columns and indexes PostgreSQL has beyond the models (kept out of drift checks).
EXTRA_COLUMNS = {("messages", "search_vector")}
EXTRA_INDEXES = {"idx_messages_search_vector", "idx_messages_content_trgm", "idx_messages_trgm"}
