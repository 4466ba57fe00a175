"""The migrations are type-checked with the package: `mypy` (strict, `packages =
["hermes_store"]`) reaches them through `hermes_store/_migrations`, a link to the top-level
`migrations/` that gives the checkout the layout the wheel has (setuptools maps the same
folder onto `hermes_store._migrations`). Without the link mypy cannot resolve the
revisions' imports and checks none of them."""

from __future__ import annotations

import tomllib
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]


def test_the_package_reaches_the_migrations_tree():
    link = REPO_ROOT / "hermes_store" / "_migrations"
    assert link.is_symlink(), f"{link} must be a link to ../migrations (see pyproject.toml)"
    assert link.resolve() == (REPO_ROOT / "migrations").resolve()
    assert (link / "versions" / "0001_initial_schema.py").is_file()


def test_mypy_checks_the_migrations_strictly():
    config = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    mypy = config["tool"]["mypy"]
    assert mypy["strict"] is True
    assert "hermes_store" in mypy["packages"]
    for override in mypy.get("overrides", []):
        modules = override["module"]
        modules = [modules] if isinstance(modules, str) else modules
        hidden = [m for m in modules if m.startswith("hermes_store")]
        assert not hidden, f"mypy overrides must not exempt {hidden}"
