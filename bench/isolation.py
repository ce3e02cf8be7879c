"""Isolation: how late one destination's deliveries are while another holds the replicas back.

    .venv/bin/python bench/isolation.py                       # both scenarios, 3 runs
    .venv/bin/python bench/isolation.py --scenarios slow --runs 1 --slow-count 100 --hold 5

Every measurement gets a fresh PostgreSQL database and `--replicas` (2) `chronoq serve`
processes on it with default settings, webhooks to bench/receiver.py processes. A *stream*
is `--stream-count` (300) one-shot schedules due `--gap` (20 ms) apart, the first 0.5 s after
the disturbance is due, delivered to a receiver of their own that answers at once; what
is measured is the stream's lateness (first arrival minus `X-Scheduled-For`, p50, p99 and
max) and how many of it arrived within `--window` (60 s) of its last due instant.

- *alone*: the stream, nothing else (the same run's reference).
- *slow*: the stream beside `--slow-count` (400) one-shots due at one instant to another
  receiver that holds every request `--hold` (20) seconds before it answers: a destination
  that many schedules target, which answers slowly.
- *held*: the stream beside `--held-keys` (10,000) flow keys, each PUT with
  `{"paused": true}` and each holding back one due one-shot: held work the claim must not
  pay for.
- *future*: the stream beside `--future-keys` (100,000) flow keys without limits, each
  with one one-shot due an hour later: work due later, which the claim must not pay for
  either (not run unless asked for: `--scenarios slow,held,future`).

The three run one after another in each run (alone first), so that their figures are
minutes apart at most. Nothing of the disturbance is checked for delivery: the stream's
figures are the measurement, and every one of its occurrences must arrive at most once.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import aiohttp

sys.path.insert(0, str(Path(__file__).resolve().parent))

import run as bench

SCENARIOS = ("alone", "slow", "held", "future")
FUTURE_LEAD = 3600.0  # seconds: the future keys' one-shots are due this far ahead
STREAM_OFFSET = 0.5  # the stream's first due instant, after the disturbance's
HELD_KEY_PUTS = 16  # PUT /v1/flow-keys in flight at once


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument(
        "--scenarios",
        default="slow,held",
        help="comma-separated subset of slow,held,future (alone always runs, as the reference)",
    )
    parser.add_argument("--replicas", type=int, default=2)
    parser.add_argument("--stream-count", type=int, default=300)
    parser.add_argument("--gap", type=float, default=0.02)
    parser.add_argument("--slow-count", type=int, default=400)
    parser.add_argument("--hold", type=float, default=20.0)
    parser.add_argument("--held-keys", type=int, default=10_000)
    parser.add_argument("--future-keys", type=int, default=100_000)
    parser.add_argument(
        "--lead", type=float, default=3.0, help="seconds from now to the due instant"
    )
    parser.add_argument("--window", type=float, default=60.0)
    parser.add_argument("--env", action="append", default=[], help="NAME=VALUE for the service")
    parser.add_argument(
        "--pg-admin-url",
        default=os.environ.get("CHRONOQ_BENCH_PG_URL", bench.DEFAULT_PG_ADMIN_URL),
    )
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args(argv)
    wanted = [name for name in args.scenarios.split(",") if name]
    unknown = set(wanted) - set(SCENARIOS[1:])
    if unknown:
        parser.error(f"unknown scenario(s): {', '.join(sorted(unknown))}")
    args.scenario_list = ["alone", *[name for name in SCENARIOS[1:] if name in wanted]]
    if args.replicas < 1 or args.stream_count < 1 or args.runs < 1:
        parser.error("--replicas, --stream-count and --runs must be at least 1")
    return args


def one_shot(url: str, at: float, n: int, scenario: str, key: str | None = None) -> dict[str, Any]:
    item = bench.schedule_item(url, bench.rfc3339(at), n, scenario)
    if key is not None:
        item["flow_key"] = key
    return item


async def put_paused_keys(http: aiohttp.ClientSession, base: str, count: int) -> list[str]:
    keys = [f"held-{n:06d}" for n in range(count)]
    gate = asyncio.Semaphore(HELD_KEY_PUTS)

    async def put(key: str) -> None:
        async with gate, http.put(f"{base}/v1/flow-keys/{key}", json={"paused": True}) as answer:
            if answer.status not in (200, 201):
                raise RuntimeError(
                    f"PUT /v1/flow-keys/{key}: {answer.status} {await answer.text()}"
                )

    await asyncio.gather(*(put(key) for key in keys))
    return keys


class Run:
    def __init__(
        self, args: argparse.Namespace, http: aiohttp.ClientSession, log_dir: Path
    ) -> None:
        self.args = args
        self.http = http
        self.log_dir = log_dir
        self.procs = bench.Processes()
        self.databases = bench.Databases(args.pg_admin_url)

    async def scenario(self, name: str, run: int) -> dict[str, Any]:
        args = self.args
        database_url, handle = await self.databases.fresh("postgresql")
        fast = bench.ReceiverClient(self.procs, self.http)
        slow = bench.ReceiverClient(self.procs, self.http)
        services: list[bench.Service] = []
        try:
            await fast.start()
            await slow.start()
            extra = dict(item.split("=", 1) for item in args.env)
            for replica in range(args.replicas):
                services.append(
                    await bench.start_service(
                        self.procs,
                        self.http,
                        database_url,
                        self.log_dir,
                        f"{name}-run{run}-replica{replica}",
                        extra,
                    )
                )
            base = services[0].base
            disturbance = 0
            if name == "held":
                keys = await put_paused_keys(self.http, base, args.held_keys)
                due = time.time() + 1.0  # held back: due at once, never started
                items = [
                    one_shot(slow.base + "/sink", due, n, name, key) for n, key in enumerate(keys)
                ]
                await bench.create_batches(self.http, base, items)
                disturbance = len(items)
            if name == "future":
                later = time.time() + FUTURE_LEAD
                items = [
                    one_shot(slow.base + "/sink", later, n, name, f"future-{n:07d}")
                    for n in range(args.future_keys)
                ]
                await bench.create_batches(self.http, base, items)
                disturbance = len(items)
            due = time.time() + args.lead
            if name == "slow":
                hold = f"{slow.base}/hold/{args.hold:g}"
                items = [one_shot(hold, due, n, name) for n in range(args.slow_count)]
                await bench.create_batches(self.http, base, items)
                disturbance = len(items)
            created = time.time()
            first = max(due, created + 1.0) + STREAM_OFFSET
            stream = [
                one_shot(fast.base + "/hook", first + n * args.gap, n, "stream")
                for n in range(args.stream_count)
            ]
            expected = set(await bench.create_batches(self.http, base, stream))
            last = first + (args.stream_count - 1) * args.gap
            complete = await bench.wait_for_arrivals(fast, len(expected), last + args.window)
            result = bench.analyse(await fast.records(), expected)
            slow_stats = await slow.stats()
            result.update(
                scenario=name,
                run=run,
                disturbance=disturbance,
                complete=complete,
                slow_started=slow_stats["held"],
                held_arrived=slow_stats["sink"],
                created_before_due_s=first - created,
            )
            if result["duplicates"]:
                raise RuntimeError(f"{name}: the stream arrived twice: {result}")
            return result
        finally:
            for service in services:
                await self.procs.stop(service.proc)
            await fast.stop()
            await slow.stop()
            await self.databases.drop(handle)

    async def close(self) -> None:
        self.procs.kill_all()
        await self.databases.drop_all()


def table(results: list[dict[str, Any]], names: list[str]) -> list[str]:
    lines = [
        "| scenario | lateness p50 (ms) | p99 (ms) | max (ms) | arrived | p99 / alone |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    alone = bench.median([r["lag_p99_ms"] for r in results if r["scenario"] == "alone"])
    for name in names:
        runs = [r for r in results if r["scenario"] == name]

        def each(key: str, runs: list[dict[str, Any]] = runs) -> str:
            values = [r[key] for r in runs]
            inner = ", ".join(bench.fmt(v, 1) for v in values)
            return f"{bench.fmt(bench.median(values), 1)} ({inner})"

        p99 = bench.median([r["lag_p99_ms"] for r in runs])
        arrived = ", ".join(f"{r['received']}/{r['received'] + r['lost']}" for r in runs)
        lines.append(
            f"| {name} | {each('lag_p50_ms')} | {each('lag_p99_ms')} | {each('lag_max_ms')} "
            f"| {arrived} | {bench.fmt(p99 / alone, 1) if alone else '-'} |"
        )
    return lines


async def main_async(args: argparse.Namespace) -> int:
    log_dir = Path(tempfile.mkdtemp(prefix="chronoq_isolation_logs_"))
    bench.log(f"service logs in {log_dir}")
    results: list[dict[str, Any]] = []
    timeout = aiohttp.ClientTimeout(total=120)
    async with aiohttp.ClientSession(timeout=timeout) as http:
        runner = Run(args, http, log_dir)
        try:
            for run in range(1, args.runs + 1):
                for name in args.scenario_list:
                    result = await runner.scenario(name, run)
                    results.append(result)
                    bench.log(
                        f"run {run} {name}: stream p50 {result['lag_p50_ms']:.1f} ms, "
                        f"p99 {result['lag_p99_ms']:.1f} ms, max {result['lag_max_ms']:.1f} ms, "
                        f"{result['received']}/{args.stream_count} arrived; "
                        f"slow receiver {result['slow_started']} requests, "
                        f"held arrived {result['held_arrived']}"
                    )
        finally:
            await runner.close()
    print("\n".join(table(results, args.scenario_list)))
    if args.json is not None:
        document = {"args": {k: str(v) for k, v in vars(args).items()}, "results": results}
        args.json.write_text(json.dumps(document, indent=1))
    return 0


def main(argv: list[str] | None = None) -> int:
    return asyncio.run(main_async(parse_args(argv)))


if __name__ == "__main__":
    sys.exit(main())
