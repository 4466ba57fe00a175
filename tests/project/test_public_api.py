"""The public API as a newcomer meets it: every name in `hermes_store.__all__` imports
from the top (lazily: importing the package alone loads no SQLAlchemy), every public
class has a docstring, every repository (a public class of hermes_store/repositories/
built on a Store) is exported from the top, and every public method of the Store, the
AsyncStore and the repositories documents each of its parameters in an `Args:` section
(the class docstring documents `__init__`'s)."""

from __future__ import annotations

import importlib
import inspect
import pkgutil
import re
import subprocess
import sys
from collections.abc import Callable, Iterator
from typing import Any

import pytest

import hermes_store


def _built_on_a_store(cls: type) -> bool:
    init = cls.__init__
    return inspect.isfunction(init) and list(inspect.signature(init).parameters)[1:2] == ["store"]


def repository_classes() -> dict[str, type]:
    """Every repository: a public class defined in a public module of
    hermes_store/repositories/ whose constructor takes the Store as `store` (what a user
    builds on a Store; the rows and filters they return or take are not repositories)."""
    found: dict[str, type] = {}
    package = importlib.import_module("hermes_store.repositories")
    for module_info in pkgutil.iter_modules(package.__path__):
        if module_info.name.startswith("_"):
            continue
        module = importlib.import_module(f"{package.__name__}.{module_info.name}")
        for name, value in vars(module).items():
            if (
                inspect.isclass(value)
                and value.__module__ == module.__name__
                and not name.startswith("_")
                and _built_on_a_store(value)
            ):
                found[name] = value
    return found


REPOSITORIES = repository_classes()

#: The classes whose methods must document every parameter, exported or not.
DOCUMENTED = {
    "Store": hermes_store.Store,
    "AsyncStore": hermes_store.AsyncStore,
    **{
        name: getattr(hermes_store, name)
        for name in hermes_store.__all__
        if name.endswith("Repository")
    },
    **REPOSITORIES,
}


def _methods(cls: type) -> Iterator[tuple[str, Callable[..., Any]]]:
    """The public methods defined on `cls` itself (forwarded ones included), and
    `__init__`."""
    for name, value in vars(cls).items():
        if name.startswith("_") and name != "__init__":
            continue
        if isinstance(value, staticmethod | classmethod):
            value = value.__func__
        if isinstance(value, property):
            value = value.fget
        if callable(value) and (inspect.isfunction(value) or hasattr(value, "__wrapped__")):
            yield name, value


def _documents(doc: str, parameter: str) -> bool:
    """`parameter` has a line of its own in the docstring's `Args:` section."""
    _, _, args = doc.partition("\nArgs:\n")
    return re.search(rf"^\s+{re.escape(parameter)}( \(.*\))?: \S", args, re.M) is not None


def undocumented(cls: type) -> list[str]:
    """`Class.method(parameter)` for each public parameter without documentation, and
    `Class.method` for each public method without a docstring."""
    missing: list[str] = []
    class_doc = inspect.getdoc(cls) or ""
    for name, method in _methods(cls):
        doc = inspect.getdoc(method) or ""
        if name == "__init__":
            doc = class_doc + "\n" + (method.__doc__ and doc or "")
        elif not doc.strip():
            missing.append(f"{cls.__name__}.{name}")
            continue
        for parameter in inspect.signature(method).parameters.values():
            if parameter.name in ("self", "cls") or parameter.kind in (
                parameter.VAR_POSITIONAL,
                parameter.VAR_KEYWORD,
            ):
                continue
            if not _documents(doc, parameter.name):
                missing.append(f"{cls.__name__}.{name}({parameter.name})")
    return missing


def test_every_public_name_imports_from_the_top() -> None:
    for name in hermes_store.__all__:
        assert getattr(hermes_store, name) is not None, name
    from hermes_store import (  # noqa: F401 (the quick start's imports)
        AsyncStore,
        MessageRepository,
        SearchRepository,
        SessionRepository,
        Store,
    )


def test_importing_the_package_loads_no_sqlalchemy() -> None:
    code = "import sys, hermes_store; print('sqlalchemy' in sys.modules)"
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    )
    assert done.stdout.strip() == "False"


def test_every_public_class_has_a_docstring() -> None:
    missing = [
        name
        for name in hermes_store.__all__
        if inspect.isclass(getattr(hermes_store, name))
        and not (getattr(hermes_store, name).__doc__ or "").strip()
    ]
    assert missing == []


def test_every_repository_is_exported_from_the_top() -> None:
    missing = [
        f"{cls.__module__}.{name}"
        for name, cls in REPOSITORIES.items()
        if name not in hermes_store.__all__ or getattr(hermes_store, name) is not cls
    ]
    assert missing == [], f"add these to hermes_store.__all__ and _CLASSES: {missing}"


def test_the_repositories_are_found() -> None:
    assert {"SessionRepository", "MetaRepository", "ChangeFeed", "TurnRepository"} <= set(
        REPOSITORIES
    )
    assert "Change" not in REPOSITORIES and "Turn" not in REPOSITORIES  # rows, not repositories


@pytest.mark.parametrize("name", sorted(DOCUMENTED))
def test_every_public_parameter_is_documented(name: str) -> None:
    missing = undocumented(DOCUMENTED[name])
    assert missing == [], f"document these in an Args: section: {missing}"


def test_the_check_finds_an_undocumented_parameter_and_method() -> None:
    class Sample:
        """A sample.

        Args:
            store: documented.
        """

        def __init__(self, store: object, flush: object = None) -> None:
            pass

        def documented(self, key: str) -> None:
            """Something.

            Args:
                key: the key.
            """

        def half(self, key: str, value: str) -> None:
            """Mentions key and value, but has no Args: line for value.

            Args:
                key: the key.
            """

        def bare(self) -> None:
            pass

    assert undocumented(Sample) == ["Sample.__init__(flush)", "Sample.half(value)", "Sample.bare"]


def test_the_async_store_documents_each_attribute_it_has(fresh_db: str) -> None:
    """The `Attributes:` section of AsyncStore's docstring names exactly the public
    attributes an open AsyncStore has (its repositories and `sync`), and the `store`
    argument is described as what it is."""
    from hermes_store.aio import AsyncStore

    store = AsyncStore(fresh_db)
    try:
        attributes = {name for name in vars(store) if not name.startswith("_")}
    finally:
        import asyncio

        asyncio.run(store.aclose())
    doc = inspect.getdoc(AsyncStore) or ""
    _, _, section = doc.partition("\nAttributes:\n")
    documented = set(re.findall(r"^    (\w+): \S", section, re.M))
    assert documented == attributes
    assert "the Store the repository works on" not in doc
