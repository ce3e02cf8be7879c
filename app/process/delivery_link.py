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

    async def checks(self) -> dict[str, str]:
        """Readiness as the delivery processes see it: `worker`, "ok" when every one says
        its loop is delivering, else the first reason one is not (naming which, when there
        are several); `broker`, where they deliver to one, likewise."""
        answers = await asyncio.gather(
            *(self._checks(index) for index in range(len(self._sessions)))
        )
        merged: dict[str, str] = {}
        for index, answer in enumerate(answers, start=1):
            for name, value in answer.items():
                if merged.get(name, "ok") != "ok":
                    continue  # the first failure of each check is the one reported
                several = len(answers) > 1 and value != "ok"
                merged[name] = f"delivery process {index}: {value}" if several else value
        return merged

    async def metrics(self) -> list[str | None]:
        """Each delivery process's metrics (text format), None for one that did not answer."""
        return list(
            await asyncio.gather(*(self._metrics(index) for index in range(len(self._sessions))))
        )

    async def _checks(self, index: int) -> dict[str, str]:
        try:
            async with self._sessions[index].get("http://delivery/health") as response:
                body = await response.json()
        except (aiohttp.ClientError, TimeoutError, ValueError) as exc:
            self._answered(index, exc)
            return {"worker": NOT_ANSWERING}
        self._answered(index, None)
        if not isinstance(body, dict) or not isinstance(body.get("worker"), str):
            return {"worker": NOT_ANSWERING}
        return {name: value for name, value in body.items() if isinstance(value, str)}

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
