"""Pending at scale (DESIGN 16): W1 beside N future schedules, for N along a curve.

    .venv/bin/python bench/pending.py                                 # 0, 10^6, 3x10^6, 10^7
    .venv/bin/python bench/pending.py --counts 0 1000000 --no-docs

For each N in `--counts`, on a fresh PostgreSQL database and a fresh `chronoq serve` (default
settings, webhooks to bench/receiver.py):

1. `--template` (10,000) one-shot webhook schedules due in 30 days are created through
   `POST /v1/schedules/batch`, so that every row is what the API writes; the rest of the N
   are copies of those rows made by SQL (`INSERT ... SELECT` over `generate_series`, each
   uuid column mapped to `md5(value || ':' || copy)`, so references stay whole), which takes
   minutes where the API would take hours; then `VACUUM ANALYZE`, as a long-running
   installation's autovacuum would have left it.
2. Bytes a pending schedule: the database's size after, less its size before the creates,
   over N (tables, indexes, TOAST).
3. A checkpoint (the load's dirty pages written, as a running installation's long were),
   then W1 `--w1-rounds` (3) times one after the other: 10,000 one-shots due at one instant;
   deliveries/s = deliveries received / (last arrival - due instant), the median of the
   rounds; every one must arrive exactly once.
4. The service's memory (VmRSS of its process tree) before W1 and after it.

The ratio of each N's W1 to the N = 0 one of the same session is the figure to read: the
machine's noise moves both. Bars (DESIGN 16): W1 beside 10^7 at least 0.9 of W1 beside none,
under 1 KiB a pending schedule, memory flat. All traffic stays on 127.0.0.1.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import aiohttp
import asyncpg

sys.path.insert(0, str(Path(__file__).resolve().parent))

import run as bench

SECTION = "pending"
COUNTS = (0, 1_000_000, 3_000_000, 10_000_000)
TEMPLATE = 10_000
W1_COUNT = 10_000
DUE_IN = 30 * 86400.0
# Copies made per statement: 100 x 10,000 = 10^6 rows a table, one transaction each.
COPIES_PER_STATEMENT = 100
# What a create writes; any other table holding a row per schedule is a new write to copy.
COPIED = ("schedules", "occurrences", "schedule_events")
BAR_RATIO = 0.9
BAR_BYTES = 1024


def rss_mb(pids: list[int]) -> float:
    total = 0.0
    for pid in pids:
        try:
            for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1]) / 1024
        except (OSError, IndexError, ValueError):
            return math.nan
    return total


async def connect(database_url: str) -> asyncpg.Connection:
    """A connection of the driver's own to the service's database."""
    return await asyncpg.connect(database_url.replace("postgresql+asyncpg", "postgresql"))


async def _copy_statement(conn: asyncpg.Connection, table: str) -> str:
    """`INSERT INTO table SELECT ...` of every row of the template's copy of `table` (a
    temporary table of the rows it held), once per copy number $1..$2, each uuid column's
    value mapped by the copy number."""
    columns = await conn.fetch(
        "SELECT column_name, data_type FROM information_schema.columns"
        " WHERE table_schema = 'public' AND table_name = $1 ORDER BY ordinal_position",
        table,
    )
    names = [f'"{c["column_name"]}"' for c in columns]
    values = [
        f"md5(t.{name}::text || ':' || g)::uuid" if c["data_type"] == "uuid" else f"t.{name}"
        for name, c in zip(names, columns, strict=True)
    ]
    return (
        f"INSERT INTO {table} ({', '.join(names)}) SELECT {', '.join(values)}"
        f" FROM template_{table} AS t CROSS JOIN generate_series($1::int, $2::int) AS g"
    )


async def multiply(database_url: str, template: int, count: int) -> None:
    """The `template` schedules and what they hold, copied until `count` exist."""
    copies = count // template - 1
    conn = await connect(database_url)
    try:
        # A partition's rows are its table's (copied through the table).
        for table in await conn.fetch(
            "SELECT coalesce(parent.relname, s.relname) AS relname FROM pg_stat_user_tables s"
            " LEFT JOIN pg_inherits i ON i.inhrelid = s.relid"
            " LEFT JOIN pg_class parent ON parent.oid = i.inhparent"
            " WHERE s.n_live_tup >= $1",
            template,
        ):
            if table["relname"] not in COPIED:
                raise RuntimeError(f"a create writes {table['relname']} too: copy it as well")
        statements = {table: await _copy_statement(conn, table) for table in COPIED}
        for table in COPIED:
            await conn.execute(f"CREATE TEMP TABLE template_{table} AS SELECT * FROM {table}")
        for first in range(1, copies + 1, COPIES_PER_STATEMENT):
            last = min(copies, first + COPIES_PER_STATEMENT - 1)
            async with conn.transaction():
                for table in COPIED:  # parents first
                    await conn.execute(statements[table], first, last)
            bench.log(f"  {template * (last + 1):,} of {count:,} schedules")
        await conn.execute("VACUUM ANALYZE")
    finally:
        await conn.close()


async def settle_database(database_url: str) -> None:
    """A checkpoint, so that W1 does not share the disk with the load's dirty pages (a running
    installation's were written long ago)."""
    conn = await connect(database_url)
    try:
        await conn.execute("CHECKPOINT")
    finally:
        await conn.close()


# What W1's statements cost the database, per statement (`--statements`).
_STATEMENTS = """
SELECT left(regexp_replace(query, '\\s+', ' ', 'g'), 160) AS query, calls, rows,
       round(total_exec_time::numeric, 1) AS total_ms,
       shared_blks_hit AS hit, shared_blks_read AS read, shared_blks_dirtied AS dirtied,
       shared_blks_written AS written, round(blk_read_time::numeric, 1) AS read_ms,
       wal_records, wal_fpi, wal_bytes
FROM pg_stat_statements
WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database())
ORDER BY total_exec_time DESC LIMIT 20
"""
_CLUSTER = """
SELECT (SELECT row_to_json(w) FROM pg_stat_wal AS w) AS wal,
       (SELECT row_to_json(b) FROM pg_stat_bgwriter AS b) AS bgwriter,
       (SELECT row_to_json(d) FROM pg_stat_database AS d
        WHERE datname = current_database()) AS database
"""


async def statements_reset(database_url: str) -> dict[str, Any]:
    """Start counting W1's statements (`pg_stat_statements`, which the server must preload);
    the server's WAL, writer and database counters at the start."""
    conn = await connect(database_url)
    try:
        await conn.execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
        await conn.execute("SELECT pg_stat_statements_reset()")
        return dict(await conn.fetchrow(_CLUSTER))
    finally:
        await conn.close()


async def statements_read(database_url: str, start: dict[str, Any]) -> dict[str, Any]:
    """The costliest statements since `statements_reset`, and the counters' growth."""
    conn = await connect(database_url)
    try:
        rows = [dict(row) for row in await conn.fetch(_STATEMENTS)]
        end = dict(await conn.fetchrow(_CLUSTER))
    finally:
        await conn.close()
    grown: dict[str, Any] = {}
    for name in ("wal", "bgwriter", "database"):
        before, after = json.loads(start[name]), json.loads(end[name])
        grown[name] = {
            key: after[key] - before[key]
            for key, value in after.items()
            if isinstance(value, int | float) and isinstance(before.get(key), int | float)
        }
    return {"statements": rows, "grown": grown}


def write_json(prefix: str, count: int, found: dict[str, Any]) -> Path:
    path = Path(f"{prefix}.{count}.json")
    path.write_text(json.dumps(found, indent=1, default=str))
    return path


async def database_size(database_url: str) -> int:
    conn = await connect(database_url)
    try:
        return int(await conn.fetchval("SELECT pg_database_size(current_database())"))
    finally:
        await conn.close()


async def one_point(ctx: bench.Context, count: int) -> dict[str, Any]:
    args = ctx.args
    database_url, handle = await ctx.databases.fresh("postgresql")
    result: dict[str, Any] = {"count": count}
    try:
        service = await bench.start_service(
            ctx.procs, ctx.http, database_url, ctx.log_dir, f"pending-{count}"
        )
        try:
            await ctx.receiver.reset()
            hook = ctx.receiver.base + "/hook"
            before = await database_size(database_url)
            if count:
                made = min(count, args.template)
                later = bench.rfc3339(time.time() + DUE_IN)
                items = [bench.schedule_item(hook, later, n, "future") for n in range(made)]
                started = time.time()
                await bench.create_batches(ctx.http, service.base, items)
                bench.log(f"  {made:,} created through the API in {time.time() - started:.0f}s")
                if count > made:
                    started = time.time()
                    await multiply(database_url, made, count)
                    bench.log(f"  copied to {count:,} in {time.time() - started:.0f}s")
            await settle_database(database_url)
            size = await database_size(database_url)
            result["bytes_per_schedule"] = (size - before) / count if count else math.nan
            result["database_mb"] = size / 2**20
            pids = bench.process_tree(service.proc.pid)
            result["rss_before_mb"] = rss_mb(pids)
            rates, lags, lost, duplicates = [], [], 0, 0
            counted = await statements_reset(database_url) if args.statements else None
            for _ in range(args.w1_rounds):  # one after the other, on the same service
                await ctx.receiver.reset()
                lead = 2.0 + W1_COUNT / 1000
                due = round(time.time() + lead, 3)
                at = bench.rfc3339(due)
                items = [bench.schedule_item(hook, at, n, "W1") for n in range(W1_COUNT)]
                expected = set(await bench.create_batches(ctx.http, service.base, items))
                if time.time() > due:
                    ctx.problems.append(f"N={count}: W1's creates ended after its due instant")
                await bench.wait_for_arrivals(ctx.receiver, len(expected), due + args.timeout)
                await asyncio.sleep(1.0)
                found = bench.analyse(await ctx.receiver.records(), expected)
                span = found["last_arrival"] - due
                rates.append(found["received"] / span if span > 0 else math.nan)
                lags.append(found["lag_p99_ms"])
                lost += found["lost"]
                duplicates += found["duplicates"]
            if counted is not None:
                costs = await statements_read(database_url, counted)
                bench.log(f"  W1's statements in {write_json(args.statements, count, costs)}")
            result["rss_after_mb"] = rss_mb(pids)
            result["peak_rss_mb"] = sum(map(bench.peak_rss_mb, pids))
        finally:
            result["exit_code"] = await ctx.procs.stop(service.proc)
        result.update(
            lost=lost,
            duplicates=duplicates,
            lag_p99_ms=bench.median(lags),
            deliveries_per_s=bench.median(rates),
            w1_rounds=rates,
        )
        if lost or duplicates:
            ctx.problems.append(f"N={count}: lost {lost}, dup {duplicates}")
        if result["exit_code"] not in bench.GRACEFUL_EXITS:
            ctx.problems.append(f"N={count}: service exit code {result['exit_code']}")
    finally:
        await ctx.databases.drop(handle)
    return result


def _cell(
    points: list[dict[str, Any]], key: str, digits: int = 0, values: list[float] | None = None
) -> str:
    """The median of `key` over `points` (or of `values`), each in brackets."""
    got = values if values is not None else [p[key] for p in points]
    each = ", ".join(bench.fmt(v, digits) for v in got)
    return f"{bench.fmt(bench.median(got), digits)} ({each})"


def section(args: argparse.Namespace, runs: list[list[dict[str, Any]]]) -> str:
    """The curve: each N's medians over the runs, and its W1 against N = 0's, run by run."""
    lines = [
        "## Pending at scale: W1 beside 10^6 to 10^7 future schedules",
        "",
        f"{datetime.now(UTC):%Y-%m-%d %H:%M} UTC, code {bench.code_version()}, "
        f"`bench/pending.py`, {len(runs)} run(s) of the curve; medians, each run in brackets.",
        "",
        f"Per N, a fresh PostgreSQL database and `chronoq serve` with default settings: "
        f"{args.template:,} one-shots due in 30 days created through the API, copied by SQL "
        "to N (every uuid mapped, references whole), `VACUUM ANALYZE`, a checkpoint; then "
        f"W1 (10,000 one-shots due at one instant) {args.w1_rounds} times one after the other, "
        "the median of those. Bytes = the database's growth over N (tables, "
        "indexes, TOAST); W1 / W1 beside none is within each run.",
        "",
        "| pending schedules | bytes a schedule | W1 deliveries/s | W1 / W1 beside none "
        "| W1 lateness p99 (ms) | RSS before W1 / after (MiB) |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    counts = [point["count"] for point in runs[0]]
    for i, count in enumerate(counts):
        points = [run[i] for run in runs]
        ratios = [run[i]["deliveries_per_s"] / run[0]["deliveries_per_s"] for run in runs]
        lines.append(
            f"| {count:,} | {_cell(points, 'bytes_per_schedule') if count else '-'} "
            f"| {_cell(points, 'deliveries_per_s')} "
            f"| {_cell(points, '', 2, ratios) if count else '1'} "
            f"| {_cell(points, 'lag_p99_ms')} "
            f"| {bench.fmt(bench.median([p['rss_before_mb'] for p in points]))} / "
            f"{bench.fmt(bench.median([p['rss_after_mb'] for p in points]))} |"
        )
    top = [run[-1] for run in runs]
    ratio = bench.median([run[-1]["deliveries_per_s"] / run[0]["deliveries_per_s"] for run in runs])
    size = bench.median([p["bytes_per_schedule"] for p in top])
    lost = sum(p["lost"] + p["duplicates"] for run in runs for p in run)
    met = ratio >= BAR_RATIO and size < BAR_BYTES and lost == 0
    lines += [
        "",
        f"Bars at {counts[-1]:,}: W1 at least {BAR_RATIO} of W1 beside none, under "
        f"{BAR_BYTES} bytes a pending schedule, no delivery lost or repeated "
        f"({'met' if met else 'NOT met'}: {ratio:.2f}, {size:,.0f} bytes, {lost} lost or "
        "repeated).",
    ]
    return "\n".join(lines)


async def main_async(args: argparse.Namespace) -> list[list[dict[str, Any]]]:
    procs = bench.Processes()
    databases = bench.Databases(args.pg_admin_url)
    log_dir = Path(tempfile.mkdtemp(prefix="chronoq_pending_logs_"))
    bench.log(f"service logs in {log_dir}")
    runs: list[list[dict[str, Any]]] = []
    problems: list[str] = []
    try:
        timeout = aiohttp.ClientTimeout(total=300)
        async with aiohttp.ClientSession(trust_env=False, timeout=timeout) as http:
            receiver = bench.ReceiverClient(procs, http)
            await receiver.start()
            ctx = bench.Context(args, procs, http, receiver, databases, log_dir, problems)
            try:
                for run in range(1, args.runs + 1):
                    points = []
                    for count in args.counts:
                        bench.log(f"run {run}: beside {count:,}")
                        point = await one_point(ctx, count)
                        points.append(point)
                        bench.log(
                            f"run {run} beside {count:,}: W1 {point['deliveries_per_s']:,.0f}/s "
                            f"({', '.join(f'{r:,.0f}' for r in point['w1_rounds'])}) "
                            f"(lost {point['lost']}, dup {point['duplicates']}), "
                            f"{point['bytes_per_schedule']:,.0f} bytes a schedule, RSS "
                            f"{point['rss_before_mb']:.0f} -> {point['rss_after_mb']:.0f} MiB"
                        )
                    runs.append(points)
            finally:
                await receiver.stop()
    finally:
        procs.kill_all()
        await databases.drop_all()
    for line in problems:
        bench.log(line)
    return runs


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--counts", type=int, nargs="+", default=list(COUNTS))
    parser.add_argument("--runs", type=int, default=1)
    parser.add_argument("--template", type=int, default=TEMPLATE)
    parser.add_argument(
        "--w1-rounds", type=int, default=3, help="W1s one after the other per N (median)"
    )
    parser.add_argument("--timeout", type=float, default=120.0)
    parser.add_argument("--pg-admin-url", default=bench.DEFAULT_PG_ADMIN_URL)
    parser.add_argument("--no-docs", dest="docs", action="store_false")
    parser.add_argument(
        "--statements",
        metavar="PREFIX",
        help="write what W1's statements cost the database (pg_stat_statements, which the "
        "server must preload) and its WAL and writer counters to PREFIX.<N>.json",
    )
    args = parser.parse_args()
    if args.counts[0] != 0:
        parser.error("--counts must start with 0 (the W1 each N is read against)")
    if any(count % args.template for count in args.counts[1:] if count > args.template):
        parser.error("every count above --template must be a multiple of it")
    runs = asyncio.run(main_async(args))
    text = section(args, runs)
    print(text)
    if args.docs:
        bench.record(SECTION, text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
