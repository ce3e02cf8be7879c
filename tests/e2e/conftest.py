"""End-to-end fixtures: service replicas as subprocesses, always killed at teardown.

Under pytest-xdist each module's cases run on one worker, one after another, in one of two
lanes (tests/conftest.py, `lane`); their ports come from that worker's own block
(tests.e2e.processes.free_port).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.processes import Services


@pytest.fixture
def services(tmp_path: Path) -> Iterator[Services]:
    started = Services(tmp_path)
    try:
        yield started
    finally:
        started.close()
