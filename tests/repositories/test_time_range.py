"""Times outside what every layer computes with are refused where they enter (issue 35
item 15): one session imported with `started_at=1e300` would break PostgreSQL's `stats`
for the whole database (`timestamp out of range`). Appends, batch appends, the
all-or-nothing import and the entry-by-entry import refuse them with a typed error or a
listed reason, the same on both backends, and the bounds themselves are stored and
computed with on both (`stats` over them)."""

from __future__ import annotations

import json
import os
import pickle
import subprocess
import sys
from pathlib import Path

import pytest

from hermes_store.errors import InvalidInput, TimeOutOfRange
from hermes_store.repositories.encoding import TIME_MAX, TIME_MIN
from hermes_store.repositories.maintenance import MaintenanceRepository
from hermes_store.repositories.messages import MessageRepository
from hermes_store.repositories.sessions import SessionRepository
from hermes_store.store import Store

OUT_OF_RANGE = [1e300, -1e300, TIME_MAX + 1, TIME_MIN - 1]


def _cli(*args: str, driver: str = "sqlite3") -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "hermes_store.cli", *args],
        capture_output=True,
        text=True,
        env={**os.environ, "HERMES_STORE_SQLITE_DRIVER": driver},
        timeout=120,
        check=False,
    )


def _counts(store: Store) -> tuple[int, int]:
    sessions = SessionRepository(store).list_sessions_rich(limit=None)
    return len(sessions), sum(int(s["message_count"] or 0) for s in sessions)


@pytest.mark.parametrize("value", OUT_OF_RANGE)
def test_an_append_with_a_time_out_of_range_is_refused(store: Store, value: float) -> None:
    SessionRepository(store).create_session("s", "cli")
    messages = MessageRepository(store)
    before = _counts(store)
    with pytest.raises(TimeOutOfRange) as refused:
        messages.append_message("s", "user", "when?", timestamp=value)
    assert isinstance(refused.value, InvalidInput)
    assert refused.value.field == "timestamp" and "nothing was written" in str(refused.value)
    copy = pickle.loads(pickle.dumps(refused.value))
    assert type(copy) is TimeOutOfRange and str(copy) == str(refused.value)
    with pytest.raises(TimeOutOfRange):
        messages.replace_messages("s", [{"role": "user", "content": "x", "timestamp": value}])
    assert _counts(store) == before


def _entry(sid: str, **fields: object) -> dict[str, object]:
    messages = fields.pop("messages", [{"role": "user", "content": "hello", "timestamp": 1.0}])
    return {"id": sid, "source": "cli", "started_at": 1.0, **fields, "messages": messages}


BAD_ENTRIES = [
    _entry("far-start", started_at=1e300),
    _entry("far-end", ended_at=-1e300),
    _entry("far-message", messages=[{"role": "user", "content": "x", "timestamp": 1e300}]),
]


def test_imports_refuse_times_out_of_range(store: Store) -> None:
    maintenance = MaintenanceRepository(store)
    result = maintenance.import_sessions([*BAD_ENTRIES, _entry("fine")])
    assert result["ok"] is False and result["imported"] == 0
    assert [e["session_id"] for e in result["errors"]] == ["far-start", "far-end", "far-message"]
    assert all("0001-01-01 to 9999-12-31" in e["error"] for e in result["errors"])
    report = maintenance.import_each([*BAD_ENTRIES, _entry("fine")])
    assert report.imported == 1
    assert [e["session_id"] for e in report.errors] == ["far-start", "far-end", "far-message"]
    assert _counts(store) == (1, 1)


def test_the_bounds_are_stored_and_stats_computes_with_them(
    backend_url: str, tmp_path: Path
) -> None:
    """The CLI's import of a file holding the bad entries lists them and exits 1; `stats`
    then works (on PostgreSQL one such session would fail it for the whole database), over sessions
    and messages at both bounds."""
    with Store(backend_url) as store:
        SessionRepository(store).create_session("edge", "cli")
        messages = MessageRepository(store)
        messages.append_message("edge", "user", "first", timestamp=TIME_MIN)
        messages.append_message("edge", "user", "last", timestamp=TIME_MAX)
    source = tmp_path / "in.jsonl"
    edges = [_entry("min", started_at=TIME_MIN), _entry("max", started_at=TIME_MAX)]
    source.write_text("".join(json.dumps(e) + "\n" for e in [*BAD_ENTRIES, *edges]))
    drivers = ["sqlite3", "pysqlite3"] if backend_url.startswith("sqlite") else ["sqlite3"]
    imported = _cli("sessions", "import", str(source), "--json", "--url", backend_url)
    assert imported.returncode == 1, imported.stderr
    report = json.loads(imported.stdout)
    assert report["imported"] == 2
    assert [e["session_id"] for e in report["errors"]] == ["far-start", "far-end", "far-message"]
    for driver in drivers:
        for command in (["stats"], ["stats", "--by", "model,day", "--json"], ["sessions", "list"]):
            done = _cli(*command, "--url", backend_url, driver=driver)
            assert done.returncode == 0, (driver, command, done.stderr)


@pytest.mark.parametrize("value", [1e300, TIME_MIN - 1])
def test_a_cooldown_out_of_range_is_not_recorded(store: Store, value: float) -> None:
    """The compression cooldown is advisory (a failure to record it is logged, never
    raised): a time out of range is logged and not stored, on both backends."""
    sessions = SessionRepository(store)
    sessions.create_session("s", "cli")
    sessions.record_compression_failure_cooldown("s", value, "boom")
    row = sessions.get_session("s")
    assert row is not None and row["compression_failure_cooldown_until"] is None
    sessions.record_compression_failure_cooldown("s", TIME_MAX, "boom")
    cooldown = sessions.get_compression_failure_cooldown("s")
    assert cooldown is not None and cooldown["cooldown_until"] == TIME_MAX
