-- hermes-store schema (sqlite), without hermes_store_* tables
CREATE TABLE async_delegations (
    completed_at REAL,
    delegation_id TEXT,
    delivered_at REAL,
    delivery_attempts INTEGER NOT NULL DEFAULT 0,
    delivery_claim TEXT,
    delivery_claimed_at REAL,
    delivery_state TEXT NOT NULL DEFAULT 'pending',
    dispatched_at REAL NOT NULL,
    event_json TEXT,
    origin_session TEXT NOT NULL,
    origin_ui_session_id TEXT NOT NULL DEFAULT '',
    owner_pid INTEGER,
    owner_started_at INTEGER,
    parent_session_id TEXT,
    result_json TEXT,
    state TEXT NOT NULL,
    task_json TEXT,
    updated_at REAL NOT NULL,
    PRIMARY KEY (delegation_id)
);

CREATE TABLE compression_locks (
    acquired_at REAL NOT NULL,
    expires_at REAL NOT NULL,
    holder TEXT NOT NULL,
    session_id TEXT,
    PRIMARY KEY (session_id)
);

CREATE TABLE gateway_routing (
    entry_json TEXT NOT NULL,
    scope TEXT NOT NULL DEFAULT '',
    session_key TEXT NOT NULL,
    updated_at REAL NOT NULL,
    PRIMARY KEY (scope, session_key)
);

CREATE TABLE messages (
    active INTEGER NOT NULL DEFAULT 1,
    api_content TEXT,
    codex_message_items TEXT,
    codex_reasoning_items TEXT,
    compacted INTEGER NOT NULL DEFAULT 0,
    content TEXT,
    display_kind TEXT,
    display_metadata TEXT,
    effect_disposition TEXT,
    finish_reason TEXT,
    id INTEGER,
    observed INTEGER DEFAULT 0,
    platform_message_id TEXT,
    reasoning TEXT,
    reasoning_content TEXT,
    reasoning_details TEXT,
    role TEXT NOT NULL,
    session_id TEXT NOT NULL,
    timestamp REAL NOT NULL,
    token_count INTEGER,
    tool_call_id TEXT,
    tool_calls TEXT,
    tool_name TEXT,
    PRIMARY KEY (id) AUTOINCREMENT,
    FOREIGN KEY session_id -> sessions(id) ON DELETE NO ACTION ON UPDATE NO ACTION
);

CREATE TABLE messages_fts_config (
    k NOT NULL,
    v,
    PRIMARY KEY (k)
);

CREATE TABLE messages_fts_data (
    block BLOB,
    id INTEGER,
    PRIMARY KEY (id)
);

CREATE TABLE messages_fts_docsize (
    id INTEGER,
    sz BLOB,
    PRIMARY KEY (id)
);

CREATE TABLE messages_fts_idx (
    pgno,
    segid NOT NULL,
    term NOT NULL,
    PRIMARY KEY (segid, term)
);

CREATE TABLE messages_fts_trigram_config (
    k NOT NULL,
    v,
    PRIMARY KEY (k)
);

CREATE TABLE messages_fts_trigram_data (
    block BLOB,
    id INTEGER,
    PRIMARY KEY (id)
);

CREATE TABLE messages_fts_trigram_docsize (
    id INTEGER,
    sz BLOB,
    PRIMARY KEY (id)
);

CREATE TABLE messages_fts_trigram_idx (
    pgno,
    segid NOT NULL,
    term NOT NULL,
    PRIMARY KEY (segid, term)
);

CREATE TABLE schema_version (
    version INTEGER NOT NULL
);

CREATE TABLE session_model_usage (
    actual_cost_usd REAL NOT NULL DEFAULT 0,
    api_call_count INTEGER NOT NULL DEFAULT 0,
    billing_base_url TEXT NOT NULL DEFAULT '',
    billing_mode TEXT NOT NULL DEFAULT '',
    billing_provider TEXT NOT NULL DEFAULT '',
    cache_read_tokens INTEGER NOT NULL DEFAULT 0,
    cache_write_tokens INTEGER NOT NULL DEFAULT 0,
    cost_source TEXT,
    cost_status TEXT,
    estimated_cost_usd REAL NOT NULL DEFAULT 0,
    first_seen REAL,
    input_tokens INTEGER NOT NULL DEFAULT 0,
    last_seen REAL,
    model TEXT NOT NULL,
    output_tokens INTEGER NOT NULL DEFAULT 0,
    reasoning_tokens INTEGER NOT NULL DEFAULT 0,
    session_id TEXT NOT NULL,
    task TEXT NOT NULL DEFAULT '',
    PRIMARY KEY (session_id, model, billing_provider, billing_base_url, billing_mode, task),
    FOREIGN KEY session_id -> sessions(id) ON DELETE CASCADE ON UPDATE NO ACTION
);

CREATE TABLE sessions (
    actual_cost_usd REAL,
    api_call_count INTEGER DEFAULT 0,
    archived INTEGER NOT NULL DEFAULT 0,
    billing_base_url TEXT,
    billing_mode TEXT,
    billing_provider TEXT,
    cache_read_tokens INTEGER DEFAULT 0,
    cache_write_tokens INTEGER DEFAULT 0,
    chat_id TEXT,
    chat_type TEXT,
    compression_failure_cooldown_until REAL,
    compression_failure_error TEXT,
    compression_fallback_streak INTEGER NOT NULL DEFAULT 0,
    compression_ineffective_count INTEGER NOT NULL DEFAULT 0,
    cost_source TEXT,
    cost_status TEXT,
    cwd TEXT,
    display_name TEXT,
    end_reason TEXT,
    ended_at REAL,
    estimated_cost_usd REAL,
    expiry_finalized INTEGER DEFAULT 0,
    git_branch TEXT,
    git_repo_root TEXT,
    handoff_error TEXT,
    handoff_platform TEXT,
    handoff_state TEXT,
    id TEXT,
    input_tokens INTEGER DEFAULT 0,
    message_count INTEGER DEFAULT 0,
    model TEXT,
    model_config TEXT,
    origin_json TEXT,
    output_tokens INTEGER DEFAULT 0,
    parent_session_id TEXT,
    pinned INTEGER NOT NULL DEFAULT 0,
    pricing_version TEXT,
    profile_name TEXT,
    reasoning_tokens INTEGER DEFAULT 0,
    rewind_count INTEGER NOT NULL DEFAULT 0,
    session_key TEXT,
    source TEXT NOT NULL,
    started_at REAL NOT NULL,
    system_prompt TEXT,
    thread_id TEXT,
    title TEXT,
    tool_call_count INTEGER DEFAULT 0,
    user_id TEXT,
    PRIMARY KEY (id),
    FOREIGN KEY parent_session_id -> sessions(id) ON DELETE NO ACTION ON UPDATE NO ACTION
);

CREATE TABLE state_meta (
    key TEXT,
    value TEXT,
    PRIMARY KEY (key)
);

CREATE INDEX idx_async_delegations_delivery ON async_delegations (delivery_state, completed_at);

CREATE INDEX idx_compression_locks_expires ON compression_locks (expires_at);

CREATE INDEX idx_messages_active_null ON messages (active) WHERE active IS NULL;

CREATE INDEX idx_messages_platform_msg_id ON messages (session_id, platform_message_id) WHERE platform_message_id IS NOT NULL;

CREATE INDEX idx_messages_session ON messages (session_id, timestamp);

CREATE INDEX idx_messages_session_active ON messages (session_id, active, timestamp);

CREATE INDEX idx_session_model_usage_model ON session_model_usage (model);

CREATE INDEX idx_session_model_usage_session ON session_model_usage (session_id);

CREATE INDEX idx_sessions_gateway_peer ON sessions (source, user_id, chat_id, chat_type, thread_id, started_at DESC);

CREATE INDEX idx_sessions_handoff_state ON sessions (handoff_state, started_at);

CREATE INDEX idx_sessions_parent ON sessions (parent_session_id);

CREATE INDEX idx_sessions_session_key ON sessions (session_key, started_at DESC);

CREATE INDEX idx_sessions_source ON sessions (source);

CREATE INDEX idx_sessions_source_id ON sessions (source, id);

CREATE INDEX idx_sessions_started ON sessions (started_at DESC);

CREATE UNIQUE INDEX idx_sessions_title_unique ON sessions (title) WHERE title IS NOT NULL;

CREATE UNIQUE INDEX sqlite_autoindex_async_delegations_1 ON async_delegations (delegation_id);

CREATE UNIQUE INDEX sqlite_autoindex_compression_locks_1 ON compression_locks (session_id);

CREATE UNIQUE INDEX sqlite_autoindex_gateway_routing_1 ON gateway_routing (scope, session_key);

CREATE UNIQUE INDEX sqlite_autoindex_session_model_usage_1 ON session_model_usage (session_id, model, billing_provider, billing_base_url, billing_mode, task);

CREATE UNIQUE INDEX sqlite_autoindex_sessions_1 ON sessions (id);

CREATE UNIQUE INDEX sqlite_autoindex_state_meta_1 ON state_meta (key);

CREATE VIRTUAL TABLE messages_fts USING fts5(content, tool_name, tool_calls, content='messages', content_rowid='id');

CREATE VIRTUAL TABLE messages_fts_trigram USING fts5(content, tool_name, tool_calls, content='messages_fts_trigram_src', content_rowid='id', tokenize='trigram');

CREATE VIEW messages_fts_trigram_src AS SELECT id, role, content, tool_name, tool_calls FROM messages WHERE role <> 'tool';

CREATE TRIGGER messages_fts_delete AFTER DELETE ON messages WHEN (old.id > COALESCE((SELECT CAST(value AS INTEGER) FROM state_meta WHERE key = 'fts_rebuild_high_water'), -1) OR old.id <= COALESCE((SELECT CAST(value AS INTEGER) FROM state_meta WHERE key = 'fts_rebuild_progress'), -1)) BEGIN INSERT INTO messages_fts(messages_fts, rowid, content, tool_name, tool_calls) VALUES ('delete', old.id, old.content, old.tool_name, old.tool_calls); END;

CREATE TRIGGER messages_fts_insert AFTER INSERT ON messages WHEN (new.id > COALESCE((SELECT CAST(value AS INTEGER) FROM state_meta WHERE key = 'fts_rebuild_high_water'), -1) OR new.id <= COALESCE((SELECT CAST(value AS INTEGER) FROM state_meta WHERE key = 'fts_rebuild_progress'), -1)) BEGIN INSERT INTO messages_fts(rowid, content, tool_name, tool_calls) VALUES (new.id, new.content, new.tool_name, new.tool_calls); END;

CREATE TRIGGER messages_fts_trigram_delete AFTER DELETE ON messages WHEN old.role <> 'tool' AND (old.id > COALESCE((SELECT CAST(value AS INTEGER) FROM state_meta WHERE key = 'fts_rebuild_high_water'), -1) OR old.id <= COALESCE((SELECT CAST(value AS INTEGER) FROM state_meta WHERE key = 'fts_rebuild_progress'), -1)) BEGIN INSERT INTO messages_fts_trigram(messages_fts_trigram, rowid, content, tool_name, tool_calls) VALUES ('delete', old.id, old.content, old.tool_name, old.tool_calls); END;

CREATE TRIGGER messages_fts_trigram_insert AFTER INSERT ON messages WHEN new.role <> 'tool' AND (new.id > COALESCE((SELECT CAST(value AS INTEGER) FROM state_meta WHERE key = 'fts_rebuild_high_water'), -1) OR new.id <= COALESCE((SELECT CAST(value AS INTEGER) FROM state_meta WHERE key = 'fts_rebuild_progress'), -1)) BEGIN INSERT INTO messages_fts_trigram(rowid, content, tool_name, tool_calls) VALUES (new.id, new.content, new.tool_name, new.tool_calls); END;

CREATE TRIGGER messages_fts_trigram_update AFTER UPDATE ON messages WHEN (old.content IS NOT new.content OR old.tool_name IS NOT new.tool_name OR old.tool_calls IS NOT new.tool_calls OR old.role IS NOT new.role) AND (old.id > COALESCE((SELECT CAST(value AS INTEGER) FROM state_meta WHERE key = 'fts_rebuild_high_water'), -1) OR old.id <= COALESCE((SELECT CAST(value AS INTEGER) FROM state_meta WHERE key = 'fts_rebuild_progress'), -1)) BEGIN INSERT INTO messages_fts_trigram(messages_fts_trigram, rowid, content, tool_name, tool_calls) SELECT 'delete', old.id, old.content, old.tool_name, old.tool_calls WHERE old.role <> 'tool'; INSERT INTO messages_fts_trigram(rowid, content, tool_name, tool_calls) SELECT new.id, new.content, new.tool_name, new.tool_calls WHERE new.role <> 'tool'; END;

CREATE TRIGGER messages_fts_update AFTER UPDATE ON messages WHEN (old.content IS NOT new.content OR old.tool_name IS NOT new.tool_name OR old.tool_calls IS NOT new.tool_calls) AND (old.id > COALESCE((SELECT CAST(value AS INTEGER) FROM state_meta WHERE key = 'fts_rebuild_high_water'), -1) OR old.id <= COALESCE((SELECT CAST(value AS INTEGER) FROM state_meta WHERE key = 'fts_rebuild_progress'), -1)) BEGIN INSERT INTO messages_fts(messages_fts, rowid, content, tool_name, tool_calls) VALUES ('delete', old.id, old.content, old.tool_name, old.tool_calls); INSERT INTO messages_fts(rowid, content, tool_name, tool_calls) VALUES (new.id, new.content, new.tool_name, new.tool_calls); END;
