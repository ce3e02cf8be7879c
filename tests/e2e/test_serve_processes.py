"""`chronoq serve --processes N`: N API processes on one port and, on PostgreSQL, N delivery
processes beside them, each a full member of the fleet (its own pools), sharing nothing but
the database. Every occurrence is delivered once, both delivery processes deliver, and
SIGTERM to the parent stops them all gracefully. SQLite, which one process serves, refuses it.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest

from tests.e2e.processes import free_port, service_environment
from tests.receiver import Receiver, Reply

pytestmark = [pytest.mark.e2e, pytest.mark.postgres]

CHRONOQ = Path(sys.executable).with_name("chronoq")
SCHEDULES = 400
# Few slots per process and a slow target: no one process can hold every occurrence, so both
# take part however the claims fall.
CONCURRENCY = 4
REPLY_DELAY = 0.05


def children(pid: int, marker: bytes = b"spawn_main") -> list[int]:
    """Live child processes of `pid` whose command line holds `marker`: by default the API
    processes (not multiprocessing's helpers), with `DELIVERY` the delivery processes."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            parent = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            command = (entry / "cmdline").read_bytes().replace(b"\0", b" ")
        except (OSError, IndexError, ValueError):
            continue
        if parent == pid and marker in command:
            found.append(int(entry.name))
    return found


DELIVERY = b"app.process.delivery"


@pytest.fixture
def serve(tmp_path: Path) -> Iterator[Callable[..., subprocess.Popen[bytes]]]:
    started: list[subprocess.Popen[bytes]] = []

    def start(port: int, settings: dict[str, str], *args: str) -> subprocess.Popen[bytes]:
        with (tmp_path / f"serve-{len(started)}.log").open("wb") as log:
            process = subprocess.Popen(
                [str(CHRONOQ), "serve", "--host", "127.0.0.1", "--port", str(port), *args],
                env=service_environment(settings),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        started.append(process)
        return process

    try:
        yield start
    finally:
        for process in started:
            replicas = children(process.pid) + children(process.pid, DELIVERY)
            if process.poll() is None:
                process.kill()
                process.wait(timeout=10)
            for pid in replicas:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)


def _log(tmp_path: Path) -> str:
    return "\n".join(p.read_text(errors="replace")[-4000:] for p in tmp_path.glob("serve-*.log"))


async def _healthy(port: int, process: subprocess.Popen[bytes], replicas: int) -> None:
    """Until the port answers ready and the parent has `replicas` API processes that
    started, and as many delivery processes."""
    deadline = time.monotonic() + 90
    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", trust_env=False) as http:
        while True:
            assert process.poll() is None, "the service exited while starting"
            try:
                ready = (await http.get("/readyz", timeout=2)).status_code == 200
                started = len(children(process.pid)) == replicas
                if ready and started and len(children(process.pid, DELIVERY)) == replicas:
                    return
            except httpx.TransportError:
                pass
            assert time.monotonic() < deadline, "the service did not start in 90 s"
            await asyncio.sleep(0.1)


async def test_two_processes_deliver_every_occurrence_once_and_stop_on_sigterm(
    empty_postgres: Callable[[], str],
    receiver: Receiver,
    serve: Callable[..., subprocess.Popen[bytes]],
    tmp_path: Path,
) -> None:
    # An empty database: both processes migrate it at start, under the migration lock.
    settings = {
        "DATABASE_URL": empty_postgres(),
        "CHRONOQ_POLL_INTERVAL": "0.5",
        "CHRONOQ_CONCURRENCY": str(CONCURRENCY),
        "CHRONOQ_BATCH_SIZE": str(CONCURRENCY),
    }
    receiver.always("/hook", Reply(delay=REPLY_DELAY))
    port = free_port()
    parent = serve(port, settings, "--processes", "2")
    await _healthy(port, parent, replicas=2)

    items = [
        {
            "event_type": "e2e.processes",
            "payload": {"n": n},
            "target": {"type": "webhook", "url": receiver.url("/hook")},
            "trigger": {"type": "once", "delay_seconds": 1.0},
        }
        for n in range(SCHEDULES)
    ]
    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", trust_env=False) as http:
        for start in range(0, SCHEDULES, 100):
            response = await http.post("/v1/schedules/batch", json={"items": items[start:][:100]})
            assert response.status_code == 201, response.text
        await receiver.wait_for(SCHEDULES, path="/hook", timeout=60)
        await asyncio.sleep(1.0)  # room for a stray second arrival

        arrivals = Counter(r.occurrence_id for r in receiver.on("/hook"))
        assert len(arrivals) == SCHEDULES
        assert max(arrivals.values()) == 1, "an occurrence arrived twice"

        # Both delivery processes took part: the attempt log names the replica of each
        # attempt.
        replicas: Counter[str] = Counter()
        # Read a few at a time rather than one after another: 400 reads in a row were
        # seconds of the case.
        gate = asyncio.Semaphore(8)

        async def attempts_of(occurrence_id: str) -> None:
            async with gate:
                attempts = (await http.get(f"/v1/occurrences/{occurrence_id}/attempts")).json()
            replicas.update(a["replica"] for a in attempts["items"])

        await asyncio.gather(*(attempts_of(occurrence_id) for occurrence_id in arrivals))
    assert sum(replicas.values()) == SCHEDULES
    pids = {replica.split(":")[1] for replica in replicas}
    assert pids == {str(pid) for pid in children(parent.pid, DELIVERY)}, replicas

    replica_pids = children(parent.pid) + children(parent.pid, DELIVERY)
    parent.send_signal(signal.SIGTERM)
    assert await asyncio.to_thread(parent.wait, 60) == 0, _log(tmp_path)
    assert not set(replica_pids) & set(children(parent.pid)), "a process outlived the parent"
    for pid in replica_pids:
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)
    assert "Application shutdown complete" in _log(tmp_path)


async def _closed_within(reader: asyncio.StreamReader, timeout: float) -> bool:
    try:
        return await asyncio.wait_for(reader.read(1), timeout) == b""
    except TimeoutError:
        return False
    except ConnectionError:
        return True


async def test_each_process_caps_its_connections_and_closes_silent_ones(
    empty_postgres: Callable[[], str],
    serve: Callable[..., subprocess.Popen[bytes]],
) -> None:
    """The replica processes import the connection guard by its path and read its settings
    from their own lifespan: each holds at most its cap, and none keeps a silent socket."""
    settings = {
        "DATABASE_URL": empty_postgres(),
        "CHRONOQ_MAX_CONNECTIONS": "5",
        "CHRONOQ_REQUEST_HEAD_TIMEOUT": "2",
    }
    port = free_port()
    parent = serve(port, settings, "--processes", "2")
    await _healthy(port, parent, replicas=2)

    opened = [await asyncio.open_connection("127.0.0.1", port) for _ in range(30)]
    try:
        # However the kernel spreads them, two processes hold at most 10: the rest make way
        # at once, and the head timeout ends the others.
        soon = await asyncio.gather(*(_closed_within(reader, 0.7) for reader, _ in opened))
        assert sum(soon) >= 20, f"{sum(soon)} of 30 closed at once"
        later = await asyncio.gather(*(_closed_within(reader, 5) for reader, _ in opened))
        assert all(s or late for s, late in zip(soon, later, strict=True))
    finally:
        for _, writer in opened:
            writer.close()


def test_sqlite_refuses_more_than_one_process(tmp_path: Path) -> None:
    env = service_environment({"DATABASE_URL": f"sqlite:///{tmp_path / 'one.db'}"})
    done = subprocess.run(
        [str(CHRONOQ), "serve", "--port", str(free_port()), "--processes", "2"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2
    assert "--processes" in done.stderr
    assert "SQLite" in done.stderr
