"""The cost of flow keys: W1 with and without a key, a key's rate, W1 beside a held-back backlog.

    .venv/bin/python bench/flow.py                        # PostgreSQL, 5 runs
    .venv/bin/python bench/flow.py --runs 1 --count 500 --rate-count 100 --rate 50 --held 2000
    .venv/bin/python bench/flow.py --dialect mysql --json /tmp/flow.json

Every measurement gets a fresh database (PostgreSQL by default, `--dialect` as in
bench/run.py) and a fresh `chronoq serve` with default settings, webhooks to
bench/receiver.py. Each run measures:

- *rate*: `--rate-count` (1,000) one-shots due at one instant on a key PUT with
  `{"rate": R, "period_seconds": 1}` (R = `--rate`, 200; the burst is then R): the key's
  bucket is full at its first claim and lets R start at once, then R a second. Delivered
  rate = (n - R) / (last arrival - first arrival), and that rate / R.
- *unkeyed*: W1 of bench/run.py: `--count` (10,000) one-shots due at one instant T, created
  through `POST /v1/schedules/batch` before T; deliveries/s = occurrences received /
  (last arrival - T).
- *keyed*: the same W1, every schedule naming the flow key `bench-key`, never PUT (so it
  has no limits); its deliveries/s / the unkeyed one of the same run.
- *held*: first `--held` (100,000) one-shots due at once on a key PUT with `{"paused": true}`
  (created before anything is measured, in concurrent batches of the API's largest; the
  key must then count every one as waiting; on PostgreSQL a `VACUUM ANALYZE` then absorbs the
  bulk load, as autovacuum would), then the unkeyed W1, its T after that; its deliveries/s /
  the unkeyed one of the same run.

The three W1 variants run next to each other with *unkeyed* in the middle (keyed first on
odd runs, held first on even ones), so that each ratio is between neighbouring
measurements. Every expected occurrence must arrive exactly once (and be settled in the
database), no held one may arrive at all, or the script stops with an error. Bars, on the
medians over runs: keyed / unkeyed >= 0.8, rate / R within 5 %, held / unkeyed >= 0.9.
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
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import aiohttp

sys.path.insert(0, str(Path(__file__).resolve().parent))

import run as bench

NO_LIMITS_KEY = "bench-key"
RATE_KEY = "bench-rate"
HELD_KEY = "bench-held"
# Concurrent batch creates for the held-back backlog: each a sequence of full batches.
HELD_WORKERS = 4
LABELS = {
    "rate": "rate-limited key",
    "unkeyed": "unkeyed W1",
    "keyed": "W1 on one key, no limits",
    "held": "W1 beside a held-back key",
}

BAR_KEYED_RATIO = 0.8
BAR_RATE_TOLERANCE = 0.05
BAR_HELD_RATIO = 0.9


def items(hook: str, at: float, count: int, workload: str, key: str | None) -> list[dict[str, Any]]:
    """`count` one-shots due at `at` (run.py's items), naming flow key `key` unless None."""
    instant = bench.rfc3339(at)
    made = [bench.schedule_item(hook, instant, n, workload) for n in range(count)]
    return [{**item, "flow_key": key} for item in made] if key else made


async def put_key(http: aiohttp.ClientSession, base: str, key: str, limits: dict[str, Any]) -> None:
    async with http.put(f"{base}/v1/flow-keys/{key}", json=limits) as response:
        answer = await response.json(content_type=None)
        if response.status != 201:
            raise RuntimeError(f"PUT /v1/flow-keys/{key} answered {response.status}: {answer}")


async def key_waiting(http: aiohttp.ClientSession, base: str, key: str) -> int:
    async with http.get(f"{base}/v1/flow-keys/{key}") as response:
        answer = await response.json(content_type=None)
        if response.status != 200:
            raise RuntimeError(f"GET /v1/flow-keys/{key} answered {response.status}: {answer}")
        return int(answer["waiting"])


async def create_held(
    ctx: bench.Context, base: str, hook: str, result: dict[str, Any], database_url: str
) -> None:
    """The paused key and its backlog, due at once; returns when every one is waiting."""
    count = int(ctx.args.held)
    await put_key(ctx.http, base, HELD_KEY, {"paused": True})
    backlog = items(hook, time.time(), count, "flow-held", HELD_KEY)
    share = math.ceil(count / HELD_WORKERS / bench.BATCH) * bench.BATCH
    started = time.time()
    created = await asyncio.gather(
        *(
            bench.create_batches(ctx.http, base, backlog[start : start + share])
            for start in range(0, count, share)
        )
    )
    result["held_create_s"] = time.time() - started
    result["held_create_per_s"] = count / result["held_create_s"]
    result["held_created"] = sum(map(len, created))
    result["held_waiting"] = await key_waiting(ctx.http, base, HELD_KEY)
    if result["held_created"] != count or result["held_waiting"] != count:
        raise RuntimeError(
            f"held: {result['held_created']} created and {result['held_waiting']} waiting "
            f"on {HELD_KEY}, not {count}"
        )
    if ctx.args.dialect == "postgresql":
        # The database absorbs the inserts (autovacuum and analyze of a table grown by the
        # backlog) before the measured W1, so that W1 measures what the held rows cost the
        # claim, not the database's upkeep after a bulk load.
        import asyncpg

        started = time.time()
        conn = await asyncpg.connect(database_url.replace("postgresql+asyncpg://", "postgresql://"))
        try:
            await conn.execute("VACUUM ANALYZE occurrences")
        finally:
            await conn.close()
        result["held_vacuum_s"] = time.time() - started


async def one_run(ctx: bench.Context, kind: str, run: int) -> dict[str, Any]:
    """One measurement on a fresh database and service; raises unless every expected
    occurrence arrived exactly once and nothing else arrived."""
    args = ctx.args
    tag = f"{kind}-run{run}"
    database_url, handle = await ctx.databases.fresh(args.dialect)
    http, receiver = ctx.http, ctx.receiver
    hook = receiver.base + "/hook"
    result: dict[str, Any] = {"kind": kind, "run": run}
    expected: set[str] = set()
    try:
        service = await bench.start_service(ctx.procs, http, database_url, ctx.log_dir, tag)
        try:
            await receiver.reset()
            base = service.base
            key: str | None = None
            if kind == "rate":
                key = RATE_KEY
                limits = {"rate": args.rate, "period_seconds": 1}
                await put_key(http, base, key, limits)
            elif kind == "keyed":
                key = NO_LIMITS_KEY
            elif kind == "held":
                await create_held(ctx, base, hook, result, database_url)
            # As run.py's W1: due a few seconds ahead, so that creation ends before it; with
            # `held`, counted from the end of the backlog's creation.
            count = args.rate_count if kind == "rate" else args.count
            lead = args.lead if args.lead is not None else 2.0 + count / 1000
            due = round(time.time() + lead, 3)
            started = time.time()
            expected = set(
                await bench.create_batches(http, base, items(hook, due, count, kind, key))
            )
            finished = time.time()
            result["create_per_s"] = count / (finished - started)
            result["created_before_due_s"] = due - finished
            if finished > due:
                ctx.problems.append(
                    f"{tag}: creation finished {finished - due:.2f}s after the due instant; "
                    "raise --lead"
                )
            spread = count / args.rate if kind == "rate" else 0.0
            result["complete"] = await bench.wait_for_arrivals(
                receiver, len(expected), due + spread + args.timeout
            )
            await asyncio.sleep(args.settle)
        finally:
            result["exit_code"] = await ctx.procs.stop(service.proc)
        records = await receiver.records()
        result.update(bench.analyse(records, expected))
        received, first, last = result["received"], result["first_arrival"], result["last_arrival"]
        result["deliveries_per_s"] = (
            received / (last - due) if received and last > due else math.nan
        )
        result["spread_per_s"] = (received - 1) / (last - first) if last > first else math.nan
        if kind == "rate":
            # The key's bucket is full at its first claim (the first arrival) and refills at
            # R from then on: n arrivals by the last one is the burst (R) plus R a second.
            result["spread_per_s"] = (
                (received - args.rate) / (last - first) if last > first else math.nan
            )
        _, pending, _ = await ctx.databases.occurrence_state(database_url)
        result["unsettled"] = len(pending & {record[0] for record in records} & expected)
    finally:
        try:
            await ctx.databases.drop(handle)
        except Exception as exc:
            bench.log(f"could not drop {handle}: {exc}")
    flagged = bench.log_problems(service.log_text())
    result["log_problems"] = len(flagged)
    if flagged:
        ctx.problems.append(f"{tag}: {len(flagged)} flagged log lines, first ones:")
        ctx.problems.extend("    " + line for line in flagged[:8])
    if result["exit_code"] not in bench.GRACEFUL_EXITS:
        ctx.problems.append(f"{tag}: service exit code {result['exit_code']}")
    if result["lost"] or result["duplicates"] or result["unexpected"] or result["unsettled"]:
        raise RuntimeError(
            f"{tag}: {len(expected)} expected, lost {result['lost']}, duplicates "
            f"{result['duplicates']}, unexpected arrivals {result['unexpected']}, received but "
            f"still pending {result['unsettled']}; service log {service.log_path}:\n"
            + bench.tail(service.log_text(), 15)
        )
    return result


def figures(run: dict[str, dict[str, Any]], rate: int) -> dict[str, float]:
    """One run's reported figures, ratios between its own measurements."""
    unkeyed = run["unkeyed"]["deliveries_per_s"]
    keyed = run["keyed"]["deliveries_per_s"]
    held = run["held"]["deliveries_per_s"]
    delivered = run["rate"]["spread_per_s"]
    return {
        "unkeyed_per_s": unkeyed,
        "keyed_per_s": keyed,
        "keyed_ratio": keyed / unkeyed,
        "rate_per_s": delivered,
        "rate_ratio": delivered / rate,
        "held_per_s": held,
        "held_ratio": held / unkeyed,
        "held_create_per_s": run["held"]["held_create_per_s"],
    }


def table(args: argparse.Namespace, per_run: list[dict[str, float]]) -> list[str]:
    rows = [
        ("unkeyed_per_s", f"unkeyed W1 ({args.count:,}): deliveries/s", 0),
        ("keyed_per_s", f"one key, no limits ({args.count:,}): deliveries/s", 0),
        ("keyed_ratio", "  one key / unkeyed (same run)", 2),
        ("rate_per_s", f"rate {args.rate}/s after its burst ({args.rate_count:,}): delivered/s", 1),
        ("rate_ratio", f"  delivered / {args.rate}", 3),
        ("held_per_s", f"unkeyed W1 beside {args.held:,} held back: deliveries/s", 0),
        ("held_ratio", "  beside held back / unkeyed (same run)", 2),
        ("held_create_per_s", "  held back: created/s", 0),
    ]
    head = "| figure | median | min - max | " + " | ".join(f"run {r['run']}" for r in per_run)
    lines = [head + " |", "|" + " --- |" * (3 + len(per_run))]
    for key, title, digits in rows:
        values = [r[key] for r in per_run]
        spread = f"{bench.fmt(min(values), digits)} - {bench.fmt(max(values), digits)}"
        cells = " | ".join(bench.fmt(v, digits) for v in values)
        lines.append(
            f"| {title} | {bench.fmt(bench.median(values), digits)} | {spread} | {cells} |"
        )
    return lines


def bars(args: argparse.Namespace, per_run: list[dict[str, float]]) -> list[tuple[str, str, bool]]:
    keyed = bench.median([r["keyed_ratio"] for r in per_run])
    rate = bench.median([r["rate_ratio"] for r in per_run])
    held = bench.median([r["held_ratio"] for r in per_run])
    return [
        (
            f"one key / unkeyed >= {BAR_KEYED_RATIO:g}",
            bench.fmt(keyed, 2),
            keyed >= BAR_KEYED_RATIO,
        ),
        (
            f"delivered rate within {BAR_RATE_TOLERANCE:.0%} of {args.rate}/s",
            bench.fmt(rate, 3),
            abs(rate - 1) <= BAR_RATE_TOLERANCE,
        ),
        (
            f"beside {args.held:,} held back / unkeyed >= {BAR_HELD_RATIO:g}",
            bench.fmt(held, 2),
            held >= BAR_HELD_RATIO,
        ),
    ]


async def main_async(
    args: argparse.Namespace, problems: list[str]
) -> tuple[list[dict[str, dict[str, Any]]], str]:
    """Every run's measurements by kind, and the database server's version."""
    procs = bench.Processes()
    databases = bench.Databases(args.pg_admin_url, args.mysql_admin_url)
    log_dir = Path(tempfile.mkdtemp(prefix="chronoq_flow_logs_"))
    bench.log(f"service logs in {log_dir}")
    runs: list[dict[str, dict[str, Any]]] = []
    version = ""
    try:
        timeout = aiohttp.ClientTimeout(total=120)
        connector = aiohttp.TCPConnector(limit=16)
        async with aiohttp.ClientSession(
            connector=connector, trust_env=False, timeout=timeout
        ) as http:
            receiver = bench.ReceiverClient(procs, http)
            await receiver.start()
            ctx = bench.Context(args, procs, http, receiver, databases, log_dir, problems)
            if args.dialect == "postgresql":
                version = await databases.server_version()
            elif args.dialect == "mysql":
                version = await databases.mysql_server_version()
            try:
                for run in range(1, args.runs + 1):
                    trio = ["keyed", "unkeyed", "held"]
                    measured: dict[str, dict[str, Any]] = {}
                    for kind in ["rate", *(trio if run % 2 else trio[::-1])]:
                        r = await one_run(ctx, kind, run)
                        measured[kind] = r
                        held = (
                            f" ({args.held:,} held back, created at "
                            f"{bench.fmt(r['held_create_per_s'])}/s)"
                            if kind == "held"
                            else ""
                        )
                        figure = (
                            f"delivered {bench.fmt(r['spread_per_s'], 1)}/s beyond its burst"
                            if kind == "rate"
                            else f"{bench.fmt(r['deliveries_per_s'])} deliveries/s"
                        )
                        bench.log(
                            f"run {run} {LABELS[kind]}: {figure}{held}; lag p50 "
                            f"{r['lag_p50_ms']:.0f} ms, p99 {r['lag_p99_ms']:.0f} ms; "
                            f"lost {r['lost']}, dup {r['duplicates']}"
                        )
                    runs.append(measured)
            finally:
                await receiver.stop()
    finally:
        procs.kill_all()
        await databases.drop_all()
    return runs, version


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--dialect", choices=bench.DIALECTS, default="postgresql")
    parser.add_argument("--count", type=int, default=10_000, help="W1 one-shots (10,000)")
    parser.add_argument("--rate", type=int, default=200, help="the rate-limited key's rate /s")
    parser.add_argument("--rate-count", type=int, default=1000, help="one-shots on that key")
    parser.add_argument("--held", type=int, default=100_000, help="one-shots held back")
    parser.add_argument("--lead", type=float, default=None, help="seconds from creation to due")
    parser.add_argument(
        "--timeout", type=float, default=120.0, help="seconds to wait after the last due instant"
    )
    parser.add_argument("--settle", type=float, default=1.0, help="wait after the last arrival")
    parser.add_argument("--json", type=Path, default=None, help="write the raw per-run numbers")
    parser.add_argument(
        "--pg-admin-url", default=os.environ.get("CHRONOQ_BENCH_PG_URL", bench.DEFAULT_PG_ADMIN_URL)
    )
    parser.add_argument(
        "--mysql-admin-url",
        default=os.environ.get("CHRONOQ_BENCH_MYSQL_URL", bench.DEFAULT_MYSQL_ADMIN_URL),
    )
    args = parser.parse_args()
    if min(args.runs, args.count, args.rate_count, args.held, args.rate) < 1:
        parser.error("--runs, --count, --rate, --rate-count and --held must be at least 1")
    if args.rate_count < args.rate + 2:
        parser.error("--rate-count must exceed --rate by 2: the rate is taken after the burst")
    admin = {"postgresql": args.pg_admin_url, "mysql": args.mysql_admin_url}.get(args.dialect)
    if admin is not None and urlsplit(admin).hostname not in bench.LOCAL_HOSTS:
        parser.error(f"the benchmark only talks to a {bench.TITLES[args.dialect]} on 127.0.0.1")
    problems: list[str] = []
    code_version, code_digest = bench.code_version(), bench.code_digest()
    try:
        runs, server = asyncio.run(main_async(args, problems))
    except RuntimeError as exc:
        bench.log(f"FAILED: {exc}")
        return 1
    if bench.code_digest() != code_digest:
        problems.append(
            f"the service source changed during the run: started on {code_version}, "
            f"ended on {bench.code_version()}; the runs mix both"
        )
    per_run = [{"run": n, **figures(run, args.rate)} for n, run in enumerate(runs, 1)]
    print()
    print(
        f"Flow keys on {bench.TITLES[args.dialect]} {server}".rstrip()
        + f", {args.runs} run(s), code {code_version}; medians over runs:"
    )
    for line in table(args, per_run):
        print("  " + line)
    for name, value, ok in bars(args, per_run):
        print(f"  bar {'PASS' if ok else 'FAIL'}: {name} (median): {value}")
    if problems:
        print()
        print("Observed problems:")
        for line in problems:
            print("  " + line)
    if args.json is not None:
        raw = {
            "dialect": args.dialect,
            "server_version": server,
            "code_version": code_version,
            "settings": {
                name: getattr(args, name)
                for name in ("runs", "count", "rate", "rate_count", "held", "lead", "settle")
            },
            "figures": per_run,
            "runs": runs,
            "problems": problems,
        }
        args.json.write_text(json.dumps(raw, indent=2, default=str))
        bench.log(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
