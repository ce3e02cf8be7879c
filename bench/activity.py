"""The charts over a day of 10^6 attempts: how long the roll-up and the chart pages take.

    .venv/bin/python bench/activity.py                   # PostgreSQL, 10^6 attempts
    .venv/bin/python bench/activity.py --attempts 100000 --requests 5

A fresh PostgreSQL database is migrated and holds `--schedules` (1,000) schedules over 10
tenants (50 flow keys in two of them; a tenth of the attempts to one of 10 endpoints), made
through the API, and `--attempts` (10^6) occurrences each with one attempt, spread over the
last day (`--span-seconds`): 97 % delivered, 2 % retried, 1 % dead-lettered, their lateness
drawn from an exponential of mean 50 ms. One schedule of them is busy: it fired every second
of the day (86,400 attempts), the worst case of a schedule's chart, which is read from its
attempt log. The rows are written by SQL (`generate_series`), not delivered: this measures
reading them.

Then, timed here: the roll-up's first round (a day of minutes from nothing, what an
installation's first round after an upgrade does) and a steady round (the last two minutes,
what every `CHRONOQ_ACTIVITY_INTERVAL` costs); and, against `chronoq serve` (API only, so no
roll-up of its own runs beside), each chart page and API read `--requests` times after two
warm-ups: the median and the slowest. Bar (issue: the console as a fleet view): a chart page
over the day answers within 300 ms.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import aiohttp

sys.path.insert(0, str(Path(__file__).resolve().parent))

import run as bench

BAR_MS = 300.0
TENANTS = 10
BUSY_EVERY_SECOND = 86_400


def _uuid7(instant: str) -> str:
    """SQL for a UUIDv7 of `instant` (a timestamptz expression) with random bits, as the
    service makes attempt ids."""
    millis = f"lpad(to_hex((extract(epoch from {instant}) * 1000)::bigint), 12, '0')"
    return (
        f"({millis} || '7' || substr(md5(random()::text), 1, 3) || '8'"
        " || substr(md5(random()::text), 1, 15))::uuid"
    )


async def _seed_schedules(http: aiohttp.ClientSession, base: str, count: int) -> list[str]:
    """`count` schedules through the API over the tenants; their ids, the busy one first."""
    ids: list[str] = []
    per_tenant = max(1, count // TENANTS)
    for t in range(TENANTS):
        tenant = f"team-{t}"
        async with http.put(f"{base}/v1/tenants/{tenant}", json={}) as response:
            assert response.status in (200, 201), await response.text()
        items = [
            {
                "event_type": "bench.activity",
                "payload": {"n": n},
                "target": {"type": "webhook", "url": "http://127.0.0.1:9/hook"},
                "trigger": {"type": "once", "delay_seconds": 86400 * 365},
                **({"flow_key": f"key-{n % 50}"} if t < 2 else {}),
            }
            for n in range(per_tenant)
        ]
        async with http.post(
            f"{base}/v1/schedules/batch",
            json={"items": items},
            headers={"Chronoq-Tenant": tenant},
        ) as response:
            answer = await response.json()
            assert response.status == 201, answer
            ids += [item["id"] for item in answer["items"]]
    return ids


async def _seed_attempts(database_url: str, attempts: int, span: float) -> None:
    """The occurrences and their one attempt each, over the last day, by SQL."""
    import asyncpg

    conn = await asyncpg.connect(database_url.replace("postgresql+asyncpg", "postgresql"))
    try:
        # The first schedule made: team-0's first (ids are UUIDv7).
        busy = await conn.fetchval("SELECT id FROM schedules ORDER BY id LIMIT 1")
        others = attempts - BUSY_EVERY_SECOND
        # Each occurrence: a schedule (busy: every second; else uniformly), its instant,
        # its lateness and outcome; then its attempt.
        await conn.execute(
            f"""
            CREATE TEMP TABLE seed AS
            WITH s AS (SELECT id, flow_key, row_number() OVER (ORDER BY id) - 1 AS n,
                              count(*) OVER () AS total FROM schedules WHERE id <> $1),
            fired AS (
                SELECT $1::uuid AS schedule_id, NULL::text AS flow_key,
                       now() - make_interval(secs => g) AS fire_at, g
                FROM generate_series(1, {BUSY_EVERY_SECOND}) AS g
                UNION ALL
                SELECT s.id, s.flow_key, now() - make_interval(secs => random() * {span}), g
                FROM generate_series(1, {others}) AS g
                JOIN s ON s.n = g % s.total
            )
            SELECT gen_random_uuid() AS occurrence_id, schedule_id, flow_key, fire_at,
                   fire_at + make_interval(secs => -ln(1 - random()) * 0.05) AS started_at,
                   CASE WHEN g % 100 = 0 THEN 'dead_lettered'
                        WHEN g % 50 = 1 THEN 'retry' ELSE 'delivered' END AS outcome,
                   CASE WHEN g % 10 = 3 THEN endpoints[1 + g % 10] END AS endpoint_id
            FROM fired, (SELECT array_agg(gen_random_uuid()) AS endpoints
                         FROM generate_series(1, 10)) AS e
            """,
            busy,
        )
        await conn.execute(
            """
            INSERT INTO occurrences (occurrence_id, schedule_id, fire_at, available_at,
                                     status, origin, attempts, flow_key, delivered_at,
                                     dead_lettered_at, created_at, updated_at)
            SELECT occurrence_id, schedule_id, fire_at, NULL,
                   CASE outcome WHEN 'retry' THEN 'delivered' ELSE outcome END, 'schedule', 1,
                   flow_key,
                   CASE WHEN outcome <> 'dead_lettered' THEN started_at END,
                   CASE WHEN outcome = 'dead_lettered' THEN started_at END,
                   fire_at, started_at
            FROM seed
            """
        )
        await conn.execute(
            f"""
            INSERT INTO attempts (id, occurrence_id, attempt, started_at, duration_ms,
                                  outcome, status_code, endpoint_id, fire_at, tenant,
                                  flow_key)
            SELECT {_uuid7("seed.started_at")}, seed.occurrence_id, 1, seed.started_at, 20,
                   seed.outcome, CASE seed.outcome WHEN 'delivered' THEN 200 ELSE 503 END,
                   seed.endpoint_id, seed.fire_at, schedules.tenant, seed.flow_key
            FROM seed JOIN schedules ON schedules.id = seed.schedule_id
            """
        )
        await conn.execute("ANALYZE")
    finally:
        await conn.close()


async def _roll_up(database_url: str, reach_minutes: int | None) -> float:
    """One roll-up round, timed: from nothing (None) or of the last minutes."""
    from datetime import timedelta

    from app.domain.activity import MINUTE, floor_minute
    from app.store.dialects import transaction_now
    from app.store.engine.database import Database
    from app.store.records.activity import roll_up

    database = Database(database_url)
    try:

        async def work(conn: Any) -> float:
            now = await transaction_now(conn)
            current = floor_minute(now)
            reach = timedelta(days=1) if reach_minutes is None else reach_minutes * MINUTE
            started = time.perf_counter()
            await roll_up(conn, current - reach, current + MINUTE, now)
            return time.perf_counter() - started

        took: float = await database.run(work)
        return took
    finally:
        await database.close()


async def _timed(
    http: aiohttp.ClientSession, url: str, requests: int, tenant: str | None
) -> dict[str, float]:
    headers = {} if tenant is None else {"Chronoq-Tenant": tenant}
    for _ in range(2):
        async with http.get(url, headers=headers) as response:
            assert response.status == 200, (url, response.status, await response.text())
            await response.read()
    taken = []
    for _ in range(requests):
        started = time.perf_counter()
        async with http.get(url, headers=headers) as response:
            await response.read()
            assert response.status == 200
        taken.append((time.perf_counter() - started) * 1000)
    return {"median_ms": statistics.median(taken), "max_ms": max(taken)}


async def main_async(args: argparse.Namespace) -> dict[str, Any]:
    procs = bench.Processes()
    databases = bench.Databases(args.pg_admin_url)
    results: dict[str, Any] = {
        "attempts": args.attempts,
        "schedules": args.schedules,
        "span_seconds": args.span_seconds,
    }
    async with aiohttp.ClientSession() as http:
        try:
            database_url, handle = await databases.fresh("postgresql")
            with tempfile.TemporaryDirectory() as logs:
                service = await bench.start_service(
                    procs,
                    http,
                    database_url,
                    Path(logs),
                    "activity",
                    extra_env={"CHRONOQ_WORKER_ENABLED": "false"},
                )
                base = service.base
                bench.log("seeding schedules")
                ids = await _seed_schedules(http, base, args.schedules)
                bench.log(f"seeding {args.attempts} attempts")
                started = time.perf_counter()
                await _seed_attempts(database_url, args.attempts, args.span_seconds)
                bench.log(f"seeded in {time.perf_counter() - started:.0f} s")
                results["first_round_s"] = await _roll_up(database_url, None)
                # What each round recomputes: the current minute and the one before.
                steady = [await _roll_up(database_url, 1) for _ in range(args.requests)]
                results["steady_round_ms"] = statistics.median(steady) * 1000
                async with http.get(f"{base}/v1/activity?window=24h") as response:
                    totals = (await response.json())["totals"]
                results["totals"] = {k: totals[k] for k in ("delivered", "failed")}
                busy = ids[0]
                pages = {
                    "console, fleet, day": "/ui/activity?window=24h",
                    "console, fleet, hour": "/ui/activity",
                    "API, fleet, day": "/v1/activity?window=24h",
                    "console, tenant page, day": "/ui/tenants/team-0?window=24h",
                    "console, flow key page, day": "/ui/flow-keys/key-1?window=24h&tenant=team-0",
                    "console, busiest schedule's page, day": (
                        f"/ui/schedules/{busy}?window=24h&tenant=team-0"
                    ),
                    "API, busiest schedule, day": f"/v1/activity?window=24h&schedule_id={busy}",
                    "console, schedules list (the header alone)": "/ui/schedules",
                }
                timings = {}
                for name, path in pages.items():
                    # The API names its tenant in a header; the console in its address.
                    tenant = "team-0" if name.startswith("API, busiest") else None
                    timings[name] = await _timed(http, base + path, args.requests, tenant)
                    bench.log(f"{name}: {timings[name]}")
                results["timings"] = timings
                await procs.stop(service.proc)
            await databases.drop(handle)
        finally:
            procs.kill_all()
            await databases.drop_all()
    return results


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--attempts", type=int, default=1_000_000)
    parser.add_argument("--schedules", type=int, default=1_000)
    parser.add_argument("--requests", type=int, default=15)
    parser.add_argument(
        "--span-seconds",
        type=float,
        default=86400.0,
        help="the attempts (but the busy schedule's) are spread over this many seconds up to"
        " now: 600 puts 10^6 of them at W6's 1,667 a second, for the steady round's cost",
    )
    parser.add_argument("--pg-admin-url", default=bench.DEFAULT_PG_ADMIN_URL)
    parser.add_argument("--json", type=Path, default=None, help="write the results here")
    args = parser.parse_args()
    results = asyncio.run(main_async(args))
    text = json.dumps(results, indent=2)
    print(text)
    if args.json is not None:
        args.json.write_text(text)
    slowest_page = max(
        t["median_ms"] for name, t in results["timings"].items() if name.startswith("console")
    )
    print(f"slowest chart page median {slowest_page:.0f} ms; bar {BAR_MS:.0f} ms")
    return 0 if slowest_page <= BAR_MS else 1


if __name__ == "__main__":
    raise SystemExit(main())
