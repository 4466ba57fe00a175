-- newest
SELECT page.id, page.session_id, page.role, page.content, page.timestamp, page.tool_name, page.source, page.model, page.session_started, ctx.context_roles, ctx.context_contents
FROM (SELECT cut.id AS id, cut.session_id AS session_id, cut.role AS role, cut.content AS content, cut.timestamp AS timestamp, cut.tool_name AS tool_name, s.source AS source, s.model AS model, s.started_at AS session_started
FROM (SELECT m.id AS id, m.session_id AS session_id, m.role AS role, m.content AS content, m.timestamp AS timestamp, m.tool_name AS tool_name
FROM messages AS m
WHERE m.id = any(:ids) AND (m.active = 1 OR m.compacted = 1) ORDER BY m.timestamp DESC, m.id DESC
 LIMIT :limit OFFSET :offset) AS cut JOIN sessions AS s ON s.id = cut.session_id) AS page JOIN LATERAL (SELECT array_agg(c.role ORDER BY c.pos) AS context_roles, array_agg(c.content ORDER BY c.pos) AS context_contents
FROM ((SELECT 0 AS pos, n.role AS role, n.content AS content
FROM messages AS n
WHERE n.session_id = page.session_id AND (n.timestamp, n.id) < (page.timestamp, page.id) ORDER BY n.timestamp DESC, n.id DESC
 LIMIT 1) UNION ALL SELECT 1, page.role AS role, page.content AS content UNION ALL (SELECT 2, n.role AS role, n.content AS content
FROM messages AS n
WHERE n.session_id = page.session_id AND (n.timestamp, n.id) > (page.timestamp, page.id) ORDER BY n.timestamp ASC, n.id ASC
 LIMIT 1)) AS c) AS ctx ON true ORDER BY page.timestamp DESC, page.id DESC;

-- oldest, every filter
SELECT page.id, page.session_id, page.role, page.content, page.timestamp, page.tool_name, page.source, page.model, page.session_started, ctx.context_roles, ctx.context_contents
FROM (SELECT m.id AS id, m.session_id AS session_id, m.role AS role, m.content AS content, m.timestamp AS timestamp, m.tool_name AS tool_name, s.source AS source, s.model AS model, s.started_at AS session_started
FROM messages AS m JOIN sessions AS s ON s.id = m.session_id
WHERE m.id = any(:ids) AND s.source IN (__[POSTCOMPILE_sources]) AND (s.source NOT IN (__[POSTCOMPILE_excluded])) AND m.role IN (__[POSTCOMPILE_roles]) AND (m.active = 1 OR m.compacted = 1) AND (EXISTS (SELECT 1
FROM hermes_store_session_tags AS st0
WHERE st0.session_id = m.session_id AND st0.tag = :tag_0)) AND (EXISTS (SELECT 1
FROM hermes_store_session_tags AS st1
WHERE st1.session_id = m.session_id AND st1.tag = :tag_1)) ORDER BY m.timestamp ASC, m.id DESC
 LIMIT :limit OFFSET :offset) AS page JOIN LATERAL (SELECT array_agg(c.role ORDER BY c.pos) AS context_roles, array_agg(c.content ORDER BY c.pos) AS context_contents
FROM ((SELECT 0 AS pos, n.role AS role, n.content AS content
FROM messages AS n
WHERE n.session_id = page.session_id AND (n.timestamp, n.id) < (page.timestamp, page.id) ORDER BY n.timestamp DESC, n.id DESC
 LIMIT 1) UNION ALL SELECT 1, page.role AS role, page.content AS content UNION ALL (SELECT 2, n.role AS role, n.content AS content
FROM messages AS n
WHERE n.session_id = page.session_id AND (n.timestamp, n.id) > (page.timestamp, page.id) ORDER BY n.timestamp ASC, n.id ASC
 LIMIT 1)) AS c) AS ctx ON true ORDER BY page.timestamp ASC, page.id DESC;
