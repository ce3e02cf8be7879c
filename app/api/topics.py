"""Routes under /v1/topics and /v1/subscriptions: topics put, read, listed and removed;
endpoints subscribed to them, with what each takes (DESIGN section 15). A schedule that
targets a topic fans each occurrence out to the subscriptions that match it then."""

from __future__ import annotations

import uuid
from typing import Annotated

from fastapi import APIRouter, Body, Path, Query, Response, status

from app.api import examples, pages
from app.api.deps import CallerDep, CursorQuery, LimitQuery, TopicsDep
from app.api.problems import responses
from app.api.schemas import Page
from app.api.topic_schemas import (
    SubscriptionIn,
    SubscriptionOut,
    SubscriptionPatch,
    TopicIn,
    TopicOut,
)
from app.api.versions import if_match_header, versions

topics_router = APIRouter(prefix="/v1/topics", tags=["topics"])
subscriptions_router = APIRouter(prefix="/v1/subscriptions", tags=["topics"])

TopicPath = Annotated[
    str,
    Path(
        min_length=1,
        max_length=128,
        pattern=r"^[A-Za-z0-9._:-]+$",
        description="The topic's name (1-128 of A-Z a-z 0-9 . _ : -)",
        examples=["billing"],
    ),
]
SubscriptionIdPath = Annotated[uuid.UUID, Path(description="The subscription's id")]
TopicIfMatch = Annotated[str | None, if_match_header("the topic")]
SubscriptionIfMatch = Annotated[str | None, if_match_header("the subscription")]


@topics_router.put("/{topic}", responses={201: {"model": TopicOut}, **responses(412, 422)})
async def put_topic(
    topic: TopicPath,
    body: Annotated[TopicIn, Body(openapi_examples=examples.TOPIC)],
    service: TopicsDep,
    caller: CallerDep,
    response: Response,
    if_match: TopicIfMatch = None,
) -> TopicOut:
    """Create (201) or replace (200) the topic."""
    found, created = await service.put(topic, body.description, versions(if_match), caller)
    if created:
        response.status_code = status.HTTP_201_CREATED
    response.headers["ETag"] = f'"{found.version}"'
    return TopicOut.of(found)


@topics_router.get("", responses=responses(422))
async def list_topics(
    service: TopicsDep, caller: CallerDep, limit: LimitQuery = 50, cursor: CursorQuery = None
) -> Page[TopicOut]:
    """The tenant's topics in name order."""
    return await pages.topics(service, caller, limit, cursor)


@topics_router.get("/{topic}", responses=responses(404, 422))
async def get_topic(
    topic: TopicPath, service: TopicsDep, caller: CallerDep, response: Response
) -> TopicOut:
    found = await service.get(topic, caller)
    response.headers["ETag"] = f'"{found.version}"'
    return TopicOut.of(found)


@topics_router.delete(
    "/{topic}", status_code=status.HTTP_204_NO_CONTENT, responses=responses(404, 409, 412, 422)
)
async def delete_topic(
    topic: TopicPath, service: TopicsDep, caller: CallerDep, if_match: TopicIfMatch = None
) -> None:
    """Remove the topic and its subscriptions: refused (409) while a pending or paused
    schedule targets it."""
    await service.delete(topic, versions(if_match), caller)


@subscriptions_router.post("", status_code=status.HTTP_201_CREATED, responses=responses(422))
async def create_subscription(
    body: Annotated[SubscriptionIn, Body(openapi_examples=examples.SUBSCRIPTION)],
    service: TopicsDep,
    caller: CallerDep,
    response: Response,
) -> SubscriptionOut:
    """Subscribe an endpoint to a topic: every occurrence of the topic that matches it from
    now on fans out a delivery to it."""
    found = await service.subscribe(body.spec(), caller)
    response.headers["ETag"] = f'"{found.version}"'
    return SubscriptionOut.of(found)


@subscriptions_router.get("", responses=responses(422))
async def list_subscriptions(
    service: TopicsDep,
    caller: CallerDep,
    topic: Annotated[
        str | None,
        Query(
            min_length=1,
            max_length=128,
            pattern=r"^[A-Za-z0-9._:-]+$",
            description="Only this topic's subscriptions",
        ),
    ] = None,
    limit: LimitQuery = 50,
    cursor: CursorQuery = None,
) -> Page[SubscriptionOut]:
    """The tenant's subscriptions, oldest first."""
    return await pages.subscriptions(service, caller, topic, limit, cursor)


@subscriptions_router.get("/{subscription_id}", responses=responses(404, 422))
async def get_subscription(
    subscription_id: SubscriptionIdPath, service: TopicsDep, caller: CallerDep, response: Response
) -> SubscriptionOut:
    found = await service.subscription(subscription_id, caller)
    response.headers["ETag"] = f'"{found.version}"'
    return SubscriptionOut.of(found)


@subscriptions_router.patch("/{subscription_id}", responses=responses(404, 412, 422))
async def patch_subscription(
    subscription_id: SubscriptionIdPath,
    body: Annotated[SubscriptionPatch, Body(openapi_examples=examples.SUBSCRIPTION_PATCH)],
    service: TopicsDep,
    caller: CallerDep,
    response: Response,
    if_match: SubscriptionIfMatch = None,
) -> SubscriptionOut:
    """Change what it takes or where it goes: occurrences that fan out after it."""
    found = await service.change(subscription_id, body.changes(), versions(if_match), caller)
    response.headers["ETag"] = f'"{found.version}"'
    return SubscriptionOut.of(found)


@subscriptions_router.delete(
    "/{subscription_id}",
    status_code=status.HTTP_204_NO_CONTENT,
    responses=responses(404, 412, 422),
)
async def delete_subscription(
    subscription_id: SubscriptionIdPath,
    service: TopicsDep,
    caller: CallerDep,
    if_match: SubscriptionIfMatch = None,
) -> None:
    """Unsubscribe: occurrences that fan out after it make no delivery to it (those made
    already go on)."""
    await service.unsubscribe(subscription_id, versions(if_match), caller)
