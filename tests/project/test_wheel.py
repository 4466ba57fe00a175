"""The built wheel, installed into a fresh virtual environment, carries the migrations.

This is the test that `hermes-store upgrade` works from an installed package and not only
from a checkout (the Alembic tree lives at the top-level `migrations/` and ships as the
package `hermes_store._migrations`, see pyproject.toml).

How it works, and why:

* .ci/run builds the sdist and the wheel once (`python -m build`, into build/dist) and
  names the directory in $HERMES_STORE_DIST; this test installs those. Without it the
  working tree (uncommitted edits included) is copied to a temporary directory and built
  there the same way: `python -m build` makes the sdist, then the wheel from the unpacked
  sdist, so the sdist is shown to hold what a build needs. Building from a copy keeps
  setuptools' `build/` and `*.egg-info` out of the checkout, so a stale `build/lib` can
  never smuggle a deleted revision file into the wheel.
* `--no-isolation` needs the build-system requirements of pyproject.toml
  (`setuptools>=68`, `wheel`) in the running environment. A venv made by
  `python3 -m venv` on Python 3.11 has setuptools 65 and no `wheel`, and `pip install -e`
  does not change that, so when `build` reports them unmet the test falls back to an
  isolated build (`python -m build --wheel`), which fetches them through pip's configured
  index. Either way the wheel is built by the same backend from the same files.
* A fresh venv is created in tmp_path WITHOUT `--system-site-packages`, so nothing of the
  development environment is visible in it. The wheel is installed with a plain
  `pip install <wheel>`; pip resolves the runtime dependencies (SQLAlchemy, Alembic,
  tqdm) from its configured index and cache. That is the install a user does, it needs
  no hand-maintained wheelhouse, and after the first run it is served from pip's cache.
* Everything in the venv runs with cwd = tmp_path (outside the repository), PYTHONPATH
  unset and HERMES_HOME pointing into tmp_path, so only the installed package can be
  imported and no real ~/.hermes is touched. The README's quick start runs as written in
  a directory whose `.venv` is this venv; the legacy file is a copy of a fixture.

All of it is one test function: with `pytest -n auto` a module-scoped fixture would be
built once per xdist worker.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import sqlite3
import subprocess
import sys
import tarfile
import zipfile
from collections.abc import Callable
from pathlib import Path

import pytest

from hermes_store.sqlite.driver import wal_reset_vulnerable

REPO = Path(__file__).resolve().parents[2]
#: the project head: the upstream revisions 0001..0023, then its own (hs0001, ...)
HEAD = "hs0010"
SCHEMA_VERSION = 23
REVISION_FILE = re.compile(r"^(\d{4})_\w+\.py$")

# Top-level entries of the checkout that are not part of the source tree.
_TOP_LEVEL_SKIP = {".git", "build", "dist", ".tox", ".nox"}
# Names skipped at any depth.
_ANY_LEVEL_SKIP = {"__pycache__", ".pytest_cache", ".mypy_cache", ".ruff_cache", ".hypothesis"}


def _ignore(directory: str, names: list[str]) -> set[str]:
    skipped = {n for n in names if n in _ANY_LEVEL_SKIP or n.endswith(".egg-info")}
    skipped |= {n for n in names if n.endswith((".db", ".db-wal", ".db-shm", ".pyc"))}
    if Path(directory).resolve() == REPO:
        skipped |= {n for n in names if n in _TOP_LEVEL_SKIP or n.startswith(".venv")}
    return skipped


def _clean_env(tmp_path: Path, venv_bin: Path | None = None) -> dict[str, str]:
    env = dict(os.environ)
    # a user's environment: no driver pinned (conftest pins the suite's), no URL
    for name in (
        "PYTHONPATH", "PYTHONHOME", "PYTHONSTARTUP", "VIRTUAL_ENV", "HERMES_STORE_URL",
        "HERMES_STORE_SQLITE_DRIVER",
    ):
        env.pop(name, None)
    env["HERMES_HOME"] = str(tmp_path / "hermes-home")
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    if venv_bin is not None:
        env["VIRTUAL_ENV"] = str(venv_bin.parent)
        env["PATH"] = f"{venv_bin}{os.pathsep}{env.get('PATH', '')}"
    return env


def _run(
    args: list[str], *, cwd: Path, env: dict[str, str], timeout: float = 300
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        args, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout, check=False
    )


def _ok(proc: subprocess.CompletedProcess[str], what: str) -> str:
    assert proc.returncode == 0, (
        f"{what} exited {proc.returncode}\n--- stdout ---\n{proc.stdout[-4000:]}"
        f"\n--- stderr ---\n{proc.stderr[-4000:]}"
    )
    return proc.stdout


#: where .ci/run leaves the wheel and the sdist it built (`python -m build`), so that this
#: test installs those and does not build them again
DIST_ENV = "HERMES_STORE_DIST"


def _dists(tmp_path: Path) -> tuple[Path, Path]:
    """The wheel and the sdist: those of $HERMES_STORE_DIST, else built here from a copy of
    the working tree with `python -m build`, which builds the sdist and then the wheel
    from the unpacked sdist (so a wheel at all means the sdist holds what a build needs)."""
    given = os.environ.get(DIST_ENV)
    if given:
        out = Path(given)
    else:
        from build import ProjectBuilder

        src = tmp_path / "src"
        shutil.copytree(REPO, src, ignore=_ignore)
        out = tmp_path / "dist"
        env = _clean_env(tmp_path)
        unmet = ProjectBuilder(src).check_dependencies("wheel")
        args = [sys.executable, "-m", "build", "-o", str(out)]
        if not unmet:
            args.insert(3, "--no-isolation")
        else:
            print(f"build requirements unmet here ({sorted(unmet)}): building isolated")
        _ok(_run([*args, str(src)], cwd=tmp_path, env=env, timeout=600), " ".join(args[1:]))
    wheels = sorted(out.glob("hermes_store-*.whl"))
    sdists = sorted(out.glob("hermes_store-*.tar.gz"))
    assert len(wheels) == 1 and len(sdists) == 1, f"one wheel and one sdist in {out}"
    return wheels[0], sdists[0]


def _check_sdist_contents(sdist: Path) -> None:
    with tarfile.open(sdist) as tf:
        names = {n.split("/", 1)[1] for n in tf.getnames() if "/" in n}
    for required in (
        "pyproject.toml",
        "README.md",
        "hermes_store/__init__.py",
        "hermes_store/py.typed",
        "migrations/env.py",
        "migrations/script.py.mako",
        "migrations/versions/__init__.py",
    ):
        assert required in names, f"{required} missing from {sdist.name}"
    revisions = [n for n in names if n.startswith("migrations/versions/") and n.endswith(".py")]
    assert len(revisions) > SCHEMA_VERSION, revisions


def _check_wheel_contents(wheel: Path) -> None:
    with zipfile.ZipFile(wheel) as zf:
        names = set(zf.namelist())
        entry_points = next(
            zf.read(n).decode() for n in names if n.endswith(".dist-info/entry_points.txt")
        )
    mig = "hermes_store/_migrations/"
    for required in (
        f"{mig}__init__.py",
        f"{mig}env.py",
        f"{mig}_ops.py",
        f"{mig}_fts_layouts.py",
        f"{mig}script.py.mako",
        f"{mig}versions/__init__.py",
        "hermes_store/py.typed",
        "hermes_store/migrate.py",
        "hermes_store/integrations/adk.py",
    ):
        assert required in names, f"{required} missing from {wheel.name}"
    revisions = sorted(
        int(m.group(1))
        for n in names
        if n.startswith(f"{mig}versions/") and (m := REVISION_FILE.match(n.rsplit("/", 1)[1]))
    )
    assert revisions == list(range(1, SCHEMA_VERSION + 1)), revisions
    stray = sorted(n for n in names if n.split("/", 1)[0] in ("migrations", "tests"))
    assert not stray, f"the checkout's top-level folders leaked into the wheel: {stray[:5]}"
    assert re.search(r"^hermes-store\s*=\s*hermes_store\.cli:main\s*$", entry_points, re.M), (
        entry_points
    )


_INSPECT = """
import json, sqlite3, sys, sysconfig
from pathlib import Path
import hermes_store
from hermes_store import migrate

location = Path(migrate.script_location()).resolve()
db = sqlite3.connect(sys.argv[1])
print(json.dumps({
    "purelib": str(Path(sysconfig.get_path("purelib")).resolve()),
    "package": str(Path(hermes_store.__file__).resolve().parent),
    "script_location": str(location),
    "versions": sorted(p.name for p in (location / "versions").iterdir()),
    "mako": (location / "script.py.mako").is_file(),
    "schema_version": [r[0] for r in db.execute("SELECT version FROM schema_version")],
    "alembic": [r[0] for r in db.execute("SELECT version_num FROM hermes_store_version")],
}))
"""


@pytest.mark.slow
# The backend's own warnings (beta [tool.setuptools], deprecations), relayed by
# ProjectBuilder.check_dependencies, are about pyproject.toml, not about this test.
@pytest.mark.filterwarnings("ignore::pyproject_hooks.BuildBackendWarning")
def test_the_installed_wheel_runs_the_quick_start_and_upgrades_a_legacy_file(
    tmp_path: Path, legacy_db: Callable[..., Path]
) -> None:
    """The package as users get it: the wheel (not editable) in a fresh venv runs the
    README's quick start as written and `hermes-store upgrade` on a file the original
    wrote; new files get WAL from the pysqlite3 the wheel depends on here, and without
    pysqlite3 `check` says what to install."""
    wheel, sdist = _dists(tmp_path)
    _check_sdist_contents(sdist)
    _check_wheel_contents(wheel)

    venv = tmp_path / "venv"
    env = _clean_env(tmp_path)
    _ok(_run([sys.executable, "-m", "venv", str(venv)], cwd=tmp_path, env=env), "python -m venv")
    bin_dir = venv / "bin"
    python = bin_dir / "python"
    env = _clean_env(tmp_path, bin_dir)
    _ok(
        _run([str(python), "-m", "pip", "install", str(wheel)], cwd=tmp_path, env=env, timeout=600),
        "pip install <wheel>",
    )
    console = bin_dir / "hermes-store"
    assert console.is_file(), "the wheel installed no hermes-store console script"

    # The README's quick start, in a directory whose .venv is this venv.
    from cli.test_docs import _promised_prints, quick_start

    work = tmp_path / "work"
    work.mkdir()
    (work / ".venv").symlink_to(venv)
    first, example, commands = quick_start()
    _ok(_run(["bash", "-e", "-c", first.code], cwd=work, env=env), first.code)
    printed = _ok(_run([str(python), "-c", example.code], cwd=work, env=env), "quick start")
    assert printed.splitlines() == _promised_prints(example)
    out = _ok(_run(["bash", "-e", "-c", commands.code], cwd=work, env=env), commands.code)
    assert "flights to >>>Kyoto<<<" in out and "at head:       yes" in out, out
    db = work / "state.db"
    assert _journal_mode(db) == "wal", "pysqlite3 came with the wheel: a new file gets WAL"

    facts = json.loads(
        _ok(_run([str(python), "-c", _INSPECT, str(db)], cwd=tmp_path, env=env), "inspection")
    )
    purelib = Path(facts["purelib"])
    assert Path(facts["package"]).is_relative_to(purelib), facts
    assert Path(facts["script_location"]).is_relative_to(purelib), facts
    assert Path(facts["script_location"]) == Path(facts["package"]) / "_migrations", facts
    assert not Path(facts["script_location"]).is_relative_to(REPO), facts
    revisions = [v for v in facts["versions"] if REVISION_FILE.match(v)]
    assert len(revisions) == SCHEMA_VERSION, facts["versions"]
    assert revisions[0].startswith("0001_") and revisions[-1].startswith("0023_")
    assert any(v.startswith(f"{HEAD}_") for v in facts["versions"]), facts["versions"]
    assert facts["mako"], "script.py.mako is not installed"
    assert facts["schema_version"] == [SCHEMA_VERSION], facts
    assert facts["alembic"] == [HEAD], facts

    # A file the original Hermes wrote (schema version 22), upgraded by the installed
    # command; a second run changes nothing and `check` agrees.
    legacy = legacy_db(22)
    upgraded = _ok(
        _run([str(console), "upgrade", "--url", str(legacy)], cwd=tmp_path, env=env),
        "hermes-store upgrade <legacy file>",
    )
    assert "adopted a Hermes database at schema_version 22" in upgraded, upgraded
    again = _ok(
        _run([str(console), "upgrade", "--url", str(legacy)], cwd=tmp_path, env=env),
        "second hermes-store upgrade",
    )
    assert "at head already" in again, again
    _ok(_run([str(console), "check", "--url", str(legacy)], cwd=tmp_path, env=env), "check")

    # Without pysqlite3 the same install runs on the standard library's SQLite: a new
    # file gets DELETE mode where that SQLite has the bug, and `check` says why.
    _ok(
        _run([str(python), "-m", "pip", "uninstall", "-y", "pysqlite3"], cwd=tmp_path, env=env),
        "pip uninstall pysqlite3",
    )
    bare = tmp_path / "without-pysqlite3.db"
    _ok(_run([str(console), "upgrade", "--url", str(bare)], cwd=tmp_path, env=env), "upgrade")
    report = _ok(_run([str(console), "check", "--url", str(bare)], cwd=tmp_path, env=env), "check")
    if wal_reset_vulnerable(sqlite3.sqlite_version_info):
        assert _journal_mode(bare) == "delete"
        assert "pip install pysqlite3" in report, report
    else:
        assert _journal_mode(bare) == "wal"


def _journal_mode(path: Path) -> str:
    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        return str(con.execute("PRAGMA journal_mode").fetchone()[0]).lower()
    finally:
        con.close()
