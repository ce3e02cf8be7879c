"""An unexpected error answering a request: the client gets a 500 problem that says nothing
of it, and the log one line with its traceback, not the app's and then the server's."""

from __future__ import annotations

import asyncio
import logging
import socket
from pathlib import Path

import httpx
import pytest
import uvicorn

from app.main import create_app
from app.settings import Settings
from tests.waiting import eventually


async def test_an_unexpected_error_is_one_traceback_not_two(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # The app under uvicorn, as `chronoq serve` runs it, with a route that fails.
    app = create_app(Settings(database_url=f"sqlite:///{tmp_path / 'db'}", worker_enabled=False))

    async def boom() -> None:
        raise RuntimeError("a bug")

    app.add_api_route("/boom", boom)
    server = uvicorn.Server(
        uvicorn.Config(app, host="127.0.0.1", port=0, log_config=None, access_log=False)
    )
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        serving = asyncio.create_task(server.serve(sockets=[sock]))
        try:
            await eventually(lambda: server.started, what="uvicorn started")
            port = sock.getsockname()[1]
            async with httpx.AsyncClient(trust_env=False) as client:
                answer = await client.get(f"http://127.0.0.1:{port}/boom")
        finally:
            server.should_exit = True
            await serving

    assert answer.status_code == 500
    assert "a bug" not in answer.text
    handler = next(h for h in logging.getLogger().handlers if getattr(h, "_chronoq", False))
    written = [r for r in caplog.records if r.exc_info and handler.filter(r)]
    assert [(r.name, r.getMessage()) for r in written] == [
        ("app.api.problems", "unexpected error on GET /boom")
    ]
    # uvicorn did log it; Chronoq's handler leaves that line out.
    assert any(r.name == "uvicorn.error" and r.exc_info for r in caplog.records)
