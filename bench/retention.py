"""Schedule retention beside W1: what deleting ended schedules costs the delivery rate.

    .venv/bin/python bench/retention.py                    # 1,000,000 ended schedules, 3 runs
    .venv/bin/python bench/retention.py --ended 50000 --runs 1 --count 2000

PostgreSQL only. One database for the whole script: it is migrated, then loaded in SQL with
`--ended` (1,000,000) schedules that failed 40 days ago, each with its dead-lettered
occurrence and that occurrence's attempt (clones of one schedule made through the API; dead
letters, which occurrence retention keeps, so that every schedule deleted takes rows with it),
and `VACUUM ANALYZE`d. Each run is two W1 measurements of bench/run.py (`--count` one-shots due
at one instant, created in batches before it; deliveries/s = received / (last arrival - due)),
each with a fresh `chronoq serve` on that database:

- *off*: `CHRONOQ_SCHEDULE_RETENTION=0`, so nothing deletes schedules;
- *pruning*: the default 30 days with `CHRONOQ_RETENTION_INTERVAL=0.5`: W1 is created once
  the service's metrics show schedules being deleted, and `chronoq_schedules_pruned_total`
  read at the due instant and at the last arrival tells how many went while W1 was delivered.

The two alternate (off first on odd runs). Bar, on the median over runs of pruning / off of
the same run: at least 0.9. Every W1 occurrence must arrive exactly once.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import aiohttp
import asyncpg

sys.path.insert(0, str(Path(__file__).resolve().parent))

import run as bench

BAR = 0.9
CHUNK = 100_000
AGE = "40 days"

# Clones of the template schedule (the only one there is when this runs), each with a clone
# of its occurrence and of that occurrence's attempt: ids fresh, names and idempotency keys
# none, everything changed AGE ago.
_CLONE = f"""
WITH made AS (
    INSERT INTO schedules
    SELECT r.*
    FROM schedules AS t CROSS JOIN generate_series(1, $1) AS n,
    LATERAL jsonb_populate_record(NULL::schedules, to_jsonb(t) || jsonb_build_object(
        'id', gen_random_uuid(), 'name', NULL, 'idempotency_key', NULL,
        'status', 'failed', 'updated_at', now() - interval '{AGE}',
        -- naming n makes the record one per clone, not one reused for every clone
        'fire_count', t.fire_count + 0 * n)) AS r
    WHERE t.id = $2
    RETURNING id
), occurrence AS (
    INSERT INTO occurrences
    SELECT r.*
    FROM made CROSS JOIN occurrences AS o,
    LATERAL jsonb_populate_record(NULL::occurrences, to_jsonb(o) || jsonb_build_object(
        'occurrence_id', gen_random_uuid(), 'schedule_id', made.id,
        'status', 'dead_lettered', 'dead_lettered_at', now() - interval '{AGE}',
        'updated_at', now() - interval '{AGE}')) AS r
    WHERE o.schedule_id = $2
    RETURNING occurrence_id
)
INSERT INTO attempts
SELECT r.*
FROM occurrence CROSS JOIN attempts AS a,
LATERAL jsonb_populate_record(NULL::attempts, to_jsonb(a) || jsonb_build_object(
    'id', gen_random_uuid(), 'occurrence_id', occurrence.occurrence_id)) AS r
WHERE a.occurrence_id = (SELECT occurrence_id FROM occurrences WHERE schedule_id = $2)
"""


def plain(url: str) -> str:
    return url.replace("postgresql+asyncpg://", "postgresql://")


async def pruned_so_far(http: aiohttp.ClientSession, base: str) -> float:
    """chronoq_schedules_pruned_total over the replica's processes."""
    async with http.get(base + "/metrics") as response:
        text = await response.text()
    total = 0.0
    for line in text.splitlines():
        if line.startswith("chronoq_schedules_pruned_total"):
            total += float(line.rsplit(" ", 1)[1])
    return total


async def load(ctx: bench.Context, database_url: str) -> dict[str, Any]:
    """Migrate, make the template through the API, then clone it `--ended` times."""
    args = ctx.args
    service = await bench.start_service(
        ctx.procs, ctx.http, database_url, ctx.log_dir, "load", {"CHRONOQ_SCHEDULE_RETENTION": "0"}
    )
    try:
        await ctx.receiver.reset()
        item = {**bench.schedule_item(ctx.receiver.base + "/hook", "", 0, "template")}
        item["trigger"] = {"type": "immediate"}
        (template,) = await bench.create_batches(ctx.http, service.base, [item])
        if not await bench.wait_for_arrivals(ctx.receiver, 1, time.time() + 30):
            raise RuntimeError("the template schedule was not delivered")
        await asyncio.sleep(1.0)  # its settle written, the schedule completed
    finally:
        await ctx.procs.stop(service.proc)
    conn = await asyncpg.connect(plain(database_url))
    try:
        schedule_id = await conn.fetchval(
            "SELECT schedule_id FROM occurrences WHERE occurrence_id = $1", uuid.UUID(template)
        )
        status = await conn.fetchval("SELECT status FROM schedules WHERE id = $1", schedule_id)
        if status != "completed":
            raise RuntimeError(f"the template schedule is {status}, not completed")
        # Each clone is a failed schedule with its dead letter: occurrence retention keeps
        # those, so that only schedule retention deletes them, with everything they hold.
        started = time.time()
        for first in range(0, args.ended, CHUNK):
            await conn.execute(_CLONE, min(CHUNK, args.ended - first), schedule_id)
            bench.log(f"loaded {min(first + CHUNK, args.ended):,} ended schedules")
        loaded = time.time() - started
        await conn.execute("VACUUM ANALYZE")
        counts = {
            table: await conn.fetchval(f"SELECT count(*) FROM {table}")
            for table in ("schedules", "occurrences", "attempts")
        }
    finally:
        await conn.close()
    return {"load_s": loaded, "vacuumed_s": time.time() - started - loaded, **counts}


async def measure(ctx: bench.Context, database_url: str, mode: str, run: int) -> dict[str, Any]:
    args = ctx.args
    extra = {"CHRONOQ_SCHEDULE_RETENTION": "0"}
    if mode == "pruning":
        extra = {"CHRONOQ_RETENTION_INTERVAL": "0.5"}
    tag = f"{mode}-run{run}"
    service = await bench.start_service(ctx.procs, ctx.http, database_url, ctx.log_dir, tag, extra)
    result: dict[str, Any] = {"mode": mode, "run": run}
    try:
        await ctx.receiver.reset()
        if mode == "pruning":
            deadline = time.time() + 30
            while await pruned_so_far(ctx.http, service.base) == 0:
                if time.time() > deadline:
                    raise RuntimeError("no schedule was pruned within 30 s of the start")
                await asyncio.sleep(0.1)
        hook = ctx.receiver.base + "/hook"
        due = round(time.time() + 2.0 + args.count / 1000, 3)
        items = [bench.schedule_item(hook, bench.rfc3339(due), n, "W1") for n in range(args.count)]
        expected = set(await bench.create_batches(ctx.http, service.base, items))
        await asyncio.sleep(max(0.0, due - time.time()))
        before = await pruned_so_far(ctx.http, service.base)
        result["complete"] = await bench.wait_for_arrivals(
            ctx.receiver, len(expected), due + args.timeout
        )
        result["pruned_during"] = await pruned_so_far(ctx.http, service.base) - before
        await asyncio.sleep(args.settle)
    finally:
        result["exit_code"] = await ctx.procs.stop(service.proc)
    records = await ctx.receiver.records()
    result.update(bench.analyse(records, expected))
    span = result["last_arrival"] - due
    result["deliveries_per_s"] = result["received"] / span if span > 0 else math.nan
    result["pruned_per_s"] = result["pruned_during"] / span if span > 0 else math.nan
    if result["lost"] or result["duplicates"] or result["unexpected"]:
        raise RuntimeError(
            f"{tag}: lost {result['lost']}, duplicates {result['duplicates']}, unexpected "
            f"{result['unexpected']}; service log {service.log_path}"
        )
    if mode == "pruning" and not result["pruned_during"]:
        ctx.problems.append(f"{tag}: no schedule was deleted while W1 was delivered")
    return result


async def main_async(args: argparse.Namespace, problems: list[str]) -> dict[str, Any]:
    runs: list[dict[str, Any]] = []
    async with bench.one_database(args, problems, "retention") as (ctx, database_url):
        loaded = await load(ctx, database_url)
        bench.log(f"loaded: {loaded}")
        for run in range(1, args.runs + 1):
            order = ["off", "pruning"] if run % 2 else ["pruning", "off"]
            measured = {}
            for mode in order:
                r = await measure(ctx, database_url, mode, run)
                measured[mode] = r
                bench.log(
                    f"run {run} {mode}: {bench.fmt(r['deliveries_per_s'])} deliveries/s, "
                    f"{r['pruned_during']:.0f} schedules deleted meanwhile "
                    f"({bench.fmt(r['pruned_per_s'])}/s)"
                )
            runs.append(measured)
    return {"loaded": loaded, "runs": runs}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    bench.one_database_arguments(parser)
    parser.add_argument("--ended", type=int, default=1_000_000, help="ended schedules loaded")
    args = parser.parse_args()
    if min(args.runs, args.ended, args.count) < 1:
        parser.error("--runs, --ended and --count must be at least 1")
    bench.refuse_remote(parser, args.pg_admin_url)
    problems: list[str] = []
    try:
        raw = asyncio.run(main_async(args, problems))
    except RuntimeError as exc:
        bench.log(f"FAILED: {exc}")
        return 1
    ratios = [r["pruning"]["deliveries_per_s"] / r["off"]["deliveries_per_s"] for r in raw["runs"]]
    print()
    print(
        f"Schedule retention beside W1, {args.ended:,} ended schedules, "
        f"code {bench.code_version()}:"
    )
    for n, (run, ratio) in enumerate(zip(raw["runs"], ratios, strict=True), 1):
        print(
            f"  run {n}: off {bench.fmt(run['off']['deliveries_per_s'])}/s, pruning "
            f"{bench.fmt(run['pruning']['deliveries_per_s'])}/s "
            f"({run['pruning']['pruned_during']:.0f} deleted meanwhile), ratio {ratio:.2f}"
        )
    median = bench.median(ratios)
    print(
        f"  bar {'PASS' if median >= BAR else 'FAIL'}: pruning / off >= {BAR} "
        f"(median): {median:.2f}"
    )
    for line in problems:
        print("  problem: " + line)
    if args.json is not None:
        args.json.write_text(
            json.dumps({**raw, "ratios": ratios, "problems": problems}, indent=2, default=str)
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
