"""PostgreSQL's faults: which server errors are transient, and whether a COMMIT that
got no answer was applied.

Imports allowed (tests/project/test_packages.py checks them):

    errors
"""
