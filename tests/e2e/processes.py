"""The service as real subprocesses: each on a free local port, stopped by signal, logs kept.

Waits are asynchronous so that an in-process receiver on the test's event loop keeps
answering deliveries while a replica starts or stops.
"""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import IO

import httpx

CHRONOQ = Path(sys.executable).with_name("chronoq")
INHERITED_SETTINGS = ("CHRONOQ_", "DATABASE_URL", "AMQP_URL")


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def service_environment(settings: Mapping[str, str]) -> dict[str, str]:
    """This environment without any Chronoq setting of its own, plus `settings`."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(INHERITED_SETTINGS)}
    env["PYTHONUNBUFFERED"] = "1"
    env.update(settings)
    return env


class Service:
    """One `chronoq serve` process on 127.0.0.1; its stdout and stderr go to `log_path`."""

    def __init__(
        self, name: str, settings: Mapping[str, str], log_path: Path, port: int | None = None
    ) -> None:
        self.name = name
        self.port = port or free_port()
        self.log_path = log_path
        self._log: IO[bytes] = log_path.open("ab")
        command = [str(CHRONOQ), "serve", "--host", "127.0.0.1", "--port", str(self.port)]
        self.process = subprocess.Popen(
            command,
            env=service_environment(settings),
            stdin=subprocess.DEVNULL,
            stdout=self._log,
            stderr=subprocess.STDOUT,
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

    async def wait_healthy(self, timeout: float) -> None:
        """Until GET /healthz answers 200; raises with the log when the process exits first."""
        deadline = time.monotonic() + timeout
        async with httpx.AsyncClient(base_url=self.base_url, trust_env=False) as client:
            while True:
                if not self.alive:
                    raise ServiceExitedError(
                        f"{self.name} exited while starting\n{self.log_tail()}"
                    )
                try:
                    response = await client.get("/healthz", timeout=2.0)
                    if response.status_code == 200:
                        return
                except httpx.TransportError:
                    pass
                if time.monotonic() > deadline:
                    raise ServiceExitedError(
                        f"{self.name} not healthy after {timeout:g}s\n{self.log_tail()}"
                    )
                await asyncio.sleep(0.05)

    def kill(self) -> None:
        """SIGKILL: no lifespan shutdown, no release of claims, no last settle."""
        if self.alive:
            os.kill(self.pid, signal.SIGKILL)
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
    ) -> Service:
        """Start a replica and wait until it serves; a port taken meanwhile gets another
        (unless `port` pins it, as for a replica restarted on its old address)."""
        for attempt in range(1, tries + 1):
            suffix = "" if attempt == 1 else f".{attempt}"
            service = Service(name, settings, self._log_dir / f"{name}{suffix}.log", port)
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
