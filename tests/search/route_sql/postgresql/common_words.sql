-- ANALYZE's statistics
SELECT CAST(CAST(s.most_common_elems AS TEXT) AS TEXT[]) AS words, s.most_common_elem_freqs AS freqs
FROM pg_stats AS s JOIN pg_class AS c ON c.oid = to_regclass('messages') JOIN pg_namespace AS n ON n.oid = c.relnamespace
WHERE s.schemaname = n.nspname AND s.tablename = c.relname AND s.attname = :vector AND NOT s.inherited;
