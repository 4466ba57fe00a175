"""FTS states the original can leave behind, on real copies of the fixtures.

Raw connections and plain engines go through this process's SQLite library
(`sqlite_driver.current()`): a second copy of SQLite in the process would not see the
Store's POSIX locks, and closing its connection would drop them
(hermes_store/sqlite/driver.py)."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

import pytest
from helpers.processes import run_cli_here as run_cli  # the commands' main, in-process
from sqlalchemy import Engine, create_engine

from hermes_store import migrate
from hermes_store.compat import SessionDB
from hermes_store.search import search_messages
from hermes_store.search.maintenance import integrity_errors
from hermes_store.sqlite import driver as sqlite_driver


def _connect(path: Path, **kwargs: Any) -> sqlite3.Connection:
    """A raw connection through this process's SQLite library."""
    return sqlite_driver.current().connect(str(path), **kwargs)


def _engine(path: Path) -> Engine:
    """A plain engine (no hermes-store listeners) on this process's SQLite library."""
    return create_engine(f"sqlite:///{path}", module=sqlite_driver.current().module)


def _meta(path: Path) -> dict[str, str]:
    con = _connect(path)
    try:
        return dict(con.execute("SELECT key, value FROM state_meta").fetchall())
    finally:
        con.close()


def _integrity(path: Path) -> list[str]:
    engine = _engine(path)
    try:
        with engine.connect() as conn:
            return integrity_errors(conn)
    finally:
        engine.dispose()


def test_cjk_triggers_are_detached_so_writes_keep_working(legacy_db) -> None:  # type: ignore[no-untyped-def]
    path = legacy_db(23)
    migrate.upgrade(path)
    con = _connect(path)
    # what the original leaves when it had the tokenizer: a table we cannot open and a
    # trigger that would make every INSERT fail without the tokenizer
    con.execute("PRAGMA writable_schema=ON")
    con.execute(
        "INSERT INTO sqlite_master (type, name, tbl_name, rootpage, sql) VALUES "
        "('table', 'messages_fts_cjk', 'messages_fts_cjk', 0, "
        "'CREATE VIRTUAL TABLE messages_fts_cjk USING fts5(content, tool_name, tool_calls, "
        "content=''messages_fts_cjk_src'', content_rowid=''id'', tokenize=''cjk_unicode61'')')"
    )
    con.commit()
    con.close()
    con = _connect(path)
    con.execute(
        "CREATE TRIGGER messages_fts_cjk_insert AFTER INSERT ON messages BEGIN "
        "INSERT INTO messages_fts_cjk(rowid, content) VALUES (new.id, new.content); END"
    )
    con.commit()
    con.close()
    db = SessionDB(path)
    try:
        assert db.append_message("20260303_083012_c0ffe2", "user", "still writable") > 64
        assert _meta(path)["fts_cjk_stale"] == "1"
    finally:
        db.close()
    con = _connect(path)
    triggers = {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type='trigger'")}
    con.close()
    assert not {t for t in triggers if t.startswith("messages_fts_cjk")}


def test_trash_tables_without_rowid_are_torn_down(legacy_db) -> None:  # type: ignore[no-untyped-def]
    path = legacy_db(23)
    migrate.upgrade(path)
    con = _connect(path)
    con.execute("CREATE TABLE fts_v22_trash_messages_fts_config(k PRIMARY KEY, v) WITHOUT ROWID")
    con.executemany(
        "INSERT INTO fts_v22_trash_messages_fts_config VALUES (?, ?)",
        [(f"k{i}", i) for i in range(1200)],
    )
    con.execute("CREATE TABLE fts_v22_trash_messages_fts_data(id INTEGER PRIMARY KEY, block)")
    con.execute("INSERT INTO fts_v22_trash_messages_fts_data VALUES (1, x'00')")
    con.execute("DELETE FROM state_meta WHERE key = 'fts_storage_version'")
    con.commit()
    con.close()
    migrate.finish_fts(path, min_pause=0)
    status = migrate.current(path)
    assert status.fts is not None and status.fts.trash_tables == ()
    assert status.fts.storage_version == "1"


def test_high_water_without_progress_is_reindexed_from_scratch(legacy_db) -> None:  # type: ignore[no-untyped-def]
    path = legacy_db(23)
    migrate.upgrade(path)
    con = _connect(path)
    con.execute("INSERT INTO state_meta VALUES ('fts_rebuild_high_water', '40')")
    con.commit()
    con.close()
    migrate.finish_fts(path, min_pause=0)
    assert "fts_rebuild_high_water" not in _meta(path)
    assert _integrity(path) == []


def test_a_file_without_a_version_row_runs_no_data_migration(legacy_db) -> None:  # type: ignore[no-untyped-def]
    path = legacy_db(15)
    con = _connect(path)
    con.execute("DELETE FROM schema_version")
    con.commit()
    con.close()
    migrate.upgrade(path)
    con = _connect(path)
    assert con.execute("SELECT version FROM schema_version").fetchall() == [(23,)]
    tagged = con.execute(
        "SELECT COUNT(*) FROM sessions WHERE model_config LIKE '%_delegate_from%'"
    ).fetchone()[0]
    seeded = con.execute("SELECT COUNT(*) FROM session_model_usage").fetchone()[0]
    con.close()
    assert tagged == 0 and seeded == 0  # the original writes 23 and runs no blocks


def test_sessions_json_is_read_from_the_databases_own_home(
    legacy_db,
    tmp_path: Path,
    hermes_home: Path,  # type: ignore[no-untyped-def]
) -> None:
    profile = tmp_path / "profiles" / "work"
    (profile / "sessions").mkdir(parents=True)
    path = profile / "state.db"
    path.write_bytes(legacy_db(17).read_bytes())
    entry = {"session_id": "20260302_140000_7e1e9a", "display_name": "From this profile"}
    (profile / "sessions" / "sessions.json").write_text(json.dumps({"k": entry}))
    (hermes_home / "sessions").mkdir(parents=True, exist_ok=True)
    other = {"session_id": "20260302_140000_7e1e9a", "display_name": "WRONG PROFILE"}
    (hermes_home / "sessions" / "sessions.json").write_text(json.dumps({"k": other}))
    migrate.upgrade(path)
    con = _connect(path)
    name = con.execute(
        "SELECT display_name FROM sessions WHERE id = '20260302_140000_7e1e9a'"
    ).fetchone()[0]
    con.close()
    assert name == "From this profile"


def test_lowercase_or_is_a_word_not_an_operator(legacy_db) -> None:  # type: ignore[no-untyped-def]
    path = legacy_db(23)
    migrate.upgrade(path)
    engine = _engine(path)
    with engine.connect() as conn:
        upper = {h["session_id"] for h in search_messages(conn, "Kyoto OR refactor")}
        lower = {h["session_id"] for h in search_messages(conn, "Kyoto or refactor")}
    engine.dispose()
    assert len(upper) == 3
    assert lower == set()  # every term, "or" included, must match (implicit AND)


def test_dropped_triggers_are_restored_and_the_index_rebuilt(legacy_db) -> None:  # type: ignore[no-untyped-def]
    path = legacy_db(23)
    migrate.upgrade(path)
    con = _connect(path)
    # what an original process on an SQLite without FTS5 does, then keeps writing
    for name in ("insert", "delete", "update"):
        con.execute(f"DROP TRIGGER messages_fts_{name}")
        con.execute(f"DROP TRIGGER messages_fts_trigram_{name}")
    con.execute(
        "INSERT INTO messages (session_id, role, content, timestamp, active) "
        "VALUES ('20260303_083012_c0ffe2', 'user', 'unindexedword here', 1.0, 1)"
    )
    con.commit()
    con.close()
    migrate.upgrade(path, fts_min_pause=0)
    status = migrate.current(path)
    assert status.fts is not None and status.fts.triggers == 6
    assert not status.fts.backfill_pending
    engine = _engine(path)
    with engine.connect() as conn:
        assert len(search_messages(conn, "unindexedword")) == 1
    engine.dispose()
    assert _integrity(path) == []


def test_damaged_fts_index_degrades_search_to_like_and_rebuild_repairs_it(
    legacy_db,
    caplog,  # type: ignore[no-untyped-def]
) -> None:
    path = legacy_db(23)
    migrate.upgrade(path)
    con = _connect(path)
    con.execute("DELETE FROM messages_fts_data WHERE id > 10")  # lose the index segments
    con.commit()
    con.close()
    db = SessionDB(path)
    try:
        with caplog.at_level("WARNING", logger="hermes_store.search.sqlite_fts"):
            hits = db.search_messages("Kyoto")
        assert {h["session_id"] for h in hits} == {"20260302_140000_7e1e9a"}
        assert "hermes-store fts rebuild" in caplog.text
        # writes go on: the triggers only add to the index
        assert db.append_message("20260303_083012_c0ffe2", "user", "after the damage") > 64
    finally:
        db.close()
    assert _integrity(path) != []
    migrate.rebuild_fts(path)
    assert _integrity(path) == []
    engine = _engine(path)
    with engine.connect() as conn:
        assert len(search_messages(conn, "damage")) == 1
    engine.dispose()


# Garbage where each index keeps its structure record (FTS5 then cannot even open the
# table), a zeroed one (FTS5 opens it, finds no segments and writes over existing ones:
# the bare SQLITE_CONSTRAINT), or a format version it does not know.
_FTS_DAMAGE = {
    "garbage_structure": "UPDATE {t}_data SET block = x'ffffffffffffffffffffffff' WHERE id = 10",
    "zeroed_structure": "UPDATE {t}_data SET block = zeroblob(12) WHERE id = 10",
    "unknown_version": "UPDATE {t}_config SET v = 99 WHERE k = 'version'",
}


def _damage_fts(path: Path, damage: str) -> None:
    con = _connect(path)
    try:
        for table in ("messages_fts", "messages_fts_trigram"):
            con.execute(_FTS_DAMAGE[damage].format(t=table))
        con.commit()
    finally:
        con.close()


def _insert_fails(path: Path) -> str:
    """The damage is real: a plain INSERT into messages (through the FTS triggers) fails,
    at the statement or at its COMMIT; its transaction is rolled back. Returns SQLite's
    error text."""
    con = _connect(path, isolation_level=None)
    try:
        con.execute("BEGIN")
        try:
            con.execute(
                "INSERT INTO messages (session_id, role, content, timestamp) "
                "VALUES ('20260303_083012_c0ffe2', 'user', 'probe', 1)"
            )
            # newer FTS5 keeps the new terms in memory and reads the damaged structure
            # record only when it writes them out, at the commit
            con.execute("COMMIT")
        except sqlite_driver.DatabaseError as exc:
            return str(exc)
        finally:
            if con.in_transaction:  # some failures end the transaction themselves
                con.execute("ROLLBACK")
        raise AssertionError("the damaged index did not stop an insert")
    finally:
        con.close()


def _fts_hits(path: Path, word: str) -> int:
    con = _connect(path)
    try:
        return int(
            con.execute(
                "SELECT COUNT(*) FROM messages_fts WHERE messages_fts MATCH ?", (word,)
            ).fetchone()[0]
        )
    finally:
        con.close()


# on both drivers: SQLite 3.44+ (pysqlite3's) reports FTS5's own damage in quick_check,
# which must not be taken for damage to the b-trees
@pytest.mark.usefixtures("sqlite_driver")
@pytest.mark.parametrize("damage", sorted(_FTS_DAMAGE))
def test_a_write_on_a_damaged_index_rebuilds_it_once_and_goes_on(
    legacy_db,  # type: ignore[no-untyped-def]
    caplog: pytest.LogCaptureFixture,
    damage: str,
) -> None:
    path = legacy_db(23)
    migrate.upgrade(path)
    _damage_fts(path, damage)
    print(damage, "->", _insert_fails(path))
    assert _integrity(path) != []
    db = SessionDB(path)
    try:
        with caplog.at_level("WARNING", logger="hermes_store.store"):
            new_id = db.append_message("20260303_083012_c0ffe2", "user", "zebracorn arrives")
        assert "full-text index is damaged" in caplog.text
        assert "rebuilding the FTS indexes in place" in caplog.text
        assert [m["id"] for m in db.get_messages("20260303_083012_c0ffe2")][-1] == new_id
        assert {h["id"] for h in db.search_messages("zebracorn")} == {new_id}
    finally:
        db.close()
    assert _integrity(path) == []
    assert _fts_hits(path, "zebracorn") == 1


@pytest.mark.usefixtures("sqlite_driver")
def test_the_rebuild_is_done_once_per_store(legacy_db) -> None:  # type: ignore[no-untyped-def]
    """Damage that comes back after the one rebuild: DatabaseCorrupt naming the file and
    the FTS repair, and nothing written; `hermes-store fts rebuild` then repairs it."""
    from hermes_store.errors import DatabaseCorrupt

    path = legacy_db(23)
    migrate.upgrade(path)
    db = SessionDB(path)
    try:
        _damage_fts(path, "garbage_structure")
        db.append_message("20260303_083012_c0ffe2", "user", "first after the damage")
        _damage_fts(path, "garbage_structure")
        before = _integrity_free_counts(path)
        with pytest.raises(DatabaseCorrupt) as caught:
            db.append_message("20260303_083012_c0ffe2", "user", "second after the damage")
        assert _integrity_free_counts(path) == before, "the refused write wrote something"
    finally:
        db.close()
    error = caught.value
    assert error.fts_only and error.where == str(path)
    assert f"hermes-store fts rebuild --url {path}" in str(error)
    assert "already rebuilt once" in error.detail
    migrate.rebuild_fts(path)
    assert _integrity(path) == []
    assert _fts_hits(path, "first") >= 1


def _integrity_free_counts(path: Path) -> tuple[int, bytes]:
    """What a write would change, read without FTS5 (which cannot open the index): the
    number of messages and the damaged structure record."""
    con = _connect(path)
    try:
        count = con.execute("SELECT COUNT(*) FROM messages").fetchone()[0]
        block = con.execute("SELECT block FROM messages_fts_data WHERE id = 10").fetchone()[0]
        return int(count), bytes(block)
    finally:
        con.close()


def test_fts_rebuild_repairs_an_index_fts5_cannot_open(legacy_db) -> None:  # type: ignore[no-untyped-def]
    """`hermes-store fts rebuild` on an index whose structure record is garbage: FTS5's own
    'rebuild' cannot run on it, the CLI's does. Search meanwhile falls back to LIKE."""
    path = legacy_db(23)
    migrate.upgrade(path)
    _damage_fts(path, "garbage_structure")
    engine = _engine(path)
    with engine.connect() as conn:
        assert {h["session_id"] for h in search_messages(conn, "Kyoto")} == {
            "20260302_140000_7e1e9a"
        }
    engine.dispose()
    done = run_cli("check", "--url", str(path))
    # the standard library's older SQLite fails to open the table; pysqlite3's newer one,
    # whose quick_check also runs FTS5's own check, names the damaged record
    assert done.returncode == 1, done.stdout
    assert (
        "vtable constructor failed" in done.stdout
        or "fts5: corrupt structure record" in done.stdout
    ), done.stdout
    done = run_cli("fts", "rebuild", "--url", str(path))
    assert done.returncode == 0, done.stderr
    done = run_cli("check", "--url", str(path))
    assert done.returncode == 0, done.stdout
    assert _fts_hits(path, "Kyoto") >= 1


def test_threads_that_meet_the_damage_share_the_one_rebuild(legacy_db, caplog) -> None:  # type: ignore[no-untyped-def]
    """Four threads of one Store append at once onto a damaged index: every append lands,
    the indexes are rebuilt once, and a thread whose write failed while another was
    rebuilding retries instead of calling that the second damage."""
    import threading
    from concurrent.futures import ThreadPoolExecutor

    from hermes_store.repositories.messages import MessageRepository
    from hermes_store.store import Store

    path = legacy_db(23)
    migrate.upgrade(path)
    _damage_fts(path, "garbage_structure")
    start = threading.Barrier(4)
    with Store(f"sqlite:///{path}") as store, caplog.at_level("WARNING", "hermes_store.store"):
        messages = MessageRepository(store)

        def append(n: int) -> list[int]:
            start.wait()
            return [
                messages.append_message("20260303_083012_c0ffe2", "user", f"t{n} zebracorn {i}")
                for i in range(5)
            ]

        with ThreadPoolExecutor(4) as pool:
            ids = [i for batch in pool.map(append, range(4)) for i in batch]
    assert len(set(ids)) == 20
    assert caplog.text.count("rebuilding the FTS indexes in place") == 1
    assert _integrity(path) == []
    assert _fts_hits(path, "zebracorn") == 20
