"""The README and docs/ hold together: every relative link reaches a file (and a heading, when it
names one), every setting is in the configuration reference, every `chronoq` command is in the
README's command table and in docs/cli.md, and the README's walkthrough reaches the service
through its one port variable."""

from __future__ import annotations

import itertools
import re
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from pydantic import TypeAdapter

from app.cli.command import build_parser
from app.domain.trigger import Trigger, fire_times
from app.settings import known_variables

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]

FENCE = re.compile(r"^(```|~~~).*?^\1", re.MULTILINE | re.DOTALL)
INLINE_CODE = re.compile(r"`[^`\n]*`")
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")
HEADING = re.compile(r"^#{1,6}\s+(.+?)\s*#*\s*$", re.MULTILINE)


def prose(text: str) -> str:
    """The text without code blocks and inline code, where brackets are not links."""
    return INLINE_CODE.sub("", FENCE.sub("", text))


def anchors(page: Path) -> set[str]:
    """The anchors GitHub gives a page's headings: lower case, punctuation dropped, spaces
    as hyphens, a repeated heading numbered from -1."""
    found: set[str] = set()
    for heading in HEADING.findall(FENCE.sub("", page.read_text(encoding="utf-8"))):
        text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading).replace("`", "")
        slug = re.sub(r"[^\w\- ]", "", text.strip().lower()).replace(" ", "-")
        anchor, number = slug, 0
        while anchor in found:
            number += 1
            anchor = f"{slug}-{number}"
        found.add(anchor)
    return found


def relative_links(page: Path) -> list[str]:
    return [
        target
        for target in LINK.findall(prose(page.read_text(encoding="utf-8")))
        if not re.match(r"[a-z][a-z0-9+.-]*:", target)
    ]


def section(page: Path, title: str) -> str:
    """The text of a page's `## title` section, up to the next `## ` heading."""
    text = page.read_text(encoding="utf-8")
    found = re.search(rf"^## {re.escape(title)}\n(.*?)(?=^## |\Z)", text, re.MULTILINE | re.DOTALL)
    assert found, f"{page.name} has no section {title!r}"
    return found.group(1)


def test_the_pages_are_found() -> None:
    names = {page.name for page in PAGES}
    assert {"README.md", "configuration.md", "cli.md", "client.md", "operations.md"} <= names


@pytest.mark.parametrize("page", PAGES, ids=lambda page: page.name)
def test_every_relative_link_reaches_a_file_and_its_heading(page: Path) -> None:
    links = relative_links(page)
    broken = []
    for link in links:
        path, _, anchor = link.partition("#")
        target = (page.parent / path).resolve() if path else page
        if not target.is_file():
            broken.append(f"{link}: no file {target.relative_to(ROOT)}")
        elif anchor and target.suffix == ".md" and anchor not in anchors(target):
            broken.append(f"{link}: no heading #{anchor} in {target.relative_to(ROOT)}")
    assert not broken, f"{page.relative_to(ROOT)}: " + "; ".join(broken)


def test_the_readme_links_every_page_of_docs() -> None:
    linked = {
        (ROOT / link.partition("#")[0]).resolve() for link in relative_links(ROOT / "README.md")
    }
    missing = [page.name for page in PAGES[1:] if page.resolve() not in linked]
    assert not missing, f"README.md does not link {missing}"


def test_every_setting_has_a_row_in_the_configuration_reference() -> None:
    table = section(ROOT / "docs" / "configuration.md", "Settings")
    rows = set(re.findall(r"^\| `([A-Z_]+)` \|", table, re.MULTILINE))
    assert known_variables() - rows == set()
    assert rows - known_variables() == set(), "a row names no setting"


def commands() -> set[str]:
    """Every command of `chronoq`, as its parser has them."""
    parser = build_parser()
    (choices,) = [a.choices for a in parser._actions if isinstance(a.choices, dict)]
    return set(choices)


@pytest.mark.parametrize(
    ("page", "title"),
    [(ROOT / "README.md", "Commands"), (ROOT / "docs" / "cli.md", "The commands")],
    ids=["README.md", "docs/cli.md"],
)
def test_every_command_is_in_the_command_table(page: Path, title: str) -> None:
    table = section(page, title)
    named = set(re.findall(r"^\| `chronoq ([a-z-]+)", table, re.MULTILINE))
    assert commands() - named == set()
    assert named - commands() == set(), "a row names no command"


def test_the_walkthrough_reaches_the_service_through_one_port_variable() -> None:
    walkthrough = section(ROOT / "README.md", "Walkthrough")
    assert walkthrough.count("export PORT=") == 1
    addresses = re.findall(r"(?:localhost|127\.0\.0\.1):([^/\s\"']+)", walkthrough)
    receiver = {"9000"}  # the `chronoq receiver` the walkthrough starts, not the service
    assert addresses
    assert set(addresses) <= {"$PORT", *receiver}, addresses


# A cron expression in a trigger, then what the page says of it: "fires every 5 minutes".
STATED_CADENCE = re.compile(
    r'"expression": "([^"]+)"\}`[^.]*?\bevery (\d+) (second|minute|hour)s?\b', re.DOTALL
)
UNIT_SECONDS = {"second": 1, "minute": 60, "hour": 3600}


@pytest.mark.parametrize(
    "page", [ROOT / "README.md", ROOT / "docs" / "schedules.md"], ids=lambda page: page.name
)
def test_the_cadence_a_page_gives_a_cron_expression_is_the_one_it_fires_at(page: Path) -> None:
    stated = STATED_CADENCE.findall(page.read_text(encoding="utf-8"))
    assert stated, f"{page.name} states no cron expression's cadence"
    for expression, count, unit in stated:
        trigger = TypeAdapter(Trigger).validate_python({"type": "cron", "expression": expression})
        start = datetime(2026, 1, 5, tzinfo=UTC)
        fires = fire_times(trigger, start, 3, start)
        gaps = {later - earlier for earlier, later in itertools.pairwise(fires)}
        said = timedelta(seconds=int(count) * UNIT_SECONDS[unit])
        assert gaps == {said}, f"{page.name}: {expression!r} is said to fire every {said}"


def test_the_readme_says_the_ticks_of_a_pause_are_listed_when_it_ends() -> None:
    """Resume, not the pause, records the ticks a pause held back (docs/schedules.md)."""
    walkthrough = " ".join(section(ROOT / "README.md", "Walkthrough").split())
    said = re.search(r"\*\*Pause and resume\*\*(.*?)```", walkthrough)
    assert said
    sentences = [s for s in re.split(r"(?<=[.;])\s", said.group(1)) if "`skipped`" in s]
    assert sentences, "the walkthrough says where skipped ticks appear"
    for sentence in sentences:
        assert re.search(r"\bresume", sentence), sentence
