"""Names the runtime and the revisions share: frozen, immutable once shipped.

DO NOT CHANGE OR REMOVE A VALUE HERE ONCE A RELEASE HAS SHIPPED IT (MLflow keeps its
shared schema modules under the same rule, for the same reason). Every name below is
written into databases: tables, triggers, indexes, columns and `state_meta` keys that
files and servers carry for years, that released revisions create and look for, and that
the original Hermes code (and older hermes-store processes on the same file) read by
exactly these spellings. Renaming one here would make the runtime stop finding what the
revisions made, and the frozen revisions stop recognising what earlier releases made.
A change is a new revision that moves the database from the old name to a new one, plus
a new constant beside the old one; this module only ever grows.

The revisions import this module (never the ORM models); so do `migrate`, `adoption`,
`copy`, `search.layout` and `repositories._dialect`.
"""

from __future__ import annotations

from typing import Final

# --- Alembic bookkeeping -------------------------------------------------------------------

#: hermes-store's own version table (`schema_version` stays the original's).
VERSION_TABLE: Final = "hermes_store_version"

#: Keys of `alembic.config.Config.attributes` that `hermes_store.migrate` sets and the
#: revisions read (through migrations/_ops.py): whether revision 0023 follows in the same
#: run, and the Hermes home the database belongs to.
FTS_REBUILT_LATER_ATTR: Final = "hermes_fts_rebuilt_later"
HERMES_HOME_ATTR: Final = "hermes_home"

#: pg_advisory_xact_lock key every upgrade on PostgreSQL takes ("hermesmg" as 64 bits).
PG_MIGRATION_LOCK: Final = 0x6865726D65736D67

# --- SQLite FTS5 objects (docs/reference/schema.md 5 and 6) -------------------------------

FTS_TABLE: Final = "messages_fts"
FTS_TRIGRAM_TABLE: Final = "messages_fts_trigram"
#: The view the v23 trigram index reads (non-tool rows only).
FTS_TRIGRAM_VIEW: Final = "messages_fts_trigram_src"
#: The optional third index (a tokenizer hermes-store does not load).
FTS_CJK_TABLE: Final = "messages_fts_cjk"

#: The original counts these six triggers by name.
FTS_BASE_TRIGGERS: Final = ("messages_fts_insert", "messages_fts_delete", "messages_fts_update")
FTS_TRIGRAM_TRIGGERS: Final = (
    "messages_fts_trigram_insert",
    "messages_fts_trigram_delete",
    "messages_fts_trigram_update",
)
FTS_TRIGGERS: Final = FTS_BASE_TRIGGERS + FTS_TRIGRAM_TRIGGERS
FTS_CJK_TRIGGERS: Final = (
    "messages_fts_cjk_insert",
    "messages_fts_cjk_delete",
    "messages_fts_cjk_update",
)

#: The shadow tables FTS5 keeps for a virtual table `<name>` as `<name>_<suffix>`.
FTS5_SHADOW_SUFFIXES: Final = ("data", "idx", "content", "docsize", "config")
#: What a demoted legacy index's shadow tables are renamed to (the original's prefix).
FTS_TRASH_PREFIX: Final = "fts_v22_trash_"

# --- state_meta keys of the FTS bookkeeping (docs/reference/schema.md 5.3) ----------------

META_FTS_HIGH_WATER: Final = "fts_rebuild_high_water"
META_FTS_PROGRESS: Final = "fts_rebuild_progress"
META_FTS_STORAGE_VERSION: Final = "fts_storage_version"
META_FTS_OPTIMIZE_AVAILABLE: Final = "fts_optimize_available"
META_FTS_CJK_STALE: Final = "fts_cjk_stale"
#: They describe the index of one SQLite file, so a copy neither copies nor compares them.
META_FTS_LOCAL_KEYS: Final = frozenset(
    {
        META_FTS_HIGH_WATER,
        META_FTS_PROGRESS,
        META_FTS_STORAGE_VERSION,
        META_FTS_OPTIMIZE_AVAILABLE,
        META_FTS_CJK_STALE,
    }
)

# --- PostgreSQL search machinery (migrations/_pg_search.py) -------------------------------

#: The generated tsvector column on messages, and its GIN index.
PG_SEARCH_VECTOR_COLUMN: Final = "search_vector"
PG_SEARCH_VECTOR_INDEX: Final = "idx_messages_search_vector"
#: pg_trgm indexes: over content of every row (v10 to v22), over the v23 text of
#: non-tool rows (v23).
PG_CONTENT_TRGM_INDEX: Final = "idx_messages_content_trgm"
PG_TRGM_INDEX: Final = "idx_messages_trgm"
#: Only the first this many characters of a message are word-indexed (a tsvector is
#: limited to 1 MB).
PG_WORD_INDEX_CHARS: Final = 100_000
#: Every ASCII punctuation character separates words, as FTS5's unicode61 splits them.
PG_WORD_PUNCTUATION: Final = "[!-/:-@\\[-`{-~]+"
#: NULL unless its text argument is a JSON object (revision 0016).
PG_JSON_OBJECT_FUNCTION: Final = "hermes_json_object"

#: What PostgreSQL has beyond the models, kept out of drift checks and whole-row reads.
PG_SEARCH_COLUMNS: Final = frozenset({("messages", PG_SEARCH_VECTOR_COLUMN)})
PG_SEARCH_INDEXES: Final = frozenset(
    {PG_SEARCH_VECTOR_INDEX, PG_CONTENT_TRGM_INDEX, PG_TRGM_INDEX}
)

# --- hermes-store's own tables and revisions ----------------------------------------------

#: Every table hermes-store adds beyond the upstream v23 schema carries this prefix, as
#: its version table does: the original ignores tables it does not know, the reference
#: schema comparison (docs/reference/README.md 2, rule 1) leaves them out, and `check`
#: judges them against the project's own models.
OWN_TABLE_PREFIX: Final = "hermes_store_"

#: Appends made with an idempotency key: (session_id, key) -> the message ids the first
#: call stored (revision hs0001). Rows go with their session (ON DELETE CASCADE).
IDEMPOTENCY_TABLE: Final = "hermes_store_idempotency_keys"

# --- the change feed and turn fencing (revision hs0002) -----------------------------------

#: One row per change to sessions, messages and usage, in commit order: `position` is the
#: cursor outside tools resume from. Written only by triggers, so writes of the original
#: Hermes code on the same file are in it too.
CHANGES_TABLE: Final = "hermes_store_changes"
#: PostgreSQL only: the changes of a transaction before its commit gives them positions
#: (identity values commit out of order; positions handed out at commit do not).
CHANGES_PENDING_TABLE: Final = "hermes_store_changes_pending"
#: name -> integer: the feed's counters (FEED_* keys below).
FEED_STATE_TABLE: Final = "hermes_store_feed_state"
#: The last position handed out (PostgreSQL; SQLite's AUTOINCREMENT keeps its own).
FEED_LAST_POSITION: Final = "last_position"
#: Every position at or below this one has been trimmed: an older cursor has expired.
FEED_TRIMMED_THROUGH: Final = "trimmed_through"
#: How many of the newest changes the database keeps at least (trimmed in steps of
#: FEED_TRIM_EVERY positions, by the triggers themselves).
FEED_RETENTION_ROWS: Final = "retention_rows"
FEED_TRIM_EVERY: Final = 1000
#: The NOTIFY channel a PostgreSQL commit with changes signals (payload: last position).
FEED_CHANNEL: Final = "hermes_store_changes"
#: Every trigger and function of the feed is named with this prefix.
FEED_OBJECT_PREFIX: Final = "hermes_store_feed_"
#: Read-only views of sessions and messages whose columns stay as they are while the
#: v23 tables change; a change to them is a new version (`_v2_`) beside the old one.
SESSIONS_VIEW_V1: Final = "hermes_store_v1_sessions"
MESSAGES_VIEW_V1: Final = "hermes_store_v1_messages"
#: A session's turn lease: holder, fencing token (grows with every grant), expiry.
TURNS_TABLE: Final = "hermes_store_turns"

# --- per-turn reads (revision hs0005) --------------------------------------------------

#: messages(session_id, id): a conversation in id order, its newest rows newest first.
MESSAGES_SESSION_ID_INDEX: Final = "hermes_store_messages_session_id"
#: session_id -> last_active (its newest message's timestamp, else its started_at), kept
#: by triggers on sessions and messages; what a listing by last activity walks.
ACTIVITY_TABLE: Final = "hermes_store_session_activity"
ACTIVITY_INDEX: Final = "hermes_store_session_activity_last_active"
#: Every trigger and function that keeps ACTIVITY_TABLE is named with this prefix.
ACTIVITY_OBJECT_PREFIX: Final = "hermes_store_activity_"
#: PostgreSQL: one append in one call (revision hs0005), and the SQLSTATEs (class HS, the
#: project's) of its refusals: a live lease of another holder, no such session, a session
#: closed by compression.
APPEND_FUNCTION: Final = "hermes_store_append_message"
APPEND_BUSY: Final = "HS001"
APPEND_MISSING: Final = "HS002"
APPEND_CLOSED: Final = "HS003"
# --- turn bounds and the feed per statement (revision hs0006) -------------------------

#: hermes_store_turns: the seconds the last grant or renewal asked for; a lease is never
#: judged to last longer than that from the moment it is read, whatever clock wrote it.
TURNS_TTL_COLUMN: Final = "ttl"
#: PostgreSQL: the deferred constraint trigger that numbers a transaction's changes at
#: commit (holding the feed's counter lock until then); `SET CONSTRAINTS` names it.
FEED_STAMP_TRIGGER: Final = "hermes_store_feed_stamp"
#: PostgreSQL: the CHANGES_PENDING_TABLE column that is true on the first change of a
#: capturing statement, the only row that queues FEED_STAMP_TRIGGER.
FEED_PENDING_STAMPS_COLUMN: Final = "stamps"
#: Tables that describe one database's own history, never copied to another database
#: (the target's triggers write its own feed as the copy inserts rows).
LOCAL_TABLES: Final = frozenset({CHANGES_TABLE, CHANGES_PENDING_TABLE, FEED_STATE_TABLE})
#: Every table a copy leaves to the target's triggers: LOCAL_TABLES and, from revision
#: hs0005, the activity table (kept by triggers as the copy inserts sessions and messages).
NOT_COPIED_TABLES: Final = LOCAL_TABLES | {ACTIVITY_TABLE}

# --- trash and tags (revision hs0007) ---------------------------------------------------

#: One row per trashed session tree: its root session's id, title, counts, when it was
#: trashed and when it may be emptied. The rows themselves are in TRASH_ROWS_TABLE.
TRASH_TABLE: Final = "hermes_store_trash"
TRASH_EXPIRES_INDEX: Final = "hermes_store_trash_expires_at"
TRASH_SESSION_INDEX: Final = "hermes_store_trash_session_id"
#: The trashed rows (sessions, messages, usage, tags, idempotency keys), one JSON text
#: each, in the order a restore inserts them; they go with their trash entry.
TRASH_ROWS_TABLE: Final = "hermes_store_trash_rows"
#: (session_id, tag): any number of tags per session; they go with their session.
TAGS_TABLE: Final = "hermes_store_session_tags"
TAGS_TAG_INDEX: Final = "hermes_store_session_tags_tag"

# --- Google ADK sessions (revision hs0008) -------------------------------------------

#: An ADK session, keyed as ADK keys it (app_name, user_id, id), with its session-scoped
#: state, its times and the revision that stale-session detection compares; its events
#: are the messages of the hermes-store session `session_id` names.
ADK_SESSIONS_TABLE: Final = "hermes_store_adk_sessions"
#: app_name -> the state shared by every session of the app (ADK's `app:` keys).
ADK_APP_STATES_TABLE: Final = "hermes_store_adk_app_states"
#: (app_name, user_id) -> the state shared by a user's sessions (ADK's `user:` keys).
ADK_USER_STATES_TABLE: Final = "hermes_store_adk_user_states"
#: messages.display_kind of a message that holds an ADK event (the event's JSON is its
#: display_metadata).
ADK_EVENT_KIND: Final = "adk_event"
