"""The console's edit form of a schedule: its webhook URL and headers, max attempts, flow key,
labels, payload, trigger, retry policy and failure callback (the last four as JSON, as the
API reads them), sent as a PATCH under If-Match of the version the page showed.

The form shows the schedule as the API does, its secrets redacted: a URL, a header or a
callback sent back as shown keeps the stored one, and a changed one carries the redacted
placeholders, which the service keeps only where DESIGN 8 lets it (else it refuses, naming
the field). Only the
fields that differ from the schedule as it is are sent; a form loaded before someone else's
change is refused as stale, never applied over it. Every field the form refuses is named, each
with its own message, shown beside its input (nothing is saved while any is)."""

from __future__ import annotations

import json
import re
from typing import Any

from pydantic import ValidationError

from app.api.problem_details import validation_message
from app.api.schedule_schemas import ScheduleOut
from app.api.target_schemas import WebhookTargetOut
from app.domain.errors import InvalidInputError
from app.domain.flow import KEY_ALPHABET, KEY_PATTERN
from app.domain.schedule import SchedulePatch

EDIT_FIELDS = (
    "target_url",
    "headers",
    "max_attempts",
    "flow_key",
    "labels",
    "payload",
    "trigger",
    "retry",
    "on_failure",
)
# Edited as JSON; those that may be emptied (null: the service's retry policy, no callback).
JSON_FIELDS = ("payload", "trigger", "retry", "on_failure")
EMPTIED_IS_NULL = ("payload", "retry", "on_failure")
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


def headers_text(headers: dict[str, str]) -> str:
    """Headers as the form shows them: Name: value, one a line."""
    return "\n".join(f"{name}: {value}" for name, value in headers.items())


def json_text(value: Any) -> str:
    """A JSON value as the form shows it ("" for none)."""
    if value is None:
        return ""
    return json.dumps(value, indent=2, ensure_ascii=False)


def form_of(schedule: ScheduleOut) -> dict[str, str]:
    """The form's values for the schedule as it is."""
    target = schedule.target
    on_failure = schedule.on_failure
    return {
        "target_url": target.url if isinstance(target, WebhookTargetOut) else "",
        "headers": headers_text(target.headers) if isinstance(target, WebhookTargetOut) else "",
        "max_attempts": str(schedule.max_attempts),
        "flow_key": schedule.flow_key or "",
        "labels": labels_text(schedule.labels),
        "payload": json_text(schedule.payload),
        "trigger": json_text(schedule.trigger.model_dump(mode="json", exclude_none=True)),
        "retry": json_text(
            None if schedule.retry is None else schedule.retry.model_dump(exclude_none=True)
        ),
        "on_failure": json_text(
            None if on_failure is None else on_failure.model_dump(mode="json", exclude_none=True)
        ),
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


# Each field of the PATCH the form writes, by its input's name in the form (a target's
# headers are `headers`, the rest of it `target_url`).
_FIELDS = {
    "target": "target_url",
    "max_attempts": "max_attempts",
    "flow_key": "flow_key",
    "labels": "labels",
    **{name: name for name in JSON_FIELDS},
}


def _input_of(location: list[str]) -> str:
    """The form's input for a location in the PATCH ("": none of them)."""
    if not location:
        return ""
    if location[0] == "target" and "headers" in location:
        return "headers"
    return _FIELDS.get(location[0], "")


class RefusedError(Exception):
    """Input the form refuses: each field's message, by its input's name ("": none)."""

    def __init__(self, errors: dict[str, str]) -> None:
        self.errors = errors
        super().__init__("; ".join(f"{name}: {message}" for name, message in errors.items()))


def _pairs(text: str, shape: str) -> dict[str, str] | str:
    """`name:value` lines (blank ones skipped), or why they are not: every line that is no
    `shape`."""
    pairs: dict[str, str] = {}
    bad: list[int] = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        name, sep, value = line.partition(":")
        if not sep or not name.strip():
            bad.append(number)
            continue
        pairs[name.strip()] = value.strip()
    if bad:
        lines = ", ".join(str(n) for n in bad[:10]) + (", ..." if len(bad) > 10 else "")
        return f"line{'' if len(bad) == 1 else 's'} {lines}: not {shape}"
    return pairs


def parse_labels(text: str) -> dict[str, str] | str:
    """The labels typed, key:value a line, or why they are not labels."""
    return _pairs(text, "key:value")


def parse_headers(text: str) -> dict[str, str] | str:
    """The headers typed, Name: value a line, or why they are not headers."""
    return _pairs(text, "Name: value")


def _json_changes(
    form: dict[str, str], shown: dict[str, str], errors: dict[str, str]
) -> dict[str, Any]:
    """What the JSON fields change: each one typed differently from what was shown and
    meaning another value."""
    changes: dict[str, Any] = {}
    for name in JSON_FIELDS:
        text = form[name].strip()
        if name in errors or text == shown[name].strip():
            continue
        if not text:
            if name in EMPTIED_IS_NULL:
                changes[name] = None
            else:
                errors[name] = "required: a schedule has a trigger"
            continue
        try:
            value = json.loads(text)
        except ValueError as exc:
            errors[name] = f"not JSON: {exc}"
            continue
        before = json.loads(shown[name]) if shown[name] else None
        if value != before:
            changes[name] = value
    return changes


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
    if isinstance(schedule.target, WebhookTargetOut):
        # The target as read, its secrets redacted: the service keeps what it may of them.
        target = schedule.target.model_dump(mode="json")
        url = form["target_url"].strip()
        if "target_url" not in errors and url != shown["target_url"]:
            changes["target"] = {**target, "url": url}
        headers = parse_headers(form["headers"]) if "headers" not in errors else {}
        if isinstance(headers, str):
            errors["headers"] = headers
        elif "headers" not in errors and headers != schedule.target.headers:
            changes["target"] = {**changes.get("target", target), "headers": headers}
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
    changes.update(_json_changes(form, shown, errors))
    try:
        SchedulePatch.model_validate(changes)
    except ValidationError as exc:
        for error in exc.errors():
            field = _input_of([str(part) for part in error["loc"]])
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
    # The service refuses a redacted secret (a header's too) where the URL moved it: the
    # URL is what to change back.
    return _FIELDS.get(pointer.split("/")[0], "")
