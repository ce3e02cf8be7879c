"""Tenants in the console: the tenant its address names (`tenant=`), kept by every link,
form and redirect; the header's switcher; a tenant key kept to its own tenant; the tenants
list and one tenant's page with its Pause/Resume button and settings form."""

from __future__ import annotations

import html
import re
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest

from tests.conftest import STORES
from tests.integration.conftest import Harness
from tests.integration.ui.pages import KEYS, READER, WRITER, basic, post_form, spec, token_of

pytestmark = pytest.mark.parametrize("database_url", STORES[:1], indirect=True)

OPERATOR = {"Authorization": f"Bearer {WRITER}"}
SETTINGS = {
    "weight": "1",
    "max_schedules": "",
    "max_creates_per_minute": "",
    "max_deliveries_per_second": "",
    "max_in_flight": "",
    "retention_seconds": "",
}


@pytest.fixture
async def keyed(make_harness: Callable[..., Any]) -> AsyncIterator[Harness]:
    """The app with keys, and the tenants acme and zeta."""
    async with make_harness(api_keys=KEYS) as harness:
        for tenant in ("acme", "zeta"):
            made = await harness.client.put(f"/v1/tenants/{tenant}", json={}, headers=OPERATOR)
            assert made.status_code == 201, made.text
        yield harness


async def tenant_key(harness: Harness, tenant: str, role: str = "write") -> dict[str, str]:
    """Basic credentials of a new key of `tenant`, as a browser sends them."""
    made = await harness.client.post(
        f"/v1/tenants/{tenant}/keys",
        json={"name": f"portal-{role}", "role": role},
        headers=OPERATOR,
    )
    assert made.status_code == 201, made.text
    return basic(made.json()["key"])


async def create_in(harness: Harness, tenant: str, name: str) -> dict[str, Any]:
    response = await harness.client.post(
        "/v1/schedules", json=spec(harness, name=name), headers={"Chronoq-Tenant": tenant}
    )
    assert response.status_code == 201, response.text
    created: dict[str, Any] = response.json()
    return created


def tenant_shown(page: str) -> str:
    found = re.search(r'<b id="tenant">([^<]*)</b>', page)
    assert found is not None, "the header names no tenant"
    return found.group(1)


def field_error(page: str, name: str) -> str | None:
    found = re.search(rf'<span class="field-error" id="error-{name}">([^<]*)</span>', page)
    return html.unescape(found.group(1)) if found else None


def form_value(page: str, name: str) -> str:
    found = re.search(rf'<input id="edit-{name}" name="{name}" value="([^"]*)"', page)
    assert found is not None, f"the form has no {name}"
    return found.group(1)


async def test_the_console_shows_the_tenant_its_address_names_and_keeps_it(
    harness: Harness,
) -> None:
    await harness.client.put("/v1/tenants/acme", json={"display_name": "Acme Corp"})
    theirs = await create_in(harness, "acme", "acme-report")
    ours = await harness.create(**spec(harness, name="our-report"))

    default = (await harness.client.get("/ui/schedules")).text
    assert tenant_shown(default) == "default"
    assert ours["id"] in default
    assert theirs["id"] not in default

    page = (await harness.client.get("/ui/schedules?tenant=acme")).text
    assert tenant_shown(page) == "acme"
    assert theirs["id"] in page
    assert ours["id"] not in page
    # Links, the filter form and the header keep the tenant.
    assert f'href="/ui/schedules/{theirs["id"]}?tenant=acme"' in page
    assert '<a href="/ui/dead-letters?tenant=acme">Dead letters</a>' in page
    assert 'href="/ui/schedules?failing=true&amp;sort=failures&amp;tenant=acme"' in page
    assert '<input type="hidden" name="tenant" value="acme">' in page
    assert '<option value="acme" selected>acme · Acme Corp</option>' in page

    one = (await harness.client.get(f"/ui/schedules/{theirs['id']}?tenant=acme")).text
    assert f'action="/ui/schedules/{theirs["id"]}/pause?tenant=acme"' in one
    assert f'href="/ui/schedules/{theirs["id"]}?tenant=acme#events"' not in one  # first page
    paused = await post_form(
        harness, f"/ui/schedules/{theirs['id']}/pause?tenant=acme", {"token": token_of(one)}
    )
    assert paused.status_code == 303
    assert paused.headers["location"] == f"/ui/schedules/{theirs['id']}?done=paused&tenant=acme"
    mine = await harness.client.get(
        f"/v1/schedules/{theirs['id']}", headers={"Chronoq-Tenant": "acme"}
    )
    assert mine.json()["status"] == "paused"
    # In the default tenant, acme's schedule is one that does not exist.
    assert (await harness.client.get(f"/ui/schedules/{theirs['id']}")).status_code == 404


async def test_the_default_tenant_named_or_not_keeps_addresses_as_they_were(
    harness: Harness,
) -> None:
    ours = await harness.create(**spec(harness, name="our-report"))
    for path in ("/ui/schedules", "/ui/schedules?tenant=default", "/ui/schedules?tenant="):
        page = (await harness.client.get(path)).text
        assert tenant_shown(page) == "default"
        assert f'href="/ui/schedules/{ours["id"]}"' in page
        assert 'name="tenant"' not in page


@pytest.mark.parametrize(
    ("query", "status", "detail"),
    [
        ("tenant=nobody", 404, "tenant nobody does not exist: choose another in the header."),
        ("tenant=Not_A_Tenant", 422, "'Not_A_Tenant' is not a tenant id: a tenant id is"),
        ("tenant=acme&tenant=zeta", 422, "The address names more than one tenant."),
    ],
)
async def test_a_tenant_that_cannot_be_shown_is_a_page_saying_why(
    harness: Harness, query: str, status: int, detail: str
) -> None:
    await harness.client.put("/v1/tenants/acme", json={})
    for path in ("/ui/schedules", "/ui/dead-letters", "/ui/flow-keys", "/ui/tenants"):
        response = await harness.client.get(f"{path}?{query}")
        assert response.status_code == status
        assert response.headers["content-type"].startswith("text/html")
        assert detail in html.unescape(response.text)
        # Its header is the default tenant's, with the switcher to choose another.
        assert tenant_shown(response.text) == "default"
        assert 'id="switcher"' in response.text


async def test_a_post_to_a_tenant_that_does_not_exist_changes_nothing(harness: Harness) -> None:
    ours = await harness.create(**spec(harness))
    page = f"/ui/schedules/{ours['id']}"
    token = token_of((await harness.client.get(page)).text)
    refused = await post_form(harness, f"{page}/pause?tenant=nobody", {"token": token})
    assert refused.status_code == 404
    assert (await harness.get(f"/v1/schedules/{ours['id']}"))["status"] == "pending"


@pytest.mark.parametrize(
    ("query", "location"),
    [
        ("choice=acme&other=&to=dead-letters", "/ui/dead-letters?tenant=acme"),
        ("choice=acme&other=zeta&to=flow-keys", "/ui/flow-keys?tenant=zeta"),
        ("choice=default&other=&to=tenants", "/ui/tenants"),
        ("choice=acme&to=https://elsewhere.example", "/ui/schedules?tenant=acme"),
        ("choice=acme", "/ui/schedules?tenant=acme"),
    ],
)
async def test_the_switcher_goes_to_the_list_it_was_on_in_the_tenant_chosen_or_typed(
    harness: Harness, query: str, location: str
) -> None:
    response = await harness.client.get(f"/ui/switch?{query}")
    assert response.status_code == 303
    assert response.headers["location"] == location


async def test_the_switcher_lists_the_tenants_and_the_one_shown(harness: Harness) -> None:
    for tenant in ("acme", "zeta"):
        await harness.client.put(f"/v1/tenants/{tenant}", json={})
    page = (await harness.client.get("/ui/dead-letters?tenant=zeta")).text
    options = re.findall(r'<option value="([^"]*)"( selected)?>', page.partition("<main>")[0])
    assert options == [("acme", ""), ("default", ""), ("zeta", " selected")]
    assert '<input type="hidden" name="to" value="dead-letters">' in page


async def test_a_tenant_key_has_no_switcher_and_another_tenant_is_refused(keyed: Harness) -> None:
    login = await tenant_key(keyed, "acme")
    page = await keyed.client.get("/ui/schedules", headers=login)
    assert page.status_code == 200
    assert tenant_shown(page.text) == "acme"
    assert 'id="switcher"' not in page.text
    assert '<a href="/ui/tenants/acme">Tenant</a>' in page.text
    own = await keyed.client.get("/ui/schedules?tenant=acme", headers=login)
    assert own.status_code == 200
    for path in ("/ui/schedules?tenant=zeta", "/ui/switch?choice=zeta", "/ui/tenants/zeta"):
        refused = await keyed.client.get(path, headers=login, follow_redirects=True)
        assert refused.status_code == 403, path
        assert "this key acts in tenant acme only" in refused.text
        assert 'id="switcher"' not in refused.text
    # As the API refuses the header.
    api = await keyed.client.get("/v1/schedules", headers={"Chronoq-Tenant": "zeta", **login})
    assert (api.status_code, api.json()["detail"]) == (403, "this key acts in tenant acme only")


async def test_a_tenant_key_is_sent_to_its_tenants_page_and_reads_it_only(keyed: Harness) -> None:
    login = await tenant_key(keyed, "acme")
    listed = await keyed.client.get("/ui/tenants", headers=login)
    assert listed.status_code == 303
    assert listed.headers["location"] == "/ui/tenants/acme"
    page = await keyed.client.get("/ui/tenants/acme", headers=login)
    assert page.status_code == 200
    assert 'id="usage-schedules"' in page.text
    main = page.text.partition("<main>")[2]
    assert 'method="post"' not in main
    assert "<button" not in main
    assert 'href="/ui/tenants"' not in page.text  # no list of tenants for it
    # Its key can write in its tenant, yet manages no tenant.
    token = token_of((await keyed.client.get("/ui/dead-letters", headers=login)).text)
    for action, fields in (("pause", {}), ("settings", {"version": "1", **SETTINGS})):
        refused = await post_form(
            keyed, f"/ui/tenants/acme/{action}", {"token": token, **fields}, login
        )
        assert refused.status_code == 403
        assert "a tenant&#39;s key manages no tenant" in refused.text
    tenant = (await keyed.client.get("/v1/tenants/acme", headers=OPERATOR)).json()
    assert (tenant["version"], tenant["paused"]) == (1, False)


async def test_the_tenants_list_shows_each_tenant_with_its_figures(harness: Harness) -> None:
    await harness.client.put(
        "/v1/tenants/acme", json={"display_name": "Acme Corp", "weight": 3, "paused": True}
    )
    await create_in(harness, "acme", "one")
    await create_in(harness, "acme", "two")
    page = (await harness.client.get("/ui/tenants?tenant=acme")).text
    rows = re.findall(r"<tr>\s*(<td>.*?)</tr>", page, re.S)
    cells = [
        "|".join(
            re.sub(r"<[^>]+>", "", cell).strip()
            for cell in re.findall(r"<td>(.*?)</td>", row, re.S)
        )
        for row in rows
    ]
    assert cells == ["acme|Acme Corp|3|paused|2|0|0|Open", "default||1|no|0|0|0|Open"]
    assert '<a href="/ui/tenants/acme?tenant=acme">acme</a>' in page
    assert 'href="/ui/schedules?tenant=acme" class="open"' in page
    assert 'href="/ui/schedules" class="open"' in page


async def test_the_tenant_page_shows_its_usage_and_settings_as_the_api_does(
    harness: Harness,
) -> None:
    await harness.client.put(
        "/v1/tenants/acme",
        json={
            "weight": 4,
            "quotas": {"max_schedules": 10, "max_in_flight": 2},
            "retention_seconds": 604800,
        },
    )
    await create_in(harness, "acme", "one")
    page = (await harness.client.get("/ui/tenants/acme")).text
    usage = (await harness.get("/v1/tenants/acme"))["usage"]
    for name, value in usage.items():
        assert f'<dd id="usage-{name}">{value}</dd>' in page
    assert '<dd id="weight">4</dd>' in page
    assert '<dd id="quota-max_schedules">10</dd>' in page
    assert '<dd id="quota-max_deliveries_per_second">no limit</dd>' in page
    assert '<dd id="retention">7 d (604800 s)</dd>' in page
    assert 'action="/ui/tenants/acme/pause"' in page
    assert form_value(page, "max_in_flight") == "2"
    assert form_value(page, "max_creates_per_minute") == ""
    assert 'href="/ui/schedules?tenant=acme" id="tenant-schedules"' in page


async def test_the_default_tenants_page_has_no_pause_and_no_delivery_quotas(
    harness: Harness,
) -> None:
    page = (await harness.client.get("/ui/tenants/default")).text
    assert 'id="press"' not in page
    assert "/pause" not in page
    assert 'id="settings-form"' in page
    for name in ("max_deliveries_per_second", "max_in_flight"):
        assert f'name="{name}"' not in page
        assert f'id="quota-{name}"' not in page
    # A form made up to set one anyway is refused by the service, naming it; nothing stored.
    token = token_of(page)
    fields = {"token": token, "version": "1", **SETTINGS, "max_in_flight": "5"}
    refused = await post_form(harness, "/ui/tenants/default/settings", fields)
    assert refused.status_code == 422
    assert "max_in_flight: the default tenant is never paused" in html.unescape(refused.text)
    pressed = await post_form(harness, "/ui/tenants/default/pause", {"token": token})
    assert pressed.status_code == 422
    tenant = await harness.get("/v1/tenants/default")
    assert (tenant["version"], tenant["paused"], tenant["quotas"]["max_in_flight"]) == (
        1,
        False,
        None,
    )


async def test_the_settings_form_saves_the_whole_tenant_keeping_its_name_and_pause(
    harness: Harness,
) -> None:
    await harness.client.put("/v1/tenants/acme", json={"display_name": "Acme", "paused": True})
    page = (await harness.client.get("/ui/tenants/acme?tenant=acme")).text
    fields = {
        "token": token_of(page),
        "version": "1",
        **SETTINGS,
        "weight": "7",
        "max_schedules": "100",
        "max_deliveries_per_second": "20",
        "retention_seconds": "0",
    }
    saved = await post_form(harness, "/ui/tenants/acme/settings?tenant=acme", fields)
    assert saved.status_code == 303
    assert saved.headers["location"] == "/ui/tenants/acme?done=saved&tenant=acme"
    tenant = await harness.get("/v1/tenants/acme")
    assert tenant["version"] == 2
    assert (tenant["display_name"], tenant["paused"], tenant["weight"]) == ("Acme", True, 7)
    assert tenant["quotas"] == {
        "max_schedules": 100,
        "max_creates_per_minute": None,
        "max_deliveries_per_second": 20,
        "max_in_flight": None,
    }
    assert tenant["retention_seconds"] == 0
    shown = (await harness.client.get(saved.headers["location"])).text
    assert "Settings saved." in shown
    assert '<dd id="retention">forever</dd>' in shown


async def test_every_refused_field_is_named_beside_it_and_nothing_is_stored(
    harness: Harness,
) -> None:
    await harness.client.put("/v1/tenants/acme", json={"weight": 2})
    page = (await harness.client.get("/ui/tenants/acme")).text
    fields = {
        "token": token_of(page),
        "version": "1",
        **SETTINGS,
        "weight": "101",
        "max_schedules": "0",
        "max_creates_per_minute": "ten",
        "max_in_flight": "12",
        "retention_seconds": "-1",
    }
    refused = await post_form(harness, "/ui/tenants/acme/settings", fields)
    assert refused.status_code == 422
    text = refused.text
    assert "Nothing was saved: the fields marked below are refused." in text
    assert field_error(text, "weight") == "Input should be less than or equal to 100"
    assert field_error(text, "max_schedules") == "Input should be greater than or equal to 1"
    assert field_error(text, "max_creates_per_minute") == "a whole number, or empty for no limit"
    assert field_error(text, "retention_seconds") == (
        "a whole number of seconds, or empty for the setting's"
    )
    assert field_error(text, "max_in_flight") is None
    assert 'aria-invalid="true" aria-describedby="error-weight" autofocus' in text
    # What was typed is shown again.
    assert form_value(text, "max_creates_per_minute") == "ten"
    assert form_value(text, "max_in_flight") == "12"
    tenant = await harness.get("/v1/tenants/acme")
    assert (tenant["version"], tenant["weight"], tenant["quotas"]["max_in_flight"]) == (1, 2, None)


async def test_a_stale_form_is_refused_and_shows_the_tenant_as_it_is(harness: Harness) -> None:
    await harness.client.put("/v1/tenants/acme", json={"weight": 2})
    page = (await harness.client.get("/ui/tenants/acme")).text
    await harness.client.put("/v1/tenants/acme", json={"weight": 5})
    fields = {"token": token_of(page), "version": "1", **SETTINGS, "weight": "9"}
    refused = await post_form(harness, "/ui/tenants/acme/settings", fields)
    assert refused.status_code == 409
    assert "This tenant changed since the page was loaded: nothing was saved." in refused.text
    assert form_value(refused.text, "weight") == "5"
    assert '<input type="hidden" name="version" value="2">' in refused.text
    assert (await harness.get("/v1/tenants/acme"))["weight"] == 5


async def test_pause_and_resume_flip_the_tenant_as_it_is_now(harness: Harness) -> None:
    await harness.client.put("/v1/tenants/acme", json={"weight": 2})
    page = (await harness.client.get("/ui/tenants/acme")).text
    # A change made after the page was loaded is kept by the press.
    await harness.client.put("/v1/tenants/acme", json={"weight": 6})
    paused = await post_form(harness, "/ui/tenants/acme/pause", {"token": token_of(page)})
    assert paused.status_code == 303
    assert paused.headers["location"] == "/ui/tenants/acme?done=paused"
    tenant = await harness.get("/v1/tenants/acme")
    assert (tenant["paused"], tenant["weight"], tenant["version"]) == (True, 6, 3)
    shown = (await harness.client.get("/ui/tenants/acme?done=paused")).text
    assert '<span class="status status-paused" id="state">paused</span>' in shown
    assert 'action="/ui/tenants/acme/resume"' in shown
    resumed = await post_form(harness, "/ui/tenants/acme/resume", {"token": token_of(shown)})
    assert resumed.status_code == 303
    assert (await harness.get("/v1/tenants/acme"))["paused"] is False


async def test_a_read_key_sees_the_tenant_pages_without_a_form(
    make_harness: Callable[..., Any],
) -> None:
    async with make_harness(api_keys=KEYS) as h:
        await h.client.put("/v1/tenants/acme", json={}, headers=OPERATOR)
        for path in ("/ui/tenants", "/ui/tenants/acme"):
            page = (await h.client.get(path, headers=basic(READER))).text
            assert "acme" in page
            assert 'method="post"' not in page
            assert 'id="switcher"' in page
        written = (await h.client.get("/ui/tenants/acme", headers=basic(WRITER))).text
        token = token_of(written)
        refused = await post_form(h, "/ui/tenants/acme/pause", {"token": token}, basic(READER))
        assert refused.status_code == 403
        tenant = (await h.client.get("/v1/tenants/acme", headers=OPERATOR)).json()
        assert tenant["paused"] is False


async def test_an_unknown_or_malformed_tenant_page_is_a_404_page(harness: Harness) -> None:
    missing = await harness.client.get("/ui/tenants/nobody")
    assert missing.status_code == 404
    assert "tenant nobody does not exist" in missing.text
    malformed = await harness.client.get("/ui/tenants/<b>x")
    assert malformed.status_code == 404
    assert "<b>x" not in malformed.text
