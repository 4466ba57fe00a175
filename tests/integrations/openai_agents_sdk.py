"""Run the OpenAI Agents SDK's own session tests, unchanged, with hermes-store's session in
place of the SDK's `SQLiteSession` and `SQLAlchemySession` (openai_agents_sdk_plugin.py),
and count the results.

The tests are the installed SDK version's: from `$HERMES_STORE_OPENAI_AGENTS_TESTS` (a
directory holding that version's `tests/` and `pyproject.toml`: a checkout of its tag or
an unpacked sdist), else from its sdist on PyPI, fetched once into `.ci-cache/` (the sdist
ships the tests). Nothing of the SDK is kept in this repository.

    python tests/integrations/openai_agents_sdk.py --backend sqlite
    python tests/integrations/openai_agents_sdk.py --backend postgresql

tests/integrations/test_openai_agents_sdk_suite.py runs the same on both backends and
fails on any failure not in KNOWN_FAILURES (each listed, with its reason, in
docs/openai-agents.md).
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import os
import subprocess
import sys
import tarfile
import tempfile
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TESTS_ENV = "HERMES_STORE_OPENAI_AGENTS_TESTS"
CACHE = ROOT / ".ci-cache" / "openai-agents-sdk"

#: The SDK's test files that build a SQLiteSession or SQLAlchemySession: the sessions'
#: own tests, then the runner's tests that keep history in one.
SDK_TEST_FILES = (
    "tests/memory/test_session.py",
    "tests/memory/test_session_limit.py",
    "tests/extensions/memory/test_sqlalchemy_session.py",
    "tests/test_agent_runner.py",
    "tests/test_agent_runner_streamed.py",
    "tests/test_max_turns.py",
    "tests/test_soft_cancel.py",
    "tests/test_run_impl_resume_paths.py",
    "tests/test_tool_batch_failure_history.py",
    "tests/test_native_tool_failure_history.py",
    "tests/test_tool_failure_boundaries.py",
)

_CONNECTIONS = "reads the SQLiteSession's own sqlite3 connections and their registry"
_RAW_ROWS = "writes undecodable rows straight into the SDK's own table, which hermes-store has not"
_FILE_LOCK = "opens the SDK's table file with sqlite3 to hold or probe its write lock"
_SA_INTERNALS = "reads SQLAlchemySession's private engine set-up (its tables, locks, registry)"

#: The SDK tests that look inside the SDK's own classes (their files, tables, connections
#: and locks) and so cannot pass on another store, by test function, with the reason.
KNOWN_FAILURES = {
    "test_sqlite_session_close_closes_worker_thread_connections": _CONNECTIONS,
    "test_sqlite_session_reaps_connections_from_exited_worker_threads": _CONNECTIONS,
    "test_sqlite_session_closes_retired_connections_before_the_next_allocation": _CONNECTIONS,
    "test_sqlite_session_keeps_connections_of_live_worker_threads": _CONNECTIONS,
    "test_sqlite_session_rollback_failure_evicts_connection": _CONNECTIONS,
    "test_sqlite_session_close_retries_quarantined_connection": _CONNECTIONS,
    "test_sqlite_session_post_commit_cancellation_propagates_after_known_outcome": (
        "swaps the SQLiteSession's sqlite3 connection for one that pauses its commit"
    ),
    "test_sqlite_session_pop_item_skips_corrupt_most_recent": _RAW_ROWS,
    "test_sqlite_session_pop_item_returns_none_after_dropping_only_corrupt_rows": _RAW_ROWS,
    "test_sqlite_session_get_items_limit_skips_corrupt_newest_rows": _RAW_ROWS,
    "test_sqlite_session_get_items_session_settings_limit_skips_corrupt_rows": _RAW_ROWS,
    "test_sqlite_session_file_lock_is_shared_across_instances": (
        "counts SQLiteSession's class-level lock per file"
    ),
    "test_sqlite_session_failed_add_items_releases_write_lock": _FILE_LOCK,
    "test_sqlite_session_failed_clear_session_rolls_back": _FILE_LOCK,
    "test_sqlite_session_failed_pop_item_releases_write_lock": _FILE_LOCK,
    "test_sqlalchemy_session_defaults_to_escaped_non_ascii_storage": (
        "reads the stored JSON text from the SDK's own table"
    ),
    "test_sqlalchemy_session_can_store_non_ascii_without_escaping": (
        "reads the stored JSON text from the SDK's own table"
    ),
    "test_sqlite_fallback_reserves_writer_before_tail_claim": (
        "records the SQL the SDK's engine runs (hermes-store never uses that engine)"
    ),
    "test_pop_item_supports_unknown_delete_rowcount": _SA_INTERNALS,
    "test_pop_item_retries_returning_claim_lost_to_concurrent_delete": _SA_INTERNALS,
    "test_mutation_cancellation_waits_for_transaction_exit": _SA_INTERNALS,
    "test_pop_item_skips_corrupt_most_recent": _RAW_ROWS,
    "test_get_items_limit_skips_corrupt_newest_rows": _RAW_ROWS,
    "test_pop_item_returns_none_after_dropping_only_corrupt_rows": _RAW_ROWS,
    "test_add_items_cancelled_waiter_does_not_strand_table_init_lock": _SA_INTERNALS,
    "test_create_tables_false_does_not_allocate_shared_init_lock": _SA_INTERNALS,
    "test_get_items_same_timestamp_consistent_order": (
        "writes rows with equal timestamps straight into the SDK's own table"
    ),
    "test_pop_item_same_timestamp_returns_latest": (
        "writes rows with equal timestamps straight into the SDK's own table"
    ),
    "test_get_items_orders_by_id_for_ties": (
        "writes rows with equal timestamps straight into the SDK's own table"
    ),
    "test_engine_property_is_read_only": "SQLAlchemySession's `engine` property itself",
    "test_sqlite_configuration_registry_releases_collected_engines": _SA_INTERNALS,
    "test_sqlite_configuration_registry_does_not_grow_unbounded": _SA_INTERNALS,
    "test_handoff_resume_after_cancelled_compaction_commits": (
        "wraps SQLiteSession's private `_insert_items`"
    ),
}


def function_name(nodeid: str) -> str:
    """A test id's function name, without its file and parameters."""
    return nodeid.rsplit("::", 1)[-1].split("[", 1)[0]


@dataclass
class Result:
    """One run's outcomes: every test's, and those of the tests that made a hermes-store
    session (`hermes`)."""

    backend: str
    version: str
    outcomes: dict[str, dict[str, object]]
    returncode: int
    output: str = field(repr=False, default="")

    def counts(self, hermes_only: bool = False) -> Counter[str]:
        return Counter(
            str(o["outcome"]) for o in self.outcomes.values() if o["hermes"] or not hermes_only
        )

    def failures(self) -> dict[str, str]:
        return {
            nodeid: str(o.get("error", ""))
            for nodeid, o in self.outcomes.items()
            if o["outcome"] == "failed"
        }

    def unexpected_failures(self) -> dict[str, str]:
        return {
            nodeid: error
            for nodeid, error in self.failures().items()
            if function_name(nodeid) not in KNOWN_FAILURES
        }

    def summary(self) -> str:
        def line(counts: Counter[str]) -> str:
            return ", ".join(f"{counts[k]} {k}" for k in ("passed", "failed", "skipped"))

        return (
            f"openai-agents {self.version} tests on hermes-store ({self.backend}): "
            f"{line(self.counts())}; of them the {sum(self.counts(True).values())} "
            f"that made a hermes-store session: {line(self.counts(True))}"
        )


def sdk_version() -> str:
    return importlib.metadata.version("openai-agents")


def _has_tests(directory: Path) -> bool:
    return all((directory / name).is_file() for name in (*SDK_TEST_FILES, "pyproject.toml"))


def sdk_tests(version: str | None = None) -> Path:
    """A directory holding the installed SDK version's tests (see the module's doc)."""
    version = version or sdk_version()
    given = os.environ.get(TESTS_ENV)
    if given:
        directory = Path(given)
        if not _has_tests(directory):
            raise FileNotFoundError(f"{TESTS_ENV}={given} holds no tests/ of the SDK")
        return directory
    directory = CACHE / f"openai_agents-{version}"
    if _has_tests(directory):
        return directory
    with tempfile.TemporaryDirectory() as download:
        subprocess.run(
            [
                sys.executable, "-m", "pip", "download", "--quiet", "--no-deps",
                "--no-binary", ":all:", f"openai-agents=={version}", "-d", download,
            ],
            check=True,
            timeout=600,
        )  # fmt: skip
        (sdist,) = Path(download).glob("openai_agents-*.tar.gz")
        CACHE.mkdir(parents=True, exist_ok=True)
        with tarfile.open(sdist) as archive:
            prefix = f"openai_agents-{version}/"
            wanted = [
                m
                for m in archive.getmembers()
                if m.name.startswith(prefix + "tests/") or m.name == prefix + "pyproject.toml"
            ]
            archive.extractall(CACHE, members=wanted, filter="data")
    if not _has_tests(directory):
        raise FileNotFoundError(f"the sdist of openai-agents {version} holds no tests")
    return directory


def run(backend: str, tests: Path, report: Path, files: tuple[str, ...] = SDK_TEST_FILES) -> Result:
    """Run `files` of the SDK's tests under `tests` on hermes-store's `backend`."""
    here = Path(__file__).resolve().parent
    env = dict(os.environ)
    env.update(
        {
            "HERMES_STORE_SDK_BACKEND": backend,
            "HERMES_STORE_SDK_REPORT": str(report),
            # the plugin, and the test suite's helpers for PostgreSQL databases
            "PYTHONPATH": os.pathsep.join([str(here), str(here.parent)]),
        }
    )
    done = subprocess.run(
        [
            sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
            "-p", "openai_agents_sdk_plugin", "-o", "addopts=", *files,
        ],
        cwd=tests,
        env=env,
        capture_output=True,
        text=True,
        timeout=3600,
        check=False,
    )  # fmt: skip
    outcomes = json.loads(report.read_text(encoding="utf-8")) if report.exists() else {}
    return Result(backend, sdk_version(), outcomes, done.returncode, done.stdout + done.stderr)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--backend", choices=("sqlite", "postgresql"), default="sqlite")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        result = run(args.backend, sdk_tests(), Path(scratch) / "report.json")
    for nodeid, error in sorted(result.failures().items()):
        known = KNOWN_FAILURES.get(function_name(nodeid))
        print(f"{'known' if known else 'NEW'} failure: {nodeid}: {known or error}")
    print(result.summary())
    if not result.outcomes:
        print(result.output[-3000:])
        return 2
    return 1 if result.unexpected_failures() else 0


if __name__ == "__main__":
    sys.exit(main())
