"""The documentation is checked like code: every command and option of `hermes-store` is
documented in docs/cli.md, the README's quick start and the Python and asyncio examples
run as written against a new SQLite file, every relative link and anchor resolves, the
README stays short, and its test command is the one .ci/run runs."""

from __future__ import annotations

import argparse
import importlib.util
import os
import re
import sqlite3
import subprocess
import sys
import textwrap
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from hermes_store.cli import build_parser

REPO = Path(__file__).resolve().parents[2]
README = REPO / "README.md"
DOCS = REPO / "docs"
CLI_DOC = DOCS / "cli.md"
CI_RUN = REPO / ".ci" / "run"
README_MAX_LINES = 200

FENCE = re.compile(r"^```([\w-]*)((?:\s[^`]*)?)$")
HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
INLINE_CODE = re.compile(r"`[^`\n]*`")


# ------------------------------------------------------------------ reading markdown


@dataclass(frozen=True)
class Block:
    lang: str
    line: int  # 1-based line of the first code line
    code: str
    info: str = ""  # the fence's words after the language

    def says(self, word: str) -> bool:
        return word in self.info.split()

    @property
    def needs(self) -> str | None:
        """The module a block needs (`needs:MODULE`, an optional extra's), else None."""
        marker = re.search(r"(?:^|\s)needs:(\S+)", self.info)
        return marker.group(1) if marker else None

    @property
    def not_run(self) -> str | None:
        """The reason a block that is not run gives (`not-run: REASON`), else None."""
        marker = re.search(r"(?:^|\s)not-run:\s*(.*)$", self.info)
        return marker.group(1).strip() if marker else None


def blocks(text: str) -> list[Block]:
    """The fenced code blocks of a page, in order (an indented block's code dedented)."""
    found: list[Block] = []
    lang: str | None = None
    info = ""
    body: list[str] = []
    start = 0
    for number, line in enumerate(text.splitlines(), start=1):
        fence = FENCE.match(line.strip())
        if lang is None:
            if fence:
                lang, info, body, start = fence.group(1), fence.group(2).strip(), [], number + 1
        elif fence and not fence.group(1) and not fence.group(2).strip():
            found.append(Block(lang, start, textwrap.dedent("\n".join(body)) + "\n", info))
            lang = None
        else:
            body.append(line)
    assert lang is None, "unterminated code block"
    return found


def prose_lines(text: str) -> Iterator[tuple[int, str]]:
    """(line number, line) outside fenced code, with inline code removed."""
    in_code = False
    for number, line in enumerate(text.splitlines(), start=1):
        if FENCE.match(line.strip()):
            in_code = not in_code
            continue
        if not in_code:
            yield number, INLINE_CODE.sub("", line)


def section(text: str, heading: str) -> str:
    """The text under `heading` up to the next heading of the same or a higher level."""
    level = len(heading) - len(heading.lstrip("#"))
    lines = text.splitlines()
    start = lines.index(heading)
    end = len(lines)
    for i in range(start + 1, len(lines)):
        match = HEADING.match(lines[i])
        if match and len(match.group(1)) <= level and not _in_code(lines, i):
            end = i
            break
    return "\n".join(lines[start + 1 : end])


def _in_code(lines: list[str], index: int) -> bool:
    return sum(1 for line in lines[:index] if FENCE.match(line.strip())) % 2 == 1


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = INLINE_CODE.sub(lambda m: m.group(0).strip("`"), heading).strip().lower()
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", text)  # a link keeps its text
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(text: str) -> set[str]:
    seen: dict[str, int] = {}
    result: set[str] = set()
    lines = text.splitlines()
    for i, line in enumerate(lines):
        match = HEADING.match(line)
        if not match or _in_code(lines, i):
            continue
        base = slug(match.group(2))
        count = seen.get(base, 0)
        seen[base] = count + 1
        result.add(base if count == 0 else f"{base}-{count}")
    return result


def broken_links(page: Path) -> list[str]:
    """Every relative link of `page` whose file or #anchor does not exist."""
    problems: list[str] = []
    text = page.read_text(encoding="utf-8")
    for number, line in prose_lines(text):
        for target in LINK.findall(line):
            if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # http:, https:, mailto:
                continue
            path_part, _, anchor = target.partition("#")
            where = f"{page.name}:{number}: {target}"
            destination = (page.parent / path_part).resolve() if path_part else page
            if not destination.exists():
                problems.append(f"{where} (no such file)")
                continue
            if anchor:
                if destination.suffix != ".md":
                    problems.append(f"{where} (an anchor into a file that is not markdown)")
                elif anchor not in anchors(destination.read_text(encoding="utf-8")):
                    problems.append(f"{where} (no such heading)")
    return problems


# ------------------------------------------------------------------ the CLI and its page


def commands(
    parser: argparse.ArgumentParser, path: tuple[str, ...] = ()
) -> Iterator[tuple[tuple[str, ...], argparse.ArgumentParser]]:
    """Every command and subcommand of `parser` (the root as `()`), depth first."""
    yield path, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from commands(sub, (*path, name))


def _mentions(text: str, option: str) -> bool:
    return re.search(rf"(?<![\w-]){re.escape(option)}(?![\w-])", text) is not None


def undocumented(parser: argparse.ArgumentParser, page: str) -> list[str]:
    """What of `parser` the CLI page leaves out: a command with no `### hermes-store ...`
    section (a group of commands: no mention), an option, a positional argument's name
    or an option's choice not named in its command's section, and a section for a
    command that does not exist."""
    missing: list[str] = []
    headings = {
        m.group(2) for m in map(HEADING.match, page.splitlines()) if m and m.group(1) == "###"
    }
    documented: set[str] = set()
    for path, command in commands(parser):
        name = " ".join(("hermes-store", *path))
        heading = f"### {name}"
        leaf = not any(isinstance(a, argparse._SubParsersAction) for a in command._actions)
        if not path:
            text = page
        elif leaf:
            if name not in headings:
                missing.append(f"{name}: no '{heading}' section")
                continue
            documented.add(name)
            text = section(page, heading)
        else:
            if not _mentions(page, name):
                missing.append(f"{name}: not mentioned")
            continue
        for action in command._actions:
            if isinstance(action, argparse._SubParsersAction | argparse._HelpAction):
                continue
            if action.option_strings:
                for option in action.option_strings:
                    if not _mentions(text, option):
                        missing.append(f"{name}: option {option}")
            else:
                shown = str(action.metavar or action.dest).upper()
                if not _mentions(text, shown):
                    missing.append(f"{name}: argument {shown}")
            for choice in action.choices or ():
                if isinstance(choice, str) and not _mentions(text, choice):
                    missing.append(f"{name}: {action.option_strings or action.dest} {choice}")
    for extra in sorted(h for h in headings if h.startswith("hermes-store ")):
        if extra not in documented:
            missing.append(f"{extra}: documented but not a command")
    return missing


def test_every_command_and_option_is_in_the_cli_page() -> None:
    assert undocumented(build_parser(), CLI_DOC.read_text(encoding="utf-8")) == []


def test_an_undocumented_command_or_option_is_reported() -> None:
    page = CLI_DOC.read_text(encoding="utf-8")
    parser = build_parser()
    groups = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    groups.choices["stats"].add_argument("--per-hour", action="store_true")
    groups.choices["stats"].add_argument("--unit", choices=["usd", "eur"])
    groups.add_parser("vacuum").add_argument("--into")
    assert undocumented(parser, page) == [
        "hermes-store stats: option --per-hour",
        "hermes-store stats: option --unit",
        "hermes-store stats: ['--unit'] usd",
        "hermes-store stats: ['--unit'] eur",
        "hermes-store vacuum: no '### hermes-store vacuum' section",
    ]
    # an option named only in another command's section does not count
    assert _mentions(section(page, "### hermes-store copy"), "--resume")
    assert not _mentions(section(page, "### hermes-store stats"), "--resume")
    # a section for a command the parser does not have is reported too
    stale = page + "\n### hermes-store optimize\n\nGone.\n"
    assert undocumented(build_parser(), stale) == [
        "hermes-store optimize: documented but not a command"
    ]


# ------------------------------------------------------------------ examples that run
#
# Every fenced block of README.md and docs/*.md says what it is in its fence:
#   ```python, ```sh          run here, in order, as written: each page in an empty
#                             directory of its own (the working directory; HOME and
#                             HERMES_HOME=~/.hermes are inside it too), sh blocks with bash
#                             and the project's venv as `.venv` (its bin first on PATH);
#                             python blocks in this process, each in a fresh namespace
#   ```python continued       in the namespace the page's previous python block left
#   ```python postgresql,     against a new database on the test server: in the block,
#   ```sh postgresql          `me@dbhost` stands for the server and `hermes` for the
#                             database (the name `createdb` is given and URLs end with)
#   ```sh legacy              after a copy of a file the original Hermes wrote (the legacy
#                             fixture at schema version 22) was put at ~/.hermes/state.db
#   ```sh clone               the README's install, run on a fresh clone by
#                             tests/project/test_clone.py
#   ```LANG not-run: REASON   not run, for the reason given (an install from the package
#                             index, a command that takes minutes, a server elsewhere)
#   ```python needs:MODULE    run as above where MODULE imports (an optional extra's
#                             package, such as `agents` for openai-agents); where it does
#                             not, that block and the continued ones after it are skipped,
#                             and the test says so once the page's other blocks have run
#   ```text                   not code: what a command prints, a listing
# A block without a language, or in another language without `not-run:`, fails the test.
# The python blocks of PAGES_RUN_ELSEWHERE run in the test named there, on data of its own.

RUNS = ("python", "sh")
PAGES_RUN_ELSEWHERE = {"analytics.md": "tests/repositories/test_analytics.py"}
PG_SERVER, PG_DATABASE = "me@dbhost", "hermes"


def _venv_bin() -> Path:
    return Path(sys.executable).parent


def _how_it_runs(page: Path, block: Block) -> str:
    """"run", "clone", "elsewhere", "not-run" or "text"; a block that says nothing the
    runner understands fails here."""
    where = f"{page.relative_to(REPO)}:{block.line - 1}"
    if block.not_run is not None:
        assert block.not_run, f"{where}: `not-run:` needs a reason"
        return "not-run"
    if block.lang == "text":
        return "text"
    assert block.lang in RUNS, (
        f"{where}: a ```{block.lang or '(no language)'} block: mark it ```text (output, a "
        "listing) or `not-run: REASON`, or make it python/sh"
    )
    if block.says("clone"):
        assert page == README and block.lang == "sh", f"{where}: only the README's install"
        return "clone"
    if block.lang == "python" and page.name in PAGES_RUN_ELSEWHERE:
        return "elsewhere"
    return "run"


class PageRun:
    """One page's blocks, run in order in one directory."""

    def __init__(self, page: Path, root: Path, capsys: pytest.CaptureFixture[str]) -> None:
        self.page, self.capsys = page, capsys
        self.cwd = root / "work"
        self.home = root / "home"
        self.cwd.mkdir()
        self.home.mkdir()
        (self.cwd / ".venv").symlink_to(_venv_bin().parent)
        self.namespace: dict[str, object] | None = None
        self.pg: dict[str, str] = {}
        self.databases: list[str] = []

    def environment(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if k not in ("HERMES_STORE_URL", "VIRTUAL_ENV")}
        env["HOME"] = str(self.home)
        env["HERMES_HOME"] = str(self.home / ".hermes")
        env["PATH"] = f"{_venv_bin()}{os.pathsep}{env.get('PATH', '')}"
        return env

    def with_server(self, block: Block) -> Block:
        """A postgresql block with its placeholders replaced by the test server's."""
        from helpers.postgres import PG_ADMIN_URL, require_pg
        from sqlalchemy.engine import make_url

        require_pg()
        assert PG_SERVER in block.code, f"a postgresql block names the server {PG_SERVER}"
        admin = make_url(PG_ADMIN_URL)
        self.pg.update(
            server=f"{admin.username}@{admin.host}:{admin.port or 5432}",
            PGHOST=str(admin.host),
            PGPORT=str(admin.port or 5432),
            PGUSER=str(admin.username),
        )
        # each block that runs `createdb` makes a database of its own, as a reader who
        # follows one section of the page would; the blocks after it use that one
        if "database" not in self.pg or re.search(r"^createdb ", block.code, re.M):
            self.pg["database"] = f"hs_doc_{uuid.uuid4().hex[:16]}"
            self.databases.append(self.pg["database"])
        database = self.pg["database"]
        code = block.code.replace(f"{PG_SERVER}/{PG_DATABASE}", f"{PG_SERVER}/{database}")
        code = code.replace(PG_SERVER, self.pg["server"])
        code = re.sub(
            rf"^(createdb .*) {PG_DATABASE}$", rf"\1 {database}", code, flags=re.M
        )
        return Block(block.lang, block.line, code, block.info)

    def put_legacy_file(self) -> None:
        from helpers.databases import _require_fixtures, fixture_file

        _require_fixtures()
        target = self.home / ".hermes" / "state.db"
        if not target.exists():
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(fixture_file(22).read_bytes())

    def run(self, block: Block) -> str:
        """Run one block; what it printed."""
        if block.says("postgresql"):
            block = self.with_server(block)
        if block.says("legacy"):
            self.put_legacy_file()
        if block.lang == "sh":
            return self._sh(block)
        return self._python(block)

    def _sh(self, block: Block) -> str:
        env = self.environment()
        env.update({k: v for k, v in self.pg.items() if k.startswith("PG")})
        done = subprocess.run(
            ["bash", "-e", "-o", "pipefail", "-c", block.code],
            cwd=self.cwd, env=env, capture_output=True, text=True, timeout=600, check=False,
        )
        where = f"{self.page.relative_to(REPO)}:{block.line - 1}"
        assert done.returncode == 0, f"{where}:\n{block.code}\n{done.stdout}{done.stderr}"
        return done.stdout

    def _python(self, block: Block) -> str:
        if block.says("continued"):
            assert self.namespace is not None, "a continued block follows a python block"
        else:
            self.namespace = {"__name__": f"doc_{self.page.stem}"}
        code = compile("\n" * (block.line - 1) + block.code, str(self.page), "exec")
        self.capsys.readouterr()
        exec(code, self.namespace)  # noqa: S102 - the page's own example
        return self.capsys.readouterr().out

    def close(self) -> None:
        from helpers.postgres import _admin_execute

        for name in self.databases:
            _admin_execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture
def page_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> Iterator[Callable[[Path], PageRun]]:
    """`page_run(page)`: a PageRun with this process in its directory and environment."""
    runs: list[PageRun] = []

    def make(page: Path) -> PageRun:
        run = PageRun(page, tmp_path, capsys)
        for name, value in run.environment().items():
            monkeypatch.setenv(name, value)
        monkeypatch.delenv("HERMES_STORE_URL", raising=False)
        monkeypatch.chdir(run.cwd)
        runs.append(run)
        return run

    yield make
    for run in runs:
        run.close()


def _pages() -> list[Path]:
    """The README, every page under docs/ (the reference included) and the fixtures' own."""
    return [README, *sorted(DOCS.rglob("*.md")), REPO / "tests/fixtures/legacy/README.md"]


@pytest.mark.parametrize("page", _pages(), ids=lambda p: str(p.relative_to(REPO)))
def test_every_block_runs_as_written(page: Path, page_run: Callable[[Path], PageRun]) -> None:
    found = blocks(page.read_text(encoding="utf-8"))
    plan = [(block, _how_it_runs(page, block)) for block in found]
    to_run = [block for block, how in plan if how == "run"]
    if not to_run:
        return
    run = page_run(page)
    missing: list[str] = []
    skipping = False
    for block in to_run:
        needed = block.needs
        if needed and importlib.util.find_spec(needed) is None:
            missing.append(f"line {block.line - 1} needs {needed}")
            skipping = True
            continue
        if skipping and block.says("continued"):
            continue
        skipping = False
        run.run(block)
    if missing:
        pytest.skip(f"not installed (an optional extra): {'; '.join(missing)}")


def test_the_blocks_run_elsewhere_are_the_pages_python_blocks() -> None:
    from repositories.test_analytics import BLOCKS

    page = DOCS / "analytics.md"
    mine = [b for b in blocks(page.read_text(encoding="utf-8")) if b.lang == "python"]
    assert [(b.line, b.code) for b in mine] == [(b.line, b.code) for b in BLOCKS]
    assert all(_how_it_runs(page, b) == "elsewhere" for b in mine)


def test_a_block_that_says_nothing_fails(tmp_path: Path) -> None:
    page = DOCS / "some.md"
    for lang, info in (("", ""), ("sql", ""), ("ini", "excerpt")):
        with pytest.raises(AssertionError, match="mark it ```text"):
            _how_it_runs(page, Block(lang, 3, "x\n", info))
    with pytest.raises(AssertionError, match="needs a reason"):
        _how_it_runs(page, Block("sh", 3, "x\n", "not-run:"))
    assert _how_it_runs(page, Block("sql", 3, "x\n", "not-run: plain SQL")) == "not-run"
    assert _how_it_runs(page, Block("text", 3, "x\n")) == "text"
    assert blocks("```python continued\nx = 1\n```\n")[0].says("continued")
    assert blocks("```sh not-run: takes an hour\nx\n```\n")[0].not_run == "takes an hour"
    assert blocks("```python needs:agents\nx = 1\n```\n")[0].needs == "agents"
    assert blocks("```python continued\nx = 1\n```\n")[0].needs is None


def _promised_prints(block: Block) -> list[str]:
    """What the block says it prints: the comment after each `print(...)` line."""
    return [
        m.group(1).strip()
        for m in re.finditer(r"^\s*print\(.*\)\s+#\s*(.+)$", block.code, re.M)
    ]


def quick_start() -> list[Block]:
    """The README's quick start: sh, python, sh."""
    quick = blocks(section(README.read_text(encoding="utf-8"), "## Quick start"))
    assert [b.lang for b in quick] == ["sh", "python", "sh"], quick
    return quick


def test_the_readme_quick_start_runs_as_written(page_run: Callable[[Path], PageRun]) -> None:
    run = page_run(README)
    quick = quick_start()
    run.run(quick[0])
    assert (run.cwd / "state.db").is_file()

    printed = run.run(quick[1])
    promised = _promised_prints(quick[1])
    assert promised, "the quick start says what it prints"
    assert printed.splitlines() == promised

    out = run.run(quick[2])
    assert "s1" in out and "flights to Kyoto" in out  # sessions list
    assert "flights to >>>Kyoto<<<" in out  # search
    assert "at head:       yes" in out  # check


def test_the_python_page_example_runs_as_written(page_run: Callable[[Path], PageRun]) -> None:
    page = DOCS / "python.md"
    run = page_run(page)
    example = blocks(section(page.read_text(encoding="utf-8"), "## The store and its repositories"))
    assert [b.lang for b in example] == ["sh", "python"]
    for block in example:
        run.run(block)
    with sqlite3.connect(run.cwd / "state.db") as con:
        rows = con.execute("SELECT session_id, role, content FROM messages").fetchall()
    assert rows == [("s1", "user", "flights to Kyoto")]


def test_the_asyncio_example_runs_as_written(page_run: Callable[[Path], PageRun]) -> None:
    page = DOCS / "asyncio.md"
    run = page_run(page)
    example = blocks(section(page.read_text(encoding="utf-8"), "## Example"))
    assert [b.lang for b in example] == ["sh", "python"]
    run.run(example[0])
    printed = run.run(example[1]).split()

    # the retry with the same idempotency key returned the first append's id and wrote
    # nothing: one message in the database
    assert len(printed) == 2 and printed[0] == printed[1], printed
    with sqlite3.connect(run.cwd / "state.db") as con:
        rows = con.execute("SELECT id, session_id, content FROM messages").fetchall()
    assert rows == [(int(printed[0]), "chat-1", "hello")]


# ------------------------------------------------------------------ links and size


@pytest.mark.parametrize("page", _pages(), ids=lambda p: str(p.relative_to(REPO)))
def test_every_relative_link_and_anchor_resolves(page: Path) -> None:
    assert broken_links(page) == []


def test_a_broken_link_or_anchor_is_reported(tmp_path: Path) -> None:
    (tmp_path / "other.md").write_text("# Other page\n\n## The `copy` command\n", "utf-8")
    page = tmp_path / "page.md"
    page.write_text(
        "# Page\n\n## Waiting for another process\n\n"
        "[ok](other.md#the-copy-command) [ok](#waiting-for-another-process)\n"
        "[gone](missing.md) [bad anchor](other.md#the-copy) [bad](#waiting)\n"
        "`[in code](missing.md)` [web](https://example.com/x.md)\n"
        "```\n[in a block](missing.md)\n```\n",
        encoding="utf-8",
    )
    assert broken_links(page) == [
        "page.md:6: missing.md (no such file)",
        "page.md:6: other.md#the-copy (no such heading)",
        "page.md:6: #waiting (no such heading)",
    ]


def test_the_readme_is_short() -> None:
    lines = README.read_text(encoding="utf-8").splitlines()
    assert len(lines) <= README_MAX_LINES, f"README.md has {len(lines)} lines"


def _readme_test_command() -> tuple[str, str]:
    """The pip install and pytest steps of the README's test command, `.venv/bin/`
    dropped."""
    fresh = section(README.read_text(encoding="utf-8"), "## On a fresh machine")
    sh = [b for b in blocks(fresh) if b.lang == "sh"]
    command = next(b.code.strip() for b in sh if "pytest" in b.code)
    steps = [s.strip().removeprefix(".venv/bin/") for s in command.split("&&")]
    install = next(s for s in steps if s.startswith("pip install"))
    pytest_step = next(s for s in steps if "pytest" in s)
    return install, pytest_step


def _ci_test_command() -> tuple[str, str]:
    """The same two steps of .ci/run, its venv's interpreter written as `python`."""
    run = CI_RUN.read_text(encoding="utf-8")
    install = re.search(r'^"\$PY" -m (pip install .*)$', run, re.M)
    tests = re.search(r'^"\$PY" (-m pytest [^|]*?)\s*(?:2>&1)?\s*\|', run, re.M)
    assert install and tests, "the pip install and pytest lines of .ci/run"
    return (
        install.group(1).replace(" --quiet", ""),
        f"python {tests.group(1)}",
    )


def test_the_readme_test_command_is_what_ci_runs() -> None:
    install, tests = _readme_test_command()
    assert (install, tests) == _ci_test_command()
    assert (install, tests) == ("pip install -e '.[test,postgres]'", "python -m pytest -n auto")


def test_the_api_reference_command_is_what_ci_runs() -> None:
    page = (DOCS / "api.md").read_text(encoding="utf-8")
    (command,) = [b.code.strip() for b in blocks(page) if "-m pdoc" in b.code]
    ci = re.search(r'"\$PY" (-W error .*-m pdoc .*?)\)', CI_RUN.read_text(encoding="utf-8"))
    assert ci, "the pdoc line of .ci/run"
    assert command == f"python {ci.group(1)}"
