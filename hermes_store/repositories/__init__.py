"""The repositories: what gateway services get injected, one module per subject; the
rows they return (`rows`), day boundaries in SQL for both dialects (`analytics`),
and the shared pieces (`_`-prefixed).

Imports allowed (tests/project/test_packages.py checks them):

    errors, config, contract, models, redaction, runtime, sqlite, postgresql, migration,
    search, store
    housekeeping: migrate
"""
