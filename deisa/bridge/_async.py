"""The asynchronous publish (``mode="async"``): block copies, background sends, the exchange.

:meth:`~deisa.Bridge.publish` copies the block into a shared slot of its worker's ring when the
worker is on the rank's node (:mod:`.transport`), else into a buffer the Bridge owns
(:class:`Buffers`), starts its send to the worker on the event-loop thread and returns. Every
publish posts one *exchange*, a small non-blocking ``allgather`` of each rank's :class:`RankReport`
(:mod:`._exchange`), which the next call of the Bridge completes, and which the
:class:`~deisa.bridge._publisher.Ledger` turns into the same decisions on every rank (waits for
room exchange again, blocking, until there is room).

Who owns what:

- the caller's (main) thread: MPI, the ledger, :attr:`AsyncPublisher.sends`, the buffers,
  the counters; it is the only thread that calls MPI;
- the loop thread: the sends' coroutines, rank 0's connection, its registrar (the steps'
  ``deisa_publish`` calls, in publication order) and early registration
  (:mod:`deisa.bridge.registration.registrar`, :mod:`deisa.bridge.registration.notices`); it writes
  rank 0's :class:`~deisa.bridge.registration.registrar.RootNews`, which the main thread reads when
  it posts an exchange, and wakes the main thread through :attr:`AsyncPublisher.progress`.

A send that fails because its worker left (``on_worker_loss="continue"``) is not reported:
it waits for the exchange that spreads the new worker list, and is then sent again to the
worker the new placement gives, from its buffer (kept until the send succeeds).

Runs in a simulation rank, on its main thread (``publish`` and the exchange) and its event-loop
thread (the sends). Imports the Bridge's buffers, exchange, publisher, sends and collective errors,
the arrays wing's boxes, the registrar and the shared-memory pack; the wire's key names.
"""

from __future__ import annotations

import concurrent.futures
import logging
import math
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

from ..wire import step_key_name
from ._buffers import Buffers
from ._collective import BridgeError
from ._exchange import Exchanger
from ._publisher import (
    Connection,
    Entry,
    Exchanged,
    Ledger,
    PublishTiming,
    RankReport,
    RootReport,
)
from ._sends import Send, news_of
from .arrays.boxes import Geometry, Parcel
from .registration.registrar import Registrar, plan_of
from .shm.pack import aligned

if TYPE_CHECKING:
    from ._parts import BridgeParts
    from .link.scheduler import SchedulerLink
    from .registration.registrar import EarlyRegistration

logger = logging.getLogger(__name__)


class AsyncPublisher:
    """The async machinery of one :class:`~deisa.Bridge` (see the module docstring)."""

    def __init__(
        self,
        parts: BridgeParts,
        link: SchedulerLink,
        on_connection: Callable[[Connection], str | None],
    ) -> None:
        self.parts = parts
        self.link = link
        self.on_connection = on_connection  # every rank, the connection known: its problem
        self.ledger = Ledger(parts.comm.Get_size())
        self.sends: dict[int, Send] = {}
        self.buffers = Buffers()
        self.peak_in_flight: dict[str, int] = {}
        self.exchanger = Exchanger(parts.comm)
        self.raised: str | None = None  # the background failure already raised here
        self.progress = threading.Event()  # set by the loop thread: a send, a registration...
        self.registrar = Registrar(parts, link, self.progress)  # rank 0's; every rank's notices
        self._announced = False  # rank 0, main thread: the connection went in an exchange
        # inside Bridge.step(): each publish's (call, problem), posted in one exchange at its end
        self.held: list[tuple[tuple[Any, Any], str | None]] | None = None
        self._sends_done = False  # set by the loop thread: a send finished (reclaim it)

    @property
    def early(self) -> EarlyRegistration | None:
        """Rank 0's early registration, once it connects (:attr:`Registrar.early`)."""
        return self.registrar.early

    # -- the main thread -------------------------------------------------------------------------

    @property
    def exchanges(self) -> int:
        """Exchanges completed so far."""
        return self.exchanger.completed

    def publish(
        self,
        name: str,
        block: np.ndarray | Parcel | None,
        step: int,
        revision: int,
        problem: str | None,
        t0: float,
    ) -> None:
        """The async :meth:`~deisa.Bridge.publish` (see there); ``block`` is a fixed array's
        block, or this rank's :class:`~deisa.bridge.arrays.boxes.Parcel` of boxes.

        Completes the exchange the previous call posted (its decisions: a failure, or the
        previous call's problem, raised here on every rank), waits for room if the ledger says
        so (exchanging, blocking), copies and sends the block, and posts this call's exchange.
        A rank whose call is wrong (``problem``) sends nothing: every rank raises it at the
        next call.

        The calls to the loop thread it makes reach it together as it returns
        (:meth:`~._loop.LoopThread.batched`), so that the loop's work for this block does not
        run inside the call on a rank of one core.
        """
        with self.parts.loop.batched():
            self._publish(name, block, step, revision, problem, t0)

    def _publish(
        self,
        name: str,
        block: np.ndarray | Parcel | None,
        step: int,
        revision: int,
        problem: str | None,
        t0: float,
    ) -> None:
        parts = self.parts
        self.complete()
        self.raise_failure()
        if self.ledger.connection is None and not parts.detached:
            # rank 0 may be connected already (a Bridge created at PDI's `init_on' event, or
            # before the simulation's first step): one more exchange tells every rank now, so
            # that this block goes straight to its worker instead of being copied twice
            self.exchange()
            self.raise_failure()
        if parts.detached:
            return
        step_ok = isinstance(step, (int, np.integer))
        valid = step_ok and isinstance(name, str) and name in parts.arrays.decompositions
        # plain values only in the exchange: whatever a wrong call passed, it pickles
        call = (name if isinstance(name, str) else repr(name), int(step) if step_ok else repr(step))
        t1 = time.perf_counter()
        plan = parts.plan(name, int(step)) if valid and int(step) >= 0 else None
        if plan is None or not plan.send:  # wrong, or not wanted by the contract in force
            self.post_or_hold(call, problem)
            parts.timings.add(
                PublishTiming(name, int(step) if valid else -1, 0, 0.0, time.perf_counter() - t0,
                              mode="async")
            )  # fmt: skip
            return
        limit = parts.options.max_in_flight
        if not self.wait_until(lambda: self.ledger.in_flight(name) < limit, call, problem):
            return  # this call is wrong: the next call raises it on every rank
        if parts.detached:
            return
        t2 = time.perf_counter()
        entry = self.ledger.add(name, int(step), revision, plan.ranks, plan)
        self.registrar.known(entry)
        if self._sends_done:  # else nothing since the last exchange's reclaim
            self.reclaim()
        nbytes = 0
        if problem is None and block is not None and plan.sends(parts.rank):  # else not sent
            nbytes = self.copy_and_send(entry, block)
        t3 = time.perf_counter()
        self.post_or_hold(call, problem)
        t4 = time.perf_counter()
        if self.held is None:  # in a step, once its copies are over (end_step)
            parts.transport.settle()  # the channels' threads unmap and map slots after the copy
        in_flight = self.ledger.in_flight(name)
        self.peak_in_flight[name] = max(self.peak_in_flight.get(name, 0), in_flight)
        parts.timings.add(
            PublishTiming(
                name, int(step), nbytes, t3 - t2, (t1 - t0) + (t2 - t1) + (t4 - t3), t3 - t2,
                t2 - t1, "async",
            )
        )  # fmt: skip
        logger.debug(
            "deisa bridge: %s step %d: copy %.4f s, exchanges %.4f s, wait %.4f s, %d in flight",
            name, step, t3 - t2, (t1 - t0) + (t4 - t3), t2 - t1, in_flight,
        )  # fmt: skip

    def copy_and_send(self, entry: Entry, block: np.ndarray | Parcel) -> int:
        """Copy ``block`` (``entry``'s) into a slot of its worker's ring, or else a buffer of
        the Bridge's own, and start sending it if the rank is connected; its bytes. A parcel
        of boxes is packed there, one copy per box; one with no element sends nothing (its
        geometry goes to rank 0 with the next report)."""
        parts, name = self.parts, entry.name
        worker = parts.routing.worker_of.get(name) if self.ledger.connection else None
        geometry = None
        if isinstance(block, Parcel):
            geometry = block.geometry
            if not block.size:
                self.sends[entry.seq] = Send(entry, None, geometry=geometry, empty=True)
                self.registrar.sent(entry.seq, 0, "", geometry)
                return 0
            dtype = parts.arrays.decompositions[name].dtype
            parts.transport.slot_pool.learn(name, block.size * dtype.itemsize)  # moving ones
            buffer = parts.transport.copy_parcel_in(worker, block) if worker else None
            if buffer is None:  # no shared slot: a buffer of the Bridge's own
                buffer = self.buffers.take_parcel(name, block.shape, dtype)
                block.pack(buffer)
        else:
            buffer = parts.transport.copy_in(worker, block) if worker else None
            if buffer is None:  # no shared slot: a buffer of the Bridge's own
                spec = parts.arrays.specs[name]
                buffer = self.buffers.take(name, spec.shape, spec.dtype)
                np.copyto(buffer, block)
        send = Send(entry, buffer, geometry=geometry)
        self.sends[entry.seq] = send
        if self.ledger.connection is not None:
            self.start_send(send)
        return int(buffer.nbytes)

    def start_send(self, send: Send) -> None:
        """Send ``send``'s buffer to this rank's worker under the current placement."""
        parts = self.parts
        name, entry = send.entry.name, send.entry
        if send.empty:
            return
        step_key = step_key_name(self.link.run or "", name, entry.step, entry.revision)
        if send.geometry is not None:  # a parcel: one key per rank (deisa.bridge.arrays.boxes)
            key: tuple[Any, ...] = (step_key, parts.rank)
        else:
            dec = parts.arrays.decompositions[name]
            key = (step_key, *plan_of(entry).key_index(dec.block_index[parts.rank]))
        send.worker = parts.routing.worker_of[name]
        send.failed_at = None
        assert send.buffer is not None
        sending = parts.transport.send(self.link.pool, send.worker, key, send.buffer)
        future = parts.loop.spawn_soon(sending)
        send.future = future
        worker = send.worker
        geometry = send.geometry
        future.add_done_callback(lambda done: self._sent(entry.seq, worker, done, geometry))

    def _sent(
        self,
        seq: int,
        worker: str,
        future: concurrent.futures.Future[Any],
        geometry: Geometry | None = None,
    ) -> None:
        """Loop thread, a send finished: wake the main thread, and tell rank 0 (._notices)."""
        self._sends_done = True
        self.progress.set()
        if future.cancelled() or future.exception() is not None:
            return  # the exchange reports the failure
        self.registrar.sent(seq, int(next(iter(future.result().values()))), worker, geometry)

    def reroute(self, departed: list[str]) -> None:
        """The workers ``departed`` left: send again what was on its way to them (same call
        on every rank, right after the exchange that spread the new list)."""
        gone = set(departed)
        for send in self.sends.values():
            if send.reported or send.buffer is None or send.worker not in gone:
                continue
            future = send.future
            if future is not None and future.done() and _succeeded(future):
                continue  # on the worker that left: the scheduler reports the step lost
            if future is not None:
                future.cancel()
            self._resend(send)

    def _resend(self, send: Send) -> None:
        if self.parts.routing.workers:
            logger.info(
                "deisa bridge: step %d of %r: worker %s left, sending to %s",
                send.entry.step, send.entry.name, send.worker,
                self.parts.routing.worker_of[send.entry.name],
            )  # fmt: skip
            self.start_send(send)
        else:
            send.lost = True

    def report(self, call: tuple[Any, Any] | None, problem: str | None) -> RankReport:
        """This rank's part of the next exchange."""
        parts = self.parts
        left = parts.options.on_worker_loss == "continue"  # a worker may leave: hold failures
        sent, failed = news_of(self.sends, 2 * parts.options.connect_timeout, left,
                               parts.routing.workers, self._resend)  # fmt: skip
        root = None
        if parts.rank == 0:
            news = self.registrar.news
            connection = None
            if news.connection is not None and not self._announced:
                connection, self._announced = news.connection, True
            root = RootReport(connection, news.connect_error, news.registered, news.error,
                              parts.fields.collect())  # fmt: skip
        return RankReport(call, problem, tuple(sent), tuple(failed), root)

    def begin_step(self) -> None:
        """``bridge.step(t)`` starts: its publishes' exchanges are held (:attr:`held`) and
        their blocks for one worker packed into one slot (``Transport.begin_step``)."""
        if self.held is not None:
            raise RuntimeError("bridge.step() inside another bridge.step()")
        self.held = []
        self.parts.transport.begin_step(self._declared_bytes)

    def _declared_bytes(self) -> dict[str, int]:
        """The bytes of this rank's fixed arrays' blocks for each of their workers."""
        found: dict[str, int] = {}
        for name, spec in self.parts.arrays.specs.items():
            worker = self.parts.routing.worker_of.get(name) if self.ledger.connection else None
            if worker is not None and not spec.is_moving:
                nbytes = math.prod(spec.shape) * spec.dtype.itemsize
                found[worker] = found.get(worker, 0) + aligned(nbytes)
        return found

    def end_step(self) -> list[tuple[tuple[Any, Any], str | None]]:
        """The step's publishes are over: its packs are closed; their held (call, problem)."""
        held, self.held = self.held or [], None
        self.parts.transport.end_step()
        return held

    def post_or_hold(self, call: tuple[Any, Any], problem: str | None) -> None:
        """Post this publish's exchange, or hold it for the one exchange that ends the step
        (inside :meth:`deisa.Bridge.step`)."""
        if self.held is None:
            self.post(call, problem)
        else:
            self.held.append((call, problem))

    def post(self, call: tuple[Any, Any] | None = None, problem: str | None = None) -> None:
        """Post this rank's report for the next exchange (the next call completes it)."""
        if problem is not None and len(problem) > _PROBLEM_CHARS:
            # the whole message stays here; the exchange carries a short one, so that it fits
            # its slot and needs no second, blocking, collective
            logger.error("deisa bridge: rank %d: %s", self.parts.rank, problem)
            problem = problem[: _PROBLEM_CHARS - 1] + "…"
        self.exchanger.post(self.report(call, problem), self.parts.routing.workers)

    def complete(self) -> Exchanged:
        """Complete the exchange in flight, if any, and take in its decisions (every rank)."""
        reports = self.exchanger.complete()
        return Exchanged() if reports is None else self._absorb(reports)

    def exchange(
        self, call: tuple[Any, Any] | None = None, problem: str | None = None
    ) -> Exchanged:
        """One blocking exchange: every rank's report to every rank, the same decisions on all."""
        self.complete()
        self.post(call, problem)
        return self.complete()

    def _absorb(self, reports: list[Any]) -> Exchanged:
        parts = self.parts
        exchanged = self.ledger.absorb(reports)
        if exchanged.connection is not None:
            failure = self.on_connection(exchanged.connection)
            if failure:
                self.ledger.fail(failure)
            if self.ledger.failure is None:
                for send in self.sends.values():
                    if send.future is None and not send.empty:
                        self.start_send(send)
        if parts.rank == 0 and self.registrar.started:
            for entry, sent in exchanged.ready:
                self.registrar.ready(entry, sent)
        self.reclaim()
        parts.fields.deliver(exchanged.fields)
        return exchanged

    def reclaim(self) -> None:
        """Give back the buffers of sends done; forget the sends reported and registered.

        The slots given back are unmapped by their channel's thread at the next
        :meth:`~deisa.bridge.shm.transport.Transport.settle`: after the next copy, or while this
        rank waits, never beside a copy (on 2 cores, a munmap of 64 MiB there halved the copy's
        speed; docs/benchmarks.md, section 16)."""
        self._sends_done = False
        registered = self.ledger.registered
        for seq, send in list(self.sends.items()):
            if send.buffer is None:  # given back (or none): forgotten once reported, registered
                if send.reported and seq < registered:
                    del self.sends[seq]
                continue
            future = send.future
            done = future is not None and future.done() and (send.reported or _succeeded(future))
            if not done and not send.lost and not (send.empty and send.reported):
                continue
            if send.buffer is not None:
                transport = self.parts.transport
                if transport.give_back(send.buffer):
                    pass  # a slot
                elif transport.node_local(send.worker):
                    self.buffers.drop(send.entry.name, send.buffer)  # next copies: slots
                else:
                    self.buffers.give_back(send.entry.name, send.buffer)  # kept for the next
                send.buffer = None
            if send.reported and seq < registered:
                del self.sends[seq]

    def wait_until(
        self,
        done: Callable[[], bool],
        call: tuple[Any, Any] | None = None,
        problem: str | None = None,
    ) -> bool:
        """Exchange until ``done()`` (decided from exchanged data: the same on every rank), or
        until the Bridge detaches from a lost scheduler.

        Completes the exchange in flight first. ``call``: the publish waiting for room, whose
        ``problem`` the exchanges carry; returns ``False`` when an exchange shows that call
        wrong on some rank (the next call raises it on every rank), ``True`` otherwise.
        """
        self.complete()
        self.raise_failure()
        rounds = 0
        while not done() and not self.parts.detached:
            # the first round at once: the exchange completed above is one publish old, a fresh
            # one may show room already (the price of a blocking exchange, as before the lag);
            # then wake on this rank's progress (a send, rank 0's registration or connection),
            # or after a short wait growing to 50 ms: the other ranks' progress only shows up in
            # an exchange
            if rounds:
                self.parts.transport.settle()  # the slots given back, while this rank waits
                self.parts.loop.flush()  # what this publish asked of the loop so far
                self.progress.wait(0.001 * 2 ** min(rounds - 1, 5.6))  # 1 ms growing to ~50 ms
            self.progress.clear()
            exchanged = self.exchange(call, problem)
            if exchanged.problem and call is not None:
                return False  # some ranks may have posted this call's exchange and returned
            self.raise_failure()
            rounds += 1
        return True

    def connected_now(self) -> bool:
        """Collective: whether every rank knows the connection (always in ``mode="sync"``).

        ``mode="async"``: one exchange (which raises a background failure, the connection's
        included, on every rank), then the same answer on every rank, without waiting for the
        connection. For callers that need ``scheduler_address`` on rank 0 (``Bridge.get``).
        """
        if not self.parts.asynchronous:
            return True
        self.exchange()
        self.raise_failure()
        return self.ledger.connection is not None

    def fail(self, message: str) -> None:
        """A failure decided at the same call on every rank (a worker lost): the next call
        raises it, unless an earlier failure is raised first."""
        self.ledger.fail(message)

    def raise_failure(self) -> None:
        failure = self.ledger.failure
        if failure is not None:
            self.raised = failure
            raise BridgeError(failure)

    def shutdown(self) -> None:
        """Stop the registrar and cancel the sends left (after a failure, or detached)."""
        if self.exchanger.pending:  # only after an exception outside the Bridge's own calls
            logger.warning(
                "deisa bridge: rank %d: shut down with an exchange in flight (not completed: "
                "the other ranks may not have posted it)", self.parts.rank,
            )  # fmt: skip
            _ABANDONED.append(self.exchanger)  # MPI may still write its buffers
        self.registrar.stop()
        for send in self.sends.values():
            if send.future is not None:
                send.future.cancel()


_PROBLEM_CHARS = 96  # a wrong call's message, as the exchange carries it
_ABANDONED: list[Exchanger] = []


def _succeeded(future: concurrent.futures.Future[Any]) -> bool:
    return not future.cancelled() and future.exception() is None
