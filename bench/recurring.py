"""W6: recurring schedules at scale, how late their ticks arrive.

W6 is `--count` (100,000) interval schedules firing every `--every` (60) seconds, webhooks to
bench/receiver.py, one replica on PostgreSQL with default settings. Their first ticks are
spread evenly over one period (100,000 a minute: 1,667 fires/s sustained), starting far
enough ahead that creation through `POST /v1/schedules/batch` (1,000 per request) has
finished first. Measured over `--periods` (3) periods: every tick of every schedule in that
window must arrive exactly once.

    .venv/bin/python bench/recurring.py                          # 3 runs, docs/benchmark*.md
    .venv/bin/python bench/recurring.py --count 20000 --periods 1 --runs 1 --no-docs
    .venv/bin/python bench/recurring.py --baseline /work/base-x  # base, new, base, new, ...

`--baseline TREE` also measures the `chronoq` of TREE's own virtualenv (a worktree of an
earlier commit with `.venv`), interleaved with this checkout's, in the same session.

Lateness = arrival at the receiver minus `X-Scheduled-For`. A tick is identified by its
occurrence id, which is derived from the schedule and the tick's instant, so the expected
ids of the window are known before anything fires: `missing` are expected ticks that never
arrived, `duplicates` extra arrivals of one. The service's CPU (its process tree's: the
delivery process included) is measured from the first tick to the last tick of the window,
its peak RSS is the sum of each process's VmHWM from /proc/<pid>/status.
Fresh database and fresh service process for every run; all traffic stays on 127.0.0.1.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import sys
import tempfile
import time
import uuid
from collections import Counter
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import aiohttp

sys.path.insert(0, str(Path(__file__).resolve().parent))

import run as bench

from app.domain.ids import occurrence_id

ROOT = Path(__file__).resolve().parent.parent
SECTION = "recurring"
BAR_P99_MS = 25.0


def recurring_item(hook: str, start_at: str, every: float, n: int) -> dict[str, Any]:
    return {
        "event_type": "bench",
        "payload": {"n": n, "workload": "W6"},
        "target": {"type": "webhook", "url": hook},
        "trigger": {"type": "interval", "every_seconds": every, "start_at": start_at},
    }


async def create_schedules(
    http: aiohttp.ClientSession, base: str, items: list[dict[str, Any]]
) -> list[uuid.UUID]:
    """POST /v1/schedules/batch, bench.BATCH at a time; schedule ids in order."""
    ids: list[uuid.UUID] = []
    for start in range(0, len(items), bench.BATCH):
        body = {"items": items[start : start + bench.BATCH]}
        async with http.post(base + "/v1/schedules/batch", json=body) as response:
            payload = await response.json(content_type=None)
            if response.status != 201:
                raise RuntimeError(f"batch create answered {response.status}: {payload}")
            ids.extend(uuid.UUID(created["id"]) for created in payload["items"])
    return ids


def analyse(
    records: list[list[Any]], ticks: dict[uuid.UUID, tuple[int, int]], periods: int
) -> dict[str, Any]:
    """Lateness, duplicates and missing ticks of the window (`ticks`: expected occurrence id
    -> (schedule number, period)); arrivals of ticks after the window are only counted."""
    counts: Counter[uuid.UUID] = Counter()
    first: dict[uuid.UUID, float] = {}
    outside = 0
    for occurrence, at, scheduled_for, _attempt in records:
        oid = uuid.UUID(occurrence)
        if oid not in ticks:
            outside += 1
            continue
        counts[oid] += 1
        late = at - datetime.fromisoformat(scheduled_for).timestamp()
        if oid not in first or late < first[oid]:
            first[oid] = late
    lates = sorted(first.values())
    by_period: list[list[float]] = [[] for _ in range(periods)]
    for oid, late in first.items():
        by_period[ticks[oid][1]].append(late)
    for values in by_period:
        values.sort()
    return {
        "expected": len(ticks),
        "received": len(first),
        "missing": len(ticks) - len(first),
        "duplicates": sum(n - 1 for n in counts.values() if n > 1),
        # Arrived before their instant (the receiver's clock is the database's: one host).
        "early": sum(1 for late in lates if late < 0),
        "after_window": outside,
        "late_p50_ms": bench.percentile(lates, 50) * 1000,
        "late_p99_ms": bench.percentile(lates, 99) * 1000,
        "late_max_ms": (lates[-1] * 1000) if lates else math.nan,
        "period_p99_ms": [bench.percentile(v, 99) * 1000 for v in by_period],
    }


async def one_run(
    ctx: bench.Context, command: list[str] | None, tag: str, extra_env: dict[str, str]
) -> dict[str, Any]:
    args = ctx.args
    count, every, periods = args.count, args.every, args.periods
    database_url, handle = await ctx.databases.fresh("postgresql")
    result: dict[str, Any] = {"tag": tag}
    try:
        service = await bench.start_service(
            ctx.procs,
            ctx.http,
            database_url,
            ctx.log_dir,
            tag,
            extra_env=extra_env,
            command=command,
        )
        try:
            await ctx.receiver.reset()
            hook = ctx.receiver.base + "/hook"
            lead = args.lead if args.lead is not None else 10.0 + count / 1500
            first = round(time.time() + lead, 3)
            items = [
                recurring_item(hook, bench.rfc3339(first + n * every / count), every, n)
                for n in range(count)
            ]
            started = time.time()
            ids = await create_schedules(ctx.http, service.base, items)
            finished = time.time()
            result["create_per_s"] = count / (finished - started)
            result["created_before_first_s"] = first - finished
            if finished > first:
                ctx.problems.append(f"{tag}: creation ended {finished - first:.1f}s late")
            # The fire instants exactly as the service parsed them (microseconds).
            ticks: dict[uuid.UUID, tuple[int, int]] = {}
            for n, (sid, item) in enumerate(zip(ids, items, strict=True)):
                start = datetime.fromisoformat(item["trigger"]["start_at"])
                for k in range(periods):
                    ticks[occurrence_id(sid, start + timedelta(seconds=every * k))] = (n, k)
            await asyncio.sleep(max(0.0, first - time.time()))
            # The service's whole process tree: with a delivery process the loop runs in a
            # child of the one started here.
            tree = bench.process_tree(service.proc.pid)
            cpu_before, wall_before = sum(map(bench.cpu_seconds, tree)), time.time()
            last_due = first + periods * every - every / count
            await asyncio.sleep(max(0.0, last_due - time.time()))
            wall = time.time() - wall_before
            used = sum(map(bench.cpu_seconds, tree)) - cpu_before
            result["service_cpu_pct"] = 100 * used / wall
            await asyncio.sleep(args.settle)
            # Each process's own peak, summed: what the replica holds in memory.
            result["peak_rss_mb"] = sum(map(bench.peak_rss_mb, tree))
        finally:
            result["exit_code"] = await ctx.procs.stop(service.proc)
        records = await ctx.receiver.records()
        if args.dump:
            Path(args.dump).with_suffix(f".{tag}.json").write_text(json.dumps(records))
        result.update(analyse(records, ticks, periods))
        flagged = bench.log_problems(service.log_text())
        result["log_problems"] = len(flagged)
        if flagged:
            ctx.problems.append(f"{tag}: {len(flagged)} flagged log lines, first ones:")
            ctx.problems.extend("    " + line for line in flagged[:8])
    finally:
        try:
            await ctx.databases.drop(handle)
        except Exception as exc:
            bench.log(f"could not drop {handle}: {exc}")
    return result


def variants(args: argparse.Namespace) -> list[tuple[str, list[str] | None]]:
    new: tuple[str, list[str] | None] = ("new", None)
    if args.baseline is None:
        return [new]
    chronoq = Path(args.baseline) / ".venv" / "bin" / "chronoq"
    if not chronoq.exists():
        raise SystemExit(f"{chronoq} does not exist: the baseline needs its own virtualenv")
    return [("base", [str(chronoq)]), new]


async def main_async(args: argparse.Namespace) -> tuple[dict[str, list[dict[str, Any]]], list[str]]:
    procs = bench.Processes()
    databases = bench.Databases(args.pg_admin_url)
    log_dir = Path(tempfile.mkdtemp(prefix="chronoq_recurring_logs_"))
    bench.log(f"service logs in {log_dir}")
    extra_env = dict(item.split("=", 1) for item in args.env)
    results: dict[str, list[dict[str, Any]]] = {}
    problems: list[str] = []
    try:
        connector = aiohttp.TCPConnector(limit=8)
        timeout = aiohttp.ClientTimeout(total=600)
        async with aiohttp.ClientSession(
            connector=connector, trust_env=False, timeout=timeout
        ) as http:
            receiver = bench.ReceiverClient(procs, http)
            await receiver.start()
            ctx = bench.Context(args, procs, http, receiver, databases, log_dir, problems)
            try:
                for run in range(1, args.runs + 1):
                    for name, command in variants(args):
                        r = await one_run(ctx, command, f"{name}-{run}", extra_env)
                        results.setdefault(name, []).append(r)
                        periods = ", ".join(f"{v:.0f}" for v in r["period_p99_ms"])
                        bench.log(
                            f"run {run} {name}: late p50 {r['late_p50_ms']:.1f} ms, p99 "
                            f"{r['late_p99_ms']:.1f} ms (per period {periods}), max "
                            f"{r['late_max_ms']:.0f} ms; missing {r['missing']}, dup "
                            f"{r['duplicates']}, early {r['early']}; "
                            f"CPU {r['service_cpu_pct']:.0f}%, peak RSS "
                            f"{r['peak_rss_mb']:.0f} MiB; created {r['create_per_s']:.0f}/s, "
                            f"{r['created_before_first_s']:.1f}s ahead"
                        )
            finally:
                await receiver.stop()
    finally:
        procs.kill_all()
        await databases.drop_all()
    for line in problems:
        bench.log(line)
    return results, problems


METRICS = [
    ("late_p50_ms", "lateness p50 (ms)", 1),
    ("late_p99_ms", "lateness p99 (ms)", 1),
    ("late_max_ms", "lateness max (ms)", 0),
    ("service_cpu_pct", "service CPU (% of one core)", 0),
    ("peak_rss_mb", "service peak RSS (MiB)", 0),
    ("create_per_s", "create rate (schedules/s)", 0),
]


def section(args: argparse.Namespace, results: dict[str, list[dict[str, Any]]]) -> str:
    names = list(results)
    lines = [
        "## Recurring at scale: W6",
        "",
        f"{datetime.now(UTC):%Y-%m-%d %H:%M} UTC, code {bench.code_version()}, "
        f"{args.runs} runs, medians with each run in brackets. Generated by "
        "`bench/recurring.py`.",
        "",
        f"W6 is {args.count:,} interval schedules every {args.every:g} s on PostgreSQL, one "
        "replica with default settings, webhooks to bench/receiver.py, their first ticks "
        f"spread evenly over one period ({args.count / args.every:,.0f} fires/s), measured "
        f"over {args.periods} periods: {args.count * args.periods:,} ticks, each of which "
        "must arrive exactly once. Lateness = arrival at the receiver minus "
        "`X-Scheduled-For`. CPU from the first tick to the last of the window."
        + (
            f" *base* is the code of `{args.baseline_label}` in its own virtualenv, run "
            "interleaved with *new* in the same session."
            if args.baseline
            else ""
        ),
        "",
        "| metric | " + " | ".join(names) + " |",
        "| --- |" + " --- |" * len(names),
    ]
    for key, title, digits in METRICS:
        cells = []
        for name in names:
            values = [r[key] for r in results[name]]
            runs = ", ".join(bench.fmt(v, digits) for v in values)
            cells.append(f"{bench.fmt(bench.median(values), digits)} ({runs})")
        lines.append(f"| {title} | " + " | ".join(cells) + " |")
    for key, title in (
        ("missing", "missing ticks"),
        ("duplicates", "duplicate arrivals"),
        ("early", "arrived before their instant"),
    ):
        cells = [
            f"{sum(r[key] for r in results[n])} ({', '.join(str(r[key]) for r in results[n])})"
            for n in names
        ]
        lines.append(f"| {title} | " + " | ".join(cells) + " |")
    new = results["new"]
    p99 = bench.median([r["late_p99_ms"] for r in new])
    clean = all(r["missing"] == 0 and r["duplicates"] == 0 and r["early"] == 0 for r in new)
    met = p99 < BAR_P99_MS and clean
    lines += [
        "",
        f"Bar: p99 under {BAR_P99_MS:g} ms, no duplicate, missing or early tick "
        f"({'met' if met else 'NOT met'}: p99 {p99:.1f} ms, "
        f"{'every tick once, none early' if clean else 'ticks missing, repeated or early'}).",
    ]
    return "\n".join(lines)


def write_docs(args: argparse.Namespace, results: dict[str, list[dict[str, Any]]]) -> None:
    bench.record(SECTION, section(args, results))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=100_000)
    parser.add_argument("--every", type=float, default=60.0)
    parser.add_argument("--periods", type=int, default=3)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--lead", type=float, help="seconds from now to the first tick")
    parser.add_argument("--settle", type=float, default=5.0, help="wait after the last tick")
    parser.add_argument("--baseline", help="a worktree with its own .venv to compare against")
    parser.add_argument("--baseline-label", default="the baseline")
    parser.add_argument("--env", action="append", default=[], help="NAME=VALUE for the service")
    parser.add_argument("--pg-admin-url", default=bench.DEFAULT_PG_ADMIN_URL)
    parser.add_argument("--dump", help="write each run's arrivals to DUMP.<run>.json")
    parser.add_argument("--no-docs", dest="docs", action="store_false")
    args = parser.parse_args()
    results, _ = asyncio.run(main_async(args))
    if args.docs:
        write_docs(args, results)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
