"""The synchronous client against a real `chronoq serve`: the example of docs/client.md runs as
written, keys and roles are the service's, and a service that is not there is an
UnreachableError, not a traceback of httpx's."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from chronoq.client import Client, ForbiddenError, UnauthorizedError, UnreachableError
from tests.e2e.processes import Service, Services, free_port, service_environment

pytestmark = [pytest.mark.e2e]

CLIENT_PAGE = Path(__file__).parents[2] / "docs" / "client.md"
WRITER = "3f9c2a7e61d84b0f9e5a"
READER = "b71e09c4d2a6f8e3c5d1"


def client_example() -> str:
    """The first Python block of docs/client.md, the client's page."""
    found = re.search(r"```python\n(.*?)```", CLIENT_PAGE.read_text(encoding="utf-8"), re.DOTALL)
    assert found, "docs/client.md has no python block"
    return found.group(1)


@pytest.fixture
async def service(services: Services, tmp_path: Path) -> Service:
    return await services.start(
        "api",
        {
            "DATABASE_URL": f"sqlite:///{tmp_path / 'client.db'}",
            "CHRONOQ_API_KEYS": f"deploy-bot:{WRITER},dashboard:{READER}:read",
        },
    )


def test_the_documented_example_runs_as_written(service: Service) -> None:
    run = subprocess.run(
        [sys.executable, "-c", client_example()],
        env=service_environment(
            {"CHRONOQ_URL": service.base_url, "CHRONOQ_API_KEY": WRITER, "NO_PROXY": "*"}
        ),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert run.returncode == 0, run.stderr
    lines = run.stdout.splitlines()
    assert re.fullmatch(r"created [0-9a-f-]{36} next fire \S+ \S+", lines[0]), lines
    assert lines[1].startswith("refused #/trigger/expression ")
    assert lines[-1] == "status paused"


def test_keys_and_roles_are_the_services(service: Service, tmp_path: Path) -> None:
    key_file = tmp_path / "reader.key"
    key_file.write_text(READER + "\n", encoding="utf-8")
    with Client(service.base_url, api_key_file=key_file, trust_env=False) as reader:
        assert reader.list_schedules().items == []
        with pytest.raises(ForbiddenError):
            reader.create_schedule(
                {
                    "event_type": "e",
                    "target": {"type": "webhook", "url": "http://127.0.0.1:9/h"},
                    "trigger": {"type": "immediate"},
                }
            )
    with Client(service.base_url, trust_env=False) as anonymous, pytest.raises(UnauthorizedError):
        anonymous.list_schedules()
    with Client(service.base_url, api_key=WRITER, trust_env=False) as writer:
        created = writer.create_schedule(
            {
                "event_type": "e",
                "target": {"type": "webhook", "url": "http://127.0.0.1:9/h"},
                "trigger": {"type": "cron", "expression": "@daily"},
            }
        )
        assert created.created_by == "deploy-bot"
        events = list(writer.iter_events(created.id))
        assert [(e.kind, e.actor) for e in events] == [("created", "deploy-bot")]


def test_a_service_that_is_not_there_is_unreachable() -> None:
    address = f"http://127.0.0.1:{free_port()}"
    with (
        Client(address, retries=1, trust_env=False) as chronoq,
        pytest.raises(UnreachableError, match=re.escape(address)),
    ):
        chronoq.health()
