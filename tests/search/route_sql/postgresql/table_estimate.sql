-- the table
EXPLAIN (FORMAT JSON) SELECT messages.id
FROM messages;
