"""On time beside a bulk replay: how late a paced stream runs while dead letters are replayed.

    .venv/bin/python bench/replay.py                        # 3 runs each on 1 and 2 replicas
    .venv/bin/python bench/replay.py --runs 1 --replicas 1

On a fresh PostgreSQL database, `--replicas` (1, 2) `chronoq serve` processes with default
settings, webhooks to bench/receiver.py. First `--dead` (2,000) one-shots, due at once and
with one attempt each, go to the receiver's `/switch` route answering 400: each is
dead-lettered. The route then answers 200, and a paced stream of `--stream` (300) one-shots is
created, due `--gap` (20 ms) apart from 2 s on, to `/hook`; when the first of them is due,
one `POST /v1/dead-letters/replay` (by event type) sends every dead letter out again.

Lateness = arrival at the receiver minus `X-Scheduled-For`, for the stream only (and, apart
from the receiver's own queueing, how late each first attempt started by its attempt log:
"started late"); the replay's
drain time = from the replay request until the receiver has counted every replayed attempt.
*alone* runs the same stream with no replay, on fresh services, interleaved: the lateness the
stream has by itself. Every stream occurrence must arrive exactly once.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path
from typing import Any

import aiohttp

sys.path.insert(0, str(Path(__file__).resolve().parent))

import mixed
import run as bench

REPLAYED_EVENT = "bench.replayed"


async def dead_letters(http: aiohttp.ClientSession, base: str) -> int:
    """How many dead letters the service lists, following the cursor."""
    count, cursor = 0, None
    while True:
        params: dict[str, Any] = {"limit": 500, "event_type": REPLAYED_EVENT}
        if cursor:
            params["cursor"] = cursor
        async with http.get(base + "/v1/dead-letters", params=params) as response:
            page = await response.json(content_type=None)
        count += len(page["items"])
        cursor = page.get("next_cursor")
        if not cursor:
            return count


async def started_late(http: aiohttp.ClientSession, base: str, ids: set[str]) -> dict[str, Any]:
    """How late each occurrence's first attempt started by its replica's clock (its attempt
    log's `started_at` minus its fire instant): the lateness the service made, apart from
    the receiver's own queueing. p50 / p99 / max in ms."""
    lags: list[float] = []
    by_instant: list[tuple[str, float]] = []
    semaphore = asyncio.Semaphore(8)

    async def one(occurrence_id: str) -> None:
        async with semaphore:
            async with http.get(f"{base}/v1/occurrences/{occurrence_id}") as response:
                fire_at = datetime.fromisoformat((await response.json())["fire_at"])
            async with http.get(f"{base}/v1/occurrences/{occurrence_id}/attempts") as response:
                first = (await response.json())["items"][0]
        lag = (datetime.fromisoformat(first["started_at"]) - fire_at).total_seconds()
        lags.append(lag)
        by_instant.append((fire_at.isoformat(), lag))

    await asyncio.gather(*(one(i) for i in ids))
    lags.sort()
    return {
        "start_p50_ms": 1000 * lags[len(lags) // 2],
        "start_p99_ms": 1000 * lags[min(len(lags) - 1, int(len(lags) * 0.99))],
        "start_max_ms": 1000 * lags[-1],
        "start_lags": sorted(by_instant),
    }


async def until(condition: Any, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not await condition():
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out after {timeout:g}s waiting for {what}")
        await asyncio.sleep(0.2)


async def one_run(ctx: bench.Context, replicas: int, replay: bool, tag: str) -> dict[str, Any]:
    args = ctx.args
    database_url, handle = await ctx.databases.fresh("postgresql")
    http, receiver = ctx.http, ctx.receiver
    result: dict[str, Any] = {"tag": tag, "replicas": replicas, "replay": replay}
    try:
        services = [
            await bench.start_service(ctx.procs, http, database_url, ctx.log_dir, f"{tag}-{i}")
            for i in range(replicas)
        ]
        try:
            await receiver.reset()
            base = services[0].base
            if replay:
                async with http.post(receiver.base + "/switch/400") as response:
                    response.raise_for_status()
                now = time.time()
                items = [
                    {
                        **mixed.oneshot_item(receiver.base + "/switch", now, n),
                        "event_type": REPLAYED_EVENT,
                        "max_attempts": 1,
                    }
                    for n in range(args.dead)
                ]
                for start in range(0, len(items), 1000):
                    await mixed.post_batch(http, base, items[start : start + 1000])

                async def all_dead() -> bool:
                    return await dead_letters(http, base) >= int(args.dead)

                await until(all_dead, 120, f"{args.dead} dead letters")
                async with http.post(receiver.base + "/switch/200") as response:
                    response.raise_for_status()
            first = time.time() + 2.0
            stream = [
                mixed.oneshot_item(receiver.base + "/hook", first + n * args.gap, n)
                for n in range(args.stream)
            ]
            created = await mixed.post_batch(http, base, stream)
            expected = {item["next_occurrence_id"] for item in created}
            await asyncio.sleep(max(0.0, first - time.time()))
            if replay:
                replayed_at = time.time()
                body = {"event_type": REPLAYED_EVENT}
                async with http.post(base + "/v1/dead-letters/replay", json=body) as response:
                    answer = await response.json(content_type=None)
                    if response.status != 202:
                        raise RuntimeError(f"replay answered {response.status}: {answer}")
                result["replayed"] = answer["replayed"]
            last_due = first + args.stream * args.gap
            await bench.wait_for_arrivals(receiver, len(expected), last_due + 60)
            if replay:

                async def drained() -> bool:
                    return (await receiver.stats())["switch"] >= 2 * int(args.dead)

                await until(drained, 120, "the replay to drain")
                result["drain_s"] = time.time() - replayed_at
            result.update(await started_late(http, base, expected))
        finally:
            for service in services:
                await ctx.procs.stop(service.proc)
        records = await receiver.records()
        result.update(bench.analyse(records, expected))
    finally:
        await ctx.databases.drop(handle)
    return result


async def main_async(args: argparse.Namespace) -> list[dict[str, Any]]:
    procs = bench.Processes()
    databases = bench.Databases(args.pg_admin_url)
    log_dir = Path(tempfile.mkdtemp(prefix="chronoq_replay_logs_"))
    bench.log(f"service logs in {log_dir}")
    results: list[dict[str, Any]] = []
    try:
        timeout = aiohttp.ClientTimeout(total=120)
        connector = aiohttp.TCPConnector(limit=16)
        async with aiohttp.ClientSession(
            connector=connector, trust_env=False, timeout=timeout
        ) as http:
            receiver = bench.ReceiverClient(procs, http)
            await receiver.start()
            ctx = bench.Context(args, procs, http, receiver, databases, log_dir, [])
            try:
                for run in range(1, args.runs + 1):
                    for replicas in args.replicas:
                        for replay in (False, True):
                            name = f"{replicas} replica(s), {'replay' if replay else 'alone'}"
                            r = await one_run(ctx, replicas, replay, f"{replicas}-{replay}-{run}")
                            results.append(r)
                            drain = (
                                f", replay of {r['replayed']} drained in {r['drain_s']:.1f}s"
                                if replay
                                else ""
                            )
                            bench.log(
                                f"run {run} {name}: late p50 {r['lag_p50_ms']:.1f} ms, p99 "
                                f"{r['lag_p99_ms']:.1f} ms, max {r['lag_max_ms']:.0f} ms "
                                f"(started late p50 {r['start_p50_ms']:.1f}, p99 "
                                f"{r['start_p99_ms']:.1f}, max {r['start_max_ms']:.0f} ms); "
                                f"lost {r['lost']}, dup {r['duplicates']}{drain}"
                            )
            finally:
                await receiver.stop()
    finally:
        procs.kill_all()
        await databases.drop_all()
    return results


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--replicas", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--dead", type=int, default=2000, help="dead letters replayed")
    parser.add_argument("--stream", type=int, default=300, help="one-shots in the paced stream")
    parser.add_argument("--gap", type=float, default=0.02, help="seconds between them")
    parser.add_argument("--pg-admin-url", default=bench.DEFAULT_PG_ADMIN_URL)
    parser.add_argument("--json", type=Path, help="write every run's figures here")
    args = parser.parse_args()
    results = asyncio.run(main_async(args))
    if args.json:
        args.json.write_text(json.dumps(results, indent=1, default=str))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
