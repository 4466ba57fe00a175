"""`python -m benchmarks.point_calls` runs end to end, quickly: every path measured on
each driver, with a positive CPU time and its ratio to the raw floor of its kind (the
figures themselves are never asserted: the machine is shared)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]


def test_every_path_is_measured_on_both_drivers(tmp_path: Path) -> None:
    out = tmp_path / "points.json"
    proc = subprocess.run(
        [sys.executable, "-m", "benchmarks.point_calls"]
        + ["--samples", "2", "--batch", "3", "--json", str(out)],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    results = json.loads(out.read_text())["point_calls"]
    assert [result["driver"] for result in results] == ["sqlite3", "pysqlite3"]
    for result in results:
        paths = [row["path"] for row in result["rows"]]
        assert paths == [
            "read: raw driver + lock",
            "read: Store.read_one",
            "read: facade get_meta",
            "read: facade get_handoff_state",
            "write: raw driver + lock",
            "write: Store.write_one",
            "write: facade end_session",
        ]
        for row in result["rows"]:
            assert row["cpu_p50_us"] > 0 and row["ratio"] > 0, row
        floors = [row["ratio"] for row in result["rows"] if "raw driver" in row["path"]]
        assert floors == [1.0, 1.0]
    assert "read: Store.read_one" in proc.stdout
