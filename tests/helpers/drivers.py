"""Running a test on both SQLite drivers (docs/development.md, "Both SQLite drivers").

A process drives every SQLite file through one library, chosen once (hermes_store/
sqlite/driver.py), and the suite's process uses the standard library's. A test that
requests the `sqlite_driver` fixture (or a module with `pytestmark =
pytest.mark.usefixtures("sqlite_driver")`) is collected once per driver; the variant of
this process's driver runs here, as any test does, and the other is replaced at
collection by a `ChildDriverItem`, which runs that same test id in a child pytest with
HERMES_STORE_SQLITE_DRIVER set to its driver. There it is the native variant, so it runs
in-process, fixtures and all, and its outcome (pass, failure with its report, skip) is
the item's. One child pytest runs all of a module's variants of a driver (the first item
to run starts it; the others, under pytest-xdist in any worker, read its results).
"""

from __future__ import annotations

import fcntl
import hashlib
import importlib.util
import json
import os
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest

DRIVER_ENV = "HERMES_STORE_SQLITE_DRIVER"
DRIVERS = ("sqlite3", "pysqlite3")
#: The longest one test may take in its child pytest.
CHILD_TIMEOUT_S = 600


def process_driver() -> str:
    """The driver this process runs on (conftest sets it before any hermes_store import)."""
    return os.environ.get(DRIVER_ENV, "sqlite3").strip().lower() or "sqlite3"


def missing_driver(driver: str) -> str | None:
    """Why `driver` cannot run here (None: it can)."""
    if driver == "pysqlite3" and importlib.util.find_spec("pysqlite3") is None:
        return "pysqlite3 is not installed (a dependency where it has a wheel)"
    if driver == "sqlcipher3" and importlib.util.find_spec("sqlcipher3") is None:
        return "sqlcipher3 is not installed (the encryption extra; the test extra on Linux x86_64)"
    return None


class ChildFailed(Exception):
    """The test failed in its child pytest; the message is the child's report."""


class ChildDriverItem(pytest.Item):
    """A test variant for another driver than this process's: run in a child pytest."""

    def __init__(self, *, driver: str, original: pytest.Item, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.driver = driver
        self.original_nodeid = original.nodeid
        self.keywords.update(original.keywords)
        self.own_markers.extend(original.iter_markers())
        self._original_location = original.location

    def reportinfo(self) -> tuple[Path, int | None, str]:
        path, line, name = self._original_location
        return Path(self.config.rootpath, path), line, f"{name} (child pytest, {self.driver})"

    def runtest(self) -> None:
        why = missing_driver(self.driver)
        if why is not None:
            if os.environ.get("CI") == "true" and self.driver == "pysqlite3":
                from hermes_store.sqlite.driver import has_pysqlite3_wheel

                if has_pysqlite3_wheel():
                    raise ChildFailed(f"{why}, but this platform has its wheel")
            pytest.skip(why)
        outcome, report = _module_batch(self)[self.original_nodeid]
        if outcome == "skipped":
            pytest.skip(f"in the child pytest: {report}")
        if outcome == "failed":
            raise ChildFailed(report)

    def repr_failure(self, excinfo: pytest.ExceptionInfo[BaseException], style: Any = None) -> str:
        if isinstance(excinfo.value, ChildFailed):
            return f"{DRIVER_ENV}={self.driver}, in a child pytest:\n{excinfo.value}"
        return str(super().repr_failure(excinfo))


def split_by_driver(items: list[pytest.Item]) -> tuple[list[pytest.Item], list[pytest.Item]]:
    """The items to run (a variant of another driver replaced by its ChildDriverItem) and
    those to deselect (another driver's variant on PostgreSQL, which has no SQLite
    driver)."""
    here = process_driver()
    keep: list[pytest.Item] = []
    drop: list[pytest.Item] = []
    for item in items:
        params = getattr(item, "callspec", None)
        driver = params.params.get("sqlite_driver") if params is not None else None
        if driver is None or driver == here:
            keep.append(item)
        elif params is not None and params.params.get("backend_url") == "postgresql":
            drop.append(item)
        else:
            assert item.parent is not None
            keep.append(
                ChildDriverItem.from_parent(
                    item.parent, name=item.name, driver=driver, original=item
                )
            )
    return keep, drop


def _junit_key(nodeid: str) -> tuple[str, str]:
    """The (classname, name) junit XML gives the test `nodeid`."""
    path, *classes, name = nodeid.split("::")
    return ".".join([path.removesuffix(".py").replace("/", "."), *classes]), name


def _run_batch(config: pytest.Config, driver: str, nodeids: list[str]) -> dict[str, list[str]]:
    """Run `nodeids` in one child pytest on `driver`: per test id, its outcome (passed,
    failed, skipped) and its report (the failure with the test's output, or the reason
    for the skip)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
    env[DRIVER_ENV] = driver
    with tempfile.TemporaryDirectory(prefix="hermes-driver-") as scratch:
        report = Path(scratch, "report.xml")
        command = [
            sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
            "-p", "no:xdist", f"--basetemp={scratch}/tmp", f"--junitxml={report}",
            # each test's captured output and logs in the report, for its failure
            "-o", "junit_logging=all", *nodeids,
        ]  # fmt: skip
        done = subprocess.run(
            command,
            cwd=config.rootpath,
            env=env,
            capture_output=True,
            text=True,
            timeout=CHILD_TIMEOUT_S * len(nodeids),
            check=False,
        )
        output = done.stdout + done.stderr
        cases = list(ET.parse(report).getroot().iter("testcase")) if report.is_file() else []
    by_key = {(case.get("classname", ""), case.get("name", "")): case for case in cases}
    results: dict[str, list[str]] = {}
    for nodeid in nodeids:
        case = by_key.get(_junit_key(nodeid))
        if done.returncode not in (0, 1) or case is None:
            # an interrupted or broken child run, or one that never reached this test
            results[nodeid] = [
                "failed",
                f"the child pytest ran {nodeid} with no result of it (exit "
                f"{done.returncode}):\n{output}",
            ]
            continue
        problems = [e for e in case if e.tag in ("failure", "error")]
        skipped = case.find("skipped")
        if problems:
            captured = "".join(
                f"\n----- {e.tag} -----\n{e.text or ''}"
                for e in case
                if e.tag in ("system-out", "system-err")
            )
            text = "\n".join(f"{e.get('message', '')}\n{e.text or ''}" for e in problems)
            results[nodeid] = ["failed", f"{nodeid}:\n{text}{captured}"]
        elif skipped is not None:
            results[nodeid] = ["skipped", skipped.get("message", "")]
        else:
            results[nodeid] = ["passed", ""]
    return results


def _module_batch(item: ChildDriverItem) -> dict[str, list[str]]:
    """The results of every variant of `item`'s driver in `item`'s module this session
    runs, from one child pytest for all of them (an interpreter start and a collection
    per module, not per test). Under pytest-xdist the workers share them through a file
    beside their temporary directories, the first to need them running the child under a
    lock while the others wait."""
    module = item.original_nodeid.split("::")[0]
    siblings = sorted(
        {
            other.original_nodeid
            for other in item.session.items
            if isinstance(other, ChildDriverItem)
            and other.driver == item.driver
            and other.original_nodeid.split("::")[0] == module
        }
    )
    key = hashlib.sha256(f"{item.driver} {module}".encode()).hexdigest()[:16]
    basetemp = item.config._tmp_path_factory.getbasetemp()  # type: ignore[attr-defined]
    # the workers' directories are popen-gwN inside the run's own
    shared = basetemp.parent if hasattr(item.config, "workerinput") else basetemp
    directory = Path(shared, "driver-batches")
    directory.mkdir(exist_ok=True)
    results_file = directory / f"{key}.json"
    with open(directory / f"{key}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        results: dict[str, list[str]] = (
            json.loads(results_file.read_text()) if results_file.exists() else {}
        )
        if item.original_nodeid not in results:
            results.update(_run_batch(item.config, item.driver, siblings))
            results_file.write_text(json.dumps(results))
    return results
