-- four literals, no filter
SELECT (SELECT count(*) AS count_1
FROM (SELECT messages_fts_trigram.rowid AS id
FROM messages_fts_trigram
WHERE (messages_fts_trigram MATCH :tri1) AND messages_fts_trigram.rowid > :floor UNION SELECT messages_fts.rowid AS id
FROM messages_fts
WHERE (messages_fts MATCH :fts1) AND messages_fts.rowid > :floor) AS anon_2) + (SELECT count(*) AS count_2
FROM (SELECT m.id AS id
FROM messages AS m
WHERE m.id > :floor) AS anon_3) + (SELECT count(*) AS count_3
FROM (SELECT messages_fts_trigram.rowid AS id
FROM messages_fts_trigram
WHERE (messages_fts_trigram MATCH :tri5) AND messages_fts_trigram.rowid > :floor UNION SELECT messages_fts.rowid AS id
FROM messages_fts
WHERE (messages_fts MATCH :fts5) AND messages_fts.rowid > :floor) AS anon_4) + (SELECT count(*) AS count_4
FROM (SELECT messages_fts_trigram.rowid AS id
FROM messages_fts_trigram
WHERE (messages_fts_trigram MATCH :tri8) AND messages_fts_trigram.rowid > :floor UNION SELECT messages_fts.rowid AS id
FROM messages_fts
WHERE (messages_fts MATCH :fts8) AND messages_fts.rowid > :floor) AS anon_5) AS anon_1;

-- tool rows left out
SELECT (SELECT count(*) AS count_1
FROM (SELECT messages_fts_trigram.rowid AS id
FROM messages_fts_trigram
WHERE (messages_fts_trigram MATCH :tri1) AND messages_fts_trigram.rowid > :floor) AS anon_2) + (SELECT count(*) AS count_2
FROM (SELECT m.id AS id
FROM messages AS m
WHERE m.id > :floor) AS anon_3) + (SELECT count(*) AS count_3
FROM (SELECT messages_fts_trigram.rowid AS id
FROM messages_fts_trigram
WHERE (messages_fts_trigram MATCH :tri4) AND messages_fts_trigram.rowid > :floor) AS anon_4) + (SELECT count(*) AS count_4
FROM (SELECT messages_fts_trigram.rowid AS id
FROM messages_fts_trigram
WHERE (messages_fts_trigram MATCH :tri6) AND messages_fts_trigram.rowid > :floor) AS anon_5) AS anon_1;
