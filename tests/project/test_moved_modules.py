"""Modules that moved into the subpackages keep their old import paths for a while: the
old name is the same module object, with a DeprecationWarning saying where it went."""

from __future__ import annotations

import importlib
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

import hermes_store

PACKAGE = Path(hermes_store.__file__).parent


@pytest.mark.parametrize("old", sorted(hermes_store._MOVED))
def test_an_old_path_is_the_moved_module_and_warns(old: str) -> None:
    new = f"hermes_store.{hermes_store._MOVED[old]}"
    assert not (PACKAGE / f"{old.replace('.', '/')}.py").exists()  # nothing shadows the alias
    sys.modules.pop(f"hermes_store.{old}", None)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        module = importlib.import_module(f"hermes_store.{old}")
    assert module is importlib.import_module(new)
    assert module.__spec__ is not None and module.__spec__.name == new
    assert [w.category for w in caught] == [DeprecationWarning]
    assert new in str(caught[0].message)


def test_an_old_path_fails_under_warnings_as_errors_and_unknown_names_stay_unknown() -> None:
    code = (
        "import importlib\n"
        "try:\n"
        "    import hermes_store.sqlite_driver\n"
        "except DeprecationWarning as e:\n"
        "    print('warned:', e)\n"
        "try:\n"
        "    importlib.import_module('hermes_store.no_such_module')\n"
        "except ModuleNotFoundError:\n"
        "    print('unknown')\n"
    )
    out = subprocess.run(
        [sys.executable, "-W", "error::DeprecationWarning", "-c", code],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert "warned: hermes_store.sqlite_driver is now hermes_store.sqlite.driver" in out
    assert "unknown" in out
