-- no filter
EXPLAIN (FORMAT JSON) SELECT m.id
FROM messages AS m
WHERE (m.search_vector @@ (CASE WHEN (numnode(phraseto_tsquery('simple', regexp_replace(:w0, '[!-/:-@\[-`{-~]+', ' ', 'g'))) = 0) THEN $$' '$$::tsquery ELSE phraseto_tsquery('simple', regexp_replace(:w0, '[!-/:-@\[-`{-~]+', ' ', 'g')) END && CASE WHEN (numnode(phraseto_tsquery('simple', regexp_replace(:w1, '[!-/:-@\[-`{-~]+', ' ', 'g'))) = 0) THEN $$' '$$::tsquery ELSE phraseto_tsquery('simple', regexp_replace(:w1, '[!-/:-@\[-`{-~]+', ' ', 'g')) END)) AND (m.active = 1 OR m.compacted = 1);

-- every filter
EXPLAIN (FORMAT JSON) SELECT m.id
FROM messages AS m JOIN sessions AS s ON s.id = m.session_id
WHERE (m.search_vector @@ ((CASE WHEN (numnode(phraseto_tsquery('simple', regexp_replace(:w0, '[!-/:-@\[-`{-~]+', ' ', 'g'))) = 0) THEN $$' '$$::tsquery ELSE phraseto_tsquery('simple', regexp_replace(:w0, '[!-/:-@\[-`{-~]+', ' ', 'g')) END && CASE WHEN (numnode(phraseto_tsquery('simple', regexp_replace(:w1, '[!-/:-@\[-`{-~]+', ' ', 'g'))) = 0) THEN $$' '$$::tsquery ELSE phraseto_tsquery('simple', regexp_replace(:w1, '[!-/:-@\[-`{-~]+', ' ', 'g')) END) || (CASE WHEN (numnode(to_tsquery('simple', :w2)) = 0) THEN $$' '$$::tsquery ELSE to_tsquery('simple', :w2) END && (!! phraseto_tsquery('simple', regexp_replace(:w3, '[!-/:-@\[-`{-~]+', ' ', 'g')))))) AND s.source IN (__[POSTCOMPILE_sources]) AND (s.source NOT IN (__[POSTCOMPILE_excluded])) AND m.role IN (__[POSTCOMPILE_roles]) AND (m.active = 1 OR m.compacted = 1) AND (EXISTS (SELECT 1
FROM hermes_store_session_tags AS st0
WHERE st0.session_id = m.session_id AND st0.tag = :tag_0)) AND (EXISTS (SELECT 1
FROM hermes_store_session_tags AS st1
WHERE st1.session_id = m.session_id AND st1.tag = :tag_1));
