"""A Bridge's link to the scheduler: its connections and every call it makes there.

Every rank has one :class:`SchedulerLink`: its :attr:`~SchedulerLink.pool` carries the rank's
blocks to its workers (:mod:`.transport`); only rank 0 calls the scheduler through it. The
routes a Bridge calls, all here:

- ``deisa_open`` and ``deisa_workers`` (with the extension's installation), by
  :meth:`~SchedulerLink.connect` (:func:`deisa.bridge.link.connect.connect_rank_0`);
- ``deisa_publish``, a step's registration: :meth:`~SchedulerLink.register`;
- ``deisa_get_value``, a steering value: :meth:`~SchedulerLink.get_value`;
- ``deisa_close``, an array's end of stream: :meth:`~SchedulerLink.end_stream`;
- ``deisa_watch_contracts`` and ``deisa_watch_workers``, kept open by rank 0 from its
  connection to its close: :meth:`~SchedulerLink.watch_contracts`,
  :meth:`~SchedulerLink.watch_workers`.

A method returns the call's coroutine, to run on the Bridge's event-loop thread
(:class:`._loop.LoopThread`); the link's closing (:attr:`~SchedulerLink.pool`) or the lack of a
connection (:attr:`~SchedulerLink.scheduler`) raises a :class:`BridgeError` when the call is
made, on the caller's thread.

Runs in a simulation rank: built on its main thread, its calls run on rank 0's event-loop
thread. Imports the link's :mod:`.connect` and :mod:`.workers`, the Bridge's collective
protocol, publisher, options, contracts and arrays' decomposition, the registration's notices
listener and :mod:`deisa.wire`.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Coroutine, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ...wire import Route, Status
from .._collective import BridgeError
from .._publisher import Connection
from .connect import Connections, connect_rank_0, open_arrays, route

if TYPE_CHECKING:
    from ...wire.layout import StepLayout
    from ..arrays.decomposition import Decomposition
    from ..contracts import ContractBook
    from ..options import BridgeOptions
    from ..registration.notices import NoticeListener
    from .workers import WorkerBook

logger = logging.getLogger(__name__)

Call = Coroutine[Any, Any, Any]

REGISTER_RETRY_S = 0.5
"""Seconds between two calls to the scheduler while it does not answer (until it counts as lost:
:meth:`~deisa.bridge.link.workers.WorkerBook.scheduler_lost`), and between two looks at the book
while a call waits."""


@dataclass(frozen=True)
class SchedulerLost:
    """What a call to the scheduler ends in once it counts as lost: the book's one message
    (:meth:`~deisa.bridge.link.workers.WorkerBook.scheduler_lost`), for :class:`~._losses.Losses` to
    act on."""

    message: str


async def until_answered(
    book: WorkerBook,
    make_call: Callable[[], Awaitable[Any]],
    *,
    give_up: bool,
    attempt_s: float | None = None,
    on_failure: Callable[[], None] | None = None,
) -> Any:
    """Rank 0, loop thread: ``make_call()`` (a call to the scheduler) until the scheduler
    answers; its reply, or (``give_up``) :class:`SchedulerLost` once the scheduler counts as
    lost.

    A call that fails as a lost scheduler's does (an ``OSError``: the connection reset,
    refused; or no answer within ``attempt_s`` seconds) is told to ``book`` (then
    ``on_failure``) and made again every :data:`REGISTER_RETRY_S`: the book decides the loss
    after ``connect_timeout`` without an answer, whichever call of rank 0 failed (the worker
    watch, a registration, a steering value, the end of a stream). With ``give_up`` the loss
    also ends a call still waiting: distributed retries a refused connection for its own
    connect timeout (30 s by default), which would otherwise hold the caller past the loss.
    Without (``mode="async"``'s registrar) the calls go on until cancelled: the exchange acts
    on the loss. Any other exception is the caller's.
    """
    while True:
        started = time.monotonic()
        try:
            reply = await _answer(book, make_call(), give_up, attempt_s, started)
        except (OSError, asyncio.TimeoutError) as exc:
            # no answer within attempt_s: unanswered since the call was made
            book.failing(exc, since=started if isinstance(exc, asyncio.TimeoutError) else None)
            if on_failure is not None:
                on_failure()
            lost = book.scheduler_lost() if give_up else None
            if lost is not None:
                return SchedulerLost(lost)
            logger.debug("deisa bridge: a call to the scheduler failed: %r", exc)
            await asyncio.sleep(REGISTER_RETRY_S)
            continue
        if not isinstance(reply, SchedulerLost):
            book.answered()
        return reply


async def _answer(
    book: WorkerBook,
    call: Awaitable[Any],
    give_up: bool,
    attempt_s: float | None,
    started: float,
) -> Any:
    """``call``'s reply; :class:`SchedulerLost` if the book declares the loss meanwhile
    (``give_up``); ``asyncio.TimeoutError`` after ``attempt_s`` s. The call is cancelled if
    it is still waiting."""
    attempt = asyncio.ensure_future(call)
    try:
        while True:
            done, _ = await asyncio.wait({attempt}, timeout=REGISTER_RETRY_S)
            if done:
                return attempt.result()
            lost = book.scheduler_lost() if give_up else None
            if lost is not None:
                return SchedulerLost(lost)
            if attempt_s is not None and time.monotonic() - started >= attempt_s:
                raise asyncio.TimeoutError(f"no answer within {attempt_s:g} s")
    finally:
        if not attempt.done():
            attempt.cancel()


async def register_until_answered(
    link: SchedulerLink,
    book: WorkerBook,
    *,
    give_up: bool,
    on_failure: Callable[[], None] | None = None,
    **call: Any,
) -> dict[str, Any] | str:
    """Rank 0, loop thread: ``link.register(**call)`` (``deisa_publish`` of one step, in either
    mode) until the scheduler answers (:func:`until_answered`, without a bound on one call:
    a registration waits on flow control); its reply.

    A call the scheduler refuses (not an ``OSError``: a scheduler without deisa's extension)
    comes back at once as an error reply that names the step. With ``give_up``
    (``mode="sync"``, whose caller waits here) the message of a lost scheduler is returned;
    without (``mode="async"``) the calls go on until cancelled: the exchange acts on the loss
    (``docs/reliability.md``).
    """
    name, step = call["name"], call["step"]
    try:
        reply = await until_answered(
            book, lambda: link.register(**call), give_up=give_up, on_failure=on_failure
        )
    except Exception as exc:
        return {"status": Status.ERROR.value, "message": link.register_failed(name, step, exc)}
    if isinstance(reply, SchedulerLost):
        return reply.message
    result: dict[str, Any] = reply
    return result


class SchedulerLink:
    """The connections of one rank's Bridge, and the scheduler's routes it calls.

    Attributes
    ----------
    address : str or None
        The scheduler's address, known on every rank once rank 0's connection is (``None``
        before).
    run : str or None
        The run's name that the connection drew (it names the blocks' keys); ``None`` before.
    """

    def __init__(self) -> None:
        self._pool: Connections | None = None
        self.address: str | None = None
        self.run: str | None = None

    def open(self) -> None:
        """Make the rank's :class:`~.connect.Connections` (it opens at its first call, on the loop
        thread: no distributed import here)."""
        self._pool = Connections()

    @property
    def is_open(self) -> bool:
        """Whether :meth:`open` was called and :meth:`close` not yet."""
        return self._pool is not None

    @property
    def pool(self) -> Connections:
        """The rank's connections, to its workers and (rank 0) the scheduler."""
        if self._pool is None:
            raise BridgeError("the Bridge is closed")
        return self._pool

    @property
    def scheduler(self) -> str:
        """The scheduler's address (raises while no connection is known)."""
        if self.address is None:
            raise BridgeError("the Bridge is not connected to a scheduler yet")
        return self.address

    def connected(self, connection: Connection) -> None:
        """Every rank, once rank 0's connection is known: its address and run."""
        self.address = connection.address
        self.run = connection.run

    async def close(self) -> None:
        """Close the connections, if any was opened; the link is closed from now on."""
        pool, self._pool = self._pool, None
        if pool is not None:
            await pool.close()

    # -- the routes ----------------------------------------------------------------------------

    def connect(
        self,
        scheduler_file: str,
        options: BridgeOptions,
        decompositions: Mapping[str, Decomposition],
        contracts: ContractBook,
        listener: NoticeListener | None,
    ) -> Coroutine[Any, Any, Connection]:
        """Rank 0: find the scheduler, install the extension, wait for the workers, open the
        arrays (:func:`deisa.bridge.link.connect.connect_rank_0`)."""
        return connect_rank_0(
            self.pool, scheduler_file, options, decompositions, contracts, listener
        )

    def open_arrays(
        self,
        decompositions: Mapping[str, Decomposition],
        options: BridgeOptions,
        contracts: ContractBook,
    ) -> Call:
        """Rank 0, connected: open more arrays' streams of this run (``Bridge.declare``)."""
        return open_arrays(
            self.pool, self.scheduler, self.run or "", decompositions, options, contracts
        )

    def register(self, **publication: Any) -> Call:
        """Rank 0: ``deisa_publish``, the registration of a step whose ``blocks`` (key, worker,
        bytes) are on their workers; waits up to ``timeout`` on flow control. Takes
        :meth:`publication`'s arguments: a moving step's ``layout`` rides in the same call (its
        plain form), and so do the step's ``attrs`` (new or changed attributes, plain values)."""
        call = route(self.pool, self.scheduler, Route.PUBLISH)
        return call(**self.publication(**publication))

    def publication(
        self,
        name: str,
        step: int,
        blocks: list[Any],
        timeout: float | None,
        contract: dict[str, Any] | None,
        layout: StepLayout | None = None,
        attrs: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        """The arguments of :meth:`register`'s ``deisa_publish``, as the scheduler takes them
        (one publication of :meth:`register_many`)."""
        extra: dict[str, Any] = {} if layout is None else {"layout": layout.to_wire()}
        if attrs:
            extra["attrs"] = attrs
        return dict(
            name=name, run=self.run, step=step, blocks=blocks, timeout=timeout,
            contract=contract, **extra,
        )  # fmt: skip

    def register_many(self, publications: list[dict[str, Any]]) -> Call:
        """Rank 0: ``deisa_publish_many``, the registration of several steps of distinct
        arrays (a step's, published together) in one message (:meth:`publication` each);
        ``ok(replies=[...])``, one ``deisa_publish`` reply each, in order."""
        return route(self.pool, self.scheduler, Route.PUBLISH_MANY)(publications=publications)

    def register_failed(self, name: str, step: int, exc: BaseException) -> str:
        """What to say of a :meth:`register` of ``step`` of ``name`` that raised ``exc``."""
        return (
            f"registering step {step} of {name!r} on the scheduler at {self.address} failed: "
            f"{type(exc).__name__}: {exc}"
        )

    def get_value(self, name: str) -> Call:
        """Rank 0: ``deisa_get_value``, the steering value ``name`` in its wire form."""
        return route(self.pool, self.scheduler, Route.GET_VALUE)(name=name)

    def value_until_answered(self, name: str, book: WorkerBook, options: BridgeOptions) -> Call:
        """Rank 0: :meth:`get_value` until the scheduler answers (each call bounded by
        ``connect_timeout``), or :class:`SchedulerLost` (:func:`until_answered`)."""
        return until_answered(
            book,
            lambda: self.get_value(name),
            give_up=True,
            attempt_s=options.connect_timeout,
        )

    def end_stream(
        self,
        name: str,
        nsteps: int,
        held_s: float,
        open_s: float,
        transports: dict[str, int],
        pool: dict[str, int] | None = None,
    ) -> Call:
        """Rank 0: ``deisa_close``, the end of the stream of array ``name`` after ``nsteps``
        steps, with the flow-control wait, the Bridge's lifetime, how the ranks sent and their
        warm pools of shared memory (:func:`~deisa.bridge.shm.pool.pool_totals`)."""
        return route(self.pool, self.scheduler, Route.CLOSE)(
            name=name,
            run=self.run,
            nsteps=nsteps,
            held_s=held_s,
            open_s=open_s,
            transports=transports,
            pool=pool,
        )

    def watch_contracts(
        self,
        address: str,
        contracts: ContractBook,
        names: Sequence[str],
        on_change: Callable[[], None],
    ) -> Call:
        """Rank 0, from its connection (at ``address``, maybe not yet :attr:`address`) to its
        close: the contracts set during the run (``deisa_watch_contracts``), which is also how
        the scheduler hears from the simulation between its steps (its heartbeat)."""
        call = route(self.pool, address, Route.WATCH_CONTRACTS)
        return contracts.watch(call, names, on_change)

    def watch_workers(
        self, address: str, workers: WorkerBook, on_change: Callable[[], None]
    ) -> Call:
        """Rank 0, from its connection to its close: the workers joining and leaving
        (``deisa_watch_workers``)."""
        return workers.watch(route(self.pool, address, Route.WATCH_WORKERS), on_change)
