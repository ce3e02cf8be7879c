"""A TCP forwarder on 127.0.0.1 that a test can cut and restore, to simulate an outage."""

from __future__ import annotations

import asyncio
import contextlib


class TcpProxy:
    def __init__(self, target_host: str, target_port: int) -> None:
        self._target = (target_host, target_port)
        self._server: asyncio.Server | None = None
        self._writers: set[asyncio.StreamWriter] = set()
        self._handlers: set[asyncio.Task[None]] = set()
        self._flowing = asyncio.Event()
        self._flowing.set()
        # While cut, the listening socket stays open and every new connection is reset at
        # once: closing the server while a connection is being accepted can leave that
        # socket open in asyncio (Python 3.11) and leak it.
        self._refusing = False
        # Once vanished, nothing is passed, closed or reset any more (vanish).
        self._vanished = False
        self.port = 0

    async def _pipe(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while data := await reader.read(65536):
                await self._flowing.wait()
                writer.write(data)
                await writer.drain()
        except (ConnectionError, OSError):
            pass
        finally:
            if not self._vanished:
                writer.close()

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        # Every accepted socket is tracked from the first moment, so close() can end it
        # and wait for its handler: nothing is left for the garbage collector to find.
        if self._refusing:
            writer.transport.abort()
            return
        handler = asyncio.current_task()
        assert handler is not None
        self._handlers.add(handler)
        self._writers.add(writer)
        up_writer: asyncio.StreamWriter | None = None
        try:
            if self._vanished:
                await self._flowing.wait()  # held open, unanswered, until close()
                return
            up_reader, up_writer = await asyncio.open_connection(*self._target)
            self._writers.add(up_writer)
            await asyncio.gather(self._pipe(reader, up_writer), self._pipe(up_reader, writer))
        except OSError:
            pass
        finally:
            for end in (writer, up_writer):
                if end is not None:
                    end.close()
                    self._writers.discard(end)
            self._handlers.discard(handler)

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", self.port)
        self.port = self._server.sockets[0].getsockname()[1]

    async def cut(self) -> None:
        """Reset new connections and drop the open ones."""
        self._refusing = True
        for writer in list(self._writers):
            writer.transport.abort()
        self._writers.clear()

    def stall(self) -> None:
        """Keep connections open but stop passing bytes: a peer that hangs."""
        self._flowing.clear()

    def vanish(self) -> None:
        """From now on pass nothing and never close or reset a connection, old or new, even
        when the target closes its end: a peer whose machine is gone, silent (here a new
        connection's handshake still completes, and then nothing answers)."""
        self._vanished = True
        self._flowing.clear()

    def flow(self) -> None:
        self._flowing.set()

    async def restore(self) -> None:
        self._refusing = False

    async def close(self) -> None:
        self._flowing.set()
        await self.cut()
        if self._handlers:
            await asyncio.wait(set(self._handlers), timeout=5)
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
            self._server = None
        with contextlib.suppress(Exception):
            await asyncio.sleep(0)
