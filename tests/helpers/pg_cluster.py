"""Throwaway PostgreSQL servers for the outage tests: a cluster of their own (initdb +
pg_ctl, as the `postgres` user when run as root, on a free port, in a temporary
directory), a TCP proxy that cuts a connection at a chosen COMMIT, and PgBouncer in
transaction pooling mode. The tests restart, stop and cut these, never the shared server
on 5432 that other test workers use. Everything listens on 127.0.0.1 only."""

from __future__ import annotations

import glob
import os
import shutil
import socket
import struct
import subprocess
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

USER = "hermes"  # the cluster's superuser, and the role the stores log in as
#: The PgBouncer binary to run: this variable, else the copy .ci/fetch-pgbouncer unpacks
#: into the clone (no system package needed), else one on PATH or in /usr/sbin.
PGBOUNCER_ENV = "HERMES_STORE_PGBOUNCER"
FETCHED_PGBOUNCER = Path(__file__).resolve().parents[2] / ".ci-cache/pgbouncer/bin/pgbouncer"


def _bin_dir() -> Path | None:
    found = sorted(
        glob.glob("/usr/lib/postgresql/*/bin/pg_ctl"),
        key=lambda p: int(Path(p).parts[-3]) if Path(p).parts[-3].isdigit() else 0,
    )
    if found:
        return Path(found[-1]).parent
    pg_ctl = shutil.which("pg_ctl")
    return Path(pg_ctl).parent if pg_ctl else None


def _unavailable(reason: str) -> None:
    # Under CI a test that needs its own server must run, never skip.
    if os.environ.get("CI"):
        pytest.fail(f"CI must run the PostgreSQL outage tests: {reason}")
    pytest.skip(reason)


def pgbouncer_binary() -> str | None:
    override = os.environ.get(PGBOUNCER_ENV)
    if override:
        return override
    if FETCHED_PGBOUNCER.is_file():
        return str(FETCHED_PGBOUNCER)
    return shutil.which("pgbouncer") or (
        "/usr/sbin/pgbouncer" if os.path.exists("/usr/sbin/pgbouncer") else None
    )


def _server_user() -> dict[str, str]:
    """Popen arguments that run initdb, pg_ctl and pgbouncer as `postgres` when the tests
    run as root (all three refuse root)."""
    return {"user": "postgres", "group": "postgres"} if os.geteuid() == 0 else {}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _private_dir(prefix: str) -> Path:
    """A directory the server user owns (pytest's tmp_path is root's, mode 0700)."""
    path = Path(tempfile.mkdtemp(prefix=prefix))
    if os.geteuid() == 0:
        shutil.chown(path, "postgres", "postgres")
    return path


class Cluster:
    """One PostgreSQL cluster on 127.0.0.1:`port`, trust auth, superuser `hermes`."""

    def __init__(self) -> None:
        bindir = _bin_dir()
        if bindir is None:
            _unavailable("no PostgreSQL server binaries (initdb, pg_ctl) on this machine")
        assert bindir is not None
        self.bindir = bindir
        self.dir = _private_dir("hermes-pg-")
        self.data = self.dir / "data"
        self.log = self.dir / "server.log"
        self.port = free_port()
        self.database = "hermes"  # what url() names unless told otherwise
        self._run("initdb", "-D", str(self.data), "-A", "trust", "-U", USER, "-E", "UTF8",
                  "--no-sync", "--locale=C")
        self.start()
        self.admin("CREATE DATABASE hermes")

    def _run(self, tool: str, *args: str) -> None:
        proc = subprocess.run(
            [str(self.bindir / tool), *args],
            capture_output=True, text=True, timeout=120, check=False, cwd=self.dir,
            **_server_user(),
        )
        if proc.returncode != 0:
            raise RuntimeError(f"{tool} failed: {proc.stdout}{proc.stderr}{self.server_log()}")

    def server_log(self, tail: int | None = 3000) -> str:
        try:
            text = self.log.read_text(errors="replace")
            return text[-tail:] if tail else text
        except OSError:
            return ""

    def url(self, database: str | None = None, port: int | None = None, query: str = "") -> str:
        return (
            f"postgresql+psycopg://{USER}@127.0.0.1:{port or self.port}/{database or self.database}"
            + (f"?{query}" if query else "")
        )

    def _options(self) -> str:
        return (
            f"-p {self.port} -k {self.dir} -c listen_addresses=127.0.0.1 -c fsync=off"
            " -c max_connections=60"
            # WAL reaches the kernel at COMMIT only, so an immediate stop loses the WAL of
            # open transactions (and the restarted server hands out their ids again)
            " -c wal_writer_delay=10000"
            # A connection that arrives during an immediate shutdown gets a child that
            # waits for its startup packet up to authentication_timeout (60 s), and the
            # shutdown waits for that child: a minute-long stall that is the server's, not
            # the tests' business
            " -c authentication_timeout=3s"
        )

    def start(self) -> None:
        self._run("pg_ctl", "-D", str(self.data), "-l", str(self.log), "-w", "-t", "60",
                  "-o", self._options(), "start")

    def stop(self, mode: str = "fast") -> None:
        self._run("pg_ctl", "-D", str(self.data), "-m", mode, "-w", "-t", "60", "stop")

    def restart(self, mode: str = "fast") -> None:
        """A restart as an operator does one: stop (every connection is cut), then start."""
        self.stop(mode)
        self.start()

    def is_running(self) -> bool:
        proc = subprocess.run(
            [str(self.bindir / "pg_ctl"), "-D", str(self.data), "status"],
            capture_output=True, timeout=60, check=False, cwd=self.dir, **_server_user(),
        )
        return proc.returncode == 0

    def fresh_database(self, template: str) -> str:
        """A new database cloned from `template`; url() names it from now on."""
        name = f"t_{uuid.uuid4().hex[:12]}"
        self.admin(f'CREATE DATABASE "{name}" TEMPLATE "{template}"')
        self.database = name
        return name

    def admin(self, sql: str, database: str = "postgres") -> list[tuple[object, ...]]:
        import psycopg

        with psycopg.connect(
            host="127.0.0.1", port=self.port, user=USER, dbname=database, autocommit=True
        ) as conn:
            cur = conn.execute(sql)
            return cur.fetchall() if cur.description else []

    def terminate_store_backends(self) -> int:
        """pg_terminate_backend for every hermes-store connection; how many were ended."""
        rows = self.admin(
            "SELECT count(*) FILTER (WHERE pg_terminate_backend(pid)) FROM pg_stat_activity"
            " WHERE application_name = 'hermes-store' AND pid <> pg_backend_pid()"
        )
        return int(rows[0][0])  # type: ignore[call-overload]

    def remove(self) -> None:
        if (self.data / "postmaster.pid").exists():
            subprocess.run(
                [str(self.bindir / "pg_ctl"), "-D", str(self.data), "-m", "immediate", "-w",
                 "stop"],
                capture_output=True, timeout=60, check=False, **_server_user(),
            )
        shutil.rmtree(self.dir, ignore_errors=True)


@contextmanager
def throwaway_cluster() -> Iterator[Cluster]:
    cluster = Cluster()
    try:
        yield cluster
    finally:
        cluster.remove()


# --------------------------------------------------------------------------- proxy

_SSL_REQUEST = 80877103
_GSSENC_REQUEST = 80877104


class CommitCutter:
    """A TCP proxy on 127.0.0.1 in front of a server that cuts the client's connection at
    the next `cuts` COMMITs (a simple-protocol Query "COMMIT", which psycopg sends):

    - "after_reply": the COMMIT reaches the server, which commits and answers; the answer
      is dropped and the client's connection closed. The write happened; the client cannot
      know.
    - "before_forward": the COMMIT is dropped and the client's connection closed, while the
      server's side stays open (the backend keeps its transaction open, in progress).
    """

    def __init__(
        self, upstream_port: int, mode: str, on_cut: Callable[[], None] | None = None
    ) -> None:
        assert mode in ("after_reply", "before_forward")
        self.upstream_port = upstream_port
        self.mode = mode
        self.on_cut = on_cut  # run at the cut, before the client's connection is closed
        self.cuts = 0
        self.cut_done = 0
        self._lock = threading.Lock()
        self._listener = socket.socket()
        self._listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._listener.bind(("127.0.0.1", 0))
        self._listener.listen(64)
        self.port = int(self._listener.getsockname()[1])
        self._held: list[socket.socket] = []  # server sides kept open ("before_forward")
        self._closing = False
        threading.Thread(target=self._accept, daemon=True).start()

    def arm(self, cuts: int = 1) -> None:
        with self._lock:
            self.cuts = cuts

    def _take_cut(self) -> bool:
        with self._lock:
            if self.cuts <= 0:
                return False
            self.cuts -= 1
            self.cut_done += 1
            return True

    def _accept(self) -> None:
        while not self._closing:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            server = socket.create_connection(("127.0.0.1", self.upstream_port))
            threading.Thread(target=self._pump, args=(client, server), daemon=True).start()

    @staticmethod
    def _read_exact(sock: socket.socket, n: int) -> bytes:
        data = b""
        while len(data) < n:
            chunk = sock.recv(n - len(data))
            if not chunk:
                raise ConnectionError("closed")
            data += chunk
        return data

    def _pump(self, client: socket.socket, server: socket.socket) -> None:
        """Client to server, message by message; a thread copies the other direction."""
        drop_reply = threading.Event()
        reply_seen = threading.Event()
        threading.Thread(
            target=self._pump_back, args=(server, client, drop_reply, reply_seen), daemon=True
        ).start()
        try:
            # untyped messages first: SSL/GSS requests (answered by one byte), then startup
            while True:
                head = self._read_exact(client, 8)
                length, code = struct.unpack("!ii", head)
                server.sendall(head + self._read_exact(client, length - 8))
                if code not in (_SSL_REQUEST, _GSSENC_REQUEST):
                    break
            while True:
                head = self._read_exact(client, 5)
                kind, length = head[:1], struct.unpack("!i", head[1:])[0]
                body = self._read_exact(client, length - 4)
                if kind == b"Q" and body.rstrip(b"\x00").strip().upper() == b"COMMIT":
                    if self._take_cut():
                        if self.mode == "before_forward":
                            with self._lock:
                                self._held.append(server)
                            drop_reply.set()
                            if self.on_cut is not None:
                                self.on_cut()
                            client.close()
                            return
                        drop_reply.set()
                        server.sendall(head + body)
                        reply_seen.wait(30)
                        if self.on_cut is not None:
                            self.on_cut()
                        client.close()
                        server.close()
                        return
                server.sendall(head + body)
        except (OSError, ConnectionError):
            pass
        for sock in (client, server):
            if sock not in self._held:
                try:
                    sock.close()
                except OSError:
                    pass

    def _pump_back(
        self,
        server: socket.socket,
        client: socket.socket,
        drop_reply: threading.Event,
        reply_seen: threading.Event,
    ) -> None:
        try:
            while True:
                data = server.recv(65536)
                if not data:
                    break
                if drop_reply.is_set():
                    # The server's answer to the COMMIT (CommandComplete, ReadyForQuery):
                    # it committed. Dropped.
                    if b"Z" in data:
                        reply_seen.set()
                        return
                    continue
                client.sendall(data)
        except OSError:
            pass
        finally:
            reply_seen.set()

    def close(self) -> None:
        self._closing = True
        self._listener.close()
        with self._lock:
            for sock in self._held:
                sock.close()


# --------------------------------------------------------------------------- PgBouncer


class PgBouncer:
    """PgBouncer on 127.0.0.1 in front of `cluster`, transaction pooling, with the settings
    docs/postgresql.md gives hermes-store users."""

    def __init__(self, cluster: Cluster, pool_size: int = 2) -> None:
        binary = pgbouncer_binary()
        if binary is None:
            _unavailable(
                f"no pgbouncer: .ci/fetch-pgbouncer unpacks one into the clone (or set"
                f" {PGBOUNCER_ENV}, or install the pgbouncer package)"
            )
        assert binary is not None
        self.cluster = cluster
        self.dir = _private_dir("hermes-pgbouncer-")
        self.port = free_port()
        self.log = self.dir / "pgbouncer.log"
        ini = self.dir / "pgbouncer.ini"
        ini.write_text(
            "[databases]\n"
            # every database of the cluster, by its own name
            f"* = host=127.0.0.1 port={cluster.port} user={USER}"
            " connect_query='SET lock_timeout = 10000'\n"
            "[pgbouncer]\n"
            "listen_addr = 127.0.0.1\n"
            f"listen_port = {self.port}\n"
            f"unix_socket_dir = {self.dir}\n"
            "auth_type = any\n"
            "pool_mode = transaction\n"
            f"default_pool_size = {pool_size}\n"
            "max_client_conn = 200\n"
            "ignore_startup_parameters = options\n"
            # after a failed server login PgBouncer waits this long before the next (15 s
            # by default): the time a restart keeps the clients waiting
            "server_login_retry = 1\n"
            f"logfile = {self.log}\n"
            f"pidfile = {self.dir / 'pgbouncer.pid'}\n"
        )
        if os.geteuid() == 0:
            shutil.chown(ini, "postgres", "postgres")
        self.proc = subprocess.Popen(
            [binary, str(ini)], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
            **_server_user(),
        )
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                return
            except OSError:
                if self.proc.poll() is not None:
                    assert self.proc.stderr is not None
                    raise RuntimeError(f"pgbouncer exited: {self.proc.stderr.read()!r}") from None
                time.sleep(0.05)
        raise RuntimeError("pgbouncer did not start listening")

    def url(self) -> str:
        # no server-side prepared statements: PgBouncer before 1.21 cannot carry them
        # across the server connections of a transaction pool
        return self.cluster.url(port=self.port, query="prepare_threshold=none")

    def server_connections(self) -> int:
        rows = self.cluster.admin(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
            " AND backend_type = 'client backend' AND pid <> pg_backend_pid()",
            database=self.cluster.database,
        )
        return int(rows[0][0])  # type: ignore[call-overload]

    def close(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=10)
        shutil.rmtree(self.dir, ignore_errors=True)
