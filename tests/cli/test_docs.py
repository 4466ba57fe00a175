"""The documentation is checked like code: every command and option of `hermes-store` is
documented in docs/cli.md, the README's quick start and the Python and asyncio examples
run as written against a new SQLite file, every relative link and anchor resolves, the
README stays short, and its test command is the one .ci/run runs."""

from __future__ import annotations

import argparse
import re
import shlex
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
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

FENCE = re.compile(r"^```(\w*)\s*$")
HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
INLINE_CODE = re.compile(r"`[^`\n]*`")


# ------------------------------------------------------------------ reading markdown


@dataclass(frozen=True)
class Block:
    lang: str
    line: int  # 1-based line of the first code line
    code: str


def blocks(text: str) -> list[Block]:
    """The fenced code blocks of a page, in order."""
    found: list[Block] = []
    lang: str | None = None
    body: list[str] = []
    start = 0
    for number, line in enumerate(text.splitlines(), start=1):
        fence = FENCE.match(line.strip())
        if lang is None:
            if fence:
                lang, body, start = fence.group(1), [], number + 1
        elif fence and not fence.group(1):
            found.append(Block(lang, start, "\n".join(body) + "\n"))
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


def _hermes_store(args: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    """The installed `hermes-store` command, as a user runs it."""
    script = Path(sys.executable).parent / "hermes-store"
    assert script.is_file(), f"{script} is missing: install the project (pip install -e .)"
    return subprocess.run(
        [str(script), *args], cwd=cwd, capture_output=True, text=True, timeout=300
    )


def _run_shell_block(block: Block, cwd: Path) -> dict[str, str]:
    """Run each `hermes-store ...` line of a sh block; return each line's stdout."""
    outputs: dict[str, str] = {}
    for line in block.code.splitlines():
        words = shlex.split(line, comments=True)
        if not words:
            continue
        assert words[0] == "hermes-store", f"not a hermes-store command: {line}"
        done = _hermes_store(words[1:], cwd)
        assert done.returncode == 0, f"{line}\n{done.stdout}{done.stderr}"
        outputs[" ".join(words[1:])] = done.stdout
    return outputs


def _run_python_block(block: Block, page: Path, capsys: pytest.CaptureFixture[str]) -> str:
    code = compile("\n" * (block.line - 1) + block.code, str(page), "exec")
    capsys.readouterr()
    exec(code, {"__name__": f"doc_{page.stem}"})  # noqa: S102 - the page's own example
    return capsys.readouterr().out


def _promised_prints(block: Block) -> list[str]:
    """What the block says it prints: the comment after each `print(...)` line."""
    return [
        m.group(1).strip()
        for m in re.finditer(r"^\s*print\(.*\)\s+#\s*(.+)$", block.code, re.M)
    ]


def test_the_readme_quick_start_runs_as_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    quick = blocks(section(README.read_text(encoding="utf-8"), "## Quick start"))
    assert [b.lang for b in quick] == ["sh", "python", "sh"], quick
    _run_shell_block(quick[0], tmp_path)
    assert (tmp_path / "state.db").is_file()

    printed = _run_python_block(quick[1], README, capsys)
    promised = _promised_prints(quick[1])
    assert promised, "the quick start says what it prints"
    assert printed.splitlines() == promised

    out = _run_shell_block(quick[2], tmp_path)
    assert "s1" in out["sessions list --url state.db"]
    assert "flights to Kyoto" in out["sessions list --url state.db"]
    assert "flights to >>>Kyoto<<<" in out["search kyoto --url state.db"]
    assert "at head:       yes" in out["check --url state.db"]


def test_the_python_page_example_runs_as_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    page = DOCS / "python.md"
    example = blocks(section(page.read_text(encoding="utf-8"), "## The store and its repositories"))
    assert [b.lang for b in example] == ["python"]
    _run_shell_block(Block("sh", 0, "hermes-store upgrade --url state.db\n"), tmp_path)
    _run_python_block(example[0], page, capsys)
    with sqlite3.connect(tmp_path / "state.db") as con:
        rows = con.execute("SELECT session_id, role, content FROM messages").fetchall()
    assert rows == [("s1", "user", "flights to Kyoto")]


def test_the_asyncio_example_runs_as_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    page = DOCS / "asyncio.md"
    text = page.read_text(encoding="utf-8")
    assert "hermes-store upgrade --url state.db" in section(text, "## Example")
    example = [b for b in blocks(section(text, "## Example")) if b.lang == "python"]
    assert len(example) == 1
    _run_shell_block(Block("sh", 0, "hermes-store upgrade --url state.db\n"), tmp_path)

    printed = _run_python_block(example[0], page, capsys).split()

    # the retry with the same idempotency key returned the first append's id and wrote
    # nothing: one message in the database
    assert len(printed) == 2 and printed[0] == printed[1], printed
    with sqlite3.connect(tmp_path / "state.db") as con:
        rows = con.execute("SELECT id, session_id, content FROM messages").fetchall()
    assert rows == [(int(printed[0]), "chat-1", "hello")]


# ------------------------------------------------------------------ links and size


def _pages() -> list[Path]:
    """The README, every page under docs/ (the reference included) and the fixtures' own."""
    return [README, *sorted(DOCS.rglob("*.md")), REPO / "tests/fixtures/legacy/README.md"]


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
