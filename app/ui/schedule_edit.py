"""The console's edit form of a schedule: its webhook URL, max attempts and labels, sent as
a PATCH under If-Match of the version the page showed.

The form shows the schedule as the API does, its secrets redacted: a URL sent back as shown
keeps the stored one, and a changed URL carries the redacted placeholders, which the
service keeps only where DESIGN 8 lets it (else it refuses, naming the target). Only the
fields that differ from the schedule as it is are sent; a form loaded before someone else's
change is refused as stale, never applied over it."""

from __future__ import annotations

import re
from typing import Any

from pydantic import ValidationError

from app.api.problem_details import validation_message
from app.api.schemas import ScheduleOut
from app.domain.errors import InvalidInputError
from app.domain.schedule import SchedulePatch

EDIT_FIELDS = ("target_url", "max_attempts", "labels")
_VERSION = re.compile(r"[0-9]{1,12}")
# Longer than anything the fields accept (64 labels of 63 + 1 + 255 characters, a line
# each): a longer value is refused before it is parsed.
_MAX_FIELD = 24_000

STALE = (
    "This schedule changed since you loaded it: nothing was saved. The page and the form now "
    "show it as it is; make your change again."
)


def labels_text(labels: dict[str, str]) -> str:
    """Labels as the form shows them: key:value, one a line, in key order."""
    return "\n".join(f"{key}:{value}" for key, value in sorted(labels.items()))


def form_of(schedule: ScheduleOut) -> dict[str, str]:
    """The form's values for the schedule as it is."""
    url = schedule.target.url if schedule.target.type == "webhook" else ""
    return {
        "target_url": url,
        "max_attempts": str(schedule.max_attempts),
        "labels": labels_text(schedule.labels),
    }


def posted_form(fields: dict[str, list[str]]) -> dict[str, str]:
    """What was typed, to show again beside a refusal."""
    return {name: (fields.get(name) or [""])[0][:_MAX_FIELD] for name in EDIT_FIELDS}


def posted_version(fields: dict[str, list[str]]) -> int | None:
    """The version the form was loaded at; None when it names none."""
    versions = fields.get("version", [])
    if len(versions) != 1 or not _VERSION.fullmatch(versions[0]):
        return None
    return int(versions[0])


def _labels(text: str) -> dict[str, str]:
    labels: dict[str, str] = {}
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        key, sep, value = line.strip().partition(":")
        if not sep or not key:
            raise InvalidInputError(f"labels: line {number} is not key:value", pointer="#/labels")
        labels[key.strip()] = value.strip()
    return labels


def changes_of(form: dict[str, str], schedule: ScheduleOut) -> dict[str, Any]:
    """The PATCH body of what the form changes of `schedule` (empty: nothing); a field the
    API would refuse raises InvalidInputError naming it (its pointer)."""
    if any(len(value) >= _MAX_FIELD for value in form.values()):
        raise InvalidInputError("a field is longer than the form takes", pointer="#")
    shown = form_of(schedule)
    changes: dict[str, Any] = {}
    url = form["target_url"].strip()
    if schedule.target.type == "webhook" and url != shown["target_url"]:
        # The target as read, its secrets redacted: the service keeps what it may of them.
        changes["target"] = {**schedule.target.model_dump(mode="json"), "url": url}
    attempts = form["max_attempts"].strip()
    if attempts != shown["max_attempts"]:
        if not attempts.isdigit() or len(attempts) > 9:
            raise InvalidInputError("max attempts: a whole number", pointer="#/max_attempts")
        changes["max_attempts"] = int(attempts)
    labels = _labels(form["labels"])
    if labels != schedule.labels:
        changes["labels"] = labels
    return changes


def checked(changes: dict[str, Any]) -> SchedulePatch:
    """The PATCH as the API reads it; its first refusal as InvalidInputError naming the
    field."""
    try:
        return SchedulePatch.model_validate(changes)
    except ValidationError as exc:
        first = exc.errors()[0]
        location = [str(part) for part in first["loc"]]
        field = location[0] if location else ""
        names = {"target": "target URL", "max_attempts": "max attempts", "labels": "labels"}
        raise InvalidInputError(
            f"{names.get(field, field)}: {validation_message(first)}",
            pointer="#/" + "/".join(location),
        ) from None


def field_of(error: InvalidInputError) -> str | None:
    """The form field an error names (its pointer), to mark beside the form."""
    pointer = (error.pointer or "").removeprefix("#/")
    head = pointer.split("/")[0]
    return {"target": "target_url", "max_attempts": "max_attempts", "labels": "labels"}.get(head)
