"""Google ADK's own session-service tests, run unchanged on HermesSessionService, on SQLite
and on PostgreSQL (issue 40 item 3).

ADK's tests are not part of this repository and not in ADK's sdist (its sdist ships
src/google/adk only), so they come from a checkout of google/adk-python at the tag of
the installed version: HERMES_STORE_ADK_TESTS names its
tests/unittests/sessions/test_session_service.py (or the checkout). The file is copied,
as it is, into a scratch directory with a pytest.ini of ours, and a child pytest runs it
with tests/integrations/adk_suite_plugin.py, which puts HermesSessionService where the
file builds its DatabaseSessionService. Without the `adk` extra, pytest-asyncio or the
file, the test skips with the reason; CI installs none of them.

Every test the plugin keeps must pass: a failure here names the ADK test that failed.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from helpers.postgres import PG_ENV, require_pg

ADK_TESTS_ENV = "HERMES_STORE_ADK_TESTS"
SUITE = Path("tests") / "unittests" / "sessions" / "test_session_service.py"
HERE = Path(__file__).resolve().parent
PYTEST_INI = """[pytest]
asyncio_mode = auto
asyncio_default_fixture_loop_scope = function
"""


def _suite() -> Path:
    adk = pytest.importorskip(
        "google.adk", reason="the adk extra is not installed (pip install -e '.[adk]')"
    )
    pytest.importorskip(
        "pytest_asyncio", reason="ADK's tests need pytest-asyncio (pip install pytest-asyncio)"
    )
    given = os.environ.get(ADK_TESTS_ENV)
    if not given:
        pytest.skip(
            f"{ADK_TESTS_ENV} is not set: name {SUITE} of a google/adk-python checkout at "
            f"v{adk.__version__} (the google-adk sdist ships no tests)"
        )
    path = Path(given)
    if path.is_dir():
        path = path / SUITE
    if not path.is_file():
        pytest.fail(f"{ADK_TESTS_ENV}={given}: no such file ({path})")
    return path


def _counts(output: str) -> dict[str, int]:
    """The counts of pytest's closing line (passed, failed, skipped, deselected, ...)."""
    closing = [line for line in output.splitlines() if re.search(r"\d+ (passed|failed)", line)]
    assert closing, output
    return {word: int(n) for n, word in re.findall(r"(\d+) (\w+)", closing[-1])}


@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
def test_adk_session_service_suite_passes(backend: str, tmp_path: Path) -> None:
    suite = _suite()
    if backend == "postgresql":
        require_pg()
    run_dir = tmp_path / "adk"
    run_dir.mkdir()
    (run_dir / suite.name).write_bytes(suite.read_bytes())
    (run_dir / "pytest.ini").write_text(PYTEST_INI)
    environ = {
        key: value
        for key, value in os.environ.items()
        if key not in ("HERMES_STORE_URL", "PYTEST_ADDOPTS", "PYTEST_XDIST_WORKER")
    }
    environ["HERMES_STORE_ADK_BACKEND"] = backend
    environ["PYTHONPATH"] = os.pathsep.join([str(HERE), str(HERE.parent)])
    if PG_ENV in os.environ:
        environ[PG_ENV] = os.environ[PG_ENV]
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "adk_suite_plugin", "-p", "no:cacheprovider",
         "-q", "-rfE", suite.name],
        cwd=run_dir,
        env=environ,
        capture_output=True,
        text=True,
        timeout=900,
    )  # fmt: skip
    counts = _counts(done.stdout)
    print(f"ADK {suite} on {backend}: {counts}")
    assert done.returncode == 0, done.stdout[-6000:] + done.stderr[-2000:]
    assert counts.get("passed", 0) >= 20, counts  # the file's service tests ran
