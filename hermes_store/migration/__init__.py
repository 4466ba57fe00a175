"""What a database's schema is and how it gets to head: the project head (`head`),
recognising files the original wrote (`adoption`, `inventory`), the migration part
of the dialect bundle (`dialects`), reading a database as it is (`read_only`),
schema snapshots, and `copy` between databases. The public entry point is
`hermes_store.migrate` (upgrade, current, check), which stays at the top level.

Imports allowed (tests/project/test_packages.py checks them):

    errors, config, contract, models, runtime, sqlite, search
    copy: migrate, repositories
"""
