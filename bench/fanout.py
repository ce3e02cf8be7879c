"""Fan-out against W1: a topic with `--subscribers` (10) subscriptions, each to an endpoint
of its own, firing `--occurrences` (1,000) one-shots at one instant, delivers
subscribers x occurrences (10,000) deliveries; W1 (10,000 one-shot webhooks at one instant)
in the same run is the baseline.

    .venv/bin/python bench/fanout.py                  # PostgreSQL, 3 runs
    .venv/bin/python bench/fanout.py --runs 1 --occurrences 100

Each measurement gets a fresh database and a fresh `chronoq serve` with default settings,
webhooks to bench/receiver.py, which records each delivery by its Idempotency-Key (a
delivery's own id). The two run alternately (W1 first on odd runs). deliveries/s = the
deliveries received / (last first-arrival - the due instant); every expected delivery must
arrive exactly once and be settled. Bar (DESIGN section 15): fan-out / W1 >= 0.8, on the
median of the per-run ratios.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import aiohttp

sys.path.insert(0, str(Path(__file__).resolve().parent))

import run as bench

BAR_RATIO = 0.8
TOPIC = "bench-topic"


async def _post(http: aiohttp.ClientSession, url: str, body: dict[str, Any]) -> dict[str, Any]:
    async with http.post(url, json=body) as response:
        answer: dict[str, Any] = await response.json(content_type=None)
        if response.status != 201:
            raise RuntimeError(f"POST {url} answered {response.status}: {answer}")
        return answer


async def _endpoints(ctx: bench.Context, base: str, hook: str) -> list[str]:
    """`--subscribers` endpoints, each to the receiver; their ids."""
    return [
        (await _post(ctx.http, f"{base}/v1/endpoints", {"url": f"{hook}?s={n}"}))["id"]
        for n in range(ctx.args.subscribers)
    ]


async def _subscribers(ctx: bench.Context, base: str, hook: str) -> list[uuid.UUID]:
    """The topic and its subscriptions, each to an endpoint of its own; their ids."""
    async with ctx.http.put(f"{base}/v1/topics/{TOPIC}", json={}) as response:
        if response.status != 201:
            raise RuntimeError(f"PUT /v1/topics/{TOPIC} answered {response.status}")
    made = []
    for endpoint in await _endpoints(ctx, base, hook):
        subscription = await _post(
            ctx.http, f"{base}/v1/subscriptions", {"topic": TOPIC, "endpoint_id": endpoint}
        )
        made.append(uuid.UUID(subscription["id"]))
    return made


async def one_run(ctx: bench.Context, kind: str, run: int) -> dict[str, Any]:
    args = ctx.args
    tag = f"{kind}-run{run}"
    database_url, handle = await ctx.databases.fresh(args.dialect)
    http, receiver = ctx.http, ctx.receiver
    hook = receiver.base + "/hook"
    result: dict[str, Any] = {"kind": kind, "run": run}
    try:
        service = await bench.start_service(ctx.procs, http, database_url, ctx.log_dir, tag)
        try:
            await receiver.reset()
            base = service.base
            subscriptions = await _subscribers(ctx, base, hook) if kind == "fanout" else []
            endpoints = await _endpoints(ctx, base, hook) if kind == "endpoints" else []
            count = args.occurrences if kind == "fanout" else args.count
            lead = args.lead if args.lead is not None else 2.0 + count / 1000
            due = round(time.time() + lead, 3)
            at = bench.rfc3339(due)
            items = [bench.schedule_item(hook, at, n, kind) for n in range(count)]
            if kind == "fanout":
                items = [{**item, "target": {"type": "topic", "topic": TOPIC}} for item in items]
            if kind == "endpoints":
                items = [
                    {
                        **item,
                        "target": {
                            "type": "endpoint",
                            "endpoint_id": endpoints[n % len(endpoints)],
                        },
                    }
                    for n, item in enumerate(items)
                ]
            occurrences = await bench.create_batches(http, base, items)
            if time.time() > due:
                ctx.problems.append(f"{tag}: creation finished after the due instant")
            expected = (
                {str(uuid.uuid5(uuid.UUID(o), str(s))) for o in occurrences for s in subscriptions}
                if kind == "fanout"
                else set(occurrences)
            )
            result["expected"] = len(expected)
            result["complete"] = await bench.wait_for_arrivals(
                receiver, len(expected), due + args.timeout
            )
            await asyncio.sleep(args.settle)
        finally:
            result["exit_code"] = await ctx.procs.stop(service.proc)
        records = await receiver.records()
        result.update(bench.analyse(records, expected))
        received, last = result["received"], result["last_arrival"]
        result["deliveries_per_s"] = (
            received / (last - due) if received and last > due else math.nan
        )
        _, pending, _ = await ctx.databases.occurrence_state(database_url)
        result["unsettled"] = len(pending & {record[0] for record in records} & expected)
    finally:
        try:
            await ctx.databases.drop(handle)
        except Exception as exc:
            bench.log(f"could not drop {handle}: {exc}")
    if result["lost"] or result["duplicates"] or result["unexpected"] or result["unsettled"]:
        raise RuntimeError(
            f"{tag}: {result['expected']} expected, lost {result['lost']}, duplicates "
            f"{result['duplicates']}, unexpected {result['unexpected']}, unsettled "
            f"{result['unsettled']}; service log {service.log_path}:\n"
            + bench.tail(service.log_text(), 15)
        )
    return result


async def main_async(args: argparse.Namespace, problems: list[str]) -> list[dict[str, Any]]:
    procs = bench.Processes()
    databases = bench.Databases(args.pg_admin_url, args.mysql_admin_url)
    log_dir = Path(tempfile.mkdtemp(prefix="chronoq_fanout_logs_"))
    bench.log(f"service logs in {log_dir}")
    runs: list[dict[str, Any]] = []
    try:
        timeout = aiohttp.ClientTimeout(total=120)
        async with aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=16), trust_env=False, timeout=timeout
        ) as http:
            receiver = bench.ReceiverClient(procs, http)
            await receiver.start()
            ctx = bench.Context(args, procs, http, receiver, databases, log_dir, problems)
            try:
                for run in range(1, args.runs + 1):
                    measured: dict[str, Any] = {"run": run}
                    kinds = ("w1", "endpoints", "fanout") if args.endpoints else ("w1", "fanout")
                    for kind in kinds if run % 2 else kinds[::-1]:
                        r = await one_run(ctx, kind, run)
                        measured[kind] = r
                        bench.log(
                            f"run {run} {kind}: {bench.fmt(r['deliveries_per_s'])} deliveries/s "
                            f"({r['received']:,}); lag p50 {r['lag_p50_ms']:.0f} ms, p99 "
                            f"{r['lag_p99_ms']:.0f} ms"
                        )
                    measured["ratio"] = (
                        measured["fanout"]["deliveries_per_s"] / measured["w1"]["deliveries_per_s"]
                    )
                    runs.append(measured)
            finally:
                await receiver.stop()
    finally:
        procs.kill_all()
        await databases.drop_all()
    return runs


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--dialect", choices=bench.DIALECTS, default="postgresql")
    parser.add_argument("--count", type=int, default=10_000, help="W1 one-shots (10,000)")
    parser.add_argument("--occurrences", type=int, default=1000, help="topic one-shots (1,000)")
    parser.add_argument("--subscribers", type=int, default=10, help="subscriptions (10)")
    parser.add_argument(
        "--endpoints",
        action="store_true",
        help="also W1 to --subscribers endpoints (each one-shot to one): the endpoints' own cost",
    )
    parser.add_argument("--lead", type=float, default=None, help="seconds from creation to due")
    parser.add_argument("--timeout", type=float, default=120.0)
    parser.add_argument("--settle", type=float, default=1.0)
    parser.add_argument("--json", type=Path, default=None, help="write the raw per-run numbers")
    parser.add_argument(
        "--pg-admin-url", default=os.environ.get("CHRONOQ_BENCH_PG_URL", bench.DEFAULT_PG_ADMIN_URL)
    )
    parser.add_argument(
        "--mysql-admin-url",
        default=os.environ.get("CHRONOQ_BENCH_MYSQL_URL", bench.DEFAULT_MYSQL_ADMIN_URL),
    )
    args = parser.parse_args()
    problems: list[str] = []
    version = bench.code_version()
    try:
        runs = asyncio.run(main_async(args, problems))
    except RuntimeError as exc:
        bench.log(f"FAILED: {exc}")
        return 1
    w1 = [r["w1"]["deliveries_per_s"] for r in runs]
    fan = [r["fanout"]["deliveries_per_s"] for r in runs]
    ratios = [r["ratio"] for r in runs]
    print()
    print(f"Fan-out on {bench.TITLES[args.dialect]}, {args.runs} run(s), code {version}:")
    print(
        f"  W1 ({args.count:,}): {bench.fmt(bench.median(w1))}/s ({', '.join(map(bench.fmt, w1))})"
    )
    print(
        f"  fan-out ({args.occurrences:,} x {args.subscribers}): {bench.fmt(bench.median(fan))}/s "
        f"({', '.join(map(bench.fmt, fan))})"
    )
    if args.endpoints:
        by_endpoint = [r["endpoints"]["deliveries_per_s"] for r in runs]
        print(
            f"  W1 to {args.subscribers} endpoints: {bench.fmt(bench.median(by_endpoint))}/s "
            f"({', '.join(map(bench.fmt, by_endpoint))}); / W1 "
            + ", ".join(bench.fmt(e / w, 2) for e, w in zip(by_endpoint, w1, strict=True))
        )
    ratio = bench.median(ratios)
    each = ", ".join(bench.fmt(r, 2) for r in ratios)
    print(f"  fan-out / W1 (same run): {bench.fmt(ratio, 2)} ({each})")
    print(f"  bar {'PASS' if ratio >= BAR_RATIO else 'FAIL'}: fan-out / W1 >= {BAR_RATIO:g}")
    for line in problems:
        print("  problem: " + line)
    if args.json is not None:
        args.json.write_text(
            json.dumps({"code_version": version, "runs": runs}, indent=2, default=str)
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
