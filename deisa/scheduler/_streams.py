"""The scheduler's record of one array's stream: its steps, its readers and their queues.

Data only, and the queue rules that need no scheduler: :class:`~.extension.StreamExtension`
drives them and owns every key transition. A reader's queue holds, in step order, the steps it
has to take (:class:`Step`, shared by every queue it is in), the steps it will never get
(:class:`Lost`: their blocks died with a worker) and, last, the end of the run (:class:`End`).

Consumers and groups
--------------------
A *consumer* is one :class:`~deisa.Adapter` (its ``consumer`` id; the client it runs on
owns the keys it takes). Every consumer attached to an array receives every step (fan-out),
except that consumers opened with the same ``group`` name share one position in the stream: each
step goes to one member of the group, whichever asks first (a work queue), and the end of the
stream to every member. Below, a *reader* is a consumer that is in no group, or a group (which
counts as one).

- A consumer *attaches* to an array at its first ``deisa_attach``, ``deisa_meta`` or
  ``deisa_get`` of it. It receives the steps published after that; the first reader of a run
  (or the first after every reader left) also takes the steps that waited for a reader: before
  any reader is attached, steps are held for the first one (within ``buffer_nb``), so either
  side may start first. A run opened for ``consumers`` readers (the Bridge's option) holds its
  steps that way for each of them: until the ``consumers``-th reader has attached, each one
  yet to come has its own queue, which flow control waits for like any reader's, and which the
  next reader to attach takes; so a second analytics that starts late, under load, still
  receives the run from its first step. A reader that joins when every expected one has come
  starts at the next step.
- Two consumers on one client that take the same step: the second ``deisa_get`` answers
  ``confirm: True`` and the stream keeps its claim on the keys until the client's
  ``deisa_step_taken`` arrives on its batched stream, after any release the client sent for the
  first consumer's futures (which could otherwise arrive late and free the keys).
- Until every reader attached when a step was published has taken it, the step's keys are held
  by a pseudo-client named after the stream (as distributed's Queue does), so the data stays
  alive even if every simulation process has exited. ``deisa_get`` adds the taker's client to
  the keys' wanters in the same scheduler call, and the stream lets go of them once the last
  reader took the step: they are never unreferenced in between, and they are freed once every
  reader is done with them.
- Flow control counts the slowest reader: ``buffer_nb`` is reached when some reader has
  ``buffer_nb`` steps to take.
- A consumer *detaches* on ``deisa_detach`` (``Adapter.close()``, the Adapter's ``with``
  block) or when its client leaves the scheduler (the extension's ``remove_client`` hook: at
  once when the client closes or its process dies, since the operating system closes its connection;
  for a client whose host vanishes, when the scheduler's TCP connection times out,
  ``distributed.comm.timeouts.tcp``, 30 s by default). A group detaches with its last member.
  A detached reader stops counting for flow control at once, and the steps it had not taken
  are released unless another reader still has to take them. If it was the last reader
  attached, the steps it had not taken wait for the next reader, as before the first one came.

A run is *finished* when it is closed and no reader has a step of it left to take, even if
nobody read the end-of-stream marker (an analytics loop over a known number of steps never
does), and *consumed* if, on top of that, a reader took some of its steps. A new run of the same
array name replaces a finished one; a consumer still reading the old run then receives its end
of stream. A fresh consumer waits for the next run rather than receive a consumed run's end
(but it does receive the end of a run that published no step).

Repeated steps: each reader's queue is kept in step order and readers take steps in increasing
order, as a reader of a file would find its slices. A step index published again, or a step
published after a later one (a time index that goes backwards), is placed as follows:

- no reader has taken that step, nor any later one: the step is queued in its place; if an
  earlier publication of it is waiting, the new one replaces it (its keys are released, the
  new ones queued in its place, with no flow-control wait), as a file's slice is overwritten;
- otherwise (a reader took that step or a later one): the new publication is dropped (its keys
  released) with a warning naming the step; the Bridge does not fail.

Lost steps: when a worker leaves (the extension's ``remove_worker`` hook), every queued step
with a block on it becomes, for each reader that had not taken it, a :class:`Lost` marker in
its place, and the stream lets go of its keys; a step published with a block on a worker
already gone is queued as a lost marker. A reader that takes a marker learns which step was
lost and on which worker. Markers do not count for flow control. A reader that had taken the
step holds its keys: dask reports them lost when it computes on them.

Runs in the Dask scheduler process, on its event loop. Imports :mod:`deisa.wire` only.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ..wire import Reply, Status, error

DROPPED_KEPT = 1000
"""The steps dropped by ``on_full="drop_oldest"`` that a stream lists (``deisa_stats``): the
last ones; a long run that drops most steps keeps no more."""

UNCLAIMED = ""
"""The reader that holds the steps published while no consumer is attached (start-order
independence): the first reader to attach takes its place. A run that expects more consumers
(``deisa_open``'s ``consumers``) has one such reader per consumer not attached yet, named
:func:`unclaimed` ``(i)``."""


def unclaimed(index: int) -> str:
    """The name of the ``index``-th reader holding steps for a consumer yet to attach."""
    return UNCLAIMED if index == 0 else f"{UNCLAIMED}#unclaimed-{index}"


@dataclass(eq=False)
class Step:
    """One published step, shared by the queues of the readers that have to take it."""

    step: int
    keys: list[Any]
    workers: list[str]
    run: str
    pending: int = 0  # readers that have not taken it yet; the stream holds its keys until 0
    clients: set[str] = field(default_factory=set)  # the clients that took it
    contract: dict[str, Any] | None = None  # the contract it was sent under (deisa.contract)
    # a moving step's layout, in its wire form (deisa.wire.layout.StepLayout.to_wire): kept as
    # given, handed to each taker, gone with the record once the last reader took the step
    layout: dict[str, Any] | None = None
    # the array's attributes new or changed at this step (deisa.wire.attributes: plain values)
    attrs: dict[str, Any] | None = None


@dataclass(frozen=True)
class Lost:
    """The place of a step whose blocks died with ``workers``: the reader learns it was lost."""

    step: int
    workers: tuple[str, ...]
    run: str

    def reply(self, name: str) -> Reply:
        return error(
            f"step {self.step} of {name!r} was lost: worker(s) {', '.join(self.workers)} "
            "holding its blocks left the cluster",
            Status.LOST,
            step=self.step,
            workers=list(self.workers),
            run=self.run,
        )


@dataclass(frozen=True)
class End:
    """The end of a run, last in a reader's queue."""

    nsteps: int | None
    run: str

    def reply(self, name: str) -> Reply:
        return end_reply(name, self.nsteps, self.run)


def end_reply(name: str, nsteps: int | None, run: str) -> Reply:
    """``deisa_get``'s answer at the end of ``run`` (``nsteps=None``: a run replaced)."""
    return error(f"end of the stream of {name!r} (run {run})", Status.END, nsteps=nsteps, run=run)


Entry = Step | Lost | End


@dataclass(eq=False)
class Reader:
    """A consumer's, or a group's, position in a stream: the steps it still has to take."""

    name: str  # consumer id, ``group:<name>``, or UNCLAIMED
    members: set[str] = field(default_factory=set)  # consumer ids
    queue: deque[Entry] = field(default_factory=deque)
    run: str | None = None  # the run it reads; None: the next one to open
    taken: int = 0
    waiting: bool = False  # holds the steps for a consumer yet to attach (see UNCLAIMED)

    def queued_steps(self) -> int:
        """Steps to take (lost ones do not count: flow control does not wait for them)."""
        return sum(1 for entry in self.queue if isinstance(entry, Step))


@dataclass
class Stream:
    """State of one array's stream on the scheduler."""

    name: str
    run: str | None = None
    meta: dict[str, Any] | None = None
    buffer_nb: int | None = None
    on_full: str = "block"
    consumers: int = 1  # the consumers the run holds its steps for until they attach
    # the last DROPPED_KEPT steps dropped (on_full="drop_oldest"), and how many in all
    dropped: deque[int] = field(default_factory=lambda: deque(maxlen=DROPPED_KEPT))
    ndropped: int = 0
    lost: list[tuple[int, str]] = field(default_factory=list)  # (step, departed worker)
    # attributes of steps dropped or lost before a reader took them: they go with the next step
    attrs_carried: dict[str, Any] = field(default_factory=dict)
    readers: dict[str, Reader] = field(default_factory=dict)
    pending: dict[int, Step] = field(default_factory=dict)  # steps some reader has to take
    # (client, run, step) -> takes by a client that had taken the step before, through another
    # consumer: the stream keeps its claim until the client confirms (see get_step)
    deferred: dict[tuple[str, str, int], list[Step]] = field(default_factory=dict)
    changed: asyncio.Condition = field(default_factory=asyncio.Condition)
    closed: bool = False
    published: int = 0
    taken: int = 0  # steps taken, summed over the readers
    last_taken: int | None = None  # the latest step any reader took (or read lost): see passed

    @property
    def holder(self) -> str:
        return f"deisa-stream-{self.name}-{self.run}"

    def passed(self, step: int) -> None:
        """A reader took ``step``, or its lost marker: a publication up to it comes too late."""
        self.last_taken = step if self.last_taken is None else max(step, self.last_taken)

    def queued_steps(self) -> int:
        """Steps the slowest reader (or the unclaimed queue) has to take."""
        return max((r.queued_steps() for r in self.readers.values()), default=0)

    @property
    def finished(self) -> bool:
        """Closed with no step left to take (only end or lost markers may be left)."""
        return self.closed and not self.pending

    @property
    def consumed(self) -> bool:
        """Finished, and readers took its steps: its end is stale for a new consumer."""
        return self.finished and self.taken > 0

    def some_reader(self, run: str) -> None:
        """Give the stream the unclaimed reader if it has none, to hold what comes."""
        if not self.readers:
            self.readers[UNCLAIMED] = Reader(UNCLAIMED, set(), run=run, waiting=True)

    def expect(self, run: str) -> None:
        """At the opening of ``run``: one unclaimed reader per consumer expected and not
        attached yet (each waiting reader counts as one), to hold the steps for it."""
        for index in range(sum(1 for r in self.readers.values() if r.run == run), self.consumers):
            self.readers[unclaimed(index)] = Reader(unclaimed(index), set(), run=run, waiting=True)

    def unclaimed_reader(self) -> Reader | None:
        """A reader holding steps for a consumer yet to attach, if any."""
        return next((r for r in self.readers.values() if r.waiting), None)

    async def notify(self) -> None:
        await notify(self.changed)

    async def wait_for(self, predicate: Callable[[], bool], timeout: float | None) -> bool:
        return await wait_for(self.changed, predicate, timeout)


async def notify(condition: asyncio.Condition) -> None:
    """Wake every waiter of ``condition``."""
    async with condition:
        condition.notify_all()


async def wait_for(
    condition: asyncio.Condition, predicate: Callable[[], bool], timeout: float | None
) -> bool:
    """Wait until ``predicate()`` holds, checked at each notification; False after ``timeout``."""
    async with condition:
        try:
            await asyncio.wait_for(condition.wait_for(predicate), timeout)
        except asyncio.TimeoutError:
            return False
    return True


def insert(queue: deque[Entry], entry: Step | Lost) -> None:
    """Queue ``entry`` in step order (before the later steps and the end marker); a step
    published again after it was lost takes the place of its lost marker."""
    for i, queued in enumerate(queue):
        if isinstance(queued, Lost) and queued.step == entry.step and isinstance(entry, Step):
            queue[i] = entry
            return
        if isinstance(queued, End) or queued.step > entry.step:
            queue.insert(i, entry)
            return
    queue.append(entry)
