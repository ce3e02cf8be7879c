"""W1 with the RabbitMQ target, beside the ceiling of confirmed publishes with aio-pika alone.

    .venv/bin/python bench/rabbitmq.py [--runs 3] [--count 10000] [--baseline DIR]

Each run: a fresh PostgreSQL database and service (default settings plus AMQP_URL), a
durable queue of its own, 10,000 one-shot schedules due at one instant T publishing to it
through the default exchange, and a consumer in this process recording each message's
arrival. Deliveries/s = distinct occurrences received / (last first arrival - T). The
ceiling, measured in the same run: aio-pika alone publishing as many persistent messages
to a durable queue, 64 publishes in flight (the service's default concurrency), each
awaiting its publisher confirm. The service's peak RSS is its VmHWM read from /proc just
before it is stopped; its CPU per delivery is the CPU time it used from the due instant to
the last arrival, over the deliveries. The consumer's CPU (this process) and how busy the
machine's cores were are taken over the same span, and the machine's over the ceiling too:
they tell a service that waits from a machine that is full.

--baseline DIR (a checkout with its own .venv, e.g. a git worktree of an earlier commit)
runs that checkout's service too, in every run right after the ceiling and before this
tree's (ceiling, baseline, this tree, ceiling, baseline, ...), so both are compared with the
same runs' ceilings. Results: docs/benchmarks-rabbitmq.md, this tree's beside the ceiling in
its section of docs/benchmarks.md, and every figure in an entry of docs/benchmark-history.md.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import aio_pika
import aiohttp

sys.path.insert(0, str(Path(__file__).resolve().parent))

from run import (
    ROOT,
    Databases,
    Processes,
    cpu_seconds,
    fmt,
    log,
    machine_busy_seconds,
    median,
    parse_instant,
    peak_rss_mb,
    percentile,
    record,
    rfc3339,
    start_service,
)

DOCS = ROOT / "docs" / "benchmarks-rabbitmq.md"
CONCURRENCY = 64
BAR = 0.8


async def ceiling(url: str, count: int) -> tuple[float, float, float]:
    """Confirmed, persistent publishes per second with aio-pika alone, the CPU time this
    process spent per publish (µs), and how busy the machine's cores were meanwhile (0-1)."""
    connection = await aio_pika.connect(url)
    try:
        channel = await connection.channel(publisher_confirms=True)
        queue = await channel.declare_queue(
            f"chronoq-bench-ceiling-{uuid.uuid4().hex[:8]}", durable=True
        )
        gate = asyncio.Semaphore(CONCURRENCY)

        async def one(n: int) -> None:
            async with gate:
                await channel.default_exchange.publish(
                    aio_pika.Message(
                        b'{"n":%d}' % n,
                        delivery_mode=aio_pika.DeliveryMode.PERSISTENT,
                        message_id=str(n),
                    ),
                    queue.name,
                    mandatory=True,
                )

        started, cpu, machine = time.perf_counter(), time.process_time(), machine_busy_seconds()
        await asyncio.gather(*(one(n) for n in range(count)))
        rate = count / (time.perf_counter() - started)
        cpu_us = 1e6 * (time.process_time() - cpu) / count
        busy = _busy_since(machine)
        await queue.delete(if_unused=False, if_empty=False)
        return rate, cpu_us, busy
    finally:
        await connection.close()


def _busy_since(before: tuple[float, float]) -> float:
    busy, total = machine_busy_seconds()
    return (busy - before[0]) / max(total - before[1], 1e-9)


async def one_run(
    args: argparse.Namespace,
    procs: Processes,
    dbs: Databases,
    http: aiohttp.ClientSession,
    n: int,
    build: str,
    command: list[str] | None,
) -> dict[str, Any]:
    database_url, handle = await dbs.fresh("postgresql")
    queue_name = f"chronoq-bench-{os.getpid()}-{build}-{n}"
    connection = await aio_pika.connect(args.amqp_url)
    service = None
    try:
        channel = await connection.channel()
        await channel.set_qos(prefetch_count=1000)
        queue = await channel.declare_queue(queue_name, durable=True)
        arrivals: dict[str, list[tuple[float, str]]] = {}

        async def on_message(message: aio_pika.abc.AbstractIncomingMessage) -> None:
            at = time.time()
            scheduled = str((message.headers or {}).get("x-scheduled-for", ""))
            arrivals.setdefault(str(message.message_id), []).append((at, scheduled))
            await message.ack()

        await queue.consume(on_message)
        with tempfile.TemporaryDirectory() as logs:
            service = await start_service(
                procs,
                http,
                database_url,
                Path(logs),
                f"amqp-{build}-{n}",
                {"AMQP_URL": args.amqp_url},
                command=command,
            )
            due = time.time() + args.lead
            items = [
                {
                    "event_type": "bench.amqp",
                    "payload": {"n": k},
                    "target": {"type": "rabbitmq", "exchange": "", "routing_key": queue_name},
                    "trigger": {"type": "once", "at": rfc3339(due)},
                }
                for k in range(args.count)
            ]
            created_at = time.perf_counter()
            expected: set[str] = set()
            for start in range(0, len(items), 1000):
                async with http.post(
                    service.base + "/v1/schedules/batch",
                    json={"items": items[start : start + 1000]},
                ) as response:
                    body = await response.json()
                    assert response.status == 201, body
                    expected.update(item["next_occurrence_id"] for item in body["items"])
            create_rate = args.count / (time.perf_counter() - created_at)
            if time.time() > due:
                log("creation finished after the due instant; raise --lead")
            # CPU and the machine are measured from the due instant: the seconds of lead
            # before it are idle and would dilute them.
            await asyncio.sleep(max(0.0, due - time.time()))
            cpu_before = cpu_seconds(service.proc.pid)
            machine_before, consumer_before = machine_busy_seconds(), time.process_time()
            deadline = due + args.timeout
            while not expected <= arrivals.keys() and time.time() < deadline:  # noqa: ASYNC110
                await asyncio.sleep(0.1)
            cpu_used = cpu_seconds(service.proc.pid) - cpu_before
            consumer_used = time.process_time() - consumer_before
            machine_busy = _busy_since(machine_before)
            peak_rss = peak_rss_mb(service.proc.pid)
            await procs.stop(service.proc)
            service = None
        received = [at for at, _ in (v[0] for k, v in arrivals.items() if k in expected)]
        lags = sorted(
            1000 * (v[0][0] - parse_instant(v[0][1])) for k, v in arrivals.items() if k in expected
        )
        last = max(received) if received else due
        result = {
            "create_rate": create_rate,
            "deliveries_per_s": len(received) / max(last - due, 1e-9),
            "lag_p50_ms": percentile(lags, 50) if lags else float("nan"),
            "lag_p99_ms": percentile(lags, 99) if lags else float("nan"),
            "cpu_us_per_delivery": 1e6 * cpu_used / max(len(received), 1),
            "consumer_cpu_us": 1e6 * consumer_used / max(len(received), 1),
            "machine_busy": 100 * machine_busy,
            "peak_rss_mb": peak_rss,
            "lost": len(expected - arrivals.keys()),
            "duplicates": sum(len(v) - 1 for k, v in arrivals.items() if k in expected),
        }
        await queue.delete(if_unused=False, if_empty=False)
        return result
    finally:
        if service is not None:
            await procs.stop(service.proc)
        await connection.close()
        await dbs.drop(handle)


async def main_async(args: argparse.Namespace) -> int:
    procs = Processes()
    dbs = Databases(args.pg_admin_url)
    builds: dict[str, list[str] | None] = {}
    if args.baseline is not None:
        builds["baseline"] = [str(args.baseline / ".venv" / "bin" / "chronoq")]
    builds["this tree"] = None
    runs: dict[str, list[dict[str, Any]]] = {build: [] for build in builds}
    ceilings: list[float] = []
    ceiling_cpu: list[float] = []
    ceiling_busy: list[float] = []
    try:
        async with aiohttp.ClientSession() as http:
            for n in range(1, args.runs + 1):
                rate, cpu_us, busy = await ceiling(args.amqp_url, args.count)
                ceilings.append(rate)
                ceiling_cpu.append(cpu_us)
                ceiling_busy.append(100 * busy)
                log(
                    f"run {n}: ceiling {fmt(rate)} confirmed publishes/s,"
                    f" CPU {fmt(cpu_us)} us/publish, machine {100 * busy:.0f}% busy"
                )
                for build, command in builds.items():
                    tag = build.replace(" ", "-")
                    runs[build].append(await one_run(args, procs, dbs, http, n, tag, command))
                    r = runs[build][-1]
                    log(
                        f"run {n}: W1 rabbitmq ({build}): create {fmt(r['create_rate'])}/s,"
                        f" deliveries {fmt(r['deliveries_per_s'])}/s"
                        f" ({fmt(r['deliveries_per_s'] / ceilings[-1], 2)} of the ceiling),"
                        f" lag p50 {fmt(r['lag_p50_ms'])} ms, p99 {fmt(r['lag_p99_ms'])} ms,"
                        f" CPU {fmt(r['cpu_us_per_delivery'])} us/delivery,"
                        f" consumer {fmt(r['consumer_cpu_us'])} us/message,"
                        f" machine {fmt(r['machine_busy'])}% busy,"
                        f" peak RSS {fmt(r['peak_rss_mb'], 1)} MB,"
                        f" lost {r['lost']}, dup {r['duplicates']}"
                    )
    finally:
        procs.kill_all()
        await dbs.drop_all()
    write_docs(args, runs, ceilings, ceiling_cpu, ceiling_busy)
    mine = runs["this tree"]
    rate = median([r["deliveries_per_s"] for r in mine])
    ok = rate >= BAR * median(ceilings) and all(r["lost"] == 0 for r in mine)
    log(f"bar {'PASS' if ok else 'FAIL'}: W1 >= {BAR:.0%} of the ceiling with 0 lost")
    return 0


def _commit(directory: Path) -> str:
    try:
        done = subprocess.run(
            ["git", "-C", str(directory), "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            check=True,
            timeout=10,
        )
    except (OSError, subprocess.SubprocessError):
        return "?"
    dirty = subprocess.run(
        ["git", "-C", str(directory), "status", "--porcelain", "--untracked-files=no"],
        capture_output=True,
        text=True,
        check=False,
        timeout=10,
    ).stdout.strip()
    return done.stdout.strip() + (" with uncommitted changes" if dirty else "")


def write_docs(
    args: argparse.Namespace,
    runs: dict[str, list[dict[str, Any]]],
    ceilings: list[float],
    ceiling_cpu: list[float],
    ceiling_busy: list[float],
) -> None:
    count = len(ceilings)
    top = median(ceilings)
    header = " | ".join(f"run {n}" for n in range(1, count + 1))

    def row(name: str, values: list[float], digits: int = 0) -> str:
        cells = " | ".join(fmt(v, digits) for v in values)
        return f"| {name} | {fmt(median(values), digits)} | {cells} |"

    lines = [
        "# Benchmarks: the RabbitMQ target",
        "",
        f"Generated by `bench/rabbitmq.py` on {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())};"
        f" medians of {count} runs on the same 2-core machine as `docs/benchmarks.md`"
        " (PostgreSQL store, default settings plus `AMQP_URL`, RabbitMQ on 127.0.0.1).",
        "",
        f"W1: {args.count:,} one-shot schedules due at one instant, published through the default"
        " exchange to a durable queue of the run's own, consumed in the benchmark process."
        " Ceiling: aio-pika alone publishing as many persistent messages with publisher confirms,"
        f" {CONCURRENCY} in flight on one channel, measured in the same run. Peak RSS: the"
        " service's VmHWM just before it is stopped. CPU per delivery: the service's CPU time"
        " from the due instant to the last arrival, over the deliveries; the consumer's and"
        " the machine's over the same span.",
        "",
    ]
    builds = {"this tree": _commit(ROOT)}
    if args.baseline is not None:
        builds = {"baseline": _commit(args.baseline), **builds}
        lines += [
            "Each run measured the ceiling, then the baseline's service, then this tree's,"
            " one after the other: "
            + ", ".join(f"{build} = `{commit}`" for build, commit in builds.items())
            + ".",
            "",
        ]
    else:
        lines += [f"Code: `{builds['this tree']}`.", ""]
    lines += [f"| metric | median | {header} |", "| --- | --- |" + " --- |" * count]
    lines.append(row("confirmed-publish ceiling (aio-pika alone, msgs/s)", ceilings))
    lines.append(row("ceiling: CPU per publish in the publishing process (µs)", ceiling_cpu))
    lines.append(row("ceiling: machine busy, all cores (%)", ceiling_busy))
    metrics = [
        ("W1 deliveries/s (due instant to last arrival)", "deliveries_per_s", 0),
        ("W1 create rate (schedules/s)", "create_rate", 0),
        ("W1 lag p50 (ms)", "lag_p50_ms", 0),
        ("W1 lag p99 (ms)", "lag_p99_ms", 0),
        ("service CPU per delivery (µs)", "cpu_us_per_delivery", 0),
        ("consumer CPU per message, benchmark process (µs)", "consumer_cpu_us", 0),
        ("machine busy during deliveries, all cores (%)", "machine_busy", 0),
        ("service peak RSS (MB)", "peak_rss_mb", 1),
        ("W1 lost", "lost", 0),
        ("W1 duplicates", "duplicates", 0),
    ]
    for build in builds:
        done = runs[build]
        lines.append(
            row(
                f"{build}: W1 / same-run ceiling",
                [r["deliveries_per_s"] / c for r, c in zip(done, ceilings, strict=True)],
                2,
            )
        )
        for name, key, digits in metrics:
            lines.append(row(f"{build}: {name}", [r[key] for r in done], digits))
    lines.append("")
    for build in builds:
        rate = median([r["deliveries_per_s"] for r in runs[build]])
        lines.append(
            f"{build.capitalize()}: median W1 / median ceiling ="
            f" {fmt(rate / top if top else float('nan'), 2)}."
        )
    lines += ["", f"Bar: at least {BAR:.2f} of the ceiling, with 0 lost.", ""]
    DOCS.write_text("\n".join(lines), encoding="utf-8")
    log(f"wrote {DOCS.relative_to(ROOT)}")
    record("rabbitmq", summary(args, runs["this tree"], ceilings, builds), "\n".join(lines[1:]))


def summary(
    args: argparse.Namespace,
    mine: list[dict[str, Any]],
    ceilings: list[float],
    builds: dict[str, str],
) -> str:
    """The `rabbitmq` section of docs/benchmarks.md: this tree's W1 beside the ceiling."""

    def cell(values: list[float]) -> str:
        return f"{fmt(median(values))} ({', '.join(fmt(v) for v in values)})"

    rate, top = median([r["deliveries_per_s"] for r in mine]), median(ceilings)
    ok = rate >= BAR * top and all(r["lost"] == 0 for r in mine)
    base = f", the baseline's (`{builds['baseline']}`) too" if "baseline" in builds else ""
    lines = [
        "## W1 to RabbitMQ",
        "",
        f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())} by `bench/rabbitmq.py`, code "
        f"`{builds['this tree']}`, {len(ceilings)} runs, medians with each run in brackets. "
        f"Every figure{base}: [benchmarks-rabbitmq.md]({DOCS.name}).",
        "",
        f"W1 ({args.count:,} one-shot schedules due at one instant) published through the "
        "default exchange to a durable queue of the run's own, consumed in the benchmark "
        "process; PostgreSQL store, default settings plus `AMQP_URL`, RabbitMQ on 127.0.0.1. "
        "The ceiling is aio-pika alone publishing as many persistent messages with publisher "
        f"confirms, {CONCURRENCY} in flight on one channel, in the same runs.",
        "",
        "| metric | median (each run) |",
        "| --- | --- |",
        f"| confirmed-publish ceiling, aio-pika alone (msgs/s) | {cell(ceilings)} |",
        "| W1 deliveries/s (due instant to last arrival) | "
        f"{cell([r['deliveries_per_s'] for r in mine])} |",
        f"| W1 lag p50 (ms) | {cell([r['lag_p50_ms'] for r in mine])} |",
        f"| W1 lag p99 (ms) | {cell([r['lag_p99_ms'] for r in mine])} |",
        f"| W1 lost | {cell([r['lost'] for r in mine])} |",
        f"| W1 duplicates | {cell([r['duplicates'] for r in mine])} |",
        "",
        f"Bar: at least {BAR:.2f} of the ceiling, with 0 lost ({'met' if ok else 'not met'}: "
        f"median W1 / median ceiling {fmt(rate / top if top else float('nan'), 2)}).",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--count", type=int, default=10_000)
    parser.add_argument("--lead", type=float, default=8.0, help="seconds from now to T")
    parser.add_argument("--timeout", type=float, default=120.0)
    parser.add_argument(
        "--amqp-url", default=os.environ.get("AMQP_URL", "amqp://guest:guest@127.0.0.1:5672/")
    )
    parser.add_argument("--pg-admin-url", default="postgresql://postgres@127.0.0.1:5432/postgres")
    parser.add_argument(
        "--baseline",
        metavar="DIR",
        help="a checkout with its own .venv whose service is measured in every run too",
    )
    args = parser.parse_args(argv)
    if args.baseline is not None:
        args.baseline = Path(args.baseline).resolve()
    return asyncio.run(main_async(args))


if __name__ == "__main__":
    sys.exit(main())
