"""Large legacy databases for the upgrade benchmark, at any size, in the original's shapes.

A shape starts from the fixture the original wrote at that version (v9: L1 external-content
`messages_fts`, no trigram index; v22: the L3 inline `messages_fts` and
`messages_fts_trigram` with their `_content` copies) and gets the generated corpus
appended with that version's own columns, so the fixture's triggers index every row as the
original would have. The fixture's own rows stay (they are part of the shape).

Generation streams the corpus in slices (memory stays flat at 1M messages) and is timed
separately; it is not part of any measured number. `--upgrade-cache DIR` keeps the files
so before/after runs upgrade byte-identical copies.

    python -m benchmarks.legacy_corpus v9 100k OUT.db
"""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from . import corpus
from .raw_floor import MESSAGE_COLUMNS

REPO_ROOT = Path(__file__).resolve().parents[1]
FIXTURES = Path(
    os.environ.get("HERMES_STORE_FIXTURES", REPO_ROOT / "tests" / "fixtures" / "legacy")
)

#: shape -> (fixture file, schema_version the original wrote)
SHAPES: dict[str, tuple[str, int]] = {
    "v9": ("state_v09.db", 9),
    "v22": ("state_v22.db", 22),
}

#: every column a generated row may fill; a shape gets those its `messages`/`sessions` have
MESSAGE_FIELDS = MESSAGE_COLUMNS
SESSION_FIELDS = (
    "id",
    "source",
    "model",
    "started_at",
    "cwd",
    "message_count",
    "tool_call_count",
)

#: messages generated per corpus slice (one `corpus.generate` call, one commit)
SLICE = 50_000


def fixture_path(shape: str) -> Path:
    return FIXTURES / SHAPES[shape][0]


def _columns(conn: sqlite3.Connection, table: str) -> set[str]:
    return {str(r[1]) for r in conn.execute(f'PRAGMA table_info("{table}")')}


def _slices(total: int, seed: int) -> Iterator[list[corpus.SessionSpec]]:
    """The corpus in slices of about SLICE messages; session ids carry the slice number so
    slices never collide (with each other or with the fixture's ids)."""
    produced = 0
    number = 0
    while produced < total:
        want = min(SLICE, total - produced)
        sessions = corpus.generate(want, seed=seed * 1009 + number)
        for spec in sessions:
            spec.id = f"{spec.id}_s{number:03d}"
        produced += corpus.message_count(sessions)
        number += 1
        yield sessions


def _session_row(spec: corpus.SessionSpec, names: tuple[str, ...]) -> tuple[Any, ...]:
    calls = sum(len(m.get("tool_calls") or ()) for m in spec.messages)
    values = {
        "id": spec.id,
        "source": spec.source,
        "model": spec.model,
        "started_at": spec.started_at,
        "cwd": spec.cwd,
        "message_count": len(spec.messages),
        "tool_call_count": calls,
    }
    return tuple(values[n] for n in names)


def _message_row(session_id: str, msg: dict[str, Any], names: tuple[str, ...]) -> tuple[Any, ...]:
    calls = msg.get("tool_calls")
    values = {
        "session_id": session_id,
        "role": msg["role"],
        "content": msg.get("content"),
        "tool_call_id": msg.get("tool_call_id"),
        "tool_calls": json.dumps(calls) if calls else None,
        "tool_name": msg.get("tool_name"),
        "timestamp": msg["timestamp"],
        "token_count": msg.get("token_count"),
        "finish_reason": msg.get("finish_reason"),
        "active": 1,
        "compacted": 0,
    }
    return tuple(values[n] for n in names)


def build(shape: str, messages: int, target: Path, *, seed: int = 23) -> dict[str, Any]:
    """Copy the shape's fixture to `target` and append `messages` generated messages
    through the fixture's own triggers. Returns what was built (and how long it took)."""
    fixture = fixture_path(shape)
    if not fixture.exists():
        raise SystemExit(f"legacy fixture {fixture} not found (set HERMES_STORE_FIXTURES)")
    started = time.perf_counter()
    for suffix in ("", "-wal", "-shm"):
        Path(str(target) + suffix).unlink(missing_ok=True)
    shutil.copyfile(fixture, target)
    conn = sqlite3.connect(str(target), isolation_level=None)
    try:
        # generation only: the file ends in the fixture's own journal mode (WAL)
        conn.execute("PRAGMA synchronous=OFF")
        conn.execute("PRAGMA cache_size=-262144")
        s_names = tuple(n for n in SESSION_FIELDS if n in _columns(conn, "sessions"))
        m_names = tuple(n for n in MESSAGE_FIELDS if n in _columns(conn, "messages"))
        insert_session = (
            f"INSERT INTO sessions ({', '.join(s_names)}) "  # noqa: S608 (fixed names)
            f"VALUES ({', '.join('?' for _ in s_names)})"
        )
        insert_message = (
            f"INSERT INTO messages ({', '.join(m_names)}) "  # noqa: S608 (fixed names)
            f"VALUES ({', '.join('?' for _ in m_names)})"
        )
        for sessions in _slices(messages, seed):
            conn.execute("BEGIN IMMEDIATE")
            conn.executemany(insert_session, (_session_row(s, s_names) for s in sessions))
            conn.executemany(
                insert_message,
                (_message_row(s.id, m, m_names) for s in sessions for m in s.messages),
            )
            conn.execute("COMMIT")
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        total = int(conn.execute("SELECT COUNT(*) FROM messages").fetchone()[0])
        version = int(conn.execute("SELECT MAX(version) FROM schema_version").fetchone()[0])
    finally:
        conn.close()
    return {
        "shape": shape,
        "schema_version": version,
        "messages": total,
        "generated": messages,
        "file_mb": target.stat().st_size / 2**20,
        "build_s": time.perf_counter() - started,
    }


def adoption_view(path: Path) -> dict[str, Any]:
    """What `hermes-store current` says about a file (read on a scratch copy), reduced to
    what must match between a generated file and its fixture."""
    from hermes_store import migrate

    with tempfile.TemporaryDirectory(prefix="hermes-adopt-") as tmp:
        scratch = Path(tmp) / "state.db"
        shutil.copyfile(path, scratch)
        status = migrate.current(str(scratch)).as_dict()
    fts = status.get("fts") or {}
    return {
        "kind": status.get("kind"),
        "schema_version": status.get("schema_version"),
        "adopt_at_revision": status.get("adopt_at_revision"),
        "missing": status.get("missing"),
        "alembic_revision": status.get("alembic_revision"),
        "fts_layout": fts.get("layout") if isinstance(fts, dict) else None,
        "fts_triggers": fts.get("triggers") if isinstance(fts, dict) else None,
    }


def check_adoptable(shape: str, path: Path) -> dict[str, Any]:
    """The generated file must be adopted exactly like the fixture it grew from."""
    expected = adoption_view(fixture_path(shape))
    got = adoption_view(path)
    if got != expected:
        raise SystemExit(
            f"generated {shape} file is not adopted like its fixture: {got} != {expected}"
        )
    return got


def main(argv: list[str]) -> int:
    shape, size, out = argv
    built = build(shape, corpus.SIZES[size], Path(out))
    print(json.dumps({**built, "adoption": check_adoptable(shape, Path(out))}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
