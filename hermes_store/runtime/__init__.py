"""What runs a statement on an open database, under the `Store`: the engine (the only
module that knows the drivers, and `Prepared` statements run at them), the dialect bundle
(`backends`) and its store part (`store_backends`), the retry policy, and waiting for
another process's lock.

Imports allowed (tests/project/test_packages.py checks them):

    errors, config, contract, sqlite, postgresql
    store_backends: search
"""
