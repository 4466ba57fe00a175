"""The project's own tables and revisions (issue 27, item 1): `hermes_store_*` tables lie
outside the v23 contract, are created by revisions of the project's own after 0023, and
the original Hermes code still opens and uses an upgraded file. The head is one
definition; a database made at 0023 (before hs0001) is refused until upgraded, and
upgrades cleanly."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from alembic.script import ScriptDirectory

from hermes_store import contract, migrate
from hermes_store.config import SCHEMA_VERSION
from hermes_store.errors import NotAtHead
from hermes_store.migration import schema_snapshot
from hermes_store.migration.copy import copy_database
from hermes_store.migration.head import HEAD_REVISION, UPSTREAM_HEAD_REVISION
from hermes_store.repositories.messages import MessageRepository
from hermes_store.repositories.sessions import SessionRepository
from hermes_store.store import Store

CLI = str(Path(sys.executable).parent / "hermes-store")
#: the project's own revisions after the upstream 0023, in order
OWN_REVISIONS = (
    "hs0001",
    "hs0002",
    "hs0003",
    "hs0005",
    "hs0006",
    "hs0007",
    "hs0008",
    "hs0009",
    "hs0010",
)


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    environ = {k: v for k, v in os.environ.items() if k != "HERMES_STORE_URL"}
    return subprocess.run([CLI, *args], capture_output=True, text=True, env=environ, timeout=300)


def test_the_head_is_one_definition_and_the_chain_s_single_head() -> None:
    script = ScriptDirectory.from_config(migrate.make_config())
    assert script.get_heads() == [HEAD_REVISION]
    assert migrate.HEAD == HEAD_REVISION
    assert not hasattr(contract, "HEAD_REVISION")  # the contract holds frozen names only
    # the upstream number stays the upstream's; the project's revisions follow 0023
    assert SCHEMA_VERSION == 23 and UPSTREAM_HEAD_REVISION == "0023"
    after_upstream = [r.revision for r in script.iterate_revisions(HEAD_REVISION, "0023")]
    assert after_upstream and all(r.startswith("hs") for r in after_upstream), after_upstream


def test_a_fresh_database_has_the_own_tables_and_checks_clean(backend_url: str, db) -> None:  # type: ignore[no-untyped-def]
    report = migrate.check(backend_url)
    assert report.ok and report.schema_drift == [], report
    with db.connect(backend_url) as conn:
        tables = set(conn.dialect.get_table_names(conn))
    assert contract.IDEMPOTENCY_TABLE in tables


def test_a_changed_own_table_is_drift(backend_url: str, raw_con) -> None:  # type: ignore[no-untyped-def]
    """check judges the own tables against their models: they are the project's, not
    unknown tables it ignores."""
    raw_con.execute(f"ALTER TABLE {contract.IDEMPOTENCY_TABLE} DROP COLUMN created_at")
    drift = migrate.check(backend_url).schema_drift
    assert any("created_at" in d for d in drift), drift


def test_the_reference_comparison_leaves_own_tables_out(fresh_db: str, legacy_db, db) -> None:  # type: ignore[no-untyped-def]
    with db.connect(fresh_db) as conn:
        contract_only = schema_snapshot.snapshot(conn)
        everything = schema_snapshot.snapshot(conn, own_tables=True)
    assert contract.IDEMPOTENCY_TABLE not in contract_only["tables"]
    assert contract.IDEMPOTENCY_TABLE in everything["tables"]
    assert contract.VERSION_TABLE not in everything["tables"]
    assert contract_only == db.snapshot(legacy_db(23))


def _at_0023(url: str) -> None:
    """A database as hermes-store made it before hs0001 existed."""
    migrate.upgrade(url, revision="0023", fts_min_pause=0)
    assert migrate.current(url).alembic_revision == "0023"


def test_a_database_at_0023_is_refused_then_upgrades_cleanly(
    backend_url: str, tmp_path: Path, db
) -> None:  # type: ignore[no-untyped-def]
    if backend_url.startswith("sqlite"):
        url = db.url_for(tmp_path / "made-before" / "state.db")
        (tmp_path / "made-before").mkdir()
    else:
        url = backend_url
        migrate.downgrade(url, "base")
    _at_0023(url)
    refused = rf"at revision 0023, not {HEAD_REVISION}.*hermes-store upgrade"
    with pytest.raises(NotAtHead, match=refused):
        Store(url)
    # reading needs the v23 shape only, which 0023 has: read as it is, nothing changed
    with Store(url, read_only=True) as reading:
        assert SessionRepository(reading).list_sessions_rich() == []
    assert migrate.current(url).alembic_revision == "0023"
    upgraded = _cli("upgrade", "--url", url)
    assert upgraded.returncode == 0, upgraded.stderr
    assert f"0023 -> {HEAD_REVISION}" in upgraded.stdout, upgraded.stdout
    span = f"{len(OWN_REVISIONS)} revisions applied ({OWN_REVISIONS[0]}..{HEAD_REVISION})"
    assert span in upgraded.stdout, upgraded.stdout
    with Store(url) as opened:
        SessionRepository(opened).create_session("s1", "cli")
        first = MessageRepository(opened).append_message("s1", "user", "x", idempotency_key="k")
        assert MessageRepository(opened).append_message("s1", "user", "x", idempotency_key="k") == (
            first
        )
    assert migrate.check(url).ok


def test_a_legacy_file_is_stamped_at_its_upstream_revision_then_upgraded_to_head(
    legacy_db,
) -> None:  # type: ignore[no-untyped-def]
    path = legacy_db(22)
    report = migrate.upgrade(str(path), fts_min_pause=0)
    assert report.adopted_from == 22
    assert report.revisions == ("0023", *OWN_REVISIONS)
    assert report.after == HEAD_REVISION


def test_downgrading_to_0023_leaves_the_reference_schema(fresh_db: str, legacy_db, db) -> None:  # type: ignore[no-untyped-def]
    migrate.downgrade(fresh_db, "0023")
    assert migrate.current(fresh_db).alembic_revision == "0023"
    path = fresh_db.removeprefix("sqlite:///")
    assert db.snapshot(path) == db.snapshot(legacy_db(23))
    with db.connect(fresh_db) as conn:
        assert contract.IDEMPOTENCY_TABLE not in conn.dialect.get_table_names(conn)


def _statements(schema_sql: str) -> list[str]:
    statements, current = [], ""
    for line in schema_sql.splitlines(keepends=True):
        current += line
        if sqlite3.complete_statement(current):
            statements.append(current.strip())
            current = ""
    return statements


def _open_as_the_original(path: Path, reference_schema: str) -> sqlite3.Connection:
    """A writable open as the original v23 code does it (docs/reference/behaviour.md 1.1 step 4,
    docs/reference/history.md 2 and 3): foreign keys on, its schema created where missing, its
    declared columns reconciled, no version-gated step at version 23. It knows only its
    own tables: anything else in the file is left alone."""
    con = sqlite3.connect(path, isolation_level=None, timeout=5)
    con.execute("PRAGMA foreign_keys=ON")
    declared = [
        s for s in _statements(reference_schema)
        if not s.startswith("CREATE TABLE IF NOT EXISTS '")  # FTS5's own shadow tables
        and not s.startswith("CREATE TABLE sqlite_sequence")
    ]  # fmt: skip
    for sql in declared:
        for kind in ("TABLE", "VIRTUAL TABLE", "INDEX", "UNIQUE INDEX", "VIEW", "TRIGGER"):
            if sql.startswith(f"CREATE {kind} "):
                sql = sql.replace(f"CREATE {kind} ", f"CREATE {kind} IF NOT EXISTS ", 1)
                break
        con.execute(sql)
    memory = sqlite3.connect(":memory:")
    for sql in declared:
        if sql.startswith("CREATE TABLE "):
            memory.execute(sql)
    for (table,) in memory.execute("SELECT name FROM sqlite_master WHERE type = 'table'"):
        live = {r[1] for r in con.execute(f'PRAGMA table_info("{table}")')}
        for _, name, decl, notnull, default, pk in memory.execute(f'PRAGMA table_info("{table}")'):
            if name not in live:
                extra = " NOT NULL" if notnull and not pk else ""
                extra += f" DEFAULT {default}" if default is not None else ""
                con.execute(f'ALTER TABLE "{table}" ADD COLUMN "{name}" {decl}{extra}')
    assert con.execute("SELECT MAX(version) FROM schema_version").fetchone() == (23,)
    return con


def test_the_original_opens_and_uses_an_upgraded_file(fresh_db: str, fixtures_path: Path) -> None:
    path = Path(fresh_db.removeprefix("sqlite:///"))
    with Store(fresh_db) as opened:
        sessions, messages = SessionRepository(opened), MessageRepository(opened)
        for sid in ("kept", "doomed"):
            sessions.create_session(sid, "telegram")
            messages.append_message(sid, "user", f"zebu {sid}", idempotency_key="m-1")
    reference = (fixtures_path / "state_v23.schema.sql").read_text(encoding="utf-8")
    con = _open_as_the_original(path, reference)
    try:
        # what the original writes and deletes, as it writes and deletes it
        con.execute("BEGIN IMMEDIATE")
        con.execute(
            "INSERT INTO messages (session_id, role, content, timestamp) "
            "VALUES ('kept', 'assistant', 'zebu answer', 2.0)"
        )
        con.execute("UPDATE sessions SET message_count = message_count + 1 WHERE id = 'kept'")
        con.execute("COMMIT")
        hits = con.execute(
            "SELECT rowid FROM messages_fts WHERE messages_fts MATCH 'zebu'"
        ).fetchall()
        assert len(hits) == 3
        con.execute("BEGIN IMMEDIATE")
        con.execute(
            "UPDATE sessions SET parent_session_id = NULL WHERE parent_session_id = 'doomed'"
        )
        con.execute("DELETE FROM messages WHERE session_id = 'doomed'")
        con.execute("DELETE FROM sessions WHERE id = 'doomed'")
        con.execute("COMMIT")
        con.execute("VACUUM")
        assert con.execute("PRAGMA foreign_key_check").fetchall() == []
        assert con.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
        keys = con.execute(f"SELECT session_id, key FROM {contract.IDEMPOTENCY_TABLE}").fetchall()
        assert keys == [("kept", "m-1")]  # the deleted session's key went with it
    finally:
        con.close()
    assert migrate.check(fresh_db).ok
    with Store(fresh_db) as opened:
        assert MessageRepository(opened).message_count("kept") == 2


def test_a_copy_carries_the_keys(fresh_db: str, pg_url: str, tmp_path: Path) -> None:
    with Store(fresh_db) as opened:
        SessionRepository(opened).create_session("s1", "cli")
        first = MessageRepository(opened).append_messages(
            "s1", [{"role": "user", "content": "a"}] * 2, idempotency_key="batch"
        )
    for target in (pg_url, f"sqlite:///{tmp_path / 'copy.db'}"):
        report = copy_database(fresh_db, target)
        assert report.ok, report
        assert report.copied[contract.IDEMPOTENCY_TABLE] == 1
        with Store(target) as copied:
            again = MessageRepository(copied).append_messages(
                "s1", [{"role": "user", "content": "a"}] * 2, idempotency_key="batch"
            )
            assert again == first
            assert MessageRepository(copied).message_count("s1") == 2


def test_the_known_revisions_are_alembics() -> None:
    """head.known_revisions (read from the file names, without importing Alembic) is the
    script directory's own list of revisions."""
    from alembic.script import ScriptDirectory

    from hermes_store.migrate import make_config
    from hermes_store.migration.head import known_revisions

    script = ScriptDirectory.from_config(make_config())
    assert known_revisions() == {rev.revision for rev in script.walk_revisions()}
