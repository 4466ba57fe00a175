"""Full-text search: query sanitising, the SQLite FTS5 routes and FTS maintenance."""
