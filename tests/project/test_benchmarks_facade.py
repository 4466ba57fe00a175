"""`python -m benchmarks.facade` without the original: the original Hermes code is an
optional baseline that the project never holds, so the script says how to get it and
exits 0 (the comparison itself runs by hand, docs/benchmarks.md)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "HERMES_ORIGINAL"}
    return subprocess.run(
        [sys.executable, "-m", "benchmarks.facade", *args],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_without_an_original_it_says_how_to_get_one_and_exits_0() -> None:
    proc = _run()
    assert proc.returncode == 0, proc.stderr
    assert "facade beside the original: skipped (no original given)" in proc.stdout
    assert "--original /path/to/original" in proc.stdout
    assert "Traceback" not in proc.stderr


def test_a_directory_without_hermes_state_is_refused_cleanly(tmp_path: Path) -> None:
    proc = _run("--original", str(tmp_path))
    assert proc.returncode == 0, proc.stderr
    assert f"no hermes_state.py in {tmp_path}" in proc.stdout
    assert "Traceback" not in proc.stderr
