"""Fixtures for the hermes-store test suite (the helpers they use are in tests/helpers/).

Every test works on real SQLite files under its own `tmp_path` and, for PostgreSQL, a
database of its own; nothing is shared between tests (safe under pytest-xdist).
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

# The suite drives SQLite through the standard library's sqlite3, as most of the field
# does; `HERMES_STORE_SQLITE_DRIVER=pysqlite3` runs it on the `sqlite` extra's driver
# instead (tests/store/test_sqlite_driver.py covers the automatic choice). Set before any
# hermes_store import, since the choice is made once per process.
os.environ.setdefault("HERMES_STORE_SQLITE_DRIVER", "sqlite3")

from helpers.databases import (  # noqa: E402
    DB,
    JOURNAL_MODES,
    _require_fixtures,
    available_versions,
    fixture_file,
    fixtures_dir,
    set_journal_mode,
    url_for,
)
from helpers.drivers import DRIVERS, process_driver, split_by_driver
from helpers.postgres import _admin_execute, _pg_state, databases, pg_database
from helpers.raw_sql import RawConnection

_FIXTURES_AT_START = pytest.StashKey[dict[str, tuple[int, int]]]()


#: `-n auto` workers per CPU. A test spends much of its time waiting (on child processes,
#: on the PostgreSQL server, on file locks and fsync, on the deadlines it tests), so one
#: worker per CPU leaves the CPUs idle for much of the run.
WORKERS_PER_CPU = 2


# optional: the child pytests of helpers/drivers.py run without pytest-xdist
@pytest.hookimpl(optionalhook=True)
def pytest_xdist_auto_num_workers(config: pytest.Config) -> int | None:
    """The worker count of `-n auto`: WORKERS_PER_CPU per usable CPU; None (pytest-xdist's
    own rule) when $PYTEST_XDIST_AUTO_NUM_WORKERS names a count."""
    if os.environ.get("PYTEST_XDIST_AUTO_NUM_WORKERS"):
        return None
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return WORKERS_PER_CPU * (cpus or 1)


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """A test taking `fixture_version` runs once per fixture database present."""
    if "fixture_version" in metafunc.fixturenames:
        metafunc.parametrize("fixture_version", available_versions(), ids=lambda v: f"v{v:02d}")


# --------------------------------------------------------------------------- fixtures


@pytest.fixture(autouse=True)
def hermes_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Point HERMES_HOME at an empty per-test directory; never use HERMES_STORE_URL."""
    home = tmp_path / "hermes_home"
    home.mkdir()
    monkeypatch.setenv("HERMES_HOME", str(home))
    monkeypatch.delenv("HERMES_STORE_URL", raising=False)
    # an encryption key in the developer's environment would switch the driver
    monkeypatch.delenv("HERMES_STORE_KEY", raising=False)
    monkeypatch.delenv("HERMES_STORE_KEY_FILE", raising=False)
    return home


@pytest.fixture
def db() -> type[DB]:
    return DB


@pytest.fixture
def fixtures_path() -> Path:
    return _require_fixtures()


@pytest.fixture
def legacy_db(tmp_path: Path) -> Callable[..., Path]:
    """`legacy_db(version, name=None)`: a private, writable copy of state_vNN.db."""
    counter = iter(range(1_000_000))

    def make(version: int, name: str | None = None) -> Path:
        _require_fixtures()
        source = fixture_file(version)
        if not source.is_file():
            pytest.skip(f"fixture database {source} is missing")
        target = tmp_path / (name or f"state_v{version:02d}_{next(counter)}.db")
        # copyfile, not copy: the fixtures are 0444 and the copy must be writable.
        shutil.copyfile(source, target)
        os.chmod(target, 0o644)
        for suffix in ("-wal", "-shm"):
            sidecar = Path(str(source) + suffix)
            if sidecar.exists():  # the README says there are none; be safe anyway
                shutil.copyfile(sidecar, Path(str(target) + suffix))
        return target

    return make


@pytest.fixture
def legacy_json() -> Callable[[int], dict[str, Any]]:
    def load(version: int) -> dict[str, Any]:
        _require_fixtures()
        path = fixture_file(version, "json")
        if not path.is_file():
            pytest.skip(f"fixture description {path} is missing")
        return json.loads(path.read_text(encoding="utf-8"))

    return load


#: per journal-mode setting: a file `migrate.upgrade` created from nothing in this process
_FRESH_TEMPLATES: dict[str, Path] = {}


def _fresh_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A `state.db` that `migrate.upgrade` created from nothing, once per process and per
    value of $HERMES_STORE_JOURNAL_MODE (the only setting that shapes a new file; the
    driver is fixed per process). Revision 0018 reads the file's own directory, which is
    empty here as in `fresh_db`."""
    from hermes_store import migrate
    from hermes_store.config import JOURNAL_ENV

    key = os.environ.get(JOURNAL_ENV, "")
    if key not in _FRESH_TEMPLATES:
        path = tmp_path_factory.mktemp("fresh-template") / "state.db"
        migrate.upgrade(url_for(path), fts_min_pause=0)
        _FRESH_TEMPLATES[key] = path
    return _FRESH_TEMPLATES[key]


@pytest.fixture
def fresh_db(tmp_path: Path, tmp_path_factory: pytest.TempPathFactory) -> str:
    """The URL of a database created from nothing by `migrate.upgrade`: a copy of the
    file this process's upgrade created (replaying every revision for each test was the
    suite's largest setup cost); tests of the upgrade itself call it on their own files."""
    template = _fresh_template(tmp_path_factory)
    target = tmp_path / "fresh" / "state.db"
    target.parent.mkdir()
    for suffix in ("", "-wal", "-shm"):
        source = Path(f"{template}{suffix}")
        if source.exists():
            shutil.copy2(source, f"{target}{suffix}")  # copy2 keeps the file's private mode
    return url_for(target)


@pytest.fixture(params=DRIVERS)
def sqlite_driver(request: pytest.FixtureRequest) -> str:
    """Each SQLite driver in turn (the test runs once per driver): the variant of this
    process's driver runs here, the other in a child pytest (tests/helpers/drivers.py).
    A module asks for it with `pytestmark = pytest.mark.usefixtures("sqlite_driver")`."""
    from hermes_store.sqlite import driver as chosen

    assert chosen.current().name == request.param == process_driver()
    return str(request.param)


@pytest.fixture(params=JOURNAL_MODES)
def journal(request: pytest.FixtureRequest) -> str:
    """Each SQLite journal mode in turn (the test runs once per mode)."""
    return str(request.param)


@pytest.fixture
def journal_db(fresh_db: str, journal: str) -> str:
    """The URL of a fresh database at head, in the `journal` mode of this run."""
    set_journal_mode(fresh_db.removeprefix("sqlite:///"), journal)
    return fresh_db


@pytest.fixture
def pg_url() -> Iterator[str]:
    """The URL of a new, empty PostgreSQL database of its own (dropped afterwards)."""
    with pg_database() as url:
        yield url


@pytest.fixture
def pg_fresh_db() -> Iterator[str]:
    """A PostgreSQL database at head, of its own."""
    with pg_database(at_head=True) as url:
        yield url


@pytest.fixture(params=["sqlite", "postgresql"])
def backend_url(request: pytest.FixtureRequest) -> Iterator[str]:
    """A database at head on each backend in turn (the test runs once per backend). On
    SQLite it is the `fresh_db` file, so a test may also look at that file directly."""
    if request.param == "sqlite":
        yield request.getfixturevalue("fresh_db")
        return
    with pg_database(at_head=True) as url:
        yield url


@pytest.fixture
def raw_con(backend_url: str) -> Iterator[RawConnection]:
    """A RawConnection to the same database as the `store` fixture."""
    con = RawConnection(backend_url)
    yield con
    con.close()


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """`@pytest.mark.sqlite_only` tests (about SQLite files, FTS5, PRAGMAs) run on SQLite
    only: their PostgreSQL variants are deselected, not skipped. A `sqlite_driver`
    variant of another driver than this process's runs in a child pytest
    (helpers/drivers.py); on PostgreSQL it is deselected."""
    items[:], drop = split_by_driver(items)
    keep = []
    for item in items:
        callspec = getattr(item, "callspec", None)
        on_pg = callspec is not None and callspec.params.get("backend_url") == "postgresql"
        (drop if on_pg and item.get_closest_marker("sqlite_only") else keep).append(item)
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep


@pytest.fixture
def store(backend_url: str) -> Iterator[Any]:
    """A Store on a fresh database at head (SQLite, then PostgreSQL), closed afterwards."""
    from hermes_store.store import Store

    s = Store(backend_url)
    yield s
    s.close()


@pytest.fixture
def sqlite_store(fresh_db: str) -> Iterator[Any]:
    """A Store on a fresh SQLite file, for tests about SQLite itself (files, FTS5, WAL)."""
    from hermes_store.store import Store

    s = Store(fresh_db)
    yield s
    s.close()


def _fixture_listing() -> dict[str, tuple[int, int]]:
    directory = fixtures_dir()
    if not directory.is_dir():
        return {}
    return {p.name: (p.stat().st_size, p.stat().st_mtime_ns) for p in directory.iterdir()}


def pytest_sessionstart(session: pytest.Session) -> None:
    session.config.stash[_FIXTURES_AT_START] = _fixture_listing()


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    # The legacy fixtures are shared by every run (and every xdist worker): a test that opens
    # one in place, even read-only, can leave -wal/-shm files beside it or change it. The
    # controller process (not an xdist worker) fails the run when that happened.
    if not hasattr(session.config, "workerinput"):
        before = session.config.stash.get(_FIXTURES_AT_START, {})
        after = _fixture_listing()
        if after != before:
            changed = sorted(set(before.items()) ^ set(after.items()))
            print(
                f"\nthe legacy fixtures changed during the run (open them from a copy): {changed}"
            )
            session.exitstatus = pytest.ExitCode.TESTS_FAILED
    errors = databases.drain()
    if errors:
        print(f"\nPostgreSQL test databases that could not be dropped: {errors}")
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
    template = _pg_state.get("template")
    if template:
        _admin_execute(f'DROP DATABASE IF EXISTS "{template}" WITH (FORCE)')
