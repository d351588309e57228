"""Early registration of asynchronous publications: "block sent" notices to rank 0.

In ``mode="async"`` rank 0 learns that every rank has sent its block of a step from the
exchange of the next :meth:`~deisa.Bridge.publish` (:mod:`deisa.bridge._publisher`), which would
leave the analytics one output period behind. To register a step as soon as its blocks are on
their workers, each rank's loop thread also sends rank 0 a small notice when one of its sends
completes, over a TCP listener that rank 0 opens beside its scheduler connection. This is not
MPI (the C simulation owns MPI, usually at ``MPI_THREAD_SINGLE``) and not the scheduler (which
still gets one message per step and array).

The notices only make registration earlier: they carry no failure, and a notice lost (or a
listener that could not be opened, e.g. for a ``tls://`` scheduler) only means that the step is
registered at the next exchange, as without them. Both ways feed :class:`EarlyRegistration`,
on rank 0's loop thread, which hands each publication to the registrar once, in order.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from .._dask_internals import import_distributed
from ._publisher import Entry, Sent

if TYPE_CHECKING:
    from distributed.core import Server

logger = logging.getLogger(__name__)

ROUTE = "deisa_sent"


class EarlyRegistration:
    """Rank 0: hand publications to the registrar as soon as every sender has reported.

    Every method runs on rank 0's loop thread (the Bridge posts to it with
    ``call_soon_threadsafe``), so no lock is needed.

    Parameters
    ----------
    nranks
        Ranks of the Bridge's communicator.
    queue
        ``queue(entry, sent)``: hand a publication to the registrar, with ``(nbytes, worker)``
        of each rank's block.
    """

    def __init__(self, nranks: int, queue: Callable[[Entry, list[Sent]], None]) -> None:
        self.nranks = nranks
        self._queue = queue
        self.token = uuid.uuid4().hex
        self.next_seq = 0  # publications below were handed to the registrar
        self.early = 0  # of which handed on notices, before their exchange
        self._entries: dict[int, Entry] = {}
        self._sent: dict[int, dict[int, Sent]] = {}
        self._server: Server | None = None
        self.address: str | None = None
        self.active = False  # the registrar exists (the connection is known)

    async def listen(self, scheduler_address: str) -> str | None:
        """Open the listener on the interface that reaches the scheduler; its address.

        ``None`` (no early registration) for a scheduler that is not plain ``tcp://``: the
        notices would bypass its TLS settings.
        """
        import_distributed()
        from distributed.comm import parse_address, parse_host_port
        from distributed.core import Server
        from distributed.utils import get_ip

        protocol, location = parse_address(scheduler_address)
        if protocol != "tcp":
            logger.info(
                "deisa bridge: %s scheduler: steps are registered at the next publish "
                "(no early notices)",
                protocol,
            )
            return None
        host = get_ip(parse_host_port(location)[0])
        self._server = Server({ROUTE: self.notice}, needs_workdir=False)
        await self._server.listen(f"tcp://{host}:0")
        self.address = self._server.address
        return self.address

    async def close(self) -> None:
        if self._server is not None:
            await self._server.close()
            self._server = None

    def activate(self) -> None:
        """The registrar is running: hand what is ready."""
        self.active = True
        self._drain()

    def notice(self, token: str, seq: int, rank: int, nbytes: int, worker: str) -> str:
        """The ``deisa_sent`` route: ``rank`` has sent its block of publication ``seq``."""
        if token != self.token:  # another job's rank, or a stale one
            return "refused"
        self.sent(seq, rank, nbytes, worker)
        return "OK"

    def sent(self, seq: int, rank: int, nbytes: int, worker: str) -> None:
        if seq >= self.next_seq:
            self._sent.setdefault(seq, {})[rank] = (nbytes, worker)
            self._drain()

    def known(self, entry: Entry) -> None:
        """Rank 0 numbered ``entry`` (at its own publish)."""
        if entry.seq >= self.next_seq:
            self._entries[entry.seq] = entry
            self._drain()

    def ready(self, entry: Entry, sent: list[Sent]) -> None:
        """The exchange found ``entry`` sent by every rank (the way without notices)."""
        if entry.seq < self.next_seq:
            return  # handed on its notices already
        self._hand(entry, sent)
        self._drain()

    def _drain(self) -> None:
        while self.active and (entry := self._entries.get(self.next_seq)) is not None:
            got = self._sent.get(entry.seq, {})
            senders = range(self.nranks) if entry.senders is None else entry.senders
            if any(rank not in got for rank in senders):
                return
            self.early += 1
            self._hand(entry, [got.get(rank, (0, "")) for rank in range(self.nranks)])

    def _hand(self, entry: Entry, sent: list[Sent]) -> None:
        self._queue(entry, sent)
        self._entries.pop(entry.seq, None)
        self._sent.pop(entry.seq, None)
        self.next_seq = entry.seq + 1


async def notify(
    pool: Any, address: str, token: str, seq: int, rank: int, nbytes: int, worker: str
) -> None:
    """A rank's loop thread: tell rank 0 that its block of ``seq`` is on ``worker``."""
    try:
        await pool(address).deisa_sent(
            token=token, seq=seq, rank=rank, nbytes=nbytes, worker=worker
        )
    except Exception:  # the exchange carries the same fact, later
        logger.debug("deisa bridge: notice of publication %d to %s failed", seq, address)
