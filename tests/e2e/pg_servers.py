"""PostgreSQL servers and PgBouncer of a test's own: a primary with a synchronous streaming
standby made by `initdb` and `pg_basebackup`, and a transaction-mode pooler in front of a
server, each a child process on free ports of 127.0.0.1, ended by the test.

PostgreSQL and PgBouncer refuse to run as root: under root they run as the `postgres` user,
in a directory of their own that user owns.
"""

from __future__ import annotations

import atexit
import contextlib
import glob
import os
import pwd
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path

import pytest

from tests.conftest import service_missing
from tests.e2e.processes import free_port

RUN_AS = "postgres"


def _binary(name: str) -> str | None:
    found = shutil.which(name)
    if found:
        return found
    versions = sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{name}"))
    return versions[-1] if versions else None


def binaries(*names: str) -> dict[str, str]:
    """The PostgreSQL or PgBouncer programs named, or a skip (a failure under
    CHRONOQ_REQUIRE_SERVICES) naming the missing one."""
    found: dict[str, str] = {}
    for name in names:
        path = _binary(name) or (
            f"/usr/sbin/{name}" if Path(f"/usr/sbin/{name}").exists() else None
        )
        if path is None:
            service_missing(name, "not installed")
        found[name] = str(path)
    return found


def _as_owner(command: list[str]) -> list[str]:
    if os.geteuid() != 0:
        return command
    return ["runuser", "-u", RUN_AS, "--", *command]


def _own(path: Path) -> None:
    if os.geteuid() == 0:
        user = pwd.getpwnam(RUN_AS)
        os.chown(path, user.pw_uid, user.pw_gid)


def _run(command: list[str], **kwargs: object) -> None:
    result = subprocess.run(
        _as_owner(command), capture_output=True, text=True, check=False, **kwargs
    )  # type: ignore[call-overload]
    if result.returncode != 0:
        pytest.fail(f"{command[0]} failed ({result.returncode}):\n{result.stdout}\n{result.stderr}")


class Workspace:
    """A directory the servers' user owns, removed at the end."""

    def __init__(self) -> None:
        self.root = Path(tempfile.mkdtemp(prefix="chronoq-pg-"))
        self.root.chmod(0o755)
        _own(self.root)

    def directory(self, name: str) -> Path:
        path = self.root / name
        path.mkdir(mode=0o700)
        _own(path)
        return path

    def write(self, name: str, text: str) -> Path:
        path = self.root / name
        path.write_text(text, encoding="utf-8")
        _own(path)
        return path

    def remove(self) -> None:
        shutil.rmtree(self.root, ignore_errors=True)


class PgServer:
    """One PostgreSQL server run by `pg_ctl` from its data directory."""

    def __init__(self, workspace: Workspace, name: str, data: Path, port: int) -> None:
        self.workspace = workspace
        self.name = name
        self.data = data
        self.port = port
        self.log = workspace.root / f"{name}.log"
        self._tools = binaries("pg_ctl", "psql")

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self) -> None:
        _run(
            [
                self._tools["pg_ctl"],
                "-D",
                str(self.data),
                "-l",
                str(self.log),
                "-w",
                "-t",
                "60",
                "start",
            ]
        )

    def kill(self) -> None:
        """Gone at once, as when its machine dies: no checkpoint, no goodbye to clients."""
        _run([self._tools["pg_ctl"], "-D", str(self.data), "-m", "immediate", "-w", "stop"])

    def stop(self) -> None:
        with contextlib.suppress(Exception):
            subprocess.run(
                _as_owner(
                    [self._tools["pg_ctl"], "-D", str(self.data), "-m", "immediate", "-w", "stop"]
                ),
                capture_output=True,
                check=False,
                timeout=30,
            )

    def promote(self) -> None:
        _run([self._tools["pg_ctl"], "-D", str(self.data), "-w", "promote"])

    def sql(self, statement: str, database: str = "postgres") -> str:
        result = subprocess.run(
            [self._tools["psql"], "-h", "127.0.0.1", "-p", str(self.port), "-U", "postgres",
             "-d", database, "-Atc", statement],
            capture_output=True, text=True, check=False, timeout=30,
        )  # fmt: skip
        if result.returncode != 0:
            pytest.fail(f"psql on {self.name}: {result.stderr}")
        return result.stdout.strip()

    def log_tail(self, lines: int = 30) -> str:
        try:
            text = self.log.read_text(encoding="utf-8", errors="replace")
        except OSError:
            return ""
        return f"--- {self.name} ---\n" + "\n".join(text.splitlines()[-lines:])


_SERVER_SETTINGS = """
listen_addresses = '127.0.0.1'
port = {port}
unix_socket_directories = '{sockets}'
max_connections = 100
wal_level = replica
max_wal_senders = 4
hot_standby = on
fsync = off
full_page_writes = off
shared_buffers = 32MB
"""


# The data directory `initdb` made, once per process; each server starts from a copy. An
# initdb takes seconds (most of a server's start), a copy a fraction of one.
_template: Path | None = None


def _initdb_template() -> Path:
    global _template
    if _template is None:
        tools = binaries("initdb")
        workspace = Workspace()
        atexit.register(workspace.remove)
        data = workspace.directory("template")
        _run(
            [
                tools["initdb"],
                "-D",
                str(data),
                "-U",
                "postgres",
                "--auth=trust",
                "-E",
                "UTF8",
                "--no-sync",
            ]
        )
        _template = data
    return _template


def server(workspace: Workspace, name: str = "primary", *, settings: str = "") -> PgServer:
    """A new PostgreSQL server (a copy of what `initdb` makes), running."""
    data = workspace.root / name
    _run(["cp", "-a", str(_initdb_template()), str(data)])
    started = PgServer(workspace, name, data, free_port())
    with (data / "postgresql.conf").open("a", encoding="utf-8") as conf:
        conf.write(_SERVER_SETTINGS.format(port=started.port, sockets=workspace.root))
        conf.write(settings)
    started.start()
    return started


def primary_with_standby(workspace: Workspace) -> tuple[PgServer, PgServer]:
    """A primary and its streaming standby, both running. Commits wait for the standby
    (`synchronous_standby_names`), so what the primary acknowledged survives its loss."""
    tools = binaries("pg_basebackup")
    primary = server(workspace, settings="synchronous_standby_names = '*'\n")
    data = primary.data
    with (data / "pg_hba.conf").open("a", encoding="utf-8") as hba:
        hba.write("host replication all 127.0.0.1/32 trust\n")
    primary.sql("SELECT pg_reload_conf()")
    standby_data = workspace.directory("standby")
    standby_data.rmdir()  # pg_basebackup makes it, owned by the servers' user
    _run([tools["pg_basebackup"], "-h", "127.0.0.1", "-p", str(primary.port), "-U", "postgres",
          "-D", str(standby_data), "-R", "-X", "stream", "--no-sync"])  # fmt: skip
    standby = PgServer(workspace, "standby", standby_data, free_port())
    with (standby_data / "postgresql.conf").open("a", encoding="utf-8") as conf:
        conf.write(f"port = {standby.port}\n")
        # A standby promoted later waits for no standby of its own.
        conf.write("synchronous_standby_names = ''\n")
    standby.start()
    deadline = time.monotonic() + 60
    while primary.sql("SELECT count(*) FROM pg_stat_replication WHERE sync_state = 'sync'") != "1":
        if time.monotonic() > deadline:
            pytest.fail("the standby never streamed synchronously\n" + standby.log_tail())
        time.sleep(0.1)
    return primary, standby


class PgBouncer:
    """PgBouncer in transaction mode in front of one server, its pool of `pool_size` server
    connections per database and user; `SHOW` commands through its admin console."""

    def __init__(
        self, workspace: Workspace, server_port: int, database: str, pool_size: int
    ) -> None:
        self._binary = binaries("pgbouncer")["pgbouncer"]
        self.port = free_port()
        self.pool_size = pool_size
        self.workspace = workspace
        users = workspace.write("users.txt", '"postgres" ""\n')
        self.log = workspace.root / "pgbouncer.log"
        config = workspace.write(
            "pgbouncer.ini",
            f"""[databases]
{database} = host=127.0.0.1 port={server_port} dbname={database}
[pgbouncer]
listen_addr = 127.0.0.1
listen_port = {self.port}
unix_socket_dir =
auth_type = trust
auth_file = {users}
admin_users = postgres
pool_mode = transaction
default_pool_size = {pool_size}
max_client_conn = 500
logfile = {self.log}
pidfile = {workspace.root}/pgbouncer.pid
""",
        )
        self.process = subprocess.Popen(
            _as_owner([self._binary, str(config)]),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )

    def wait_listening(self, timeout: float = 30.0) -> None:
        import socket

        deadline = time.monotonic() + timeout
        while True:
            if self.process.poll() is not None:
                pytest.fail(f"pgbouncer exited ({self.process.returncode})\n{self.log_tail()}")
            with socket.socket() as sock:
                if sock.connect_ex(("127.0.0.1", self.port)) == 0:
                    return
            if time.monotonic() > deadline:
                pytest.fail(f"pgbouncer not listening after {timeout:g}s\n{self.log_tail()}")
            time.sleep(0.05)

    def url(self, database: str) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/{database}"

    def stop(self) -> None:
        if self.process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait(timeout=10)

    def log_tail(self, lines: int = 30) -> str:
        try:
            text = self.log.read_text(encoding="utf-8", errors="replace")
        except OSError:
            return ""
        return "--- pgbouncer ---\n" + "\n".join(text.splitlines()[-lines:])
