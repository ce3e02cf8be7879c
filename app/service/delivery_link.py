"""An API process's link to its replica's delivery processes (`chronoq serve` runs the loop in
processes of their own beside the API's): their health for /readyz, their metrics for
/metrics, over each one's Unix socket."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence

import aiohttp

log = logging.getLogger(__name__)

# A delivery process answers from its own event loop, which a busy loop may hold a while;
# well inside a load balancer's readiness timeout.
ANSWER_TIMEOUT = 2.0
NOT_ANSWERING = "delivery process not answering"


class DeliveryLink:
    """Asks each delivery process (by its socket) how its loop is and what it measured."""

    def __init__(self, sockets: Sequence[str], *, timeout: float = ANSWER_TIMEOUT) -> None:
        self._sockets = tuple(sockets)
        self._timeout = aiohttp.ClientTimeout(total=timeout)
        self._sessions: list[aiohttp.ClientSession] = []
        # Whether each answered when last asked: a change is logged, not every failed ask
        # (nor those before its first answer, while it starts: its parent logs an exit).
        self._answering = [False] * len(self._sockets)

    async def open(self) -> None:
        self._sessions = [
            aiohttp.ClientSession(
                connector=aiohttp.UnixConnector(path=socket), timeout=self._timeout
            )
            for socket in self._sockets
        ]

    async def close(self) -> None:
        sessions, self._sessions = self._sessions, []
        for session in sessions:
            await session.close()

    async def health(self) -> str:
        """ "ok" when every delivery process says its loop is delivering, else the first
        reason one is not (which one, when there are several)."""
        answers = await asyncio.gather(
            *(self._health(index) for index in range(len(self._sessions)))
        )
        for index, answer in enumerate(answers, start=1):
            if answer != "ok":
                return answer if len(answers) == 1 else f"delivery process {index}: {answer}"
        return "ok"

    async def metrics(self) -> list[str | None]:
        """Each delivery process's metrics (text format), None for one that did not answer."""
        return list(
            await asyncio.gather(*(self._metrics(index) for index in range(len(self._sessions))))
        )

    async def _health(self, index: int) -> str:
        try:
            async with self._sessions[index].get("http://delivery/health") as response:
                body = await response.json()
        except (aiohttp.ClientError, TimeoutError, ValueError) as exc:
            self._answered(index, exc)
            return NOT_ANSWERING
        self._answered(index, None)
        worker = body.get("worker") if isinstance(body, dict) else None
        return worker if isinstance(worker, str) else NOT_ANSWERING

    async def _metrics(self, index: int) -> str | None:
        try:
            async with self._sessions[index].get("http://delivery/metrics") as response:
                response.raise_for_status()
                text = await response.text()
        except (aiohttp.ClientError, TimeoutError) as exc:
            self._answered(index, exc)
            return None
        self._answered(index, None)
        return text

    def _answered(self, index: int, failure: BaseException | None) -> None:
        answering = failure is None
        if answering == self._answering[index]:
            return
        self._answering[index] = answering
        where = self._sockets[index]
        if failure is not None:
            log.warning("delivery process at %s is not answering: %r", where, failure)
        else:
            log.info("delivery process at %s answers", where)
