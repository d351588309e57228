"""Rank 0's calls to the scheduler, relayed by a worker of its node.

Rank 0 is the rank that talks to the scheduler. With distributed that costs it about 0.4 s of
CPU and 27 MiB of memory, for the import alone (docs/benchmarks.md, section 11), where the
other ranks of a node that send through shared memory import neither. So where a worker of
the job shares rank 0's node and runs deisa's worker services (:mod:`deisa.worker.services`;
``deisa-run`` starts its workers with it, ``dask worker --preload deisa.worker`` does the
same), that
worker also relays rank 0's calls: it listens on an abstract Unix socket named from the
scheduler's address, the account's uid and the run's secret (:func:`relay_names`,
:mod:`deisa.wire.names`; one per node and scheduler: the first worker of the node to bind it
serves),
and makes each call it receives on its own connection to the scheduler
(:mod:`deisa.worker.relay`).

The wire: frames of a 4-byte big-endian length then a msgpack map, as distributed's own
messages (tuples arrive as tuples). Rank 0 sends ``{"id": n, "op": route, "kwargs": {...}}``,
where ``route`` is one of :data:`RELAYED` (deisa's routes, and ``"install"``: the scheduler
extension and the workers' services); the worker answers ``{"id": n, "result": ...}``, or
``{"id": n, "error": type name, "message": ..., "kind": "os" | "timeout" | "other"}``. Both
ends check the other's uid (``SO_PEERCRED``) before reading anything: a name held by another
account is skipped for the next (:mod:`deisa.wire.names`). Nothing is unpickled; the worker relays
nothing but those routes.

When the relay's connection is lost (its worker left the job), the calls still waiting and
every later call go through distributed, as without a relay: rank 0 behaves as over TCP,
having paid for distributed's import only then. A call repeated that way may reach the
scheduler twice, which its routes allow (a step registered again replaces itself, an array
opened or closed again by the same run is unchanged).

Runs on rank 0's event-loop thread.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
from collections.abc import Awaitable, Callable
from typing import Any

from ...wire.names import connect_own, rank_secrets
from ...wire.relay import pack, read_frame, relay_names

logger = logging.getLogger(__name__)


class RemoteError(Exception):
    """An exception the scheduler's route raised, relayed: its ``str`` names the original type."""


class RelayLostError(ConnectionResetError):
    """The relay's connection ended with the call unanswered."""


class Relay:
    """Rank 0's connection to the relay of its node, to the scheduler at ``scheduler``.

    Made by :meth:`open` (``None`` where no relay of this account answers); its calls run on
    the Bridge's event-loop thread.
    """

    def __init__(
        self,
        scheduler: str,
        worker: str,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
    ) -> None:
        self.scheduler = scheduler
        self.worker = worker
        self._reader = reader
        self._writer = writer
        self._next = 0
        self._waiting: dict[int, asyncio.Future[Any]] = {}
        self.lost = False
        self._receiving = asyncio.ensure_future(self._receive())

    @classmethod
    async def open(cls, scheduler: str, timeout: float) -> Relay | None:
        """Connect to the relay to ``scheduler`` of this node, or ``None`` (no worker of this
        node relays, or the name belongs to another account)."""
        groups = [relay_names(scheduler, secret) for secret in rank_secrets()]
        sock = await connect_own(socket.SOCK_STREAM, groups)
        if sock is None:  # no worker of this node relays (for this account)
            logger.debug("deisa bridge: no relay to %s on this node", scheduler)
            return None
        try:
            reader, writer = await asyncio.open_unix_connection(sock=sock)
        except OSError as exc:  # ECONNREFUSED / ENOENT: no relay on this node
            logger.debug("deisa bridge: no relay to %s on this node: %s", scheduler, exc)
            sock.close()
            return None
        try:
            writer.write(pack({"id": 0, "op": "hello", "kwargs": {}}))
            hello = await asyncio.wait_for(read_frame(reader), timeout)
            if hello.get("scheduler") != scheduler or not isinstance(hello.get("worker"), str):
                raise ValueError(f"not this scheduler's relay: {hello!r}")
        except (OSError, ValueError, asyncio.TimeoutError) as exc:
            logger.warning("deisa bridge: the relay to %s did not answer: %r", scheduler, exc)
            writer.close()
            return None
        logger.info(
            "deisa bridge: rank 0 calls the scheduler through the relay of worker %s",
            hello["worker"],
        )
        return cls(scheduler, str(hello["worker"]), reader, writer)

    async def call(self, op: str, **kwargs: Any) -> Any:
        """``op`` (one of :data:`RELAYED`) with ``kwargs`` on the scheduler; its reply.

        Raises :class:`RelayLostError` when the relay's connection ends first, an ``OSError`` or
        ``asyncio.TimeoutError`` for those raised on the worker's side (the scheduler is
        gone, or did not answer), a :class:`RemoteError` for any other.
        """
        if self.lost:
            raise RelayLostError(f"the relay of worker {self.worker} is gone")
        self._next += 1
        ident = self._next
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._waiting[ident] = future
        try:
            self._writer.write(pack({"id": ident, "op": op, "kwargs": kwargs}))
            return await future
        finally:
            self._waiting.pop(ident, None)

    async def _receive(self) -> None:
        try:
            while True:
                reply = await read_frame(self._reader)
                future = self._waiting.get(reply.get("id"))  # type: ignore[arg-type]
                if future is None or future.done():
                    continue  # a call cancelled meanwhile
                if "error" in reply:
                    future.set_exception(_relayed_error(reply))
                else:
                    future.set_result(reply.get("result"))
        except (OSError, ValueError) as exc:
            logger.info("deisa bridge: the relay of worker %s is gone: %r", self.worker, exc)
        finally:
            self.lost = True
            for future in self._waiting.values():
                if not future.done():
                    future.set_exception(RelayLostError(f"the relay of worker {self.worker} left"))
            self._writer.close()

    async def close(self) -> None:
        """Close the connection (the worker cancels the calls still running)."""
        self.lost = True
        self._writer.close()
        self._receiving.cancel()
        with contextlib.suppress(asyncio.CancelledError, OSError):
            await self._receiving


def _relayed_error(reply: dict[str, Any]) -> BaseException:
    message = f"{reply.get('error')}: {reply.get('message')}"
    kind = reply.get("kind")
    if kind == "os":
        return OSError(message)
    if kind == "timeout":
        return asyncio.TimeoutError(message)
    return RemoteError(message)


async def through(
    relay: Relay | None, op: str, kwargs: dict[str, Any], fallback: Callable[[], Awaitable[Any]]
) -> Any:
    """``op`` through ``relay``; through ``fallback()`` (distributed) if there is no relay or it
    is lost before answering."""
    if relay is not None and not relay.lost:
        try:
            return await relay.call(op, **kwargs)
        except RelayLostError as exc:
            logger.info("deisa bridge: %s again through distributed: %s", op, exc)
    return await fallback()
