-- one literal, the newest window
WITH ids0 AS
(SELECT messages_fts_trigram.rowid AS id
FROM messages_fts_trigram
WHERE (messages_fts_trigram MATCH :tri0) AND messages_fts_trigram.rowid > :floor UNION SELECT messages_fts.rowid AS id
FROM messages_fts
WHERE (messages_fts MATCH :fts0) AND messages_fts.rowid > :floor),
ids1 AS
(SELECT ids0.id AS id
FROM ids0)
 SELECT m.id, m.session_id, m.role, m.content AS body, m.tool_name, m.tool_calls AS calls, m.timestamp, s.source, s.model, s.started_at AS session_started
FROM messages AS m JOIN sessions AS s ON s.id = m.session_id
WHERE m.id IN (SELECT m.id
FROM messages AS m
WHERE m.id IN (SELECT ids1.id
FROM ids1) AND (instr(lower(coalesce(m.content, '')), :lit0) > 0 OR instr(lower(coalesce(m.tool_name, '')), :lit0) > 0 OR instr(lower(coalesce(m.tool_calls, '')), :lit0) > 0) AND (m.active = 1 OR m.compacted = 1) ORDER BY m.id DESC
 LIMIT :limit OFFSET 0) ORDER BY m.id DESC;

-- a literal, a negated literal, a word, a negated word, the whole table, every filter
WITH ids0 AS
(SELECT messages_fts.rowid AS id
FROM messages_fts
WHERE messages_fts MATCH :w0),
ids1 AS
(SELECT messages_fts_trigram.rowid AS id
FROM messages_fts_trigram
WHERE messages_fts_trigram MATCH :tri1),
ids2 AS
(SELECT m.id AS id
FROM messages AS m
WHERE m.id IN (SELECT messages_fts_trigram.rowid AS id
FROM messages_fts_trigram
WHERE messages_fts_trigram MATCH :tri3) AND (instr(lower(coalesce(m.content, '')), :lit3) > 0 OR instr(lower(coalesce(m.tool_name, '')), :lit3) > 0 OR instr(lower(coalesce(m.tool_calls, '')), :lit3) > 0)),
ids3 AS
(SELECT messages_fts.rowid AS id
FROM messages_fts
WHERE messages_fts MATCH :w5),
ids4 AS
(SELECT p.id AS id
FROM (SELECT ids0.id AS id
FROM ids0 INTERSECT SELECT ids1.id AS id
FROM ids1) AS p EXCEPT SELECT ids2.id AS id
FROM ids2 EXCEPT SELECT ids3.id AS id
FROM ids3)
 SELECT m.id, m.session_id, m.role, m.content AS body, m.tool_name, m.tool_calls AS calls, m.timestamp, s.source, s.model, s.started_at AS session_started
FROM messages AS m JOIN sessions AS s ON s.id = m.session_id
WHERE m.id IN (SELECT m.id
FROM messages AS m JOIN sessions AS s ON s.id = m.session_id
WHERE m.id IN (SELECT ids4.id
FROM ids4) AND (instr(lower(coalesce(m.content, '')), :lit1) > 0 OR instr(lower(coalesce(m.tool_name, '')), :lit1) > 0 OR instr(lower(coalesce(m.tool_calls, '')), :lit1) > 0) AND s.source IN (__[POSTCOMPILE_sources]) AND (s.source NOT IN (__[POSTCOMPILE_excluded])) AND m.role IN (__[POSTCOMPILE_roles]) AND (m.active = 1 OR m.compacted = 1) AND (EXISTS (SELECT 1
FROM hermes_store_session_tags AS st0
WHERE st0.session_id = m.session_id AND st0.tag = :tag_0)) AND (EXISTS (SELECT 1
FROM hermes_store_session_tags AS st1
WHERE st1.session_id = m.session_id AND st1.tag = :tag_1)) ORDER BY m.id DESC
 LIMIT :limit OFFSET 0) ORDER BY m.id DESC;

-- short punctuation (no index), the oldest window
SELECT m.id, m.session_id, m.role, m.content AS body, m.tool_name, m.tool_calls AS calls, m.timestamp, s.source, s.model, s.started_at AS session_started
FROM messages AS m JOIN sessions AS s ON s.id = m.session_id
WHERE m.id IN (SELECT m.id
FROM messages AS m
WHERE m.id <= :ceiling AND (instr(lower(coalesce(m.content, '')), :lit0) > 0 OR instr(lower(coalesce(m.tool_name, '')), :lit0) > 0 OR instr(lower(coalesce(m.tool_calls, '')), :lit0) > 0) AND (m.active = 1 OR m.compacted = 1) ORDER BY m.id ASC
 LIMIT :limit OFFSET 0) ORDER BY m.id ASC;

-- two groups (OR), a negated literal, the whole table, a role filter
WITH ids0 AS
(SELECT m.id AS id
FROM messages AS m
WHERE m.id IN (SELECT messages_fts_trigram.rowid AS id
FROM messages_fts_trigram
WHERE messages_fts_trigram MATCH :tri0) AND (instr(lower(coalesce(m.content, '')), :lit0) > 0 OR instr(lower(coalesce(m.tool_name, '')), :lit0) > 0 OR instr(lower(coalesce(m.tool_calls, '')), :lit0) > 0)),
ids1 AS
(SELECT messages_fts.rowid AS id
FROM messages_fts
WHERE messages_fts MATCH :w2),
ids2 AS
(SELECT m.id AS id
FROM messages AS m
WHERE m.id IN (SELECT messages_fts_trigram.rowid AS id
FROM messages_fts_trigram
WHERE messages_fts_trigram MATCH :tri3) AND (instr(lower(coalesce(m.content, '')), :lit3) > 0 OR instr(lower(coalesce(m.tool_name, '')), :lit3) > 0 OR instr(lower(coalesce(m.tool_calls, '')), :lit3) > 0)),
ids3 AS
(SELECT m.id AS id
FROM messages AS m
WHERE instr(lower(coalesce(m.content, '')), :lit5) > 0 OR instr(lower(coalesce(m.tool_name, '')), :lit5) > 0 OR instr(lower(coalesce(m.tool_calls, '')), :lit5) > 0),
ids4 AS
(SELECT g0.id AS id
FROM (SELECT ids0.id AS id
FROM ids0) AS g0 UNION SELECT g1.id AS id
FROM (SELECT p.id AS id
FROM (SELECT ids1.id AS id
FROM ids1 INTERSECT SELECT ids2.id AS id
FROM ids2) AS p EXCEPT SELECT ids3.id AS id
FROM ids3) AS g1)
 SELECT m.id, m.session_id, m.role, m.content AS body, m.tool_name, m.tool_calls AS calls, m.timestamp, s.source, s.model, s.started_at AS session_started
FROM messages AS m JOIN sessions AS s ON s.id = m.session_id
WHERE m.id IN (SELECT m.id
FROM messages AS m
WHERE m.id IN (SELECT ids4.id
FROM ids4) AND m.role IN (__[POSTCOMPILE_roles]) ORDER BY m.id DESC
 LIMIT :limit OFFSET 0) ORDER BY m.id DESC;
