"""W1 while a day of history is dropped: what retention's `DROP` of a partition costs the
delivery rate (PostgreSQL, whose attempt log is kept in day partitions).

    .venv/bin/python bench/history_drop.py                 # a day of 1,000,000 attempts, 3 runs
    .venv/bin/python bench/history_drop.py --rows 100000 --runs 1

One database for the whole script, migrated by the first service. Before each run a partition
of the attempt log for a day of its own (10 days back, and a day further each run) is loaded
in SQL with `--rows` attempts: every hundredth an attempt of a dead letter of that day, which
the drop keeps, the rest of occurrences retention already deleted. That partition alone is
then `VACUUM ANALYZE`d. Each run is two W1 measurements of bench/run.py (`--count` one-shots
due at one instant, created in batches before it; deliveries/s = received / (last arrival -
due)), each with a fresh `chronoq serve`:

- *kept*: `CHRONOQ_RETENTION` of 30 days, so the day is not expired and nothing is dropped;
- *dropped*: `CHRONOQ_RETENTION` set so that the day expires half a second after the due
  instant, with `CHRONOQ_RETENTION_INTERVAL=0.5`: the pruner drops it while W1 is delivered
  (`chronoq_history_partitions_dropped_total` read at the due instant and at the last
  arrival says it did), keeping its dead letters' attempts.

The two alternate (kept first on odd runs). Reported: dropped / kept of the same run, and
its median; every W1 occurrence must arrive exactly once.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import sys
import time
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import aiohttp
import asyncpg

sys.path.insert(0, str(Path(__file__).resolve().parent))

import run as bench

DAYS_BACK = 10
LEAD = 0.5

# The day's attempts: every hundredth of a dead letter made here (kept by the drop), the rest of
# occurrences already gone.
_LOAD = """
WITH dead AS (
    INSERT INTO occurrences
    SELECT r.*
    FROM occurrences AS o CROSS JOIN generate_series(1, $1 / 100) AS n,
    LATERAL jsonb_populate_record(NULL::occurrences, to_jsonb(o) || jsonb_build_object(
        'occurrence_id', gen_random_uuid(), 'status', 'dead_lettered',
        'dead_lettered_at', $2::timestamptz, 'updated_at', $2::timestamptz,
        'attempts', n * 0 + 1)) AS r
    WHERE o.occurrence_id = $3
    RETURNING occurrence_id
), owners AS (
    SELECT occurrence_id FROM dead
    UNION ALL
    SELECT gen_random_uuid() FROM generate_series(1, $1 - $1 / 100)
)
INSERT INTO attempts (id, occurrence_id, attempt, started_at, duration_ms, outcome,
                      status_code, response_excerpt, replica)
SELECT gen_random_uuid(), occurrence_id, 1, $2::timestamptz + random() * interval '23 hours',
       5, 'delivered', 200, 'ok', 'bench'
FROM owners
"""


def plain(url: str) -> str:
    return url.replace("postgresql+asyncpg://", "postgresql://")


async def dropped_so_far(http: aiohttp.ClientSession, base: str) -> float:
    """chronoq_history_partitions_dropped_total{table="attempts"} over the replica's
    processes."""
    async with http.get(base + "/metrics") as response:
        text = await response.text()
    return sum(
        float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith("chronoq_history_partitions_dropped_total{")
        and 'table="attempts"' in line
    )


def the_day(run: int) -> datetime:
    """The start of the UTC day whose attempts run `run` drops: a day of its own, since
    what an earlier run kept of its day is in the default partition, which a partition of
    that day again would have to take it from."""
    today = datetime.now(UTC).replace(hour=0, minute=0, second=0, microsecond=0)
    return today - timedelta(days=DAYS_BACK + run)


async def template(ctx: bench.Context, database_url: str) -> str:
    """Migrate, and make one delivered occurrence through the API (the dead letters'
    template)."""
    service = await bench.start_service(ctx.procs, ctx.http, database_url, ctx.log_dir, "load")
    try:
        await ctx.receiver.reset()
        item = {**bench.schedule_item(ctx.receiver.base + "/hook", "", 0, "template")}
        item["trigger"] = {"type": "immediate"}
        (made,) = await bench.create_batches(ctx.http, service.base, [item])
        if not await bench.wait_for_arrivals(ctx.receiver, 1, time.time() + 30):
            raise RuntimeError("the template schedule was not delivered")
        await asyncio.sleep(1.0)
    finally:
        await ctx.procs.stop(service.proc)
    return made


async def load(database_url: str, rows: int, occurrence: str, run: int) -> dict[str, Any]:
    """The day's partition, made and filled."""
    day = the_day(run)
    name = f"attempts_p{day + timedelta(days=1):%Y%m%d}"
    conn = await asyncpg.connect(plain(database_url))
    try:
        started = time.time()
        # The migration's partition reaches back over every day before tomorrow: gone (it
        # holds the template's attempt alone), so that the day can have its own.
        for (upto,) in await conn.fetch(
            "SELECT c.relname FROM pg_inherits AS i JOIN pg_class AS c ON c.oid = i.inhrelid"
            " WHERE i.inhparent = 'attempts'::regclass AND c.relname LIKE 'attempts_upto_%'"
        ):
            await conn.execute(f"ALTER TABLE attempts DETACH PARTITION {upto}")
            await conn.execute(f"DROP TABLE {upto}")
        await conn.execute(
            f"CREATE TABLE {name} PARTITION OF attempts FOR VALUES FROM "
            f"('{day.isoformat()}') TO ('{(day + timedelta(days=1)).isoformat()}')"
        )
        await conn.execute(_LOAD, rows, day, uuid.UUID(occurrence))
        # The day alone: statistics of the nearly empty tables W1 writes to would plan its
        # claims for a table of a hundred rows (a burst between two runs of autovacuum,
        # which is not what this measures).
        await conn.execute(f"VACUUM ANALYZE {name}")
        held = await conn.fetchval(f"SELECT count(*) FROM {name}")
    finally:
        await conn.close()
    return {"partition": name, "rows": held, "load_s": time.time() - started}


async def measure(ctx: bench.Context, database_url: str, mode: str, run: int) -> dict[str, Any]:
    args = ctx.args
    due = round(time.time() + 6.0 + args.count / 1000, 3)
    ends = (the_day(run) + timedelta(days=1)).timestamp()
    extra = {"CHRONOQ_RETENTION": str(30 * 86400)}
    if mode == "dropped":
        extra = {
            "CHRONOQ_RETENTION": f"{due + LEAD - ends:.3f}",
            "CHRONOQ_RETENTION_INTERVAL": "0.5",
        }
    tag = f"{mode}-run{run}"
    service = await bench.start_service(ctx.procs, ctx.http, database_url, ctx.log_dir, tag, extra)
    result: dict[str, Any] = {"mode": mode, "run": run}
    try:
        await ctx.receiver.reset()
        hook = ctx.receiver.base + "/hook"
        items = [bench.schedule_item(hook, bench.rfc3339(due), n, "W1") for n in range(args.count)]
        expected = set(await bench.create_batches(ctx.http, service.base, items))
        if time.time() > due:
            raise RuntimeError(f"{tag}: W1 was created after its due instant")
        await asyncio.sleep(max(0.0, due - time.time()))
        before = await dropped_so_far(ctx.http, service.base)
        result["complete"] = await bench.wait_for_arrivals(
            ctx.receiver, len(expected), due + args.timeout
        )
        result["dropped_during"] = await dropped_so_far(ctx.http, service.base) - before
        await asyncio.sleep(args.settle)
    finally:
        result["exit_code"] = await ctx.procs.stop(service.proc)
    records = await ctx.receiver.records()
    result.update(bench.analyse(records, expected))
    span = result["last_arrival"] - due
    result["deliveries_per_s"] = result["received"] / span if span > 0 else math.nan
    if result["lost"] or result["duplicates"] or result["unexpected"]:
        raise RuntimeError(
            f"{tag}: lost {result['lost']}, duplicates {result['duplicates']}, unexpected "
            f"{result['unexpected']}; service log {service.log_path}"
        )
    if mode == "dropped" and result["dropped_during"] != 1:
        ctx.problems.append(f"{tag}: the day was not dropped while W1 was delivered")
    return result


async def main_async(args: argparse.Namespace, problems: list[str]) -> dict[str, Any]:
    runs: list[dict[str, Any]] = []
    async with bench.one_database(args, problems, "history_drop") as (ctx, database_url):
        occurrence = await template(ctx, database_url)
        for run in range(1, args.runs + 1):
            loaded = await load(database_url, args.rows, occurrence, run)
            bench.log(f"run {run}: loaded {loaded}")
            order = ["kept", "dropped"] if run % 2 else ["dropped", "kept"]
            measured: dict[str, Any] = {"loaded": loaded}
            for mode in order:
                r = await measure(ctx, database_url, mode, run)
                measured[mode] = r
                bench.log(
                    f"run {run} {mode}: {bench.fmt(r['deliveries_per_s'])} deliveries/s,"
                    f" {r['dropped_during']:.0f} dropped meanwhile"
                )
            runs.append(measured)
    return {"runs": runs}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    bench.one_database_arguments(parser)
    parser.add_argument("--rows", type=int, default=1_000_000, help="attempts in the day")
    args = parser.parse_args()
    if min(args.runs, args.rows, args.count) < 1:
        parser.error("--runs, --rows and --count must be at least 1")
    bench.refuse_remote(parser, args.pg_admin_url)
    problems: list[str] = []
    try:
        raw = asyncio.run(main_async(args, problems))
    except RuntimeError as exc:
        bench.log(f"FAILED: {exc}")
        return 1
    ratios = [r["dropped"]["deliveries_per_s"] / r["kept"]["deliveries_per_s"] for r in raw["runs"]]
    print()
    print(f"W1 while a day of {args.rows:,} attempts is dropped, code {bench.code_version()}:")
    for n, (run, ratio) in enumerate(zip(raw["runs"], ratios, strict=True), 1):
        print(
            f"  run {n}: kept {bench.fmt(run['kept']['deliveries_per_s'])}/s, dropped "
            f"{bench.fmt(run['dropped']['deliveries_per_s'])}/s, ratio {ratio:.2f}"
        )
    print(f"  dropped / kept (median): {bench.median(ratios):.2f}")
    for line in problems:
        print("  problem: " + line)
    if args.json is not None:
        args.json.write_text(
            json.dumps({**raw, "ratios": ratios, "problems": problems}, indent=2, default=str)
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
