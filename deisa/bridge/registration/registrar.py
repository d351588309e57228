"""Rank 0's side of ``mode="async"``: its connection in the background, and the registrar.

Rank 0 connects on the event-loop thread while the simulation computes (:meth:`Registrar.connect`);
once every rank knows the connection, the registrar registers the steps on the scheduler, in
publication order, the arrays of a step together (``deisa_publish`` through
:class:`~deisa.bridge.link.scheduler.SchedulerLink`), as the exchanges (:mod:`._async`) or the
notices of the other ranks (:mod:`deisa.bridge.registration.notices`, early registration) find each
step's blocks on their workers. Rank 0 counts them in :class:`EarlyRegistration`, which hands
each step to the registrar's queue as soon as every sender has reported, in order; the notices'
module only carries the conversation (rank 0's
:class:`~deisa.bridge.registration.notices.NoticeListener`, the other ranks'
:class:`~deisa.bridge.registration.notices.Notifier`). The loop thread writes rank 0's
:class:`RootNews`, which the main thread reads when it posts an exchange, and wakes the main
thread through ``progress``.

Runs in a simulation rank: :class:`Registrar`'s methods on the main thread or the loop thread (each
says which), :class:`EarlyRegistration` and the registration coroutines on the loop thread. Imports
the Bridge's flat modules (``_publisher``, ``boxes``), :mod:`deisa.bridge.link.scheduler`, the
notices' module, wire and :mod:`deisa.contract`.
"""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ...contract import FULL as FULL_PLAN
from ...contract import Plan
from ...wire import Status, step_key_name
from ...wire.layout import LayoutError, StepLayout
from .._publisher import Connection, Entry, Sent, geometry_of, registration
from ..arrays.boxes import Geometry, step_layout
from ..link.scheduler import register_until_answered, until_answered
from .notices import NoticeListener, Notifier

if TYPE_CHECKING:
    from .._parts import BridgeParts
    from ..arrays.decomposition import Decomposition
    from ..link.scheduler import SchedulerLink

logger = logging.getLogger(__name__)


@dataclass
class RootNews:
    """Rank 0's news for the next exchange: written by the loop thread, read by the main thread
    (each field is one assignment of an immutable value)."""

    connection: Connection | None = None
    connect_error: str | None = None
    registered: int = 0  # publications below this are registered (or reported lost)
    error: str | None = None  # a registration failed; names the step


class EarlyRegistration:
    """Rank 0: hand publications to the registrar as soon as every sender has reported.

    The step accounting of early registration: rank 0's own sends and the other ranks'
    notices (its :class:`~deisa.bridge.registration.notices.NoticeListener`) report blocks sent
    (:meth:`sent`), its publish numbers each publication (:meth:`known`), and the exchange
    reports what the notices missed (:meth:`ready`); each publication is handed on once, in
    order. Every method runs on rank 0's loop thread (the Bridge posts to it with
    ``call_soon_threadsafe``), so no lock is needed.

    Parameters
    ----------
    nranks
        Ranks of the Bridge's communicator.
    queue
        ``queue(entry, sent)``: hand a publication to the registrar, with ``(nbytes, worker)``
        of each rank's block (:data:`~deisa.bridge._publisher.Sent`).
    """

    def __init__(self, nranks: int, queue: Callable[[Entry, list[Sent]], None]) -> None:
        self.nranks = nranks
        self._queue = queue
        self.next_seq = 0  # publications below were handed to the registrar
        self.early = 0  # of which handed on notices, before their exchange
        self._entries: dict[int, Entry] = {}
        self._sent: dict[int, dict[int, Sent]] = {}
        self.active = False  # the registrar exists (the connection is known)

    def activate(self) -> None:
        """The registrar is running: hand what is ready."""
        self.active = True
        self._drain()

    def sent(self, seq: int, rank: int, nbytes: int, worker: str, geometry: Any = None) -> None:
        """``rank``'s block of publication ``seq`` (its boxes of ``geometry``, if any) is on
        ``worker`` (rank 0's own send, or another rank's notice)."""
        if seq >= self.next_seq:
            where = (nbytes, worker) if geometry is None else (nbytes, worker, geometry)
            self._sent.setdefault(seq, {})[rank] = where
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


class Registrar:
    """Rank 0's background connection and registrar; every rank's notices (module docstring).

    Parameters
    ----------
    parts
        The Bridge's parts.
    link
        Its calls to the scheduler.
    progress
        Set (by the loop thread) at each news: the main thread waits on it.
    """

    def __init__(self, parts: BridgeParts, link: SchedulerLink, progress: threading.Event) -> None:
        self.parts = parts
        self.link = link
        self.progress = progress
        self.news = RootNews()
        # each publication with its blocks and layout, or why its layout does not hold together
        self._queue: asyncio.Queue[tuple[Entry, Any] | None] | None = None
        self.early: EarlyRegistration | None = None  # rank 0: registration on sent blocks
        self.listener: NoticeListener | None = None  # rank 0: the other ranks' notices, if any
        self.notices: Notifier | None = None  # the other ranks: to rank 0's listener, if any

    def connect(self, scheduler_file: str) -> concurrent.futures.Future[Any]:
        """Rank 0: connect in the background; the exchanges carry the outcome."""
        parts = self.parts
        self.early = early = EarlyRegistration(parts.comm.Get_size(), self._queue_now)
        self.listener = NoticeListener(early.nranks, early.sent)

        async def run() -> None:
            try:
                self.news.connection = connection = await self.link.connect(
                    scheduler_file, parts.options, parts.arrays.decompositions, parts.contracts,
                    self.listener,
                )  # fmt: skip
            except Exception as exc:
                logger.error("deisa bridge: connecting failed: %s", exc)
                self.news.connect_error = f"{type(exc).__name__}: {exc}"
                return
            finally:
                self.progress.set()
            # now, not once an exchange has told every rank: the scheduler hears from rank 0
            # however long the simulation computes before its first publish
            names = sorted(parts.arrays.decompositions)
            await self.link.watch_contracts(
                connection.address, parts.contracts, names, self.progress.set
            )

        return parts.loop.spawn(run())

    def notify_to(self, connection: Connection) -> None:
        """Every rank, connected: the ranks but 0 send their notices to rank 0's listener, if
        any (rank 0 takes its own directly)."""
        if connection.notices is not None and self.parts.rank != 0:
            self.notices = Notifier(
                connection.notices, connection.token, self.parts.rank, connection.notices_tls
            )

    @property
    def noticing(self) -> bool:
        """Whether a notices listener (rank 0) or a connection to one (the others) is open."""
        return self.listener is not None or self.notices is not None

    async def close_notices(self) -> None:
        """Close rank 0's notices listener, or this rank's connection to it."""
        if self.listener is not None:
            await self.listener.close()
        if self.notices is not None:
            await self.notices.close()

    def start(self) -> concurrent.futures.Future[Any]:
        """Rank 0, once connected: start the registrar (and early registration)."""
        self._queue = asyncio.Queue()
        if self.early is not None:
            self.parts.loop.soon(self.early.activate)
        return self.parts.loop.spawn(self._run())

    @property
    def started(self) -> bool:
        """Rank 0: whether the registrar runs."""
        return self._queue is not None

    def known(self, entry: Entry) -> None:
        """Main thread: ``entry`` is published (rank 0's early registration waits for its
        blocks)."""
        if self.early is not None:
            self.parts.loop.soon(self.early.known, entry)

    def sent(self, seq: int, nbytes: int, worker: str, geometry: Geometry | None = None) -> None:
        """Loop thread (or the main thread, for a send done before it looked): this rank's
        block of publication ``seq`` (its boxes of ``geometry``, if any) is on ``worker``.
        Rank 0 takes it at once on the loop thread (its early registration may queue the step
        now, not a loop turn later); the thread is told by the loop's ``thread_id``, a plain
        attribute, so that a send's completion calls straight into the accounting."""
        parts = self.parts
        if self.early is not None and threading.get_ident() == parts.loop.thread_id:
            self.early.sent(seq, parts.rank, nbytes, worker, geometry)
        elif self.early is not None:
            parts.loop.soon(self.early.sent, seq, parts.rank, nbytes, worker, geometry)
        elif self.notices is not None:
            parts.loop.spawn(self.notices.notify(seq, nbytes, worker, geometry))

    def ready(self, entry: Entry, sent: list[Sent]) -> None:
        """Rank 0, main thread: the exchange found ``entry`` sent by every rank."""
        loop = self.parts.loop
        if self.early is not None:  # unless its notices got it registered already
            loop.soon(self.early.ready, entry, sent)
        else:
            loop.soon(self._queue_now, entry, sent)

    def stop(self) -> None:
        """Stop the registrar once the steps queued before are registered."""
        if self._queue is not None:
            self.parts.loop.soon(self._queue.put_nowait, None)

    def _queue_now(self, entry: Entry, sent: list[Sent]) -> None:
        """Rank 0, loop thread: hand ``entry`` (every block on its worker) to the registrar,
        with the step's layout where its ranks sent boxes (:func:`registered_blocks`); a layout
        that does not hold together fails the step (a ``LayoutError`` naming the ranks)."""
        dec = self.parts.arrays.decompositions[entry.name]
        run = self.link.run or ""
        queue = self._queue
        assert queue is not None
        try:
            blocks, layout = registered_blocks(run, dec, entry, sent)
        except LayoutError as exc:
            queue.put_nowait((entry, f"step {entry.step} of {entry.name!r}: {exc}"))
            return
        queue.put_nowait((entry, (blocks, layout)))

    async def _run(self) -> None:
        """Rank 0: register the steps on the scheduler, in publication order: the
        publications queued together, each of another array (a step's arrays, published
        with :meth:`deisa.Bridge.step`), registered at once (:meth:`_wave`), a wave after the
        other, so that a step of N arrays costs one round trip to the scheduler, not N."""
        queue = self._queue
        assert queue is not None
        pending: collections.deque[tuple[Entry, Any]] = collections.deque()
        stopping = False
        while pending or not stopping:
            if not pending:
                item = await queue.get()
                if item is None:
                    return
                pending.append(item)
            while not queue.empty() and not stopping:
                item = queue.get_nowait()
                if item is None:
                    stopping = True
                else:
                    pending.append(item)
            if not await self._wave(next_wave(pending)):
                return

    async def _wave(self, wave: list[tuple[Entry, Any]]) -> bool:
        """Register ``wave`` (publications of distinct arrays, in publication order) at once;
        take in the outcomes in order. ``False`` after a registration failed (reported)."""
        parts = self.parts
        t0 = time.perf_counter()
        outcomes = await self._outcomes(wave)
        logger.debug(
            "deisa bridge: %d registrations in %.4f s", len(wave), time.perf_counter() - t0,
            extra={"deisa_registrations": (len(wave), time.perf_counter() - t0)},
        )  # fmt: skip
        for (entry, _), outcome in zip(wave, outcomes, strict=True):
            kind, message = registration(
                outcome, entry.name, entry.step, parts.options.on_worker_loss
            )
            if kind == "error":
                logger.error("deisa bridge: %s", message)
                self.news.error = message
                self.progress.set()
                return False
            if kind == "queued":
                parts.steps.queued(entry.name)
            self.news.registered = entry.seq + 1
        self.progress.set()
        return True

    async def _outcomes(self, wave: list[tuple[Entry, Any]]) -> list[dict[str, Any]]:
        """The scheduler's replies to ``wave``'s registrations, in order: one
        ``deisa_publish_many`` for the step's arrays (one message and one reply for the step,
        not one per array: issue 56 item 9), a ``deisa_publish`` for a wave of one."""
        fine = [(i, entry, blocks) for i, (entry, blocks) in enumerate(wave)
                if not isinstance(blocks, str)]  # fmt: skip
        if len(fine) < 2:
            return list(await asyncio.gather(*(self._outcome(e, b) for e, b in wave)))
        outcomes = [self._refused(blocks) for _, blocks in wave]
        replies = await self._register_many([(entry, *blocks) for _, entry, blocks in fine])
        for (i, _, _), reply in zip(fine, replies, strict=True):
            outcomes[i] = reply
        return outcomes

    @staticmethod
    def _refused(blocks: Any) -> dict[str, Any]:
        """The outcome of a publication whose layout was an error (``blocks`` its message)."""
        return {"status": Status.ERROR.value, "message": blocks if isinstance(blocks, str) else ""}

    async def _register_many(
        self, publications: list[tuple[Entry, list[Any], StepLayout | None]]
    ) -> list[dict[str, Any]]:
        """``deisa_publish_many`` of ``publications`` (entry, blocks, layout each), asked again
        while the scheduler does not answer (as :meth:`_register`); one reply each."""
        parts, link = self.parts, self.link
        wire = [link.publication(**self._arguments(*one)) for one in publications]
        try:
            reply = await until_answered(
                parts.worker_book, lambda: link.register_many(wire), give_up=False,
                on_failure=self.progress.set,
            )  # fmt: skip
        except Exception as exc:  # refused outright (not an OSError): named for each
            return [
                {"status": Status.ERROR.value, "message": link.register_failed(e.name, e.step, exc)}
                for e, _, _ in publications
            ]
        replies = reply.get("replies") if isinstance(reply, dict) else None  # msgpack: a tuple
        if not isinstance(replies, (list, tuple)) or len(replies) != len(publications):
            why = reply.get("message") if isinstance(reply, dict) else reply
            return [
                {"status": Status.ERROR.value, "message": f"registering step {e.step} of "
                 f"{e.name!r} together with {len(publications) - 1} more failed: {why}"}
                for e, _, _ in publications
            ]  # fmt: skip
        return list(replies)

    async def _outcome(self, entry: Entry, blocks: Any) -> dict[str, Any]:
        """The scheduler's reply to ``entry``'s registration, or the error its layout was."""
        if isinstance(blocks, str):
            return self._refused(blocks)
        return await self._register(entry, *blocks)

    async def _register(
        self, entry: Entry, blocks: list[Any], layout: StepLayout | None = None
    ) -> dict[str, Any]:
        """``deisa_publish`` of ``entry``, asked again while the scheduler does not answer, until
        the exchange acts on its loss
        (:func:`~deisa.bridge.link.scheduler.register_until_answered`)."""
        reply = await register_until_answered(
            self.link, self.parts.worker_book, give_up=False, on_failure=self.progress.set,
            **self._arguments(entry, blocks, layout),
        )  # fmt: skip
        assert isinstance(reply, dict)  # without give_up, only a reply ends it
        return reply

    def _arguments(
        self, entry: Entry, blocks: list[Any], layout: StepLayout | None
    ) -> dict[str, Any]:
        """``entry``'s registration as :meth:`SchedulerLink.publication
        <deisa.bridge.link.scheduler.SchedulerLink.publication>` takes it (alone or in a
        ``deisa_publish_many``)."""
        parts = self.parts
        return dict(
            name=entry.name, step=entry.step, blocks=blocks, timeout=parts.options.timeout,
            contract=plan_of(entry).wire(), layout=layout,
            attrs=parts.steps.attrs_of(entry.name, entry.step, entry.revision),
        )  # fmt: skip


def registered_blocks(
    run: str, dec: Decomposition, entry: Entry, sent: Sequence[Sent]
) -> tuple[list[tuple[Any, str, int]], StepLayout | None]:
    """Rank 0, either mode: the ``(key, worker, nbytes)`` of each block of ``entry`` that the
    ranks sent (``sent[rank]``), in key order, and the step's layout (``None``: a fixed array's
    step published plain, today's grid keys). A step with a layout has one key per rank that
    sent a parcel, ``(step key, rank)``, or the grid key of a fixed array's block published
    plain (:mod:`deisa.bridge.arrays.boxes`).

    Raises
    ------
    LayoutError
        The ranks' geometries do not make a layout (:func:`~deisa.bridge.arrays.boxes.step_layout`).
    """
    name = step_key_name(run, entry.name, entry.step, entry.revision)
    plan = plan_of(entry)
    senders = [r for r in range(len(sent)) if entry.senders is None or r in entry.senders]
    grid = {r: (name, *plan.key_index(dec.block_index[r])) for r in senders}
    built = step_layout(dec, [(r, geometry_of(sent[r])) for r in senders])
    if built is None:
        return [(grid[r], sent[r][1], sent[r][0]) for r in senders], None
    layout, ranks = built
    keys = [grid[r] if geometry_of(sent[r]) is None else (name, r) for r in ranks]
    return [(key, sent[r][1], sent[r][0]) for key, r in zip(keys, ranks, strict=True)], layout


def next_wave(pending: collections.deque[tuple[Entry, Any]]) -> list[tuple[Entry, Any]]:
    """Take from the front of ``pending`` the publications registered together: as many as
    come before a second one of the same array (a step of an array is registered after the
    array's previous step is, as the scheduler's flow control expects)."""
    wave: list[tuple[Entry, Any]] = []
    names: set[str] = set()
    while pending and pending[0][0].name not in names:
        names.add(pending[0][0].name)
        wave.append(pending.popleft())
    return wave


def plan_of(entry: Entry) -> Plan:
    """What ``entry`` sends: its plan, or the whole array."""
    plan: Plan = entry.plan if entry.plan is not None else FULL_PLAN
    return plan
