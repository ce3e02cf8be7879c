"""A fast standalone webhook receiver for the benchmark, run as its own process.

    python bench/receiver.py [--port 0]

Binds 127.0.0.1, then prints one JSON line `{"port": N}` on stdout. Routes:

- `* /hook`       records (the delivery's id: Idempotency-Key, which is X-Occurrence-Id but
                  for a topic's deliveries; arrival time.time(), X-Scheduled-For, X-Attempt)
                  and answers 200 with an empty body;
- `* /sink`       the same work and reply, but only counted (the ceiling load goes here);
- `* /switch`     counted like /sink, answering the status last set by `POST /switch/{status}`
                  (200 at first): a target that fails, then recovers;
- `* /hold/{s}`   counted when it arrives, then answered 200 only after `s` seconds: a slow
                  receiver (a tarpit), which a sender's timeout may cut short;
- `GET /stats`    `{"hook": arrivals, "unique": distinct ids, "sink": count, "held": count}`;
- `GET /records`  `{"records": [[id, at, scheduled_for, attempt], ...]}` for /hook;
- `POST /reset`   forgets everything.

The arrival time is taken when the handler starts, after aiohttp parsed the request head.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import signal
import sys
import time

from aiohttp import web


class Recorder:
    def __init__(self) -> None:
        self.records: list[tuple[str, float, str, str]] = []
        self.ids: set[str] = set()
        self.sink = 0
        self.switched = 0
        self.switch_status = 200
        self.held = 0

    async def hook(self, request: web.Request) -> web.Response:
        at = time.time()
        headers = request.headers
        occurrence = headers.get("Idempotency-Key") or headers.get("X-Occurrence-Id") or ""
        await request.read()
        self.records.append(
            (occurrence, at, headers.get("X-Scheduled-For", ""), headers.get("X-Attempt", ""))
        )
        self.ids.add(occurrence)
        return web.Response()

    async def sink_(self, request: web.Request) -> web.Response:
        headers = request.headers
        headers.get("X-Occurrence-Id", "")
        headers.get("X-Scheduled-For", "")
        headers.get("X-Attempt", "")
        await request.read()
        self.sink += 1
        return web.Response()

    async def switch(self, request: web.Request) -> web.Response:
        await request.read()
        self.switched += 1
        return web.Response(status=self.switch_status)

    async def hold(self, request: web.Request) -> web.Response:
        self.held += 1
        await request.read()  # the whole body first: a sender that gives up later is no error
        await asyncio.sleep(float(request.match_info["seconds"]))
        return web.Response()

    async def set_switch(self, request: web.Request) -> web.Response:
        self.switch_status = int(request.match_info["status"])
        return web.json_response({"status": self.switch_status})

    async def stats(self, _: web.Request) -> web.Response:
        return web.json_response(
            {
                "hook": len(self.records),
                "unique": len(self.ids),
                "sink": self.sink,
                "switch": self.switched,
                "held": self.held,
            }
        )

    async def dump(self, _: web.Request) -> web.Response:
        return web.json_response({"records": self.records})

    async def reset(self, _: web.Request) -> web.Response:
        self.records = []
        self.ids = set()
        self.sink = 0
        self.switched = 0
        self.switch_status = 200
        self.held = 0
        return web.json_response({"reset": True})


def build_app(recorder: Recorder) -> web.Application:
    app = web.Application(client_max_size=1 << 20)
    app.router.add_route("*", "/hook", recorder.hook)
    app.router.add_route("*", "/sink", recorder.sink_)
    app.router.add_post("/switch/{status:[1-5][0-9][0-9]}", recorder.set_switch)
    app.router.add_route("*", "/switch", recorder.switch)
    app.router.add_route("*", r"/hold/{seconds:\d+(\.\d+)?}", recorder.hold)
    app.router.add_get("/stats", recorder.stats)
    app.router.add_get("/records", recorder.dump)
    app.router.add_post("/reset", recorder.reset)
    return app


async def serve(port: int) -> None:
    runner = web.AppRunner(build_app(Recorder()), access_log=None, handle_signals=False)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", port, backlog=1024)
    await site.start()
    bound = runner.addresses[0][1]
    sys.stdout.write(json.dumps({"port": bound}) + "\n")
    sys.stdout.flush()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    try:
        await stop.wait()
    finally:
        await runner.cleanup()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=0)
    args = parser.parse_args(argv)
    try:
        import uvloop
    except ImportError:
        asyncio.run(serve(args.port))
    else:
        uvloop.run(serve(args.port))
    return 0


if __name__ == "__main__":
    sys.exit(main())
