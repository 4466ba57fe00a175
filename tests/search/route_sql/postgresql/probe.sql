-- two alternatives, a negated token
SELECT count(*) AS sampled, count(*) FILTER (WHERE m.t IS NOT NULL AND (strpos(m.t, :n0) > 0 AND strpos(m.t, :n1) > 0 AND strpos(m.t, :n2) > 0 AND strpos(m.t, :n3) > 0 AND strpos(m.t, :n4) > 0 AND strpos(m.t, :n5) > 0 AND strpos(m.t, :n6) > 0 OR strpos(m.t, :n7) > 0)) AS candidates
FROM (SELECT CASE WHEN (m.role != 'tool') THEN lower(((((coalesce(m.content, '') || ' ') || coalesce(m.tool_name, '')) || ' ') || coalesce(m.tool_calls, ''))) END AS t
FROM messages AS m
WHERE m.id > (SELECT max(messages.id) AS max_1
FROM messages) - :sample
 LIMIT ALL OFFSET 0) AS m;
