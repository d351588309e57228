"""What the parts of one rank's Bridge share while it runs: :class:`RunState`.

The Bridge (:mod:`.bridge`), its two publish modes (:mod:`._async`, :mod:`._sync`) and what it
does when a worker or the scheduler is lost (:class:`._losses.Losses`) read and write this one
object, and call the scheduler through the :class:`~._link.SchedulerLink`; none reads another's
private attributes.
"""

from __future__ import annotations

import concurrent.futures
from typing import Any

from ..contract import Plan
from ._collective import ExchangeFields
from ._loop import LoopThread
from ._publisher import PublishTiming
from ._workers import Routing, WorkerBook
from .contracts import ContractBook
from .decomposition import ArraySpec, Decomposition
from .options import BridgeOptions
from .transport import Transport


class RunState:
    """The shared state of one rank's Bridge; built empty, filled by the Bridge's construction.

    Parameters
    ----------
    comm
        The Bridge's communicator.
    options
        Its checked options.

    Attributes
    ----------
    rank : int
        This rank in ``comm``.
    loop : LoopThread
        The event-loop thread, where the sends and rank 0's calls to the scheduler run.
    transport : Transport
        How this rank's blocks reach their workers (shared memory or TCP).
    routing : Routing
        The workers in use and each array's placement over them (the same on every rank).
    fields : ExchangeFields
        What rank 0 passes to every rank at a step boundary.
    contracts : ContractBook
        The contracts in force.
    worker_book : WorkerBook
        Rank 0: the live workers as the scheduler last told them, and whether it still answers.
    decompositions : dict of str to Decomposition
        The arrays, as every rank declared them.
    specs : dict of str to ArraySpec
        This rank's block of each array.
    timings : list of PublishTiming
        One per publish on this rank.
    revisions : dict of (str, int) to int
        Publications of each ``(array, step)`` so far (main thread, counted on every rank).
    nsteps : dict of str to int
        Rank 0: distinct steps queued on the scheduler, per array.
    background : list of concurrent.futures.Future
        Rank 0's coroutines running until the close (connection, registrar, watches).
    detached : str or None
        Why the Bridge stopped sending (the scheduler lost), the same on every rank.
    """

    def __init__(self, comm: Any, options: BridgeOptions) -> None:
        self.comm = comm
        self.rank: int = comm.Get_rank()
        self.options = options
        self.loop = LoopThread(f"deisa-bridge-{self.rank}")
        self.transport = Transport(options.transport)
        self.routing = Routing(options.placement, {}, self.rank, None)
        self.fields = ExchangeFields()
        self.contracts = ContractBook()
        self.worker_book = WorkerBook(options.connect_timeout)
        self.decompositions: dict[str, Decomposition] = {}
        self.specs: dict[str, ArraySpec] = {}
        self.timings: list[PublishTiming] = []
        self.revisions: dict[tuple[str, int], int] = {}
        self.nsteps: dict[str, int] = {}
        self.background: list[concurrent.futures.Future[Any]] = []
        self.detached: str | None = None

    @property
    def asynchronous(self) -> bool:
        """Whether the Bridge publishes in ``mode="async"``."""
        return self.options.mode == "async"

    def plan(self, name: str, step: int) -> Plan:
        """What ``step`` of ``name`` sends under the contract in force (same on every rank)."""
        dec = self.decompositions[name]
        return self.contracts.plan(name, step, dec.chunks, dec.block_index)

    def queued(self, name: str) -> None:
        """Rank 0: one more distinct step of ``name`` queued on the scheduler."""
        self.nsteps[name] = self.nsteps.get(name, 0) + 1

    def cancel_background(self) -> None:
        """Cancel rank 0's background coroutines (the Bridge closes, or detaches)."""
        for future in self.background:
            future.cancel()
