"""The package's modules form layers: no module imports one that imports it back (also
not through a chain, and also not from inside a function, the usual way a cycle is
hidden). Only imports under `if TYPE_CHECKING:` are exempt: they never run."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "hermes_store"


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _imports(path: Path, modules: set[str]) -> set[str]:
    name = _module_name(path)
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    found: set[str] = set()

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.If) and _is_type_checking(node):
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
            for alias in node.names:  # `from . import x` imports the module x
                found.add(f"{target}.{alias.name}")
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(ast.parse(path.read_text(encoding="utf-8")))
    return {m for m in found if m in modules and m != name}


def _graph() -> dict[str, set[str]]:
    files = [p for p in PACKAGE.rglob("*.py") if "_migrations" not in p.parts]
    modules = {_module_name(p) for p in files}
    return {_module_name(p): _imports(p, modules) for p in files}


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}
    stack: list[str] = []

    def walk(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph[node]):
            if nxt.startswith(node + ".") or node.startswith(nxt + "."):
                continue  # a package and its own submodules
            if state.get(nxt) == 1:
                return stack[stack.index(nxt) :] + [nxt]
            if nxt not in state:
                found = walk(nxt)
                if found:
                    return found
        stack.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state:
            found = walk(node)
            if found:
                return found
    return None


def test_no_module_imports_one_that_imports_it_back() -> None:
    cycle = _cycle(_graph())
    assert cycle is None, "import cycle: " + " -> ".join(cycle or [])


def test_the_checker_finds_a_cycle() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": set()}
    assert _cycle(graph) == ["a", "b", "c", "a"]


#: The modules that may compare a database's name, and why: both read a URL, before any
#: engine (and so any dialect) exists. Everywhere else a dialect difference goes through
#: the dialect (backends.dialect_for, `store.dialect`): its capabilities, or its store,
#: migration, sql and search parts.
DIALECT_AWARE = {
    "runtime/engine.py": "the only module that knows the drivers: which URL makes which engine",
    "config.py": "which URLs are accepted",
}


def _dialect_comparisons(path: Path) -> int:
    """Comparisons of anything with the literal "sqlite" or "postgresql"."""
    found = 0
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Compare):
            operands = [node.left, *node.comparators]
            found += any(
                isinstance(o, ast.Constant) and o.value in ("sqlite", "postgresql")
                for o in operands
            )
    return found


def test_dialect_names_are_compared_only_where_a_dialect_difference_lives() -> None:
    found = {
        path.relative_to(PACKAGE).as_posix(): count
        for path in sorted(PACKAGE.rglob("*.py"))
        if "_migrations" not in path.parts and (count := _dialect_comparisons(path))
    }
    unexpected = {module: n for module, n in found.items() if module not in DIALECT_AWARE}
    assert not unexpected, (
        f"dialect names compared outside the modules that own dialect differences: "
        f"{unexpected}; move the difference into one of them, or add the module to "
        "DIALECT_AWARE with the reason"
    )
    assert set(DIALECT_AWARE) <= set(found), set(DIALECT_AWARE) - set(found)


#: A dialect's name compared as text: `conn.dialect.name == "sqlite"`, `!=`, `in (...)`,
#: and the same of a Store's `dialect` (which compares equal to its name).
NAME_COMPARISON = re.compile(
    r"""dialect(\.name)?\s*(==|!=|\bnot\s+in\b|\bin\b)\s*[("'\[{]"""
    r"""|["'](sqlite|postgresql)["']\s*(==|!=)\s*\S*dialect"""
)


def _dialect_modules() -> set[str]:
    """The modules of the dialect objects: runtime/backends.py and each registered part's."""
    from hermes_store.migration import dialects  # noqa: F401 (register)
    from hermes_store.repositories import _dialect  # noqa: F401
    from hermes_store.runtime import backends, store_backends  # noqa: F401 (register)
    from hermes_store.search import postgres_fts, sqlite_fts  # noqa: F401

    found = {backends.__name__}
    for name in backends.NAMES:
        dialect = backends.dialect_named(name)
        parts = (dialect.store, type(dialect.migration), type(dialect.sql), dialect.search)
        for part in parts:
            found.update(cls.__module__ for cls in part.__mro__ if cls is not object)
    return {m for m in found if m.startswith("hermes_store.")}


def test_no_module_outside_the_dialect_objects_compares_a_dialect_name() -> None:
    """Code written once for both databases asks a capability of its dialect (`in_process`,
    `fts5`, ...) or calls a part of it, never `dialect.name == "..."`: the text search
    also catches what the comparison check above cannot see (a name compared with a
    variable, a tuple of names)."""
    allowed = {
        m.removeprefix("hermes_store.").replace(".", "/") + ".py" for m in _dialect_modules()
    }
    assert {
        "runtime/backends.py",
        "migration/dialects.py",
        "runtime/store_backends.py",
    } <= allowed, allowed
    offenders = [
        f"{relative}:{number}: {line.strip()}"
        for path in sorted(PACKAGE.rglob("*.py"))
        if "_migrations" not in path.parts
        and (relative := path.relative_to(PACKAGE).as_posix()) not in allowed
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if NAME_COMPARISON.search(line)
    ]
    assert not offenders, "dialect names compared outside the dialect objects:\n" + "\n".join(
        offenders
    )


def test_the_name_comparison_search_finds_each_spelling() -> None:
    for line in (
        'if conn.dialect.name == "sqlite":',
        "if engine.dialect.name != 'postgresql':",
        'if bind.dialect.name in ("sqlite", "postgresql"):',
        'if self.store.dialect == "postgresql":',
        'if "sqlite" == conn.dialect.name:',
    ):
        assert NAME_COMPARISON.search(line), line
    for line in (
        "found = self._by_dialect.get(dialect.name)",
        "if dialect_for(conn).fts5:",
        'header = f"-- schema ({dialect.name})"',
        "self.at_driver = dialect.name in NAMES and dialect_named(dialect.name).in_process",
    ):
        assert not NAME_COMPARISON.search(line), line


#: Agent runtimes hermes-store offers adapters for (optional extras): only the adapters in
#: hermes_store/integrations/ import them, and nothing outside that package imports an
#: adapter, so the core installs and imports without them.
OPTIONAL_RUNTIMES = ("agents", "google.adk", "google.genai")
INTEGRATIONS = "hermes_store.integrations"


def _imported_names(path: Path) -> set[str]:
    """Every module an import statement of `path` names, relative ones resolved."""
    name = _module_name(path)
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = package.split(".")[: len(package.split(".")) - node.level + 1]
            target = ".".join(base + [node.module or ""]) if node.level else node.module or ""
            found.add(target.rstrip("."))
            found.update(f"{target.rstrip('.')}.{alias.name}" for alias in node.names)
    return found


def _is_under(name: str, roots: tuple[str, ...]) -> bool:
    return any(name == root or name.startswith(root + ".") for root in roots)


def test_only_the_integrations_import_the_optional_runtimes() -> None:
    offenders = {
        path.relative_to(PACKAGE).as_posix(): sorted(
            n for n in _imported_names(path) if _is_under(n, (*OPTIONAL_RUNTIMES, INTEGRATIONS))
        )
        for path in sorted(PACKAGE.rglob("*.py"))
        if "_migrations" not in path.parts and "integrations" not in path.parts
    }
    assert {module: names for module, names in offenders.items() if names} == {}
    for adapter, runtime in (("adk.py", "google.adk"), ("openai_agents.py", "agents")):
        names = _imported_names(PACKAGE / "integrations" / adapter)
        assert any(_is_under(n, (runtime,)) for n in names)  # the check sees imports


def test_every_core_module_imports_without_the_frameworks() -> None:
    """With the frameworks unimportable (as without the extras), every module outside
    hermes_store.integrations' adapters imports, and the adapter says which extra to
    install."""
    script = f"""
import importlib, importlib.abc, pathlib, sys

class NoFrameworks(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if any(name == f or name.startswith(f + ".") for f in {OPTIONAL_RUNTIMES!r}):
            raise ImportError("blocked: " + name)
        return None

sys.meta_path.insert(0, NoFrameworks())
package = pathlib.Path({str(PACKAGE)!r})
for path in sorted(package.rglob("*.py")):
    parts = path.relative_to(package.parent).with_suffix("").parts
    if "_migrations" in parts or parts[-1] == "__main__":
        continue
    if parts[:2] == ("hermes_store", "integrations") and parts[-1] != "__init__":
        continue
    importlib.import_module(".".join(p for p in parts if p != "__init__"))
try:
    importlib.import_module("hermes_store.integrations.openai_agents")
except ImportError as exc:
    print(exc)
else:
    raise SystemExit("the adapter imported without the SDK")
"""
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=300, check=False
    )
    assert done.returncode == 0, done.stderr
    assert "pip install 'hermes-store[openai-agents]'" in done.stdout
