"""Writes hermes_store/aio_repositories.py from the declaration of the repositories
(hermes_store/repository_set.py): one async class per repository, offering each of its
public methods as a coroutine (`awaitable`), and `AsyncRepositories`, the AsyncStore's
attributes. The code is written out rather than built at import so that type checkers and
IDEs see every method with its signature.

    python -m hermes_store._generate           # rewrite the file
    python -m hermes_store._generate --check   # exit 1 if it is out of date

What is not offered: static methods (they take no store: call them on the repository
class) and methods returning an iterator (its rows are read lazily, in the caller's
thread, which a worker thread cannot hand over as one result; `AsyncStore.changes`
follows the change feed).
"""

from __future__ import annotations

import argparse
import inspect
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .repository_set import REPOSITORIES

TARGET = Path(__file__).with_name("aio_repositories.py")
LINE_LENGTH = 100
#: Return annotations of methods that stream their results (not offered as coroutines).
_STREAMS = ("Iterator[", "AsyncIterator[", "Iterable[", "Generator[", "AsyncGenerator[")

HEADER = '''\
"""The asyncio face of each repository: `AsyncStore`'s repositories, whose methods are
the synchronous repositories' methods as coroutines with the same parameters and typed
results, run on the AsyncStore's worker threads (on the Store's own repository,
`store.sync.<name>`).

Generated from the declaration in hermes_store/repository_set.py by
`python -m hermes_store._generate`: do not edit by hand (a test regenerates it and fails
when it differs).
"""

from __future__ import annotations

'''


def offered(cls: type) -> list[str]:
    """The methods of a repository class offered as coroutines, in the class's order.

    Args:
        cls: the repository class.
    """
    names = []
    for name, value in vars(cls).items():
        if name.startswith("_") or not inspect.isfunction(value):
            continue  # private, a static method, a property or a constant
        returns = str(getattr(value, "__annotations__", {}).get("return", ""))
        if returns.startswith(_STREAMS):
            continue
        names.append(name)
    return names


def async_class_name(name: str, cls: type) -> str:
    """`AsyncSessions` for `sessions`; a class not named `...Repository` keeps its name
    (`AsyncChangeFeed`).

    Args:
        name: the AsyncStore's attribute name.
        cls: the repository class.
    """
    if not cls.__name__.endswith("Repository"):
        return f"Async{cls.__name__}"
    return "Async" + "".join(part.capitalize() for part in name.split("_"))


def _assignment(target: str, call: str, argument: str, indent: str = "    ") -> str:
    line = f"{indent}{target} = {call}({argument})"
    if len(line) <= LINE_LENGTH:
        return line
    return f"{indent}{target} = {call}(\n{indent}    {argument}\n{indent})"


def _imports(module: str, names: list[str]) -> str:
    line = f"from {module} import {', '.join(names)}"
    if len(line) <= LINE_LENGTH:
        return line
    inner = "".join(f"    {name},\n" for name in names)
    return f"from {module} import (\n{inner})"


def _isort_key(name: str) -> tuple[int, str]:
    # ruff's isort order within one import: constants, classes, then the rest
    kind = 0 if name.isupper() else 1 if name[:1].isupper() else 2
    return kind, name


def render() -> str:
    """The text of hermes_store/aio_repositories.py for the current declaration."""
    modules: dict[str, list[str]] = {}
    classes: list[str] = []
    attributes: list[str] = []
    exported: list[str] = ["AsyncRepositories"]
    for name, declared in REPOSITORIES.items():
        cls: Callable[..., Any] = declared.build
        if not isinstance(cls, type):
            raise TypeError(f"the repository {name} is not declared by its class")
        module = cls.__module__.removeprefix("hermes_store")
        modules.setdefault(module, []).append(cls.__name__)
        async_name = declared.async_name or name
        async_cls = async_class_name(async_name, cls)
        exported.append(async_cls)
        body = [
            f"class {async_cls}(AsyncRepository[{cls.__name__}]):",
            f'    """`{cls.__name__}`\'s methods as coroutines."""',
            "",
            f'    _name = "{name}"',
        ]
        body += [
            _assignment(method, "awaitable", f"{cls.__name__}.{method}") for method in offered(cls)
        ]
        classes.append("\n".join(body))
        attributes.append(_assignment(async_name, "repository", async_cls))
        attributes.append(f'    """`{cls.__name__}`\'s methods as coroutines (`{async_cls}`)."""')
    modules[".repository_set"] = ["AsyncRepository", "awaitable", "repository"]
    imports = [
        _imports(module, sorted(names, key=_isort_key)) for module, names in sorted(modules.items())
    ]
    mixin = "\n".join(
        [
            "class AsyncRepositories:",
            '    """The repositories of an `AsyncStore`, each built on first use: the `Store`\'s',
            '    (`Repositories`), with their methods as coroutines."""',
            "",
            *attributes,
        ]
    )
    listed = "".join(f'    "{name}",\n' for name in sorted(exported))
    return (
        HEADER
        + "\n".join(imports)
        + f"\n\n__all__ = [\n{listed}]\n\n\n"
        + "\n\n\n".join([*classes, mixin])
        + "\n"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m hermes_store._generate", description=__doc__)
    parser.add_argument("--check", action="store_true", help="exit 1 if the file is out of date")
    args = parser.parse_args(argv)
    text = render()
    current = TARGET.read_text(encoding="utf-8") if TARGET.exists() else ""
    if args.check:
        if current != text:
            print(f"{TARGET} is out of date: run python -m hermes_store._generate")
            return 1
        return 0
    if current != text:
        TARGET.write_text(text, encoding="utf-8")
        print(f"wrote {TARGET}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
