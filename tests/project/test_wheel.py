"""The built wheel, installed into a fresh virtual environment, carries the migrations.

This is the test that `hermes-store upgrade` works from an installed package and not only
from a checkout (the Alembic tree lives at the top-level `migrations/` and ships as the
package `hermes_store._migrations`, see pyproject.toml).

How it works, and why:

* The working tree (uncommitted edits included) is copied to a temporary directory and the
  wheel is built there with `python -m build --wheel --no-isolation`. Building from a copy
  keeps setuptools' `build/` and `*.egg-info` out of the checkout, so a stale
  `build/lib` can never smuggle a deleted revision file into the wheel.
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
  imported and no real ~/.hermes is touched.

All of it is one test function: with `pytest -n auto` a module-scoped fixture would be
built once per xdist worker.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
#: the project head: the upstream revisions 0001..0023, then its own (hs0001, ...)
HEAD = "hs0005"
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
    for name in ("PYTHONPATH", "PYTHONHOME", "PYTHONSTARTUP", "VIRTUAL_ENV", "HERMES_STORE_URL"):
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


def _build_wheel(tmp_path: Path) -> Path:
    from build import ProjectBuilder

    src = tmp_path / "src"
    shutil.copytree(REPO, src, ignore=_ignore)
    out = tmp_path / "dist"
    env = _clean_env(tmp_path)
    unmet = ProjectBuilder(src).check_dependencies("wheel")
    args = [sys.executable, "-m", "build", "--wheel", "-o", str(out)]
    if not unmet:
        args.insert(4, "--no-isolation")
    else:
        print(f"build requirements unmet here ({sorted(unmet)}): building isolated")
    _ok(_run([*args, str(src)], cwd=tmp_path, env=env, timeout=600), " ".join(args[1:]))
    wheels = sorted(out.glob("hermes_store-*.whl"))
    assert len(wheels) == 1, f"expected one wheel in {out}, found {wheels}"
    return wheels[0]


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
def test_installed_wheel_upgrades_a_fresh_database(tmp_path: Path) -> None:
    wheel = _build_wheel(tmp_path)
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
    db = tmp_path / "state.db"
    _ok(
        _run([str(console), "upgrade", "--url", str(db)], cwd=tmp_path, env=env),
        "hermes-store upgrade",
    )
    assert db.is_file()

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

    # A second run finds the database at head and changes nothing; `check` agrees.
    _ok(
        _run([str(console), "upgrade", "--url", str(db)], cwd=tmp_path, env=env),
        "second hermes-store upgrade",
    )
    _ok(
        _run([str(console), "check", "--url", str(db)], cwd=tmp_path, env=env), "hermes-store check"
    )
