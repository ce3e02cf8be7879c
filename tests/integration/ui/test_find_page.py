"""The console's search by id: a schedule's id goes to its page, an occurrence's to its
schedule's page starting at it (a fan-out delivery's, at its topic occurrence), and an id
that is none, or another tenant's, is said to be so."""

from __future__ import annotations

import re
import uuid
from datetime import UTC, datetime, timedelta

import pytest
from markupsafe import escape

from tests.conftest import STORES
from tests.integration.conftest import Harness
from tests.integration.ui.test_tenant_pages import create_in

pytestmark = pytest.mark.parametrize("database_url", STORES[:1], indirect=True)


async def _found(harness: Harness, text: str) -> str:
    """Where the search for `text` leads."""
    answer = await harness.client.get("/ui/find", params={"id": text})
    assert answer.status_code == 303, answer.text
    return answer.headers["location"]


async def test_a_schedule_id_goes_to_its_page_and_an_occurrence_id_to_its_row(
    harness: Harness,
) -> None:
    start = datetime.now(UTC) - timedelta(hours=1)
    schedule = await harness.create(
        trigger={"type": "interval", "every_seconds": 60, "start_at": start.isoformat()}
    )
    found = await _found(harness, f"  {schedule['id'].upper()} ")
    assert found == f"/ui/schedules/{schedule['id']}"

    # An occurrence deep in the list (past ticks backfilled): the page starts at its row.
    backfill = await harness.client.post(
        f"/v1/schedules/{schedule['id']}/backfill",
        json={"from": start.isoformat(), "to": (start + timedelta(minutes=40)).isoformat()},
    )
    assert backfill.status_code in (200, 202), backfill.text
    listed = await harness.get(f"/v1/schedules/{schedule['id']}/occurrences?limit=100")
    assert len(listed["items"]) > 25
    wanted = listed["items"][25]["occurrence_id"]
    where = await _found(harness, wanted)
    assert where.startswith(f"/ui/schedules/{schedule['id']}?cursor=")
    assert where.endswith(f"#o-{wanted}")
    page = (await harness.client.get(where)).text
    rows = re.findall(r'<tr id="o-([0-9a-f-]{36})">', page)
    assert rows[0] == wanted
    assert rows == [o["occurrence_id"] for o in listed["items"][25 : 25 + len(rows)]]


async def test_a_fan_out_delivery_id_goes_to_its_topic_occurrence(harness: Harness) -> None:
    await harness.client.put("/v1/topics/billing", json={})
    endpoint = await harness.client.post(
        "/v1/endpoints", json={"url": harness.receiver.url("/billing")}
    )
    made = await harness.client.post(
        "/v1/subscriptions", json={"topic": "billing", "endpoint_id": endpoint.json()["id"]}
    )
    assert made.status_code == 201, made.text
    schedule = await harness.create(target={"type": "topic", "topic": "billing"})
    await harness.step()
    (occurrence,) = await harness.occurrences(schedule["id"])
    read = await harness.get(f"/v1/occurrences/{occurrence['occurrence_id']}")
    (delivery,) = read["deliveries"]

    where = await _found(harness, delivery["delivery_id"])
    assert where.startswith(f"/ui/schedules/{schedule['id']}?cursor=")
    assert where.endswith(f"#o-{occurrence['occurrence_id']}")


async def test_an_id_that_is_none_or_another_tenants_is_said_to_be_so(harness: Harness) -> None:
    assert (await harness.client.put("/v1/tenants/globex", json={})).status_code == 201
    theirs = await create_in(harness, "globex", "theirs")
    # Found in its own tenant, by the console's tenant parameter.
    mine = await harness.client.get("/ui/find", params={"id": theirs["id"], "tenant": "globex"})
    assert mine.headers["location"] == f"/ui/schedules/{theirs['id']}?tenant=globex"
    for text in (theirs["id"], theirs["next_occurrence_id"], str(uuid.uuid4())):
        answer = await harness.client.get("/ui/find", params={"id": text})
        assert answer.status_code == 404, (text, answer.headers.get("location"))
        assert f"no schedule or occurrence {text} in tenant default" in answer.text
    for text, shown in (("nope", "'nope'"), ("x" * 46, "46 characters"), ("<b>", "'<b>'")):
        refused = await harness.client.get("/ui/find", params={"id": text})
        assert refused.status_code == 422
        assert str(escape(f"id: {shown} is not an id")) in refused.text
    empty = await harness.client.get("/ui/find", params={"id": " "})
    assert (empty.status_code, empty.headers["location"]) == (303, "/ui/schedules")
    # The box is in every page's header.
    assert 'action="/ui/find"' in (await harness.client.get("/ui/schedules")).text
