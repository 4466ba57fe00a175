-- two terms, any
WITH cand AS MATERIALIZED
(SELECT m.id AS id
FROM messages AS m
WHERE (m.content LIKE :t0 ESCAPE '\' OR m.tool_name LIKE :t0 ESCAPE '\' OR m.tool_calls LIKE :t0 ESCAPE '\' OR m.content LIKE :t1 ESCAPE '\' OR m.tool_name LIKE :t1 ESCAPE '\' OR m.tool_calls LIKE :t1 ESCAPE '\') AND (m.active = 1 OR m.compacted = 1) ORDER BY m.id DESC
 LIMIT :window OFFSET 0)
 SELECT m.id, m.session_id, m.role, m.content AS snippet, m.timestamp, m.tool_name, s.source, s.model, s.started_at AS session_started
FROM cand JOIN messages AS m ON m.id = cand.id JOIN sessions AS s ON s.id = m.session_id ORDER BY m.timestamp DESC, m.id DESC
 LIMIT :limit OFFSET :offset;

-- two terms, any, every filter
WITH cand AS MATERIALIZED
(SELECT m.id AS id
FROM messages AS m JOIN sessions AS s ON s.id = m.session_id
WHERE (m.content LIKE :t0 ESCAPE '\' OR m.tool_name LIKE :t0 ESCAPE '\' OR m.tool_calls LIKE :t0 ESCAPE '\' OR m.content LIKE :t1 ESCAPE '\' OR m.tool_name LIKE :t1 ESCAPE '\' OR m.tool_calls LIKE :t1 ESCAPE '\') AND s.source IN (__[POSTCOMPILE_sources]) AND (s.source NOT IN (__[POSTCOMPILE_excluded])) AND m.role IN (__[POSTCOMPILE_roles]) AND (m.active = 1 OR m.compacted = 1) AND (EXISTS (SELECT 1
FROM hermes_store_session_tags AS st0
WHERE st0.session_id = m.session_id AND st0.tag = :tag_0)) AND (EXISTS (SELECT 1
FROM hermes_store_session_tags AS st1
WHERE st1.session_id = m.session_id AND st1.tag = :tag_1)) ORDER BY m.id DESC
 LIMIT :window OFFSET 0)
 SELECT m.id, m.session_id, m.role, m.content AS snippet, m.timestamp, m.tool_name, s.source, s.model, s.started_at AS session_started
FROM cand JOIN messages AS m ON m.id = cand.id JOIN sessions AS s ON s.id = m.session_id ORDER BY m.timestamp DESC, m.id DESC
 LIMIT :limit OFFSET :offset;

-- pending-range top-up: every term, an id range
WITH cand AS MATERIALIZED
(SELECT m.id AS id
FROM messages AS m
WHERE (m.content LIKE :t0 ESCAPE '\' OR m.tool_name LIKE :t0 ESCAPE '\' OR m.tool_calls LIKE :t0 ESCAPE '\') AND (m.content LIKE :t1 ESCAPE '\' OR m.tool_name LIKE :t1 ESCAPE '\' OR m.tool_calls LIKE :t1 ESCAPE '\') AND m.id > :lo AND m.id <= :hi AND (m.active = 1 OR m.compacted = 1) ORDER BY m.id DESC
 LIMIT :window OFFSET 0)
 SELECT m.id, m.session_id, m.role, m.content AS snippet, m.timestamp, m.tool_name, s.source, s.model, s.started_at AS session_started
FROM cand JOIN messages AS m ON m.id = cand.id JOIN sessions AS s ON s.id = m.session_id ORDER BY m.timestamp DESC, m.id DESC
 LIMIT :limit OFFSET :offset;
