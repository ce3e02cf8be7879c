"""The console's create form: a schedule of any trigger (immediate, once, cron, interval) to
a webhook, an endpoint or a topic, with its payload, flow key, attempts, labels and headers,
sent as POST /v1/schedules would be; and the next fire times of the trigger being typed
(`preview`), as POST /v1/triggers/preview computes them.

The form's fields become the API's body here, and the body is read by the API's own model
(`ScheduleSpec`) and created by the same service call: the console refuses what the API
refuses, each refused field shown beside its input, and stores nothing while any is.
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, Response
from pydantic import ValidationError

from app.api.deps import SchedulesDep
from app.api.problem_details import validation_message
from app.api.trigger_schemas import PreviewRequest
from app.api.triggers import preview_fire_times
from app.domain.errors import ChronoqError, InvalidInputError
from app.domain.schedule import ScheduleSpec
from app.ui.forms import Viewer
from app.ui.frame import PageFrame, back, status_of
from app.ui.schedule_edit import RefusedError, parse_headers, parse_labels
from app.ui.tenancy import ViewerDep

TARGET_KINDS = ("webhook", "endpoint", "topic")
TRIGGER_TYPES = ("immediate", "once", "cron", "interval")
PREVIEWED = 5
# Longer than anything a field takes (a payload is checked by its own limit after).
MAX_FIELD = 300_000

# Every input of the form, with its value on an empty form.
BLANK = {
    "name": "",
    "event_type": "",
    "target_kind": "webhook",
    "target_url": "",
    "endpoint_id": "",
    "topic": "",
    "headers": "",
    "trigger_type": "cron",
    "at": "",
    "delay_seconds": "",
    "expression": "0 9 * * 1-5",
    "timezone": "UTC",
    "every_seconds": "",
    "start_at": "",
    "payload": "{}",
    "flow_key": "",
    "max_attempts": "",
    "labels": "",
}
# A field of the API's body, by the last name in its location, as the form's input.
_INPUTS = {
    "url": "target_url",
    "endpoint_id": "endpoint_id",
    "topic": "topic",
    "headers": "headers",
    "at": "at",
    "delay_seconds": "delay_seconds",
    "expression": "expression",
    "timezone": "timezone",
    "every_seconds": "every_seconds",
    "start_at": "start_at",
}
_TOP = {"name", "event_type", "payload", "flow_key", "max_attempts", "labels"}


def posted(fields: dict[str, list[str]]) -> dict[str, str]:
    """The form's values as typed (a field not sent: its blank value)."""
    return {
        name: (fields[name][0] if fields.get(name) else blank)[:MAX_FIELD]
        for name, blank in BLANK.items()
    }


def _number(text: str, name: str, errors: dict[str, str]) -> float | None:
    try:
        return float(text)
    except ValueError:
        errors[name] = "a number"
        return None


def trigger_body(form: dict[str, str], errors: dict[str, str]) -> dict[str, Any]:
    """The trigger the form describes, as the API's body has it."""
    kind = form["trigger_type"]
    if kind not in TRIGGER_TYPES:
        errors["trigger_type"] = f"one of {', '.join(TRIGGER_TYPES)}"
        return {"type": "immediate"}
    body: dict[str, Any] = {"type": kind}
    if kind == "once":
        if form["delay_seconds"].strip():
            body["delay_seconds"] = _number(form["delay_seconds"].strip(), "delay_seconds", errors)
        elif form["at"].strip():
            body["at"] = form["at"].strip()
        else:
            errors["at"] = "an instant (RFC 3339, with an offset), or a delay below"
    elif kind == "cron":
        body["expression"] = form["expression"].strip()
        body["timezone"] = form["timezone"].strip() or "UTC"
    elif kind == "interval":
        body["every_seconds"] = _number(form["every_seconds"].strip(), "every_seconds", errors)
    if kind in ("cron", "interval") and form["start_at"].strip():
        body["start_at"] = form["start_at"].strip()
    return body


def body_of(form: dict[str, str]) -> dict[str, Any]:
    """The API's body of the form; what the form itself cannot read (JSON, lines, numbers)
    raises RefusedError naming its inputs."""
    errors: dict[str, str] = {}
    kind = form["target_kind"]
    target: dict[str, Any]
    if kind == "endpoint":
        target = {"type": "endpoint", "endpoint_id": form["endpoint_id"].strip()}
    elif kind == "topic":
        target = {"type": "topic", "topic": form["topic"].strip()}
    else:
        if kind != "webhook":
            errors["target_kind"] = f"one of {', '.join(TARGET_KINDS)}"
        target = {"type": "webhook", "url": form["target_url"].strip()}
        headers = parse_headers(form["headers"])
        if isinstance(headers, str):
            errors["headers"] = headers
        elif headers:
            target["headers"] = headers
    body: dict[str, Any] = {
        "event_type": form["event_type"].strip(),
        "target": target,
        "trigger": trigger_body(form, errors),
    }
    if form["name"].strip():
        body["name"] = form["name"].strip()
    try:
        body["payload"] = json.loads(form["payload"] or "{}")
    except ValueError as exc:
        errors["payload"] = f"not JSON: {exc}"
    if form["flow_key"].strip():
        body["flow_key"] = form["flow_key"].strip()
    if form["max_attempts"].strip():
        attempts = form["max_attempts"].strip()
        if not attempts.isdigit() or len(attempts) > 9:
            errors["max_attempts"] = "a whole number"
        else:
            body["max_attempts"] = int(attempts)
    labels = parse_labels(form["labels"])
    if isinstance(labels, str):
        errors["labels"] = labels
    elif labels:
        body["labels"] = labels
    if errors:
        raise RefusedError(errors)
    return body


def input_of(location: tuple[Any, ...]) -> str:
    """The form's input for a location in the API's body ("": none of them)."""
    parts = [str(part) for part in location]
    if not parts:
        return ""
    if parts[0] in _TOP:
        return parts[0]
    if parts[0] in ("target", "trigger"):
        for part in reversed(parts[1:]):
            if part in _INPUTS:
                return _INPUTS[part]
        return "target_kind" if parts[0] == "target" else "trigger_type"
    return ""


def checked(body: dict[str, Any]) -> ScheduleSpec:
    """The body as the API reads it; each field it refuses raises RefusedError, by input."""
    try:
        return ScheduleSpec.model_validate(body)
    except ValidationError as exc:
        errors: dict[str, str] = {}
        for error in exc.errors():
            errors.setdefault(input_of(tuple(error["loc"])), validation_message(error))
        raise RefusedError(errors) from None


def refused_by_service(error: InvalidInputError) -> RefusedError:
    """A refusal of the service (a pointer into the body) as the form's."""
    pointer = (error.pointer or "").removeprefix("#/")
    return RefusedError({input_of(tuple(pointer.split("/"))) if pointer else "": error.detail})


@dataclass(frozen=True, slots=True)
class Preview:
    """The next fire times of the trigger typed, or why there are none."""

    times: list[datetime]
    error: str | None = None


def preview(form: dict[str, str], now: datetime | None = None) -> Preview:
    """The next `PREVIEWED` fire times of the form's trigger, as POST /v1/triggers/preview
    computes them (`preview_fire_times`)."""
    errors: dict[str, str] = {}
    body = trigger_body(form, errors)
    if errors:
        return Preview([], "; ".join(errors.values()))
    try:
        request = PreviewRequest.model_validate({"trigger": body, "count": PREVIEWED})
        return Preview(preview_fire_times(request, now or datetime.now(UTC)))
    except ValidationError as exc:
        return Preview([], "; ".join(validation_message(error) for error in exc.errors()))
    except ChronoqError as exc:
        return Preview([], exc.detail)


def add_create_routes(routes: APIRouter, frame: PageFrame) -> None:
    """The form's routes; before /ui/schedules/{id}, which would take "new" for an id."""

    async def page(
        request: Request,
        viewer: Viewer,
        form: dict[str, str],
        *,
        status: int = 200,
        invalid: dict[str, str] | None = None,
    ) -> HTMLResponse:
        if not viewer.can_write:
            return await frame.refuse(request, viewer, 403, "This API key is read-only.")
        refused = invalid or {}
        return await frame.render(
            request,
            viewer,
            "schedule_new.html",
            status,
            title="New schedule",
            form=form,
            invalid={name: message for name, message in refused.items() if name},
            error=refused.get("")
            or ("Nothing was stored: see the fields marked below." if refused else None),
            first_invalid=next((name for name in BLANK if name in refused), None),
            preview=await asyncio.to_thread(preview, form),
            target_kinds=TARGET_KINDS,
            trigger_types=TRIGGER_TYPES,
        )

    @routes.get("/schedules/new", response_class=HTMLResponse)
    async def new(request: Request, who: ViewerDep) -> HTMLResponse:
        return await page(request, who, dict(BLANK))

    @routes.get("/schedules/new/preview", response_class=HTMLResponse)
    async def preview_times(request: Request, who: ViewerDep) -> HTMLResponse:
        """The next fire times of the trigger in the query, alone: the form's script
        shows them as the trigger is typed."""
        form = posted({name: [value] for name, value in request.query_params.items()})
        return await frame.render(
            request,
            who,
            "_preview.html",
            whole=False,
            preview=await asyncio.to_thread(preview, form),
        )

    @routes.post("/schedules/new")
    async def create(request: Request, who: ViewerDep, service: SchedulesDep) -> Response:
        fields = await frame.posted(request, who)
        if isinstance(fields, HTMLResponse):
            return fields
        form = posted(fields)
        if fields.get("preview"):
            return await page(request, who, form)
        try:
            spec = checked(body_of(form))
            created = await service.create(spec, None, caller=who.caller, traceparent=None)
        except RefusedError as exc:
            return await page(request, who, form, status=422, invalid=exc.errors)
        except InvalidInputError as exc:
            refused = refused_by_service(exc)
            return await page(request, who, form, status=422, invalid=refused.errors)
        except ChronoqError as exc:
            return await page(request, who, form, status=status_of(exc), invalid={"": exc.detail})
        return back(request, who, f"/ui/schedules/{created.schedule.id}?done=created")
