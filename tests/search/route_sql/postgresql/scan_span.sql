-- two terms, any
SELECT m.id
FROM (SELECT messages.id AS id, messages.session_id AS session_id, messages.role AS role, messages.content AS content, messages.timestamp AS timestamp, messages.tool_name AS tool_name, messages.tool_calls AS tool_calls, messages.active AS active, messages.compacted AS compacted, messages.search_vector AS search_vector
FROM messages
WHERE messages.id > (SELECT max(messages.id) AS max_1
FROM messages) - :span ORDER BY messages.id DESC
 LIMIT ALL OFFSET 0) AS m
WHERE (m.content ILIKE :t0 ESCAPE '\' OR m.tool_name ILIKE :t0 ESCAPE '\' OR m.tool_calls ILIKE :t0 ESCAPE '\' OR m.content LIKE :t1 ESCAPE '\' OR m.tool_name LIKE :t1 ESCAPE '\' OR m.tool_calls LIKE :t1 ESCAPE '\') AND (m.active = 1 OR m.compacted = 1) ORDER BY m.id DESC
 LIMIT :window;

-- every filter
SELECT m.id
FROM (SELECT messages.id AS id, messages.session_id AS session_id, messages.role AS role, messages.content AS content, messages.timestamp AS timestamp, messages.tool_name AS tool_name, messages.tool_calls AS tool_calls, messages.active AS active, messages.compacted AS compacted, messages.search_vector AS search_vector
FROM messages
WHERE messages.id > (SELECT max(messages.id) AS max_1
FROM messages) - :span ORDER BY messages.id DESC
 LIMIT ALL OFFSET 0) AS m JOIN sessions AS s ON s.id = m.session_id
WHERE (m.content ILIKE :t0 ESCAPE '\' OR m.tool_name ILIKE :t0 ESCAPE '\' OR m.tool_calls ILIKE :t0 ESCAPE '\' OR m.content LIKE :t1 ESCAPE '\' OR m.tool_name LIKE :t1 ESCAPE '\' OR m.tool_calls LIKE :t1 ESCAPE '\') AND s.source IN (__[POSTCOMPILE_sources]) AND (s.source NOT IN (__[POSTCOMPILE_excluded])) AND m.role IN (__[POSTCOMPILE_roles]) AND (m.active = 1 OR m.compacted = 1) AND (EXISTS (SELECT 1
FROM hermes_store_session_tags AS st0
WHERE st0.session_id = m.session_id AND st0.tag = :tag_0)) AND (EXISTS (SELECT 1
FROM hermes_store_session_tags AS st1
WHERE st1.session_id = m.session_id AND st1.tag = :tag_1)) ORDER BY m.id DESC
 LIMIT :window;
