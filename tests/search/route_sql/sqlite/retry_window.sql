-- newest
SELECT count(*) AS count_1
FROM (SELECT messages_fts_trigram.rowid AS rowid
FROM messages_fts_trigram
WHERE (messages_fts_trigram MATCH :match) AND messages_fts_trigram.rowid > :floor
 LIMIT :window OFFSET 0) AS found;

-- oldest
SELECT count(*) AS count_1
FROM (SELECT messages_fts_trigram.rowid AS rowid
FROM messages_fts_trigram
WHERE (messages_fts_trigram MATCH :match) AND messages_fts_trigram.rowid <= :ceiling
 LIMIT :window OFFSET 0) AS found;
