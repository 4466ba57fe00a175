-- word index, relevance
WITH cand AS MATERIALIZED
(SELECT messages_fts.rowid AS id, messages_fts.rank AS score
FROM messages_fts
WHERE messages_fts MATCH :match ORDER BY messages_fts.rowid DESC
 LIMIT 2000 OFFSET 0),
top AS MATERIALIZED
(SELECT cand.id AS id, cand.score AS score
FROM cand ORDER BY cand.score, cand.id
 LIMIT 20 OFFSET 0)
 SELECT m.id, m.session_id, m.role, (SELECT snippet(messages_fts, -1, '>>>', '<<<', '...', 40) AS snippet_1
FROM messages_fts
WHERE (messages_fts MATCH :match) AND messages_fts.rowid = top.id) AS snippet, m.timestamp, m.tool_name, s.source, s.model, s.started_at AS session_started
FROM top JOIN messages AS m ON m.id = top.id JOIN sessions AS s ON s.id = m.session_id
WHERE m.active = 1 OR m.compacted = 1 ORDER BY top.score, top.id;

-- word index, every filter
WITH cand AS MATERIALIZED
(SELECT messages_fts.rowid AS id, messages_fts.rank AS score
FROM messages_fts
WHERE messages_fts MATCH :match ORDER BY messages_fts.rowid DESC
 LIMIT 2000 OFFSET 0),
top AS MATERIALIZED
(SELECT cand.id AS id, cand.score AS score
FROM cand ORDER BY cand.score, cand.id
 LIMIT 20 OFFSET 0)
 SELECT m.id, m.session_id, m.role, (SELECT snippet(messages_fts, -1, '>>>', '<<<', '...', 40) AS snippet_1
FROM messages_fts
WHERE (messages_fts MATCH :match) AND messages_fts.rowid = top.id) AS snippet, m.timestamp, m.tool_name, s.source, s.model, s.started_at AS session_started
FROM top JOIN messages AS m ON m.id = top.id JOIN sessions AS s ON s.id = m.session_id
WHERE s.source IN (__[POSTCOMPILE_sources]) AND (s.source NOT IN (__[POSTCOMPILE_excluded])) AND m.role IN (__[POSTCOMPILE_roles]) AND (m.active = 1 OR m.compacted = 1) AND (EXISTS (SELECT 1
FROM hermes_store_session_tags AS st0
WHERE st0.session_id = m.session_id AND st0.tag = :tag_0)) AND (EXISTS (SELECT 1
FROM hermes_store_session_tags AS st1
WHERE st1.session_id = m.session_id AND st1.tag = :tag_1)) ORDER BY top.score, top.id;

-- trigram index, the newest window (zero-hit retry)
WITH cand AS MATERIALIZED
(SELECT messages_fts_trigram.rowid AS id, messages_fts_trigram.rank AS score
FROM messages_fts_trigram
WHERE (messages_fts_trigram MATCH :match) AND messages_fts_trigram.rowid > :floor ORDER BY (+ messages_fts_trigram.rowid) DESC
 LIMIT 2000 OFFSET 0),
top AS MATERIALIZED
(SELECT cand.id AS id, cand.score AS score
FROM cand ORDER BY cand.score, cand.id
 LIMIT 20 OFFSET 0)
 SELECT m.id, m.session_id, m.role, (SELECT snippet(messages_fts_trigram, -1, '>>>', '<<<', '...', 40) AS snippet_1
FROM messages_fts_trigram
WHERE (messages_fts_trigram MATCH :match) AND messages_fts_trigram.rowid = top.id) AS snippet, m.timestamp, m.tool_name, s.source, s.model, s.started_at AS session_started
FROM top JOIN messages AS m ON m.id = top.id JOIN sessions AS s ON s.id = m.session_id
WHERE m.active = 1 OR m.compacted = 1 ORDER BY top.score, top.id;
