"""Chronoq benchmark: W1 (10,000 one-shots due at one instant) and W2 (300 one-shots 20 ms
apart) against a real service process, on PostgreSQL, MySQL/MariaDB and SQLite, plus the
client ceilings.

    .venv/bin/python bench/run.py                      # all three dialects, medians of 3 runs
    .venv/bin/python bench/run.py --quick              # smoke run, docs untouched
    .venv/bin/python bench/run.py --dialect postgresql --runs 5 --w1-count 20000

Every workload of every run gets a fresh database (PostgreSQL and MySQL: a new database
chronoq_bench_<pid>_<n>, dropped afterwards; SQLite: a new temporary file) and a fresh
`chronoq serve` subprocess with default settings except DATABASE_URL. Deliveries go to
bench/receiver.py in its own process; the ceilings come from bench/ceiling.py in another.
All traffic stays on 127.0.0.1. Results are printed; a run of both workloads also writes its
rows into docs/benchmarks.md and every figure into docs/benchmark-history.md.
"""

from __future__ import annotations

import argparse
import asyncio
import ctypes
import functools
import hashlib
import json
import math
import os
import platform
import re
import shlex
import shutil
import signal
import socket
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import aiohttp

ROOT = Path(__file__).resolve().parent.parent
BENCH = ROOT / "bench"
DOCS = ROOT / "docs" / "benchmarks.md"
HISTORY = ROOT / "docs" / "benchmark-history.md"
DEFAULT_PG_ADMIN_URL = "postgresql://postgres@127.0.0.1:5432/postgres"
DEFAULT_MYSQL_ADMIN_URL = "mysql://root@127.0.0.1:3306/mysql"
LOCAL_HOSTS = {"127.0.0.1", "localhost"}
# Dialects in the order each run measures them: the two server databases side by side, so
# that their comparison is between neighbouring measurements of the same run.
DIALECTS = ("postgresql", "mysql", "sqlite")
DIALECT_CHOICES = {
    "all": list(DIALECTS),
    "both": ["postgresql", "sqlite"],
    **{name: [name] for name in DIALECTS},
}
TITLES = {"postgresql": "PostgreSQL", "mysql": "MySQL / MariaDB", "sqlite": "SQLite"}

BATCH = 1000
BENCH_KEY = "bench-key-0123456789abcdef"
W2_COUNT = 300
W2_SPACING = 0.020
CONCURRENCY = 64

# uvicorn re-raises the SIGTERM it handled once its graceful shutdown is complete.
GRACEFUL_EXITS = (0, -signal.SIGTERM, None)

BAR_W1_RATE = 3000.0
BAR_W2_P99_MS = 150.0
# MySQL's W1 rate against PostgreSQL's in the same run, at least.
BAR_MYSQL_W1_RATIO = 0.5


# -- small helpers ------------------------------------------------------------------------


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def rfc3339(epoch: float) -> str:
    return datetime.fromtimestamp(epoch, UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


@functools.lru_cache(maxsize=4096)
def parse_instant(text: str) -> float:
    return datetime.fromisoformat(text).timestamp()


def percentile(sorted_values: list[float], p: float) -> float:
    """Nearest-rank percentile of an ascending list (p in 0..100)."""
    if not sorted_values:
        return math.nan
    rank = max(1, math.ceil(p / 100 * len(sorted_values)))
    return sorted_values[rank - 1]


def median(values: list[float]) -> float:
    clean = [v for v in values if v is not None and not math.isnan(v)]
    return statistics.median(clean) if clean else math.nan


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a live process (Linux /proc), NaN when unreadable."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return math.nan
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def postgres_pids() -> list[int]:
    """Every PostgreSQL server process on this machine (its backends serve the benchmark)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if (entry / "comm").read_text().strip() == "postgres":
                    found.append(int(entry.name))
            except OSError:
                continue
    return found


def machine_busy_seconds() -> tuple[float, float]:
    """(busy, total) CPU seconds of the whole machine so far, all cores (/proc/stat)."""
    fields = [int(v) for v in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    idle = fields[3] + fields[4]  # idle + iowait
    tick = os.sysconf("SC_CLK_TCK")
    return (sum(fields) - idle) / tick, sum(fields) / tick


def process_tree(pid: int) -> list[int]:
    """`pid` and its live descendants (Linux /proc): a service run with --processes."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            parent = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        children.setdefault(parent, []).append(int(entry.name))
    tree, todo = [], [pid]
    while todo:
        current = todo.pop()
        tree.append(current)
        todo.extend(children.get(current, []))
    return tree


def peak_rss_mb(pid: int) -> float:
    """Peak resident set size of a live process (VmHWM, Linux /proc) in MB, NaN when unreadable."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except (OSError, IndexError, ValueError):
        pass
    return math.nan


def _die_with_parent() -> None:
    """Child side of Popen: get SIGTERM if the benchmark process dies (Linux only)."""
    try:
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


@functools.cache
def app_tree(interpreter: str = sys.executable) -> Path:
    """The tree whose `app` `interpreter` imports (its virtual environment's install, read
    from outside any tree): services run there, since on PostgreSQL the delivery process of
    code before 2026-12-07 is `python -m app.process.delivery`, which imports from its
    working directory first. Run with another tree's interpreter, or given another tree's
    `chronoq` (`start_service`'s `command`), the benchmark measures that tree's code, whole."""
    found = subprocess.run(
        [
            interpreter,
            "-c",
            "import app, pathlib; print(pathlib.Path(app.__file__).parent.parent)",
        ],
        cwd="/",
        capture_output=True,
        text=True,
        check=False,
    )
    return Path(found.stdout.strip()) if found.returncode == 0 and found.stdout.strip() else ROOT


def chronoq_command() -> list[str]:
    script = Path(sys.executable).with_name("chronoq")
    if script.exists():
        return [str(script)]
    return [sys.executable, "-m", "app.cli"]


def fmt(value: float | None, digits: int = 0) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "n/a"
    if digits == 0:
        return f"{value:,.0f}"
    return f"{value:,.{digits}f}"


# -- processes ----------------------------------------------------------------------------


class Processes:
    """Every subprocess this script starts; stopped by PID, never by name."""

    def __init__(self) -> None:
        self._live: list[subprocess.Popen[bytes]] = []

    def spawn(self, args: list[str], **kwargs: Any) -> subprocess.Popen[bytes]:
        kwargs.setdefault("stdin", subprocess.DEVNULL)
        kwargs.setdefault("cwd", app_tree())
        proc: subprocess.Popen[bytes] = subprocess.Popen(
            args, preexec_fn=_die_with_parent, start_new_session=True, **kwargs
        )
        self._live.append(proc)
        return proc

    async def stop(self, proc: subprocess.Popen[bytes], grace: float = 30.0) -> int | None:
        """SIGTERM the process we started, wait for it, SIGKILL it after `grace` seconds."""
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                await asyncio.to_thread(proc.wait, grace)
            except subprocess.TimeoutExpired:
                log(f"pid {proc.pid} ignored SIGTERM for {grace:g}s; sending SIGKILL")
                proc.kill()
                await asyncio.to_thread(proc.wait)
        if proc in self._live:
            self._live.remove(proc)
        return proc.returncode

    def kill_all(self) -> None:
        """Last-resort cleanup, synchronous so that it also works while unwinding."""
        for proc in list(self._live):
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
                try:
                    proc.wait(10)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
            self._live.remove(proc)


# -- the receiver -------------------------------------------------------------------------


class ReceiverClient:
    def __init__(self, procs: Processes, http: aiohttp.ClientSession) -> None:
        self._procs = procs
        self._http = http
        self.proc: subprocess.Popen[bytes] | None = None
        self.port = 0

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def start(self) -> None:
        self.proc = self._procs.spawn(
            [sys.executable, str(BENCH / "receiver.py"), "--port", "0"],
            stdout=subprocess.PIPE,
        )
        assert self.proc.stdout is not None
        line = await asyncio.wait_for(asyncio.to_thread(self.proc.stdout.readline), 30)
        if not line:
            raise RuntimeError("the receiver exited before reporting its port")
        self.port = int(json.loads(line)["port"])

    async def stop(self) -> None:
        if self.proc is not None:
            await self._procs.stop(self.proc, grace=10)

    async def reset(self) -> None:
        async with self._http.post(self.base + "/reset") as response:
            response.raise_for_status()

    async def stats(self) -> dict[str, int]:
        async with self._http.get(self.base + "/stats") as response:
            response.raise_for_status()
            return dict(await response.json())

    async def records(self) -> list[list[Any]]:
        async with self._http.get(self.base + "/records") as response:
            response.raise_for_status()
            return list((await response.json())["records"])


# -- databases ----------------------------------------------------------------------------


class Databases:
    """Fresh databases per workload; every one created here is dropped or deleted again."""

    def __init__(self, pg_admin_url: str, mysql_admin_url: str = DEFAULT_MYSQL_ADMIN_URL) -> None:
        self.pg_admin_url = pg_admin_url
        self.mysql_admin_url = mysql_admin_url
        self._serial = 0
        self._pg_created: list[str] = []
        self._mysql_created: list[str] = []
        self._sqlite_dirs: list[str] = []

    async def _pg_admin(self, sql: str) -> None:
        import asyncpg

        conn = await asyncpg.connect(self.pg_admin_url, timeout=10)
        try:
            await conn.execute(sql)
        finally:
            await conn.close()

    async def _mysql_admin(self, sql: str) -> list[Any]:
        """One statement on the MySQL admin connection, autocommitted; the rows it returns."""
        import sqlalchemy as sa
        from sqlalchemy.ext.asyncio import create_async_engine
        from sqlalchemy.pool import NullPool

        from app.store.engine.database import normalize_url

        engine = create_async_engine(
            normalize_url(self.mysql_admin_url),
            poolclass=NullPool,
            isolation_level="AUTOCOMMIT",
            connect_args={"connect_timeout": 10},
        )
        try:
            async with engine.connect() as conn:
                result = await conn.execute(sa.text(sql))
                return list(result.all()) if result.returns_rows else []
        finally:
            await engine.dispose()

    @staticmethod
    def _url_with_database(admin_url: str, name: str) -> str:
        parts = urlsplit(admin_url)
        return parts._replace(path="/" + name).geturl()

    async def fresh(self, dialect: str) -> tuple[str, str]:
        """(DATABASE_URL, handle for drop())."""
        self._serial += 1
        name = f"chronoq_bench_{os.getpid()}_{self._serial}"
        if dialect == "postgresql":
            await self._pg_admin(f'CREATE DATABASE "{name}"')
            self._pg_created.append(name)
            return self._url_with_database(self.pg_admin_url, name), name
        if dialect == "mysql":
            await self._mysql_admin(
                f"CREATE DATABASE `{name}` CHARACTER SET utf8mb4 COLLATE utf8mb4_bin"
            )
            self._mysql_created.append(name)
            return self._url_with_database(self.mysql_admin_url, name), name
        directory = tempfile.mkdtemp(prefix=f"{name}_")
        self._sqlite_dirs.append(directory)
        return f"sqlite:///{directory}/chronoq.db", directory

    async def drop(self, handle: str) -> None:
        if handle in self._pg_created:
            await self._pg_admin(f'DROP DATABASE IF EXISTS "{handle}" WITH (FORCE)')
            self._pg_created.remove(handle)
        elif handle in self._mysql_created:
            await self._mysql_admin(f"DROP DATABASE IF EXISTS `{handle}`")
            self._mysql_created.remove(handle)
        elif handle in self._sqlite_dirs:
            shutil.rmtree(handle, ignore_errors=True)
            self._sqlite_dirs.remove(handle)

    async def drop_all(self) -> None:
        for handle in [*self._pg_created, *self._mysql_created, *self._sqlite_dirs]:
            try:
                await self.drop(handle)
            except Exception as exc:
                log(f"could not drop {handle}: {exc}")

    async def occurrence_state(self, url: str) -> tuple[dict[str, int], set[str], float | None]:
        """Occurrence rows by status, the ids still pending, and the last `delivered_at`
        (epoch seconds; None when nothing was delivered), read after the service stopped
        (diagnostics: a received occurrence still pending was never settled).
        Read through the service's own table definitions, so that each dialect's column
        types (a UUID is CHAR(32) hex on MySQL) decode as the service wrote them."""
        import sqlalchemy as sa
        from sqlalchemy.ext.asyncio import create_async_engine
        from sqlalchemy.pool import NullPool

        from app.store.engine.database import normalize_url
        from app.store.schema.tables import occurrences

        counts_query = sa.select(occurrences.c.status, sa.func.count()).group_by(
            occurrences.c.status
        )
        pending_query = sa.select(occurrences.c.occurrence_id).where(
            occurrences.c.status == "pending"
        )
        last_query = sa.select(sa.func.max(occurrences.c.delivered_at))
        engine = create_async_engine(normalize_url(url), poolclass=NullPool)
        try:
            async with engine.connect() as conn:
                counts = {str(row[0]): int(row[1]) for row in await conn.execute(counts_query)}
                pending = {str(row[0]) for row in await conn.execute(pending_query)}
                last = (await conn.execute(last_query)).scalar()
        finally:
            await engine.dispose()
        return counts, pending, None if last is None else last.timestamp()

    async def server_version(self) -> str:
        import asyncpg

        conn = await asyncpg.connect(self.pg_admin_url, timeout=10)
        try:
            return str(await conn.fetchval("SHOW server_version"))
        finally:
            await conn.close()

    async def mysql_server_version(self) -> str:
        rows = await self._mysql_admin("SELECT VERSION()")
        return str(rows[0][0])


# -- the service --------------------------------------------------------------------------


@dataclass
class Service:
    proc: subprocess.Popen[bytes]
    port: int
    log_path: Path

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def log_text(self) -> str:
        try:
            return self.log_path.read_text(encoding="utf-8", errors="replace")
        except OSError:
            return ""


def service_env(database_url: str, extra: dict[str, str] | None = None) -> dict[str, str]:
    """The caller's environment minus every Chronoq setting: defaults except DATABASE_URL."""
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith("CHRONOQ_") and key not in {"DATABASE_URL", "AMQP_URL", "PORT"}
    }
    env["DATABASE_URL"] = database_url
    env["NO_PROXY"] = "127.0.0.1,localhost"
    env.update(extra or {})
    return env


async def start_service(
    procs: Processes,
    http: aiohttp.ClientSession,
    database_url: str,
    log_dir: Path,
    tag: str,
    extra_env: dict[str, str] | None = None,
    command: list[str] | None = None,
    serve_args: list[str] | None = None,
) -> Service:
    port = free_port()
    log_path = log_dir / f"service-{tag}.log"
    serve = [*(command or chronoq_command()), "serve", "--host", "127.0.0.1", "--port", str(port)]
    # Another installation's `chronoq` runs in its own tree (`app_tree`).
    tree = app_tree(str(Path(command[0]).with_name("python"))) if command else app_tree()
    with log_path.open("wb") as sink:
        proc = procs.spawn(
            [*serve, *(serve_args or [])],
            env=service_env(database_url, extra_env),
            stdout=sink,
            stderr=subprocess.STDOUT,
            cwd=tree,
        )
    service = Service(proc, port, log_path)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(
                f"the service exited with {proc.returncode} before it was healthy:\n"
                + tail(service.log_text())
            )
        try:
            # Ready: migrated, and its delivery loop running (in its delivery process, where
            # it has one), so that what a workload measures is the loop, not its start.
            async with http.get(service.base + "/readyz") as response:
                if response.status == 200:
                    return service
        except aiohttp.ClientError:
            pass
        await asyncio.sleep(0.1)
    raise RuntimeError("the service was not healthy within 60 s:\n" + tail(service.log_text()))


def tail(text: str, lines: int = 30) -> str:
    return "\n".join(text.rstrip().splitlines()[-lines:])


# Warnings every run without `--api-key` logs by design: not anomalies of the run.
EXPECTED_WARNINGS = ("no API keys are set (CHRONOQ_API_KEYS)",)


def log_problems(text: str) -> list[str]:
    """Lines worth reporting from a service log: errors, warnings, tracebacks."""
    flagged = []
    for line in text.splitlines():
        if any(expected in line for expected in EXPECTED_WARNINGS):
            continue
        if any(word in line for word in (" ERROR ", " CRITICAL ", " WARNING ", "Traceback")) or (
            line.startswith(("ERROR:", "CRITICAL:", "WARNING:"))
        ):
            flagged.append(line.rstrip())
    return flagged


# -- workloads ----------------------------------------------------------------------------


def schedule_item(hook: str, at: str, n: int, workload: str) -> dict[str, Any]:
    return {
        "event_type": "bench",
        "payload": {"n": n, "workload": workload},
        "target": {"type": "webhook", "url": hook},
        "trigger": {"type": "once", "at": at},
    }


async def create_batches(
    http: aiohttp.ClientSession,
    base: str,
    items: list[dict[str, Any]],
    headers: dict[str, str] | None = None,
) -> list[str]:
    """POST /v1/schedules/batch, BATCH items at a time, one after the other; next occurrence
    ids in order. `headers`: each request's (a tenant's, say)."""
    ids: list[str] = []
    for start in range(0, len(items), BATCH):
        body = {"items": items[start : start + BATCH]}
        post = http.post(base + "/v1/schedules/batch", json=body, headers=headers)
        async with post as response:
            text = await response.text()
            if response.status != 201:
                raise RuntimeError(f"batch create answered {response.status}: {text[:500]}")
            for created in json.loads(text)["items"]:
                ids.append(str(created["next_occurrence_id"]))
    return ids


async def wait_for_arrivals(receiver: ReceiverClient, expected: int, deadline: float) -> bool:
    """Poll the receiver until `expected` distinct ids arrived or the wall-clock deadline."""
    while time.time() < deadline:
        if (await receiver.stats())["unique"] >= expected:
            return True
        await asyncio.sleep(0.1)
    return (await receiver.stats())["unique"] >= expected


def analyse(records: list[list[Any]], expected: set[str]) -> dict[str, Any]:
    counts: Counter[str] = Counter()
    first: dict[str, tuple[float, str]] = {}
    retried = 0
    for occurrence, at, scheduled_for, attempt in records:
        counts[occurrence] += 1
        if attempt not in ("1", ""):
            retried += 1
        if occurrence not in first or at < first[occurrence][0]:
            first[occurrence] = (at, scheduled_for)
    received = expected & first.keys()
    lags = sorted(first[o][0] - parse_instant(first[o][1]) for o in received)
    arrivals = [first[o][0] for o in received]
    return {
        "received": len(received),
        "lost": len(expected - received),
        "duplicates": sum(n - 1 for o, n in counts.items() if o in expected and n > 1),
        "unexpected": sum(n for o, n in counts.items() if o not in expected),
        "retried_arrivals": retried,
        "lag_p50_ms": percentile(lags, 50) * 1000,
        "lag_p99_ms": percentile(lags, 99) * 1000,
        "lag_max_ms": (lags[-1] * 1000) if lags else math.nan,
        "first_arrival": min(arrivals) if arrivals else math.nan,
        "last_arrival": max(arrivals) if arrivals else math.nan,
    }


@dataclass
class Context:
    args: argparse.Namespace
    procs: Processes
    http: aiohttp.ClientSession
    receiver: ReceiverClient
    databases: Databases
    log_dir: Path
    problems: list[str] = field(default_factory=list)


def one_database_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of a script that measures W1 on one PostgreSQL database beside something
    else (bench/retention.py, bench/history_drop.py)."""
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--count", type=int, default=10_000, help="W1 one-shots (10,000)")
    parser.add_argument("--timeout", type=float, default=120.0)
    parser.add_argument("--settle", type=float, default=1.0)
    parser.add_argument("--json", type=Path, default=None)
    parser.add_argument(
        "--pg-admin-url", default=os.environ.get("CHRONOQ_BENCH_PG_URL", DEFAULT_PG_ADMIN_URL)
    )


def refuse_remote(parser: argparse.ArgumentParser, url: str) -> None:
    if urlsplit(url).hostname not in LOCAL_HOSTS:
        parser.error("the benchmark only talks to a PostgreSQL on 127.0.0.1")


@asynccontextmanager
async def one_database(
    args: argparse.Namespace, problems: list[str], name: str
) -> AsyncIterator[tuple[Context, str]]:
    """The processes, an HTTP session, a receiver and one fresh PostgreSQL database for a
    script measuring on that database throughout; all stopped and dropped after."""
    procs = Processes()
    databases = Databases(args.pg_admin_url)
    log_dir = Path(tempfile.mkdtemp(prefix=f"chronoq_{name}_logs_"))
    log(f"service logs in {log_dir}")
    try:
        timeout = aiohttp.ClientTimeout(total=120)
        async with aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=16), trust_env=False, timeout=timeout
        ) as http:
            receiver = ReceiverClient(procs, http)
            await receiver.start()
            try:
                database_url, _ = await databases.fresh("postgresql")
                yield (
                    Context(args, procs, http, receiver, databases, log_dir, problems),
                    (database_url),
                )
            finally:
                await receiver.stop()
    finally:
        procs.kill_all()
        await databases.drop_all()


async def run_workload(ctx: Context, workload: str, dialect: str, run: int) -> dict[str, Any]:
    """One workload against a fresh database and a fresh service."""
    args = ctx.args
    tag = f"{dialect}-{workload}-run{run}"
    database_url, handle = await ctx.databases.fresh(dialect)
    result: dict[str, Any] = {"workload": workload, "dialect": dialect, "run": run}
    try:
        keys = {"CHRONOQ_API_KEYS": f"bench:{BENCH_KEY}"} if ctx.args.api_key else {}
        keys.update(item.split("=", 1) for item in args.env)
        service = await start_service(
            ctx.procs,
            ctx.http,
            database_url,
            ctx.log_dir,
            tag,
            extra_env=keys,
            serve_args=["--processes", str(args.processes)] if args.processes > 1 else [],
        )
        try:
            await ctx.receiver.reset()
            hook = ctx.receiver.base + "/hook"
            if workload == "W1":
                expected, due, last_due = await _w1(ctx, service, hook, result)
            else:
                expected, due, last_due = await _w2(ctx, service, hook, result)
            # CPU use of the service and the receiver from the due instant to the last arrival.
            await asyncio.sleep(max(0.0, due - time.time()))
            assert ctx.receiver.proc is not None
            # The service's CPU is its whole process tree's (with --processes, the replicas).
            # The database's is every PostgreSQL process's (the benchmark is all it serves),
            # and the machine's is every core's: what is left over for the service.
            pids = {
                "service": process_tree(service.proc.pid),
                "receiver": [ctx.receiver.proc.pid],
                "postgres": postgres_pids() if dialect == "postgresql" else [],
            }
            cpu_before = {name: sum(map(cpu_seconds, tree)) for name, tree in pids.items()}
            busy_before, total_before = machine_busy_seconds()
            wall_before = time.time()
            complete = await wait_for_arrivals(ctx.receiver, len(expected), last_due + args.timeout)
            wall = time.time() - wall_before
            for name, tree in pids.items():
                used = sum(map(cpu_seconds, tree)) - cpu_before[name]
                result[f"{name}_cpu_pct"] = 100 * used / wall if wall > 0 and tree else math.nan
            busy_after, total_after = machine_busy_seconds()
            cores = os.cpu_count() or 1
            result["machine_busy_pct"] = (
                100 * cores * (busy_after - busy_before) / (total_after - total_before)
                if total_after > total_before
                else math.nan
            )
            result["complete"] = complete
            # A moment for any stray duplicate, then a graceful stop; records are read after
            # the service exited so that everything it sent is counted.
            await asyncio.sleep(args.settle)
            # One replica's peak: the largest process of the tree (the parent of a
            # --processes service only supervises; each child is a replica).
            result["service_rss_mb"] = max(map(peak_rss_mb, process_tree(service.proc.pid)))
        finally:
            result["exit_code"] = await ctx.procs.stop(service.proc)
        records = await ctx.receiver.records()
        result.update(analyse(records, expected))
        arrived = {record[0] for record in records}
        received = result["received"]
        span = result["last_arrival"] - due
        result["deliver_seconds"] = span
        result["deliveries_per_s"] = received / span if received and span > 0 else math.nan
        try:
            result["db_status"], pending, last_recorded = await ctx.databases.occurrence_state(
                database_url
            )
            result["unsettled"] = len(pending & arrived & expected)
            # What the store has recorded, not what the receiver saw: a loop that sends
            # ahead of its settle writes shows a higher rate at the receiver than this.
            recorded = result["db_status"].get("delivered", 0)
            record_span = (last_recorded - due) if last_recorded is not None else math.nan
            result["recorded_per_s"] = (
                recorded / record_span if recorded and record_span > 0 else math.nan
            )
        except Exception as exc:
            result["db_status"] = {"error": f"{type(exc).__name__}: {exc}"}
            result["unsettled"] = math.nan
            result["recorded_per_s"] = math.nan
        flagged = log_problems(service.log_text())
        result["log_problems"] = len(flagged)
        if flagged:
            ctx.problems.append(f"{tag}: {len(flagged)} flagged log lines, first ones:")
            ctx.problems.extend("    " + line for line in flagged[:8])
        if result["exit_code"] not in GRACEFUL_EXITS:
            ctx.problems.append(f"{tag}: service exit code {result['exit_code']}")
        if result["unsettled"]:
            ctx.problems.append(
                f"{tag}: {result['unsettled']} occurrences were received by the webhook but "
                f"are still pending in the database after the service stopped "
                f"(db_status={result['db_status']}); each is redelivered when its lease runs out"
            )
        if result["lost"] or result["duplicates"] or result["unexpected"]:
            ctx.problems.append(
                f"{tag}: lost={result['lost']} duplicates={result['duplicates']} "
                f"unexpected={result['unexpected']} db_status={result['db_status']}"
            )
            ctx.problems.append("    service log tail:")
            ctx.problems.extend("    " + line for line in tail(service.log_text(), 15).splitlines())
    finally:
        try:
            await ctx.databases.drop(handle)
        except Exception as exc:
            log(f"could not drop {handle}: {exc}")
    return result


async def _beside(ctx: Context, service: Service, hook: str, tenant: dict[str, str]) -> None:
    """`--beside-future-keys` one-shots due an hour later, each on a flow key of its own:
    work due later, which W1's claims must not pay for."""
    count = ctx.args.beside_future_keys
    later = rfc3339(time.time() + 3600)
    items = [
        schedule_item(hook, later, n, "future") | {"flow_key": f"future-{n:07d}"}
        for n in range(count)
    ]
    await create_batches(ctx.http, service.base, items, tenant or None)


async def _w1(
    ctx: Context, service: Service, hook: str, result: dict[str, Any]
) -> tuple[set[str], float, float]:
    count = ctx.args.w1_count
    tenant: dict[str, str] = {}
    if ctx.args.tenant:
        async with ctx.http.put(f"{service.base}/v1/tenants/{ctx.args.tenant}", json={}) as made:
            if made.status not in (200, 201):
                raise RuntimeError(f"PUT /v1/tenants/{ctx.args.tenant}: {made.status}")
        tenant = {"Chronoq-Tenant": ctx.args.tenant}
    if ctx.args.beside_future_keys:
        await _beside(ctx, service, hook, tenant)
    lead = ctx.args.lead if ctx.args.lead is not None else 2.0 + count / 1000
    due = round(time.time() + lead, 3)
    at = rfc3339(due)
    items = [schedule_item(hook, at, n, "W1") for n in range(count)]
    started = time.time()
    ids = await create_batches(ctx.http, service.base, items, tenant or None)
    finished = time.time()
    result["create_per_s"] = count / (finished - started)
    result["created_before_due_s"] = due - finished
    if finished > due:
        ctx.problems.append(
            f"{result['dialect']} W1 run {result['run']}: creation finished "
            f"{finished - due:.2f}s after the due instant; raise --lead"
        )
    return set(ids), due, due


async def _w2(
    ctx: Context, service: Service, hook: str, result: dict[str, Any]
) -> tuple[set[str], float, float]:
    first = round(time.time() + ctx.args.w2_lead, 3)
    items = [schedule_item(hook, rfc3339(first + n * W2_SPACING), n, "W2") for n in range(W2_COUNT)]
    started = time.time()
    ids = await create_batches(ctx.http, service.base, items)
    finished = time.time()
    result["create_per_s"] = W2_COUNT / (finished - started)
    result["created_before_due_s"] = first - finished
    if finished > first:
        ctx.problems.append(
            f"{result['dialect']} W2 run {result['run']}: creation finished "
            f"{finished - first:.2f}s after the first due instant; raise --w2-lead"
        )
    return set(ids), first, first + (W2_COUNT - 1) * W2_SPACING


async def measure_ceiling(ctx: Context, client: str) -> dict[str, Any]:
    args = [
        sys.executable,
        str(BENCH / "ceiling.py"),
        "--client",
        client,
        "--url",
        ctx.receiver.base + "/sink",
        "--concurrency",
        str(CONCURRENCY),
        "--duration",
        str(ctx.args.ceiling_seconds),
    ]
    proc = ctx.procs.spawn(args, stdout=subprocess.PIPE)
    try:
        out, _ = await asyncio.to_thread(proc.communicate, None, ctx.args.ceiling_seconds + 60)
    finally:
        await ctx.procs.stop(proc, grace=5)
    if proc.returncode != 0:
        raise RuntimeError(f"ceiling client {client} exited with {proc.returncode}")
    return dict(json.loads(out.decode().strip().splitlines()[-1]))


# -- reporting ----------------------------------------------------------------------------


METRICS = [
    ("W1", "create_per_s", "W1 create rate (schedules/s)", 0),
    ("W1", "deliveries_per_s", "W1 deliveries/s (due instant to last delivery)", 0),
    ("W1", "recorded_per_s", "W1 recorded/s (due instant to last delivered_at in the DB)", 0),
    ("W1", "lag_p50_ms", "W1 lag p50 (ms)", 0),
    ("W1", "lag_p99_ms", "W1 lag p99 (ms)", 0),
    ("W1", "duplicates", "W1 duplicates (extra arrivals)", 0),
    ("W1", "lost", "W1 lost", 0),
    ("W1", "unsettled", "W1 received but still pending in the DB", 0),
    ("W1", "service_cpu_pct", "W1 service CPU while delivering (% of one core)", 0),
    ("W1", "receiver_cpu_pct", "W1 receiver CPU while delivering (% of one core)", 0),
    ("W1", "postgres_cpu_pct", "W1 PostgreSQL CPU while delivering (% of one core)", 0),
    ("W1", "machine_busy_pct", "W1 machine busy while delivering (% of one core, all cores)", 0),
    ("W1", "service_rss_mb", "W1 service peak RSS (MB)", 0),
    ("W2", "lag_p50_ms", "W2 lag p50 (ms)", 1),
    ("W2", "lag_p99_ms", "W2 lag p99 (ms)", 1),
    ("W2", "duplicates", "W2 duplicates", 0),
    ("W2", "lost", "W2 lost", 0),
    ("W2", "unsettled", "W2 received but still pending in the DB", 0),
]


def summarize(results: list[dict[str, Any]], dialect: str) -> dict[str, dict[str, Any]]:
    """Per workload and metric: the median and every run's value."""
    summary: dict[str, dict[str, Any]] = {}
    for workload in ("W1", "W2"):
        runs = [r for r in results if r["dialect"] == dialect and r["workload"] == workload]
        summary[workload] = {
            key: {"median": median([r.get(key, math.nan) for r in runs]), "runs": runs}
            for key in {m[1] for m in METRICS if m[0] == workload}
        }
        summary[workload]["_runs"] = runs
    return summary


def bars(summary: dict[str, dict[str, Any]]) -> list[tuple[str, str, bool]]:
    w1_runs = summary["W1"]["_runs"]
    w2_runs = summary["W2"]["_runs"]
    rate = summary["W1"]["deliveries_per_s"]["median"]
    lost = sum(r.get("lost", 0) for r in w1_runs)
    dups = sum(r.get("duplicates", 0) for r in w1_runs)
    # A received occurrence left pending is redelivered when its lease expires: a duplicate
    # that a short observation window would otherwise hide.
    unsettled = sum(r.get("unsettled", 0) or 0 for r in w1_runs)
    p99 = summary["W2"]["lag_p99_ms"]["median"]
    w2_lost = sum(r.get("lost", 0) for r in w2_runs)
    return [
        (
            f"W1 >= {BAR_W1_RATE:,.0f} deliveries/s (median)",
            f"{fmt(rate)}/s",
            bool(rate >= BAR_W1_RATE),
        ),
        ("W1 0 lost (every run)", str(lost), lost == 0 and bool(w1_runs)),
        (
            "W1 0 duplicates (every run; received-but-unsettled occurrences count, "
            "as each is redelivered when its lease expires)",
            f"{dups} extra arrivals, {unsettled} unsettled",
            dups == 0 and unsettled == 0 and bool(w1_runs),
        ),
        (
            f"W2 p99 < {BAR_W2_P99_MS:.0f} ms (median), 0 lost",
            f"{fmt(p99, 1)} ms, {w2_lost} lost",
            bool(p99 < BAR_W2_P99_MS) and w2_lost == 0,
        ),
    ]


def same_run_ratios(
    summaries: dict[str, dict[str, dict[str, Any]]], dialect: str = "mysql"
) -> list[tuple[int, float]]:
    """(run, `dialect` W1 deliveries/s / PostgreSQL W1 deliveries/s of the same run)."""
    if dialect not in summaries or "postgresql" not in summaries:
        return []
    base = {
        r["run"]: r.get("deliveries_per_s", math.nan)
        for r in summaries["postgresql"]["W1"]["_runs"]
    }
    ratios = []
    for r in summaries[dialect]["W1"]["_runs"]:
        pg = base.get(r["run"], math.nan)
        rate = r.get("deliveries_per_s", math.nan)
        ratios.append((r["run"], rate / pg if pg and not math.isnan(pg) else math.nan))
    return ratios


def mysql_bars(summaries: dict[str, dict[str, dict[str, Any]]]) -> list[tuple[str, str, bool]]:
    """MySQL against PostgreSQL in the same run: W1 at least half the rate, nothing lost,
    nothing delivered twice. Empty unless both were measured."""
    ratios = same_run_ratios(summaries)
    if not ratios:
        return []
    ratio = median([value for _, value in ratios])
    runs = summaries["mysql"]["W1"]["_runs"]
    lost = sum(r.get("lost", 0) for r in runs)
    dups = sum(r.get("duplicates", 0) for r in runs)
    unsettled = sum(r.get("unsettled", 0) or 0 for r in runs)
    return [
        (
            f"mysql W1 / postgresql W1 in the same run >= {BAR_MYSQL_W1_RATIO:g} (median)",
            fmt(ratio, 2),
            bool(ratio >= BAR_MYSQL_W1_RATIO),
        ),
        ("mysql W1 0 lost (every run)", str(lost), lost == 0 and bool(runs)),
        (
            "mysql W1 0 duplicates (every run; received-but-unsettled occurrences count)",
            f"{dups} extra arrivals, {unsettled} unsettled",
            dups == 0 and unsettled == 0 and bool(runs),
        ),
    ]


def ratio_line(summaries: dict[str, dict[str, dict[str, Any]]]) -> str:
    """mysql W1 / postgresql W1, median of the same-run ratios, each run's in brackets."""
    ratios = same_run_ratios(summaries)
    per_run = ", ".join(f"run {run}: {fmt(value, 2)}" for run, value in ratios)
    return (
        f"mysql W1 / postgresql W1 in the same run: {fmt(median([v for _, v in ratios]), 2)} "
        f"(median; {per_run})"
    )


def dialect_title(dialect: str, versions: dict[str, str]) -> str:
    if dialect == "mysql":
        return "MariaDB" if "mariadb" in versions.get("mysql", "").lower() else "MySQL"
    return TITLES[dialect]


def dialect_table(summary: dict[str, dict[str, Any]], ceiling_aiohttp: float) -> list[str]:
    runs_n = len(summary["W1"]["_runs"])
    header = "| metric | median | " + " | ".join(f"run {i + 1}" for i in range(runs_n)) + " |"
    lines = [header, "|" + " --- |" * (2 + runs_n)]
    for workload, key, label, digits in METRICS:
        entry = summary[workload][key]
        values = [fmt(r.get(key, math.nan), digits) for r in entry["runs"]]
        lines.append(f"| {label} | {fmt(entry['median'], digits)} | " + " | ".join(values) + " |")
    rate = summary["W1"]["deliveries_per_s"]["median"]
    ratio = rate / ceiling_aiohttp if ceiling_aiohttp else math.nan
    lines.append(
        f"| W1 deliveries/s / bare aiohttp ceiling | {fmt(ratio, 2)} | "
        + " | ".join("" for _ in range(runs_n))
        + " |"
    )
    return lines


def print_results(
    dialect_summaries: dict[str, dict[str, dict[str, Any]]],
    ceilings: dict[str, list[dict[str, Any]]],
    problems: list[str],
    versions: dict[str, str],
) -> None:
    aio = median([c["rps"] for c in ceilings["aiohttp"]])
    hx = median([c["rps"] for c in ceilings["httpx"]])
    print()
    print("Ceilings (receiver alone, 64 concurrent requests, medians):")
    print(f"  bare aiohttp client loop : {fmt(aio)} req/s")
    print(f"  bare httpx client loop   : {fmt(hx)} req/s")
    for dialect, summary in dialect_summaries.items():
        print()
        version = f", {versions[dialect]}" if dialect in versions else ""
        print(f"{dialect}{version} (medians of {len(summary['W1']['_runs'])} runs)")
        for line in dialect_table(summary, aio):
            print("  " + line)
        for name, value, ok in bars(summary):
            print(f"  bar {'PASS' if ok else 'FAIL'}: {name}: {value}")
    if same_run_ratios(dialect_summaries):
        print()
        print(ratio_line(dialect_summaries))
        for name, value, ok in mysql_bars(dialect_summaries):
            print(f"  bar {'PASS' if ok else 'FAIL'}: {name}: {value}")
    if problems:
        print()
        print("Observed problems:")
        for line in problems:
            print("  " + line)


def code_digest() -> str:
    """A digest of the service's source as it is on disk (app/, alembic/), commit-agnostic."""
    digest = hashlib.sha1(usedforsecurity=False)
    tree = app_tree()
    for base in ("app", "alembic"):
        for path in sorted((tree / base).rglob("*")):
            if path.is_file() and "__pycache__" not in path.parts:
                digest.update(str(path.relative_to(tree)).encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()[:10]


def git_state() -> tuple[str, bool] | None:
    """The short commit of the tree under test (`app_tree`) and whether its app/ or alembic/
    differ from it; None without git."""

    def git(*args: str) -> str:
        return subprocess.run(
            ["git", *args], cwd=app_tree(), capture_output=True, text=True, check=True
        ).stdout

    try:
        commit = git("rev-parse", "--short", "HEAD").strip()
        dirty = git("status", "--porcelain", "--", "app", "alembic").strip()
    except (OSError, subprocess.CalledProcessError):
        return None
    return commit, bool(dirty)


def code_version() -> str:
    """The commit under test, whether app/ differs from it, and the source digest."""
    state = git_state()
    if state is None:
        return f"source digest {code_digest()}"
    commit, dirty = state
    change = "with uncommitted changes under app/" if dirty else "clean"
    return f"commit {commit} ({change}; source digest {code_digest()})"


def code_label() -> str:
    """The code under test as a table names it: the short commit, marked when app/ differs."""
    state = git_state()
    if state is None:
        return f"source digest {code_digest()}"
    commit, dirty = state
    return f"{commit} with uncommitted changes" if dirty else commit


def utc_stamp() -> str:
    return time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())


def cpu_model() -> str:
    cpu = platform.processor() or "unknown CPU"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return cpu


def software(versions: dict[str, str]) -> str:
    try:
        import uvloop  # noqa: F401

        loop = "uvloop (the service's uvicorn picks it too)"
    except ImportError:
        loop = "asyncio default loop"
    return (
        f"Python {platform.python_version()}, aiohttp {aiohttp.__version__}, {loop}; "
        f"PostgreSQL {versions.get('postgresql', 'n/a')}; "
        f"{dialect_title('mysql', versions)} {versions.get('mysql', 'n/a')}; "
        f"SQLite {sqlite3.sqlite_version}"
    )


def machine_note(args: argparse.Namespace, versions: dict[str, str]) -> list[str]:
    """The machine as one run found it, for that run's entry of the history."""
    load = os.getloadavg() if hasattr(os, "getloadavg") else (math.nan,) * 3
    return [
        f"- {os.cpu_count()} cores ({cpu_model()}), shared with the database, the receiver and "
        "the load generator; noisy, so every figure is the median of "
        f"{args.runs} run{'s' if args.runs != 1 else ''}.",
        f"- Load average when the benchmark started: {load[0]:.2f} / {load[1]:.2f} / "
        f"{load[2]:.2f}.",
        f"- {software(versions)}.",
        f"- Measured {args.stamp} on {args.code_version}.",
    ]


def machine_section(args: argparse.Namespace, versions: dict[str, str]) -> str:
    """The `machine` section of docs/benchmarks.md."""
    return "\n".join(
        [
            "## Machine",
            "",
            f"- {os.cpu_count()} cores ({cpu_model()}), shared with the database, the receiver "
            "and the load generator; noisy, so a figure is a median over runs, each run's value "
            "in brackets where a table has room.",
            f"- {software(versions)} (read by the full run of {args.stamp} on {args.code_label}).",
            "- Figures of different sessions differ by more than most changes do: two commits "
            "are compared by alternating runs of both in one session, as in the "
            f"[history]({HISTORY.name}).",
        ]
    )


def method_lines(args: argparse.Namespace) -> list[str]:
    """How W1 and W2 are measured, and their bars: the head of the `w1-w2` section."""
    return [
        "## W1 and W2: how they are measured",
        "",
        "Every workload of every run starts from nothing: a fresh database (PostgreSQL and "
        "MySQL/MariaDB: `chronoq_bench_<pid>_<n>`, created through the admin connection and "
        "dropped afterwards, the service given e.g. `mysql://root@127.0.0.1:3306/<name>`; "
        "SQLite: a new temporary file) and a "
        "fresh `chronoq serve` process with default settings except `DATABASE_URL` (it migrates "
        "on start; the benchmark waits for `GET /healthz`). Defaults that matter here: "
        "`CHRONOQ_BATCH_SIZE=100`, `CHRONOQ_CONCURRENCY=64`, `CHRONOQ_POLL_INTERVAL=0.1`, "
        "`CHRONOQ_MIN_CYCLE_DELAY=0.005`.",
        "",
        "Deliveries go to `bench/receiver.py`, an aiohttp server in its own process on "
        "127.0.0.1 that records, per request, `X-Occurrence-Id`, `X-Scheduled-For`, `X-Attempt` "
        "and its arrival time (`time.time()` when the handler starts) and answers 200. Everything "
        "runs on one machine, so the arrival time and the RFC 3339 `X-Scheduled-For` are on the "
        "same clock. The records are fetched after the service has been stopped with SIGTERM, so "
        "every request it sent is counted.",
        "",
        f"- **W1, burst**: {args.w1_count:,} one-shot webhook schedules "
        '(`{"type": "once", "at": T}`) all due at the same instant T, created through '
        f"`POST /v1/schedules/batch` in batches of {BATCH:,}, one batch after the other. T is "
        "chosen a few seconds ahead so that creation finishes before it (the script reports it "
        "when it does not). *Create rate* = schedules / creation wall time. *Deliveries/s* = "
        "distinct occurrences received / (last first-arrival - T). *Lag* = first arrival - "
        "`X-Scheduled-For`, nearest-rank p50/p99. *Duplicates* = arrivals beyond the first per "
        f"expected occurrence id. *Lost* = expected ids not received within {args.timeout:g} s "
        "of T.",
        f"- **W2, paced**: {W2_COUNT} one-shot schedules due {W2_SPACING * 1000:.0f} ms apart "
        f"starting {args.w2_lead:g} s after creation, created in one batch; lag p50/p99 as in W1.",
        f"- **Settlement check**: the service is kept up {args.settle:g} s after the last "
        "expected arrival, then stopped with SIGTERM (graceful drain), and the database is read: "
        "*received but still pending in the DB* counts occurrences the receiver got whose row "
        "was never marked delivered. Each one is redelivered (a duplicate) once its lease "
        "(`CHRONOQ_LEASE`, 30 s) runs out, which this window is too short to observe; run with "
        "`--settle 40` to see those redeliveries counted as duplicates.",
        f"- **Ceilings**: `bench/ceiling.py` in its own process drives the same receiver with "
        f"{CONCURRENCY} concurrent requests (the service's default concurrency) for "
        f"{args.ceiling_seconds:g} s after a 0.5 s warm-up, each request shaped like a delivery "
        "(small JSON body, the `X-*` headers): once with a bare `aiohttp.ClientSession` loop, "
        "once with a bare `httpx.AsyncClient` loop. Measured in every run, reported as medians. "
        "The aiohttp figure is what one process can push through this receiver on this machine "
        "with no scheduling, no database and no bookkeeping; Chronoq's W1 rate divided by it is "
        "the *ratio*. The httpx figure is why the service's webhook sink uses aiohttp.",
        "",
        f"Bars: on PostgreSQL with default settings, W1 at least {BAR_W1_RATE:,.0f} "
        f"deliveries/s with 0 lost and 0 duplicates, and W2 p99 lag under {BAR_W2_P99_MS:.0f} "
        "ms. On MySQL/MariaDB with default settings: W1 at least "
        f"{BAR_MYSQL_W1_RATIO:g} of PostgreSQL's W1 rate in the same run (each run measures "
        "PostgreSQL, then MySQL/MariaDB, then SQLite, so the two rates compared were taken "
        "minutes apart at most; the bar is on the median of the per-run ratios), with 0 lost "
        "and 0 duplicates.",
        "",
        "A full run's every figure (create rate, CPU, RSS, what was received but still pending, "
        "the ratio to the ceiling) is in its entry of the history; the tables below hold the "
        "latest of each store, each row saying when it was measured (linked to its entry) and "
        "on which code. A row from a comparison of two commits gives the newer side, and `-` "
        "where that comparison did not report the figure.",
    ]


W1_HEAD = (
    "| store | measured | code | deliveries/s | lag p50 (ms) | lag p99 (ms) | lost, duplicates "
    "| bar |"
)
W2_HEAD = "| store | measured | code | lag p50 (ms) | lag p99 (ms) | lost, duplicates | bar |"
# A table row's store, as its first cell names it.
STORES = {"postgresql": "postgresql", "mysql": "mysql", "mariadb": "mysql", "sqlite": "sqlite"}


def with_runs(summary: dict[str, Any], key: str, digits: int) -> str:
    """`median (run 1, run 2, ...)` of one metric of one workload."""
    each = ", ".join(fmt(r.get(key, math.nan), digits) for r in summary["_runs"])
    return f"{fmt(summary[key]['median'], digits)} ({each})"


def counts(runs: list[dict[str, Any]]) -> str:
    lost = sum(r.get("lost", 0) for r in runs)
    dups = sum(r.get("duplicates", 0) for r in runs)
    unsettled = sum(r.get("unsettled", 0) or 0 for r in runs)
    return f"{lost}, {dups}" + (f" ({unsettled} received but still pending)" if unsettled else "")


def verdict(checks: list[tuple[str, str, bool]], bar: str) -> str:
    return f"{'met' if all(ok for _, _, ok in checks) else '**not met**'}: {bar}"


def w1_bar(dialect: str, summaries: dict[str, dict[str, dict[str, Any]]]) -> str:
    if dialect == "postgresql":
        checks = bars(summaries[dialect])[:3]
        return verdict(checks, f"at least {BAR_W1_RATE:,.0f}/s, 0 lost, 0 duplicates")
    if dialect == "mysql":
        checks = mysql_bars(summaries)
        if not checks:
            return "not measured: PostgreSQL was not in the same run"
        return verdict(
            checks,
            f"at least {BAR_MYSQL_W1_RATIO:g} of PostgreSQL in the same run, 0 lost, "
            f"0 duplicates (measured {checks[0][1]})",
        )
    return "none"


def w2_bar(dialect: str, summaries: dict[str, dict[str, dict[str, Any]]]) -> str:
    if dialect == "postgresql":
        return verdict(bars(summaries[dialect])[3:], f"p99 under {BAR_W2_P99_MS:.0f} ms, 0 lost")
    return "none"


def subsection(text: str, heading: str) -> str:
    """The part of `text` from its `## heading` line up to the next `## ` heading."""
    found = re.search(rf"^## {re.escape(heading)}\n.*?(?=^## |\Z)", text, re.MULTILINE | re.DOTALL)
    return found.group(0) if found else ""


def store_rows(text: str, heading: str) -> dict[str, str]:
    """The rows of the table under `## heading` in `text`, by the store they are of."""
    rows = {}
    for line in subsection(text, heading).splitlines():
        if line.startswith("| "):
            store = STORES.get(line.split("|")[1].strip().lower())
            if store is not None:
                rows[store] = line
    return rows


def w1_w2_section(
    args: argparse.Namespace,
    summaries: dict[str, dict[str, dict[str, Any]]],
    ceilings: dict[str, list[dict[str, Any]]],
    problems: list[str],
    versions: dict[str, str],
    entry: str,
    before: str,
) -> str:
    """The `w1-w2` section of docs/benchmarks.md: how W1 and W2 are measured, then one table
    each with a row per store, and the ceilings. This run's stores get new rows; the rows of
    stores it did not measure are kept from `before`, the section as it was."""
    link = f"{HISTORY.name}#{anchor(entry)}"
    measured = f"[{args.stamp}]({link})"
    lines = method_lines(args)
    if args.preliminary:
        lines += [
            "",
            f"> **Preliminary figures.** The rows measured {args.stamp} were measured with "
            f"`--runs {args.runs}` while other work was running on the same "
            f"{os.cpu_count()}-core machine. They show the shape of the results, not the "
            "numbers to quote.",
        ]
    if problems:
        lines += ["", f"The run of {args.stamp} observed anomalies: see [its entry]({link})."]
    tables = [
        ("W1", "W1, burst", W1_HEAD, w1_bar),
        ("W2", "W2, paced", W2_HEAD, w2_bar),
    ]
    for workload, heading, head, bar in tables:
        rows = store_rows(before, heading)
        if workload in args.workloads:
            for dialect, summary in summaries.items():
                runs = summary[workload]["_runs"]
                cells = [dialect_title(dialect, versions), measured, args.code_label]
                if workload == "W1":
                    cells.append(with_runs(summary["W1"], "deliveries_per_s", 0))
                digits = 0 if workload == "W1" else 1
                cells += [
                    with_runs(summary[workload], "lag_p50_ms", digits),
                    with_runs(summary[workload], "lag_p99_ms", digits),
                    counts(runs),
                    bar(dialect, summaries),
                ]
                rows[dialect] = "| " + " | ".join(cells) + " |"
        lines += ["", f"## {heading}", "", head, "|" + " --- |" * (head.count("|") - 1)]
        lines += [rows[dialect] for dialect in DIALECTS if dialect in rows]
    if ceilings["aiohttp"]:
        aio = median([c["rps"] for c in ceilings["aiohttp"]])
        hx = median([c["rps"] for c in ceilings["httpx"]])
        ratios = ", ".join(
            f"{dialect_title(dialect, versions)} "
            f"{fmt(s['W1']['deliveries_per_s']['median'] / aio if aio else math.nan, 2)}"
            for dialect, s in summaries.items()
        )
        lines += [
            "",
            "## Client ceilings",
            "",
            f"Measured {measured}, code {args.code_label}, {len(ceilings['aiohttp'])} "
            f"run{'s' if len(ceilings['aiohttp']) != 1 else ''}.",
            "",
            f"| client loop ({CONCURRENCY} concurrent) | requests/s, median (each run) |",
            "| --- | --- |",
        ]
        for client, name in (("aiohttp", "bare aiohttp"), ("httpx", "bare httpx")):
            each = ", ".join(fmt(c["rps"]) for c in ceilings[client])
            value = median([c["rps"] for c in ceilings[client]])
            lines.append(f"| {name} | {fmt(value)} ({each}) |")
        lines += [
            "",
            f"httpx / aiohttp: {fmt(hx / aio if aio else math.nan, 2)}. W1 deliveries/s / bare "
            f"aiohttp ceiling in the same run: {ratios}.",
        ]
    elif kept := subsection(before, "Client ceilings").strip():
        lines += ["", kept]
    return "\n".join(lines)


def run_entry(
    args: argparse.Namespace,
    dialect_summaries: dict[str, dict[str, dict[str, Any]]],
    ceilings: dict[str, list[dict[str, Any]]],
    problems: list[str],
    versions: dict[str, str],
) -> str:
    """This run's entry of the history, every figure of it, under its `## ` heading."""
    stores = [dialect_title(d, versions) for d in dialect_summaries]
    named = ", ".join(stores[:-1]) + " and " + stores[-1] if len(stores) > 1 else stores[0]
    kind = "full run" if set(dialect_summaries) == set(DIALECTS) else "run"
    heading = (
        f"{' and '.join(args.workloads)} on {named}: {kind} on {args.code_label}, {args.stamp}"
    )
    out: list[str] = [f"## {heading}", ""]
    if args.preliminary:
        out += [
            "> **Preliminary figures.** These were measured with `--runs "
            f"{args.runs}` while other work was running on the same "
            f"{os.cpu_count()}-core machine. They show "
            "the shape of the results, not the numbers to quote.",
            "",
        ]
    out += [f"`{args.command}`.", "", "### Machine", "", *machine_note(args, versions), ""]
    if ceilings["aiohttp"]:
        aio = median([c["rps"] for c in ceilings["aiohttp"]])
        hx = median([c["rps"] for c in ceilings["httpx"]])
        out += ["### Ceilings", "", "| client loop (64 concurrent) | requests/s (median) | runs |"]
        out += ["| --- | --- | --- |"]
        for client, name in (("aiohttp", "bare aiohttp"), ("httpx", "bare httpx")):
            each = ", ".join(fmt(c["rps"]) for c in ceilings[client])
            out.append(f"| {name} | {fmt(median([c['rps'] for c in ceilings[client]]))} | {each} |")
        out += ["", f"httpx / aiohttp: {fmt(hx / aio if aio else math.nan, 2)}.", ""]
    else:
        aio = math.nan
    for dialect, summary in dialect_summaries.items():
        title = dialect_title(dialect, versions)
        out += [f"### {title}", "", *dialect_table(summary, aio), ""]
        checks = bars(summary) if dialect == "postgresql" else []
        if dialect == "mysql" and same_run_ratios(dialect_summaries):
            out += [ratio_line(dialect_summaries) + ".", ""]
            checks = mysql_bars(dialect_summaries)
        if checks:
            out += ["Bars:", ""]
            for name, value, ok in checks:
                out.append(f"- {'met' if ok else '**not met**'}: {name} (measured {value})")
            out.append("")
    out += ["### Ratios", "", "| dialect | W1 deliveries/s | bare aiohttp ceiling | ratio |"]
    out += ["| --- | --- | --- | --- |"]
    for dialect, summary in dialect_summaries.items():
        rate = summary["W1"]["deliveries_per_s"]["median"]
        out.append(
            f"| {dialect} | {fmt(rate)} | {fmt(aio)} | {fmt(rate / aio if aio else math.nan, 2)} |"
        )
    out.append("")
    if problems:
        out += ["### Anomalies observed in this run", "", "```text", *problems, "```", ""]
    return "\n".join(out)


def write_docs(
    args: argparse.Namespace,
    dialect_summaries: dict[str, dict[str, dict[str, Any]]],
    ceilings: dict[str, list[dict[str, Any]]],
    problems: list[str],
    versions: dict[str, str],
) -> None:
    """This run into docs/benchmarks.md (the `machine` section after a run over every store,
    the rows of the stores it measured in the `w1-w2` section) and, every figure of it, as the
    newest entry of docs/benchmark-history.md. The rest of both pages is left as it is."""
    args.stamp = utc_stamp()
    entry = run_entry(args, dialect_summaries, ceilings, problems, versions)
    heading = entry.partition("\n")[0].removeprefix("## ")
    text = DOCS.read_text(encoding="utf-8") if DOCS.exists() else PAGE_HEAD
    if set(dialect_summaries) == set(DIALECTS) or section_text(text, "machine") is None:
        text = replace_section(text, "machine", machine_section(args, versions))
    before = section_text(text, "w1-w2") or ""
    body = w1_w2_section(args, dialect_summaries, ceilings, problems, versions, heading, before)
    text = replace_section(text, "w1-w2", body)
    add_history_entry(entry)
    DOCS.parent.mkdir(parents=True, exist_ok=True)
    DOCS.write_text(text, encoding="utf-8")
    log(f"wrote {DOCS.relative_to(ROOT)} and the newest entry of {HISTORY.relative_to(ROOT)}")


# -- main ---------------------------------------------------------------------------------


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description="Chronoq benchmark: W1 burst, W2 paced, client ceilings."
    )
    parser.add_argument("--runs", type=int, default=3, help="runs per dialect (default 3)")
    parser.add_argument(
        "--dialect",
        choices=list(DIALECT_CHOICES),
        default="all",
        help="store: postgresql, mysql, sqlite, all (the default: the three), "
        "or both (postgresql and sqlite)",
    )
    parser.add_argument(
        "--workloads",
        type=lambda text: [w for w in ("W1", "W2") if w in text.upper().split(",")],
        default=["W1", "W2"],
        help="comma-separated subset of W1,W2 (both by default; a subset leaves the docs alone)",
    )
    parser.add_argument(
        "--processes",
        type=int,
        default=1,
        help="serve with --processes N (replica processes on one port; default 1)",
    )
    parser.add_argument("--w1-count", type=int, default=10_000, help="W1 schedules (10,000)")
    parser.add_argument(
        "--tenant",
        default=None,
        help="W1: made in this tenant (PUT first; the default tenant when not given)",
    )
    parser.add_argument(
        "--beside-future-keys",
        type=int,
        default=0,
        help="W1: first this many one-shots due an hour later, each on a flow key of its own",
    )
    parser.add_argument(
        "--quick",
        action="store_true",
        help="smoke run: 1 run, 1,000 W1 schedules, short ceilings, docs untouched",
    )
    parser.add_argument(
        "--timeout", type=float, default=120.0, help="seconds after the last due instant"
    )
    parser.add_argument("--lead", type=float, default=None, help="W1: seconds from now to T")
    parser.add_argument("--w2-lead", type=float, default=2.0, help="W2: seconds to first due")
    parser.add_argument("--ceiling-seconds", type=float, default=4.0)
    parser.add_argument(
        "--settle",
        type=float,
        default=1.0,
        help="seconds to keep the service up after the last expected arrival (default 1); "
        "above CHRONOQ_LEASE (30) redeliveries of unsettled occurrences show as duplicates",
    )
    parser.add_argument(
        "--pg-admin-url",
        default=os.environ.get("CHRONOQ_BENCH_PG_URL", DEFAULT_PG_ADMIN_URL),
        help="maintenance database used to create and drop the benchmark databases",
    )
    parser.add_argument(
        "--mysql-admin-url",
        default=os.environ.get("CHRONOQ_BENCH_MYSQL_URL", DEFAULT_MYSQL_ADMIN_URL),
        help="MySQL/MariaDB connection used to create and drop the benchmark databases",
    )
    parser.add_argument("--preliminary", action="store_true", help="label the docs preliminary")
    parser.add_argument(
        "--docs", action=argparse.BooleanOptionalAction, default=None, help="write the docs page"
    )
    parser.add_argument("--json", type=Path, default=None, help="also dump raw results here")
    parser.add_argument(
        "--api-key",
        action="store_true",
        help="run the service with CHRONOQ_API_KEYS set and authenticate every request",
    )
    parser.add_argument(
        "--strict", action="store_true", help="exit 1 when a PostgreSQL bar is not met"
    )
    parser.add_argument(
        "--env", action="append", default=[], help="NAME=VALUE for the service (repeatable)"
    )
    args = parser.parse_args(argv)
    if args.quick:
        args.runs = 1
        if args.w1_count == 10_000:
            args.w1_count = 1_000
        args.ceiling_seconds = min(args.ceiling_seconds, 1.5)
        args.timeout = min(args.timeout, 60.0)
    if not args.workloads:
        parser.error("--workloads names none of W1, W2")
    if args.docs is None:
        args.docs = (
            not args.quick
            and args.workloads == ["W1", "W2"]
            and args.tenant is None
            and not args.beside_future_keys
        )
    args.code_version = code_version()
    args.code_label = code_label()
    args.command = shlex.join(["bench/run.py", *(sys.argv[1:] if argv is None else argv)])
    args.code_digest = code_digest()
    if args.runs < 1 or args.w1_count < 1:
        parser.error("--runs and --w1-count must be at least 1")
    args.dialects = DIALECT_CHOICES[args.dialect]
    for dialect, url in (("postgresql", args.pg_admin_url), ("mysql", args.mysql_admin_url)):
        if dialect in args.dialects and urlsplit(url).hostname not in LOCAL_HOSTS:
            parser.error(f"the benchmark only talks to a {TITLES[dialect]} on 127.0.0.1")
    return args


async def main_async(args: argparse.Namespace) -> int:
    dialects: list[str] = args.dialects
    procs = Processes()
    databases = Databases(args.pg_admin_url, args.mysql_admin_url)
    log_dir = Path(tempfile.mkdtemp(prefix="chronoq_bench_logs_"))
    results: list[dict[str, Any]] = []
    problems: list[str] = []
    ceilings: dict[str, list[dict[str, Any]]] = {"aiohttp": [], "httpx": []}
    versions: dict[str, str] = {}
    connector = aiohttp.TCPConnector(limit=8)
    timeout = aiohttp.ClientTimeout(total=300)
    keep_logs = False
    try:
        # With --api-key every request carries the key (the receiver ignores it).
        auth = {"Authorization": f"Bearer {BENCH_KEY}"} if args.api_key else None
        async with aiohttp.ClientSession(
            connector=connector, timeout=timeout, trust_env=False, headers=auth
        ) as http:
            receiver = ReceiverClient(procs, http)
            await receiver.start()
            ctx = Context(args, procs, http, receiver, databases, log_dir, problems)
            if "postgresql" in dialects:
                versions["postgresql"] = await databases.server_version()
            if "mysql" in dialects:
                versions["mysql"] = await databases.mysql_server_version()
            try:
                for run in range(1, args.runs + 1):
                    for client in ("aiohttp", "httpx") if "W1" in args.workloads else ():
                        ceiling = await measure_ceiling(ctx, client)
                        ceilings[client].append(ceiling)
                        log(f"run {run}: ceiling {client}: {ceiling['rps']:,.0f} req/s")
                    for dialect in dialects:
                        for workload in args.workloads:
                            result = await run_workload(ctx, workload, dialect, run)
                            results.append(result)
                            log(
                                f"run {run}: {dialect} {workload}: "
                                f"create {fmt(result.get('create_per_s'))}/s, "
                                f"deliveries {fmt(result.get('deliveries_per_s'))}/s, "
                                f"recorded {fmt(result.get('recorded_per_s'))}/s, "
                                f"lag p50 {fmt(result.get('lag_p50_ms'), 1)} ms, "
                                f"p99 {fmt(result.get('lag_p99_ms'), 1)} ms, "
                                f"lost {result['lost']}, dup {result['duplicates']}, "
                                f"unsettled {result.get('unsettled')}, "
                                f"db {result.get('db_status')}"
                            )
            finally:
                await receiver.stop()
    except BaseException:
        keep_logs = True
        raise
    finally:
        procs.kill_all()
        await databases.drop_all()
        if keep_logs or logs_worth_keeping(results):
            log(f"service logs kept in {log_dir}")
        else:
            shutil.rmtree(log_dir, ignore_errors=True)
    if code_digest() != args.code_digest:
        problems.append(
            f"the service source changed during the run: started on {args.code_version}, "
            f"ended on {code_version()}; the runs mix both"
        )
    log(f"code under test: {args.code_version}")
    summaries = {d: summarize(results, d) for d in dialects}
    print_results(summaries, ceilings, problems, versions)
    if args.json is not None:
        args.json.write_text(
            json.dumps({"results": results, "ceilings": ceilings}, indent=2, default=str)
        )
    if args.docs:
        write_docs(args, summaries, ceilings, problems, versions)
    if args.strict:
        checks = bars(summaries["postgresql"]) if "postgresql" in summaries else []
        checks += mysql_bars(summaries)
        return 0 if all(ok for _, _, ok in checks) else 1
    return 0


# docs/benchmarks.md holds the current figures. The sections the benchmark scripts write into
# it stand between these markers, each named (bench/run.py: machine, w1-w2; bench/creates.py:
# creates; bench/recurring.py: recurring; bench/mixed.py: mixed; bench/wakeups.py: wakeups;
# bench/rabbitmq.py: rabbitmq), and a script rewrites its own alone: the rest of the page is
# kept by hand. Every run that writes a section also adds its figures to the top of
# docs/benchmark-history.md, so that the figures a section held are not lost when it is
# rewritten.
KEEP_BEGIN = "<!-- section: "
KEEP_END = "<!-- end section -->"
PAGE_HEAD = "# Benchmarks\n"
HISTORY_HEAD = (
    "# Benchmark history\n\n"
    f"Every benchmark run behind [the current figures]({DOCS.name}), newest first.\n"
)


def section_text(text: str, name: str) -> str | None:
    """The body of the marked section `name` of `text`, None when there is none."""
    begin = f"{KEEP_BEGIN}{name} -->"
    start = text.find(begin)
    if start == -1:
        return None
    end = text.find(KEEP_END, start)
    if end == -1:
        return None
    return text[start + len(begin) : end].strip("\n")


def replace_section(text: str, name: str, body: str) -> str:
    """`text` with the marked section `name` set to `body` (appended when absent)."""
    begin = f"{KEEP_BEGIN}{name} -->"
    block = f"{begin}\n{body.rstrip()}\n{KEEP_END}"
    start = text.find(begin)
    if start == -1:
        return text.rstrip() + "\n\n" + block + "\n"
    end = text.find(KEEP_END, start)
    return text[:start] + block + text[end + len(KEEP_END) :]


def anchor(heading: str) -> str:
    """The anchor GitHub gives a heading: lower case, punctuation dropped, spaces as hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def with_entry(text: str, entry: str) -> str:
    """`text`, the history page, with `entry` as its newest entry: before its first `## `."""
    first = re.search(r"^## ", text, re.MULTILINE)
    if first is None:
        return text.rstrip() + "\n\n" + entry.strip() + "\n"
    return text[: first.start()] + entry.strip() + "\n\n" + text[first.start() :]


def add_history_entry(entry: str) -> None:
    text = HISTORY.read_text(encoding="utf-8") if HISTORY.exists() else HISTORY_HEAD
    HISTORY.parent.mkdir(parents=True, exist_ok=True)
    HISTORY.write_text(with_entry(text, entry), encoding="utf-8")


def write_section(name: str, body: str) -> None:
    """Set the marked section `name` of docs/benchmarks.md to `body`, leaving the rest."""
    text = DOCS.read_text(encoding="utf-8") if DOCS.exists() else PAGE_HEAD
    DOCS.parent.mkdir(parents=True, exist_ok=True)
    DOCS.write_text(replace_section(text, name, body), encoding="utf-8")


def record(name: str, body: str, figures: str | None = None) -> None:
    """A script's run into the docs: `body`, a section under its `## Title`, becomes the marked
    section `name` of docs/benchmarks.md, and the run the newest entry of
    docs/benchmark-history.md, headed "Title on <commit>, <date>", holding `figures` (every
    figure of the run, when the section shows fewer) or else the section's own text. The
    section ends with a link to that entry."""
    title, _, rest = body.strip().partition("\n")
    heading = f"{title.removeprefix('## ')} on {code_label()}, {utc_stamp()}"
    add_history_entry(f"## {heading}\n" + (rest if figures is None else f"\n{figures.strip()}"))
    link = f"[{heading}]({HISTORY.name}#{anchor(heading)})"
    write_section(name, f"{body.rstrip()}\n\nThis run in the history: {link}.")
    log(f"wrote the {name} section of {DOCS.relative_to(ROOT)} and its entry in {HISTORY.name}")


def logs_worth_keeping(results: list[dict[str, Any]]) -> bool:
    return any(
        r.get("log_problems") or r.get("lost") or r.get("exit_code") not in GRACEFUL_EXITS
        for r in results
    )


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    loop = asyncio.new_event_loop()
    task = loop.create_task(main_async(args))
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, task.cancel)
    try:
        return loop.run_until_complete(task)
    except asyncio.CancelledError:
        log("interrupted; subprocesses stopped and databases dropped")
        return 130
    finally:
        loop.close()


if __name__ == "__main__":
    sys.exit(main())
