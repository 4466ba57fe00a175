"""PostgreSQL goes away and comes back (issue 13): no write lost, none doubled, no error
reaching the caller while the outage is within the retry budget; past it one typed
DatabaseUnavailable naming the server.

Every test here runs against a throwaway cluster of its own (tests/helpers/pg_cluster.py), which
it restarts, stops or cuts; never the shared server on 5432. Each workload test prints its
figures (run with -s to see them): writes attempted, acknowledged, stored once, errors
escaped, duplicates, and the longest time one call took.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from helpers.pg_cluster import Cluster, CommitCutter, PgBouncer, throwaway_cluster
from sqlalchemy import text

from hermes_store import migrate
from hermes_store.repositories.messages import MessageRepository
from hermes_store.repositories.sessions import SessionRepository
from hermes_store.store import Store


@pytest.fixture(scope="module")
def _module_cluster() -> Iterator[Cluster]:
    with throwaway_cluster() as c:
        migrate.upgrade(c.url("hermes"))
        yield c


@pytest.fixture
def cluster(_module_cluster: Cluster) -> Cluster:
    """The module's cluster, running, with a database at head of this test's own."""
    if not _module_cluster.is_running():
        _module_cluster.start()
    _module_cluster.fresh_database(template="hermes")
    return _module_cluster


def _stored(cluster: Cluster, session_id: str) -> list[tuple[int, str]]:
    rows = cluster.admin(
        f"SELECT id, content FROM messages WHERE session_id = '{session_id}' ORDER BY id",
        database=cluster.database,
    )
    return [(int(r[0]), str(r[1])) for r in rows]  # type: ignore[call-overload]


def _message_count(cluster: Cluster, session_id: str) -> int:
    rows = cluster.admin(
        f"SELECT message_count FROM sessions WHERE id = '{session_id}'",
        database=cluster.database,
    )
    return int(rows[0][0])  # type: ignore[call-overload]


# --------------------------------------------------------------------------- the COMMIT


def _write_through_cut(
    cluster: Cluster,
    proxy: CommitCutter,
    write: Callable[[MessageRepository], Any],
    query: str = "sslmode=disable",
) -> Any:
    """Session "s" with one message "before", appended through `proxy`; then the proxy
    is armed for one cut and `write(messages)` runs through it. Returns what it returned."""
    with Store(cluster.url()) as setup:
        SessionRepository(setup).create_session("s", "cli")
    store = Store(cluster.url(port=proxy.port, query=query))
    try:
        messages = MessageRepository(store)
        messages.append_message("s", "user", "before")  # the connection is warmed up
        proxy.arm(1)
        result = write(messages)
        assert proxy.cut_done == 1, "the proxy never cut a COMMIT: the test tested nothing"
        return result
    finally:
        store.close()
        proxy.close()


@pytest.mark.parametrize("mode", ["after_reply", "before_forward"])
def test_a_commit_whose_answer_is_lost_is_applied_once(cluster: Cluster, mode: str) -> None:
    """The connection is cut at the exact point where the outcome is unknown: the COMMIT
    was sent and no answer came back. after_reply: the server committed (a plain retry
    would store the message twice, under a new id). before_forward: the COMMIT never
    arrived and the backend still holds the open transaction (a retry that did not end it
    would wait on its row lock, and its outcome would stay unknown). Either way the call
    returns normally, the message is stored once, and the id returned is the stored one."""
    later: list[int] = []

    def write(messages: MessageRepository) -> int:
        returned = int(messages.append_message("s", "user", "the message"))
        later.append(messages.append_message("s", "user", "after"))
        return returned

    returned = _write_through_cut(cluster, CommitCutter(cluster.port, mode), write)
    stored = _stored(cluster, "s")
    assert [content for _, content in stored] == ["before", "the message", "after"]
    assert dict((c, i) for i, c in stored)["the message"] == returned
    assert stored[0][0] < returned < later[0]
    assert _message_count(cluster, "s") == 3


def test_a_lost_commit_answer_of_a_batch_is_applied_once(cluster: Cluster) -> None:
    """The same for a write of several rows and counters (append_messages)."""
    ids = _write_through_cut(
        cluster,
        CommitCutter(cluster.port, "after_reply"),
        lambda m: m.append_messages(
            "s", [{"role": "user", "content": f"batch {i}"} for i in range(5)]
        ),
    )
    stored = _stored(cluster, "s")
    assert [c for _, c in stored] == ["before"] + [f"batch {i}" for i in range(5)]
    assert [i for i, _ in stored[1:]] == list(ids)
    assert _message_count(cluster, "s") == 6


def _crash(cluster: Cluster, seen: dict[str, Any], *, restart_again: bool) -> Callable[[], None]:
    """At the cut: the server crashes (the open transaction's WAL is lost) and comes back,
    and another client takes the lost id again and commits (`seen`: the hermes-store
    transaction ids open at the crash, "xid", and the ids taken after, "taken").
    `restart_again`: then the server restarts once more, so that the life in which the
    id was taken again is one the writer's retry never reaches."""

    def crash() -> None:
        import psycopg

        rows = cluster.admin(
            "SELECT backend_xid::text FROM pg_stat_activity WHERE application_name ="
            " 'hermes-store' AND backend_xid IS NOT NULL"
        )
        seen["xid"] = [str(r[0]) for r in rows]
        cluster.stop("immediate")
        cluster.start()
        with psycopg.connect(
            host="127.0.0.1", port=cluster.port, user="hermes", dbname=cluster.database
        ) as other:
            taken = []
            for _ in range(20):
                taken.append(str(other.execute("SELECT pg_current_xact_id()").fetchone()[0]))  # type: ignore[index]
                other.commit()
        seen["taken"] = taken
        if restart_again:
            # a clean stop: that life's commits are kept (they wrote no WAL of their own,
            # so their commit records are flushed later, and a crash would lose them too)
            cluster.stop("fast")
            cluster.start()

    return crash


@pytest.mark.parametrize("restart_again", [False, True], ids=["one restart", "two restarts"])
def test_a_commit_in_flight_when_the_server_crashes_is_applied_once(
    cluster: Cluster, restart_again: bool
) -> None:
    """The COMMIT never reaches the server, which then crashes (immediate stop) and comes
    back; the open transaction's WAL is lost, so the restarted server hands out its id
    again, here to transactions that commit. Asked about that id, the server says
    "committed": believing it would acknowledge a message that is not stored. The retry
    must see that the id was handed out again and redo the write, once. Two restarts:
    the retry first reaches the server a restart later than the life that took the id
    again, so neither the id's status nor the restart checkpoint tells the lost write
    from the other one; the append's own row does (it is not there)."""
    seen: dict[str, Any] = {}
    crash = _crash(cluster, seen, restart_again=restart_again)
    returned = _write_through_cut(
        cluster,
        CommitCutter(cluster.port, "before_forward", on_cut=crash),
        lambda m: m.append_message("s", "user", "the message"),
    )
    assert len(seen["xid"]) == 1 and seen["xid"][0] in seen["taken"], (
        f"the lost transaction's id was not handed out again: {seen}"
    )
    stored = _stored(cluster, "s")
    assert [c for _, c in stored] == ["before", "the message"]
    assert stored[1][0] == returned
    assert _message_count(cluster, "s") == 2


@pytest.mark.parametrize("write", ["batch", "keyed append"])
def test_a_write_of_messages_lost_in_a_crash_is_redone_after_a_second_restart(
    cluster: Cluster, write: str
) -> None:
    """The same for the other writes of messages (append_messages, an append with an
    idempotency key), which read their transaction's id in a statement of their own
    and name their first row as the witness."""
    seen: dict[str, Any] = {}
    crash = _crash(cluster, seen, restart_again=True)

    def append(m: MessageRepository) -> Any:
        if write == "batch":
            return m.append_messages("s", [{"role": "user", "content": "the message"}])[0]
        return m.append_message("s", "user", "the message", idempotency_key="k1")

    returned = _write_through_cut(
        cluster, CommitCutter(cluster.port, "before_forward", on_cut=crash), append
    )
    assert seen["xid"][0] in seen["taken"]
    stored = _stored(cluster, "s")
    assert [c for _, c in stored] == ["before", "the message"]
    assert stored[1][0] == returned
    assert _message_count(cluster, "s") == 2


# --------------------------------------------------------------------------- workloads


@dataclass
class Tally:
    """What a workload of appending writers saw, and what the server holds afterwards."""

    attempted: int = 0
    acknowledged: dict[str, int] = field(default_factory=dict)  # content -> id returned
    escaped: list[BaseException] = field(default_factory=list)
    failed_contents: set[str] = field(default_factory=set)
    longest_call: float = 0.0
    reads: int = 0
    read_errors: list[BaseException] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def figures(self, cluster: Cluster, sessions: list[str]) -> dict[str, Any]:
        stored: list[tuple[int, str]] = []
        for sid in sessions:
            stored += _stored(cluster, sid)
        contents = [c for _, c in stored]
        return {
            "attempted": self.attempted,
            "acknowledged": len(self.acknowledged),
            "stored_once": sum(1 for c in self.acknowledged if contents.count(c) == 1),
            "errors_escaped": len(self.escaped),
            "duplicates": len(contents) - len(set(contents)),
            "stored_unacknowledged": len(set(contents) - set(self.acknowledged)),
            "longest_call_s": round(self.longest_call, 3),
            "reads": self.reads,
            "read_errors": len(self.read_errors),
        }


def _run_workload(
    cluster: Cluster,
    outage: Callable[[], None],
    *,
    writers: int = 4,
    url: str | None = None,
    label: str,
) -> dict[str, Any]:
    """`writers` threads, each with a Store of its own (as separate processes would have)
    appending to its own session about every 5 ms, and one reader, while `outage()` runs;
    they go on until each writer has had 5 more acknowledgements after it. Then checks
    what the server holds and returns the figures."""
    url = url or cluster.url()
    sessions = [f"w{i}" for i in range(writers)]
    with Store(cluster.url()) as setup:
        for sid in sessions:
            SessionRepository(setup).create_session(sid, "cli")
    tally = Tally()
    stop = threading.Event()
    per_writer = [0] * writers

    def write(i: int) -> None:
        with Store(url) as store:
            messages = MessageRepository(store)
            n = 0
            while not stop.is_set():
                content = f"w{i}-{n}"
                n += 1
                with tally.lock:
                    tally.attempted += 1
                started = time.monotonic()
                try:
                    mid = messages.append_message(f"w{i}", "user", content)
                except Exception as exc:  # noqa: BLE001 (counted: none may escape)
                    with tally.lock:
                        tally.escaped.append(exc)
                        tally.failed_contents.add(content)
                else:
                    with tally.lock:
                        tally.acknowledged[content] = mid
                    per_writer[i] += 1
                took = time.monotonic() - started
                with tally.lock:
                    tally.longest_call = max(tally.longest_call, took)
                time.sleep(0.005)

    def read() -> None:
        with Store(url) as store:
            while not stop.is_set():
                try:
                    store.read(
                        lambda s: s.execute(text("SELECT count(*) FROM messages")).scalar_one()
                    )
                    tally.reads += 1
                except Exception as exc:  # noqa: BLE001 (counted: none may escape)
                    tally.read_errors.append(exc)
                time.sleep(0.01)

    threads = [threading.Thread(target=write, args=(i,)) for i in range(writers)]
    threads.append(threading.Thread(target=read))
    for t in threads:
        t.start()
    try:
        assert _wait(lambda: min(per_writer) >= 5), "the writers did not get going"
        outage()
        after = list(per_writer)
        assert _wait(lambda: all(p >= a + 5 for p, a in zip(per_writer, after, strict=True))), (
            f"the writers did not recover: {tally.escaped[:3]}"
        )
    finally:
        stop.set()
        for t in threads:
            t.join(timeout=120)
    figures = tally.figures(cluster, sessions)
    print(f"\noutage figures ({label}): {figures}")
    assert not tally.escaped, (
        f"errors reached the callers: {tally.escaped[:3]}\n{cluster.server_log(tail=6000)}"
    )
    assert not tally.read_errors, f"errors reached the readers: {tally.read_errors[:3]}"
    assert figures["acknowledged"] == figures["attempted"]
    assert figures["stored_once"] == figures["acknowledged"]
    assert figures["duplicates"] == 0 and figures["stored_unacknowledged"] == 0
    for sid in sessions:
        stored = _stored(cluster, sid)
        # the ids returned are the ids stored, and each transaction was whole
        assert all(tally.acknowledged[c] == i for i, c in stored)
        assert _message_count(cluster, sid) == len(stored)
    return figures


def _wait(predicate: Callable[[], bool], seconds: float = 60) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.02)
    return bool(predicate())


@pytest.mark.parametrize("mode", ["fast", "immediate"])
def test_writers_survive_server_restarts(cluster: Cluster, mode: str) -> None:
    """Two restarts (fast: every session terminated; immediate: the server dies and
    recovers from its WAL), the second after a pause with the server down."""

    timings: list[str] = []

    def outage() -> None:
        started = time.monotonic()
        cluster.restart(mode)
        timings.append(f"restarted {time.monotonic() - started:.2f}")
        time.sleep(0.3)
        cluster.stop(mode)
        timings.append(f"stopped {time.monotonic() - started:.2f}")
        time.sleep(1.0)  # down for a while: connections are refused meanwhile
        cluster.start()
        timings.append(f"started {time.monotonic() - started:.2f}")
        print(f"\nrestart timings: {timings}")

    _run_workload(cluster, outage, label=f"restart -m {mode}")


def test_writers_survive_terminated_backends(cluster: Cluster) -> None:
    """pg_terminate_backend of every hermes-store connection, five times (what an
    administrator, a pooler or an idle timeout does)."""
    ended = []

    def outage() -> None:
        for _ in range(5):
            ended.append(cluster.terminate_store_backends())
            time.sleep(0.2)

    _run_workload(cluster, outage, label="pg_terminate_backend x5")
    assert sum(ended) >= 5, f"hardly any backend was terminated: {ended}"


def test_writers_wait_out_a_lock_held_past_lock_timeout(cluster: Cluster) -> None:
    """Another transaction holds a lock every append needs for 2.5 s, five times the
    writers' lock_timeout (0.5 s here, set through the URL): each blocked append fails
    with lock_not_available and is retried until the lock goes."""
    import psycopg

    log_before = cluster.server_log(tail=None).count("canceling statement due to lock timeout")

    def outage() -> None:
        with psycopg.connect(
            host="127.0.0.1", port=cluster.port, user="hermes", dbname=cluster.database
        ) as holder:
            holder.execute("LOCK TABLE messages IN SHARE MODE")
            time.sleep(2.5)
            holder.rollback()

    url = cluster.url(query="options=-c%20lock_timeout%3D500")
    _run_workload(cluster, outage, url=url, label="lock held 2.5 s, lock_timeout 0.5 s")
    timeouts = cluster.server_log(tail=None).count("canceling statement due to lock timeout")
    assert timeouts - log_before >= 4, "the writers never met their lock timeout"


# --------------------------------------------------------------------------- PgBouncer


@pytest.fixture
def pgbouncer(cluster: Cluster) -> Iterator[PgBouncer]:
    """PgBouncer in transaction pooling mode with ONE server connection: every client's
    transactions take turns on it, so state one client leaves on a server connection
    (prepared statements, SET, session advisory locks) would meet the next."""
    bouncer = PgBouncer(cluster, pool_size=1)
    try:
        yield bouncer
    finally:
        bouncer.close()


def test_the_store_works_behind_pgbouncer_in_transaction_mode(
    cluster: Cluster, pgbouncer: PgBouncer
) -> None:
    """Upgrade, the facade's writes, reads and searches from three clients at once, each
    statement run often enough that psycopg would prepare it (5 times), through one pooled
    server connection, with the settings docs/postgresql.md gives."""
    from hermes_store.compat import SessionDB

    cluster.admin(f'DROP DATABASE "{cluster.database}" WITH (FORCE)')
    cluster.admin(f'CREATE DATABASE "{cluster.database}"')
    url = pgbouncer.url()
    migrate.upgrade(url)  # DDL and the upgrade's advisory lock, through the pooler
    migrate.upgrade(url)  # at head: changes nothing
    errors: list[BaseException] = []

    def client(i: int) -> None:
        try:
            db = SessionDB(url=url)
            try:
                db.create_session(f"c{i}", "cli", model="hermes-4")
                for n in range(12):
                    db.append_message(f"c{i}", "user", f"kyoto trip {i} note {n}")
                    assert len(db.get_messages(f"c{i}")) == n + 1
                    assert db.search_messages("kyoto")
                db.set_session_title(f"c{i}", f"trip {i}")
            finally:
                db.close()
        except BaseException as exc:  # noqa: BLE001 (reported below)
            errors.append(exc)

    threads = [threading.Thread(target=client, args=(i,)) for i in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not errors, errors
    assert pgbouncer.server_connections() <= 1
    # Two clients taking turns with the same statement on the one server connection, past
    # psycopg's prepare threshold (5); prepare_threshold=none in the URL keeps psycopg
    # from preparing statements there, which PgBouncer 1.18 cannot keep apart.
    with Store(url) as one, Store(url) as other:
        for _ in range(8):
            for store in (one, other):
                assert SessionRepository(store).get_session("c0") is not None
    with Store(url) as store:
        # the pooler's connect_query stands in for the startup option it cannot pass
        assert store.read(lambda s: s.execute(text("SHOW lock_timeout")).scalar()) == "10s"
        hits = store.read(
            lambda s: s.execute(text("SELECT count(*) FROM messages WHERE content LIKE 'kyoto%'"))
            .scalar_one()
        )
    assert hits == 36
    for i in range(3):
        assert _message_count(cluster, f"c{i}") == 12


def test_writers_survive_a_restart_behind_pgbouncer(
    cluster: Cluster, pgbouncer: PgBouncer
) -> None:
    """The server restarts behind the pooler: PgBouncer answers the clients' queries with
    its own errors (class 08) until the server is back."""
    _run_workload(
        cluster,
        lambda: cluster.restart("fast"),
        url=pgbouncer.url(),
        label="restart -m fast behind PgBouncer",
    )


def test_a_lost_commit_answer_through_pgbouncer_is_applied_once(
    cluster: Cluster, pgbouncer: PgBouncer
) -> None:
    """The commit check through the pooler: the transaction id is read inside the
    transaction, and asked about on whichever server connection the next one gets."""
    returned = _write_through_cut(
        cluster,
        CommitCutter(pgbouncer.port, "after_reply"),
        lambda m: m.append_message("s", "user", "the message"),
        query="sslmode=disable&prepare_threshold=none",
    )
    stored = _stored(cluster, "s")
    assert [c for _, c in stored] == ["before", "the message"]
    assert stored[1][0] == returned


# --------------------------------------------------------------------------- copy


def _sqlite_source(tmp_path: Any, sessions: int = 6, per_session: int = 100) -> str:
    """A state.db at head with sessions x per_session messages."""
    from helpers.databases import url_for

    url = url_for(tmp_path / "source.db")
    migrate.upgrade(url, fts_min_pause=0)
    with Store(url) as store:
        for i in range(sessions):
            SessionRepository(store).create_session(f"s{i}", "cli")
            MessageRepository(store).append_messages(
                f"s{i}", [{"role": "user", "content": f"m {i} {n}"} for n in range(per_session)]
            )
    return url


def test_copy_survives_a_server_restart(cluster: Cluster, tmp_path: Any) -> None:
    """The target restarts (fast, then immediate) between two batches of a copy: the
    batches go on after it, and the copy ends verified."""
    from hermes_store.migration.copy import copy_database

    source = _sqlite_source(tmp_path)
    cluster.admin(f'DROP DATABASE "{cluster.database}" WITH (FORCE)')
    cluster.admin(f'CREATE DATABASE "{cluster.database}"')
    restarts: list[str] = []

    def progress(p: Any) -> None:
        if p.table == "messages" and p.batches in (3, 8) and len(restarts) < 2:
            mode = "fast" if not restarts else "immediate"
            cluster.restart(mode)
            restarts.append(mode)

    report = copy_database(source, cluster.url(), batch_size=50, on_progress=progress)
    assert restarts == ["fast", "immediate"]
    assert report.ok, report.to_dict() if hasattr(report, "to_dict") else report
    assert cluster.admin("SELECT count(*) FROM messages", database=cluster.database) == [(600,)]


def test_copy_interrupted_by_an_outage_finishes_with_resume(
    cluster: Cluster, tmp_path: Any
) -> None:
    """As docs/postgresql.md says: a copy stopped during an outage (here killed while the server
    is down and it waits) leaves its committed batches; the same command with --resume
    finishes it, verified."""
    import signal
    import subprocess
    import sys

    # enough rows that the outage always lands while messages are still being copied
    source = _sqlite_source(tmp_path, sessions=20, per_session=200)
    cluster.admin(f'DROP DATABASE "{cluster.database}" WITH (FORCE)')
    cluster.admin(f'CREATE DATABASE "{cluster.database}"')
    target = cluster.url()
    migrate.upgrade(target)
    argv = [sys.executable, "-m", "hermes_store.cli", "copy", "--from", source, "--to", target,
            "--batch-size", "20"]
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    def copied() -> int:
        rows = cluster.admin("SELECT count(*) FROM messages", database=cluster.database)
        return int(rows[0][0])  # type: ignore[call-overload]

    try:
        assert _wait(lambda: copied() >= 100 or proc.poll() is not None)
        cluster.stop("immediate")
        time.sleep(0.5)
        proc.send_signal(signal.SIGINT)  # the operator gives up waiting
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode != 0, "the copy finished before the outage: nothing was tested"
    cluster.start()
    partial = copied()
    assert 0 < partial < 4000
    from helpers.processes import run_cli

    resumed = run_cli("copy", "--from", source, "--to", target, "--batch-size", "20", "--resume")
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    assert copied() == 4000
