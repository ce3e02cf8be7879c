"""The service as real subprocesses: each on a free local port, stopped by signal, logs kept.

Waits are asynchronous so that an in-process receiver on the test's event loop keeps
answering deliveries while a replica starts or stops.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import IO

import httpx

CHRONOQ = Path(sys.executable).with_name("chronoq")
INHERITED_SETTINGS = ("CHRONOQ_", "DATABASE_URL", "AMQP_URL")


# Ports handed out by `free_port` under pytest-xdist: each worker (gw0, gw1, ...) takes its own
# block just below the kernel's ephemeral range, so two workers never pick the same port (a
# replica restarted on its old port, nginx told its port before it starts), and no outgoing
# connection of any process is ever given one of them.
PORTS_PER_WORKER = 500
_EPHEMERAL_RANGE = Path("/proc/sys/net/ipv4/ip_local_port_range")
_handed_out: set[int] = set()
_cursor: dict[int, int] = {}  # block start -> offset of the next port to try


def _ephemeral_floor() -> int:
    try:
        return int(_EPHEMERAL_RANGE.read_text(encoding="ascii").split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def worker_ports(worker: str | None = None) -> range | None:
    """The block of ports of this xdist worker, or None outside xdist (or when the ephemeral
    range leaves no room below it): `free_port` then asks the kernel for any free port."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "") if worker is None else worker
    if not (worker.startswith("gw") and worker[2:].isdigit()):
        return None
    top = _ephemeral_floor() - int(worker[2:]) * PORTS_PER_WORKER
    if top - PORTS_PER_WORKER < 1024:
        return None
    return range(top - PORTS_PER_WORKER, top)


def _bindable(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


def free_port() -> int:
    """A port of 127.0.0.1 that nothing is bound to.

    Between this call and the bind of the process it is for, the port is free for anyone:
    under xdist it comes from this worker's own block (see `worker_ports`), so the other
    worker cannot take it meanwhile, nor can this worker hand it out twice in a test."""
    block = worker_ports()
    if block is None:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.bind(("127.0.0.1", 0))
            port: int = sock.getsockname()[1]
            return port
    # Onward from where the last call stopped; the first call starts at a place of the block
    # that differs from one run to the next, so a second run on the machine with the same
    # worker names does not walk the same ports in step. Once every port of the block was
    # handed out, the ones free again are handed out a second time.
    start = _cursor.setdefault(block.start, random.randrange(len(block)))
    for reuse in (False, True):
        for step in range(len(block)):
            port = block[(start + step) % len(block)]
            if (reuse or port not in _handed_out) and _bindable(port):
                _handed_out.add(port)
                _cursor[block.start] = start + step + 1
                return port
    raise RuntimeError(f"no free port left in {block}")


def service_environment(settings: Mapping[str, str]) -> dict[str, str]:
    """This environment without any Chronoq setting of its own, plus `settings`."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(INHERITED_SETTINGS)}
    env["PYTHONUNBUFFERED"] = "1"
    env.update(settings)
    return env


class Service:
    """One `chronoq serve` process on 127.0.0.1; its stdout and stderr go to `log_path`."""

    def __init__(
        self,
        name: str,
        settings: Mapping[str, str],
        log_path: Path,
        port: int | None = None,
        *,
        ulimit: str | None = None,
        program: Path = CHRONOQ,
        cwd: Path | None = None,
    ) -> None:
        """`ulimit`: the shell's ulimit arguments to start the process with (`-n 400`);
        `program`: the `chronoq` command to run (another installation's); `cwd`: where."""
        self.name = name
        self.port = port or free_port()
        self.log_path = log_path
        self._log: IO[bytes] = log_path.open("ab")
        command = [str(program), "serve", "--host", "127.0.0.1", "--port", str(self.port)]
        if ulimit is not None:
            # The shell sets the limit and becomes the service (exec): the pid is the service's.
            command = ["/bin/sh", "-c", f'ulimit {ulimit} && exec "$@"', "sh", *command]
        self.process = subprocess.Popen(
            command,
            env=service_environment(settings),
            cwd=cwd,
            stdin=subprocess.DEVNULL,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            # A group of its own: a kill ends every process of the replica at once (its
            # delivery process too), as when its container or machine dies.
            start_new_session=True,
        )

    @property
    def pid(self) -> int:
        return self.process.pid

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def alive(self) -> bool:
        return self.process.poll() is None

    def log_tail(self, lines: int = 40) -> str:
        if not self._log.closed:
            self._log.flush()
        text = self.log_path.read_text(encoding="utf-8", errors="replace")
        tail = "\n".join(text.splitlines()[-lines:])
        return f"--- {self.name} (pid {self.pid}, exit {self.process.returncode}) ---\n{tail}"

    async def wait_ready(self, timeout: float) -> None:
        """Until GET /readyz answers 200 (its delivery loop too, in a delivery process of its
        own where it has one); raises with the log when the process exits first."""
        await self.wait_healthy(timeout, path="/readyz")

    async def wait_healthy(self, timeout: float, path: str = "/healthz") -> None:
        """Until GET `path` answers 200; raises with the log when the process exits first."""
        deadline = time.monotonic() + timeout
        async with httpx.AsyncClient(base_url=self.base_url, trust_env=False) as client:
            while True:
                if not self.alive:
                    raise ServiceExitedError(
                        f"{self.name} exited while starting\n{self.log_tail()}"
                    )
                try:
                    response = await client.get(path, timeout=2.0)
                    if response.status_code == 200:
                        return
                except httpx.TransportError:
                    pass
                if time.monotonic() > deadline:
                    raise ServiceExitedError(
                        f"{self.name}: {path} not 200 after {timeout:g}s\n{self.log_tail()}"
                    )
                await asyncio.sleep(0.05)

    def kill(self) -> None:
        """SIGKILL to each of its processes: no lifespan shutdown, no release of claims, no
        last settle."""
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.pid, signal.SIGKILL)
        self.process.wait(timeout=10)

    async def terminate(self, timeout: float) -> int:
        """SIGTERM, then wait for a graceful exit; SIGKILL and raise when it takes too long."""
        if self.alive:
            os.kill(self.pid, signal.SIGTERM)
        deadline = time.monotonic() + timeout
        while self.alive:
            if time.monotonic() > deadline:
                self.kill()
                raise ServiceExitedError(
                    f"{self.name} did not stop within {timeout:g}s of SIGTERM\n{self.log_tail()}"
                )
            await asyncio.sleep(0.05)
        return self.process.returncode

    def close(self) -> None:
        try:
            self.kill()
        finally:
            self._log.close()


class ServiceExitedError(RuntimeError):
    """A service process did not start, or did not stop, as expected."""


class Services:
    """Every process a test started, so that teardown kills the ones still running."""

    def __init__(self, log_dir: Path) -> None:
        self._log_dir = log_dir
        self.started: list[Service] = []
        self.running: list[Service] = []  # started, healthy, and not stopped on purpose

    async def start(
        self,
        name: str,
        settings: Mapping[str, str],
        *,
        timeout: float = 30.0,
        tries: int = 3,
        port: int | None = None,
        ulimit: str | None = None,
        program: Path = CHRONOQ,
        cwd: Path | None = None,
    ) -> Service:
        """Start a replica and wait until it serves; a port taken meanwhile gets another
        (unless `port` pins it, as for a replica restarted on its old address)."""
        for attempt in range(1, tries + 1):
            suffix = "" if attempt == 1 else f".{attempt}"
            log_path = self._log_dir / f"{name}{suffix}.log"
            service = Service(
                name, settings, log_path, port, ulimit=ulimit, program=program, cwd=cwd
            )
            self.started.append(service)
            try:
                await service.wait_healthy(timeout)
            except ServiceExitedError:
                service.close()
                taken = "address already in use" in service.log_tail().lower()
                if not taken or attempt == tries:
                    raise
            else:
                self.running.append(service)
                return service
        raise AssertionError("unreachable")

    def kill(self, service: Service) -> None:
        self.running.remove(service)
        service.kill()

    async def stop(self, service: Service, timeout: float) -> int:
        self.running.remove(service)
        return await service.terminate(timeout)

    def logs(self) -> str:
        return "\n".join(service.log_tail() for service in self.started)

    def close(self) -> None:
        for service in self.started:
            service.close()


@contextlib.contextmanager
def shared_services(
    log_dir: Path, replicas: Mapping[str, Mapping[str, str]]
) -> Iterator[list[Service]]:
    """Replicas (name -> settings) for several cases, a module-scoped fixture's: started side
    by side and waited for on an event loop of their own, since no case's loop runs yet;
    killed when the cases are done. Only for cases that leave them as they found them: their
    starts, mostly imports, are then paid once rather than once a case."""
    from tests.conftest import run_sync

    services = Services(log_dir)
    started: list[Service] = []

    async def start() -> None:
        started.extend(
            await asyncio.gather(
                *(services.start(name, settings) for name, settings in replicas.items())
            )
        )

    try:
        run_sync(start)
        yield started
    finally:
        services.close()
