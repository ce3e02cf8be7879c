"""Names and labels as people type them: kept in Unicode NFC, found in either canonical
spelling, and refused with characters that do not show (Unicode Cf, and controls)."""

from __future__ import annotations

import unicodedata
import uuid
from typing import Any

import httpx
import pytest
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

from app.store.schema.tables import schedules
from tests.integration.conftest import Harness

NFC = unicodedata.normalize("NFC", "café")
NFD = unicodedata.normalize("NFD", "café")
LATER = {"type": "once", "at": "2099-01-01T00:00:00Z"}
INVISIBLE = [
    pytest.param("\u200b", id="zero-width space"),
    pytest.param("\ufeff", id="byte-order mark"),
    pytest.param("\u00ad", id="soft hyphen"),
    pytest.param("\u202e", id="right-to-left override"),
    pytest.param("\u2066", id="left-to-right isolate"),
    pytest.param("\U000e0041", id="tag letter"),
]


async def _create(harness: Harness, **spec: Any) -> httpx.Response:
    body = {"event_type": "x", "target": harness.webhook(), "trigger": LATER, **spec}
    return await harness.client.post("/v1/schedules", json=body)


async def _names(harness: Harness, query: str) -> list[str]:
    response = await harness.client.get("/v1/schedules", params={"name": query})
    assert response.status_code == 200, response.text
    return [item["name"] for item in response.json()["items"]]


def _refused(response: httpx.Response, pointer: str) -> None:
    assert response.status_code == 422, response.text
    assert [e["pointer"] for e in response.json()["errors"]] == [pointer]
    assert "invisible character" in response.text


async def test_a_name_and_its_labels_are_kept_in_nfc_and_found_either_way(
    harness: Harness,
) -> None:
    created = await harness.create(name=NFD, labels={NFD: NFD}, trigger=LATER)
    again = await _create(harness, name=NFC)

    assert (created["name"], created["labels"]) == (NFC, {NFC: NFC})
    # Names are unique: the other spelling is the same name.
    assert again.status_code == 409, again.text
    assert [e["pointer"] for e in again.json()["errors"]] == ["#/name"]
    assert await _names(harness, NFC) == [NFC]
    assert await _names(harness, NFD) == [NFC]
    for spelt in (NFC, NFD):
        by_label = await harness.get(f"/v1/schedules?label={spelt}:{spelt}")
        assert [s["id"] for s in by_label["items"]] == [created["id"]]


async def test_a_patched_label_is_kept_in_nfc(harness: Harness) -> None:
    created = await harness.create(name="plain", trigger=LATER)

    response = await harness.client.patch(
        f"/v1/schedules/{created['id']}", json={"labels": {NFD: NFD}}
    )

    assert response.status_code == 200, response.text
    assert response.json()["labels"] == {NFC: NFC}


@pytest.mark.parametrize("character", INVISIBLE)
async def test_a_name_with_an_invisible_character_is_refused(
    harness: Harness, character: str
) -> None:
    response = await _create(harness, name=f"pay{character}roll")

    _refused(response, "#/name")
    assert (await harness.get("/v1/schedules"))["items"] == []


@pytest.mark.parametrize("character", INVISIBLE)
@pytest.mark.parametrize("where", ["key", "value"])
async def test_a_label_with_an_invisible_character_is_refused(
    harness: Harness, character: str, where: str
) -> None:
    labels = {f"team{character}": "a"} if where == "key" else {"team": f"a{character}"}
    created = await harness.create(name="payroll", trigger=LATER)

    made = await _create(harness, labels=labels)
    patched = await harness.client.patch(f"/v1/schedules/{created['id']}", json={"labels": labels})

    _refused(made, "#/labels")
    _refused(patched, "#/labels")
    (only,) = (await harness.get("/v1/schedules"))["items"]
    assert (only["name"], only["labels"], only["version"]) == ("payroll", {}, 1)


async def test_two_label_keys_alike_in_nfc_are_refused(harness: Harness) -> None:
    response = await _create(harness, labels={NFC: "1", NFD: "2"})

    assert response.status_code == 422, response.text
    assert [e["pointer"] for e in response.json()["errors"]] == ["#/labels"]
    assert (await harness.get("/v1/schedules"))["items"] == []


async def test_names_stored_before_keep_working(harness: Harness) -> None:
    decomposed = await harness.create(name="one", trigger=LATER)
    hidden = await harness.create(name="two", trigger=LATER)

    async def store_as_before(conn: AsyncConnection) -> None:
        for created, name in ((decomposed, NFD), (hidden, "pay\u200broll")):
            await conn.execute(
                sa.update(schedules)
                .where(schedules.c.id == uuid.UUID(created["id"]))
                .values(name=name)
            )

    await harness.database.run(store_as_before)

    assert await _names(harness, NFC) == [NFD]
    assert (await _create(harness, name=NFC)).status_code == 409
    assert await _names(harness, "pay\u200broll") == ["pay\u200broll"]
    assert (await harness.get(f"/v1/schedules/{hidden['id']}"))["name"] == "pay\u200broll"
    changed = await harness.client.patch(
        f"/v1/schedules/{hidden['id']}", json={"payload": {"n": 2}}
    )
    assert changed.status_code == 200, changed.text
    assert changed.json()["name"] == "pay\u200broll"
