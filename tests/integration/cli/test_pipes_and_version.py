"""The `chronoq` command in a shell's hands: `--version`, and output piped into a reader
that stops early (`| head -1`) ends the command quietly, exit status 141 as a command killed
by SIGPIPE has, never a traceback."""

from __future__ import annotations

import asyncio
import subprocess
from importlib.metadata import version

from tests.conftest import EMBEDDED_ONLY
from tests.integration.cli.commands import chronoq, command, environment
from tests.integration.conftest import Harness


def test_version_prints_the_installed_version() -> None:
    result = chronoq("--version")

    assert result.returncode == 0, result.stderr
    assert result.stdout == f"chronoq {version('chronoq')}\n"
    assert result.stderr == ""


def _into_a_closed_pipe(*args: str, **variables: str) -> subprocess.CompletedProcess[str]:
    """Run the command with its standard output a pipe whose reader has already gone."""
    with subprocess.Popen(
        [*command(), *args],
        env=environment(**variables),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    ) as process:
        assert process.stdout is not None
        assert process.stderr is not None
        process.stdout.close()
        stderr = process.stderr.read()
        returncode = process.wait(timeout=120)
    return subprocess.CompletedProcess(process.args, returncode, "", stderr)


def test_openapi_into_a_reader_that_went_away_exits_quietly() -> None:
    result = _into_a_closed_pipe("openapi", "--output", "-")

    assert result.stderr == ""
    assert result.returncode == 141


def test_openapi_piped_into_head_prints_the_first_line_and_no_traceback() -> None:
    shell = subprocess.run(
        ["bash", "-c", 'set -o pipefail; "$@" openapi --output - | head -1', "sh", *command()],
        env=environment(),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )

    assert shell.stdout == "{\n"
    assert shell.stderr == ""
    assert shell.returncode in (0, 141)


# The embedded store only: what the store reads is test_operator_commands.py's, and the pipe
# is the same whichever store is below.
@EMBEDDED_ONLY
async def test_list_into_a_reader_that_went_away_exits_quietly(
    harness: Harness, database_url: str
) -> None:
    for _ in range(3):
        await harness.create(trigger={"type": "once", "delay_seconds": 3600})

    result = await asyncio.to_thread(_into_a_closed_pipe, "list", DATABASE_URL=database_url)

    assert result.stderr == ""
    assert result.returncode == 141
