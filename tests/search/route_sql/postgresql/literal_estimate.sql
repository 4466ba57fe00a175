-- four literals, no filter
SELECT (count(*) FILTER (WHERE m.t IS NOT NULL AND strpos(m.t, :n1) > 0 AND strpos(m.t, :n2) > 0 AND strpos(m.t, :n3) > 0 AND strpos(m.t, :n4) > 0 AND strpos(m.t, :n5) > 0 AND strpos(m.t, :n6) > 0 AND strpos(m.t, :n7) > 0 AND strpos(m.t, :n8) > 0 AND strpos(m.t, :n9) > 0 AND strpos(m.t, :n10) > 0 OR m.t IS NULL AND (m.v @@ CASE WHEN (numnode(plainto_tsquery('simple', regexp_replace(:w11_l0, '[!-/:-@\[-`{-~]+', ' ', 'g'))) = 0) THEN $$' '$$::tsquery ELSE plainto_tsquery('simple', regexp_replace(:w11_l0, '[!-/:-@\[-`{-~]+', ' ', 'g')) END))) + (count(*) FILTER (WHERE true)) + (count(*) FILTER (WHERE m.t IS NOT NULL AND (m.t ~ :n13) OR m.t IS NULL AND (m.v @@ CASE WHEN (numnode(plainto_tsquery('simple', regexp_replace(:w14_l0, '[!-/:-@\[-`{-~]+', ' ', 'g'))) = 0) THEN $$' '$$::tsquery ELSE plainto_tsquery('simple', regexp_replace(:w14_l0, '[!-/:-@\[-`{-~]+', ' ', 'g')) END))) + (count(*) FILTER (WHERE m.t IS NOT NULL AND (m.t ~ :n16) OR m.t IS NULL AND (m.v @@ CASE WHEN (numnode(plainto_tsquery('simple', regexp_replace(:w17_l0, '[!-/:-@\[-`{-~]+', ' ', 'g'))) = 0) THEN $$' '$$::tsquery ELSE plainto_tsquery('simple', regexp_replace(:w17_l0, '[!-/:-@\[-`{-~]+', ' ', 'g')) END))) AS anon_1
FROM (SELECT m.search_vector AS v, CASE WHEN (m.role != 'tool') THEN lower(((((coalesce(m.content, '') || ' ') || coalesce(m.tool_name, '')) || ' ') || coalesce(m.tool_calls, ''))) END AS t
FROM messages AS m
WHERE m.id > :floor
 LIMIT ALL OFFSET 0) AS m;

-- tool rows left out
SELECT (count(*) FILTER (WHERE m.t IS NOT NULL AND strpos(m.t, :n1) > 0 AND strpos(m.t, :n2) > 0 AND strpos(m.t, :n3) > 0 AND strpos(m.t, :n4) > 0 AND strpos(m.t, :n5) > 0 AND strpos(m.t, :n6) > 0 AND strpos(m.t, :n7) > 0 AND strpos(m.t, :n8) > 0 AND strpos(m.t, :n9) > 0 AND strpos(m.t, :n10) > 0)) + (count(*) FILTER (WHERE true)) + (count(*) FILTER (WHERE m.t IS NOT NULL AND (m.t ~ :n11))) + (count(*) FILTER (WHERE m.t IS NOT NULL AND (m.t ~ :n12))) AS anon_1
FROM (SELECT m.search_vector AS v, CASE WHEN (m.role != 'tool') THEN lower(((((coalesce(m.content, '') || ' ') || coalesce(m.tool_name, '')) || ' ') || coalesce(m.tool_calls, ''))) END AS t
FROM messages AS m
WHERE m.id > :floor
 LIMIT ALL OFFSET 0) AS m;
