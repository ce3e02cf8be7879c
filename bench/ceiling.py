"""Ceiling load generator: a bare HTTP client loop against the receiver, run as its own process.

    python bench/ceiling.py --client aiohttp|httpx --url http://127.0.0.1:P/sink
                            [--concurrency 64] [--duration 4] [--warmup 0.5]

`concurrency` workers each POST in a loop the same kind of request Chronoq sends (a small JSON
body and the delivery headers), over one pooled client limited to `concurrency` connections.
Prints one JSON line: `{"client", "requests", "errors", "seconds", "rps"}`, counting only the
requests completed after the warm-up.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

BODY = json.dumps({"n": 1, "kind": "ceiling"}).encode()


def delivery_headers() -> dict[str, str]:
    occurrence = str(uuid.uuid4())
    return {
        "Content-Type": "application/json",
        "X-Occurrence-Id": occurrence,
        "X-Schedule-Id": str(uuid.uuid4()),
        "X-Event-Type": "bench",
        "X-Scheduled-For": "2030-01-01T00:00:00.000000Z",
        "X-Attempt": "1",
        "Idempotency-Key": occurrence,
    }


class Counter:
    def __init__(self, warmup_until: float, stop_at: float) -> None:
        self.warmup_until = warmup_until
        self.stop_at = stop_at
        self.requests = 0
        self.errors = 0


async def drive(send: Callable[[], Awaitable[int]], counter: Counter) -> None:
    while True:
        try:
            status = await send()
        except Exception:
            status = 0
        now = time.perf_counter()
        if now >= counter.stop_at:
            return
        if now >= counter.warmup_until:
            if 200 <= status < 300:
                counter.requests += 1
            else:
                counter.errors += 1


async def run_aiohttp(url: str, concurrency: int, counter: Counter) -> None:
    import aiohttp

    connector = aiohttp.TCPConnector(limit=concurrency, limit_per_host=0)
    async with aiohttp.ClientSession(
        connector=connector, auto_decompress=False, trust_env=False
    ) as session:

        async def send() -> int:
            async with session.post(
                url, data=BODY, headers=delivery_headers(), allow_redirects=False
            ) as response:
                await response.read()
                return response.status

        await asyncio.gather(*(drive(send, counter) for _ in range(concurrency)))


async def run_httpx(url: str, concurrency: int, counter: Counter) -> None:
    import httpx

    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    async with httpx.AsyncClient(limits=limits, trust_env=False, timeout=30.0) as client:

        async def send() -> int:
            response = await client.post(url, content=BODY, headers=delivery_headers())
            return response.status_code

        await asyncio.gather(*(drive(send, counter) for _ in range(concurrency)))


async def measure(
    client: str, url: str, concurrency: int, duration: float, warmup: float
) -> dict[str, Any]:
    start = time.perf_counter()
    counter = Counter(start + warmup, start + warmup + duration)
    runner = run_aiohttp if client == "aiohttp" else run_httpx
    await runner(url, concurrency, counter)
    return {
        "client": client,
        "requests": counter.requests,
        "errors": counter.errors,
        "seconds": duration,
        "rps": counter.requests / duration,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--client", choices=["aiohttp", "httpx"], required=True)
    parser.add_argument("--url", required=True)
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--duration", type=float, default=4.0)
    parser.add_argument("--warmup", type=float, default=0.5)
    args = parser.parse_args(argv)
    if not args.url.startswith("http://127.0.0.1:"):
        parser.error("the ceiling load only goes to http://127.0.0.1")
    work = measure(args.client, args.url, args.concurrency, args.duration, args.warmup)
    try:
        import uvloop
    except ImportError:
        result = asyncio.run(work)
    else:
        result = uvloop.run(work)
    sys.stdout.write(json.dumps(result) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
