"""Running a test on both SQLite drivers (docs/development.md, "Both SQLite drivers").

A process drives every SQLite file through one library, chosen once (hermes_store/
sqlite_driver.py), and the suite's process uses the standard library's. A test that
requests the `sqlite_driver` fixture (or a module with `pytestmark =
pytest.mark.usefixtures("sqlite_driver")`) is collected once per driver; the variant of
this process's driver runs here, as any test does, and the other is replaced at
collection by a `ChildDriverItem`, which runs that same test id in a child pytest with
HERMES_STORE_SQLITE_DRIVER set to its driver. There it is the native variant, so it runs
in-process, fixtures and all, and its outcome (pass, failure with its report, skip) is
the item's.
"""

from __future__ import annotations

import importlib.util
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
                from hermes_store.sqlite_driver import has_pysqlite3_wheel

                if has_pysqlite3_wheel():
                    raise ChildFailed(f"{why}, but this platform has its wheel")
            pytest.skip(why)
        env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
        env[DRIVER_ENV] = self.driver
        with tempfile.TemporaryDirectory(prefix="hermes-driver-") as scratch:
            report = Path(scratch, "report.xml")
            command = [
                sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                "-p", "no:xdist", f"--basetemp={scratch}/tmp", f"--junitxml={report}",
                self.original_nodeid,
            ]  # fmt: skip
            done = subprocess.run(
                command,
                cwd=self.config.rootpath,
                env=env,
                capture_output=True,
                text=True,
                timeout=CHILD_TIMEOUT_S,
                check=False,
            )
            output = done.stdout + done.stderr
            if not report.is_file():
                raise ChildFailed(
                    f"the child pytest wrote no report (exit {done.returncode}):\n{output}"
                )
            suite = ET.parse(report).getroot().iter("testcase")
            cases = list(suite)
        if len(cases) != 1:
            raise ChildFailed(f"the child pytest ran {len(cases)} tests, not 1:\n{output}")
        case = cases[0]
        skipped = case.find("skipped")
        if skipped is not None:
            pytest.skip(f"in the child pytest: {skipped.get('message', '')}")
        failed = case.find("failure") is not None or case.find("error") is not None
        if done.returncode != 0 or failed:
            raise ChildFailed(output)

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
