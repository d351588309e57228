"""The synchronous publish (``mode="sync"``): every rank returns once the step is registered.

Each rank sends its block to its worker from the caller's thread (through the Bridge's event
loop), the ranks gather what they sent on rank 0, which registers the step on the scheduler in
one ``deisa_publish`` (waiting on flow control), and a broadcast carries the outcome, and rank
0's fields (contracts, the worker list, the scheduler's loss), back to every rank.

A send that fails with a communication error (``on_worker_loss="continue"``) may be to a
worker that has left: rank 0 waits (up to ``connect_timeout``) for the scheduler to drop it,
spreads the new worker list, and the ranks whose send failed send again, once, to the worker
of the new placement; a block that fails again is registered with its departed worker, which
the scheduler answers with ``lost`` (the step is lost, with a warning).

Only rank 0 hears from the scheduler that a worker left, and the other ranks hear from rank 0 only
at the end of a publish: a send to a worker killed since then needs a new connection, which
distributed retries, refused, for its whole connect timeout (30 s by default). So a send whose
connection is not made within ``REFUSAL_CHECK_S`` checks, and checks again at growing intervals,
whether anything still listens at the worker's address
(:func:`deisa.bridge.link.workers.refuses_connections`); a refusal fails the send then, as a
communication error.

Runs in a simulation rank: ``publish`` on its main thread (the gather and broadcast of
``mode="sync"``), the sends and rank 0's registration on the loop thread it waits for. Imports
the Bridge's parts, its collective protocol, the arrays' boxes, the scheduler link and the
registrar, :mod:`deisa.wire`, :mod:`deisa.contract` and :mod:`deisa._dask_internals`.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np

from .. import _dask_internals
from ..contract import Plan
from ..wire import step_key_name
from ..wire.layout import LayoutError, StepLayout
from ._collective import BridgeError, on_root, raise_first, reply_problem
from ._publisher import Entry, PublishTiming, registration
from .arrays.boxes import Geometry, Parcel
from .link.scheduler import register_until_answered
from .link.workers import refuses_connections
from .registration.registrar import registered_blocks

if TYPE_CHECKING:
    from ._parts import BridgeParts
    from .link.scheduler import SchedulerLink

logger = logging.getLogger(__name__)

REFUSAL_CHECK_S = 1.0
"""Seconds a sync send's connection may take before the Bridge checks whether its worker still
listens (then 2, 4 s later, and every ``REFUSAL_CHECK_MAX_S``)."""
REFUSAL_CHECK_MAX_S = 8.0


class _Sent(NamedTuple):
    """A rank's block of a sync publish, on its worker (its boxes' geometry, if a parcel;
    a parcel with no element is sent nowhere: no key, no worker)."""

    key: tuple[Any, ...] | None
    worker: str
    nbytes: int
    geometry: Geometry | None = None


class _SendFailure(NamedTuple):
    """A rank's block of a sync publish whose worker did not answer (it may have left)."""

    key: tuple[Any, ...]
    worker: str
    message: str
    geometry: Geometry | None = None


class SyncPublisher:
    """The sync publish of one :class:`~deisa.Bridge`; the caller's thread only."""

    def __init__(self, parts: BridgeParts, link: SchedulerLink) -> None:
        self.parts = parts
        self.link = link

    def publish(
        self,
        name: str,
        block: np.ndarray | Parcel | None,
        step: int,
        revision: int,
        problem: str | None,
        t0: float,
    ) -> None:
        reply: _Sent | _SendFailure | str | None
        plan = None if problem else self.parts.plan(name, step)
        key: tuple[Any, ...] | None = None
        rank = self.parts.rank
        if problem or block is None:
            reply = problem
        elif plan is not None and not plan.sends(rank):
            reply = None  # not wanted by the contract in force (deisa.contract)
        elif isinstance(block, Parcel) and not block.size:
            reply = _Sent(None, "", 0, block.geometry)  # nothing to send: its geometry only
        else:
            assert plan is not None
            step_key = step_key_name(self.link.run or "", name, step, revision)
            geometry = None
            if isinstance(block, Parcel):  # one key per rank (deisa.bridge.arrays.boxes)
                key, geometry = (step_key, rank), block.geometry
                block = self._packed(name, block)
            else:
                dec = self.parts.arrays.decompositions[name]
                key = (step_key, *plan.key_index(dec.block_index[rank]))
            reply = _with_geometry(self._send(name, step, key, block), geometry)
            if not isinstance(reply, _SendFailure) and self.parts.transport.give_back(block):
                self.parts.transport.settle()  # a slot it was packed into (else sent again)
        t1 = time.perf_counter()
        replies = self.parts.comm.gather((name, step, reply), root=0)
        placed, fields = on_root(
            self.parts.comm, lambda: self._queue(name, step, revision, plan, replies)
        )
        if placed == "retry":  # a worker left: place again, send again what failed, once
            self.parts.fields.deliver(fields)
            if isinstance(reply, _SendFailure) and key is not None:
                assert isinstance(block, np.ndarray)
                reply = _with_geometry(self._send(name, step, key, block), reply.geometry)
                self.parts.transport.give_back(block)
            replies = self.parts.comm.gather((name, step, reply), root=0)
            placed, fields = on_root(
                self.parts.comm,
                lambda: self._queue(name, step, revision, plan, replies, retried=True),
            )
        if placed == "queued":
            self.parts.steps.queued(name)
        self.parts.fields.deliver(fields)
        t2 = time.perf_counter()
        nbytes_sent = reply.nbytes if isinstance(reply, _Sent) else 0
        self.parts.timings.add(PublishTiming(name, step, nbytes_sent, t1 - t0, t2 - t1))
        logger.debug(
            "deisa bridge: %s step %d: send %.4f s, sync %.4f s", name, step, t1 - t0, t2 - t1
        )

    def _packed(self, name: str, parcel: Parcel) -> np.ndarray:
        """A parcel's array to send: its one box as it is (copied into a slot as it is sent), or
        its boxes packed into a slot of the worker's ring (sent from there), else into an array
        of their own."""
        dtype = self.parts.arrays.decompositions[name].dtype
        self.parts.transport.slot_pool.learn(name, parcel.size * dtype.itemsize)  # moving ones
        if len(parcel.arrays) == 1:
            return parcel.arrays[0]
        worker = self.parts.routing.worker_of[name]
        packed = self.parts.transport.copy_parcel_in(worker, parcel)
        if packed is None:
            packed = np.empty(parcel.shape, self.parts.arrays.decompositions[name].dtype)
            parcel.pack(packed)
        return packed

    def _send(
        self, name: str, step: int, key: tuple[Any, ...], block: np.ndarray
    ) -> _Sent | _SendFailure | str:
        worker = self.parts.routing.worker_of[name]
        try:
            nbytes = self.parts.loop.run(self._send_unless_refused(worker, {key: block}))
            return _Sent(key, worker, int(nbytes[key]))
        except Exception as exc:
            message = f"sending step {step} of {name!r} to worker {worker} failed: {exc!r}"
            if isinstance(exc, OSError) and self.parts.options.on_worker_loss == "continue":
                return _SendFailure(key, worker, message)  # its worker may have left
            return message

    async def _send_unless_refused(
        self, worker: str, blocks: dict[Any, np.ndarray]
    ) -> dict[Any, int]:
        """The loop thread: send ``blocks`` to ``worker``; a ``ConnectionRefusedError`` if the
        connection is not made and the worker refuses connections (see the module docstring).
        Through shared memory when the worker is on this node (:mod:`.transport`)."""
        ((key, block),) = blocks.items()
        nbytes = await self.parts.transport.send_shared(worker, key, block)
        if nbytes is not None:
            return {key: nbytes}
        pool = await self.link.pool.opened()
        connecting = asyncio.ensure_future(_dask_internals.open_comm(pool, worker))
        wait = REFUSAL_CHECK_S
        while not (await asyncio.wait({connecting}, timeout=wait))[0]:
            refused = await refuses_connections(worker, wait)
            if refused and not connecting.done():  # no await before cancel(): no race
                connecting.cancel()
                raise ConnectionRefusedError(
                    f"worker {worker} refuses connections: nothing listens there any more"
                )
            wait = min(2 * wait, REFUSAL_CHECK_MAX_S)
        stored = await _dask_internals.send_blocks_on(pool, worker, connecting.result(), blocks)
        self.parts.transport.sent_by_tcp()
        return stored

    def _queue(
        self,
        name: str,
        step: int,
        revision: int,
        plan: Plan | None,
        replies: list[tuple[str, int, Any]],
        retried: bool = False,
    ) -> tuple[str, dict[str, Any]]:
        """Rank 0 of a sync publish: register the step; what happened and the fields to spread."""
        raise_first([reply_problem(r, name, step) for r in replies])
        assert plan is not None
        if not plan.send:  # no rank sent anything: nothing to register
            return "skipped", self.parts.fields.collect()
        failed = [(rank, r[2]) for rank, r in enumerate(replies) if isinstance(r[2], _SendFailure)]
        if failed and not retried:
            departed = self._await_departure({failure.worker for _, failure in failed})
            lost = self.parts.worker_book.scheduler_lost()
            if lost is not None:  # the workers went with their scheduler: its loss, not theirs
                return "detached", {**self.parts.fields.collect(), "scheduler_lost": lost}
            rank, failure = failed[0]
            if not departed:
                raise BridgeError(f"rank {rank}: {failure.message}")
            logger.warning(
                "deisa bridge: step %d of %r: %d rank(s) could not send to worker(s) %s, which "
                "left the cluster; sending again under the new placement (rank %d: %s)",
                step, name, len(failed), ", ".join(sorted({f.worker for _, f in failed})),
                rank, failure.message,
            )  # fmt: skip
            return "retry", self.parts.fields.collect()  # with the new worker list
        # a block that failed twice names its departed worker: the scheduler says "lost"
        sent = {
            rank: (r.nbytes if isinstance(r, _Sent) else 0, r.worker,
                   *(() if r.geometry is None else (r.geometry,)))
            for rank, (_, _, r) in enumerate(replies)
            if isinstance(r, (_Sent, _SendFailure))
        }  # fmt: skip
        entry = Entry(-1, name, step, revision, tuple(sent), plan)
        per_rank = [sent.get(rank, (0, "")) for rank in range(len(replies))]
        dec = self.parts.arrays.decompositions[name]
        try:
            blocks, layout = registered_blocks(self.link.run or "", dec, entry, per_rank)
        except LayoutError as exc:
            raise BridgeError(f"step {step} of {name!r}: {exc}") from None
        attrs = self.parts.steps.attrs_of(name, step, revision)
        outcome = self._register(name, step, blocks, plan, layout, attrs)
        if isinstance(outcome, str):  # every rank fails or detaches at this call (Losses)
            return "detached", {**self.parts.fields.collect(), "scheduler_lost": outcome}
        kind, message = registration(outcome, name, step, self.parts.options.on_worker_loss)
        if kind == "error":
            raise BridgeError(message)
        return kind, self.parts.fields.collect()

    def _register(
        self,
        name: str,
        step: int,
        blocks: list[Any],
        plan: Plan,
        layout: StepLayout | None = None,
        attrs: dict[str, Any] | None = None,
    ) -> dict[str, Any] | str:
        """Rank 0: ``deisa_publish`` of the step: the scheduler's reply, or why the scheduler counts
        as lost (asked again until then:
        :func:`~deisa.bridge.link.scheduler.register_until_answered`), the one message of a lost
        scheduler, as in ``mode="async"`` (``docs/reliability.md``)."""
        registering = register_until_answered(
            self.link, self.parts.worker_book, give_up=True, name=name, step=step,
            blocks=blocks, timeout=self.parts.options.timeout, contract=plan.wire(),
            layout=layout, attrs=attrs,
        )  # fmt: skip
        return self.parts.loop.run(registering)

    def _await_departure(self, workers: set[str]) -> bool:
        """Rank 0: whether the scheduler drops ``workers`` within ``connect_timeout`` (no
        longer once it counts as lost itself)."""
        deadline = time.monotonic() + self.parts.options.connect_timeout
        book = self.parts.worker_book
        while workers & set(book.latest()):
            if time.monotonic() > deadline or book.scheduler_lost() is not None:
                return False
            time.sleep(0.05)
        return True


def _with_geometry(
    reply: _Sent | _SendFailure | str, geometry: Geometry | None
) -> _Sent | _SendFailure | str:
    """``reply`` carrying the geometry of the parcel it sent (a problem carries none)."""
    if isinstance(reply, _Sent):
        return _Sent(reply.key, reply.worker, reply.nbytes, geometry)
    if isinstance(reply, _SendFailure):
        return _SendFailure(reply.key, reply.worker, reply.message, geometry)
    return reply
