"""What a settle changed beyond the occurrences it settled, for the loop to tell."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from app.domain.endpoints import CircuitChanged
from app.domain.schedule import AutoPause


@dataclass(frozen=True, slots=True)
class Settled:
    """The schedules the settle's dead letters paused, and the endpoints whose circuit
    its attempts opened, reopened, closed or disabled."""

    auto_paused: Sequence[AutoPause] = ()
    circuits: Sequence[CircuitChanged] = ()
