"""Benchmarks: hermes-store's repositories against a raw-sqlite3 floor on the same schema.

Run from the repository root: ``python -m benchmarks [--size 10k|100k|1m] [--quick]
[--json PATH]``. See ``benchmarks/__main__.py`` for what is measured.
"""

import os

#: Set (to anything) to leave the agent-framework peers out of benchmarks.peers and
#: benchmarks.per_turn, each listed as skipped with the reason: `--smoke` sets it, so the
#: test suite's smoke run takes the same time whether the optional peers are installed.
NO_PEERS_ENV = "HERMES_BENCH_NO_PEERS"


def peers_left_out() -> str | None:
    """Why the peers are not run in this process, or None when they are."""
    if os.environ.get(NO_PEERS_ENV):
        return f"not run: {NO_PEERS_ENV} is set (python -m benchmarks --smoke sets it)"
    return None
