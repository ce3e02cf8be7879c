"""`chronoq receiver`: a port in use is one line and exit 2; each request is a line stamped to
the millisecond (so a rate limit or a backoff can be seen), its failing paths are listed
plainly, and what a request carries reaches the terminal with its control characters
escaped."""

from __future__ import annotations

import queue
import re
import socket
import subprocess
import threading
from collections.abc import Iterator

import httpx
import pytest

from tests.integration.cli.commands import in_process, start

STAMP = r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z"


def test_a_port_in_use_is_one_line_naming_it_and_exit_2() -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]

        result = in_process("receiver", "--port", str(port), timeout=30)

    assert result.returncode == 2
    assert result.stdout == ""
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith(f"chronoq: cannot receive on port {port} of 127.0.0.1")
    assert "--port" in lines[0]


class Lines:
    """The lines a process prints, read as they come."""

    def __init__(self, process: subprocess.Popen[str]) -> None:
        self._lines: queue.Queue[str] = queue.Queue()
        assert process.stdout is not None
        self._stdout = process.stdout
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        for line in self._stdout:
            self._lines.put(line)

    def next(self, timeout: float = 30.0) -> str:
        return self._lines.get(timeout=timeout).rstrip("\n")

    def close(self) -> None:
        """Once the process has ended: the rest read, the pipe closed."""
        self._reader.join(timeout=30)
        self._stdout.close()


@pytest.fixture
def receiver() -> Iterator[tuple[str, Lines]]:
    process = start("receiver", "--port", "0", "--fail", "/flaky", "--fail", "/down")
    lines = Lines(process)
    try:
        yield lines.next(), lines
    finally:
        process.terminate()
        process.wait(timeout=30)
        lines.close()
        assert process.stderr is not None
        process.stderr.close()


def test_each_line_is_stamped_and_the_failing_paths_are_listed_plainly(
    receiver: tuple[str, Lines],
) -> None:
    first, lines = receiver
    found = re.fullmatch(
        rf"({STAMP}) receiving on http://127\.0\.0\.1:(\d+)/ \(failing: /down, /flaky\)", first
    )
    assert found, first
    base = f"http://127.0.0.1:{found.group(2)}"

    with httpx.Client(base_url=base, trust_env=False) as client:
        assert client.post("/flaky", headers={"X-Attempt": "1"}, content=b"{}").status_code == 503
        assert client.post("/hooks", headers={"X-Attempt": "2"}, content=b"{}").status_code == 200
        hostile = client.post("/hooks", content=b"\x1b]0;owned\x07\x1b[2J\nforged")
        assert hostile.status_code == 200

    flaky, hooks, escaped = lines.next(), lines.next(), lines.next()
    assert re.fullmatch(rf"{STAMP} POST /flaky -> 503 occurrence=None attempt=1 .*", flaky)
    assert re.fullmatch(rf"{STAMP} POST /hooks -> 200 occurrence=None attempt=2 .*", hooks)
    assert escaped.endswith("body=\\u001b]0;owned\\u0007\\u001b[2J\\u000aforged"), escaped
