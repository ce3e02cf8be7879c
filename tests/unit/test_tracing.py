"""When traces are on, what a traceparent must look like to be stored, and what start-up
says of traces asked for and not to be had. Off, no OpenTelemetry code loads but the API
FastAPI itself imports."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from app.domain.traces import trace_id, valid_traceparent
from app.telemetry import trace_setup, tracing
from tests.integration.cli.commands import command, environment

TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
VALID = f"00-{TRACE}-00f067aa0ba902b7-01"


@pytest.mark.parametrize(
    ("environ", "on"),
    [
        ({}, False),
        ({"OTEL_TRACES_EXPORTER": "none"}, False),
        ({"OTEL_TRACES_EXPORTER": "console"}, True),
        ({"OTEL_TRACES_EXPORTER": "none,console"}, True),
        ({"OTEL_TRACES_EXPORTER": "otlp", "OTEL_SDK_DISABLED": "true"}, False),
        ({"OTEL_TRACES_EXPORTER": "otlp", "OTEL_SDK_DISABLED": "TRUE"}, False),
        ({"OTEL_TRACES_EXPORTER": "otlp", "OTEL_SDK_DISABLED": "false"}, True),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318"}, True),
        ({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://127.0.0.1:4318/v1/traces"}, True),
        (
            {
                "OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318",
                "OTEL_TRACES_EXPORTER": "none",
            },
            False,
        ),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": " "}, False),
        ({"OTEL_SERVICE_NAME": "billing"}, False),
    ],
)
def test_traces_are_on_when_the_environment_configures_an_exporter(
    environ: dict[str, str], on: bool
) -> None:
    assert tracing.configured(environ) is on


def test_a_valid_traceparent_is_kept_and_names_its_trace() -> None:
    assert valid_traceparent(VALID) == VALID
    assert trace_id(VALID) == TRACE
    assert valid_traceparent(None) is None


@pytest.mark.parametrize(
    "value",
    [
        "",
        "00-garbage",
        VALID.upper(),
        VALID + "0",
        VALID[:-1],
        f" {VALID}",
        VALID.replace("-", "_"),
        f"00-{'0' * 32}-00f067aa0ba902b7-01",
        f"00-{TRACE}-{'0' * 16}-01",
        f"ff-{TRACE}-00f067aa0ba902b7-01",
        f"01-{TRACE}-00f067aa0ba902b7-01",
        f"00-{TRACE}-00f067aa0ba902b7-01\r\nX-Injected: 1",
        "00-4bf92f3577b34da6a3ce929d0e0e473٦-00f067aa0ba902b7-01",  # a non-ASCII digit
    ],
)
def test_anything_but_a_version_00_traceparent_is_none(value: str) -> None:
    assert valid_traceparent(value) is None


IMPORTS = """
import sys
import fastapi
before = {m for m in sys.modules if m.startswith("opentelemetry")}
import app.main, app.process.delivery
after = {m for m in sys.modules if m.startswith(("opentelemetry", "app.telemetry.otel"))}
print(sorted(after - before))
"""


def _python(code: str, **variables: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", code],
        env=environment(**variables),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_with_traces_off_no_opentelemetry_module_loads_beyond_fastapis_own() -> None:
    off = _python(IMPORTS)
    on = _python(IMPORTS, OTEL_TRACES_EXPORTER="console")

    assert off.returncode == 0, off.stderr
    assert off.stdout.strip() == "[]"
    # The same check sees the SDK when traces are on.
    assert on.returncode == 0, on.stderr
    assert "'app.telemetry.otel'" in on.stdout
    assert "'opentelemetry.sdk.trace'" in on.stdout


def _serve(tmp_path: Path, prelude: str = "", **variables: str) -> subprocess.CompletedProcess[str]:
    """`chronoq serve` on a free port, after `prelude` (Python) ran in its process."""
    code = f"import sys\n{prelude}\nfrom app.cli.command import main\nsys.exit(main(sys.argv[1:]))"
    script = command()
    args = ["serve", "--host", "127.0.0.1", "--port", "0"]
    return subprocess.run(
        [sys.executable, "-c", code, *args] if prelude else [*script, *args],
        env=environment(DATABASE_URL=f"sqlite:///{tmp_path / 'chronoq.db'}", **variables),
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_serve_refuses_traces_it_cannot_export_with_one_line(tmp_path: Path) -> None:
    # The SDK absent: importing it fails as it does where the package is not installed.
    missing = _serve(
        tmp_path,
        prelude="sys.modules['opentelemetry.sdk'] = None",
        OTEL_EXPORTER_OTLP_ENDPOINT="http://127.0.0.1:4318",
    )
    unknown = _serve(tmp_path, OTEL_TRACES_EXPORTER="zipkin_json_bogus")
    grpc = _serve(tmp_path, OTEL_TRACES_EXPORTER="otlp", OTEL_EXPORTER_OTLP_PROTOCOL="grpc")

    assert (missing.returncode, missing.stderr.strip()) == (2, f"chronoq: {trace_setup.MISSING}")
    assert "pip install 'chronoq[otel]'" in missing.stderr
    assert unknown.returncode == 2
    assert unknown.stderr.strip().splitlines() == [
        "chronoq: OTEL_TRACES_EXPORTER names 'zipkin_json_bogus', which no installed package "
        "provides: use otlp, console or none"
    ]
    assert grpc.returncode == 2
    assert "http/protobuf" in grpc.stderr
    assert not (tmp_path / "chronoq.db").exists()
