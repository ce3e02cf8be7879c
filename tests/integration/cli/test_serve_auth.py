"""`chronoq serve` and API keys: an open API only on loopback, unless the operator says so."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from app.cli import command as cli
from app.cli import serve
from tests.e2e.processes import free_port
from tests.integration.cli.commands import in_process, start

KEY = "serve-0123456789abcdef"


@pytest.mark.parametrize("host", ["0.0.0.0", "::", "192.0.2.10", "example.internal"])
def test_serve_without_keys_refuses_a_non_loopback_host_naming_the_variable(
    tmp_path: Path, host: str
) -> None:
    # In-process: the refusal comes before anything binds or serves.
    result = in_process(
        "serve", "--host", host, "--port", str(free_port()), DATABASE_URL=f"sqlite:///{tmp_path}/x"
    )

    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert "CHRONOQ_API_KEYS" in lines[0]
    assert "Uvicorn running" not in result.stderr


def test_serve_refuses_a_malformed_key_without_echoing_it(tmp_path: Path) -> None:
    result = in_process(
        "serve",
        "--port",
        str(free_port()),
        DATABASE_URL=f"sqlite:///{tmp_path}/x",
        CHRONOQ_API_KEYS=f"{KEY}:ci",
    )

    assert result.returncode == 2
    assert "CHRONOQ_API_KEYS" in result.stderr
    assert KEY not in result.stderr + result.stdout


@pytest.mark.parametrize(
    ("variables", "warned"),
    [
        ({"CHRONOQ_ALLOW_UNAUTHENTICATED": "true"}, True),
        ({"CHRONOQ_API_KEYS": f"ops:{KEY}"}, False),
    ],
)
def test_serve_accepts_a_non_loopback_host_with_keys_or_the_explicit_opt_in(
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    tmp_path: Path,
    variables: dict[str, str],
    warned: bool,
) -> None:
    """The decision alone: uvicorn is not started, so nothing listens beyond loopback."""
    for name, value in {"DATABASE_URL": f"sqlite:///{tmp_path}/x", **variables}.items():
        monkeypatch.setenv(name, value)
    started: list[Any] = []

    def run(config: Any, *rest: Any) -> int:
        started.append(config)
        return 0

    monkeypatch.setattr(serve, "run", run)

    assert cli.main(["serve", "--host", "0.0.0.0", "--port", "8000"]) == 0

    assert started[0].host == "0.0.0.0"
    # The peer the app sees is the proxy itself, whose forwarded headers it judges.
    assert started[0].proxy_headers is False
    assert ("API on 0.0.0.0:8000 is open" in caplog.text) is warned
    assert KEY not in caplog.text


@pytest.mark.parametrize(
    ("variables", "warned"),
    [
        ({}, True),
        ({"CHRONOQ_ALLOWED_HOSTS": "chronoq.internal"}, False),
    ],
)
def test_serve_open_beyond_loopback_warns_that_only_loopback_names_are_answered(
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    tmp_path: Path,
    variables: dict[str, str],
    warned: bool,
) -> None:
    settings = {
        "DATABASE_URL": f"sqlite:///{tmp_path}/x",
        "CHRONOQ_ALLOW_UNAUTHENTICATED": "true",
        **variables,
    }
    for name, value in settings.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setattr(serve, "run", lambda *args: 0)

    assert cli.main(["serve", "--host", "0.0.0.0", "--port", "8000"]) == 0

    assert ("set CHRONOQ_ALLOWED_HOSTS" in caplog.text) is warned


@pytest.mark.parametrize("host", ["127.0.0.1", "127.8.9.10", "::1", "localhost", "LOCALHOST"])
def test_loopback_hosts_need_no_keys(host: str) -> None:
    assert serve.is_loopback(host)


@pytest.mark.parametrize("host", ["0.0.0.0", "::", "10.0.0.1", "localhost.example", "[::2]"])
def test_other_hosts_are_not_loopback(host: str) -> None:
    assert not serve.is_loopback(host)


def _serve_until_healthy(tmp_path: Path, **variables: str) -> tuple[int, str]:
    """Start `chronoq serve` on a free loopback port, wait for /healthz, stop it (by its
    own PID); the status of one protected request and what the server wrote to stderr."""
    port = free_port()
    database = f"sqlite:///{tmp_path / 'chronoq.db'}"
    process = start(
        "serve",
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--no-worker",
        DATABASE_URL=database,
        **variables,
    )
    try:
        base = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 60
        while True:
            assert process.poll() is None, process.communicate()[1]
            try:
                if httpx.get(f"{base}/healthz", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert time.monotonic() < deadline, "serve did not become healthy"
            time.sleep(0.1)
        status = httpx.get(f"{base}/v1/schedules", timeout=5).status_code
    finally:
        process.terminate()
        try:
            _, stderr = process.communicate(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()
            _, stderr = process.communicate()
    return status, stderr


def test_serve_on_loopback_without_keys_starts_open_and_warns(tmp_path: Path) -> None:
    status, stderr = _serve_until_healthy(tmp_path)

    assert status == 200
    assert "is open to anyone" in stderr
    assert "CHRONOQ_API_KEYS" in stderr


def test_serve_with_keys_starts_closed_and_does_not_warn(tmp_path: Path) -> None:
    status, stderr = _serve_until_healthy(tmp_path, CHRONOQ_API_KEYS=f"ops:{KEY}")

    assert status == 401
    assert "is open to anyone" not in stderr
    assert KEY not in stderr


def test_serve_refuses_a_separate_delivery_process_on_sqlite(tmp_path: Path) -> None:
    result = in_process(
        "serve",
        "--port",
        str(free_port()),
        DATABASE_URL=f"sqlite:///{tmp_path}/x",
        CHRONOQ_DELIVERY_PROCESS="separate",
    )

    assert result.returncode == 2, result.stderr
    assert "CHRONOQ_DELIVERY_PROCESS=separate" in result.stderr
    assert "SQLite serves one process" in result.stderr
