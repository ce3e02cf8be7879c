"""The delivery process: a replica's delivery loop in a process of its own, and how
`chronoq serve` runs it beside the API's processes.

Why a process: on one event loop, every request's parsing, validation and rendering stands
between a due occurrence's timer and its delivery (docs/performance.md, "Where the delivery
loop runs"); a thread does not help, since the API holds the GIL. The loop's process shares
nothing with the API's but the database: the API's writes wake it through PostgreSQL's
NOTIFY, as they wake other replicas' loops, and its leases make it as safe to lose as any
replica. It answers on a Unix socket only its parent's API processes can reach:
`GET /health` (the loop's health, for /readyz) and `GET /metrics` (for /metrics).

`DeliveryProcesses` (the parent's side) starts them, starts again one that exits (with a
backoff), and stops them on the way out, each draining its deliveries first. A delivery
process whose parent is gone stops by itself.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from contextlib import AsyncExitStack, suppress
from pathlib import Path

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST

from app.process.databases import open_database
from app.process.delivery_loop import delivery_loop
from app.process.readiness import InProcessLoop
from app.process.runtime import tune_garbage_collector
from app.settings import load_settings
from app.sinks import open_sinks
from app.store.engine.migrations import upgrade_to_head
from app.store.engine.wakeups import Wakeups
from app.telemetry import logs, metrics

log = logging.getLogger("app.process.delivery")

# How often a delivery process checks that its parent is still there.
PARENT_CHECK_SECONDS = 1.0
# A delivery process that exits is started again after this, doubling up to the cap while
# it keeps exiting within RESTART_RESET_SECONDS of its start.
RESTART_DELAY = 0.5
RESTART_MAX_DELAY = 30.0
RESTART_RESET_SECONDS = 60.0
# Beyond its drain (bounded by the dispatch timeout), what a stopping delivery process may
# take to close its pools and sinks before it is killed.
STOP_MARGIN = 15.0


# -- the delivery process ----------------------------------------------------------------


async def _serve_health(socket: Path, loop: InProcessLoop) -> web.AppRunner:
    """The socket's tiny HTTP server: /health (the loop's readiness checks) and /metrics of
    this process."""

    async def health_view(_: web.Request) -> web.Response:
        return web.json_response(await loop.checks())

    async def metrics_view(_: web.Request) -> web.Response:
        response = web.Response(body=metrics.exposition())
        response.headers["Content-Type"] = CONTENT_TYPE_LATEST
        return response

    app = web.Application()
    app.router.add_get("/health", health_view)
    app.router.add_get("/metrics", metrics_view)
    runner = web.AppRunner(app, access_log=None, handle_signals=False)
    await runner.setup()
    await web.UnixSite(runner, str(socket)).start()
    return runner


async def _deliver(socket: Path, parent: int) -> None:
    config = load_settings()
    logs.configure(
        config.log_level, config.log_format, secrets=[k.key for k in config.api_key_entries()]
    )
    stopping = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stopping.set)
    async with AsyncExitStack() as stack:
        if config.auto_migrate:
            # The API process migrates too: the migration lock lets one of them do it.
            database = open_database(config, "command")
            try:
                await upgrade_to_head(database)
            finally:
                await database.close()
        sinks = await stack.enter_async_context(open_sinks(config))
        tune_garbage_collector()
        dispatcher = await stack.enter_async_context(delivery_loop(config, sinks, Wakeups()))
        runner = await _serve_health(socket, InProcessLoop(dispatcher, sinks.broker))
        stack.push_async_callback(runner.cleanup)
        log.info("delivery process %d delivering", os.getpid())
        while not stopping.is_set():
            if os.getppid() != parent:
                log.warning("delivery process %d: its parent is gone, stopping", os.getpid())
                break
            with suppress(TimeoutError):
                await asyncio.wait_for(stopping.wait(), PARENT_CHECK_SECONDS)
        # The stack's unwinding is the stop: the socket first (readiness says it is going),
        # then the loop's drain, then the sinks.


def main(argv: list[str] | None = None) -> int:
    """`python -m app.process.delivery --socket PATH --parent PID`, as DeliveryProcesses runs it."""
    parser = argparse.ArgumentParser(prog="chronoq-delivery")
    parser.add_argument("--socket", type=Path, required=True)
    parser.add_argument("--parent", type=int, required=True)
    args = parser.parse_args(argv)
    # What an earlier delivery process of the same slot left (one that was killed).
    args.socket.unlink(missing_ok=True)
    # The event loop uvicorn gives the API processes (uvloop where installed).
    from uvicorn.loops.auto import auto_loop_factory

    with asyncio.Runner(loop_factory=auto_loop_factory(use_subprocess=True)) as runner:
        runner.run(_deliver(args.socket, args.parent))
    return 0


# -- the parent's side ---------------------------------------------------------------------


class DeliveryProcesses:
    """`count` delivery processes of this replica, kept running until `stop`."""

    def __init__(self, count: int, *, stop_timeout: float) -> None:
        self._directory = Path(tempfile.mkdtemp(prefix="chronoq-delivery-"))
        self.sockets = [str(self._directory / f"delivery-{k}.sock") for k in range(1, count + 1)]
        self._stop_timeout = stop_timeout
        self._processes: list[subprocess.Popen[bytes] | None] = [None] * count
        self._started_at = [0.0] * count
        self._delays = [RESTART_DELAY] * count
        self._due = [0.0] * count
        self._stopping = threading.Event()
        self._lock = threading.Lock()
        self._watcher = threading.Thread(target=self._watch, name="chronoq-delivery", daemon=True)

    def start(self) -> None:
        for index in range(len(self._processes)):
            self._spawn(index)
        self._watcher.start()

    def pids(self) -> list[int]:
        with self._lock:
            return [p.pid for p in self._processes if p is not None and p.poll() is None]

    def _spawn(self, index: int) -> None:
        # -P: the package installed, never a folder named `app` where it was started from.
        command = [sys.executable, "-P", "-m", "app.process.delivery"]
        command += ["--socket", self.sockets[index], "--parent", str(os.getpid())]
        self._processes[index] = subprocess.Popen(command, stdin=subprocess.DEVNULL)
        self._started_at[index] = time.monotonic()

    def _watch(self) -> None:
        while not self._stopping.wait(0.2):
            with self._lock:
                if self._stopping.is_set():
                    return
                for index, process in enumerate(self._processes):
                    self._keep(index, process)

    def _keep(self, index: int, process: subprocess.Popen[bytes] | None) -> None:
        now = time.monotonic()
        if process is not None:
            code = process.poll()
            if code is None:
                return
            if now - self._started_at[index] >= RESTART_RESET_SECONDS:
                self._delays[index] = RESTART_DELAY
            delay = self._delays[index]
            self._delays[index] = min(delay * 2, RESTART_MAX_DELAY)
            log.error(
                "delivery process %d (pid %d) exited with %s; starting it again in %.1f s",
                index + 1,
                process.pid,
                code,
                delay,
            )
            self._processes[index] = None
            self._due[index] = now + delay
            return
        if now >= self._due[index]:
            self._spawn(index)

    def stop(self) -> None:
        """Stop every delivery process (SIGTERM: each drains its deliveries), killing one
        that outlasts the stop timeout."""
        with self._lock:
            self._stopping.set()
        self._watcher.join()
        live = [p for p in self._processes if p is not None and p.poll() is None]
        for process in live:
            process.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + self._stop_timeout
        for process in live:
            try:
                process.wait(timeout=max(deadline - time.monotonic(), 0.0))
            except subprocess.TimeoutExpired:
                log.error("delivery process (pid %d) did not stop in time: killed", process.pid)
                process.kill()
                process.wait()
        shutil.rmtree(self._directory, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
