"""`hermes-store copy`: whole-database copies between SQLite files and PostgreSQL, on real
files and a real server, verified by per-table digests."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
import tracemalloc
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from helpers.databases import sha256_file, url_for
from helpers.postgres import pg_database
from sqlalchemy import create_engine
from sqlalchemy.pool import NullPool

from hermes_store import migrate
from hermes_store.compat import SessionDB
from hermes_store.errors import CopyError
from hermes_store.migration import copy as hcopy
from hermes_store.repositories.maintenance import MaintenanceRepository
from hermes_store.repositories.messages import MessageRepository
from hermes_store.repositories.meta import MetaRepository
from hermes_store.repositories.sessions import SessionRepository
from hermes_store.repositories.telegram import TelegramTopicRepository
from hermes_store.search.maintenance import integrity_errors
from hermes_store.store import Store

CLI = str(Path(sys.executable).with_name("hermes-store"))
QUERIES = ("refactor", "迁移", "Kyoto")  # as tests/migrations/test_adoption.py


# --------------------------------------------------------------------------- helpers


def run(*args: str, home: Path, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "HERMES_HOME": str(home)}
    env.pop("HERMES_STORE_URL", None)
    return subprocess.run([CLI, *args], capture_output=True, text=True, env=env, timeout=timeout)


def upgraded(legacy_db: Callable[..., Path], version: int) -> Path:
    path = legacy_db(version)
    migrate.upgrade(url_for(path), fts_min_pause=0)
    return path


def generate(
    url: str, sessions: int, per_session: int, *, content_size: int = 80, prefix: str = "s"
) -> None:
    """A database at head filled through the repositories (one append call per session)."""
    migrate.upgrade(url, fts_min_pause=0)
    store = Store(url)
    try:
        ses, msgs = SessionRepository(store), MessageRepository(store)
        filler = "lorem ipsum dolor " * (content_size // 18 + 1)
        for i in range(sessions):
            sid = f"{prefix}{i:05d}"
            ses.create_session(sid, "cli", model="hermes-4")
            batch = [
                {
                    "role": "user" if j % 2 == 0 else "assistant",
                    "content": f"message {i}/{j} word{j % 97} {filler[:content_size]}",
                    "token_count": j,
                }
                for j in range(per_session)
            ]
            msgs.append_messages(sid, batch)
    finally:
        store.close()


def digest_map(tables: list[hcopy.TableDigest]) -> dict[str, tuple[int, str]]:
    return {t.table: (t.rows_source, t.digest_source) for t in tables}


def assert_all_ok(tables: list[hcopy.TableDigest]) -> None:
    bad = [t for t in tables if not t.ok]
    assert not bad, bad


def search_sessions(path: Path | str, query: str) -> list[str]:
    db = SessionDB(path, read_only=True)
    try:
        return sorted({hit["session_id"] for hit in db.search_messages(query, limit=50)})
    finally:
        db.close()


def sqlite_count(path: Path, table: str) -> int:
    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=5)
    try:
        return int(con.execute(f"SELECT COUNT(*) FROM {table}").fetchone()[0])
    finally:
        con.close()


def fts_integrity(url: str) -> list[str]:
    engine = create_engine(url, poolclass=NullPool)
    try:
        with engine.connect() as conn:
            errors = integrity_errors(conn)
            conn.rollback()
        return errors
    finally:
        engine.dispose()


_pg_upgrade: dict[str, str | None] = {}


def pg_upgrade_unavailable() -> str | None:
    """None when `migrate.upgrade` can bring a PostgreSQL database to head."""
    if "reason" not in _pg_upgrade:
        with pg_database() as url:
            try:
                migrate.upgrade(url)
                _pg_upgrade["reason"] = None
            except Exception as exc:  # noqa: BLE001 (any failure is the reason)
                _pg_upgrade["reason"] = f"{type(exc).__name__}: {exc}"[:300]
    return _pg_upgrade["reason"]


@pytest.fixture
def pg_target() -> Iterator[str]:
    """An empty PostgreSQL database (the copy upgrades it itself)."""
    with pg_database() as url:
        yield url


# --------------------------------------------------------------------------- SQLite -> SQLite


def test_sqlite_to_sqlite_every_fixture(fixture_version, legacy_db, tmp_path: Path) -> None:
    source = upgraded(legacy_db, fixture_version)
    before = sha256_file(source)
    expected = {q: search_sessions(source, q) for q in QUERIES}
    target = tmp_path / "copy" / "state.db"

    report = hcopy.copy_database(url_for(source), url_for(target), batch_size=7)

    assert report.ok, report.tables
    assert {t.table for t in report.tables} >= {
        "sessions",
        "messages",
        "session_model_usage",
        "state_meta",
        "schema_version",
        "gateway_routing",
        "compression_locks",
        "async_delegations",
    }
    assert report.copied["messages"] == 64 and report.copied["sessions"] == 5
    assert sha256_file(source) == before, "the copy must not change its source"
    assert digest_map(hcopy.verify(url_for(source), url_for(target))) == digest_map(report.tables)
    for query, sessions in expected.items():
        assert sessions, query
        assert search_sessions(target, query) == sessions, query
    check = migrate.check(url_for(target))
    assert check.ok, (check.fts_errors, check.schema_drift, check.quick_check)
    assert fts_integrity(url_for(target)) == []


def test_legacy_source_is_refused_and_untouched(legacy_db, tmp_path: Path, hermes_home) -> None:
    source = legacy_db(15)
    before = sha256_file(source)
    target = tmp_path / "t.db"
    with pytest.raises(CopyError, match="hermes-store upgrade --url"):
        hcopy.copy_database(url_for(source), url_for(target))
    assert sha256_file(source) == before
    assert not target.exists()

    cli = run("copy", "--from", str(source), "--to", str(target), home=hermes_home)
    assert cli.returncode == 2
    lines = cli.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("hermes-store: error: ")
    assert "hermes-store upgrade --url" in lines[0]
    assert sha256_file(source) == before


def test_same_database_is_refused(fresh_db: str) -> None:
    with pytest.raises(CopyError, match="same database"):
        hcopy.copy_database(fresh_db, fresh_db)


def test_non_empty_target_is_refused(legacy_db, tmp_path: Path, hermes_home) -> None:
    source = upgraded(legacy_db, 23)
    target = tmp_path / "busy.db"
    generate(url_for(target), 1, 3, prefix="other")
    before = sha256_file(target)

    with pytest.raises(CopyError, match="already holds data") as err:
        hcopy.copy_database(url_for(source), url_for(target))
    assert "--resume" in str(err.value)
    assert sha256_file(target) == before

    cli = run("copy", "--from", str(source), "--to", str(target), home=hermes_home)
    assert cli.returncode == 2, cli.stdout
    assert cli.stderr.count("\n") == 1 and "already holds data" in cli.stderr
    assert sha256_file(target) == before


def test_a_copy_target_is_not_empty_afterwards(legacy_db, tmp_path: Path) -> None:
    source = upgraded(legacy_db, 23)
    target = url_for(tmp_path / "t.db")
    assert hcopy.copy_database(url_for(source), target).ok
    with pytest.raises(CopyError, match="already holds data"):
        hcopy.copy_database(url_for(source), target)
    again = hcopy.copy_database(url_for(source), target, resume=True)
    assert again.ok and again.copied["messages"] == 0


class Interrupt(Exception):
    pass


def test_resume_after_an_interruption(tmp_path: Path) -> None:
    source = url_for(tmp_path / "src.db")
    generate(source, 12, 150)  # 1,800 messages
    target = url_for(tmp_path / "dst.db")
    seen: list[hcopy.CopyProgress] = []

    def stop_midway(p: hcopy.CopyProgress) -> None:
        seen.append(p)
        if p.table == "messages" and p.rows_done >= 700:
            raise Interrupt

    with pytest.raises(Interrupt):
        hcopy.copy_database(source, target, batch_size=100, on_progress=stop_midway)
    partial = sqlite_count(tmp_path / "dst.db", "messages")
    assert partial == 700, "each committed batch stays, nothing more"

    with pytest.raises(CopyError, match="already holds data"):
        hcopy.copy_database(source, target, batch_size=100)
    resumed: list[hcopy.CopyProgress] = []
    report = hcopy.copy_database(
        source, target, resume=True, batch_size=100, on_progress=resumed.append
    )
    assert report.ok, report.tables
    assert report.copied["messages"] == 1800 - partial
    assert report.copied["sessions"] == 0
    first = next(p for p in resumed if p.table == "messages")
    assert first.rows_done == partial + 100 and first.rows_total == 1800
    assert fts_integrity(target) == []
    assert search_sessions(tmp_path / "dst.db", "word13") == search_sessions(
        tmp_path / "src.db", "word13"
    )


def _default_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def interrupt_midway(src: Path, dst: Path, home: Path, sig: int) -> subprocess.Popen[bytes]:
    """Start the command with a tiny batch size and send `sig` once 2,000 messages are in."""
    env = {**os.environ, "HERMES_HOME": str(home)}
    proc = subprocess.Popen(
        [CLI, "copy", "--from", str(src), "--to", str(dst), "--batch-size", "50"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
        # an ignored SIGINT is inherited through exec and Python then leaves it ignored;
        # an xdist worker of the full suite was seen to pass it on (the copy ran to the
        # end, exit 0, nothing on stderr), so the child gets the default disposition
        preexec_fn=_default_sigint,
    )
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and proc.poll() is None:
            try:
                if dst.exists() and sqlite_count(dst, "messages") >= 2000:
                    break
            except sqlite3.OperationalError:
                pass  # not created yet, or busy
            time.sleep(0.05)
        assert proc.poll() is None, "the copy finished before it could be interrupted"
        proc.send_signal(sig)
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    return proc


def test_resume_after_sigkill_of_the_command(tmp_path: Path, hermes_home) -> None:
    src_path, dst_path = tmp_path / "src.db", tmp_path / "dst.db"
    generate(url_for(src_path), 40, 500)  # 20,000 messages
    proc = interrupt_midway(src_path, dst_path, hermes_home, signal.SIGKILL)
    proc.communicate()
    assert proc.returncode == -signal.SIGKILL
    partial = sqlite_count(dst_path, "messages")
    assert 0 < partial < 20_000

    again = run("copy", "--from", str(src_path), "--to", str(dst_path), home=hermes_home)
    assert again.returncode == 2 and "--resume" in again.stderr

    resumed = run(
        "copy",
        "--from",
        str(src_path),
        "--to",
        str(dst_path),
        "--resume",
        "--json",
        home=hermes_home,
    )
    assert resumed.returncode == 0, resumed.stderr
    data = json.loads(resumed.stdout)
    assert data["ok"] is True and data["resumed"] is True
    assert data["copied"]["messages"] == 20_000 - partial
    assert all(t["ok"] for t in data["tables"])
    assert sqlite_count(dst_path, "messages") == 20_000
    assert fts_integrity(url_for(dst_path)) == []


def test_ctrl_c_says_how_to_resume(tmp_path: Path, hermes_home) -> None:
    src_path, dst_path = tmp_path / "src.db", tmp_path / "dst.db"
    generate(url_for(src_path), 40, 500)
    proc = interrupt_midway(src_path, dst_path, hermes_home, signal.SIGINT)
    _, err = proc.communicate()
    assert proc.returncode == 130, err.decode()
    assert "--resume" in err.decode()
    resumed = run(
        "copy", "--from", str(src_path), "--to", str(dst_path), "--resume", home=hermes_home
    )
    assert resumed.returncode == 0, resumed.stderr
    assert sqlite_count(dst_path, "messages") == 20_000


def test_source_with_a_pending_fts_backfill(legacy_db, tmp_path: Path) -> None:
    """The source's FTS markers describe its own index: the target indexes every row."""
    source = legacy_db(15)
    migrate.upgrade(url_for(source), defer_fts_backfill=True, fts_min_pause=0)
    state = migrate.current(url_for(source)).fts
    assert state is not None and state.backfill_pending
    target = tmp_path / "t.db"
    report = hcopy.copy_database(url_for(source), url_for(target))
    assert report.ok, report.tables
    status = migrate.current(url_for(target))
    assert status.fts is not None and not status.fts.backfill_pending
    assert migrate.check(url_for(target)).ok
    assert search_sessions(target, "Kyoto") == search_sessions(source, "Kyoto") != []


def test_unknown_tables_and_columns_are_listed_as_not_copied(
    legacy_db, tmp_path: Path, hermes_home
) -> None:
    source = upgraded(legacy_db, 23)
    con = sqlite3.connect(source)
    try:
        con.execute("CREATE TABLE system_prompts (id INTEGER PRIMARY KEY, body TEXT)")
        con.execute("ALTER TABLE sessions ADD COLUMN later_build_flag INTEGER")
        con.commit()
    finally:
        con.close()
    target = tmp_path / "t.db"
    cli = run("copy", "--from", str(source), "--to", str(target), "--json", home=hermes_home)
    assert cli.returncode == 0, cli.stderr
    data = json.loads(cli.stdout)
    assert data["not_copied"] == ["system_prompts", "sessions.later_build_flag"]
    assert data["ok"] is True


@pytest.mark.slow
def test_50k_messages_in_batches_of_500_with_bounded_memory(tmp_path: Path) -> None:
    """About 25 MB of message text; the copy holds one batch (a quarter MB) at a time."""
    source = url_for(tmp_path / "src.db")
    generate(source, 50, 1000, content_size=500)
    target = url_for(tmp_path / "dst.db")
    batches: list[int] = []

    def on_progress(p: hcopy.CopyProgress) -> None:
        if p.table == "messages":
            batches.append(p.rows_done)

    tracemalloc.start()
    try:
        report = hcopy.copy_database(source, target, batch_size=500, on_progress=on_progress)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert report.ok, report.tables
    assert report.copied["messages"] == 50_000
    assert len(batches) == 100 and batches[-1] == 50_000
    assert all(b - a == 500 for a, b in zip([0, *batches], batches, strict=False))
    assert peak < 16 * 2**20, f"peak traced memory {peak / 2**20:.1f} MiB"


def test_verify_reports_a_difference_and_the_command_exits_1(
    legacy_db, tmp_path: Path, hermes_home
) -> None:
    source = upgraded(legacy_db, 23)
    target = tmp_path / "t.db"
    assert hcopy.copy_database(url_for(source), url_for(target)).ok
    store = Store(url_for(target))
    try:
        MetaRepository(store).set_meta("only_in_target", "1")
    finally:
        store.close()
    tables = {t.table: t for t in hcopy.verify(url_for(source), url_for(target))}
    assert not tables["state_meta"].ok and tables["state_meta"].rows_target == 1
    assert tables["sessions"].ok

    cli = run("copy", "--from", str(source), "--to", str(target), "--resume", home=hermes_home)
    assert cli.returncode == 1, cli.stderr
    lines = {line.split()[0]: line for line in cli.stdout.splitlines() if line.strip()}
    assert lines["state_meta"].rstrip().endswith("DIFF")
    assert "!=" in lines["state_meta"]
    assert lines["sessions"].rstrip().endswith("ok")


def test_cli_copy_prints_the_verification_table(legacy_db, tmp_path: Path, hermes_home) -> None:
    source = upgraded(legacy_db, 23)
    target = tmp_path / "t.db"
    cli = run("copy", "--from", str(source), "--to", url_for(target), home=hermes_home)
    assert cli.returncode == 0, cli.stderr
    lines = cli.stdout.splitlines()
    assert lines[0].startswith("copied 75 rows")
    assert lines[1].split() == ["TABLE", "ROWS", "SOURCE", "ROWS", "TARGET", "DIGEST", "OK"]
    rows = {line.split()[0]: line.split() for line in lines[2:]}
    assert rows["messages"][1:3] == ["64", "64"] and rows["messages"][-1] == "ok"
    assert rows["sessions"][1:3] == ["5", "5"]
    assert len(rows["messages"][3]) == 12


def test_sqlite_sequence_is_not_reused(tmp_path: Path) -> None:
    source = url_for(tmp_path / "src.db")
    generate(source, 2, 10)  # ids 1..20
    store = Store(source)
    try:
        assert MaintenanceRepository(store).delete_session("s00001")  # ids 11..20 gone
    finally:
        store.close()
    assert sqlite_count(tmp_path / "src.db", "messages") == 10
    target = url_for(tmp_path / "dst.db")
    report = hcopy.copy_database(source, target)
    assert report.ok and report.sequences["messages"] == 20
    store = Store(target)
    try:
        new_id = MessageRepository(store).append_message("s00000", "user", "after the copy")
    finally:
        store.close()
    assert new_id == 21


def test_telegram_tables_are_copied_when_present(fresh_db: str, tmp_path: Path) -> None:
    store = Store(fresh_db)
    try:
        SessionRepository(store).create_session("tg1", "telegram")
        repo = TelegramTopicRepository(store)
        repo.enable_telegram_topic_mode(chat_id=42, user_id=7, has_topics_enabled=True)
        repo.bind_telegram_topic(
            chat_id=42, thread_id=3, user_id=7, session_key="agent:main:tg", session_id="tg1"
        )
    finally:
        store.close()
    target = tmp_path / "t.db"
    report = hcopy.copy_database(fresh_db, url_for(target))
    assert report.ok
    names = {t.table: t for t in report.tables}
    assert names["telegram_dm_topic_mode"].rows_target == 1
    assert names["telegram_dm_topic_bindings"].rows_target == 1
    store = Store(url_for(target))
    try:
        binding = TelegramTopicRepository(store).get_telegram_topic_binding(42, 3)
    finally:
        store.close()
    assert binding is not None and binding["session_id"] == "tg1"


def test_no_telegram_tables_when_the_source_has_none(fresh_db: str, tmp_path: Path) -> None:
    report = hcopy.copy_database(fresh_db, url_for(tmp_path / "t.db"))
    assert not any(t.table.startswith("telegram") for t in report.tables)
    con = sqlite3.connect(tmp_path / "t.db")
    try:
        names = {r[0] for r in con.execute("SELECT name FROM sqlite_master")}
    finally:
        con.close()
    assert not any(n.startswith("telegram") for n in names)


def test_digest_encoding_tells_types_apart() -> None:
    encode = hcopy._encode_row
    assert encode([1]) != encode(["1"]) != encode([1.0])
    assert encode([None]) != encode([""]) != encode([0])
    assert encode(["ab", "c"]) != encode(["a", "bc"])
    assert encode([b"x"]) != encode(["x"])


# --------------------------------------------------------------------------- PostgreSQL


def _require_pg_upgrade() -> None:
    reason = pg_upgrade_unavailable()
    if reason is not None:
        pytest.fail(f"migrate.upgrade does not work on PostgreSQL yet: {reason}")


def test_round_trip_sqlite_postgresql_sqlite(
    fixture_version, legacy_db, tmp_path: Path, pg_target: str
) -> None:
    _require_pg_upgrade()
    source = upgraded(legacy_db, fixture_version)
    original = digest_map(hcopy.verify(url_for(source), url_for(source)))

    to_pg = hcopy.copy_database(url_for(source), pg_target, batch_size=7)
    assert to_pg.ok, to_pg.tables
    assert digest_map(to_pg.tables) == original

    back = tmp_path / "back.db"
    to_sqlite = hcopy.copy_database(pg_target, url_for(back), batch_size=5)
    assert to_sqlite.ok, to_sqlite.tables
    assert digest_map(to_sqlite.tables) == original
    assert digest_map(hcopy.verify(url_for(source), url_for(back))) == original
    for query in QUERIES:
        assert search_sessions(back, query) == search_sessions(source, query), query
    assert fts_integrity(url_for(back)) == []


def test_postgresql_identity_is_not_reused(tmp_path: Path, pg_target: str) -> None:
    _require_pg_upgrade()
    source = url_for(tmp_path / "src.db")
    generate(source, 2, 10)
    store = Store(source)
    try:
        assert MaintenanceRepository(store).delete_session("s00001")
    finally:
        store.close()
    report = hcopy.copy_database(source, pg_target)
    assert report.ok and report.sequences["messages"] == 20
    store = Store(pg_target)
    try:
        new_id = MessageRepository(store).append_message("s00000", "user", "after the copy")
    finally:
        store.close()
    assert new_id == 21


def test_nul_characters_round_trip_through_postgresql(
    tmp_path: Path, pg_target: str
) -> None:
    """The original stores structured content behind a "\\x00json:" prefix, and users' text
    may hold NUL and U+FFFF: all of it reaches PostgreSQL and comes back exactly."""
    _require_pg_upgrade()
    source = url_for(tmp_path / "src.db")
    generate(source, 1, 25)
    store = Store(source)
    try:
        repo = MessageRepository(store)
        structured = repo.append_message("s00000", "user", [{"type": "text", "text": "hi"}])
        odd = repo.append_message("s00000", "user", "a\x00b\uffffc\uffff0d")
    finally:
        store.close()
    hcopy.copy_database(source, pg_target, batch_size=10)
    assert all(d.ok for d in hcopy.verify(source, pg_target))
    back = url_for(tmp_path / "back.db")
    hcopy.copy_database(pg_target, back, batch_size=10)
    assert all(d.ok for d in hcopy.verify(source, back))
    for url in (pg_target, back):
        store = Store(url)
        try:
            rows = {m["id"]: m["content"] for m in MessageRepository(store).get_messages("s00000")}
        finally:
            store.close()
        assert rows[structured] == [{"type": "text", "text": "hi"}]
        assert rows[odd] == "a\x00b\uffffc\uffff0d"


def test_child_session_before_its_parent_in_key_order(tmp_path: Path, pg_target: str) -> None:
    """PostgreSQL checks foreign keys per statement; "a..." sorts before "z..."."""
    _require_pg_upgrade()
    source = url_for(tmp_path / "src.db")
    migrate.upgrade(source, fts_min_pause=0)
    store = Store(source)
    try:
        ses = SessionRepository(store)
        ses.create_session("z_parent", "cli")
        ses.create_session("a_child", "cli", parent_session_id="z_parent")
        ses.create_session("m_grandchild", "cli", parent_session_id="a_child")
    finally:
        store.close()
    report = hcopy.copy_database(source, pg_target, batch_size=1)
    assert report.ok, report.tables
    back = tmp_path / "back.db"
    assert hcopy.copy_database(pg_target, url_for(back), batch_size=1).ok
    con = sqlite3.connect(back)
    try:
        parents = dict(con.execute("SELECT id, parent_session_id FROM sessions"))
    finally:
        con.close()
    assert parents == {"z_parent": None, "a_child": "z_parent", "m_grandchild": "a_child"}


def test_telegram_tables_to_postgresql(fresh_db: str, pg_target: str) -> None:
    _require_pg_upgrade()
    store = Store(fresh_db)
    try:
        SessionRepository(store).create_session("tg1", "telegram")
        repo = TelegramTopicRepository(store)
        repo.enable_telegram_topic_mode(chat_id=42, user_id=7)
        repo.bind_telegram_topic(
            chat_id=42, thread_id=3, user_id=7, session_key="k", session_id="tg1"
        )
    finally:
        store.close()
    report = hcopy.copy_database(fresh_db, pg_target)
    assert report.ok, report.tables
    names = {t.table for t in report.tables}
    assert {"telegram_dm_topic_mode", "telegram_dm_topic_bindings"} <= names


def test_resume_into_postgresql(tmp_path: Path, pg_target: str) -> None:
    _require_pg_upgrade()
    source = url_for(tmp_path / "src.db")
    generate(source, 6, 50)

    def stop(p: hcopy.CopyProgress) -> None:
        if p.table == "messages" and p.rows_done >= 120:
            raise Interrupt

    with pytest.raises(Interrupt):
        hcopy.copy_database(source, pg_target, batch_size=40, on_progress=stop)
    report = hcopy.copy_database(source, pg_target, resume=True, batch_size=40)
    assert report.ok, report.tables
    assert report.copied["messages"] == 300 - 120


def test_dangling_reference_is_copied_to_sqlite_and_named_by_postgresql(
    tmp_path: Path, pg_target: str
) -> None:
    """The original could leave a message whose session is gone: a SQLite copy keeps it
    as it is, PostgreSQL (which enforces foreign keys) refuses that batch by name."""
    _require_pg_upgrade()
    path = tmp_path / "src.db"
    generate(url_for(path), 1, 3)
    con = sqlite3.connect(path)  # foreign keys off: what an old writer could do
    try:
        con.execute(
            "INSERT INTO messages (session_id, role, content, timestamp) "
            "VALUES ('ghost', 'user', 'orphan', 1.0)"
        )
        con.commit()
    finally:
        con.close()
    assert hcopy.copy_database(url_for(path), url_for(tmp_path / "t.db")).ok
    with pytest.raises(CopyError, match=r"messages \(primary keys 1 to 4\).*ghost"):
        hcopy.copy_database(url_for(path), pg_target)
