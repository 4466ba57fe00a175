"""Importable test helpers (fixtures live in tests/conftest.py only): legacy fixture
files and raw SQLite access (`databases`), PostgreSQL databases per test (`postgres`),
plain SQL on either backend (`raw_sql`), subprocesses (`processes`), throwaway
PostgreSQL clusters and PgBouncer for the outage tests (`pg_cluster`)."""
