"""Tenant keys across served replicas on PostgreSQL: a key made through one replica works on
another, and a revocation through one is refused by every replica within 5 seconds."""

from __future__ import annotations

import time

import httpx
import pytest

from tests.e2e.processes import Services

pytestmark = [pytest.mark.e2e, pytest.mark.postgres]

OPERATOR = "0123456789abcdef-e2e-operator"


@pytest.mark.parametrize("database_url", ["postgresql"], indirect=True)
async def test_a_revocation_holds_on_every_replica_within_five_seconds(
    database_url: str, services: Services
) -> None:
    variables = {
        "DATABASE_URL": database_url,
        "CHRONOQ_API_KEYS": f"ops:{OPERATOR}",
        "CHRONOQ_WORKER_ENABLED": "false",
    }
    first = await services.start("first", variables)
    second = await services.start("second", variables)
    operator = {"Authorization": f"Bearer {OPERATOR}"}
    async with httpx.AsyncClient(trust_env=False, timeout=30.0) as client:
        made = await client.put(f"{first.base_url}/v1/tenants/acme", json={}, headers=operator)
        assert made.status_code == 201, made.text
        key = await client.post(
            f"{first.base_url}/v1/tenants/acme/keys",
            json={"name": "deploy-bot", "role": "write"},
            headers=operator,
        )
        assert key.status_code == 201, key.text
        tenant = {"Authorization": f"Bearer {key.json()['key']}"}
        for replica in (first, second):  # each remembers the key as valid
            seen = await client.get(f"{replica.base_url}/v1/schedules", headers=tenant)
            assert seen.status_code == 200, seen.text

        revoked = await client.delete(
            f"{second.base_url}/v1/tenants/acme/keys/{key.json()['id']}", headers=operator
        )
        assert revoked.status_code == 204, revoked.text
        at = time.monotonic()
        refused_after: dict[str, float] = {}
        while len(refused_after) < 2 and time.monotonic() - at < 10:
            for replica in (first, second):
                if replica.base_url in refused_after:
                    continue
                answer = await client.get(f"{replica.base_url}/v1/schedules", headers=tenant)
                if answer.status_code == 401:
                    refused_after[replica.base_url] = time.monotonic() - at
                else:
                    assert answer.status_code == 200, answer.text
        assert set(refused_after) == {first.base_url, second.base_url}, refused_after
        assert max(refused_after.values()) < 5.0, refused_after
