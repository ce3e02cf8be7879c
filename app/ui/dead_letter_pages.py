"""The console's dead-letter page: the filtered list, and its forms that replay or discard
the selected dead letters, or one of them."""

from __future__ import annotations

import uuid
from typing import Any
from urllib.parse import urlencode

from fastapi import Request
from fastapi.responses import HTMLResponse, Response

from app.api import dead_letters as dead_letter_routes
from app.api.deps import DeadLettersDep
from app.domain.errors import ChronoqError, InvalidInputError
from app.domain.filters import DeadLetterFilter
from app.ui.forms import Viewer
from app.ui.frame import PageFrame, back, status_of
from app.ui.query import filter_value, link, uuid_value

PAGE_SIZE = 50
_NO_FILTER = DeadLetterFilter()  # replays by the ids selected, never by a filter


def _count(text: str) -> int | None:
    return int(text) if text.isdigit() and len(text) < 6 else None


def _notice(done: str, count_text: str, held_text: str) -> str | None:
    """What the page says after a replay or a discard: a replay of a paused schedule's dead
    letter is held until the schedule is resumed, and says so."""
    count, held = _count(count_text), _count(held_text) or 0
    if done not in ("replayed", "discarded") or count is None:
        return None
    noun = "dead letter" if count == 1 else "dead letters"
    if done == "discarded":
        return f"{count} {noun} discarded."
    if not held:
        return f"{count} {noun} replayed: due now."
    whose = "its schedule" if held == 1 else "their schedules"
    waits = f"{'waits' if held == 1 else 'wait'} for {whose} to be resumed (paused)"
    if held >= count:
        return f"{count} {noun} replayed: {waits}."
    return f"{count} {noun} replayed: {count - held} due now, {held} {waits}."


class DeadLetterPages:
    def __init__(self, frame: PageFrame) -> None:
        self._frame = frame

    async def dead_letters(
        self, request: Request, viewer: Viewer, service: DeadLettersDep
    ) -> HTMLResponse:
        query = request.query_params
        shown = {
            "schedule_id": query.get("schedule_id", ""),
            "event_type": query.get("event_type", ""),
        }
        error: str | None = None
        items: list[Any] = []
        next_url: str | None = None
        try:
            page = await dead_letter_routes.list_dead_letters(
                service,
                viewer.caller,
                schedule_id=uuid_value(filter_value(query, "schedule_id"), "schedule_id"),
                event_type=filter_value(query, "event_type"),
                limit=PAGE_SIZE,
                cursor=filter_value(query, "cursor"),
            )
            items = page.items
            if page.next_cursor is not None:
                next_url = link(shown, cursor=page.next_cursor)
        except InvalidInputError as exc:
            error = exc.detail
        notice = _notice(query.get("done", ""), query.get("n", ""), query.get("held", "0"))
        return await self._frame.render(
            request,
            viewer,
            "dead_letters.html",
            422 if error else 200,
            title="Dead letters",
            filters=shown,
            items=items,
            next_url=next_url,
            paged=bool(query.get("cursor")),
            first_url=link(shown),
            error=error,
            notice=notice,
        )

    async def settle(
        self,
        request: Request,
        viewer: Viewer,
        service: DeadLettersDep,
        action: str,
        one: uuid.UUID | None = None,
    ) -> Response:
        """Replay or discard the dead letters the form selected, or `one`."""
        frame = self._frame
        fields = await frame.posted(request, viewer)
        if isinstance(fields, HTMLResponse):
            return fields
        if one is not None:
            ids = [one]
        else:
            try:
                ids = [uuid.UUID(value) for value in fields.get("occurrence_id", [])]
            except ValueError:
                return await frame.refuse(request, viewer, 422, "An occurrence id is not a UUID.")
        if not ids:
            return await frame.refuse(request, viewer, 422, "Select at least one dead letter.")
        held: list[uuid.UUID] = []
        try:
            if action == "replay":
                replayed = await service.replay_many(ids, _NO_FILTER, caller=viewer.caller)
                held = await service.held(replayed.occurrence_ids)
                done = replayed.count
            else:
                for id_ in ids:
                    await service.discard(id_, caller=viewer.caller)
                done = len(ids)
        except ChronoqError as exc:
            return await frame.refuse(request, viewer, status_of(exc), exc.detail)
        schedule_page = (fields.get("return_to") or [""])[0]
        if schedule_page:
            # A schedule's own Replay button: back to that schedule's page.
            try:
                schedule_id = uuid.UUID(schedule_page)
            except ValueError:
                return await frame.refuse(request, viewer, 422, "return_to is not a schedule id.")
            done_text = "held" if held else "replayed"
            return back(request, viewer, f"/ui/schedules/{schedule_id}?done={done_text}")
        back_to = {
            key: value
            for key in ("schedule_id", "event_type")
            if (value := (fields.get(key) or [""])[0])
        }
        verb = "replayed" if action == "replay" else "discarded"
        answer = {**back_to, "done": verb, "n": done}
        if held:
            answer["held"] = len(held)
        return back(request, viewer, "/ui/dead-letters?" + urlencode(answer))
