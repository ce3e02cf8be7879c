"""Mixed load: how late healthy one-shots run while the API is busy, on one replica.

    .venv/bin/python bench/mixed.py                           # 3 runs, docs/benchmark*.md
    .venv/bin/python bench/mixed.py --seconds 20 --runs 1 --no-docs
    .venv/bin/python bench/mixed.py --baseline /tmp/base-tree  # base, new, base, new, ...
    .venv/bin/python bench/mixed.py --soak --mixes mixed --seconds 480 --runs 1 --replay-every 30

One replica (`chronoq serve`, default settings) on a fresh PostgreSQL database, webhooks to
bench/receiver.py, for `--seconds` (40). Two mixes, run one after the other on fresh
services:

- *quiet*: only the one-shots: `--oneshots` (50) a second, created once a second by one
  `POST /v1/schedules/batch`, each due at its own instant spread evenly over the second that
  starts `--lead` (2) seconds later.
- *mixed*: the same one-shots, and beside them interval schedules ticking `--ticks` (60)
  times a second in all (`--every` 5 s each), a tenth of them to a port on 127.0.0.1 that
  refuses connections (each such tick is retried, then dead-lettered); `--reads` (5) list
  reads a second (`GET /v1/schedules`, `/v1/dead-letters`, a schedule's occurrences, 100
  each); the console (`/ui/schedules`, `/ui/dead-letters`) and `/metrics`, once a second each.

Lateness = arrival at the receiver minus `X-Scheduled-For`, for the one-shots only (the
recurring ticks go to the receiver's counted-only route). Every one-shot created must
arrive exactly once. The replica's RSS (VmRSS at the end of the window, and VmHWM) and its
database connections (`pg_stat_activity` rows of its database, read mid-window) are
reported too, and the RSS a minute in against at the end (memory flat or not, for a long run);
`--replay-every` adds a replay of every dead letter of the mix that often (they fail again).
`--soak` writes the result as the docs' soak section (the bar: p99 under 50 ms, RSS at the end
within a tenth of the RSS a minute in).

`--placements shared separate` runs this checkout's replica both ways (the loop on the API's
event loop, and in a delivery process of its own: CHRONOQ_DELIVERY_PROCESS), interleaved;
without it, the default (a delivery process of its own on PostgreSQL). CPU, RSS and
connections are the whole process tree's.

`--baseline TREE` also measures the code of TREE (a plain copy of an earlier commit, run
with this virtualenv and PYTHONPATH=TREE), interleaved with this checkout's.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import math
import os
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import aiohttp

sys.path.insert(0, str(Path(__file__).resolve().parent))

import run as bench

ROOT = Path(__file__).resolve().parent.parent
SECTION = "mixed"
# An eight-minute run of the mix with replays: lateness and memory over the long run.
SOAK_SECTION = "soak"
BAR_P99_MS = 50.0
BAR_RSS_GROWTH = 0.1
MIXES = ("quiet", "mixed")
EXPECTED_IN_MIX = "connection failed"


def oneshot_item(hook: str, at: float, n: int) -> dict[str, Any]:
    return {
        "event_type": "bench",
        "payload": {"n": n, "workload": "mixed"},
        "target": {"type": "webhook", "url": hook},
        "trigger": {"type": "once", "at": bench.rfc3339(at)},
    }


def recurring_item(url: str, start: float, every: float, n: int) -> dict[str, Any]:
    return {
        "event_type": "bench-tick",
        "payload": {"n": n, "workload": "mixed"},
        "target": {"type": "webhook", "url": url},
        "trigger": {"type": "interval", "every_seconds": every, "start_at": bench.rfc3339(start)},
    }


async def post_batch(
    http: aiohttp.ClientSession, base: str, items: list[dict[str, Any]]
) -> list[dict[str, Any]]:
    async with http.post(base + "/v1/schedules/batch", json={"items": items}) as response:
        payload = await response.json(content_type=None)
        if response.status != 201:
            raise RuntimeError(f"batch create answered {response.status}: {payload}")
        return list(payload["items"])


async def every(period: float, until: float, step: Any) -> None:
    """Call `step(n)` every `period` seconds (by the wall clock, without drift) until `until`."""
    start = time.time()
    for n in itertools.count():
        at = start + n * period
        if at >= until:
            return
        await asyncio.sleep(max(0.0, at - time.time()))
        await step(n)


async def get(
    http: aiohttp.ClientSession,
    url: str,
    counts: dict[str, int],
    timings: dict[str, list[float]],
    kind: str,
) -> None:
    """One read; its outcome counted, its response time kept under `kind`."""
    started = time.perf_counter()
    try:
        async with http.get(url) as response:
            await response.read()
            key = "ok" if response.status == 200 else f"status_{response.status}"
    except aiohttp.ClientError as exc:
        key = type(exc).__name__
    timings.setdefault(kind, []).append(time.perf_counter() - started)
    counts[key] = counts.get(key, 0) + 1


async def database_connections(databases: bench.Databases, name: str) -> int:
    import asyncpg

    conn = await asyncpg.connect(databases.pg_admin_url, timeout=10)
    try:
        return int(
            await conn.fetchval("SELECT count(*) FROM pg_stat_activity WHERE datname = $1", name)
        )
    finally:
        await conn.close()


def current_rss_mb(pid: int) -> float:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except (OSError, IndexError, ValueError):
        pass
    return math.nan


async def one_run(
    ctx: bench.Context, mix: str, command: list[str] | None, tag: str, env: dict[str, str]
) -> dict[str, Any]:
    args = ctx.args
    database_url, handle = await ctx.databases.fresh("postgresql")
    result: dict[str, Any] = {"tag": tag, "mix": mix}
    expected: set[str] = set()
    reads: dict[str, int] = {}
    timings: dict[str, list[float]] = {}
    try:
        service = await bench.start_service(
            ctx.procs,
            ctx.http,
            database_url,
            ctx.log_dir,
            tag,
            extra_env=env,
            command=command,
        )
        try:
            await ctx.receiver.reset()
            base = service.base
            hook = ctx.receiver.base + "/hook"
            begin = time.time() + 3.0
            end = begin + args.seconds
            schedule_ids: list[str] = []
            if mix == "mixed":
                count = round(args.ticks * args.every)
                refused = f"http://127.0.0.1:{bench.free_port()}/refused"
                sink = ctx.receiver.base + "/sink"
                items = [
                    recurring_item(
                        refused if n % 10 == 9 else sink,
                        begin + n * args.every / count,
                        args.every,
                        n,
                    )
                    for n in range(count)
                ]
                created = await post_batch(ctx.http, base, items)
                schedule_ids = [str(c["id"]) for c in created]
            await asyncio.sleep(max(0.0, begin - args.lead - time.time()))

            async def create(n: int) -> None:
                due = time.time() + args.lead
                items = [
                    oneshot_item(hook, due + k / args.oneshots, n * args.oneshots + k)
                    for k in range(args.oneshots)
                ]
                started = time.perf_counter()
                for created in await post_batch(ctx.http, base, items):
                    expected.add(str(created["next_occurrence_id"]))
                timings.setdefault("batch create", []).append(time.perf_counter() - started)

            lists = itertools.cycle(
                ["/v1/schedules?limit=100", "/v1/dead-letters?limit=100", "occurrences"]
            )

            async def read(n: int) -> None:
                path = next(lists)
                if path == "occurrences":
                    if not schedule_ids:
                        path = "/v1/schedules?limit=100"
                    else:
                        sid = schedule_ids[n % len(schedule_ids)]
                        path = f"/v1/schedules/{sid}/occurrences?limit=100"
                await get(ctx.http, base + path, reads, timings, path.split("?")[0][:14])

            async def console(n: int) -> None:
                page = "/ui/schedules" if n % 2 == 0 else "/ui/dead-letters"
                await get(ctx.http, base + page, reads, timings, page)

            async def scrape(_: int) -> None:
                await get(ctx.http, base + "/metrics", reads, timings, "/metrics")

            connections: list[int] = []
            # The service's processes: with a delivery process, the API's and the loop's.
            pids = bench.process_tree(service.proc.pid)
            rss: list[tuple[float, float]] = []  # (seconds into the window, MiB)

            async def sample(_: int) -> None:
                connections.append(await database_connections(ctx.databases, handle))
                rss.append((time.time() - begin, sum(map(current_rss_mb, pids))))

            replayed: list[int] = []

            async def replay(_: int) -> None:
                # Every dead letter of the refused ticks, sent again (to fail again).
                started = time.perf_counter()
                body = {"event_type": "bench-tick"}
                async with ctx.http.post(base + "/v1/dead-letters/replay", json=body) as response:
                    answer = await response.json(content_type=None)
                    key = "ok" if response.status == 202 else f"status_{response.status}"
                timings.setdefault("replay", []).append(time.perf_counter() - started)
                reads[key] = reads.get(key, 0) + 1
                if response.status == 202:
                    replayed.append(int(answer.get("replayed", 0)))

            stop_creating = end - args.lead - 1.0
            loads = [every(1.0, stop_creating, create), every(5.0, end, sample)]
            if mix == "mixed":
                loads += [
                    every(1.0 / args.reads, end, read),
                    every(1.0, end, console),
                    every(1.0, end, scrape),
                ]
                if args.replay_every > 0:
                    loads.append(every(args.replay_every, end, replay))
            pid = pids[-1]  # the one running the delivery loop
            profiler = None
            if args.profile:
                profiler = ctx.procs.spawn(
                    [
                        str(Path(sys.executable).with_name("py-spy")),
                        "record",
                        "--format",
                        "raw",
                        "--threads",
                        "--nonblocking",
                        "--rate",
                        "200",
                        "-d",
                        str(int(args.seconds)),
                        "-o",
                        str(Path(args.profile) / f"{tag}.txt"),
                        "-p",
                        str(pid),
                    ]
                )
            cpu_before, wall_before = sum(map(bench.cpu_seconds, pids)), time.time()
            busy_before, total_before = bench.machine_busy_seconds()
            await asyncio.gather(*loads)
            busy_after, total_after = bench.machine_busy_seconds()
            # How busy the whole machine was (every core, everything on it): the noise.
            result["machine_busy_pct"] = (
                100 * (busy_after - busy_before) / (total_after - total_before)
                if total_after > total_before
                else math.nan
            )
            if profiler is not None:
                await asyncio.to_thread(profiler.wait)
            wall = time.time() - wall_before
            cpu_after = sum(map(bench.cpu_seconds, pids))
            result["service_cpu_pct"] = 100 * (cpu_after - cpu_before) / wall
            result["rss_mb"] = sum(map(current_rss_mb, pids))
            # Flat or not: the RSS a minute in (the service warmed up) against at the end.
            after_a_minute = [mb for at, mb in rss if at >= 60.0]
            result["rss_1min_mb"] = after_a_minute[0] if after_a_minute else math.nan
            # One sample a minute from the first on: flat, or growing all along.
            result["rss_by_minute"] = [
                next(mb for at, mb in rss if at >= minute * 60.0)
                for minute in range(1, int(args.seconds // 60) + 1)
                if any(at >= minute * 60.0 for at, _ in rss)
            ]
            result["replayed"] = sum(replayed)
            result["peak_rss_mb"] = sum(map(bench.peak_rss_mb, pids))
            result["db_connections"] = max(connections) if connections else math.nan
            await bench.wait_for_arrivals(ctx.receiver, len(expected), time.time() + 30)
            await asyncio.sleep(args.settle)
        finally:
            result["exit_code"] = await ctx.procs.stop(service.proc)
        records = await ctx.receiver.records()
        found = bench.analyse(records, expected)
        result.update(
            expected=len(expected),
            lost=found["lost"],
            duplicates=found["duplicates"],
            late_p50_ms=found["lag_p50_ms"],
            late_p99_ms=found["lag_p99_ms"],
            late_max_ms=found["lag_max_ms"],
            reads_ok=reads.get("ok", 0),
            reads_failed=sum(n for k, n in reads.items() if k != "ok"),
        )
        result["responses"] = {
            kind: (bench.percentile(sorted(v), 50) * 1000, max(v) * 1000)
            for kind, v in timings.items()
        }
        # The refused ticks' retries and dead letters are part of the mix.
        flagged = [
            line for line in bench.log_problems(service.log_text()) if EXPECTED_IN_MIX not in line
        ]
        result["log_problems"] = len(flagged)
        if flagged:
            ctx.problems.append(f"{tag}: {len(flagged)} flagged log lines, first ones:")
            ctx.problems.extend("    " + line for line in flagged[:8])
        if result["lost"] or result["duplicates"]:
            ctx.problems.append(f"{tag}: lost={result['lost']} duplicates={result['duplicates']}")
        if result["exit_code"] not in bench.GRACEFUL_EXITS:
            ctx.problems.append(f"{tag}: service exit code {result['exit_code']}")
    finally:
        try:
            await ctx.databases.drop(handle)
        except Exception as exc:
            bench.log(f"could not drop {handle}: {exc}")
    return result


def variants(args: argparse.Namespace) -> list[tuple[str, list[str] | None, dict[str, str]]]:
    extra = dict(item.split("=", 1) for item in args.env)
    new: list[tuple[str, list[str] | None, dict[str, str]]]
    if args.placements:
        new = [
            (f"{args.label} {placement}", None, {**extra, "CHRONOQ_DELIVERY_PROCESS": placement})
            for placement in args.placements
        ]
    else:
        new = [(args.label, None, extra)]
    if args.baseline is None:
        return new
    tree = Path(args.baseline).resolve()
    if not (tree / "app" / "main.py").exists():
        raise SystemExit(f"{tree} holds no app/main.py")
    return [
        ("base", [sys.executable, "-m", "app.cli"], {**extra, "PYTHONPATH": str(tree)}),
        *new,
    ]


async def main_async(args: argparse.Namespace) -> dict[str, list[dict[str, Any]]]:
    procs = bench.Processes()
    databases = bench.Databases(args.pg_admin_url)
    log_dir = Path(tempfile.mkdtemp(prefix="chronoq_mixed_logs_"))
    bench.log(f"service logs in {log_dir}")
    results: dict[str, list[dict[str, Any]]] = {}
    problems: list[str] = []
    try:
        connector = aiohttp.TCPConnector(limit=16)
        timeout = aiohttp.ClientTimeout(total=120)
        async with aiohttp.ClientSession(
            connector=connector, trust_env=False, timeout=timeout
        ) as http:
            receiver = bench.ReceiverClient(procs, http)
            await receiver.start()
            ctx = bench.Context(args, procs, http, receiver, databases, log_dir, problems)
            try:
                for run in range(1, args.runs + 1):
                    for mix in args.mixes:
                        for name, command, env in variants(args):
                            key = f"{name} {mix}"
                            r = await one_run(ctx, mix, command, f"{name}-{mix}-{run}", env)
                            results.setdefault(key, []).append(r)
                            bench.log(
                                f"run {run} {key}: late p50 {r['late_p50_ms']:.1f} ms, p99 "
                                f"{r['late_p99_ms']:.1f} ms, max {r['late_max_ms']:.0f} ms "
                                f"({r['expected']} one-shots, lost {r['lost']}, dup "
                                f"{r['duplicates']}); CPU {r['service_cpu_pct']:.0f}%, RSS "
                                f"{r['rss_mb']:.0f} MiB (a minute in {r['rss_1min_mb']:.0f}, "
                                f"peak {r['peak_rss_mb']:.0f}), {r['replayed']} replayed, "
                                f"{r['db_connections']} db connections; reads "
                                f"{r['reads_ok']} ok, {r['reads_failed']} failed; machine "
                                f"{r['machine_busy_pct']:.0f}% busy"
                            )
                            bench.log(
                                "    response p50/max (ms): "
                                + ", ".join(
                                    f"{kind} {p50:.0f}/{top:.0f}"
                                    for kind, (p50, top) in sorted(r["responses"].items())
                                )
                            )
            finally:
                await receiver.stop()
    finally:
        procs.kill_all()
        await databases.drop_all()
    for line in problems:
        bench.log(line)
    return results


METRICS = [
    ("late_p50_ms", "lateness p50 (ms)", 1),
    ("late_p99_ms", "lateness p99 (ms)", 1),
    ("late_max_ms", "lateness max (ms)", 0),
    ("service_cpu_pct", "service CPU (% of one core)", 0),
    ("rss_1min_mb", "RSS a minute in (MiB)", 0),
    ("rss_mb", "RSS at the end (MiB)", 0),
    ("replayed", "dead letters replayed", 0),
    ("peak_rss_mb", "peak RSS (MiB)", 0),
    ("db_connections", "database connections", 0),
    ("machine_busy_pct", "machine busy (% of all cores)", 0),
]


def section(args: argparse.Namespace, results: dict[str, list[dict[str, Any]]]) -> str:
    names = list(results)
    lines = [
        "## Soak: the mix for eight minutes" if args.soak else "## Mixed load",
        "",
        f"{datetime.now(UTC):%Y-%m-%d %H:%M} UTC, code {bench.code_version()}, {args.runs} "
        "runs, medians with each run in brackets. Generated by `bench/mixed.py`.",
        "",
        f"One replica on PostgreSQL, default settings, {args.seconds:g} s per run. *quiet*: "
        f"{args.oneshots} one-shots a second (one batch create a second, each due "
        f"{args.lead:g} s later at its own instant), nothing else. *mixed*: the same, and "
        f"{args.ticks} recurring ticks a second (every {args.every:g} s each, a tenth to a "
        f"refused port, retried then dead-lettered), {args.reads:g} list reads a second, the "
        "console and /metrics once a second each"
        + (
            f", and every dead letter of the mix replayed every {args.replay_every:g} s"
            if args.replay_every > 0
            else ""
        )
        + ". Lateness = arrival at the receiver minus "
        "`X-Scheduled-For` of the one-shots; every one-shot must arrive exactly once."
        + (
            f" *base* is `{args.baseline_label}`, run interleaved with *new*."
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
    if args.soak:
        for name in names:
            for r in results[name]:
                minutes = ", ".join(bench.fmt(mb) for mb in r["rss_by_minute"])
                lines.append(f"| RSS each minute from the first (MiB), {name} | {minutes} |")
    for key, title in (("lost", "lost one-shots"), ("duplicates", "duplicate arrivals")):
        cells = [f"{sum(r[key] for r in results[n])}" for n in names]
        lines.append(f"| {title} | " + " | ".join(cells) + " |")
    if "new mixed" in results:
        new = results["new mixed"]
        p99 = bench.median([r["late_p99_ms"] for r in new])
        clean = all(r["lost"] == 0 and r["duplicates"] == 0 for r in new)
        met = p99 < BAR_P99_MS and clean
        growth = bench.median([r["rss_mb"] / r["rss_1min_mb"] for r in new])
        flat = not args.soak or growth <= 1 + BAR_RSS_GROWTH
        lines += [
            "",
            f"Bar: p99 under {BAR_P99_MS:g} ms in the mix, no one-shot lost or repeated"
            + (f", RSS at the end within {BAR_RSS_GROWTH:.0%} of a minute in" if args.soak else "")
            + f" ({'met' if met and flat else 'NOT met'}: p99 {p99:.1f} ms"
            + (f", RSS x{growth:.2f}" if args.soak else "")
            + ").",
        ]
    return "\n".join(lines)


def write_docs(args: argparse.Namespace, results: dict[str, list[dict[str, Any]]]) -> None:
    bench.record(SOAK_SECTION if args.soak else SECTION, section(args, results))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=40.0)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--mixes", nargs="+", choices=MIXES, default=list(MIXES))
    parser.add_argument("--oneshots", type=int, default=50, help="one-shots created a second")
    parser.add_argument("--lead", type=float, default=2.0, help="seconds from create to due")
    parser.add_argument("--ticks", type=int, default=60, help="recurring ticks a second")
    parser.add_argument("--every", type=float, default=5.0, help="each recurring schedule's period")
    parser.add_argument("--reads", type=float, default=5.0, help="list reads a second")
    parser.add_argument("--settle", type=float, default=2.0, help="wait after the last arrival")
    parser.add_argument(
        "--replay-every",
        type=float,
        default=0.0,
        help="seconds between replays of every dead letter of the mix (0: none)",
    )
    parser.add_argument(
        "--soak", action="store_true", help="write the docs' soak section, not the mix's"
    )
    parser.add_argument("--baseline", help="a copy of an earlier tree to compare against")
    parser.add_argument("--baseline-label", default="the baseline")
    parser.add_argument("--label", default="new", help="what this checkout's runs are called")
    parser.add_argument("--env", action="append", default=[], help="NAME=VALUE for the service")
    parser.add_argument("--pg-admin-url", default=bench.DEFAULT_PG_ADMIN_URL)
    parser.add_argument(
        "--placements",
        nargs="+",
        choices=("shared", "separate"),
        help="run this checkout once per CHRONOQ_DELIVERY_PROCESS value, interleaved",
    )
    parser.add_argument("--profile", help="a directory for py-spy's raw samples of each run")
    parser.add_argument("--no-docs", dest="docs", action="store_false")
    args = parser.parse_args()
    os.environ.setdefault("NO_PROXY", "127.0.0.1,localhost")
    results = asyncio.run(main_async(args))
    if args.docs:
        write_docs(args, results)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
