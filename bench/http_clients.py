"""CPU per webhook request of each HTTP client: aiohttp and pyreqwest, side by side.

    python bench/http_clients.py [--count 20000] [--concurrency 64] [--runs 5]

Each run starts a process of its own per client that sends `--count` POSTs (a typical
delivery's headers, signed, and a 200-byte body) to the benchmark receiver (bench/receiver.py,
a process of its own on 127.0.0.1, route /sink), `--concurrency` in flight, each sent and its
reply read the way the webhook sink does it: aiohttp through a pooled session, the reply's
excerpt read and the rest dropped; pyreqwest through one client, its reply streamed with
nothing read ahead and its excerpt read. The CPU is the sending process's (every thread,
time.process_time) from the first measured request to the last, after 1,000 unmeasured ones;
the clients alternate which goes first from run to run. Prints each run and the medians.

pyreqwest is not a dependency of the service (docs/performance.md, the webhook client):
`pip install pyreqwest==0.15.1` first.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import subprocess
import sys
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

CLIENTS = ("aiohttp", "pyreqwest")
BODY = b'{"event_type":"invoice.due","payload":{"invoice":"inv_0001","amount":1999,' + (
    b'"note":"' + b"x" * 110 + b'"}}'
)
SECRET = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
WARMUP = 1000


def _delivery(url: str) -> Any:
    from app.domain.occurrence import Delivery
    from app.domain.target import WebhookTarget

    target = WebhookTarget(
        type="webhook", url=url, headers={"Authorization": "Bearer bench-token-0123456789"}
    )
    return Delivery(
        occurrence_id=uuid.uuid4(),
        schedule_id=uuid.uuid4(),
        fire_at=datetime.now(UTC),
        attempt=1,
        max_attempts=5,
        lease_token=uuid.uuid4(),
        event_type="invoice.due",
        body=BODY,
        target=target,
        one_shot=True,
    )


async def _aiohttp_sender(concurrency: int) -> tuple[Any, Any]:
    import aiohttp

    from app.domain.occurrence import RESPONSE_EXCERPT_BYTES
    from app.sinks.webhook import MAX_DRAINED_BODY, _read_excerpt

    session = aiohttp.ClientSession(
        connector=aiohttp.TCPConnector(limit=concurrency, limit_per_host=0),
        auto_decompress=False,
        trust_env=False,
        timeout=aiohttp.ClientTimeout(total=None),
    )

    async def send(url: str, headers: dict[str, str]) -> int:
        async with session.request(
            "POST", url, data=BODY, headers=headers, allow_redirects=False
        ) as response:
            await _read_excerpt(response.content, RESPONSE_EXCERPT_BYTES, MAX_DRAINED_BODY)
            return response.status

    return send, session.close


async def _pyreqwest_sender(concurrency: int) -> tuple[Any, Any]:
    from pyreqwest.client import ClientBuilder

    from app.domain.occurrence import RESPONSE_EXCERPT_BYTES

    client = (
        ClientBuilder()
        .no_proxy()
        .follow_redirects(False)
        .gzip(False)
        .brotli(False)
        .zstd(False)
        .deflate(False)
        .max_connections(concurrency)
        .pool_max_idle_per_host(concurrency)
        .build()
    )

    async def send(url: str, headers: dict[str, str]) -> int:
        request = (
            client.request("POST", url)
            .headers(headers)
            .body_bytes(BODY)
            .streamed_read_buffer_limit(0)
            .build_streamed()
        )
        async with request as response:
            have = 0
            while (chunk := await response.body_reader.read_chunk()) is not None:
                have += len(chunk[: RESPONSE_EXCERPT_BYTES - have].to_bytes())
            status: int = response.status
            return status

    return send, client.close


def _busy(seconds: float) -> None:
    """Python work on the event loop's thread, holding the GIL, for `seconds` of CPU."""
    until = time.thread_time() + seconds
    while time.thread_time() < until:
        pass


async def one(
    client: str, port: int, count: int, concurrency: int, work: float = 0.0
) -> dict[str, Any]:
    from app.sinks.signing import WebhookSigner
    from app.sinks.webhook import webhook_headers

    url = f"http://127.0.0.1:{port}/sink"
    delivery = _delivery(url)
    headers = webhook_headers(delivery, delivery.target, WebhookSigner([SECRET]))
    if client == "aiohttp":
        send, close = await _aiohttp_sender(concurrency)
    else:
        send, close = await _pyreqwest_sender(concurrency)

    async def lane(n: int) -> None:
        for _ in range(n):
            await send(url, headers)
            if work:
                _busy(work)

    async def burst(total: int) -> None:
        share, extra = divmod(total, concurrency)
        await asyncio.gather(*(lane(share + (i < extra)) for i in range(concurrency)))

    await burst(WARMUP)
    cpu, wall = time.process_time(), time.perf_counter()
    await burst(count)
    cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    await close()
    return {
        "client": client,
        "work_us": 1e6 * work,
        "count": count,
        "cpu_us_per_request": 1e6 * cpu / count - 1e6 * work,
        "requests_per_second": count / wall,
    }


def _start_receiver() -> tuple[subprocess.Popen[str], int]:
    process = subprocess.Popen(
        [sys.executable, str(ROOT / "bench" / "receiver.py")],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert process.stdout is not None
    port = int(json.loads(process.stdout.readline())["port"])
    return process, port


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=20_000)
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument(
        "--work-us",
        type=float,
        default=0.0,
        help="Python work (microseconds of CPU) on the loop's thread after each request, "
        "standing in for the service's own per delivery; left out of the figures",
    )
    parser.add_argument("--json", type=Path, help="also write every run here")
    parser.add_argument("--one", choices=CLIENTS, help=argparse.SUPPRESS)
    parser.add_argument("--port", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.one is not None:
        result = asyncio.run(
            one(args.one, args.port, args.count, args.concurrency, args.work_us / 1e6)
        )
        print(json.dumps(result))
        return 0

    receiver, port = _start_receiver()
    runs: list[dict[str, Any]] = []
    try:
        for run in range(args.runs):
            order = CLIENTS if run % 2 == 0 else CLIENTS[::-1]
            for client in order:
                child = subprocess.run(
                    [
                        sys.executable,
                        __file__,
                        "--one",
                        client,
                        "--port",
                        str(port),
                        "--count",
                        str(args.count),
                        "--concurrency",
                        str(args.concurrency),
                        "--work-us",
                        str(args.work_us),
                    ],
                    capture_output=True,
                    text=True,
                    check=False,
                )
                # pyreqwest 0.15.1 at times aborts the interpreter as it exits (SIGABRT,
                # "PyGILState_Release: thread state ... must be current when releasing"),
                # after the figures are printed: they count, and the abort is noted.
                lines = child.stdout.strip().splitlines()
                if not lines:
                    raise SystemExit(f"{client} failed ({child.returncode}): {child.stderr}")
                result = json.loads(lines[-1])
                result["run"] = run + 1
                result["exit_code"] = child.returncode
                runs.append(result)
                print(
                    f"run {run + 1} {client:9} {result['cpu_us_per_request']:7.1f} us CPU "
                    f"per request, {result['requests_per_second']:7.0f} requests/s"
                    + (f" (exited {child.returncode})" if child.returncode else ""),
                    flush=True,
                )
    finally:
        receiver.terminate()
        receiver.wait(10)
    medians = {
        client: {
            key: statistics.median(r[key] for r in runs if r["client"] == client)
            for key in ("cpu_us_per_request", "requests_per_second")
        }
        for client in CLIENTS
    }
    for client, median in medians.items():
        print(
            f"median {client:9} {median['cpu_us_per_request']:7.1f} us CPU per request, "
            f"{median['requests_per_second']:7.0f} requests/s"
        )
    ratio = medians["pyreqwest"]["cpu_us_per_request"] / medians["aiohttp"]["cpu_us_per_request"]
    print(f"pyreqwest / aiohttp CPU per request: {ratio:.2f}")
    if args.json is not None:
        args.json.write_text(json.dumps({"runs": runs, "medians": medians}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
