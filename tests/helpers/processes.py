"""Subprocesses the tests run: the command line, and a writer killed mid-transaction."""

from __future__ import annotations

import io
import locale
import logging
import os
import subprocess
import sys
import traceback
import warnings
from collections.abc import Iterable, Mapping

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




#: the warning categories a Python process ignores unless told otherwise
_IGNORED_AT_START = (DeprecationWarning, PendingDeprecationWarning, ImportWarning, ResourceWarning)


def run_cli_here(
    *args: str, env: Mapping[str, str] | None = None, unset: Iterable[str] = ()
) -> subprocess.CompletedProcess[str]:
    """`hermes-store ARGS...` through `hermes_store.cli.main` in this process, with
    `env` set and `unset` removed for the call: the exit status, stdout and stderr a
    user sees, as `run_cli` returns them, without an interpreter start and the imports
    per call. For what only a process shows (a signal, a closed pipe, the SQLite driver
    chosen at start, what is imported), use `run_cli`.

    The output goes through pipes-like streams (no terminal) and is read back as
    `subprocess.run(text=True)` reads it; a warning the library logs reaches stderr as
    in a process that configures no logging (Python's last-resort handler), and so does
    a warning the interpreter's default filters show; an exception escaping `main` is a
    traceback on stderr and exit status 1."""
    from hermes_store.cli import main

    encoding = locale.getpreferredencoding(False)
    out = io.TextIOWrapper(io.BytesIO(), encoding=encoding, write_through=True)
    err = io.TextIOWrapper(io.BytesIO(), encoding=encoding, errors="backslashreplace",
                           write_through=True)  # fmt: skip
    # the last-resort handler's form: the bare message, WARNING and above, to stderr
    handler = logging.StreamHandler(err)
    handler.setLevel(logging.WARNING)
    root = logging.getLogger()
    saved_env = dict(os.environ)
    saved_streams = sys.stdout, sys.stderr
    os.environ.update(env or {})
    for name in unset:
        os.environ.pop(name, None)
    root.addHandler(handler)
    sys.stdout, sys.stderr = out, err
    try:
        with warnings.catch_warnings(record=True) as shown:
            # the interpreter's own warning filters, not pytest's
            warnings.resetwarnings()
            for category in _IGNORED_AT_START:
                warnings.simplefilter("ignore", category)
            try:
                code = main(list(args))
            finally:
                for w in shown:
                    err.write(warnings.formatwarning(w.message, w.category, w.filename, w.lineno))
    except SystemExit as exc:
        if exc.code is None or isinstance(exc.code, int):
            code = exc.code or 0
        else:
            print(exc.code, file=err)
            code = 1
    except Exception:  # noqa: BLE001 (what the interpreter does with it)
        traceback.print_exc(file=err)
        code = 1
    finally:
        sys.stdout, sys.stderr = saved_streams
        root.removeHandler(handler)
        os.environ.clear()
        os.environ.update(saved_env)
    out.flush()
    err.flush()

    def text(stream: io.TextIOWrapper) -> str:
        raw = stream.buffer
        assert isinstance(raw, io.BytesIO)
        return raw.getvalue().decode(encoding).replace("\r\n", "\n").replace("\r", "\n")

    return subprocess.CompletedProcess(
        ["hermes-store", *args], code, stdout=text(out), stderr=text(err)
    )
