"""The console's edit form of a schedule: its webhook URL, max attempts, flow key and labels,
sent as a PATCH under If-Match of the version the page showed.

The form shows the schedule as the API does, its secrets redacted: a URL sent back as shown
keeps the stored one, and a changed URL carries the redacted placeholders, which the
service keeps only where DESIGN 8 lets it (else it refuses, naming the target). Only the
fields that differ from the schedule as it is are sent; a form loaded before someone else's
change is refused as stale, never applied over it. Every field the form refuses is named, each
with its own message, shown beside its input (nothing is saved while any is)."""

from __future__ import annotations

import re
from typing import Any

from pydantic import ValidationError

from app.api.problem_details import validation_message
from app.api.schemas import ScheduleOut
from app.domain.errors import InvalidInputError
from app.domain.flow import KEY_ALPHABET, KEY_PATTERN
from app.domain.schedule import SchedulePatch

EDIT_FIELDS = ("target_url", "max_attempts", "flow_key", "labels")
_VERSION = re.compile(r"[0-9]{1,12}")
# Longer than anything the fields accept (64 labels of 63 + 1 + 255 characters, a line
# each): a longer value is refused before it is parsed.
_MAX_FIELD = 24_000

NO_VERSION = "The form names no version of the schedule: reload the page."
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
        "flow_key": schedule.flow_key or "",
        "labels": labels_text(schedule.labels),
    }


def posted_form(fields: dict[str, list[str]], schedule: ScheduleOut) -> dict[str, str]:
    """What was typed, to show again beside a refusal; a field the post does not hold (a
    page from before the form had it) is the schedule's as it is, never an emptied one."""
    return {
        name: fields[name][0][:_MAX_FIELD] if fields.get(name) else shown
        for name, shown in form_of(schedule).items()
    }


def posted_version(fields: dict[str, list[str]]) -> int | None:
    """The version the form was loaded at; None when it names none."""
    versions = fields.get("version", [])
    if len(versions) != 1 or not _VERSION.fullmatch(versions[0]):
        return None
    return int(versions[0])


# Each field of the PATCH the form writes, by its input's name in the form.
_FIELDS = {
    "target": "target_url",
    "max_attempts": "max_attempts",
    "flow_key": "flow_key",
    "labels": "labels",
}


class RefusedError(Exception):
    """Input the form refuses: each field's message, by its input's name ("": none)."""

    def __init__(self, errors: dict[str, str]) -> None:
        self.errors = errors
        super().__init__("; ".join(f"{name}: {message}" for name, message in errors.items()))


def parse_labels(text: str) -> dict[str, str] | str:
    """The labels typed, or why they are not labels (every line that is no key:value)."""
    labels: dict[str, str] = {}
    bad: list[int] = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        key, sep, value = line.strip().partition(":")
        if not sep or not key:
            bad.append(number)
            continue
        labels[key.strip()] = value.strip()
    if bad:
        lines = ", ".join(str(n) for n in bad[:10]) + (", ..." if len(bad) > 10 else "")
        return f"line{'' if len(bad) == 1 else 's'} {lines}: not key:value"
    return labels


def changes_of(form: dict[str, str], schedule: ScheduleOut) -> dict[str, Any]:
    """The PATCH body of what the form changes of `schedule` (empty: nothing), as the API
    reads it; every field it would refuse raises RefusedError naming it."""
    errors = {
        name: "longer than the form takes"
        for name, value in form.items()
        if len(value) >= _MAX_FIELD
    }
    shown = form_of(schedule)
    changes: dict[str, Any] = {}
    url = form["target_url"].strip()
    if (
        "target_url" not in errors
        and schedule.target.type == "webhook"
        and url != shown["target_url"]
    ):
        # The target as read, its secrets redacted: the service keeps what it may of them.
        changes["target"] = {**schedule.target.model_dump(mode="json"), "url": url}
    attempts = form["max_attempts"].strip()
    if "max_attempts" not in errors and attempts != shown["max_attempts"]:
        if not attempts.isdigit() or len(attempts) > 9:
            errors["max_attempts"] = "a whole number"
        else:
            changes["max_attempts"] = int(attempts)
    key = form["flow_key"].strip()
    if "flow_key" not in errors and key != shown["flow_key"]:
        # Emptied: the schedule leaves its key (PATCH null).
        if key and not KEY_PATTERN.fullmatch(key):
            errors["flow_key"] = f"a flow key is {KEY_ALPHABET}"
        else:
            changes["flow_key"] = key or None
    if "labels" not in errors:
        labels = parse_labels(form["labels"])
        if isinstance(labels, str):
            errors["labels"] = labels
        elif labels != schedule.labels:
            changes["labels"] = labels
    try:
        SchedulePatch.model_validate(changes)
    except ValidationError as exc:
        for error in exc.errors():
            location = [str(part) for part in error["loc"]]
            field = _FIELDS.get(location[0] if location else "", "")
            errors.setdefault(field, validation_message(error))
    if errors:
        raise RefusedError(errors)
    return changes


def checked(changes: dict[str, Any]) -> SchedulePatch:
    """The PATCH as the API reads it (`changes_of` checked it already)."""
    return SchedulePatch.model_validate(changes)


def field_of(error: InvalidInputError) -> str:
    """The form field a refusal of the service names (its pointer; "": none of them)."""
    pointer = (error.pointer or "").removeprefix("#/")
    return _FIELDS.get(pointer.split("/")[0], "")
