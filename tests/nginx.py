"""deploy/nginx.conf (or nginx-local.conf) run for real by a test: rendered for replicas on
local ports and an unprivileged nginx of the test's own (`render_nginx_conf`), started in the
foreground as a child of the test (`Nginx`, `start_nginx`), and found on this machine
(`find_nginx`, which skips, or under CHRONOQ_REQUIRE_SERVICES=1 fails, when there is none).

Used by tests/e2e/test_fault_balancer.py (replicas killed behind it),
tests/e2e/test_shipped_balancers.py (deploy/nginx-local.conf serving, and floods of slow
clients), tests/browser (the console through it) and tests/contract/test_deploy.py (`nginx -t`
of the TLS example and of the local balancer).
"""

from __future__ import annotations

import asyncio
import os
import re
import shutil
import signal
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path
from typing import IO

import httpx
import pytest

from tests.conftest import service_missing
from tests.e2e.processes import free_port

DEPLOY = Path(__file__).resolve().parents[1] / "deploy"
NGINX_CONF = DEPLOY / "nginx.conf"
# deploy/nginx.conf for an nginx outside compose: replicas on 127.0.0.1 ports, no `resolve`.
NGINX_LOCAL_CONF = DEPLOY / "nginx-local.conf"
# The upstream servers of either: compose service names or local ports.
_SERVER = r"server\s+(?:chronoq-\d+|127\.0\.0\.1):\d+"


def find_nginx() -> str:
    """The nginx executable: on PATH or in the usual sbin directories."""
    found = shutil.which("nginx") or next(
        (p for p in ("/usr/sbin/nginx", "/usr/local/sbin/nginx") if os.access(p, os.X_OK)), None
    )
    if found is None:
        service_missing("nginx", "no nginx executable on PATH or in /usr/sbin")
    assert found is not None
    return found


def render_nginx_conf(text: str, *, listen: int, upstreams: Sequence[int], prefix: Path) -> str:
    """deploy/nginx.conf (or nginx-local.conf) for replicas on `upstreams` and an nginx run
    from `prefix`.

    The upstream servers become 127.0.0.1 ports with the same parameters, nginx listens
    on 127.0.0.1:`listen`, and its pid, access log and temporary files stay under `prefix`.
    Each replacement must match exactly once, so a change to the file that this rendering no
    longer understands fails here rather than testing something else.
    """

    def once(pattern: str, replacement: str, source: str) -> str:
        result, count = re.subn(pattern, lambda _: replacement, source, flags=re.MULTILINE)
        assert count == 1, f"{pattern!r} matched {count} times"
        return result

    servers = re.findall(rf"^([ \t]*){_SERVER}([^;\n]*);$", text, re.MULTILINE)
    assert servers, "no chronoq upstream server"
    indent, parameters = servers[0]
    # Local replicas are addresses, with nothing to look up again (and an nginx before 1.27.3
    # knows no `resolve`).
    parameters = re.sub(r"\s+resolve\b", "", parameters)
    local = "".join(f"{indent}server 127.0.0.1:{port}{parameters};\n" for port in upstreams)
    text = once(rf"(?:^[ \t]*{_SERVER}[^;\n]*;\n)+", local, text)
    text = once(
        r"^[ \t]*listen\s+(?:127\.0\.0\.1:)?8080;$", f"        listen 127.0.0.1:{listen};", text
    )
    text = once(
        r"^[ \t]*access_log\s[^;\n]*;$", f"    access_log {prefix}/access.log chronoq;", text
    )
    temp_paths = "".join(
        f"    {kind}_temp_path {prefix}/{kind};\n"
        for kind in ("client_body", "proxy", "fastcgi", "uwsgi", "scgi")
    )
    text = once(r"^http \{\n", "http {\n" + temp_paths, text)
    # As root, workers would switch to an unprivileged user that cannot reach the temp dir.
    user = "user root;\n" if os.geteuid() == 0 else ""
    return f"{user}pid {prefix}/nginx.pid;\n{text}"


class Nginx:
    """`nginx -g "daemon off;"` as a child process of the test, in its own process group."""

    def __init__(self, binary: str, config: Path, prefix: Path, port: int) -> None:
        self.port = port
        self.prefix = prefix
        self._log: IO[bytes] = (prefix / "nginx.out").open("ab")
        error_log = str(prefix / "error.log")
        command = [binary, "-c", str(config), "-p", f"{prefix}/", "-e", error_log]
        command += ["-g", "daemon off;"]
        self.process = subprocess.Popen(
            command,
            stdin=subprocess.DEVNULL,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # its workers share the master's process group
        )

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def errors(self) -> str:
        text = ""
        for name in ("nginx.out", "error.log"):
            path = self.prefix / name
            if path.exists():
                text += path.read_text(encoding="utf-8", errors="replace")
        return f"--- nginx (pid {self.process.pid}) ---\n" + "\n".join(text.splitlines()[-40:])

    async def wait_serving(self, timeout: float) -> None:
        """Until GET /healthz through nginx answers 200."""
        deadline = time.monotonic() + timeout
        async with httpx.AsyncClient(base_url=self.base_url, trust_env=False) as client:
            while True:
                if self.process.poll() is not None:
                    pytest.fail(f"nginx exited while starting\n{self.errors()}")
                try:
                    if (await client.get("/healthz", timeout=2.0)).status_code == 200:
                        return
                except httpx.TransportError:
                    pass
                if time.monotonic() > deadline:
                    pytest.fail(f"nginx not serving after {timeout:g}s\n{self.errors()}")
                await asyncio.sleep(0.05)

    def retried(self) -> int:
        """Requests nginx passed on to another replica (access log: several upstreams)."""
        log = self.prefix / "access.log"
        if not log.exists():
            return 0
        return len(re.findall(r" upstream=\S+, ", log.read_text(encoding="utf-8")))

    def stop(self) -> None:
        """SIGTERM to the master (fast shutdown), then SIGKILL to its process group."""
        try:
            if self.process.poll() is None:
                os.kill(self.process.pid, signal.SIGTERM)
                try:
                    self.process.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    os.killpg(self.process.pid, signal.SIGKILL)
                    self.process.wait(timeout=10)
        finally:
            self._log.close()


def start_nginx(
    binary: str, upstreams: Sequence[int], prefix: Path, source: Path = NGINX_CONF
) -> Nginx:
    """`source` rendered under `prefix` (made here) for replicas on `upstreams`, and nginx
    started on it on a free port; wait for it with `wait_serving`, end it with `stop`."""
    prefix.mkdir(parents=True, exist_ok=True)
    port = free_port()
    config = prefix / "nginx.conf"
    rendered = render_nginx_conf(
        source.read_text(encoding="utf-8"), listen=port, upstreams=upstreams, prefix=prefix
    )
    config.write_text(rendered, encoding="utf-8")
    return Nginx(binary, config, prefix, port)
