"""The README on a bare machine: a clone of this repository's HEAD, alone in an empty
directory, runs the README's first command (a venv, the install, `hermes-store upgrade`
of the default database) and then the quick start, exactly as the README writes them
(both parsed from README.md), in one shell as a user would type them.

The journal mode the first command gave the default database is printed (`-s` shows it)
and checked: WAL where a SQLite with the WAL-reset fix comes with the install (pysqlite3
has a wheel here, or the standard library's SQLite is fixed), else DELETE.
"""

from __future__ import annotations

import os
import shutil
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest
from cli.test_docs import README, _promised_prints, blocks, quick_start, section

from hermes_store.sqlite import driver as sqlite_driver

REPO = Path(__file__).resolve().parents[2]


def readme_install() -> str:
    """The README's first command: the `sh clone` block of "On a fresh machine"."""
    fresh = blocks(section(README.read_text(encoding="utf-8"), "## On a fresh machine"))
    (install,) = [b for b in fresh if b.says("clone")]
    assert "hermes-store upgrade" in install.code
    return install.code


def _user_environment(home: Path) -> dict[str, str]:
    """This machine's environment as a new user's shell has it: nothing of the test
    run's venv, driver choice or database."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("HERMES_", "PYTHON", "PYTEST", "COV_")) and k != "VIRTUAL_ENV"
    }
    venv_bin = str(Path(sys.executable).parent)
    env["PATH"] = os.pathsep.join(p for p in env.get("PATH", "").split(os.pathsep) if p != venv_bin)
    env["HOME"] = str(home)
    return env


def _journal_mode(path: Path) -> str:
    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        return str(con.execute("PRAGMA journal_mode").fetchone()[0]).lower()
    finally:
        con.close()


@pytest.mark.slow
def test_a_fresh_clone_runs_the_readme_as_written(tmp_path: Path) -> None:
    if shutil.which("git") is None:
        pytest.skip("git is not installed")
    empty = tmp_path / "empty"
    empty.mkdir()
    clone = empty / "hermes-store"
    head = subprocess.run(
        ["git", "-C", str(REPO), "rev-parse", "HEAD"], capture_output=True, text=True, check=True
    ).stdout.strip()
    subprocess.run(["git", "clone", "--quiet", str(REPO), str(clone)], check=True, timeout=300)
    subprocess.run(["git", "-C", str(clone), "checkout", "--quiet", "--detach", head], check=True)
    assert sorted(p.name for p in empty.iterdir()) == ["hermes-store"]
    home = tmp_path / "home"
    home.mkdir()
    env = _user_environment(home)

    started = time.monotonic()
    first = subprocess.run(
        ["bash", "-e", "-c", readme_install()],
        cwd=clone,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    install_seconds = time.monotonic() - started
    assert first.returncode == 0, first.stdout[-4000:] + first.stderr[-4000:]
    default_db = home / ".hermes" / "state.db"
    assert default_db.is_file(), first.stdout
    mode = _journal_mode(default_db)
    print(f"\nthe README's first command: {install_seconds:.1f} s; {default_db}: journal {mode}")
    bundled_fixed = sqlite_driver.has_pysqlite3_wheel()
    stdlib_fixed = not sqlite_driver.wal_reset_vulnerable(sqlite3.sqlite_version_info)
    assert mode == ("wal" if bundled_fixed or stdlib_fixed else "delete")

    # The quick start in one shell session: its sh lines, `python` reading the example.
    sh1, example, sh2 = quick_start()
    script = f"{sh1.code}python - <<'EXAMPLE'\n{example.code}EXAMPLE\n{sh2.code}"
    quick = subprocess.run(
        ["bash", "-e", "-c", script],
        cwd=clone,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert quick.returncode == 0, quick.stdout[-4000:] + quick.stderr[-4000:]
    lines = quick.stdout.splitlines()
    promised = _promised_prints(example)
    assert promised and all(line in lines for line in promised), quick.stdout
    assert "flights to >>>Kyoto<<<" in quick.stdout and "at head:       yes" in quick.stdout
    assert _journal_mode(clone / "state.db") == mode
