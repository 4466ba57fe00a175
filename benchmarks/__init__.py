"""Benchmarks: hermes-store's repositories against a raw-sqlite3 floor on the same schema.

Run from the repository root: ``python -m benchmarks [--size 10k|100k|1m] [--quick]
[--json PATH]``. See ``benchmarks/__main__.py`` for what is measured.
"""
