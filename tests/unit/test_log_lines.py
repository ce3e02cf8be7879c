"""What a log line looks like in each format: the record's own fields after a text line's
message, no terminal control character from anywhere, and uvicorn's lines through the same
handler without their colours."""

from __future__ import annotations

import copy
import json
import logging
import logging.config
from collections.abc import Iterator

import pytest
from uvicorn.config import LOGGING_CONFIG

from app.telemetry.logs import LogFormat, configure

ESC = "\x1b"


@pytest.fixture
def chronoq_format() -> Iterator[None]:
    yield
    configure("INFO")


def _line(fmt: LogFormat, record: logging.LogRecord) -> str:
    configure("INFO", fmt)
    handler = next(h for h in logging.getLogger().handlers if getattr(h, "_chronoq", False))
    return handler.format(record)


def _record(msg: str, *args: object, **fields: object) -> logging.LogRecord:
    record = logging.makeLogRecord({"name": "app.worker", "msg": msg, "args": args})
    record.__dict__.update(fields)
    return record


@pytest.mark.usefixtures("chronoq_format")
def test_a_text_line_names_its_schedule_after_the_message() -> None:
    record = _record(
        "occurrence %s failed",
        "o-1",
        schedule_id="5b0e",
        occurrence_id="o-1",
        attempt=2,
        reason="HTTP 503",
        retry_in=None,
    )

    line = _line("text", record)

    assert line.endswith(
        "app.worker: occurrence o-1 failed schedule_id=5b0e occurrence_id=o-1 attempt=2 "
        'reason="HTTP 503"'
    )
    assert "retry_in" not in line  # a field that is None is left out


@pytest.mark.usefixtures("chronoq_format")
def test_a_json_line_carries_the_same_fields_as_members() -> None:
    record = _record("occurrence %s failed", "o-1", schedule_id="5b0e", attempt=2, retry_in=None)

    entry = json.loads(_line("json", record))

    assert entry["message"] == "occurrence o-1 failed"
    assert (entry["schedule_id"], entry["attempt"], entry["retry_in"]) == ("5b0e", 2, None)


@pytest.mark.usefixtures("chronoq_format")
@pytest.mark.parametrize("fmt", ["text", "json"])
def test_control_characters_a_client_sent_are_escaped(fmt: LogFormat) -> None:
    # A decoded path with an escape sequence, a line feed that would forge a line, and a C1
    # control (CSI) that some terminals act on.
    record = _record("GET %s", "/v1/a\x1b[31m\nFORGED\x9b", path="/v1/\x1b[2J")

    line = _line(fmt, record)

    assert ESC not in line
    assert "\n" not in line
    assert "\x9b" not in line
    assert "\\u001b[31m" in line
    if fmt == "json":
        assert json.loads(line)["path"] == "/v1/\x1b[2J"


@pytest.mark.usefixtures("chronoq_format")
@pytest.mark.parametrize("fmt", ["text", "json"])
def test_a_traceback_keeps_its_lines(fmt: LogFormat) -> None:
    record = _record("delivery raised", schedule_id="5b0e")
    try:
        raise ValueError("boom")
    except ValueError:
        import sys

        record.exc_info = sys.exc_info()

    line = _line(fmt, record)

    if fmt == "text":
        first, *rest = line.splitlines()
        assert first.endswith("delivery raised schedule_id=5b0e")
        assert rest[-1] == "ValueError: boom"
    else:
        assert json.loads(line)["exception"].endswith("ValueError: boom")


@pytest.mark.usefixtures("chronoq_format")
@pytest.mark.parametrize("fmt", ["text", "json"])
def test_uvicorn_lines_go_through_chronoq_without_colours(
    fmt: LogFormat, caplog: pytest.LogCaptureFixture
) -> None:
    # As `uvicorn app.main:app` leaves them before the app starts: handlers of their own
    # that write colours on a terminal, and that do not pass lines on to the root.
    logging.config.dictConfig(copy.deepcopy(LOGGING_CONFIG))
    configure("INFO", fmt)

    with caplog.at_level(logging.INFO):
        logging.getLogger("uvicorn.error").info(
            "Started server process [%d]", 7, extra={"color_message": f"{ESC}[36m%d{ESC}[0m"}
        )
        logging.getLogger("uvicorn.access").info("%s - %s", "127.0.0.1:1", "GET /")

    assert [r.getMessage() for r in caplog.records] == ["Started server process [7]"]
    for name in ("uvicorn", "uvicorn.error", "uvicorn.access"):
        assert logging.getLogger(name).handlers == []
    line = _line(fmt, caplog.records[0])
    assert ESC not in line
    assert "color_message" not in line
