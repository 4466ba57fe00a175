"""Adapters that let agent frameworks keep their conversation memory in a hermes-store
database. Each lives in its own module and needs its framework's extra; the core package
never imports them.

Imports allowed (tests/project/test_packages.py checks them):

    errors, contract, store, aio, models, repositories
"""
