"""The series an operator alerts on, as GET /metrics shows them: the installation's backlog,
dead letters and schedules read from the database (cached, shared between scrapes, kept
through a failed read), lateness by origin, HTTP requests by route template, the build, and
no `_created` series. Also: a readiness probe is silent at INFO, and the Grafana dashboard
reads only series the service exports."""

from __future__ import annotations

import asyncio
import json
import logging
import re
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from importlib.metadata import version
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
import yaml
from prometheus_client.parser import text_string_to_metric_families
from sqlalchemy.engine import Engine

from app.telemetry import delivery_metrics, store_metrics
from tests.conftest import STORES
from tests.factories import iso
from tests.integration.conftest import Harness
from tests.receiver import Reply

DASHBOARD = Path(__file__).resolve().parents[3] / "deploy" / "grafana" / "chronoq.json"
ALERTS = Path(__file__).resolve().parents[3] / "deploy" / "prometheus" / "alerts.yml"

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


async def _scrape(harness: Harness) -> str:
    response = await harness.client.get("/metrics")
    assert response.status_code == 200
    return response.text


def _parse(text: str) -> Samples:
    values = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            values[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return values


async def _samples(harness: Harness) -> Samples:
    return _parse(await _scrape(harness))


def _value(samples: Samples, name: str, **labels: str) -> float:
    return float(samples[(name, tuple(sorted(labels.items())))])


@pytest.fixture
def uncached(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every scrape reads the database again (the cache is tested on its own)."""
    monkeypatch.setattr(store_metrics, "STORE_CACHE_SECONDS", 0.0)


@pytest.fixture
def statements() -> Iterator[list[str]]:
    """The SQL text of every statement any engine of this process runs meanwhile."""
    seen: list[str] = []

    def record(_conn: Any, _cursor: Any, statement: str, *_: Any) -> None:
        seen.append(statement)

    sa.event.listen(Engine, "before_cursor_execute", record)
    try:
        yield seen
    finally:
        sa.event.remove(Engine, "before_cursor_execute", record)


@pytest.mark.usefixtures("uncached")
async def test_backlog_counts_due_pending_occurrences_not_held_and_schedules_by_status(
    harness: Harness,
) -> None:
    for _ in range(2):
        await harness.create(trigger={"type": "immediate"})
    await harness.create(
        trigger={"type": "once", "at": iso(datetime.now(UTC) + timedelta(hours=1))}
    )
    paused = await harness.create(trigger={"type": "immediate"})
    assert (await harness.client.post(f"/v1/schedules/{paused['id']}/pause")).status_code == 200

    before = await _samples(harness)
    await harness.step()
    after = await _samples(harness)

    assert _value(before, "chronoq_backlog_due") == 2
    assert 0 <= _value(before, "chronoq_backlog_oldest_age_seconds") < 60
    assert _value(before, "chronoq_schedules", status="pending") == 3
    assert _value(before, "chronoq_schedules", status="paused") == 1
    for status in ("completed", "cancelled", "failed"):
        assert _value(before, "chronoq_schedules", status=status) == 0
    assert _value(after, "chronoq_backlog_due") == 0
    assert _value(after, "chronoq_backlog_oldest_age_seconds") == 0
    assert _value(after, "chronoq_schedules", status="completed") == 2
    assert _value(after, "chronoq_schedules", status="pending") == 1


@pytest.mark.usefixtures("uncached")
async def test_occurrences_waiting_on_flow_keys_and_keys_held_back_are_counted(
    harness: Harness,
) -> None:
    held = delivery_metrics.FLOW_HELD.labels("paused")
    held_before = held._value.get()
    assert (await harness.client.put("/v1/flow-keys/held", json={"paused": True})).status_code
    for _ in range(3):
        await harness.create(flow_key="held")
    await harness.create()

    assert await harness.step() == 1  # the unkeyed one
    samples = await _samples(harness)
    assert _value(samples, "chronoq_flow_waiting") == 3
    assert _value(samples, "chronoq_backlog_due") == 3
    assert _value(samples, "chronoq_flow_keys_held_total", reason="paused") > held_before
    # No series names a key: keys can be one per customer.
    assert "held" not in {v for (_, labels) in samples for _, v in labels}


@pytest.mark.usefixtures("uncached")
async def test_dead_letters_outstanding_follow_dead_letters_and_their_discard(
    make_harness: Callable[..., Any],
) -> None:
    async with make_harness(max_attempts=1) as harness:
        harness.receiver.script("/hook", Reply(status=410), Reply(status=410))
        for _ in range(2):
            await harness.create(trigger={"type": "immediate"})
        assert _value(await _samples(harness), "chronoq_dead_letters_outstanding") == 0
        await harness.step()
        dead = await _samples(harness)
        (first, _) = (await harness.get("/v1/dead-letters"))["items"]
        discarded = await harness.client.delete(f"/v1/dead-letters/{first['occurrence_id']}")
        assert discarded.status_code in (200, 204), discarded.text
        after = await _samples(harness)

    assert _value(dead, "chronoq_dead_letters_outstanding") == 2
    assert _value(after, "chronoq_dead_letters_outstanding") == 1


async def test_store_numbers_are_cached_and_concurrent_scrapes_share_one_read(
    harness: Harness, statements: list[str]
) -> None:
    await harness.create(trigger={"type": "immediate"})
    scrapes = await asyncio.gather(*(_scrape(harness) for _ in range(10)))
    # Within the cache's lifetime a new schedule is not seen yet.
    await harness.create(trigger={"type": "immediate"})
    cached = await _samples(harness)

    reads = [s for s in statements if "GROUP BY schedules.status" in s]
    assert len(reads) == 1, reads
    assert {_value(_parse(text), "chronoq_backlog_due") for text in scrapes} == {1}
    assert _value(cached, "chronoq_backlog_due") == 1


@pytest.mark.usefixtures("uncached")
async def test_a_failed_read_keeps_the_last_numbers_counts_the_failure_and_metrics_answer(
    harness: Harness, caplog: pytest.LogCaptureFixture
) -> None:
    await harness.create(trigger={"type": "immediate"})
    before = await _samples(harness)

    async def rename(old: str, new: str) -> None:
        async with harness.database.engine.begin() as conn:
            await conn.execute(sa.text(f"ALTER TABLE {old} RENAME TO {new}"))

    await rename("schedules", "schedules_away")
    try:
        with caplog.at_level(logging.WARNING, logger="app.telemetry.metrics"):
            during = await _samples(harness)
    finally:
        await rename("schedules_away", "schedules")
    after = await _samples(harness)

    failures = "chronoq_store_metrics_errors_total"
    assert _value(during, failures) == _value(before, failures) + 1
    assert _value(during, "chronoq_backlog_due") == _value(before, "chronoq_backlog_due") == 1
    assert _value(during, "chronoq_schedules", status="pending") == 1
    assert any("reading the backlog failed" in r.getMessage() for r in caplog.records)
    assert _value(after, failures) == _value(during, failures)


async def test_lateness_is_labelled_by_origin_and_target_type(harness: Harness) -> None:
    created = await harness.create(trigger={"type": "once", "delay_seconds": 3600})
    before = await _samples(harness)
    assert (await harness.client.post(f"/v1/schedules/{created['id']}/trigger")).status_code in (
        200,
        201,
        202,
    )
    await harness.create(trigger={"type": "immediate"})
    await harness.step()
    after = await _samples(harness)

    def grew(origin: str) -> float:
        key = ("chronoq_delivery_lateness_seconds_count", origin)
        labels = (("origin", key[1]), ("target_type", "webhook"))
        return after.get((key[0], labels), 0.0) - before.get((key[0], labels), 0.0)

    assert grew("trigger") == 1
    assert grew("schedule") == 1
    assert grew("backfill") == 0


async def test_http_requests_are_timed_by_route_template_never_by_path(
    harness: Harness,
) -> None:
    before = await _samples(harness)
    created = await harness.create(trigger={"type": "once", "delay_seconds": 3600})
    await harness.get(f"/v1/schedules/{created['id']}")
    assert (await harness.client.get("/no/such/path")).status_code == 404
    missing = "/v1/schedules/00000000-0000-0000-0000-000000000000"
    assert (await harness.client.get(missing)).status_code == 404
    text = await _scrape(harness)

    samples = _parse(text)
    name = "chronoq_http_request_duration_seconds_count"

    def count(method: str, route: str, status: str) -> float:
        labels = (("method", method), ("route", route), ("status", status))
        return samples.get((name, labels), 0.0) - before.get((name, labels), 0.0)

    assert count("POST", "/v1/schedules", "201") == 1
    assert count("GET", "/v1/schedules/{schedule_id}", "200") == 1
    assert count("GET", "/v1/schedules/{schedule_id}", "404") == 1
    assert count("GET", "unmatched", "404") == 1
    assert count("GET", "/metrics", "200") == 1
    assert created["id"] not in text
    assert "/no/such/path" not in text


async def test_static_files_are_timed_by_their_mount_never_by_file(harness: Harness) -> None:
    before = await _samples(harness)
    files = [
        "/ui/static/console.css",
        "/ui/static/console.js",
        "/docs/assets/swagger-ui/swagger-ui.css",
        "/docs/assets/redoc/redoc.standalone.js",
    ]
    for path in files:
        assert (await harness.client.get(path)).status_code == 200, path
    assert (await harness.client.get("/ui/static/no-such-file.css")).status_code == 404
    text = await _scrape(harness)

    samples = _parse(text)
    name = "chronoq_http_request_duration_seconds_count"

    def count(route: str, status: str) -> float:
        labels = (("method", "GET"), ("route", route), ("status", status))
        return samples.get((name, labels), 0.0) - before.get((name, labels), 0.0)

    assert count("/ui/static/{path}", "200") == 2
    assert count("/ui/static/{path}", "404") == 1
    assert count("/docs/assets/swagger-ui/{path}", "200") == 1
    assert count("/docs/assets/redoc/{path}", "200") == 1
    assert count("unmatched", "200") == 0
    for path in files:
        assert path not in text


async def test_build_info_names_the_version_and_no_series_is_a_created_timestamp(
    harness: Harness,
) -> None:
    await harness.create(trigger={"type": "immediate"})
    await harness.step()
    text = await _scrape(harness)

    assert _value(_parse(text), "chronoq_build_info", version=version("chronoq")) == 1
    created = [line for line in text.splitlines() if re.match(r"[a-z_]+_created[ {]", line)]
    assert created == []
    assert not [line for line in text.splitlines() if line.split(" ")[0].endswith("_created")]


async def test_a_readiness_probe_logs_nothing_at_info_from_alembic(
    harness: Harness, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.INFO):
        for _ in range(2):
            assert (await harness.client.get("/readyz")).status_code == 200

    assert [r.getMessage() for r in caplog.records if r.name.startswith("alembic")] == []
    assert logging.getLogger("alembic.runtime.migration").getEffectiveLevel() <= logging.INFO


def _dashboard_exprs() -> list[str]:
    dashboard = json.loads(DASHBOARD.read_text())
    exprs = [target["expr"] for panel in dashboard["panels"] for target in panel.get("targets", [])]
    assert exprs
    return exprs


def _alert_exprs() -> list[str]:
    document = yaml.safe_load(ALERTS.read_text())
    exprs = [str(rule["expr"]) for group in document["groups"] for rule in group["rules"]]
    assert exprs
    return exprs


async def test_the_dashboard_reads_only_series_the_service_exports(
    make_harness: Callable[..., Any],
) -> None:
    async with make_harness(max_attempts=1) as harness:
        harness.receiver.script("/hook", Reply(), Reply(status=410))
        for _ in range(2):
            await harness.create(trigger={"type": "immediate"})
        await harness.step()
        exported = {name for name, _ in await _samples(harness)}

    referenced = {
        name for expr in _dashboard_exprs() for name in re.findall(r"\bchronoq_[a-z0-9_]+", expr)
    }
    alerted = {
        name for expr in _alert_exprs() for name in re.findall(r"\bchronoq_[a-z0-9_]+", expr)
    }
    assert referenced - exported == set()
    assert alerted - exported == set()
    # The dashboard reads the current names, never the deprecated ones.
    assert not referenced & {"chronoq_deliveries_total", "chronoq_dead_letters_total"}
    for wanted in (
        "chronoq_occurrences_delivered_total",
        "chronoq_delivery_attempts_total",
        "chronoq_occurrences_dead_lettered_total",
        "chronoq_schedules_auto_paused_total",
        "chronoq_ready",
        "chronoq_delivery_lateness_seconds_bucket",
        "chronoq_backlog_due",
        "chronoq_backlog_oldest_age_seconds",
        "chronoq_dead_letters_outstanding",
        "chronoq_schedules",
        "chronoq_deliveries_in_flight",
        "chronoq_http_request_duration_seconds_bucket",
        "chronoq_db_pool_in_use",
    ):
        assert wanted in referenced


@pytest.mark.parametrize("database_url", [STORES[1]], indirect=True)
@pytest.mark.usefixtures("uncached")
async def test_a_read_that_hangs_does_not_hold_the_scrape(
    harness: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    wait = 0.3
    monkeypatch.setattr(store_metrics, "STORE_WAIT_SECONDS", wait)
    await harness.create(trigger={"type": "immediate"})
    before = await _samples(harness)

    # Another session holds the occurrences table until the scrape is answered: the
    # backlog read waits behind it, so only giving up on the read answers the scrape.
    async with harness.database.engine.connect() as blocker:
        await blocker.execute(sa.text("LOCK TABLE occurrences IN ACCESS EXCLUSIVE MODE"))
        started = time.monotonic()
        # Far past the wait: a scrape held by the read is never answered while it hangs.
        during = await asyncio.wait_for(_samples(harness), wait * 100)
        waited = time.monotonic() - started
        await blocker.rollback()
    await asyncio.sleep(0.1)
    after = await _samples(harness)

    assert waited >= wait * 0.9, "the read did not hang: the lock did not hold it"
    assert _value(during, "chronoq_backlog_due") == _value(before, "chronoq_backlog_due") == 1
    assert _value(after, "chronoq_backlog_due") == 1


@pytest.mark.usefixtures("uncached")
async def test_with_the_tenant_label_series_are_by_tenant_and_without_it_they_are_not(
    make_harness: Callable[..., Any],
) -> None:
    async with make_harness(metrics_tenant_label=True) as harness:
        assert (await harness.client.put("/v1/tenants/acme", json={"paused": True})).status_code
        acme = {"Chronoq-Tenant": "acme"}
        item = {"event_type": "e", "target": harness.webhook(), "trigger": {"type": "immediate"}}
        for _ in range(2):
            created = await harness.client.post("/v1/schedules", json=item, headers=acme)
            assert created.status_code == 201, created.text
        await harness.create()
        assert await harness.step() == 1  # the default tenant's; acme is paused
        samples = await _samples(harness)
        assert _value(samples, "chronoq_tenant_waiting", tenant="acme") == 2
        assert _value(samples, "chronoq_tenant_waiting", tenant="default") == 0
        delivered = _value(
            samples,
            "chronoq_occurrences_delivered_total",
            target_type="webhook",
            tenant="default",
        )
        assert delivered >= 1
        assert _value(samples, "chronoq_flow_keys_held_total", reason="paused", tenant="acme") >= 1

        await harness.client.put("/v1/tenants/acme", json={})
        assert await harness.step() == 2
        after = await _samples(harness)
        assert (
            _value(
                after, "chronoq_occurrences_delivered_total", target_type="webhook", tenant="acme"
            )
            == 2
        )
        # A tenant with nothing waiting has no series.
        assert ("chronoq_tenant_waiting", (("tenant", "acme"),)) not in after

    async with make_harness() as harness:
        plain = await _samples(harness)
        names = {name for name, labels in plain if any(k == "tenant" for k, _ in labels)}
        assert names == set(), f"tenant labels without the setting: {names}"
        assert not any(name == "chronoq_tenant_waiting" for name, _ in plain)
