"""Scheduler side of deisa: the steps of each array, fanned out to its consumers, with flow control.

The :class:`StreamExtension` is a :class:`~distributed.diagnostics.plugin.SchedulerPlugin`
installed (idempotently) by the first Bridge or Adapter that connects, whichever starts first.
It plays the role of the DEISA paper's Queue, but carries a whole step per message: the
Bridge's rank 0 aggregates the keys of all ranks over MPI and makes one ``deisa_publish`` call
per step and array, and each consumer one ``deisa_get`` per step, whatever the number of ranks.

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
  side may start first.
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
  block) or when its client leaves the scheduler (the :meth:`remove_client` hook: at once when
  the client closes or its process dies, since the operating system closes its connection;
  for a client whose host vanishes, when the scheduler's TCP connection times out,
  ``distributed.comm.timeouts.tcp``, 30 s by default). A group detaches with its last member.
  A detached reader stops counting for flow control at once, and the steps it had not taken
  are released unless another reader still has to take them. If it was the last reader
  attached, the steps it had not taken wait for the next reader, as before the first one came.

Routes (RPC handlers on the scheduler):

- ``deisa_workers()``: worker addresses and thread counts, sorted by address.
- ``deisa_open(name, run, meta, buffer_nb, on_full)``: a Bridge announces an array.
- ``deisa_publish(name, run, step, blocks, timeout, contract=None)``: register one step's blocks
  (``[key, worker, nbytes]`` triples) and queue it for every reader; while a reader has
  ``buffer_nb`` steps to take it waits (``on_full="block"``, up to ``timeout``) or releases the
  oldest step some reader has not taken (``on_full="drop_oldest"``, with a warning naming the
  step; readers that took it keep it). A step index published again does what a file's slice
  would (see "Repeated steps" below): ``{"status": "OK", "replaced": True}`` or
  ``{"status": "dropped", "message": ...}``.
- ``deisa_close(name, run, nsteps)``: end of stream.
- ``deisa_meta(name, timeout, client=None, consumer=None, group=None)``: the array's metadata,
  once a Bridge has opened it (a *consumed* run's metadata is not served: it waits for the next
  run). With ``consumer``, attaches it first.
- ``deisa_get(name, client, timeout, run, consumer=None, group=None)``: take the next step (or
  the end of stream) of ``run`` for ``consumer`` (default: the client id), whose keys go to
  ``client``; ``run=None`` (a consumer that has taken nothing yet) means the current run, or the
  next one if the current one is consumed. A step's record carries its block keys, the worker
  holding each block (``workers``, as the Bridge reported it) and those workers' thread counts
  (``nthreads``), so the analytics' splitter need not ask again.
- ``deisa_attach(name, client, consumer, group=None)``: attach the consumer now (``zip``
  attaches to all its arrays before waiting for the first).
- ``deisa_detach(consumer, names=None)``: the consumer leaves those arrays (default: all).
- ``deisa_stats()``: message counts per route and per stream, with each stream's readers.
- ``deisa_set_value(name, value)``, ``deisa_get_value(name)``: steering values, the analytics'
  answers to the simulation (:mod:`deisa.analysis.steering`).
- ``deisa_set_contract``, ``deisa_get_contract``, ``deisa_watch_contracts``: what the analytics
  needs of an array (:mod:`deisa.contract`); ``deisa_open`` replies with the array's contract,
  a step's record carries the one it was sent under (``contract``, from ``deisa_publish``).

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
"""

from __future__ import annotations

import asyncio
import logging
from collections import Counter, deque
from dataclasses import dataclass, field
from typing import Any

from distributed.diagnostics.plugin import SchedulerPlugin

from .. import _dask_internals
from ..wire import PLUGIN_NAME
from . import contracts, steering

logger = logging.getLogger(__name__)

# the reader that holds the steps published while no consumer is attached (start-order
# independence): the first reader to attach takes its place
_UNCLAIMED = ""


@dataclass(eq=False)
class _Step:
    """One published step, shared by the queues of the readers that have to take it."""

    step: int
    keys: list[Any]
    workers: list[str]
    run: str
    pending: int = 0  # readers that have not taken it yet; the stream holds its keys until 0
    clients: set[str] = field(default_factory=set)  # the clients that took it
    contract: dict[str, Any] | None = None  # the contract it was sent under (deisa.contract)


_Entry = _Step | dict[str, Any]  # a step, or the end-of-stream marker


@dataclass(eq=False)
class _Reader:
    """A consumer's, or a group's, position in a stream: the steps it still has to take."""

    name: str  # consumer id, ``group:<name>``, or _UNCLAIMED
    members: set[str] = field(default_factory=set)  # consumer ids
    queue: deque[_Entry] = field(default_factory=deque)
    run: str | None = None  # the run it reads; None: the next one to open
    taken: int = 0

    def queued_steps(self) -> int:
        return sum(1 for entry in self.queue if isinstance(entry, _Step))


@dataclass
class _Stream:
    """State of one array's stream on the scheduler."""

    name: str
    run: str | None = None
    meta: dict[str, Any] | None = None
    buffer_nb: int | None = None
    on_full: str = "block"
    dropped: list[int] = field(default_factory=list)
    readers: dict[str, _Reader] = field(default_factory=dict)
    pending: dict[int, _Step] = field(default_factory=dict)  # steps some reader has to take
    # (client, run, step) -> takes by a client that had taken the step before, through another
    # consumer: the stream keeps its claim until the client confirms (see get_step)
    deferred: dict[tuple[str, str, int], list[_Step]] = field(default_factory=dict)
    changed: asyncio.Condition = field(default_factory=asyncio.Condition)
    closed: bool = False
    published: int = 0
    taken: int = 0  # steps taken, summed over the readers
    last_taken: int | None = None  # the latest step any reader took: later ones only queue

    @property
    def holder(self) -> str:
        return f"deisa-stream-{self.name}-{self.run}"

    def queued_steps(self) -> int:
        """Steps the slowest reader (or the unclaimed queue) has to take."""
        return max((r.queued_steps() for r in self.readers.values()), default=0)

    @property
    def finished(self) -> bool:
        """Closed with no step left to take (only end markers may be left)."""
        return self.closed and not self.pending

    @property
    def consumed(self) -> bool:
        """Finished, and readers took its steps: its end is stale for a new consumer."""
        return self.finished and self.taken > 0

    async def notify(self) -> None:
        async with self.changed:
            self.changed.notify_all()

    async def wait_for(self, predicate: Any, timeout: float | None) -> bool:
        async with self.changed:
            try:
                await asyncio.wait_for(self.changed.wait_for(predicate), timeout)
            except asyncio.TimeoutError:
                return False
        return True


def _insert(queue: deque[_Entry], step: _Step) -> None:
    """Queue ``step`` in step order (before the later steps and the end marker)."""
    for i, entry in enumerate(queue):
        if not isinstance(entry, _Step) or entry.step > step.step:
            queue.insert(i, step)
            return
    queue.append(step)


class StreamExtension(SchedulerPlugin):
    """Holds the steps published by Bridges until Adapters take them. See module docstring."""

    name = PLUGIN_NAME
    idempotent = True

    def __init__(self) -> None:
        self.streams: dict[str, _Stream] = {}
        self.calls: Counter[str] = Counter()
        self.scheduler: Any = None
        self.consumers: dict[str, str] = {}  # consumer id -> the client that owns its keys
        self._tasks: set[asyncio.Future[None]] = set()

    async def start(self, scheduler: Any) -> None:
        self.scheduler = scheduler
        handlers = {
            "deisa_workers": self.workers,
            "deisa_open": self.open_stream,
            "deisa_publish": self.publish_step,
            "deisa_close": self.close_stream,
            "deisa_meta": self.array_meta,
            "deisa_get": self.get_step,
            "deisa_attach": self.attach,
            "deisa_detach": self.detach,
            "deisa_stats": self.stats,
        }
        scheduler.handlers.update(handlers)
        scheduler.stream_handlers["deisa_step_taken"] = self.step_taken
        self.steering = steering.install(scheduler)  # deisa_set_value, deisa_get_value
        self.contracts = contracts.install(scheduler, self._open_meta)  # deisa_*_contract(s)
        logger.info("deisa stream extension installed on %s", scheduler.address)

    def _open_meta(self, name: str) -> dict[str, Any] | None:
        """The metadata of ``name`` while a run has it open (contracts are checked on it)."""
        stream = self.streams.get(name)
        return None if stream is None else stream.meta

    def _stream(self, name: str) -> _Stream:
        if name not in self.streams:
            self.streams[name] = _Stream(name)
        return self.streams[name]

    def workers(self) -> list[tuple[str, int]]:
        self.calls["workers"] += 1
        return sorted((ws.address, ws.nthreads) for ws in self.scheduler.workers.values())

    # -- consumers ---------------------------------------------------------------------------

    def _attach(self, stream: _Stream, consumer: str, client: str, group: str | None) -> _Reader:
        """The reader of ``consumer`` in ``stream``, attaching it (or its group) if new."""
        self.consumers[consumer] = client
        name = consumer if group is None else f"group:{group}"
        reader = stream.readers.get(name)
        if reader is not None:
            reader.members.add(consumer)
            return reader
        if stream.run is None or stream.consumed:
            reader = _Reader(name, {consumer})  # waits for the next run
        elif _UNCLAIMED in stream.readers:  # the first reader takes the steps that waited
            unclaimed = stream.readers.pop(_UNCLAIMED)
            reader = _Reader(name, {consumer}, unclaimed.queue, unclaimed.run)
        else:  # joins mid-run: starts at the next step
            reader = _Reader(name, {consumer}, run=stream.run)
            if stream.closed:
                reader.queue.append(
                    {"status": "end", "nsteps": stream.published, "run": stream.run}
                )
        stream.readers[name] = reader
        logger.info(
            "deisa: %s attached to %r (%d reader(s))", name, stream.name, len(stream.readers)
        )
        return reader

    def _detach_reader(self, stream: _Stream, reader: _Reader) -> None:
        """``reader`` leaves: its steps are released unless another reader has to take them."""
        del stream.readers[reader.name]
        steps = [entry for entry in reader.queue if isinstance(entry, _Step)]
        if not stream.readers and stream.run is not None and (steps or not stream.closed):
            # the last reader left mid-run: what it had not taken waits for the next one
            stream.readers[_UNCLAIMED] = _Reader(_UNCLAIMED, set(), reader.queue, reader.run)
            return
        for step in steps:
            self._untake(stream, step)

    def _untake(self, stream: _Stream, step: _Step) -> None:
        """One reader fewer has to take ``step``; the last one lets the stream's keys go."""
        step.pending -= 1
        if step.pending == 0:
            stream.pending.pop(step.step, None)
            _dask_internals.release_keys(self.scheduler, step.keys, stream.holder)

    def _leave(self, consumer: str, names: list[str] | None = None) -> list[_Stream]:
        """Detach ``consumer`` from the streams ``names`` (default: all); the streams touched."""
        touched = []
        for stream in list(self.streams.values()):
            if names is not None and stream.name not in names:
                continue
            for reader in list(stream.readers.values()):
                if consumer in reader.members:
                    reader.members.discard(consumer)
                    if not reader.members:
                        self._detach_reader(stream, reader)
                    touched.append(stream)
                    logger.info("deisa: consumer %s left %r", consumer, stream.name)
        if names is None:
            self.consumers.pop(consumer, None)
        return touched

    async def attach(
        self, name: str, client: str, consumer: str, group: str | None = None
    ) -> dict[str, Any]:
        self.calls["attach"] += 1
        self._attach(self._stream(name), consumer, client, group)
        return {"status": "OK"}

    async def detach(self, consumer: str, names: list[str] | None = None) -> dict[str, Any]:
        self.calls["detach"] += 1
        for stream in self._leave(consumer, names):
            await stream.notify()
        return {"status": "OK"}

    def remove_client(self, scheduler: Any, client: str) -> None:
        """A client left the scheduler (closed, died, timed out): its consumers detach."""
        gone = [c for c, owner in self.consumers.items() if owner == client]
        touched = {id(s): s for consumer in gone for s in self._leave(consumer)}
        for stream in self.streams.values():
            for deferred in [k for k in stream.deferred if k[0] == client]:
                for entry in stream.deferred.pop(deferred):
                    self._untake(stream, entry)
        for stream in touched.values():  # a sync hook: wake the waiters from the loop
            task = asyncio.ensure_future(stream.notify())
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    # -- the simulation's side ---------------------------------------------------------------

    async def open_stream(
        self,
        name: str,
        run: str,
        meta: dict[str, Any],
        buffer_nb: int | None,
        on_full: str = "block",
    ) -> dict[str, Any]:
        self.calls["open"] += 1
        stream = self._stream(name)
        if stream.run not in (None, run) and not stream.finished:
            return {
                "status": "error",
                "message": f"array {name!r} is already published by run {stream.run}, "
                "which has not finished (or whose steps the analytics has not all taken)",
            }
        if stream.run != run:  # a new run replaces a finished one, in place: getters may wait on it
            self._retire(stream)
        stream.run, stream.meta, stream.buffer_nb = run, meta, buffer_nb
        stream.on_full = on_full
        for reader in stream.readers.values():
            reader.run = run  # those waiting for the next run
        await stream.notify()
        # the array's contract, checked against it, applies from the run's first step
        return {"status": "OK", **self.contracts.opened(name, meta)}

    async def publish_step(
        self,
        name: str,
        run: str,
        step: int,
        blocks: list[tuple[Any, str, int]],
        timeout: float | None = None,
        contract: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        self.calls["publish"] += 1
        stream = self.streams.get(name)
        if stream is None or stream.run != run:
            return {"status": "error", "message": f"array {name!r} was not opened by run {run}"}
        keys = [key for key, _, _ in blocks]
        departed = sorted({w for _, w, _ in blocks if w not in self.scheduler.workers})
        if departed:  # gone between the ranks' sends and this call: free what the others hold
            present = [(k, w, n) for k, w, n in blocks if w not in departed]
            _dask_internals.register_keys(
                self.scheduler,
                who_has={key: [worker] for key, worker, _ in present},
                nbytes={key: nbytes for key, _, nbytes in present},
                holder=stream.holder,
            )
            _dask_internals.release_keys(self.scheduler, [k for k, _, _ in present], stream.holder)
            return {
                "status": "error",
                "message": f"worker(s) {', '.join(departed)} holding blocks of step {step} of "
                f"{name!r} left the cluster before the step was registered; step {step} was "
                "not delivered",
            }
        _dask_internals.register_keys(
            self.scheduler,
            who_has={key: [worker] for key, worker, _ in blocks},
            nbytes={key: nbytes for key, _, nbytes in blocks},
            holder=stream.holder,
        )
        record = _Step(step, keys, [worker for _, worker, _ in blocks], run, contract=contract)
        if stream.last_taken is not None and step <= stream.last_taken:
            return self._drop_late(stream, record)
        if step in stream.pending:
            return await self._replace(stream, stream.pending[step], record)
        limit = stream.buffer_nb
        if limit and stream.on_full == "drop_oldest":
            while stream.queued_steps() >= limit:
                self._drop_oldest(stream)
        elif limit:
            has_room = await stream.wait_for(lambda: stream.queued_steps() < limit, timeout)
            if not has_room:
                _dask_internals.release_keys(self.scheduler, keys, stream.holder)
                slowest = max(stream.readers.values(), key=_Reader.queued_steps)
                who = (
                    "no consumer is attached"
                    if slowest.name == _UNCLAIMED
                    else f"slowest reader: {slowest.name}"
                )
                return {
                    "status": "timeout",
                    "message": f"the analytics took no step of {name!r} for {timeout} s while "
                    f"buffer_nb={limit} steps were waiting (taken so far: {stream.taken}); "
                    f"step {step} was not delivered ({who})",
                }
            if stream.last_taken is not None and step <= stream.last_taken:
                return self._drop_late(stream, record)  # taken past it while waiting
        if not stream.readers:
            stream.readers[_UNCLAIMED] = _Reader(_UNCLAIMED, set(), run=run)
        for reader in stream.readers.values():
            _insert(reader.queue, record)
        record.pending = len(stream.readers)
        stream.pending[step] = record
        stream.published += 1
        await stream.notify()
        return {"status": "OK"}

    async def _replace(self, stream: _Stream, old: _Step, new: _Step) -> dict[str, Any]:
        """A step published again before any reader took it: the new data takes its place."""
        released = [key for key in old.keys if key not in new.keys]
        old.keys, old.workers = new.keys, new.workers  # in place: in every reader's queue
        old.contract = new.contract
        _dask_internals.release_keys(self.scheduler, released, stream.holder)
        logger.info(
            "deisa: step %d of %r published again before the analytics took it: the new data "
            "replaces it",
            new.step,
            stream.name,
        )
        await stream.notify()
        return {"status": "OK", "replaced": True}

    def _drop_late(self, stream: _Stream, record: _Step) -> dict[str, Any]:
        """A step the analytics has already passed (taken it, or a later one): drop the new one."""
        _dask_internals.release_keys(self.scheduler, record.keys, stream.holder)
        message = (
            f"step {record.step} of {stream.name!r} was published after the analytics had "
            f"taken step {stream.last_taken}: this publication was dropped (a step the "
            "analytics has passed cannot be replaced)"
        )
        logger.warning("deisa: %s", message)
        return {"status": "dropped", "message": message}

    def _drop_oldest(self, stream: _Stream) -> None:
        """Release the oldest step a reader has to take (``on_full="drop_oldest"``); readers
        that took it keep it."""
        oldest = stream.pending.pop(min(stream.pending))
        for reader in stream.readers.values():
            if oldest in reader.queue:
                reader.queue.remove(oldest)
        _dask_internals.release_keys(self.scheduler, oldest.keys, stream.holder)
        stream.dropped.append(oldest.step)
        logger.warning(
            "deisa: dropped step %d of %r: buffer_nb=%d steps were waiting for the "
            "analytics (on_full='drop_oldest'; %d step(s) dropped so far)",
            oldest.step,
            stream.name,
            stream.buffer_nb,
            len(stream.dropped),
        )

    async def close_stream(self, name: str, run: str, nsteps: int) -> dict[str, Any]:
        self.calls["close"] += 1
        stream = self.streams.get(name)
        if stream is None or stream.run != run:
            return {"status": "error", "message": f"array {name!r} was not opened by run {run}"}
        if not stream.readers:
            stream.readers[_UNCLAIMED] = _Reader(_UNCLAIMED, set(), run=run)
        for reader in stream.readers.values():
            reader.queue.append({"status": "end", "nsteps": nsteps, "run": run})
        stream.closed = True
        await stream.notify()
        return {"status": "OK"}

    # -- the analytics' side -----------------------------------------------------------------

    async def array_meta(
        self,
        name: str,
        timeout: float | None = None,
        client: str | None = None,
        consumer: str | None = None,
        group: str | None = None,
    ) -> dict[str, Any]:
        self.calls["meta"] += 1
        stream = self._stream(name)
        if consumer is not None and client is not None:
            self._attach(stream, consumer, client, group)
        if not await stream.wait_for(
            lambda: stream.meta is not None and not stream.consumed, timeout
        ):
            return {"status": "timeout"}
        return {"status": "OK", "meta": stream.meta, "run": stream.run}

    async def get_step(
        self,
        name: str,
        client: str,
        timeout: float | None = None,
        run: str | None = None,
        consumer: str | None = None,
        group: str | None = None,
    ) -> dict[str, Any]:
        self.calls["get"] += 1
        stream = self._stream(name)
        consumer = client if consumer is None else consumer

        def replaced() -> bool:
            return run is not None and stream.run != run

        if replaced():  # its end marker went with the run it finished
            return {"status": "end", "nsteps": None, "run": run}
        reader = self._attach(stream, consumer, client, group)

        def current() -> _Reader | None:
            # the reader may be replaced meanwhile (detached, then attached again)
            return stream.readers.get(reader.name)

        def ready() -> bool:
            mine = current()
            return replaced() or mine is None or bool(mine.queue)

        if not await stream.wait_for(ready, timeout):
            return {
                "status": "timeout",
                "open": stream.run is not None and not stream.consumed,
                "published": 0 if stream.consumed else stream.published,
            }
        if replaced():  # its end marker went with the run it finished
            return {"status": "end", "nsteps": None, "run": run}
        if client not in self.scheduler.clients:  # left while waiting: the step stays queued
            return {"status": "error", "message": f"client {client} is not connected"}
        mine = current()
        if mine is None:
            return {"status": "error", "message": f"consumer {consumer} was detached from {name!r}"}
        entry = mine.queue[0]
        if not isinstance(entry, _Step):  # the end: this consumer is done with the run
            mine.members.discard(consumer)
            if mine.members:  # a group: its other members read the end too
                await stream.notify()
                return entry
            del stream.readers[mine.name]
            if not any(r.run == stream.run for r in stream.readers.values()):
                self._retire(stream)  # in place: readers of the next run may already wait on it
            await stream.notify()
            return entry
        mine.queue.popleft()
        _dask_internals.share_keys(self.scheduler, entry.keys, client)
        again = client in entry.clients
        if again:
            # another consumer of this client took the step before: a release the client sent
            # for it may still be on its way (on its batched stream, not on this connection) and
            # undo the share above. The stream keeps the keys until ``deisa_step_taken`` comes
            # on that batched stream, after any such release.
            stream.deferred.setdefault((client, entry.run, entry.step), []).append(entry)
        else:
            entry.clients.add(client)
            self._untake(stream, entry)
        mine.taken += 1
        stream.taken += 1
        stream.last_taken = max(entry.step, stream.last_taken or entry.step)
        await stream.notify()
        return {
            "status": "OK",
            "step": entry.step,
            "keys": entry.keys,
            "workers": entry.workers,
            "run": entry.run,
            "meta": stream.meta,
            "nthreads": self._nthreads(entry.workers),
            "confirm": again,
            "contract": entry.contract,
        }

    def step_taken(self, client: str, name: str, run: str, step: int) -> None:
        """Batched-stream message of a client confirming a step it took again (see get_step)."""
        self.calls["step_taken"] += 1
        stream = self.streams.get(name)
        waiting = stream.deferred.get((client, run, step)) if stream is not None else None
        if not waiting or stream is None:
            return
        entry = waiting.pop()
        if not waiting:
            del stream.deferred[(client, run, step)]
        if client in self.scheduler.clients:
            _dask_internals.share_keys(self.scheduler, entry.keys, client)
        self._untake(stream, entry)

    def _retire(self, stream: _Stream) -> None:
        """Forget a finished run: its holder, records and readers go, the stream object and
        the consumers waiting for the next run stay."""
        if stream.run is not None:
            _dask_internals.forget_holder(self.scheduler, stream.holder)
        for name, reader in list(stream.readers.items()):
            if (reader.run is not None and reader.run == stream.run) or name == _UNCLAIMED:
                del stream.readers[name]
            else:
                reader.queue.clear()
        stream.run = stream.meta = None
        stream.pending.clear()
        stream.deferred.clear()
        stream.closed, stream.published, stream.taken = False, 0, 0
        stream.dropped, stream.last_taken = [], None

    def _nthreads(self, holders: list[str]) -> dict[str, int]:
        """Threads of the workers holding a step's blocks (the splitter sizes partitions by it)."""
        workers = self.scheduler.workers
        return {w: workers[w].nthreads for w in set(holders) if w in workers}

    def stats(self) -> dict[str, Any]:
        return {
            "calls": dict(self.calls),
            "steering": self.steering.stats(),
            "contracts": self.contracts.stats(),
            "streams": {
                name: {
                    "run": s.run,
                    "published": s.published,
                    "taken": s.taken,
                    "queued": s.queued_steps(),
                    "closed": s.closed,
                    "dropped": list(s.dropped),
                    "consumers": {
                        r.name: {
                            "members": sorted(r.members),
                            "taken": r.taken,
                            "queued": r.queued_steps(),
                        }
                        for r in s.readers.values()
                        if r.name != _UNCLAIMED
                    },
                }
                for name, s in self.streams.items()
            },
        }
