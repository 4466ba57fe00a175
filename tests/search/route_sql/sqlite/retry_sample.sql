-- trigram index
SELECT count(*) AS count_1
FROM messages_fts_trigram
WHERE (messages_fts_trigram MATCH :probe) AND messages_fts_trigram.rowid > :floor;
