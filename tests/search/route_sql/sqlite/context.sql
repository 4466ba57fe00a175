-- two hits
WITH hits(hit_id, sid, ts) AS
(VALUES (:id0, :sid0, :ts0), (:id1, :sid1, :ts1)),
near AS
(SELECT hits.hit_id AS hit_id, (SELECT other.id
FROM messages AS other
WHERE other.session_id = hits.sid AND (other.timestamp, other.id) < (hits.ts, hits.hit_id) ORDER BY other.timestamp DESC, other.id DESC
 LIMIT 1 OFFSET 0) AS before_id, (SELECT other.id
FROM messages AS other
WHERE other.session_id = hits.sid AND (other.timestamp, other.id) > (hits.ts, hits.hit_id) ORDER BY other.timestamp ASC, other.id ASC
 LIMIT 1 OFFSET 0) AS after_id
FROM hits)
 SELECT near.hit_id, 0 AS pos, m.role, m.content
FROM near JOIN messages AS m ON m.id = near.before_id UNION ALL SELECT near.hit_id, 1 AS pos, m.role, m.content
FROM near JOIN messages AS m ON m.id = near.hit_id UNION ALL SELECT near.hit_id, 2 AS pos, m.role, m.content
FROM near JOIN messages AS m ON m.id = near.after_id;
