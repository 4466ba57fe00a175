"""Which SQLite a process drives (hermes_store.sqlite.driver) and the journal mode a file
gets from it: the standard library's sqlite3, or the `sqlite` extra's pysqlite3, whose
bundled SQLite has the WAL-reset fix.

The rest of the suite pins the standard library (conftest); these tests run the choice
as a user's process makes it, in subprocesses with the setting each case needs.
"""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from helpers.databases import journal_mode, set_journal_mode

from hermes_store.errors import InvalidURL
from hermes_store.sqlite import driver as sqlite_driver

pytestmark = pytest.mark.sqlite_only

STDLIB_VULNERABLE = sqlite_driver.wal_reset_vulnerable(sqlite3.sqlite_version_info)


def _run(
    code: str, *args: str, driver: str | None = "auto", **env: str
) -> subprocess.CompletedProcess[str]:
    environ = {**os.environ, **env}
    environ.pop(sqlite_driver.DRIVER_ENV, None)
    if driver is not None:
        environ[sqlite_driver.DRIVER_ENV] = driver
    return subprocess.run(
        [sys.executable, "-c", code, *args],
        capture_output=True,
        text=True,
        env=environ,
        timeout=300,
        check=False,
    )


def _cli(*args: str, driver: str | None = "auto", **env: str) -> subprocess.CompletedProcess[str]:
    return _run("from hermes_store.cli import main; raise SystemExit(main())", *args,
                driver=driver, **env)


def test_the_setting_picks_the_driver() -> None:
    assert sqlite_driver.choose("sqlite3").module is sqlite3
    bundled = sqlite_driver.choose("pysqlite3")
    assert bundled.name == "pysqlite3"
    assert bundled.module.__name__ == sqlite_driver.BUNDLED_MODULE
    assert bundled.wal_safe, f"pysqlite3 bundles SQLite {bundled.sqlite_version_text}"
    with pytest.raises(InvalidURL, match="HERMES_STORE_SQLITE_DRIVER='apsw'"):
        sqlite_driver.choose("apsw")


def test_auto_prefers_a_sqlite_with_the_fix() -> None:
    chosen = sqlite_driver.choose("auto")
    if STDLIB_VULNERABLE:
        assert chosen.name == "pysqlite3"
        assert "WAL-reset bug" in chosen.reason and "has the fix" in chosen.reason
    else:
        assert chosen.module is sqlite3
    assert chosen.wal_safe


@pytest.mark.parametrize("version", [(3, 40, 1), (3, 51, 2), (3, 50, 6), (3, 44, 5)])
def test_vulnerable_versions(version: tuple[int, int, int]) -> None:
    assert sqlite_driver.wal_reset_vulnerable(version)


@pytest.mark.parametrize("version", [(3, 51, 3), (3, 53, 4), (3, 50, 7), (3, 44, 6), (3, 6, 0)])
def test_fixed_versions(version: tuple[int, int, int]) -> None:
    assert not sqlite_driver.wal_reset_vulnerable(version)


def _check_json(path: Path, driver: str, **env: str) -> dict[str, Any]:
    done = _cli("check", "--json", "--url", str(path), driver=driver, **env)
    assert done.returncode == 0, done.stdout + done.stderr
    report: dict[str, Any] = json.loads(done.stdout)
    return report


@pytest.mark.parametrize("driver", ["sqlite3", "pysqlite3"])
def test_a_new_file_gets_wal_only_from_a_fixed_sqlite(tmp_path: Path, driver: str) -> None:
    path = tmp_path / "state.db"
    done = _cli("upgrade", "--url", str(path), driver=driver)
    assert done.returncode == 0, done.stderr
    fixed = sqlite_driver.choose(driver).wal_safe
    assert journal_mode(path) == ("wal" if fixed else "delete")

    storage = _check_json(path, driver)["storage"]
    assert storage["driver"] == driver
    assert storage["sqlite_version"] == sqlite_driver.choose(driver).sqlite_version_text
    assert storage["journal_mode"] == storage["journal_mode_on_write"] == journal_mode(path)
    if fixed:
        assert "has the WAL-reset fix" in storage["journal_reason"]
    else:
        assert "WAL-reset bug" in storage["journal_reason"]
        assert sqlite_driver.how_to_get_the_fix() in storage["journal_reason"]

    text = _cli("check", "--url", str(path), driver=driver).stdout
    assert f"sqlite:        {driver} {storage['sqlite_version']}" in text
    assert f"journal mode:  {storage['journal_mode']}" in text


def test_an_operator_can_keep_delete_mode_on_a_fixed_sqlite(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    env = {"HERMES_STORE_JOURNAL_MODE": "delete"}
    done = _cli("upgrade", "--url", str(path), driver="pysqlite3", **env)
    assert done.returncode == 0, done.stderr
    assert journal_mode(path) == "delete"
    storage = _check_json(path, "pysqlite3", **env)["storage"]
    assert storage["journal_mode_on_write"] == "delete"
    assert "HERMES_STORE_JOURNAL_MODE=delete" in storage["journal_reason"]


def test_a_wal_file_stays_wal_and_check_warns_on_a_vulnerable_sqlite(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    assert _cli("upgrade", "--url", str(path), driver="sqlite3").returncode == 0
    set_journal_mode(path, "wal")
    storage = _check_json(path, "sqlite3")["storage"]
    assert storage["journal_mode_on_write"] == "wal"
    if STDLIB_VULNERABLE:
        assert "WAL-reset bug" in storage["journal_reason"]


def test_an_unknown_journal_setting_is_refused(tmp_path: Path) -> None:
    done = _cli("upgrade", "--url", str(tmp_path / "s.db"), HERMES_STORE_JOURNAL_MODE="memory")
    assert done.returncode == 2
    assert "HERMES_STORE_JOURNAL_MODE='memory'" in done.stderr
    assert "Traceback" not in done.stderr


#: A store's whole life on pysqlite3: upgrade a legacy file, write beside a long read,
#: search both indexes, the facade's raw connection, a constraint error that is not damage.
PYSQLITE3_LIFE = r"""
import json, sys, threading, time
from hermes_store import migrate, sqlite_driver
from hermes_store.compat import SessionDB
from hermes_store.errors import DatabaseCorrupt
from hermes_store.repositories.messages import MessageRepository
from hermes_store.repositories.search import SearchRepository
from hermes_store.repositories.sessions import SessionRepository
from hermes_store.repositories.titles import TitleRepository
from hermes_store.store import Store

url = sys.argv[1]
report = migrate.upgrade(url)
out = {"driver": sqlite_driver.current().name}
with Store(url) as store:
    sessions, messages = SessionRepository(store), MessageRepository(store)
    sessions.create_session("p", "cli")
    held = threading.Event()
    def reader():
        with store.read() as conn:
            conn.exec_driver_sql("SELECT count(*) FROM messages").all()
            held.set()
            time.sleep(1.0)
    t = threading.Thread(target=reader)
    t.start()
    held.wait()
    for i in range(20):
        messages.append_message("p", "user", f"pysqlite3 turn {i} src/main.py")
    t.join()
    out["appended"] = messages.message_count("p")
    search = SearchRepository(store)
    out["word_hits"] = len(search.search_messages("pysqlite3", limit=100))
    out["literal_hits"] = len(search.search_messages("src/main.py", limit=100))
    titles = TitleRepository(store)
    sessions.create_session("q", "cli")
    titles.set_session_title("p", "taken")
    try:
        titles.set_session_title("q", "taken")
        out["duplicate_title"] = "accepted"
    except DatabaseCorrupt as exc:
        out["duplicate_title"] = f"DatabaseCorrupt: {exc}"
    except Exception as exc:
        out["duplicate_title"] = type(exc).__name__
db = SessionDB(url=url)
row = db._conn.execute("SELECT id FROM sessions WHERE id = 'p'").fetchone()
out["raw_row"] = row["id"]
db.close()
check = migrate.check(url)
out["check_ok"] = check.ok
out["journal"] = check.storage.journal_mode
print(json.dumps(out))
"""


def test_a_store_lives_on_pysqlite3(legacy_db: Any) -> None:
    path = legacy_db(9)
    done = _run(PYSQLITE3_LIFE, f"sqlite:///{path}", driver="pysqlite3")
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert out["driver"] == "pysqlite3"
    assert out["appended"] == 20
    assert out["word_hits"] == 20
    assert out["literal_hits"] == 20
    assert out["duplicate_title"] == "TitleInUse"
    assert out["raw_row"] == "p"
    assert out["check_ok"] is True
    # a legacy file is WAL already and stays so
    assert out["journal"] == "wal"


#: The listing's plan on a file of 5,000 sessions, printed as one line per step.
LISTING_PLAN = r"""
import sys
from sqlalchemy import event
from hermes_store.repositories.sessions import SessionRepository
from hermes_store.store import Store

store = Store(sys.argv[1])
statements = []
event.listen(store.engine, "before_cursor_execute",
             lambda c, cur, sql, params, *a: statements.append((sql, params)))
SessionRepository(store).list_sessions_rich(limit=20)
sql, params = next(s for s in statements if "FROM sessions AS s" in s[0])
with store.read() as conn:
    plan = conn.connection.driver_connection.execute("EXPLAIN QUERY PLAN " + sql, params)
    for row in plan:
        print(row[3])
"""


@pytest.mark.parametrize("driver", ["sqlite3", "pysqlite3"])
def test_listing_walks_the_start_time_index_on_every_sqlite(fresh_db: str, driver: str) -> None:
    """Newer SQLite planners read `archived = 0` as a selective filter and would scan and
    sort every session for one page; the listing tells them it is usually true."""
    path = fresh_db.removeprefix("sqlite:///")
    con = sqlite3.connect(path)
    with con:
        con.executemany(
            "INSERT INTO sessions (id, source, started_at) VALUES (?, 'cli', ?)",
            ((f"s{i}", 1.7e9 + i) for i in range(5000)),
        )
    con.close()
    done = _run(LISTING_PLAN, fresh_db, driver=driver)
    assert done.returncode == 0, done.stderr
    steps = done.stdout.splitlines()
    assert steps[0] == "SCAN s USING INDEX idx_sessions_started", steps


# --------------------------------------------------------------------------- the dependency

PYPROJECT = Path(__file__).resolve().parents[2] / "pyproject.toml"

#: (implementation, version, sys.platform, platform.machine()) and whether pysqlite3 0.6.1
#: has a wheel there (its files on the index: cp39-cp314, manylinux_2_28 and musllinux
#: x86_64, macosx_11_0_arm64, win32, win_amd64)
PLATFORMS = [
    (("CPython", (3, 11), "linux", "x86_64"), True),
    (("CPython", (3, 14), "linux", "x86_64"), True),
    (("CPython", (3, 15), "linux", "x86_64"), False),
    (("CPython", (3, 12), "linux", "aarch64"), False),
    (("CPython", (3, 12), "darwin", "arm64"), True),
    (("CPython", (3, 12), "darwin", "x86_64"), False),
    (("CPython", (3, 12), "win32", "AMD64"), True),
    (("CPython", (3, 12), "win32", "x86"), True),
    (("CPython", (3, 12), "win32", "ARM64"), False),
    (("PyPy", (3, 11), "linux", "x86_64"), False),
    (("CPython", (3, 12), "freebsd14", "amd64"), False),
]


def _pysqlite3_requirement() -> Any:
    import tomllib

    from packaging.requirements import Requirement

    project = tomllib.loads(PYPROJECT.read_text(encoding="utf-8"))["project"]
    (requirement,) = [
        r for r in map(Requirement, project["dependencies"]) if r.name == "pysqlite3"
    ]
    assert project["optional-dependencies"]["sqlite"] == ["pysqlite3>=0.6.1"]
    return requirement


@pytest.mark.parametrize(("where", "wheel"), PLATFORMS, ids=lambda p: str(p))
def test_the_dependency_marker_is_where_pysqlite3_has_wheels(
    where: tuple[str, tuple[int, int], str, str], wheel: bool
) -> None:
    implementation, version, system, machine = where
    requirement = _pysqlite3_requirement()
    environment = {
        "platform_python_implementation": implementation,
        "python_version": f"{version[0]}.{version[1]}",
        "python_full_version": f"{version[0]}.{version[1]}.0",
        "sys_platform": system,
        "platform_machine": machine,
    }
    assert requirement.marker.evaluate(environment) is wheel
    assert sqlite_driver.has_pysqlite3_wheel(implementation, version, system, machine) is wheel


def test_a_process_without_pysqlite3_says_what_to_install(tmp_path: Path) -> None:
    """A process that cannot import pysqlite3 (`sys.modules` entry None: Python's own way
    to make an import fail) runs on the standard library's SQLite, creates a new file in
    DELETE mode where that SQLite has the bug, and `check` says what to install. The
    wheel test does the same in a venv where pysqlite3 was uninstalled."""
    path = tmp_path / "state.db"
    code = (
        "import sys; sys.modules['pysqlite3'] = None; sys.modules['pysqlite3.dbapi2'] = None; "
        "from hermes_store.cli import main; raise SystemExit(main())"
    )
    assert _run(code, "upgrade", "--url", str(path)).returncode == 0
    done = _run(code, "check", "--json", "--url", str(path))
    assert done.returncode == 0, done.stdout + done.stderr
    storage = json.loads(done.stdout)["storage"]
    assert storage["driver"] == "sqlite3"
    if not STDLIB_VULNERABLE:
        assert journal_mode(path) == "wal"
        return
    assert journal_mode(path) == "delete"
    # this machine (CPython on Linux x86_64) is one pysqlite3 has a wheel for
    hint = "pip install pysqlite3 (a dependency of hermes-store here, with a fixed SQLite)"
    assert storage["driver_reason"] == (
        f"the standard library's SQLite {sqlite3.sqlite_version} has the WAL-reset bug; {hint}"
    )
    assert storage["journal_reason"].endswith(f"(a fixed SQLite, and with it WAL: {hint})")
