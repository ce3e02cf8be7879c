"""Fair dispatch between tenants: how late one tenant's paced stream is beside another
tenant's burst, and how two saturating tenants of weights 3 and 1 share the starts.

    .venv/bin/python bench/fairness.py                       # both scenarios, 3 runs
    .venv/bin/python bench/fairness.py --scenarios burst --runs 1 --burst-count 5000

Every measurement gets a fresh PostgreSQL database and `--replicas` (2) `chronoq serve`
processes on it with default settings, webhooks to bench/receiver.py processes (one per
tenant, each answering at once).

- *alone*: tenant `stream`'s `--stream-count` (300) one-shots due `--gap` (20 ms) apart,
  nothing else (the same run's reference).
- *burst*: the same stream, its first due instant 0.5 s after tenant `burst`'s
  `--burst-count` (20,000) one-shots, all due at that one instant, to the same receiver (one
  destination: what tenants share when their work goes to one place). What is measured is
  the stream's lateness (first arrival minus `X-Scheduled-For`: p50, p99, max), and when
  the burst drained.
- *burst-apart*: the same, the burst to a receiver of its own (a replica shares its slots
  between destinations too, which keeps the stream on time by itself).
- *weights*: tenants `heavy` (weight 3) and `light` (weight 1), `--weights-count` (6,000)
  one-shots each, all due at one instant, to one receiver. What is measured is the ratio of
  heavy's arrivals to light's while both saturated (up to the instant 90 % of heavy's had
  arrived), which fair dispatch makes 3.
- *weights-apart*: the same, each tenant to a receiver of its own (two destinations, which
  a replica's delivery slots are shared between as well).

Each tenant is made over the API first (`PUT /v1/tenants/<id>`); the schedules are created
with `Chronoq-Tenant`.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import aiohttp

sys.path.insert(0, str(Path(__file__).resolve().parent))

import run as bench

SCENARIOS = ("alone", "burst", "burst-apart", "weights", "weights-apart")
STREAM_OFFSET = 0.5  # the stream's first due instant, after the burst's
NO_WEIGHTS = False  # --no-weights: make every tenant of weight 1 (a service before them)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument(
        "--scenarios",
        default="burst,burst-apart,weights,weights-apart",
        help="comma-separated subset of burst,burst-apart,weights,weights-apart (alone runs "
        "with them, as their reference)",
    )
    parser.add_argument("--replicas", type=int, default=2)
    parser.add_argument("--stream-count", type=int, default=300)
    parser.add_argument("--gap", type=float, default=0.02)
    parser.add_argument("--burst-count", type=int, default=20_000)
    parser.add_argument("--weights-count", type=int, default=6_000)
    parser.add_argument(
        "--lead", type=float, default=3.0, help="seconds from now to the due instant"
    )
    parser.add_argument("--window", type=float, default=120.0)
    parser.add_argument("--env", action="append", default=[], help="NAME=VALUE for the service")
    parser.add_argument(
        "--pg-admin-url",
        default=os.environ.get("CHRONOQ_BENCH_PG_URL", bench.DEFAULT_PG_ADMIN_URL),
    )
    parser.add_argument(
        "--no-weights",
        action="store_true",
        help="put no weight (for a service before weights): the weights scenarios then "
        "measure how it shares without them",
    )
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args(argv)
    wanted = [name for name in args.scenarios.split(",") if name]
    unknown = set(wanted) - set(SCENARIOS[1:])
    if unknown:
        parser.error(f"unknown scenario(s): {', '.join(sorted(unknown))}")
    names = [name for name in SCENARIOS[1:] if name in wanted]
    bursts = {"burst", "burst-apart"} & set(names)
    args.scenario_list = (["alone"] if bursts else []) + names
    if args.replicas < 1 or args.stream_count < 1 or args.runs < 1:
        parser.error("--replicas, --stream-count and --runs must be at least 1")
    return args


def one_shot(url: str, at: float, n: int, scenario: str) -> dict[str, Any]:
    return bench.schedule_item(url, bench.rfc3339(at), n, scenario)


def tenant(name: str) -> dict[str, str]:
    return {"Chronoq-Tenant": name}


async def put_tenant(http: aiohttp.ClientSession, base: str, name: str, weight: int) -> None:
    """Make the tenant; its weight only when not 1 (a service that has no weights yet takes
    the tenant, and the run then measures what it does without them: `--no-weights`)."""
    body = {"weight": weight} if weight != 1 and not NO_WEIGHTS else {}
    async with http.put(f"{base}/v1/tenants/{name}", json=body) as answer:
        if answer.status not in (200, 201):
            raise RuntimeError(f"PUT /v1/tenants/{name}: {answer.status} {await answer.text()}")


def share(heavy: list[float], light: list[float]) -> dict[str, Any]:
    """Arrivals of each up to the instant 90 % of the first to drain had arrived: both were
    saturating then (at the very end the one draining has too little left for its share,
    and the other takes the rest, as it should)."""
    first_done = min((heavy, light), key=max)
    until = sorted(first_done)[int(len(first_done) * 0.9) - 1]
    h = sum(1 for at in heavy if at <= until)
    lt = sum(1 for at in light if at <= until)
    return {"heavy_before": h, "light_before": lt, "ratio": h / lt if lt else float("inf")}


class Run:
    def __init__(
        self, args: argparse.Namespace, http: aiohttp.ClientSession, log_dir: Path
    ) -> None:
        self.args = args
        self.http = http
        self.log_dir = log_dir
        self.procs = bench.Processes()
        self.databases = bench.Databases(args.pg_admin_url)

    async def scenario(self, name: str, run: int) -> dict[str, Any]:
        args = self.args
        database_url, handle = await self.databases.fresh("postgresql")
        first_receiver = bench.ReceiverClient(self.procs, self.http)
        second_receiver = bench.ReceiverClient(self.procs, self.http)
        services: list[bench.Service] = []
        try:
            await first_receiver.start()
            await second_receiver.start()
            extra = dict(item.split("=", 1) for item in args.env)
            for replica in range(args.replicas):
                services.append(
                    await bench.start_service(
                        self.procs,
                        self.http,
                        database_url,
                        self.log_dir,
                        f"{name}-run{run}-replica{replica}",
                        extra,
                    )
                )
            base = services[0].base
            if name == "weights":
                both = {"heavy": first_receiver, "light": first_receiver}
                return await self.weights(name, base, both, run)
            if name == "weights-apart":
                apart = {"heavy": first_receiver, "light": second_receiver}
                return await self.weights(name, base, apart, run)
            # burst: one receiver for both tenants (one destination, which a replica's
            # slots are not shared within); burst-apart: a receiver each.
            burst_receiver = second_receiver if name == "burst-apart" else first_receiver
            return await self.burst(name, base, first_receiver, burst_receiver, run)
        finally:
            for service in services:
                await self.procs.stop(service.proc)
            await first_receiver.stop()
            await second_receiver.stop()
            await self.databases.drop(handle)

    async def burst(
        self,
        name: str,
        base: str,
        stream_receiver: bench.ReceiverClient,
        burst_receiver: bench.ReceiverClient,
        run: int,
    ) -> dict[str, Any]:
        args = self.args
        await put_tenant(self.http, base, "stream", 1)
        await put_tenant(self.http, base, "burst", 1)
        due = time.time() + args.lead
        burst_ids: set[str] = set()
        if name != "alone":
            url = burst_receiver.base + "/hook"
            items = [one_shot(url, due, n, name) for n in range(args.burst_count)]
            burst_ids = set(await bench.create_batches(self.http, base, items, tenant("burst")))
        created = time.time()
        first = max(due, created + 1.0) + STREAM_OFFSET
        stream = [
            one_shot(stream_receiver.base + "/hook", first + n * args.gap, n, "stream")
            for n in range(args.stream_count)
        ]
        expected = set(await bench.create_batches(self.http, base, stream, tenant("stream")))
        last = first + (args.stream_count - 1) * args.gap
        result = await self._stream_arrivals(stream_receiver, expected, last + args.window)
        complete = result["lost"] == 0
        drained_s = None
        if burst_ids:
            everything = len(burst_ids) + (
                len(expected) if burst_receiver is stream_receiver else 0
            )
            await bench.wait_for_arrivals(burst_receiver, everything, time.time() + args.window)
            burst = bench.analyse(await burst_receiver.records(), burst_ids)
            drained_s = burst["last_arrival"] - due
            result["burst_received"] = burst["received"]
        result.update(
            scenario=name,
            run=run,
            complete=complete,
            burst_drained_s=drained_s,
            created_before_due_s=first - created,
        )
        if result["duplicates"]:
            raise RuntimeError(f"{name}: the stream arrived twice: {result}")
        return result

    async def _stream_arrivals(
        self, receiver: bench.ReceiverClient, expected: set[str], deadline: float
    ) -> dict[str, Any]:
        """The stream's arrivals, once all came or at `deadline` (the receiver may hold the
        burst's too: only the stream's ids count)."""
        while True:
            result = bench.analyse(await receiver.records(), expected)
            if result["lost"] == 0 or time.time() > deadline:
                return result
            await asyncio.sleep(1.0)

    async def weights(
        self,
        name: str,
        base: str,
        receivers: dict[str, bench.ReceiverClient],
        run: int,
    ) -> dict[str, Any]:
        """Each tenant delivers to its receiver in `receivers` (one for both: one
        destination; one each: a replica shares its slots between destinations too, by
        their tenants' weights)."""
        args = self.args
        await put_tenant(self.http, base, "heavy", 3)
        await put_tenant(self.http, base, "light", 1)
        due = time.time() + args.lead + args.weights_count / 2000
        ids: dict[str, set[str]] = {}
        for who in ("heavy", "light"):
            url = receivers[who].base + "/hook"
            items = [one_shot(url, due, n, who) for n in range(args.weights_count)]
            ids[who] = set(await bench.create_batches(self.http, base, items, tenant(who)))
        if time.time() > due:
            raise RuntimeError("the creates ended after the due instant: raise --lead")
        first: dict[str, float] = {}
        for receiver in {id(r): r for r in receivers.values()}.values():
            mine = {o for who, r in receivers.items() if r is receiver for o in ids[who]}
            await bench.wait_for_arrivals(receiver, len(mine), time.time() + args.window)
            records = await receiver.records()
            found = bench.analyse(records, mine)
            if found["duplicates"] or found["lost"]:
                raise RuntimeError(f"{name}: {found}")
            for occurrence, at, _, _ in records:
                first[occurrence] = min(at, first.get(occurrence, at))
        arrivals = {who: [first[o] for o in ids[who]] for who in ids}
        result = share(arrivals["heavy"], arrivals["light"])
        result.update(
            scenario=name,
            run=run,
            heavy_drained_s=max(arrivals["heavy"]) - due,
            light_drained_s=max(arrivals["light"]) - due,
        )
        return result

    async def close(self) -> None:
        self.procs.kill_all()
        await self.databases.drop_all()


def table(results: list[dict[str, Any]], names: list[str]) -> list[str]:
    lines = []
    streams = [n for n in names if not n.startswith("weights")]
    if streams:
        lines += [
            "| the stream beside | lateness p50 (ms) | p99 (ms) | max (ms) | burst drained (s) |",
            "| --- | --- | --- | --- | --- |",
        ]
        for name in streams:
            runs = [r for r in results if r["scenario"] == name]

            def each(key: str, runs: list[dict[str, Any]] = runs) -> str:
                values = [r[key] for r in runs if r.get(key) is not None]
                if not values:
                    return "-"
                inner = ", ".join(bench.fmt(v, 1) for v in values)
                return f"{bench.fmt(bench.median(values), 1)} ({inner})"

            label = "nothing" if name == "alone" else "another tenant's burst"
            lines.append(
                f"| {label} | {each('lag_p50_ms')} | {each('lag_p99_ms')} | {each('lag_max_ms')} "
                f"| {each('burst_drained_s')} |"
            )
    for scenario in ("weights", "weights-apart"):
        weights = [r for r in results if r["scenario"] == scenario]
        if not weights:
            continue
        ratios = ", ".join(bench.fmt(r["ratio"], 2) for r in weights)
        ratio = bench.fmt(bench.median([r["ratio"] for r in weights]), 2)
        heavy = bench.fmt(bench.median([r["heavy_drained_s"] for r in weights]), 1)
        light = bench.fmt(bench.median([r["light_drained_s"] for r in weights]), 1)
        where = "one receiver" if scenario == "weights" else "a receiver each"
        lines += [
            "",
            f"| weights 3:1, {where} | heavy:light starts while both waited "
            "| heavy drained (s) | light drained (s) |",
            "| --- | --- | --- | --- |",
            f"| median of {len(weights)} | {ratio} ({ratios}) | {heavy} | {light} |",
        ]
    return lines


async def main_async(args: argparse.Namespace) -> int:
    log_dir = Path(tempfile.mkdtemp(prefix="chronoq_fairness_logs_"))
    bench.log(f"service logs in {log_dir}")
    results: list[dict[str, Any]] = []
    timeout = aiohttp.ClientTimeout(total=120)
    async with aiohttp.ClientSession(timeout=timeout) as http:
        runner = Run(args, http, log_dir)
        try:
            for run in range(1, args.runs + 1):
                for name in args.scenario_list:
                    result = await runner.scenario(name, run)
                    results.append(result)
                    bench.log(f"run {run} {name}: {json.dumps(result, default=str)[:400]}")
        finally:
            await runner.close()
    print("\n".join(table(results, args.scenario_list)))
    if args.json is not None:
        document = {"args": {k: str(v) for k, v in vars(args).items()}, "results": results}
        args.json.write_text(json.dumps(document, indent=1))
    return 0


def main(argv: list[str] | None = None) -> int:
    global NO_WEIGHTS
    args = parse_args(argv)
    NO_WEIGHTS = args.no_weights
    return asyncio.run(main_async(args))


if __name__ == "__main__":
    sys.exit(main())
