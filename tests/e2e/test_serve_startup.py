"""What `chronoq serve` says before it serves: a port in use at once, before the database
is even tried; a database that cannot be reached on one line a try, waited for a bounded
time and then given up with one line naming it (its password hidden), never a traceback;
a database that comes up meanwhile is served; a misspelled setting is named with the
setting it resembles."""

from __future__ import annotations

import socket
import time
from pathlib import Path

import pytest
from sqlalchemy.engine import make_url

from tests.e2e.processes import Service, free_port
from tests.integration.cli.commands import chronoq
from tests.tcp_proxy import TcpProxy
from tests.waiting import eventually

pytestmark = [pytest.mark.e2e]

NOWHERE = "postgresql://chronoq:hunter2@127.0.0.1:1/chronoq"


def test_an_unreachable_database_is_waited_for_then_named_on_one_line() -> None:
    started = time.monotonic()
    result = chronoq(
        "serve",
        "--port",
        str(free_port()),
        DATABASE_URL=NOWHERE,
        CHRONOQ_DATABASE_WAIT="2",
        timeout=60,
    )
    took = time.monotonic() - started

    assert result.returncode == 1, result.stderr
    assert "Traceback" not in result.stderr
    assert "hunter2" not in result.stderr
    lines = result.stderr.strip().splitlines()
    retries = [line for line in lines if "trying again for up to" in line]
    assert retries, result.stderr
    assert all("postgresql://chronoq:***@127.0.0.1:1/chronoq" in line for line in retries)
    assert lines[-1].startswith("chronoq: cannot reach postgresql://chronoq:***@127.0.0.1:1/")
    assert "CHRONOQ_DATABASE_WAIT" in lines[-1]
    assert 2 <= took < 30


def test_a_port_in_use_is_said_before_the_database_is_tried() -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        started = time.monotonic()
        result = chronoq(
            "serve",
            "--port",
            str(port),
            DATABASE_URL=NOWHERE,
            CHRONOQ_DATABASE_WAIT="60",
            timeout=60,
        )
    assert result.returncode == 1
    assert time.monotonic() - started < 30  # not the database's 60 s
    assert "cannot reach" not in result.stderr
    last = result.stderr.strip().splitlines()[-1]
    assert last == f"chronoq: cannot serve on 127.0.0.1:{port}: Address already in use"


def test_a_misspelled_setting_is_named_with_the_one_it_resembles() -> None:
    result = chronoq(
        "serve",
        "--port",
        str(free_port()),
        DATABASE_URL=NOWHERE,
        CHRONOQ_DATABASE_WAIT="0",
        CHRONOQ_POLL_INTERVALL="1",
        timeout=60,
    )
    assert result.returncode == 1
    assert (
        "CHRONOQ_POLL_INTERVALL is not a setting and is ignored: "
        "did you mean CHRONOQ_POLL_INTERVAL?"
    ) in result.stderr


@pytest.mark.postgres
async def test_a_database_that_comes_up_while_waited_for_is_served(
    postgres_url: str, tmp_path: Path
) -> None:
    url = make_url(postgres_url)
    proxy = TcpProxy(url.host or "127.0.0.1", url.port or 5432)
    await proxy.start()
    await proxy.cut()
    proxied = url.set(port=proxy.port).render_as_string(hide_password=False)
    service = Service(
        "api",
        {"DATABASE_URL": proxied, "CHRONOQ_DATABASE_WAIT": "60"},
        tmp_path / "api.log",
    )
    try:
        # The database comes back only once the service has said it waits for it: a fixed
        # sleep raced the process's start on a loaded machine.
        await eventually(
            lambda: "trying again for up to" in service.log_tail(),
            within=30,
            every=0.1,
            what="the service saying it waits for the database",
        )
        assert service.alive, service.log_tail()
        await proxy.restore()
        await service.wait_ready(60)
    finally:
        service.close()
        await proxy.close()
