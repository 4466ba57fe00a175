"""The OpenAI Agents SDK's own session tests, unchanged, on hermes-store's session
(tests/integrations/openai_agents_sdk.py runs them; openai_agents_sdk_plugin.py swaps
the session in), on SQLite and on PostgreSQL. Needs the `openai-agents-tests` extra (the
SDK and pytest-asyncio) and the SDK's test files (its sdist from PyPI, or
$HERMES_STORE_OPENAI_AGENTS_TESTS); skipped with the reason otherwise."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

pytest.importorskip("agents", reason="the openai-agents extra is not installed")
pytest.importorskip(
    "pytest_asyncio", reason="the SDK's tests need pytest-asyncio (the openai-agents-tests extra)"
)

from helpers.postgres import require_pg  # noqa: E402
from openai_agents_sdk import KNOWN_FAILURES, function_name, run, sdk_tests  # noqa: E402

DOC = Path(__file__).resolve().parents[2] / "docs" / "openai-agents.md"


@pytest.fixture(scope="module")
def tests_dir() -> Path:
    try:
        return sdk_tests()
    except (subprocess.SubprocessError, OSError) as exc:
        pytest.skip(f"the SDK's test files could not be had: {exc}")


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
def test_the_sdk_session_tests_pass_on_hermes_store(
    backend: str, tests_dir: Path, tmp_path: Path
) -> None:
    if backend == "postgresql":
        require_pg()
    result = run(backend, tests_dir, tmp_path / "report.json")
    assert result.outcomes, result.output[-3000:]
    print(result.summary())
    assert result.unexpected_failures() == {}
    # Every file ran and the sessions were exercised: most SDK tests that built a
    # session pass on hermes-store.
    hermes = result.counts(hermes_only=True)
    assert hermes["passed"] >= 200, result.summary()
    assert {function_name(t) for t in result.failures()} == set(KNOWN_FAILURES), (
        "a known failure now passes (or no longer exists): update KNOWN_FAILURES and the doc"
    )


def test_the_doc_lists_every_known_failure_with_its_reason() -> None:
    listed = dict(re.findall(r"^- `(test_\w+)`: (.+)$", DOC.read_text(encoding="utf-8"), re.M))
    assert listed == KNOWN_FAILURES
