"""Subprocesses the tests run: the command line, and a writer killed mid-transaction."""

from __future__ import annotations

import subprocess
import sys

HANGING_WRITER = """
import sys, time
from sqlalchemy import text
from hermes_store.store import Store

store = Store(sys.argv[1])

def work(session):
    # a new session, its messages, its counter and another session's title: one
    # transaction through Store.write, killed before it commits
    session.execute(text(
        "INSERT INTO sessions (id, source, started_at) VALUES ('doomed', 'cli', 1.0)"))
    for i in range(200):
        session.execute(text(
            "INSERT INTO messages (session_id, role, content, timestamp, active, compacted)"
            " VALUES ('doomed', 'user', :c, 1.0, 1, 0)"), {"c": f"doomed {i}"})
    session.execute(text("UPDATE sessions SET message_count = 200 WHERE id = 'doomed'"))
    session.execute(text("UPDATE sessions SET title = 'half' WHERE id = 'kept'"))
    print("inside", flush=True)
    time.sleep(3600)

store.write(work)
"""


#: HANGING_WRITER with a page cache of a few pages: its changes no longer fit in memory,
#: so SQLite writes them into the database file (in DELETE mode, after saving the pages
#: they replace in the rollback journal), as a prune or a copy into SQLite does. Killed
#: then, it leaves a hot journal that must be rolled back before anyone reads the file.
SPILLING_WRITER = HANGING_WRITER.replace(
    "def work(session):\n",
    "def work(session):\n    session.exec_driver_sql('PRAGMA cache_size=5')\n",
).replace("f\"doomed {i}\"", "f\"doomed {i} \" + 'x' * 3000")


def start_hanging_writer(url: str, *, spill: bool = False) -> subprocess.Popen[str]:
    """HANGING_WRITER (SPILLING_WRITER with `spill`) on `url`, returned once it is inside
    its transaction."""
    proc = subprocess.Popen(
        [sys.executable, "-c", SPILLING_WRITER if spill else HANGING_WRITER, url],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    line = proc.stdout.readline()
    if line.strip() != "inside":
        proc.kill()
        _, err = proc.communicate(timeout=10)
        raise AssertionError(f"the hanging writer did not start: {err}")
    return proc


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    """`hermes-store ARGS...` in a subprocess, as a user runs it; output captured."""
    return subprocess.run(
        [sys.executable, "-m", "hermes_store.cli", *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


