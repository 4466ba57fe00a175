"""The repository stands alone: the legacy fixtures it tests against are in it and match
their checksums, no file refers to anything beside the clone, and every citation of the
reference (docs/reference) names a section that exists there."""

from __future__ import annotations

import hashlib
import os
import re
import shutil
from collections.abc import Iterator
from pathlib import Path

from helpers.databases import EXPECTED_VERSIONS, IN_REPO_FIXTURES

REPO = Path(__file__).resolve().parents[2]
REFERENCE = REPO / "docs" / "reference"
REFERENCE_PAGES = ("README", "schema", "history", "behaviour")

#: Directories that are not the project's files: tools' caches and environments.
NOT_SOURCES = {
    ".git", ".tox", ".ci-cache", "build", "dist", "__pycache__", ".mypy_cache", ".ruff_cache",
    ".pytest_cache", ".hypothesis",
}

#: A path to the directory the project's facts and fixtures once lived in, beside a clone.
OUTSIDE = re.compile(
    r"\.\./shared|shared/(?:spec|fixtures)|[\"']shared[\"']\s*/\s*[\"'](?:spec|fixtures)"
)
#: A citation in the old form: a file of that directory, a page of guidance that is not
#: in the repository, or "spec section N".
STALE = re.compile(
    r"\bspec/[\w-]+\.md|\b(?:lessons|design-notes)\.md|\bspec\s+(?:sections?\s+|§\s*)?\d"
)
_WS = r"[ \t]*(?:\n[ \t#:]*)?"
_NUMBER = r"\d+(?:\.\d+)*"
_SEPARATOR = rf"(?:,{_WS}(?:and{_WS})?|[ \t]+and{_WS}|/|-|–)"
#: A reference page, optionally followed by the sections cited ("6.2", "sections 3, 4.1
#: and 12", "5.3-5.5"), a line break allowed wherever a space is.
CITATION = re.compile(
    rf"(?:(?P<prefix>(?:docs/)?reference/)|(?<![\w./-]))(?P<page>{'|'.join(REFERENCE_PAGES)})\.md"
    rf"(?:(?:[ \t]+|\n[ \t#:]*)(?:sections?[ \t]+|§[ \t]*)?"
    rf"(?P<sections>{_NUMBER}(?:{_SEPARATOR}{_NUMBER})*)(?![\w.]*\d))?"
)
HEADING_NUMBER = re.compile(r"^#{1,6}\s+(\d+(?:\.\d+)*)\.?\s", re.M)


def project_files(root: Path) -> Iterator[Path]:
    """Every file of the project under `root` (virtual environments and caches left out;
    links to directories are not followed, so hermes_store/_migrations is read once)."""
    for directory, subdirectories, files in os.walk(root):
        subdirectories[:] = sorted(
            d for d in subdirectories
            if d not in NOT_SOURCES and not d.startswith(".venv") and not d.endswith(".egg-info")
        )
        for name in sorted(files):
            yield Path(directory) / name


def _text(path: Path) -> str | None:
    data = path.read_bytes()
    if b"\x00" in data:
        return None  # a database or another binary file
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return None


def reference_sections(directory: Path = REFERENCE) -> dict[str, set[str]]:
    """The section numbers each reference page has, from its numbered headings."""
    return {
        page: set(HEADING_NUMBER.findall((directory / f"{page}.md").read_text(encoding="utf-8")))
        for page in REFERENCE_PAGES
        if (directory / f"{page}.md").is_file()
    }


def citation_problems(
    label: str, text: str, sections: dict[str, set[str]], *, in_reference: bool = False
) -> list[str]:
    """What is wrong with the references of one file's text: a path beside the clone, an
    old-form citation, a reference page cited without its docs/reference path (outside
    docs/reference itself), a page or a section that does not exist."""
    problems: list[str] = []

    def line(offset: int) -> str:
        return f"{label}:{text.count(chr(10), 0, offset) + 1}"

    for match in OUTSIDE.finditer(text):
        problems.append(f"{line(match.start())}: refers outside the clone: {match.group(0)!r}")
    for match in STALE.finditer(text):
        problems.append(f"{line(match.start())}: old-form citation: {match.group(0)!r}")
    for match in CITATION.finditer(text):
        page, prefixed = match.group("page"), match.group("prefix") is not None
        if not prefixed and not in_reference:
            if page != "README":  # README.md unprefixed is the project's own README
                problems.append(
                    f"{line(match.start())}: cite docs/reference/{page}.md, not {page}.md"
                )
            continue
        if page not in sections:
            problems.append(f"{line(match.start())}: no reference page {page}.md")
            continue
        cited = re.findall(_NUMBER, match.group("sections") or "")
        for number in cited:
            if number not in sections[page]:
                problems.append(f"{line(match.start())}: {page}.md has no section {number}")
    return problems


def test_every_reference_page_is_there_and_numbered() -> None:
    sections = reference_sections()
    assert sorted(sections) == sorted(REFERENCE_PAGES)
    # the sections the code cites most, as a sample: the numbering must not drift
    assert {"6.1", "6.2", "6.4", "6.5", "16.1", "16.2"} <= sections["behaviour"]
    assert {"2.2", "5.3", "5.5", "6.2", "10"} <= sections["schema"]
    assert {"2", "3", "5", "6.2"} <= sections["history"]


def test_no_file_refers_outside_the_clone_and_every_citation_exists() -> None:
    sections = reference_sections()
    problems: list[str] = []
    checked = 0
    for path in project_files(REPO):
        if path == Path(__file__).resolve():
            continue  # its examples of wrong references are wrong on purpose
        text = _text(path)
        if text is None:
            continue
        checked += 1
        problems += citation_problems(
            str(path.relative_to(REPO)), text, sections, in_reference=path.parent == REFERENCE
        )
    assert checked > 100, "the walk found the project's files"
    assert problems == []


def test_a_wrong_reference_is_reported() -> None:
    sections = {"behaviour": {"6", "6.2", "9", "16"}, "schema": {"5.3", "5.4", "5.5"}}
    text = (
        "ok: docs/reference/behaviour.md 6.2 and docs/reference/schema.md 5.3-5.5,\n"
        "ok: (docs/reference/behaviour.md sections 6, 9 and\n    16) and README.md 2\n"
        "bad: docs/reference/behaviour.md 6.3, docs/reference/behaviour.md 9 and 10\n"
        "bad: docs/reference/history.md 2; behaviour.md 6.2\n"
        "bad: spec/behaviour.md; lessons.md section 2; (spec section 8); ../shared/x\n"
        'bad: ROOT.parent / "shared" / "fixtures"\n'
    )
    assert citation_problems("f", text, sections) == [
        "f:6: refers outside the clone: '../shared'",
        "f:7: refers outside the clone: '\"shared\" / \"fixtures'",
        "f:6: old-form citation: 'spec/behaviour.md'",
        "f:6: old-form citation: 'lessons.md'",
        "f:6: old-form citation: 'spec section 8'",
        "f:4: behaviour.md has no section 6.3",
        "f:4: behaviour.md has no section 10",
        "f:5: no reference page history.md",
        "f:5: cite docs/reference/behaviour.md, not behaviour.md",
    ]
    # inside docs/reference the pages cite each other by name alone
    assert citation_problems("g", "see schema.md 5.4 and behaviour.md 6", sections,
                             in_reference=True) == []


# ------------------------------------------------------------------ the legacy fixtures


def checksum_problems(directory: Path) -> list[str]:
    """How `directory` differs from its SHA256SUMS: a file whose digest is not the one
    listed, a listed file that is missing, a fixture file that is not listed."""
    listed: dict[str, str] = {}
    for entry in (directory / "SHA256SUMS").read_text(encoding="utf-8").splitlines():
        digest, name = entry.split(maxsplit=1)
        listed[name.lstrip("*")] = digest
    problems = []
    for name, digest in sorted(listed.items()):
        path = directory / name
        if not path.is_file():
            problems.append(f"{name}: missing")
        elif hashlib.sha256(path.read_bytes()).hexdigest() != digest:
            problems.append(f"{name}: its SHA-256 is not the one in SHA256SUMS")
    present = {p.name for p in directory.iterdir()} - {"README.md", "SHA256SUMS"}
    problems += [f"{name}: not in SHA256SUMS" for name in sorted(present - set(listed))]
    return problems


def test_the_legacy_fixtures_are_in_the_repository_and_match_their_checksums() -> None:
    assert IN_REPO_FIXTURES == REPO / "tests" / "fixtures" / "legacy"
    assert checksum_problems(IN_REPO_FIXTURES) == []
    names = {p.name for p in IN_REPO_FIXTURES.iterdir()}
    for version in EXPECTED_VERSIONS:
        stem = f"state_v{version:02d}"
        assert {f"{stem}.db", f"{stem}.json", f"{stem}.schema.sql"} <= names, stem
    assert "upstream_v23_open_check.json" in names


def test_a_changed_or_unlisted_fixture_is_reported(tmp_path: Path) -> None:
    tmp_path = tmp_path / "legacy"
    tmp_path.mkdir()
    for name in ("state_v01.db", "state_v02.db", "state_v01.json"):
        shutil.copyfile(IN_REPO_FIXTURES / name, tmp_path / name)
    sums = (IN_REPO_FIXTURES / "SHA256SUMS").read_text(encoding="utf-8").splitlines()
    keep = [s for s in sums if s.endswith(("state_v01.db", "state_v02.db", "state_v04.db"))]
    (tmp_path / "SHA256SUMS").write_text("\n".join(keep) + "\n", encoding="utf-8")
    assert checksum_problems(tmp_path) == [
        "state_v04.db: missing",
        "state_v01.json: not in SHA256SUMS",
    ]
    with (tmp_path / "state_v02.db").open("r+b") as f:
        f.seek(100)
        f.write(b"\xff")
    assert "state_v02.db: its SHA-256 is not the one in SHA256SUMS" in checksum_problems(tmp_path)
