"""`chronoq bus declare` and `chronoq bus peek` against RabbitMQ: in-process
(commands.in_process), and as a process of its own for a broker URL missing from its
environment."""

from __future__ import annotations

import subprocess
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import aio_pika
import pytest

from tests.integration.cli import commands

pytestmark = pytest.mark.rabbitmq


def chronoq(*args: str, amqp_url: str | None = None) -> subprocess.CompletedProcess[str]:
    variables = {} if amqp_url is None else {"AMQP_URL": amqp_url}
    return commands.in_process(*args, timeout=60, **variables)


@pytest.fixture
def names() -> dict[str, str]:
    suffix = uuid.uuid4().hex[:10]
    return {"exchange": f"chronoq-test-ex-{suffix}", "queue": f"chronoq-test-q-{suffix}"}


@pytest.fixture
async def cleanup(amqp_url: str, names: dict[str, str]) -> AsyncIterator[None]:
    yield
    connection = await aio_pika.connect(amqp_url)
    channel = await connection.channel()
    await channel.queue_delete(names["queue"])
    await channel.exchange_delete(names["exchange"])
    await connection.close()


def topology(tmp_path: Path, names: dict[str, str], *, exchange_type: str = "topic") -> Path:
    path = tmp_path / "topology.toml"
    path.write_text(
        f"""
[[exchanges]]
name = "{names["exchange"]}"
type = "{exchange_type}"
durable = true

[[queues]]
name = "{names["queue"]}"
durable = true

[[bindings]]
exchange = "{names["exchange"]}"
queue = "{names["queue"]}"
routing_key = "invoice.*"
""",
        encoding="utf-8",
    )
    return path


async def _publish(url: str, exchange: str, key: str, bodies: list[bytes]) -> None:
    connection = await aio_pika.connect(url)
    channel = await connection.channel()
    target = await channel.get_exchange(exchange)
    for n, body in enumerate(bodies):
        await target.publish(aio_pika.Message(body, message_id=f"m{n}", type="t"), key)
    await connection.close()


async def _depth(url: str, queue: str) -> int:
    connection = await aio_pika.connect(url)
    channel = await connection.channel()
    declared = await channel.declare_queue(queue, passive=True)
    count = declared.declaration_result.message_count
    await connection.close()
    return int(count or 0)


@pytest.mark.usefixtures("cleanup")
async def test_declare_builds_the_topology_and_routes_through_it(
    amqp_url: str, names: dict[str, str], tmp_path: Path
) -> None:
    result = chronoq(
        "bus", "declare", "--topology", str(topology(tmp_path, names)), amqp_url=amqp_url
    )

    assert result.returncode == 0, result.stderr
    assert "1 exchange(s), 1 queue(s), 1 binding(s)" in result.stdout
    await _publish(amqp_url, names["exchange"], "invoice.paid", [b"{}"])
    assert await _depth(amqp_url, names["queue"]) == 1
    again = chronoq(
        "bus", "declare", "--topology", str(topology(tmp_path, names)), amqp_url=amqp_url
    )
    assert again.returncode == 0, again.stderr


async def test_an_invalid_topology_is_refused_before_the_broker_is_contacted(
    amqp_url: str, names: dict[str, str], tmp_path: Path
) -> None:
    path = topology(tmp_path, names, exchange_type="bogus")

    result = chronoq("bus", "declare", "--topology", str(path), amqp_url=amqp_url)

    assert result.returncode == 2
    assert "exchanges.0.type" in result.stderr
    connection = await aio_pika.connect(amqp_url)
    channel = await connection.channel()
    with pytest.raises(aio_pika.exceptions.ChannelNotFoundEntity):
        await channel.declare_queue(names["queue"], passive=True)
    await connection.close()


@pytest.mark.usefixtures("cleanup")
async def test_peek_shows_messages_and_leaves_them_in_the_queue(
    amqp_url: str, names: dict[str, str], tmp_path: Path
) -> None:
    chronoq("bus", "declare", "--topology", str(topology(tmp_path, names)), amqp_url=amqp_url)
    big = b'{"data":"' + b"x" * 3000 + b'"}'
    await _publish(amqp_url, names["exchange"], "invoice.due", [b'{"n":1}', big])

    result = chronoq("bus", "peek", "--queue", names["queue"], "--count", "5", amqp_url=amqp_url)

    assert result.returncode == 0, result.stderr
    assert "2 message(s)" in result.stdout
    assert "id=m0" in result.stdout
    assert "first 1024 of 3011 bytes" in result.stdout
    assert "x" * 1100 not in result.stdout
    assert await _depth(amqp_url, names["queue"]) == 2
    raw = chronoq(
        "bus", "peek", "--queue", names["queue"], "--count", "5", "--raw", amqp_url=amqp_url
    )
    assert "x" * 3000 in raw.stdout


@pytest.mark.usefixtures("cleanup")
async def test_peek_shows_a_body_s_control_characters_escaped(
    amqp_url: str, names: dict[str, str], tmp_path: Path
) -> None:
    chronoq("bus", "declare", "--topology", str(topology(tmp_path, names)), amqp_url=amqp_url)
    await _publish(amqp_url, names["exchange"], "invoice.due", [b"\x1b]0;owned\x07\x1b[2J\nforged"])

    result = chronoq("bus", "peek", "--queue", names["queue"], amqp_url=amqp_url)

    assert result.returncode == 0, result.stderr
    assert "\x1b" not in result.stdout
    assert "\x07" not in result.stdout
    assert "body: \\u001b]0;owned\\u0007\\u001b[2J\\u000aforged" in result.stdout


def test_an_unreachable_broker_is_named_by_host_without_credentials() -> None:
    result = chronoq("bus", "peek", "--queue", "q", "--url", "amqp://ops:hunter2@127.0.0.1:9/")

    assert result.returncode == 1
    assert "127.0.0.1:9" in result.stderr
    assert "hunter2" not in result.stderr + result.stdout
    assert len(result.stderr.strip().splitlines()) == 1


def test_a_missing_broker_url_is_a_usage_error() -> None:
    # A process of its own: AMQP_URL is missing from its environment.
    result = commands.chronoq("bus", "peek", "--queue", "q", timeout=60)

    assert result.returncode == 2
    assert "AMQP_URL" in result.stderr


def test_peeking_at_a_missing_queue_is_a_runtime_error(amqp_url: str) -> None:
    result = chronoq(
        "bus", "peek", "--queue", f"chronoq-none-{uuid.uuid4().hex}", amqp_url=amqp_url
    )

    assert result.returncode == 1
    assert "NOT_FOUND" in result.stderr
