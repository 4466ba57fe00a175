"""A service that uses hermes-store type-checks (issue 27, item 4): after the README's
install, `mypy --strict` finds `hermes_store.aio` and passes on a typed example service,
and fails on a misspelt keyword; the public methods take explicit keyword parameters and
return typed rows, on the repositories, `AsyncStore` and the facade alike."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

SERVICE = """
from hermes_store.aio import AsyncStore
from hermes_store.repositories.rows import ConversationMessage


class ChatService:
    def __init__(self, store: AsyncStore) -> None:
        self.store = store

    async def turn(self, chat: str, text: str, message_id: str) -> list[ConversationMessage]:
        await self.store.sessions.ensure_session(chat, "telegram", chat_id=chat)
        await self.store.messages.append_message(
            chat, "user", text, idempotency_key=message_id
        )
        history = await self.store.messages.get_messages_as_conversation(chat)
        role: str = history[-1]["role"]
        assert role
        return history


async def main() -> None:
    store = await AsyncStore.open("state.db")
    try:
        await ChatService(store).turn("chat-1", "hello", "m-1")
    finally:
        await store.aclose()
"""

#: the same service with one keyword misspelt
MISSPELT = SERVICE.replace("idempotency_key=message_id", "idempotency_kye=message_id")


def _readme_install() -> str:
    """The `pip install -e ...` of the README's "On a fresh machine" command."""
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    section = readme.split("## On a fresh machine", 1)[1].split("\n## ", 1)[0]
    command = re.search(r"```sh[^\n]*\n(.*?)\n```", section, re.S)
    assert command is not None, "no sh block in README's 'On a fresh machine'"
    step = next(s.strip() for s in command.group(1).split("&&") if "pip install -e" in s)
    return step


def _copy_checkout(target: Path) -> None:
    skip = {".git", ".venv", "build", "dist", "__pycache__", ".mypy_cache", ".pytest_cache"}

    def ignore(_directory: str, names: list[str]) -> set[str]:
        return {n for n in names if n in skip or n.endswith((".egg-info", ".db", ".pyc"))}

    shutil.copytree(REPO, target, ignore=ignore, symlinks=True)


def _run(args: list[str], cwd: Path, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    # nothing of this process's environment may make the checkout importable
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    return subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)


@pytest.mark.slow
def test_the_readme_install_makes_a_service_type_checkable(tmp_path: Path) -> None:
    """The README's install, as a user runs it (a fresh venv, from a copy of this
    checkout), then mypy --strict on a service outside the checkout."""
    checkout = tmp_path / "hermes-store"
    _copy_checkout(checkout)
    venv = tmp_path / "venv"
    made = _run([sys.executable, "-m", "venv", str(venv)], cwd=tmp_path)
    assert made.returncode == 0, made.stderr
    step = _readme_install()
    args = step.split()
    assert args[0].endswith("pip"), step
    args = [str(venv / "bin" / "pip"), *(str(checkout) if a == "." else a for a in args[1:])]
    installed = _run(args, cwd=tmp_path)
    assert installed.returncode == 0, installed.stdout[-3000:] + installed.stderr[-3000:]
    from mypy.version import __version__ as mypy_version

    tools = _run([str(venv / "bin" / "pip"), "install", f"mypy=={mypy_version}"], cwd=tmp_path)
    assert tools.returncode == 0, tools.stderr[-3000:]

    service = tmp_path / "service"
    service.mkdir()
    for name, text in (("good.py", SERVICE), ("typo.py", MISSPELT)):
        (service / name).write_text(textwrap.dedent(text), encoding="utf-8")
    mypy = [str(venv / "bin" / "python"), "-m", "mypy", "--strict", "--no-incremental"]
    good = _run([*mypy, "good.py"], cwd=service)
    assert good.returncode == 0, f"{step}\n{good.stdout}{good.stderr}"
    typo = _run([*mypy, "typo.py"], cwd=service)
    assert typo.returncode == 1, typo.stdout
    assert 'Unexpected keyword argument "idempotency_kye"' in typo.stdout, typo.stdout
    assert typo.stdout.count("error:") == 1, typo.stdout


def _mypy(tmp_path: Path, source: str) -> str:
    """mypy --strict on `source` with this checkout importable; its report."""
    path = tmp_path / "use.py"
    path.write_text(textwrap.dedent(source), encoding="utf-8")
    result = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--no-incremental", str(path)],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=600,
    )
    return result.stdout


def test_misspelt_keywords_and_result_keys_are_type_errors(tmp_path: Path) -> None:
    out = _mypy(
        tmp_path,
        """
        from hermes_store.aio import AsyncStore
        from hermes_store.compat import SessionDB
        from hermes_store.repositories.maintenance import MaintenanceRepository
        from hermes_store.repositories.messages import MessageRepository
        from hermes_store.repositories.sessions import SessionRepository


        def sync(sessions: SessionRepository, messages: MessageRepository) -> None:
            sessions.create_session("s", "cli", modle="m")
            sessions.ensure_session("s", "cli", chat_idd="c")
            for row in messages.get_messages("s"):
                print(row["contnet"])
            for msg in messages.get_messages_as_conversation("s"):
                print(msg["rol"])


        def facade(db: SessionDB, maintenance: MaintenanceRepository) -> None:
            db.create_session("s", "cli", user="u")
            maintenance.prune_sessions(older_than_days=3, min_mesages=2)
            for row in db.list_sessions_rich():
                print(row["tilte"])


        async def asynchronous(store: AsyncStore) -> None:
            await store.sessions.create_session("s", "cli", parent_id="p")
            view = await store.messages.get_messages_around("s", 1)
            print(view["windw"])
            count: str = await store.messages.message_count("s")
        """,
    )
    # (line, what mypy names): the unexpected keyword, the unknown key, the wrong type
    expected = [
        (10, '"modle"'),
        (11, '"chat_idd"'),
        (13, '"contnet"'),
        (15, '"rol"'),
        (19, '"user"'),
        (20, '"min_mesages"'),
        (22, '"tilte"'),
        (26, '"parent_id"'),
        (28, '"windw"'),
        (29, 'expression has type "int", variable has type "str"'),
    ]
    for line, named in expected:
        assert any(
            f"use.py:{line}: error:" in reported and named in reported
            for reported in out.splitlines()
        ), f"line {line}: {named}\n{out}"
    assert out.count("error:") == len(expected), out


def test_correct_calls_type_check(tmp_path: Path) -> None:
    out = _mypy(
        tmp_path,
        """
        from hermes_store.aio import AsyncStore
        from hermes_store.compat import SessionDB
        from hermes_store.repositories.rows import ListingRow, MessageRow


        def facade(db: SessionDB) -> list[ListingRow]:
            db.create_session("s", "cli", model="m", model_config={"k": 1}, user_id="u")
            db.prune_sessions(older_than_days=3, min_messages=2, archived=None)
            ident: int = db.append_message("s", "user", "hi", idempotency_key="k")
            assert ident
            return db.list_sessions_rich(limit=5)


        async def asynchronous(store: AsyncStore) -> list[MessageRow]:
            await store.sessions.ensure_session("s", "telegram", chat_id="c", thread_id="t")
            ids: list[int] = await store.messages.append_messages(
                "s", [{"role": "user", "content": "x"}], idempotency_key="batch"
            )
            assert ids
            return await store.messages.get_messages("s")
        """,
    )
    assert "Success: no issues found" in out, out
