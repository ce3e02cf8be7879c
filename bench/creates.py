"""W3, batch creates: 1,000-item batches, 4 requests in flight, until the table holds 10^6.

W3 posts one-shot webhook schedules due far in the future (the loop delivers nothing during
the run) to `POST /v1/schedules/batch`, 1,000 per request with 4 requests in flight, into a
fresh PostgreSQL database (`chronoq migrate`, then `chronoq serve` with default settings), until
`--count` schedules exist. It reports the overall rate, the rate of each tenth of the count
(per 100,000 at 10^6: flat or not), p50/p99 request latency and the service's peak RSS
(VmHWM). With `--base DIR` the same runs are made, interleaved, against the checkout in DIR
run from its own virtualenv (`DIR/.venv/bin/chronoq`), so before and after are measured in
the same session.

    .venv/bin/python bench/creates.py                          # 3 runs, docs/benchmark*.md
    .venv/bin/python bench/creates.py --base /work/base-x      # and the baseline, interleaved
    .venv/bin/python bench/creates.py --runs 1 --count 100000 --no-docs

Fresh database and fresh service process for every run; all traffic stays on 127.0.0.1.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import aiohttp

sys.path.insert(0, str(Path(__file__).resolve().parent))

import run as bench

ROOT = Path(__file__).resolve().parent.parent
COUNT = 1_000_000
IN_FLIGHT = 4
TENTHS = 10
# Nothing listens there, and nothing is due before the run ends.
HOOK = "http://127.0.0.1:9/w3"
DUE_IN = 30 * 86400.0
MARKER = b'"next_occurrence_id":"'
BAR_RATIO = 2.0


def chronoq(tree: Path | None) -> list[str]:
    """`chronoq` of this checkout, or of the checkout `tree` from its own virtualenv."""
    if tree is None:
        return bench.chronoq_command()
    return [str(tree / ".venv" / "bin" / "chronoq")]


def bodies(count: int) -> list[bytes]:
    """The request bodies: `count` schedules, 1,000 to a batch, each with its own payload."""
    at = bench.rfc3339(time.time() + DUE_IN)
    out = []
    for start in range(0, count, bench.BATCH):
        items = [
            bench.schedule_item(HOOK, at, n, "W3")
            for n in range(start, min(count, start + bench.BATCH))
        ]
        out.append(json.dumps({"items": items}, separators=(",", ":")).encode())
    return out


async def migrate(tree: Path | None, database_url: str) -> None:
    proc = await asyncio.create_subprocess_exec(
        *chronoq(tree),
        "migrate",
        env=bench.service_env(database_url),
        cwd=tree or ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    output, _ = await proc.communicate()
    if proc.returncode != 0:
        raise RuntimeError(f"chronoq migrate failed:\n{output.decode(errors='replace')}")


async def count_rows(database_url: str) -> int:
    import asyncpg

    conn = await asyncpg.connect(database_url, timeout=10)
    try:
        return int(await conn.fetchval("SELECT count(*) FROM schedules"))
    finally:
        await conn.close()


async def database_cpu_seconds(admin_url: str, database_url: str) -> float:
    """CPU time of the database's server processes serving `database_url` (this run's own
    database, so every backend of it was started during the run); NaN when unreadable."""
    import asyncpg

    name = urlsplit(database_url).path.lstrip("/")
    conn = await asyncpg.connect(admin_url, timeout=10)
    try:
        pids = await conn.fetch("SELECT pid FROM pg_stat_activity WHERE datname = $1", name)
    finally:
        await conn.close()
    return sum(bench.cpu_seconds(int(row["pid"])) for row in pids) if pids else math.nan


async def post_all(
    http: aiohttp.ClientSession, base: str, payloads: list[bytes]
) -> tuple[list[float], list[tuple[float, int]]]:
    """Every body, IN_FLIGHT at a time: request latencies (s) and (finish time, items)."""
    url = base + "/v1/schedules/batch"
    headers = {"Content-Type": "application/json"}
    latencies: list[float] = []
    finished: list[tuple[float, int]] = []
    queue = iter(payloads)

    async def worker() -> None:
        for body in queue:
            started = time.perf_counter()
            async with http.post(url, data=body, headers=headers) as response:
                text = await response.read()
                if response.status != 201:
                    raise RuntimeError(f"batch create answered {response.status}: {text[:500]!r}")
            done = time.perf_counter()
            latencies.append(done - started)
            finished.append((done, text.count(MARKER)))

    await asyncio.gather(*(worker() for _ in range(IN_FLIGHT)))
    return latencies, finished


def tenths(started: float, finished: list[tuple[float, int]], count: int) -> list[float]:
    """Schedules/s of each tenth of `count`, by when its last batch finished."""
    rates: list[float] = []
    edge = count / TENTHS
    made, mark, made_at_mark = 0, started, 0
    for at, items in sorted(finished):
        made += items
        if len(rates) < TENTHS and made >= edge * (len(rates) + 1):
            rates.append((made - made_at_mark) / (at - mark) if at > mark else math.nan)
            mark, made_at_mark = at, made
    return rates


async def one_run(
    args: argparse.Namespace,
    procs: bench.Processes,
    databases: bench.Databases,
    http: aiohttp.ClientSession,
    log_dir: Path,
    tree: Path | None,
    tag: str,
) -> dict[str, Any]:
    database_url, handle = await databases.fresh("postgresql")
    payloads = bodies(args.count)
    try:
        await migrate(tree, database_url)
        service = await bench.start_service(
            procs,
            http,
            database_url,
            log_dir,
            tag,
            command=chronoq(tree),
            serve_args=["--processes", str(args.processes)] if args.processes > 1 else [],
        )
        try:
            # The service's CPU is its whole process tree's (with --processes, each replica's
            # and delivery process's), as bench/run.py counts it.
            pids = bench.process_tree(service.proc.pid)
            cpu_before = sum(bench.cpu_seconds(pid) for pid in pids)
            started = time.perf_counter()
            latencies, finished = await post_all(http, service.base, payloads)
            wall = time.perf_counter() - started
            cpu = sum(bench.cpu_seconds(pid) for pid in pids) - cpu_before
            rss = bench.peak_rss_mb(service.proc.pid)
            db_cpu = await database_cpu_seconds(args.pg_admin_url, database_url)
        finally:
            exit_code = await procs.stop(service.proc)
        stored = await count_rows(database_url)
        answered = sum(items for _, items in finished)
        flagged = bench.log_problems(service.log_text())
    finally:
        await databases.drop(handle)
    latencies.sort()
    per_tenth = tenths(started, finished, args.count)
    return {
        "count": args.count,
        "stored": stored,
        "answered": answered,
        "seconds": wall,
        "rate": args.count / wall,
        "tenths": per_tenth,
        "first_tenth": per_tenth[0] if per_tenth else math.nan,
        "last_tenth": per_tenth[-1] if per_tenth else math.nan,
        "p50_ms": bench.percentile(latencies, 50) * 1000,
        "p99_ms": bench.percentile(latencies, 99) * 1000,
        "peak_rss_mib": rss,
        "service_cpu_pct": 100 * cpu / wall,
        "service_cpu_ms": 1000 * cpu / (args.count / bench.BATCH),
        "database_cpu_ms": 1000 * db_cpu / (args.count / bench.BATCH),
        "exit_code": exit_code,
        "log_problems": flagged[:8],
    }


async def main_async(args: argparse.Namespace) -> dict[str, list[dict[str, Any]]]:
    procs = bench.Processes()
    databases = bench.Databases(args.pg_admin_url)
    log_dir = Path(tempfile.mkdtemp(prefix="chronoq_creates_logs_"))
    variants: list[tuple[str, Path | None]] = [("new", None)]
    if args.base is not None:
        variants.insert(0, ("base", args.base))
    results: dict[str, list[dict[str, Any]]] = {name: [] for name, _ in variants}
    timeout = aiohttp.ClientTimeout(total=600)
    try:
        connector = aiohttp.TCPConnector(limit=IN_FLIGHT * 2)
        async with aiohttp.ClientSession(
            connector=connector, timeout=timeout, trust_env=False
        ) as http:
            for run in range(1, args.runs + 1):
                for name, tree in variants:
                    outcome = await one_run(
                        args, procs, databases, http, log_dir, tree, f"{name}-{run}"
                    )
                    results[name].append(outcome)
                    bench.log(
                        f"run {run} {name}: {outcome['rate']:,.0f}/s over {outcome['count']:,} "
                        f"(first tenth {outcome['first_tenth']:,.0f}/s, last tenth "
                        f"{outcome['last_tenth']:,.0f}/s), p50 {outcome['p50_ms']:.0f} ms, "
                        f"p99 {outcome['p99_ms']:.0f} ms, peak RSS "
                        f"{outcome['peak_rss_mib']:.0f} MiB, service CPU "
                        f"{outcome['service_cpu_pct']:.0f}% ({outcome['service_cpu_ms']:.0f} ms a "
                        f"batch), PostgreSQL {outcome['database_cpu_ms']:.0f} ms a batch, "
                        f"stored {outcome['stored']:,}"
                    )
                    for line in outcome["log_problems"]:
                        bench.log(f"    {line}")
    finally:
        procs.kill_all()
        await databases.drop_all()
    return results


METRICS = (
    ("overall rate (schedules/s)", "rate", 0),
    ("first tenth (schedules/s)", "first_tenth", 0),
    ("last tenth (schedules/s)", "last_tenth", 0),
    ("last tenth / first tenth", "flatness", 2),
    ("request latency p50 (ms)", "p50_ms", 0),
    ("request latency p99 (ms)", "p99_ms", 0),
    ("service peak RSS, VmHWM (MiB)", "peak_rss_mib", 0),
    ("service CPU (% of one core)", "service_cpu_pct", 0),
    ("service CPU per batch of 1,000 (ms)", "service_cpu_ms", 0),
    ("PostgreSQL CPU per batch of 1,000 (ms)", "database_cpu_ms", 0),
)


def cell(runs: list[dict[str, Any]], key: str, digits: int) -> str:
    values = [r[key] for r in runs]
    each = ", ".join(bench.fmt(v, digits) for v in values)
    return f"{bench.fmt(bench.median(values), digits)} ({each})"


def section(args: argparse.Namespace, results: dict[str, list[dict[str, Any]]]) -> str:
    for runs in results.values():
        for r in runs:
            r["flatness"] = r["last_tenth"] / r["first_tenth"]
    names = list(results)
    head = "| metric | " + " | ".join(names) + " |"
    lines = [
        "## Batch creates: W3",
        "",
        f"Measured {datetime.now(UTC):%Y-%m-%d %H:%M} UTC by `bench/creates.py`, code "
        f"{bench.code_version()}, {args.runs} runs, medians with each run in brackets.",
        "",
        f"W3 is {args.count:,} one-shot webhook schedules due 30 days ahead (nothing is "
        f"delivered during the run), posted to `POST /v1/schedules/batch` {bench.BATCH:,} to a "
        f"request with {IN_FLIGHT} requests in flight, on PostgreSQL: a fresh database, "
        "`chronoq migrate`, then `chronoq serve` with default settings. A tenth is "
        f"{args.count // TENTHS:,} schedules; its rate is measured from the end of the batch "
        "that completed the tenth before. Latency is one request's, from send to the last byte "
        "of the reply; peak RSS is the service's VmHWM at the end of the run. CPU per batch "
        "is the CPU time of the service process, and of the PostgreSQL backends serving its "
        "database, over the run, divided by the number of batches: what a batch costs, "
        "which the other jobs on the machine disturb less than they do the rates.",
        "",
        head,
        "| --- |" + " --- |" * len(names),
    ]
    for title, key, digits in METRICS:
        lines.append(f"| {title} | " + " | ".join(cell(results[n], key, digits) for n in names))
    lines[-len(METRICS) :] = [line + " |" for line in lines[-len(METRICS) :]]
    if "base" in results:
        ratio = bench.median([r["rate"] for r in results["new"]]) / bench.median(
            [r["rate"] for r in results["base"]]
        )
        flat = bench.median([r["flatness"] for r in results["new"]])
        lines += [
            "",
            f"*base* is `{args.base_label}`, run from its own virtualenv, interleaved with "
            "*new* (base, new, base, new, ...).",
            "",
            f"Bar: at least {BAR_RATIO:g}x the base's rate, flat to the end "
            f"({'met' if ratio >= BAR_RATIO else 'NOT met'}: {ratio:.2f}x, last tenth / first "
            f"tenth {flat:.2f}).",
        ]
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--count", type=int, default=COUNT, help="schedules per run (10^6)")
    parser.add_argument(
        "--base", type=Path, help="a checkout of the code to compare against, with its .venv"
    )
    parser.add_argument("--pg-admin-url", default=bench.DEFAULT_PG_ADMIN_URL)
    parser.add_argument(
        "--processes",
        type=int,
        default=1,
        help="serve with --processes N (API processes on one port; default 1, docs untouched)",
    )
    parser.add_argument("--no-docs", dest="docs", action="store_false")
    parser.add_argument("--json", type=Path, default=None, help="also dump raw results here")
    args = parser.parse_args()
    if urlsplit(args.pg_admin_url).hostname not in bench.LOCAL_HOSTS:
        parser.error("the benchmark only talks to a PostgreSQL on 127.0.0.1")
    if args.count < bench.BATCH * TENTHS or args.runs < 1:
        parser.error(f"--count must be at least {bench.BATCH * TENTHS:,}, --runs at least 1")
    if args.processes < 1:
        parser.error("--processes must be at least 1")
    # The docs' table is W3 as defined: one process with default settings.
    args.docs = args.docs and args.processes == 1
    args.base_label = None
    if args.base is not None:
        args.base = args.base.resolve()
        args.base_label = subprocess.run(
            ["git", "-C", str(args.base), "log", "-1", "--format=%h"],
            capture_output=True,
            text=True,
            check=False,
        ).stdout.strip()
    results = asyncio.run(main_async(args))
    text = section(args, results)
    print(text)
    if args.json is not None:
        args.json.write_text(json.dumps(results, indent=2, default=str))
    if args.docs:
        bench.record("creates", text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
