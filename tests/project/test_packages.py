"""The package by concern: a short top level, and subpackages that each say in their
docstring what they hold and what they may import. The "Imports allowed" block of each
subpackage's `__init__.py` docstring is read here and checked against the imports of
every module inside it (imports under `if TYPE_CHECKING:` never run and are exempt):

    Imports allowed (tests/project/test_packages.py checks them):

        errors, config, contract,
        sqlite
        store_backends: search

lists the top-level modules and subpackages of hermes_store that any module of the
package may import (besides its own), and "module: ..." lines the extras of one module.
tests/project/test_import_layers.py checks that no module imports one that imports it
back."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "hermes_store"

#: The issue 38 target: the top level holds at most this many modules.
MAX_TOP_LEVEL = 12

#: What every module may import.
ALWAYS = {"errors"}

HEADER = "Imports allowed (tests/project/test_packages.py checks them):"


def _subpackages() -> list[str]:
    return sorted(
        p.name
        for p in PACKAGE.iterdir()
        if (p / "__init__.py").exists() and p.name != "_migrations"
    )


def _units() -> set[str]:
    """The names a module of hermes_store can be in: top-level modules and subpackages."""
    return (
        {p.stem for p in PACKAGE.glob("*.py")} | set(_subpackages()) | {"_migrations"}
    )


def allowed(package: str) -> tuple[set[str], dict[str, set[str]]]:
    """The package-wide allowed names and each module's extras, from the docstring."""
    doc = ast.get_docstring(ast.parse((PACKAGE / package / "__init__.py").read_text()))
    assert doc and HEADER in doc, (
        f"hermes_store/{package}/__init__.py: no '{HEADER}' block"
    )
    block = doc.split(HEADER, 1)[1].strip("\n").split("\n\n")[0]
    everyone: set[str] = set()
    extras: dict[str, set[str]] = {}
    for line in block.splitlines():
        line = line.strip()
        if not line:
            continue
        module, _, names = line.rpartition(":")
        listed = {n.strip() for n in names.split(",") if n.strip()}
        if module:
            extras.setdefault(module.strip(), set()).update(listed)
        else:
            everyone |= listed
    return everyone, extras


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _imports(path: Path) -> set[str]:
    name = _module_name(path)
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    found: set[str] = set()

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.If) and (
            (isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING")
            or (
                isinstance(node.test, ast.Attribute)
                and node.test.attr == "TYPE_CHECKING"
            )
        ):
            for child in node.orelse:
                visit(child)
            return
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            found.add(target)
            found.update(f"{target}.{alias.name}" for alias in node.names)
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(ast.parse(path.read_text(encoding="utf-8")))
    return found


def test_the_top_level_is_short() -> None:
    top = sorted(p.name for p in PACKAGE.glob("*.py"))
    assert len(top) <= MAX_TOP_LEVEL, top


@pytest.mark.parametrize("package", _subpackages())
def test_a_subpackage_imports_only_what_its_docstring_allows(package: str) -> None:
    units = _units()
    everyone, extras = allowed(package)
    unknown = (everyone | {n for names in extras.values() for n in names}) - units
    assert not unknown, (
        f"hermes_store/{package}/__init__.py allows what does not exist: {unknown}"
    )
    modules = {p.stem for p in (PACKAGE / package).glob("*.py")}
    assert set(extras) <= modules, set(extras) - modules
    offenders: dict[str, list[str]] = {}
    for path in sorted((PACKAGE / package).rglob("*.py")):
        may = {package, *ALWAYS, *everyone, *extras.get(path.stem, set())}
        for name in sorted(_imports(path)):
            parts = name.split(".")
            if parts[0] == "hermes_store" and len(parts) > 1 and parts[1] in units:
                if parts[1] not in may:
                    offenders.setdefault(
                        path.relative_to(PACKAGE).as_posix(), []
                    ).append(name)
    assert not offenders, (
        f"imports hermes_store/{package}/__init__.py does not allow: {offenders}; move the "
        "code, or allow the import in the docstring with the reason"
    )


def test_the_check_reads_a_docstring() -> None:
    everyone, extras = allowed("runtime")
    assert "errors" in everyone and "sqlite" in everyone
    assert "search" in extras["store_backends"]
