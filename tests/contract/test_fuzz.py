"""Fuzzing the served OpenAPI document: every operation, every check schemathesis has.

The app runs in-process on a SQLite database of its own, with the delivery loop off. Runs
are derandomized, so the suite sees the same examples each time; `make fuzz` runs the same
tests with many more (CHRONOQ_FUZZ_EXAMPLES per operation and phase, three times as many
workflows).
"""

from __future__ import annotations

import atexit
import os
import shutil
import sqlite3
import tempfile
from contextlib import closing
from pathlib import Path
from typing import Any

import hypothesis
import pytest
import schemathesis
from fastapi import FastAPI

from app.api.auth import CHALLENGES, is_open
from app.main import create_app
from tests.conftest import make_settings
from tests.dns import FakeDNS

EXAMPLES = int(os.environ.get("CHRONOQ_FUZZ_EXAMPLES", "10"))
# Workflows are cheap next to the single-operation runs (no coverage phase), and they are
# where reads and changes meet schedules that exist: three times as many.
WORKFLOWS = 3 * EXAMPLES
WORKFLOW_STEPS = 10

# The per-case timeout (pyproject.toml) fits the default examples; `make fuzz` runs thirty
# times as many, and its cases get as much longer.
pytestmark = pytest.mark.timeout(max(300, 30 * EXAMPLES))

# Values a JSON Schema cannot describe but a schedule needs to be created at all: with
# them, some generated creates succeed, and the workflows go on to read, change, pause and
# cancel what they made. Every target stays on 127.0.0.1 (and nothing delivers to it).
DICTIONARIES = {
    "urls": {"values": ["http://127.0.0.1:9/hooks", "https://127.0.0.1:9/h?x=1"]},
    "crons": {"values": ["*/5 * * * *", "@daily", "0 9 * * 1-5", "30 2 * * *", "*/10 * * * * *"]},
    "zones": {"values": ["UTC", "Europe/Paris", "America/New_York", "Asia/Kolkata"]},
    "events": {"values": ["invoice.due", "report.sent"]},
}
BOUND = {
    "event_type": "events",
    "target.url": "urls",
    "trigger.expression": "crons",
    "trigger.timezone": "zones",
}
# In a schedule, in each item of a batch, in a PATCH and in a trigger preview alike.
PARAMETERS = {
    f"body.{where}{field}": {"dictionary": dictionary, "probability": 0.7}
    for field, dictionary in BOUND.items()
    for where in ("", "items[*].")
}

# Operations whose schema-valid requests the service may still refuse with a 422, each for
# rules a JSON Schema cannot state (everything it can state is in the document, and every
# other check applies to these operations too):
_SCHEDULE_RULES = (
    "cron grammar, IANA zone names, webhook hosts that are or resolve to a denied address "
    "(and their IDNA and numeric spellings), text limits in UTF-8 bytes, a trigger's end "
    "before its first tick, an instant's bound across an offset (1970-01-01T00:30:00+01:00 "
    "is in 1969), a rabbitmq target on a service without a broker, invisible characters "
    "(Unicode Cf) in names and labels, two label keys alike once in NFC, and integers "
    "written with a fraction (5.0: an integer to JSON Schema, refused by the strict API)"
)
_OPAQUE_CURSOR = "a cursor is opaque: no generated string is one this API issued"
SEMANTIC_RULES = {
    "create_schedule": _SCHEDULE_RULES,
    "create_schedules": _SCHEDULE_RULES,
    "patch_schedule": _SCHEDULE_RULES,
    "preview_trigger": _SCHEDULE_RULES,
    "backfill_schedule": (
        "from after to, a to in the future, more than 1000 ticks in the range, and an "
        "instant's bound across an offset"
    ),
    "put_flow_key": "integers written with a fraction (rate 5.0), as above",
    "put_tenant": "integers written with a fraction (max_schedules 5.0), as above",
    "list_schedules": _OPAQUE_CURSOR,
    "list_occurrences": _OPAQUE_CURSOR,
    "list_attempts": _OPAQUE_CURSOR,
    "list_events": _OPAQUE_CURSOR,
    "list_dead_letters": _OPAQUE_CURSOR,
    "list_flow_keys": _OPAQUE_CURSOR,
    "list_waiting_occurrences": _OPAQUE_CURSOR,
    "list_tenants": _OPAQUE_CURSOR,
    "list_tenant_keys": _OPAQUE_CURSOR,
    "list_tenant_events": _OPAQUE_CURSOR,
    "create_tenant_key": "an expires_at in the past, and an instant's bound across an offset",
    "create_endpoint": (
        "webhook hosts that are or resolve to a denied address, header text limits in UTF-8 "
        "bytes, a max_cooldown_seconds below cooldown_seconds, flow limits that do not hold "
        "together (a burst without a rate, fifo with parallelism), and integers written with "
        "a fraction"
    ),
    "patch_endpoint": "as create_endpoint's, and a redacted *** that no stored value stands for",
    "rotate_endpoint_secret": "integers written with a fraction, and more than 10 live secrets",
    "list_endpoints": _OPAQUE_CURSOR,
    "list_endpoint_events": _OPAQUE_CURSOR,
    "list_endpoint_attempts": _OPAQUE_CURSOR,
    "list_topics": _OPAQUE_CURSOR,
    "list_subscriptions": _OPAQUE_CURSOR,
    "create_subscription": (
        "a topic and an endpoint that exist in the tenant, globs that close their [sets], "
        "and match values without control characters"
    ),
    "patch_subscription": "as create_subscription's",
    "get_activity": "at most one of tenant, schedule_id, flow_key and endpoint_id",
}
# 412: an If-Match that is well-formed but names another version than the schedule's (a
# generated one almost always does) is refused by design, like a 409 conflict.
ACCEPTED = ["2xx", "3xx", "401", "403", "404", "409", "412", "429", "5xx"]
# Every change of a schedule honours If-Match, so any of them may answer 412.
CHECKS = {"enabled": True, "positive_data_acceptance": {"expected-statuses": ACCEPTED}}
# DELETE on a schedule cancels it (DESIGN section 6): the cancelled schedule and its history
# stay readable, which is what use_after_free takes for a deleted resource still served. A
# flow key's DELETE drops its limits, and the key reads on with none (a key that schedules
# name exists without a configuration: section 11). A tenant's audit events outlive it, its
# `deleted` last (docs/tenants.md), and so do an endpoint's.
CANCELLED_STAYS_READABLE = [
    "get_schedule",
    "list_occurrences",
    "list_events",
    "get_flow_key",
    "list_tenant_events",
    "list_endpoint_events",
]


def _operations() -> list[dict[str, Any]]:
    lenient = {"positive_data_acceptance": {"expected-statuses": [*ACCEPTED, "422"]}}
    readable = {"use_after_free": {"enabled": False}}
    configs = []
    for operation_id in sorted({*SEMANTIC_RULES, *CANCELLED_STAYS_READABLE}):
        checks: dict[str, Any] = {}
        if operation_id in SEMANTIC_RULES:
            checks.update(lenient)
        if operation_id in CANCELLED_STAYS_READABLE:
            checks.update(readable)
        configs.append({"include-operation-id": operation_id, "checks": checks})
    return configs


def _config(**extra: Any) -> schemathesis.Config:
    return schemathesis.Config.from_dict(
        {
            "generation": {"max-examples": EXAMPLES, "deterministic": True, "database": "none"},
            "checks": CHECKS,
            "phases": {"stateful": {"max-steps": WORKFLOW_STEPS}},
            "dictionaries": DICTIONARIES,
            "parameters": PARAMETERS,
            "operations": _operations(),
            **extra,
        }
    )


# The app with API keys set: the fuzzer calls it as the write key, and one pass calls it
# with no key at all.
WRITE_KEY = "fuzz-0123456789abcdef"
KEYS = f"fuzzer:{WRITE_KEY},viewer:fuzz-viewer-0123456789:read"
# Without keys the API is open by design, so a success without credentials is no finding.
OPEN_CONFIG = _config(checks={**CHECKS, "ignored_auth": {"enabled": False}})
KEYED_CONFIG = _config()
# A few requests per operation suffice to see that nothing answers without a key.
UNAUTHENTICATED_CONFIG = schemathesis.Config.from_dict(
    {
        "generation": {"max-examples": 2, "deterministic": True, "database": "none"},
        "phases": {"coverage": {"enabled": False}},
    }
)

# The document the app serves at /openapi.json. The app itself starts on the first request
# schemathesis sends it, and its lifespan ends with each test (schemathesis' pytest plugin).
DOCUMENT = create_app().openapi()
schema = schemathesis.openapi.from_dict(DOCUMENT, config=OPEN_CONFIG)
keyed_schema = schemathesis.openapi.from_dict(DOCUMENT, config=KEYED_CONFIG)

# The keyed passes call the app through the schema, not by argument: ignored_auth sends its
# probes (no key, a wrong key) to the schema's app. It is built here, so its database is too,
# and the `keyed_app` fixture fills that database before the first request.
KEYED_DIRECTORY = Path(tempfile.mkdtemp(prefix="chronoq-fuzz-"))
atexit.register(shutil.rmtree, KEYED_DIRECTORY, ignore_errors=True)
KEYED_APP = create_app(
    make_settings(f"sqlite:///{KEYED_DIRECTORY / 'chronoq.db'}", api_keys=KEYS), resolver=FakeDNS()
)
keyed_schema.app = KEYED_APP
unauthenticated_schema = schemathesis.openapi.from_dict(DOCUMENT, config=UNAUTHENTICATED_CONFIG)
unauthenticated_schema.app = KEYED_APP


@pytest.fixture(scope="module")
def database_path(tmp_path_factory: pytest.TempPathFactory, sqlite_template: Path) -> Path:
    path = tmp_path_factory.mktemp("fuzz") / "chronoq.db"
    shutil.copy(sqlite_template, path)
    return path


@pytest.fixture(scope="module")
def app(database_path: Path) -> FastAPI:
    # Generated URLs name hosts of every kind: none of them is looked up in real DNS. The
    # open app answers only the Host names it is told to, and schemathesis names testserver.
    settings = make_settings(f"sqlite:///{database_path}", allowed_hosts="testserver")
    return create_app(settings, resolver=FakeDNS())


@pytest.fixture(scope="module")
def keyed_app(sqlite_template: Path) -> FastAPI:
    shutil.copy(sqlite_template, KEYED_DIRECTORY / "chronoq.db")
    return KEYED_APP


@schema.parametrize()
def test_every_operation_answers_within_its_contract(
    case: schemathesis.Case[Any], app: FastAPI
) -> None:
    case.call_and_validate(app=app)


@keyed_schema.parametrize()
def test_every_operation_answers_within_its_contract_with_a_write_key(
    case: schemathesis.Case[Any], keyed_app: FastAPI
) -> None:
    """Every check, ignored_auth included: each success is probed again without a key and
    with a wrong one, and must then be a 401."""
    case.call_and_validate(headers={"Authorization": f"Bearer {WRITE_KEY}"})


@unauthenticated_schema.parametrize()
def test_without_a_key_every_protected_operation_is_401(
    case: schemathesis.Case[Any], keyed_app: FastAPI
) -> None:
    response = case.call()
    if is_open(case.operation.path):
        assert response.status_code != 401
        return
    assert response.status_code == 401, response.text
    assert response.headers["content-type"] == ["application/problem+json"]
    assert response.headers["www-authenticate"] == list(CHALLENGES)
    case.validate_response(response)


def test_workflows_across_linked_operations_answer_within_the_contract(
    app: FastAPI, database_path: Path
) -> None:
    """Sequences that follow the links schemathesis infers (a create's Location to the
    schedule's own operations), so reads and changes reach schedules that exist."""

    # The machine's class is built from the schema at run time, which mypy cannot follow.
    class Workflow(schema.as_state_machine()):  # type: ignore[misc]
        def setup(self) -> None:
            # Each workflow starts from an empty database, so that Hypothesis replaying one
            # (to shrink a failure) sees the answers it saw the first time.
            with closing(sqlite3.connect(database_path, timeout=10)) as conn, conn:
                conn.execute("DELETE FROM occurrences")
                conn.execute("DELETE FROM schedules")
                conn.execute("DELETE FROM flow_keys")
                conn.execute("DELETE FROM subscriptions")
                conn.execute("DELETE FROM topics")
                conn.execute("DELETE FROM endpoint_secrets")
                conn.execute("DELETE FROM endpoints")

        def get_call_kwargs(self, case: schemathesis.Case[Any]) -> dict[str, Any]:
            return {"app": app}

    Workflow.run(
        settings=hypothesis.settings(
            max_examples=WORKFLOWS,
            stateful_step_count=WORKFLOW_STEPS,
            derandomize=True,
            deadline=None,
            database=None,
        )
    )
