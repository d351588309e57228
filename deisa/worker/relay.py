"""The worker's side of the relay (:mod:`deisa.bridge.link.relay`): rank 0's calls, made on the
scheduler.

:class:`RelayServer` runs in a Dask worker process, on the worker's event loop, started by
deisa's services on the worker (:class:`~.services.WorkerServices`); it imports
:mod:`deisa.wire` and the scheduler extension's install only. It binds the node's relay name for
the worker's scheduler; where another worker of the node holds it already, this one does not
relay (one relay per node is enough: rank 0 needs one). Each connection is checked for the
worker's own uid before a byte of it is read (a flood of another account's is counted and logged
once a minute: :mod:`deisa.wire.guard`); each call is one of :data:`~deisa.wire.relay.RELAYED`,
made with the worker's connection to the scheduler (its TLS credentials), in a task of its own
(a registration may wait on flow control while the contracts' watch waits for a change). A
connection that closes cancels its calls still running."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
from collections.abc import Awaitable, Callable
from typing import Any

from .. import _dask_internals
from ..wire.guard import Guard, StreamListener, other_account
from ..wire.names import bind_first, run_secret
from ..wire.relay import INSTALL_OP, MAX_FRAME, RELAYED, pack, read_frame, relay_names

logger = logging.getLogger(__name__)

#: installs deisa's scheduler extension and, if asked, its worker services:
#: ``install(pool, scheduler, shared_memory)`` (given by the services that start the relay)
Install = Callable[[Any, str, bool], Awaitable[None]]


class RelayServer:
    """The relay of one worker (see the module); :meth:`start` returns ``None`` where the
    node's relay name is taken."""

    def __init__(
        self,
        worker: Any,
        pool: Any,
        server: StreamListener,
        scheduler: str,
        install: Install,
    ) -> None:
        self.worker = worker
        self._pool = pool
        self.scheduler = scheduler
        self._server = server
        self._install_on_scheduler = install
        self._connections: dict[asyncio.StreamWriter, set[asyncio.Task[None]]] = {}

    @classmethod
    async def start(cls, worker: Any, install: Install) -> RelayServer | None:
        pool, scheduler = _dask_internals.worker_pool(worker)
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM | socket.SOCK_CLOEXEC)
        try:
            bound = bind_first(sock, relay_names(scheduler, run_secret()))
        except OSError:
            sock.close()
            raise
        if bound is None:
            sock.close()
            logger.debug("deisa: another worker of this node relays to %s", scheduler)
            return None
        sock.listen(64)
        relay: RelayServer | None = None

        async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            assert relay is not None
            await relay.serve(reader, writer)

        guard = Guard(f"the relay of worker {worker.address}", 1)
        server = StreamListener(sock, serve, guard, authorize=other_account, limit=MAX_FRAME)
        relay = cls(worker, pool, server, scheduler, install)
        logger.info("deisa: worker %s relays rank 0's calls to %s", worker.address, scheduler)
        return relay

    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """One rank's connection (of this account: :func:`~deisa.wire.guard.other_account`), to its
        end."""
        calls: set[asyncio.Task[None]] = set()
        self._connections[writer] = calls
        try:
            while True:
                try:
                    message = await read_frame(reader)
                except Exception:  # closed, died, or not our wire (msgpack's errors): done
                    return
                if message.get("op") == "hello":
                    writer.write(
                        pack(
                            {
                                "id": message.get("id"),
                                "scheduler": self.scheduler,
                                "worker": str(self.worker.address),
                            }
                        )
                    )
                    continue
                task = asyncio.ensure_future(self._answer(message, writer))
                calls.add(task)
                task.add_done_callback(calls.discard)
        finally:
            self._connections.pop(writer, None)
            for task in calls:
                task.cancel()
            writer.close()

    async def _answer(self, message: dict[str, Any], writer: asyncio.StreamWriter) -> None:
        ident, op, kwargs = message.get("id"), message.get("op"), message.get("kwargs")
        try:
            if op not in RELAYED or not isinstance(kwargs, dict):
                raise ValueError(f"the relay makes deisa's calls only, not {op!r}")
            result: Any = None
            if op == INSTALL_OP:
                await self._install(**kwargs)
            else:
                result = await getattr(self._pool(self.scheduler), str(op))(**kwargs)
            reply = {"id": ident, "result": result}
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            kind = (
                "timeout"
                if isinstance(exc, (asyncio.TimeoutError, TimeoutError))
                else "os"
                if isinstance(exc, OSError)
                else "other"
            )
            reply = {"id": ident, "error": type(exc).__name__, "message": str(exc), "kind": kind}
        try:
            frame = pack(reply)
        except Exception as exc:  # a reply msgpack cannot carry: rank 0 must not wait for it
            why = f"the scheduler's reply cannot be relayed: {type(exc).__name__}: {exc}"
            frame = pack({"id": ident, "error": "TypeError", "message": why, "kind": "other"})
        with contextlib.suppress(OSError):
            writer.write(frame)

    async def _install(self, shared_memory: bool = True) -> None:
        await self._install_on_scheduler(self._pool, self.scheduler, shared_memory)

    def close(self) -> None:
        """Stop listening and end every connection, its calls cancelled: before the worker
        closes its own connections, so that rank 0 sees the relay leave (and makes its calls
        again through distributed) rather than the scheduler's connection failing."""
        self._server.close()
        for writer, calls in list(self._connections.items()):
            for task in calls:
                task.cancel()
            writer.transport.abort()
        self._connections.clear()
