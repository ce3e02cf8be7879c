"""constraints.txt pins what CI and the image install: every dependency pyproject.toml names
(runtime and the dev extras) has one exact pin there, within pyproject.toml's range, and so
does every package those pull in, as this environment's installed metadata says."""

from __future__ import annotations

import tomllib
from importlib import metadata
from pathlib import Path

from packaging.markers import Marker
from packaging.requirements import Requirement
from packaging.utils import NormalizedName, canonicalize_name
from packaging.version import Version

ROOT = Path(__file__).resolve().parents[2]


def pins() -> dict[NormalizedName, Version]:
    found: dict[NormalizedName, Version] = {}
    for number, line in enumerate(
        (ROOT / "constraints.txt").read_text(encoding="utf-8").splitlines(), 1
    ):
        text = line.split("#", 1)[0].strip()
        if not text:
            continue
        requirement = Requirement(text)
        (specifier,) = requirement.specifier
        assert specifier.operator == "==", f"line {number}: {line!r} is not an exact pin"
        name = canonicalize_name(requirement.name)
        assert name not in found, f"line {number}: {requirement.name} is pinned twice"
        found[name] = Version(specifier.version)
    return found


def declared() -> list[Requirement]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    lines = [*project["dependencies"], *project["optional-dependencies"]["dev"]]
    return [Requirement(line) for line in lines]


def applies(marker: Marker | None, extras: set[str]) -> bool:
    """Whether a requirement with `marker` is installed here, its distribution being
    installed with `extras`."""
    if marker is None:
        return True
    return any(marker.evaluate({"extra": extra}) for extra in extras or {""})


def installed_closure(roots: list[Requirement]) -> set[NormalizedName]:
    """The distributions `roots` install here, their dependencies' too."""
    seen: set[tuple[NormalizedName, frozenset[str]]] = set()
    pending = [(requirement, set[str]()) for requirement in roots]
    while pending:
        requirement, of_extras = pending.pop()
        if not applies(requirement.marker, of_extras):
            continue
        key = (canonicalize_name(requirement.name), frozenset(requirement.extras))
        if key in seen:
            continue
        seen.add(key)
        for line in metadata.distribution(requirement.name).requires or []:
            pending.append((Requirement(line), set(requirement.extras)))
    return {name for name, _ in seen}


def test_every_dependency_is_pinned_within_its_range() -> None:
    pinned = pins()
    for requirement in declared():
        name = canonicalize_name(requirement.name)
        assert name in pinned, f"{requirement.name} has no pin in constraints.txt"
        assert requirement.specifier.contains(pinned[name], prereleases=True), (
            f"constraints.txt pins {requirement.name}=={pinned[name]}, "
            f"outside pyproject.toml's {requirement}"
        )


def test_every_package_the_dependencies_pull_in_is_pinned() -> None:
    missing = installed_closure(declared()) - set(pins())
    assert not missing, f"constraints.txt pins none of {sorted(missing)}"


def test_the_package_itself_is_not_pinned() -> None:
    # A pin of chronoq would refuse to install the version being built.
    assert "chronoq" not in pins()


def test_make_installs_with_the_constraints() -> None:
    """CI's environment is make's (.ci/run runs `make check`): each pip install there is
    constrained."""
    installs = [
        line.strip()
        for line in (ROOT / "Makefile").read_text(encoding="utf-8").splitlines()
        if "pip install" in line
    ]
    assert installs, "the Makefile installs with pip"
    for line in installs:
        assert "-c constraints.txt" in line, line
