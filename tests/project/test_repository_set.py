"""One declaration of the repositories (hermes_store/repository_set.py) and the faces that
take theirs from it: every public method of every declared repository is reachable on a
`Store` (`store.<name>`), on an `AsyncStore` as a coroutine with the same parameters, and
the `SessionDB` facade forwards the ones listed here. The async repositories are generated
code (hermes_store/aio_repositories.py): regenerating it must change nothing."""

from __future__ import annotations

import asyncio
import inspect
import re
import subprocess
import sys
import textwrap
import typing
from pathlib import Path
from typing import Any

import pytest

import hermes_store
from hermes_store import _generate
from hermes_store.aio import AsyncStore
from hermes_store.aio_repositories import AsyncRepositories
from hermes_store.compat import SessionDB
from hermes_store.repository_set import REPOSITORIES, Repositories, name_of, repository
from hermes_store.store import Store, StoreOptions

REPO = Path(__file__).resolve().parents[2]

#: Public methods an AsyncStore does not offer as coroutines: static helpers on files
#: (they take no store), and methods returning an iterator, whose rows are read lazily in
#: the caller's thread, which a worker thread cannot hand over as one result
#: (`export_session` is offered; `AsyncStore.changes` follows the change feed).
NOT_OFFERED = {
    ("maintenance", "write_jsonl"),
    ("maintenance", "read_jsonl"),
    ("maintenance", "export_all"),
    ("feed", "follow"),
    ("feed", "follow_async"),
}

#: The repository methods the facade does not forward: hermes-store's own, which the
#: original v23 SessionDB does not have (`export_all` is the facade's own method, a list).
NOT_FORWARDED = {
    "sessions": {"session_ids_with_prefix", "ancestors", "descendants"},
    "titles": set(),
    "messages": {"append_messages", "pop_newest_message", "get_newest_messages"},
    "usage": {"usage_by_model", "usage_by_day", "usage_by_model_and_day"}
    | {"message_activity_by_day"},
    "meta": {"delete_meta", "list_meta_prefix"},
    "search": set(),
    "maintenance": {"export_all", "write_jsonl", "read_jsonl", "import_each"},
    "housekeeping": set(),
    "compression_locks": set(),
    "gateway_routing": set(),
    "delegations": {"get", "list_by_state", "count_by_state"},
    "telegram_topics": set(),
    "feed": {"changes", "latest", "oldest_cursor", "trim", "set_retention", "follow"}
    | {"follow_async"},
    "turns": {"acquire_turn", "renew_turn", "release_turn", "current_turn"},
    "trash": {"trash_session", "restore_session", "list_trash", "empty_trash", "trash_size"},
    "tags": {"add_tags", "remove_tags", "set_tags", "get_tags", "list_tags", "sessions_with_tag"},
    "redactor": {"redaction_cursor", "redact_stored"},
    "space": {"space_report"},
}

#: Forwards under the original's own names (the others keep the repository's name).
RENAMED = {
    "queue_token_counts": "update_token_counts",
    "try_acquire_compression_lock": "try_acquire",
    "refresh_compression_lock": "refresh",
    "release_compression_lock": "release",
    "get_compression_lock_holder": "get_holder",
    "save_gateway_routing_entry": "save_entry",
    "replace_gateway_routing_entries": "replace_entries",
    "load_gateway_routing_entries": "load_entries",
    "delete_gateway_routing_entries": "delete_entries",
}


def public_methods(cls: type) -> list[str]:
    """A repository class's public methods (static ones included), in its order."""
    return [
        name
        for name, value in vars(cls).items()
        if not name.startswith("_")
        and (inspect.isfunction(value) or isinstance(value, staticmethod))
    ]


def declared_classes() -> dict[str, type]:
    classes = {}
    for name, declared in REPOSITORIES.items():
        assert isinstance(declared.build, type), name
        classes[name] = declared.build
    return classes


def test_the_generated_async_repositories_are_up_to_date() -> None:
    current = _generate.TARGET.read_text(encoding="utf-8")
    assert _generate.render() == current, "run: python -m hermes_store._generate"
    assert _generate.main(["--check"]) == 0


def test_the_generated_module_passes_the_linter() -> None:
    run = subprocess.run(
        [sys.executable, "-m", "ruff", "check", "--no-cache", str(_generate.TARGET)],
        capture_output=True,
        text=True,
        cwd=REPO,
    )
    assert run.returncode == 0, run.stdout + run.stderr


def test_the_declaration_is_complete() -> None:
    """Every repository class (tests/project/test_public_api.py finds them) is declared
    once, and exported from the top."""
    from test_public_api import REPOSITORIES as FOUND  # this directory is on sys.path

    classes = declared_classes()
    assert sorted(c.__name__ for c in classes.values()) == sorted(FOUND)
    for cls in classes.values():
        assert getattr(hermes_store, cls.__name__) is cls
    async_names = {d.async_name or name for name, d in REPOSITORIES.items()}
    assert {
        name for name, value in vars(AsyncRepositories).items() if isinstance(value, repository)
    } == async_names


def test_every_method_is_reachable_on_store_and_async_store(fresh_db: str) -> None:
    async def check() -> None:
        async with AsyncStore(fresh_db) as astore:
            store = astore.sync
            for name, cls in declared_classes().items():
                sync = getattr(store, name)
                assert isinstance(sync, cls)
                assert getattr(store, name) is sync  # built once, kept
                async_repository = getattr(astore, REPOSITORIES[name].async_name or name)
                assert async_repository._sync is sync  # the Store's own
                for method in public_methods(cls):
                    bound = getattr(sync, method)
                    assert getattr(bound, "__func__", bound) is getattr(cls, method)
                    if (name, method) in NOT_OFFERED:
                        assert not hasattr(async_repository, method), (name, method)
                        continue
                    coroutine = getattr(async_repository, method)
                    assert inspect.iscoroutinefunction(coroutine), (name, method)
                    assert inspect.signature(coroutine) == inspect.signature(bound), (name, method)
            # and a call goes through to the Store's repository
            await astore.sessions.create_session("s1", "cli")
            assert (await astore.sessions.get_session("s1"))["source"] == "cli"
            assert store.sessions.get_session("s1") is not None

    asyncio.run(check())


def test_what_the_facade_forwards() -> None:
    forwarded: dict[str, set[str]] = {name: set() for name in REPOSITORIES}
    for attribute, value in vars(SessionDB).items():
        if not getattr(value, "_hermes_forward", False):
            continue
        method = value.__wrapped__
        forwarded[name_of(method)].add(method.__name__)
        assert RENAMED.get(attribute, attribute) == method.__name__, attribute
        assert inspect.signature(value) == inspect.signature(method), attribute
    not_forwarded = {
        name: set(public_methods(cls)) - forwarded[name] for name, cls in declared_classes().items()
    }
    assert not_forwarded == NOT_FORWARDED


def test_name_of_refuses_a_method_no_repository_defines() -> None:
    assert name_of(Repositories.__dict__["sessions"].build.get_session) == "sessions"
    with pytest.raises(LookupError):
        name_of(Store.write)


def test_store_options_are_the_stores_keyword_arguments() -> None:
    hints = typing.get_type_hints(Store.__init__)
    keywords = [
        p.name
        for p in inspect.signature(Store.__init__).parameters.values()
        if p.kind is inspect.Parameter.KEYWORD_ONLY
    ]
    assert list(StoreOptions.__annotations__) == keywords
    options = typing.get_type_hints(StoreOptions)
    assert {name: hints[name] for name in keywords} == options


def test_async_store_passes_store_options_on(fresh_db: str) -> None:
    async def check() -> None:
        async with await AsyncStore.open(fresh_db, read_only=True, checkpoint_every=7) as opened:
            assert opened.sync.read_only and opened.sync.checkpoint_every == 7
        built = AsyncStore(fresh_db, workers=1, read_only=True)
        try:
            assert built.sync.read_only
        finally:
            await built.aclose()

    asyncio.run(check())


def test_type_checkers_see_the_stores_repositories(tmp_path: Path) -> None:
    snippet = tmp_path / "use_store.py"
    snippet.write_text(
        textwrap.dedent(
            """\
            from hermes_store import Store

            def main(store: Store) -> None:
                count: int = store.messages.message_count("s")
                title: int = store.titles.get_session_title("s")
                store.sessions.create_session(42, "cli")
                store.sessions.no_such_method()
            """
        ),
        encoding="utf-8",
    )
    run = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--no-incremental", str(snippet)],
        capture_output=True,
        text=True,
        cwd=REPO,
    )
    found: set[Any] = set(re.findall(r"use_store\.py:(\d+): error: .*\[([a-z-]+)\]", run.stdout))
    assert found == {("5", "assignment"), ("6", "arg-type"), ("7", "attr-defined")}, run.stdout
