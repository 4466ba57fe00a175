-- hits by id
SELECT m.id, ctx.context_roles, ctx.context_contents
FROM messages AS m JOIN LATERAL (SELECT array_agg(c.role ORDER BY c.pos) AS context_roles, array_agg(c.content ORDER BY c.pos) AS context_contents
FROM ((SELECT 0 AS pos, n.role AS role, n.content AS content
FROM messages AS n
WHERE n.session_id = m.session_id AND (n.timestamp, n.id) < (m.timestamp, m.id) ORDER BY n.timestamp DESC, n.id DESC
 LIMIT 1) UNION ALL SELECT 1, m.role AS role, m.content AS content UNION ALL (SELECT 2, n.role AS role, n.content AS content
FROM messages AS n
WHERE n.session_id = m.session_id AND (n.timestamp, n.id) > (m.timestamp, m.id) ORDER BY n.timestamp ASC, n.id ASC
 LIMIT 1)) AS c) AS ctx ON true
WHERE m.id = any(:ids);
