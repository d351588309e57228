"""The asynchronous publish (``mode="async"``): block copies, background sends, the exchange,
the registrar.

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
  (:mod:`._notices`); it writes rank 0's :class:`RootNews`, which the main thread reads when
  it posts an exchange, and wakes the main thread through :attr:`AsyncPublisher.progress`.

A send that fails because its worker left (``on_worker_loss="continue"``) is not reported:
it waits for the exchange that spreads the new worker list, and is then sent again to the
worker the new placement gives, from its buffer (kept until the send succeeds).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from ..contract import FULL as FULL_PLAN
from ..contract import Plan
from ..wire import Status, step_key_name
from ._buffers import Buffers
from ._collective import BridgeError
from ._exchange import Exchanger
from ._notices import EarlyRegistration, Notifier
from ._publisher import (
    Connection,
    Entry,
    Exchanged,
    Ledger,
    PublishTiming,
    RankReport,
    RootReport,
    Sent,
    registration,
)

if TYPE_CHECKING:
    from ._link import SchedulerLink
    from ._state import RunState

logger = logging.getLogger(__name__)


@dataclass
class _Send:
    """One of this rank's blocks on its way to its worker."""

    entry: Entry
    buffer: np.ndarray | None  # None once given back (the send succeeded, or failed reported)
    future: concurrent.futures.Future[dict[Any, int]] | None = None
    worker: str = ""
    reported: bool = False
    failed_at: float | None = None  # when a failure was first held back (its worker may leave)
    lost: bool = False  # its worker left and none is left to take it


@dataclass
class RootNews:
    """Rank 0's news for the next exchange: written by the loop thread, read by the main thread
    (each field is one assignment of an immutable value)."""

    connection: Connection | None = None
    connect_error: str | None = None
    registered: int = 0  # publications below this are registered (or reported lost)
    error: str | None = None  # a registration failed; names the step


class AsyncPublisher:
    """The async machinery of one :class:`~deisa.Bridge` (see the module docstring)."""

    def __init__(
        self,
        state: RunState,
        link: SchedulerLink,
        on_connection: Callable[[Connection], str | None],
    ) -> None:
        self.state = state
        self.link = link
        self.on_connection = on_connection  # every rank, the connection known: its problem
        self.ledger = Ledger(state.comm.Get_size())
        self.sends: dict[int, _Send] = {}
        self.buffers = Buffers()
        self.peak_in_flight: dict[str, int] = {}
        self.exchanger = Exchanger(state.comm)
        self.raised: str | None = None  # the background failure already raised here
        self.progress = threading.Event()  # set by the loop thread: a send, a registration...
        self.news = RootNews()
        self._announced = False  # rank 0, main thread: the connection went in an exchange
        self._register_queue: asyncio.Queue[tuple[Entry, list[Any]] | None] | None = None
        self.early: EarlyRegistration | None = None  # rank 0: registration on sent notices
        self.notices: Notifier | None = None  # the other ranks: to rank 0's listener, if any

    # -- rank 0's background connection and registrar ------------------------------------------

    def start_connecting(self, scheduler_file: str) -> concurrent.futures.Future[Any]:
        """Rank 0: connect in the background; the exchanges carry the outcome."""
        state = self.state
        self.early = EarlyRegistration(state.comm.Get_size(), self._queue_now)

        async def run() -> None:
            try:
                self.news.connection = connection = await self.link.connect(
                    scheduler_file, state.options, state.decompositions, state.contracts,
                    self.early,
                )  # fmt: skip
            except Exception as exc:
                logger.error("deisa bridge: connecting failed: %s", exc)
                self.news.connect_error = f"{type(exc).__name__}: {exc}"
                return
            finally:
                self.progress.set()
            # now, not once an exchange has told every rank: the scheduler hears from rank 0
            # however long the simulation computes before its first publish
            names = sorted(state.decompositions)
            await self.link.watch_contracts(
                connection.address, state.contracts, names, self.progress.set
            )

        return state.loop.spawn(run())

    def notify_to(self, connection: Connection) -> None:
        """Every rank, connected: the ranks but 0 send their notices to rank 0's listener, if
        any (rank 0 takes its own directly)."""
        if connection.notices is not None and self.state.rank != 0:
            self.notices = Notifier(
                connection.notices, connection.token, self.state.rank, connection.notices_tls
            )

    async def close_notices(self) -> None:
        """Close rank 0's notices listener, or this rank's connection to it."""
        if self.early is not None:
            await self.early.close()
        if self.notices is not None:
            await self.notices.close()

    def start_registrar(self) -> concurrent.futures.Future[Any]:
        """Rank 0, once connected: start the registrar (and early registration)."""
        self._register_queue = asyncio.Queue()
        if self.early is not None:
            self.state.loop.loop.call_soon_threadsafe(self.early.activate)
        return self.state.loop.spawn(self._registrar())

    def _queue_now(self, entry: Entry, sent: list[Sent]) -> None:
        """Rank 0, loop thread: hand ``entry`` (every block on its worker) to the registrar."""
        state = self.state
        dec = state.decompositions[entry.name]
        name = step_key_name(self.link.run or "", entry.name, entry.step, entry.revision)
        plan = _plan_of(entry)
        blocks = [
            ((name, *plan.key_index(dec.block_index[rank])), worker, nbytes)
            for rank, (nbytes, worker) in enumerate(sent)
            if entry.senders is None or rank in entry.senders
        ]
        queue = self._register_queue
        assert queue is not None
        queue.put_nowait((entry, blocks))

    async def _registrar(self) -> None:
        """Rank 0: register the steps on the scheduler, in publication order, one at a time."""
        state = self.state
        queue = self._register_queue
        assert queue is not None
        while (item := await queue.get()) is not None:
            entry, blocks = item
            outcome = await self._register(entry, blocks)
            kind, message = registration(
                outcome, entry.name, entry.step, state.options.on_worker_loss
            )
            if kind == "error":
                logger.error("deisa bridge: %s", message)
                self.news.error = message
                self.progress.set()
                return
            if kind == "queued":
                state.queued(entry.name)
            self.news.registered = entry.seq + 1
            self.progress.set()

    async def _register(self, entry: Entry, blocks: list[Any]) -> dict[str, Any]:
        """``deisa_publish`` of ``entry``; a scheduler that does not answer is retried (until
        the Bridge detaches) with ``on_scheduler_loss="continue"``."""
        state = self.state
        while True:
            try:
                return await self.link.register(
                    name=entry.name,
                    step=entry.step,
                    blocks=blocks,
                    timeout=state.options.timeout,
                    contract=_plan_of(entry).wire(),
                )
            except Exception as exc:
                message = self.link.register_failed(entry.name, entry.step, exc)
                if state.options.on_scheduler_loss == "fail" or not isinstance(exc, OSError):
                    return {"status": Status.ERROR.value, "message": message}
                state.worker_book.failing(exc)  # the exchange detaches once it counts as lost
                self.progress.set()
                await asyncio.sleep(0.5)

    # -- the main thread -------------------------------------------------------------------------

    @property
    def exchanges(self) -> int:
        """Exchanges completed so far."""
        return self.exchanger.completed

    def publish(
        self, name: str, block: np.ndarray, step: int, revision: int, problem: str | None, t0: float
    ) -> None:
        """The async :meth:`~deisa.Bridge.publish` (see there).

        Completes the exchange the previous call posted (its decisions: a failure, or the
        previous call's problem, raised here on every rank), waits for room if the ledger says
        so (exchanging, blocking), copies and sends the block, and posts this call's exchange.
        A rank whose call is wrong (``problem``) sends nothing: every rank raises it at the
        next call.
        """
        state = self.state
        self.complete()
        self.raise_failure()
        if self.ledger.connection is None and state.detached is None:
            # rank 0 may be connected already (a Bridge created at PDI's `init_on' event, or
            # before the simulation's first step): one more exchange tells every rank now, so
            # that this block goes straight to its worker instead of being copied twice
            self.exchange()
            self.raise_failure()
        if state.detached is not None:
            return
        step_ok = isinstance(step, (int, np.integer))
        valid = step_ok and isinstance(name, str) and name in state.decompositions
        # plain values only in the exchange: whatever a wrong call passed, it pickles
        call = (name if isinstance(name, str) else repr(name), int(step) if step_ok else repr(step))
        t1 = time.perf_counter()
        plan = state.plan(name, int(step)) if valid and int(step) >= 0 else None
        if plan is None or not plan.send:  # wrong, or not wanted by the contract in force
            self.post(call, problem)
            state.timings.append(
                PublishTiming(name, int(step) if valid else -1, 0, 0.0, time.perf_counter() - t0,
                              mode="async")
            )  # fmt: skip
            return
        limit = state.options.max_in_flight
        if not self.wait_until(lambda: self.ledger.in_flight(name) < limit, call, problem):
            return  # this call is wrong: the next call raises it on every rank
        if state.detached is not None:
            return
        t2 = time.perf_counter()
        entry = self.ledger.add(name, int(step), revision, plan.ranks, plan)
        if self.early is not None:
            state.loop.loop.call_soon_threadsafe(self.early.known, entry)
        self.reclaim()
        nbytes = 0
        if problem is None and plan.sends(state.rank):  # else outside the contract's region
            spec = state.specs[name]
            worker = state.routing.worker_of.get(name) if self.ledger.connection else None
            buffer = state.transport.copy_in(worker, block) if worker else None
            if buffer is None:  # no shared slot: a buffer of the Bridge's own
                buffer = self.buffers.take(name, spec.shape, spec.dtype)
                np.copyto(buffer, block)
            nbytes = buffer.nbytes
            send = _Send(entry, buffer)
            self.sends[entry.seq] = send
            if self.ledger.connection is not None:
                self.start_send(send)
        t3 = time.perf_counter()
        self.post(call, problem)
        t4 = time.perf_counter()
        in_flight = self.ledger.in_flight(name)
        self.peak_in_flight[name] = max(self.peak_in_flight.get(name, 0), in_flight)
        state.timings.append(
            PublishTiming(
                name, int(step), nbytes, t3 - t2, (t1 - t0) + (t2 - t1) + (t4 - t3), t3 - t2,
                t2 - t1, "async",
            )
        )  # fmt: skip
        logger.debug(
            "deisa bridge: %s step %d: copy %.4f s, exchanges %.4f s, wait %.4f s, %d in flight",
            name, step, t3 - t2, (t1 - t0) + (t4 - t3), t2 - t1, in_flight,
        )  # fmt: skip

    def start_send(self, send: _Send) -> None:
        """Send ``send``'s buffer to this rank's worker under the current placement."""
        state = self.state
        name, entry = send.entry.name, send.entry
        key = (
            step_key_name(self.link.run or "", name, entry.step, entry.revision),
            *_plan_of(entry).key_index(state.decompositions[name].block_index[state.rank]),
        )
        send.worker = state.routing.worker_of[name]
        send.failed_at = None
        assert send.buffer is not None
        sending = state.transport.send(self.link.pool, send.worker, key, send.buffer)
        future = state.loop.spawn(sending)
        send.future = future
        worker = send.worker
        future.add_done_callback(lambda done: self._sent(entry.seq, worker, done))

    def _sent(self, seq: int, worker: str, future: concurrent.futures.Future[Any]) -> None:
        """Loop thread, a send finished: wake the main thread, and tell rank 0 (._notices)."""
        self.progress.set()
        if future.cancelled() or future.exception() is not None:
            return  # the exchange reports the failure
        state = self.state
        nbytes = int(next(iter(future.result().values())))
        if self.early is not None:
            state.loop.loop.call_soon_threadsafe(self.early.sent, seq, state.rank, nbytes, worker)
        elif self.notices is not None:
            state.loop.spawn(self.notices.notify(seq, nbytes, worker))

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

    def _resend(self, send: _Send) -> None:
        if self.state.routing.workers:
            logger.info(
                "deisa bridge: step %d of %r: worker %s left, sending to %s",
                send.entry.step, send.entry.name, send.worker,
                self.state.routing.worker_of[send.entry.name],
            )  # fmt: skip
            self.start_send(send)
        else:
            send.lost = True

    def report(self, call: tuple[Any, Any] | None, problem: str | None) -> RankReport:
        """This rank's part of the next exchange."""
        state = self.state
        sent: list[tuple[int, int, str]] = []
        failed: list[tuple[int, str]] = []
        hold = 2 * state.options.connect_timeout
        for seq, send in self.sends.items():
            if send.reported:
                continue
            if send.lost:  # named with its departed worker: the scheduler reports it lost
                send.reported = True
                sent.append((seq, 0, send.worker))
                continue
            future = send.future
            if future is None or not future.done() or future.cancelled():
                continue
            exc = future.exception()
            if exc is None:
                send.reported = True
                sent.append((seq, int(next(iter(future.result().values()))), send.worker))
                continue
            if state.options.on_worker_loss == "continue" and isinstance(exc, OSError):
                if send.worker not in state.routing.workers:  # left already: send again
                    self._resend(send)
                    continue
                now = time.monotonic()
                send.failed_at = send.failed_at or now
                if now - send.failed_at < hold:  # until the scheduler says the worker left
                    continue
            send.reported = True
            failed.append(
                (
                    seq,
                    f"sending step {send.entry.step} of {send.entry.name!r} to worker "
                    f"{send.worker} failed: {exc!r}",
                )
            )
        report = RankReport(call, problem, tuple(sent), tuple(failed))
        if state.rank == 0:
            news = self.news
            connection = None
            if news.connection is not None and not self._announced:
                connection, self._announced = news.connection, True
            report.root = RootReport(
                connection=connection,
                connect_error=news.connect_error,
                registered=news.registered,
                error=news.error,
                fields=state.fields.collect(),
            )
        return report

    def post(self, call: tuple[Any, Any] | None = None, problem: str | None = None) -> None:
        """Post this rank's report for the next exchange (the next call completes it)."""
        if problem is not None and len(problem) > _PROBLEM_CHARS:
            # the whole message stays here; the exchange carries a short one, so that it fits
            # its slot and needs no second, blocking, collective
            logger.error("deisa bridge: rank %d: %s", self.state.rank, problem)
            problem = problem[: _PROBLEM_CHARS - 1] + "…"
        self.exchanger.post(self.report(call, problem), self.state.routing.workers)

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
        state = self.state
        exchanged = self.ledger.absorb(reports)
        if exchanged.connection is not None:
            failure = self.on_connection(exchanged.connection)
            if failure and self.ledger.failure is None:
                self.ledger.failure = failure
            if self.ledger.failure is None:
                for send in self.sends.values():
                    if send.future is None:
                        self.start_send(send)
        if state.rank == 0 and self._register_queue is not None:
            for entry, sent in exchanged.ready:
                self._queue_registration(entry, sent)
        self.reclaim()
        state.fields.deliver(exchanged.fields)
        return exchanged

    def _queue_registration(self, entry: Entry, sent: list[Sent]) -> None:
        """Rank 0, main thread: the exchange found ``entry`` sent by every rank."""
        loop = self.state.loop.loop
        if self.early is not None:  # unless its notices got it registered already
            loop.call_soon_threadsafe(self.early.ready, entry, sent)
        else:
            loop.call_soon_threadsafe(self._queue_now, entry, sent)

    def reclaim(self) -> None:
        """Give back the buffers of sends done; forget the sends reported and registered."""
        registered = self.ledger.registered
        for seq, send in list(self.sends.items()):
            future = send.future
            done = future is not None and future.done() and (send.reported or _succeeded(future))
            if not done and not send.lost:
                continue
            if send.buffer is not None:
                transport = self.state.transport
                if transport.give_back(send.buffer):
                    pass  # a slot
                elif transport.node_local(send.worker):
                    self.buffers.drop(send.entry.name)  # the next copies go to slots
                else:
                    self.buffers.give_back(send.entry.name, send.buffer)  # kept for the next
                send.buffer = None
            if send.reported and seq < registered:
                del self.sends[seq]
        self.state.transport.settle()  # no view of a slot given back is left here

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
        while not done() and self.state.detached is None:
            # the first round at once: the exchange completed above is one publish old, a fresh
            # one may show room already (the price of a blocking exchange, as before the lag);
            # then wake on this rank's progress (a send, rank 0's registration or connection),
            # or after a short wait growing to 50 ms: the other ranks' progress only shows up in
            # an exchange
            if rounds:
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
        if not self.state.asynchronous:
            return True
        self.exchange()
        self.raise_failure()
        return self.ledger.connection is not None

    def fail(self, message: str) -> None:
        """A failure decided at the same call on every rank (a worker lost): the next call
        raises it, unless an earlier failure is raised first."""
        if self.ledger.failure is None:
            self.ledger.failure = message

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
                "the other ranks may not have posted it)", self.state.rank,
            )  # fmt: skip
            _ABANDONED.append(self.exchanger)  # MPI may still write its buffers
        loop = self.state.loop.loop
        if self._register_queue is not None:
            loop.call_soon_threadsafe(self._register_queue.put_nowait, None)
        for send in self.sends.values():
            if send.future is not None:
                send.future.cancel()


_PROBLEM_CHARS = 96  # a wrong call's message, as the exchange carries it
_ABANDONED: list[Exchanger] = []


def _succeeded(future: concurrent.futures.Future[Any]) -> bool:
    return not future.cancelled() and future.exception() is None


def _plan_of(entry: Entry) -> Plan:
    plan: Plan = entry.plan if entry.plan is not None else FULL_PLAN
    return plan
