"""The parts of one rank's Bridge: :class:`BridgeParts`, each part an object that owns its fields.

The Bridge (:mod:`.bridge`), its two publish modes (:mod:`._async`, :mod:`._sync`) and what it
does when a worker or the scheduler is lost (:class:`._losses.Losses`) hold the same parts and
change them only through their methods; the holder itself is frozen (no module rebinds a part),
and none reads another's private attributes. They call the scheduler through the
:class:`~deisa.bridge.link.scheduler.SchedulerLink`.

Runs in a simulation rank: built on its main thread by the Bridge's construction; each part's
docstring says which thread writes its fields. Imports the parts' own modules (the arrays
declared, the steps, the loop, the contracts, the routing and worker book, the transport, the
options, the exchange's fields) and :mod:`deisa.contract`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..contract import FULL, Plan
from ._collective import ExchangeFields
from ._loop import LoopThread
from ._steps import StepBook, Timings
from .arrays.declared import Arrays
from .contracts import ContractBook
from .link.workers import Detachment, Routing, WorkerBook
from .options import BridgeOptions
from .shm.transport import Transport


@dataclass(frozen=True)
class BridgeParts:
    """The parts of one rank's Bridge, built empty (:meth:`new`), filled by its construction.

    Attributes
    ----------
    comm : mpi4py communicator
        The Bridge's communicator.
    rank : int
        This rank in ``comm``.
    options : BridgeOptions
        Its checked options.
    loop : LoopThread
        The event-loop thread, where the sends and rank 0's calls to the scheduler run, and
        rank 0's coroutines held until the close (:meth:`LoopThread.keep`).
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
    arrays : Arrays
        The arrays, as every rank declared them, and this rank's block of each.
    steps : StepBook
        The publications of each ``(array, step)``; rank 0's steps queued on the scheduler.
    timings : Timings
        One :class:`~._publisher.PublishTiming` per publish on this rank.
    detachment : Detachment
        Whether (and why) the Bridge stopped sending, the same on every rank.
    """

    comm: Any
    rank: int
    options: BridgeOptions
    loop: LoopThread
    transport: Transport
    routing: Routing
    fields: ExchangeFields
    contracts: ContractBook
    worker_book: WorkerBook
    arrays: Arrays
    steps: StepBook
    timings: Timings
    detachment: Detachment

    @classmethod
    def new(cls, comm: Any, options: BridgeOptions) -> BridgeParts:
        """The parts of a Bridge over ``comm`` with ``options``, before its arrays are known."""
        rank: int = comm.Get_rank()
        return cls(
            comm=comm,
            rank=rank,
            options=options,
            loop=LoopThread(f"deisa-bridge-{rank}"),
            transport=Transport(options.transport),
            routing=Routing(options.placement, {}, rank, None),
            fields=ExchangeFields(),
            contracts=ContractBook(),
            worker_book=WorkerBook(options.connect_timeout),
            arrays=Arrays(),
            steps=StepBook(),
            timings=Timings(),
            detachment=Detachment(),
        )

    @property
    def asynchronous(self) -> bool:
        """Whether the Bridge publishes in ``mode="async"``."""
        return self.options.mode == "async"

    @property
    def detached(self) -> bool:
        """Whether the Bridge stopped sending (:attr:`detachment`)."""
        return self.detachment.reason is not None

    def plan(self, name: str, step: int) -> Plan:
        """What ``step`` of ``name`` sends under the contract in force (same on every rank)."""
        dec = self.arrays.decompositions[name]
        if dec.is_moving:  # its blocks change: a contract only thins its steps
            contract = self.contracts.active.get(name)
            wanted = contract is None or contract.wants(step)
            return FULL if wanted else Plan(send=False, contract=contract)
        return self.contracts.plan(name, step, dec.chunks, dec.block_index)
