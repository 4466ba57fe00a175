-- one literal, the newest window
WITH ids0 AS
(SELECT m.id AS id
FROM (SELECT messages.id AS id, messages.session_id AS session_id, messages.role AS role, messages.content AS content, messages.timestamp AS timestamp, messages.tool_name AS tool_name, messages.tool_calls AS tool_calls, messages.active AS active, messages.compacted AS compacted, messages.search_vector AS search_vector
FROM messages
WHERE messages.id > :floor
 LIMIT ALL OFFSET 0) AS m
WHERE (m.role != 'tool' OR (m.search_vector @@ CASE WHEN (numnode(plainto_tsquery('simple', regexp_replace(:w1_l0, '[!-/:-@\[-`{-~]+', ' ', 'g'))) = 0) THEN $$' '$$::tsquery ELSE plainto_tsquery('simple', regexp_replace(:w1_l0, '[!-/:-@\[-`{-~]+', ' ', 'g')) END) AND ts_match_vq(m.search_vector, CASE WHEN (numnode(phraseto_tsquery('simple', regexp_replace(:w1_0, '[!-/:-@\[-`{-~]+', ' ', 'g'))) = 0) THEN $$' '$$::tsquery ELSE phraseto_tsquery('simple', regexp_replace(:w1_0, '[!-/:-@\[-`{-~]+', ' ', 'g')) END)) AND ((coalesce(m.content, '') COLLATE "C") ILIKE :pat0 ESCAPE '\' OR (coalesce(m.tool_name, '') COLLATE "C") ILIKE :pat0 ESCAPE '\' OR (coalesce(m.tool_calls, '') COLLATE "C") ILIKE :pat0 ESCAPE '\')),
ids1 AS
(SELECT ids0.id AS id
FROM ids0)
 SELECT m.id, m.session_id, m.role, m.content AS body, m.tool_name, m.tool_calls AS calls, m.timestamp, s.source, s.model, s.started_at AS session_started
FROM messages AS m JOIN sessions AS s ON s.id = m.session_id
WHERE m.id IN (SELECT m.id
FROM (SELECT m.id AS id, m.timestamp AS timestamp
FROM messages AS m
WHERE m.id IN (SELECT ids1.id
FROM ids1) AND (m.active = 1 OR m.compacted = 1)
 LIMIT ALL OFFSET 0) AS m ORDER BY m.id DESC
 LIMIT :limit) ORDER BY m.id DESC;

-- a literal, a negated literal, a word, a negated word, the whole table, every filter
WITH ids0 AS
(SELECT m.id AS id
FROM messages AS m
WHERE m.search_vector @@ CASE WHEN (numnode(phraseto_tsquery('simple', regexp_replace(:w0_0, '[!-/:-@\[-`{-~]+', ' ', 'g'))) = 0) THEN $$' '$$::tsquery ELSE phraseto_tsquery('simple', regexp_replace(:w0_0, '[!-/:-@\[-`{-~]+', ' ', 'g')) END),
ids1 AS
(SELECT m.id AS id
FROM messages AS m
WHERE m.role != 'tool' AND ((((coalesce(m.content, '') || ' ') || coalesce(m.tool_name, '')) || ' ') || coalesce(m.tool_calls, '')) ILIKE :idxpat3 ESCAPE '\' AND ((coalesce(m.content, '') COLLATE "C") ILIKE :pat3 ESCAPE '\' OR (coalesce(m.tool_name, '') COLLATE "C") ILIKE :pat3 ESCAPE '\' OR (coalesce(m.tool_calls, '') COLLATE "C") ILIKE :pat3 ESCAPE '\')),
ids2 AS
(SELECT m.id AS id
FROM messages AS m
WHERE m.search_vector @@ CASE WHEN (numnode(phraseto_tsquery('simple', regexp_replace(:w5_0, '[!-/:-@\[-`{-~]+', ' ', 'g'))) = 0) THEN $$' '$$::tsquery ELSE phraseto_tsquery('simple', regexp_replace(:w5_0, '[!-/:-@\[-`{-~]+', ' ', 'g')) END),
ids3 AS
(SELECT ids0.id AS id
FROM ids0 EXCEPT SELECT ids1.id AS id
FROM ids1 EXCEPT SELECT ids2.id AS id
FROM ids2)
 SELECT m.id, m.session_id, m.role, m.content AS body, m.tool_name, m.tool_calls AS calls, m.timestamp, s.source, s.model, s.started_at AS session_started
FROM messages AS m JOIN sessions AS s ON s.id = m.session_id
WHERE m.id IN (SELECT m.id
FROM (SELECT m.id AS id, m.timestamp AS timestamp
FROM messages AS m JOIN sessions AS s ON s.id = m.session_id
WHERE m.id IN (SELECT ids3.id
FROM ids3) AND m.role != 'tool' AND ((((coalesce(m.content, '') || ' ') || coalesce(m.tool_name, '')) || ' ') || coalesce(m.tool_calls, '')) ILIKE :idxpat1 ESCAPE '\' AND ((coalesce(m.content, '') COLLATE "C") ILIKE :pat1 ESCAPE '\' OR (coalesce(m.tool_name, '') COLLATE "C") ILIKE :pat1 ESCAPE '\' OR (coalesce(m.tool_calls, '') COLLATE "C") ILIKE :pat1 ESCAPE '\') AND s.source IN (__[POSTCOMPILE_sources]) AND (s.source NOT IN (__[POSTCOMPILE_excluded])) AND m.role IN (__[POSTCOMPILE_roles]) AND (m.active = 1 OR m.compacted = 1) AND (EXISTS (SELECT 1
FROM hermes_store_session_tags AS st0
WHERE st0.session_id = m.session_id AND st0.tag = :tag_0)) AND (EXISTS (SELECT 1
FROM hermes_store_session_tags AS st1
WHERE st1.session_id = m.session_id AND st1.tag = :tag_1))
 LIMIT ALL OFFSET 0) AS m ORDER BY m.id DESC
 LIMIT :limit) ORDER BY m.id DESC;

-- short punctuation (no index), the oldest window
WITH ids0 AS
(SELECT m.id AS id
FROM (SELECT messages.id AS id, messages.session_id AS session_id, messages.role AS role, messages.content AS content, messages.timestamp AS timestamp, messages.tool_name AS tool_name, messages.tool_calls AS tool_calls, messages.active AS active, messages.compacted AS compacted, messages.search_vector AS search_vector
FROM messages
WHERE messages.id <= :ceiling
 LIMIT ALL OFFSET 0) AS m
WHERE coalesce(m.content, '') LIKE :pat0 ESCAPE '\' OR coalesce(m.tool_name, '') LIKE :pat0 ESCAPE '\' OR coalesce(m.tool_calls, '') LIKE :pat0 ESCAPE '\'),
ids1 AS
(SELECT ids0.id AS id
FROM ids0)
 SELECT m.id, m.session_id, m.role, m.content AS body, m.tool_name, m.tool_calls AS calls, m.timestamp, s.source, s.model, s.started_at AS session_started
FROM messages AS m JOIN sessions AS s ON s.id = m.session_id
WHERE m.id IN (SELECT m.id
FROM (SELECT m.id AS id, m.timestamp AS timestamp
FROM messages AS m
WHERE m.id IN (SELECT ids1.id
FROM ids1) AND (m.active = 1 OR m.compacted = 1)
 LIMIT ALL OFFSET 0) AS m ORDER BY m.id ASC
 LIMIT :limit) ORDER BY m.id ASC;

-- two groups (OR), a negated literal, the whole table, a role filter
WITH ids0 AS
(SELECT m.id AS id
FROM messages AS m
WHERE m.role != 'tool' AND ((((coalesce(m.content, '') || ' ') || coalesce(m.tool_name, '')) || ' ') || coalesce(m.tool_calls, '')) ILIKE :idxpat0 ESCAPE '\' AND ((coalesce(m.content, '') COLLATE "C") ILIKE :pat0 ESCAPE '\' OR (coalesce(m.tool_name, '') COLLATE "C") ILIKE :pat0 ESCAPE '\' OR (coalesce(m.tool_calls, '') COLLATE "C") ILIKE :pat0 ESCAPE '\')),
ids1 AS
(SELECT m.id AS id
FROM messages AS m
WHERE m.search_vector @@ CASE WHEN (numnode(phraseto_tsquery('simple', regexp_replace(:w2_0, '[!-/:-@\[-`{-~]+', ' ', 'g'))) = 0) THEN $$' '$$::tsquery ELSE phraseto_tsquery('simple', regexp_replace(:w2_0, '[!-/:-@\[-`{-~]+', ' ', 'g')) END),
ids2 AS
(SELECT m.id AS id
FROM messages AS m
WHERE m.role != 'tool' AND ((((coalesce(m.content, '') || ' ') || coalesce(m.tool_name, '')) || ' ') || coalesce(m.tool_calls, '')) ILIKE :idxpat3 ESCAPE '\' AND ((coalesce(m.content, '') COLLATE "C") ILIKE :pat3 ESCAPE '\' OR (coalesce(m.tool_name, '') COLLATE "C") ILIKE :pat3 ESCAPE '\' OR (coalesce(m.tool_calls, '') COLLATE "C") ILIKE :pat3 ESCAPE '\')),
ids3 AS
(SELECT m.id AS id
FROM messages AS m
WHERE coalesce(m.content, '') LIKE :pat5 ESCAPE '\' OR coalesce(m.tool_name, '') LIKE :pat5 ESCAPE '\' OR coalesce(m.tool_calls, '') LIKE :pat5 ESCAPE '\'),
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
FROM (SELECT m.id AS id, m.timestamp AS timestamp
FROM messages AS m
WHERE m.id IN (SELECT ids4.id
FROM ids4) AND m.role IN (__[POSTCOMPILE_roles])
 LIMIT ALL OFFSET 0) AS m ORDER BY m.id DESC
 LIMIT :limit) ORDER BY m.id DESC;

-- one literal, a window read through the indexes
SELECT m.id, m.session_id, m.role, m.content AS body, m.tool_name, m.tool_calls AS calls, m.timestamp, s.source, s.model, s.started_at AS session_started
FROM messages AS m JOIN sessions AS s ON s.id = m.session_id
WHERE m.id IN (SELECT m.id
FROM (SELECT m.id AS id, m.timestamp AS timestamp
FROM messages AS m
WHERE (m.role != 'tool' AND ((((coalesce(m.content, '') || ' ') || coalesce(m.tool_name, '')) || ' ') || coalesce(m.tool_calls, '')) ILIKE :idxpat0 ESCAPE '\' OR (m.search_vector @@ CASE WHEN (numnode(plainto_tsquery('simple', regexp_replace(:w2_l0, '[!-/:-@\[-`{-~]+', ' ', 'g'))) = 0) THEN $$' '$$::tsquery ELSE plainto_tsquery('simple', regexp_replace(:w2_l0, '[!-/:-@\[-`{-~]+', ' ', 'g')) END) AND ts_match_vq(m.search_vector, CASE WHEN (numnode(phraseto_tsquery('simple', regexp_replace(:w2_0, '[!-/:-@\[-`{-~]+', ' ', 'g'))) = 0) THEN $$' '$$::tsquery ELSE phraseto_tsquery('simple', regexp_replace(:w2_0, '[!-/:-@\[-`{-~]+', ' ', 'g')) END)) AND ((coalesce(m.content, '') COLLATE "C") ILIKE :pat0 ESCAPE '\' OR (coalesce(m.tool_name, '') COLLATE "C") ILIKE :pat0 ESCAPE '\' OR (coalesce(m.tool_calls, '') COLLATE "C") ILIKE :pat0 ESCAPE '\') AND m.id > :floor AND (m.active = 1 OR m.compacted = 1)
 LIMIT ALL OFFSET 0) AS m ORDER BY m.id DESC
 LIMIT :limit) ORDER BY m.id DESC;
