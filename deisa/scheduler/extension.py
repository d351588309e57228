"""Scheduler side of deisa: the steps of each array, fanned out to its consumers, with flow control.

The :class:`StreamExtension` is a :class:`~distributed.diagnostics.plugin.SchedulerPlugin`
installed (idempotently) by the first Bridge or Adapter that connects, whichever starts first.
It plays the role of the DEISA paper's Queue, but carries a whole step per message: the
Bridge's rank 0 aggregates the keys of all ranks over MPI and makes one ``deisa_publish`` call
per step and array, and each consumer one ``deisa_get`` per step, whatever the number of ranks.

How a stream serves its consumers and groups (fan-out, work queues, attach and detach, flow
control, runs, repeated and lost steps) is told in :mod:`._streams`, beside its records.

Routes (RPC handlers on the scheduler):

- ``deisa_workers()``: ``[[address, nthreads], ...]`` of the workers, sorted by address (a
  plain list, not a reply: it cannot fail).
- ``deisa_watch_workers(known, timeout)``: ``ok(workers=[[address, nthreads], ...])`` as soon
  as the workers' addresses differ from ``known``, else after ``timeout`` seconds; how a
  Bridge learns that a worker left or joined without waiting on a connection timeout.
- ``deisa_open(name, run, meta, buffer_nb, on_full)``: a Bridge announces an array.
- ``deisa_publish(name, run, step, blocks, timeout, contract=None)``: register one step's blocks
  (``[key, worker, nbytes]`` triples) and queue it for every reader; while a reader has
  ``buffer_nb`` steps to take it waits (``on_full="block"``, up to ``timeout``) or releases the
  oldest step some reader has not taken (``on_full="drop_oldest"``, with a warning naming the
  step; readers that took it keep it). A step index published again does what a file's slice
  would (see "Repeated steps" in :mod:`._streams`): ``ok(replaced=True)`` or
  ``Status.DROPPED``. A step with a block on a worker that has left is refused with
  ``Status.LOST`` and ``workers`` (those that left): its keys are released and the readers
  find a lost marker in its place.
- ``deisa_close(name, run, nsteps)``: end of stream.
- ``deisa_meta(name, timeout, client=None, consumer=None, group=None)``: the array's metadata,
  once a Bridge has opened it (a *consumed* run's metadata is not served: it waits for the next
  run). With ``consumer``, attaches it first.
- ``deisa_get(name, client, timeout, run, consumer=None, group=None)``: take the next step (or
  the end of stream) of ``run`` for ``consumer`` (default: the client id), whose keys go to
  ``client``; ``run=None`` (a consumer that has taken nothing yet) means the current run, or the
  next one if the current one is consumed. A step's record carries its block keys, the worker
  holding each block (``workers``, as the Bridge reported it) and those workers' thread counts
  (``nthreads``), so the analytics' splitter need not ask again. A step lost with a worker
  answers ``Status.LOST`` with ``step`` and ``workers``; the end answers ``Status.END``.
- ``deisa_attach(name, client, consumer, group=None)``: attach the consumer now (``zip``
  attaches to all its arrays before waiting for the first).
- ``deisa_detach(consumer, names=None)``: the consumer leaves those arrays (default: all).
- ``deisa_stats()``: message counts per route and per stream, with each stream's readers and
  its lost steps (``[step, worker]``); a plain dict, not a reply.
- ``deisa_set_value(name, value)``, ``deisa_get_value(name)``: steering values, the analytics'
  answers to the simulation (:mod:`deisa.analysis.steering`).
- ``deisa_set_contract``, ``deisa_get_contract``, ``deisa_watch_contracts``: what the analytics
  needs of an array (:mod:`deisa.contract`); ``deisa_open`` replies with the array's contract,
  a step's record carries the one it was sent under (``contract``, from ``deisa_publish``).

"""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from typing import Any

from distributed.diagnostics.plugin import SchedulerPlugin

from .. import _dask_internals
from ..wire import PLUGIN_NAME, WATCH_SECONDS, Reply, Route, Status, error, ok
from . import _streams, contracts, steering
from ._streams import UNCLAIMED, End, Lost, Reader, Step, Stream, end_reply, insert

logger = logging.getLogger(__name__)


class StreamExtension(SchedulerPlugin):
    """Holds the steps published by Bridges until Adapters take them. See module docstring."""

    name = PLUGIN_NAME
    idempotent = True

    def __init__(self) -> None:
        self.streams: dict[str, Stream] = {}
        self.calls: Counter[str] = Counter()
        # per array, never reset by a new run: steps published and taken, bytes published
        self.totals: dict[str, Counter[str]] = {}
        self.scheduler: Any = None
        self.consumers: dict[str, str] = {}  # consumer id -> the client that owns its keys
        self._tasks: set[asyncio.Future[None]] = set()
        self._workers_changed: asyncio.Condition = asyncio.Condition()

    async def start(self, scheduler: Any) -> None:
        self.scheduler = scheduler
        handlers = {
            Route.WORKERS: self.workers,
            Route.OPEN: self.open_stream,
            Route.PUBLISH: self.publish_step,
            Route.CLOSE: self.close_stream,
            Route.META: self.array_meta,
            Route.GET: self.get_step,
            Route.ATTACH: self.attach,
            Route.DETACH: self.detach,
            Route.STATS: self.stats,
            Route.WATCH_WORKERS: self.watch_workers,
        }
        scheduler.handlers.update({route.value: handler for route, handler in handlers.items()})
        scheduler.stream_handlers[Route.STEP_TAKEN.value] = self.step_taken
        self.steering = steering.install(scheduler)  # deisa_set_value, deisa_get_value
        self.contracts = contracts.install(scheduler, self._open_meta)  # deisa_*_contract(s)
        logger.info("deisa stream extension installed on %s", scheduler.address)

    def _open_meta(self, name: str) -> dict[str, Any] | None:
        """The metadata of ``name`` while a run has it open (contracts are checked on it)."""
        stream = self.streams.get(name)
        return None if stream is None else stream.meta

    def _stream(self, name: str) -> Stream:
        if name not in self.streams:
            self.streams[name] = Stream(name)
        return self.streams[name]

    def _soon(self, coroutine: Any) -> None:
        """Run ``coroutine`` on the loop (from a sync hook), keeping it referenced until done."""
        task = asyncio.ensure_future(coroutine)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    # -- workers -----------------------------------------------------------------------------

    def _worker_list(self) -> list[tuple[str, int]]:
        return sorted((ws.address, ws.nthreads) for ws in self.scheduler.workers.values())

    def workers(self) -> list[tuple[str, int]]:
        self.calls["workers"] += 1
        return self._worker_list()

    async def watch_workers(self, known: list[str], timeout: float | None = WATCH_SECONDS) -> Reply:
        self.calls["watch_workers"] += 1
        changed = self._workers_changed
        await _streams.wait_for(changed, lambda: set(self.scheduler.workers) != set(known), timeout)
        return ok(workers=self._worker_list())

    def add_worker(self, scheduler: Any, worker: str) -> None:
        """A worker joined: wake the ``deisa_watch_workers`` callers."""
        self._soon(_streams.notify(self._workers_changed))

    def remove_worker(self, scheduler: Any, worker: str, **kwargs: Any) -> None:
        """A worker left: every queued step with a block on it is lost for the readers that
        had not taken it (the readers that took it hold the keys; dask reports them lost)."""
        for stream in self.streams.values():
            hit = sorted(
                (step for step in stream.pending.values() if worker in step.workers),
                key=lambda step: step.step,
            )
            for step in hit:
                readers = [r for r in stream.readers.values() if step in r.queue]
                self._lose(stream, Lost(step.step, (worker,), step.run), readers, step)
            if hit:
                self._soon(stream.notify())
        self._soon(_streams.notify(self._workers_changed))

    def _lose(self, stream: Stream, marker: Lost, readers: Any, step: Step | None = None) -> None:
        """``marker`` takes the place of ``step`` (or its step's place, for a step never
        queued) in the queues of ``readers``; the stream lets go of the step's keys."""
        for reader in readers:
            if step is None:
                insert(reader.queue, marker)
            else:
                reader.queue[reader.queue.index(step)] = marker
        if step is not None:
            stream.pending.pop(step.step, None)
            step.pending = 0
            _dask_internals.release_keys(self.scheduler, step.keys, stream.holder)
        stream.lost.extend((marker.step, worker) for worker in marker.workers)
        logger.warning(
            "deisa: step %d of %r lost: worker(s) %s holding its blocks left the cluster",
            marker.step,
            stream.name,
            ", ".join(marker.workers),
        )

    # -- consumers ---------------------------------------------------------------------------

    def _attach(self, stream: Stream, consumer: str, client: str, group: str | None) -> Reader:
        """The reader of ``consumer`` in ``stream``, attaching it (or its group) if new."""
        self.consumers[consumer] = client
        name = consumer if group is None else f"group:{group}"
        reader = stream.readers.get(name)
        if reader is not None:
            reader.members.add(consumer)
            return reader
        if stream.run is None or stream.consumed:
            reader = Reader(name, {consumer})  # waits for the next run
        elif UNCLAIMED in stream.readers:  # the first reader takes the steps that waited
            unclaimed = stream.readers.pop(UNCLAIMED)
            reader = Reader(name, {consumer}, unclaimed.queue, unclaimed.run)
        else:  # joins mid-run: starts at the next step
            reader = Reader(name, {consumer}, run=stream.run)
            if stream.closed:
                reader.queue.append(End(stream.published, stream.run))
        stream.readers[name] = reader
        logger.info(
            "deisa: %s attached to %r (%d reader(s))", name, stream.name, len(stream.readers)
        )
        return reader

    def _detach_reader(self, stream: Stream, reader: Reader) -> None:
        """``reader`` leaves: its steps are released unless another reader has to take them."""
        del stream.readers[reader.name]
        steps = [entry for entry in reader.queue if isinstance(entry, Step)]
        if not stream.readers and stream.run is not None and (steps or not stream.closed):
            # the last reader left mid-run: what it had not taken waits for the next one
            stream.readers[UNCLAIMED] = Reader(UNCLAIMED, set(), reader.queue, reader.run)
            return
        for step in steps:
            self._untake(stream, step)

    def _untake(self, stream: Stream, step: Step) -> None:
        """One reader fewer has to take ``step``; the last one lets the stream's keys go."""
        step.pending -= 1
        if step.pending == 0:
            stream.pending.pop(step.step, None)
            _dask_internals.release_keys(self.scheduler, step.keys, stream.holder)

    def _leave(self, consumer: str, names: list[str] | None = None) -> list[Stream]:
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
    ) -> Reply:
        self.calls["attach"] += 1
        self._attach(self._stream(name), consumer, client, group)
        return ok()

    async def detach(self, consumer: str, names: list[str] | None = None) -> Reply:
        self.calls["detach"] += 1
        for stream in self._leave(consumer, names):
            await stream.notify()
        return ok()

    def remove_client(self, scheduler: Any, client: str) -> None:
        """A client left the scheduler (closed, died, timed out): its consumers detach."""
        gone = [c for c, owner in self.consumers.items() if owner == client]
        touched = {id(s): s for consumer in gone for s in self._leave(consumer)}
        for stream in self.streams.values():
            for deferred in [k for k in stream.deferred if k[0] == client]:
                for entry in stream.deferred.pop(deferred):
                    self._untake(stream, entry)
        for stream in touched.values():  # a sync hook: wake the waiters from the loop
            self._soon(stream.notify())

    # -- the simulation's side ---------------------------------------------------------------

    async def open_stream(
        self,
        name: str,
        run: str,
        meta: dict[str, Any],
        buffer_nb: int | None,
        on_full: str = "block",
    ) -> Reply:
        self.calls["open"] += 1
        stream = self._stream(name)
        if stream.run not in (None, run) and not stream.finished:
            return error(
                f"array {name!r} is already published by run {stream.run}, which has not "
                "finished (or whose steps the analytics has not all taken)"
            )
        if stream.run != run:  # a new run replaces a finished one, in place: getters may wait on it
            self._retire(stream)
        stream.run, stream.meta, stream.buffer_nb = run, meta, buffer_nb
        stream.on_full = on_full
        for reader in stream.readers.values():
            reader.run = run  # those waiting for the next run
        await stream.notify()
        # the array's contract, checked against it, applies from the run's first step
        return ok(**self.contracts.opened(name, meta))

    async def publish_step(
        self,
        name: str,
        run: str,
        step: int,
        blocks: list[tuple[Any, str, int]],
        timeout: float | None = None,
        contract: dict[str, Any] | None = None,
    ) -> Reply:
        self.calls["publish"] += 1
        stream = self.streams.get(name)
        if stream is None or stream.run != run:
            return error(f"array {name!r} was not opened by run {run}")
        keys = [key for key, _, _ in blocks]
        departed = sorted({w for _, w, _ in blocks if w not in self.scheduler.workers})
        present = [(k, w, n) for k, w, n in blocks if w not in departed]
        _dask_internals.register_keys(
            self.scheduler,
            who_has={key: [worker] for key, worker, _ in present},
            nbytes={key: nbytes for key, _, nbytes in present},
            holder=stream.holder,
        )
        record = Step(step, keys, [worker for _, worker, _ in blocks], run, contract=contract)
        if departed:  # gone between the ranks' sends and this call: free what the others hold
            return await self._lost_on_arrival(stream, record, departed)
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
                slowest = max(stream.readers.values(), key=Reader.queued_steps)
                who = (
                    "no consumer is attached"
                    if slowest.name == UNCLAIMED
                    else f"slowest reader: {slowest.name}"
                )
                return error(
                    f"the analytics took no step of {name!r} for {timeout} s while "
                    f"buffer_nb={limit} steps were waiting (taken so far: {stream.taken}); "
                    f"step {step} was not delivered ({who})",
                    Status.TIMEOUT,
                )
            if stream.last_taken is not None and step <= stream.last_taken:
                return self._drop_late(stream, record)  # taken past it while waiting
            departed = sorted({w for w in record.workers if w not in self.scheduler.workers})
            if departed:  # left while it waited for room
                return await self._lost_on_arrival(stream, record, departed)
        stream.some_reader(run)
        for reader in stream.readers.values():
            insert(reader.queue, record)  # in place of its lost marker, if it was lost before
        stream.lost = [(lost, worker) for lost, worker in stream.lost if lost != step]
        record.pending = len(stream.readers)
        stream.pending[step] = record
        stream.published += 1
        nbytes = sum(n for *_, n in present)
        self.totals.setdefault(name, Counter()).update(published=1, bytes=nbytes)
        await stream.notify()
        return ok()

    async def _lost_on_arrival(self, stream: Stream, record: Step, departed: list[str]) -> Reply:
        """A step with blocks on workers that left: released, and lost for every reader."""
        _dask_internals.release_keys(self.scheduler, record.keys, stream.holder)
        passed = stream.last_taken is not None and record.step <= stream.last_taken
        if not passed:  # the readers have not passed it: they learn it was lost
            stream.some_reader(record.run)
        readers = [] if passed else list(stream.readers.values())
        self._lose(stream, Lost(record.step, tuple(departed), record.run), readers)
        await stream.notify()
        return error(
            f"worker(s) {', '.join(departed)} holding blocks of step {record.step} of "
            f"{stream.name!r} left the cluster before the step was registered; step "
            f"{record.step} was lost",
            Status.LOST,
            workers=departed,
        )

    async def _replace(self, stream: Stream, old: Step, new: Step) -> Reply:
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
        return ok(replaced=True)

    def _drop_late(self, stream: Stream, record: Step) -> Reply:
        """A step the analytics has already passed (taken it, or a later one): drop the new one."""
        _dask_internals.release_keys(self.scheduler, record.keys, stream.holder)
        message = (
            f"step {record.step} of {stream.name!r} was published after the analytics had "
            f"taken step {stream.last_taken}: this publication was dropped (a step the "
            "analytics has passed cannot be replaced)"
        )
        logger.warning("deisa: %s", message)
        return error(message, Status.DROPPED)

    def _drop_oldest(self, stream: Stream) -> None:
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

    async def close_stream(
        self, name: str, run: str, nsteps: int, held_s: float = 0.0, open_s: float = 0.0
    ) -> Reply:
        """End ``name``'s stream after ``nsteps`` steps; ``held_s`` of rank 0's ``open_s``
        seconds with its Bridge went to flow control (totals ``held_ms`` and ``open_ms``)."""
        self.calls["close"] += 1
        stream = self.streams.get(name)
        if stream is None or stream.run != run:
            return error(f"array {name!r} was not opened by run {run}")
        ms = {"held_ms": round(1000 * held_s), "open_ms": round(1000 * open_s)}
        self.totals.setdefault(name, Counter()).update(ms)
        stream.some_reader(run)
        for reader in stream.readers.values():
            reader.queue.append(End(nsteps, run))
        stream.closed = True
        await stream.notify()
        return ok()

    # -- the analytics' side -----------------------------------------------------------------

    async def array_meta(
        self,
        name: str,
        timeout: float | None = None,
        client: str | None = None,
        consumer: str | None = None,
        group: str | None = None,
    ) -> Reply:
        self.calls["meta"] += 1
        stream = self._stream(name)
        if consumer is not None and client is not None:
            self._attach(stream, consumer, client, group)
        if not await stream.wait_for(
            lambda: stream.meta is not None and not stream.consumed, timeout
        ):
            return error(f"no simulation opened array {name!r} within {timeout} s", Status.TIMEOUT)
        return ok(meta=stream.meta, run=stream.run)

    async def get_step(
        self,
        name: str,
        client: str,
        timeout: float | None = None,
        run: str | None = None,
        consumer: str | None = None,
        group: str | None = None,
    ) -> Reply:
        self.calls["get"] += 1
        stream = self._stream(name)
        consumer = client if consumer is None else consumer

        def replaced() -> bool:
            return run is not None and stream.run != run

        if replaced():  # its end marker went with the run it finished
            return end_reply(name, None, run)  # type: ignore[arg-type]
        reader = self._attach(stream, consumer, client, group)

        def current() -> Reader | None:
            # the reader may be replaced meanwhile (detached, then attached again)
            return stream.readers.get(reader.name)

        def ready() -> bool:
            mine = current()
            return replaced() or mine is None or bool(mine.queue)

        if not await stream.wait_for(ready, timeout):
            return error(
                f"no step of {name!r} came within {timeout} s",
                Status.TIMEOUT,
                open=stream.run is not None and not stream.consumed,
                published=0 if stream.consumed else stream.published,
            )
        if replaced():  # its end marker went with the run it finished
            return end_reply(name, None, run)  # type: ignore[arg-type]
        if client not in self.scheduler.clients:  # left while waiting: the step stays queued
            return error(f"client {client} is not connected")
        mine = current()
        if mine is None:
            return error(f"consumer {consumer} was detached from {name!r}")
        entry = mine.queue[0]
        if isinstance(entry, Lost):  # its place: the reader learns it was lost, and passes it
            mine.queue.popleft()
            stream.passed(entry.step)
            await stream.notify()
            return entry.reply(name)
        if isinstance(entry, End):  # this consumer is done with the run
            mine.members.discard(consumer)
            if mine.members:  # a group: its other members read the end too
                await stream.notify()
                return entry.reply(name)
            del stream.readers[mine.name]
            if not any(r.run == stream.run for r in stream.readers.values()):
                self._retire(stream)  # in place: readers of the next run may already wait on it
            await stream.notify()
            return entry.reply(name)
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
        self.totals.setdefault(name, Counter())["taken"] += 1
        stream.passed(entry.step)
        await stream.notify()
        return ok(
            step=entry.step,
            keys=entry.keys,
            workers=entry.workers,
            run=entry.run,
            meta=stream.meta,
            nthreads=self._nthreads(entry.workers),
            confirm=again,
            contract=entry.contract,
        )

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

    def _retire(self, stream: Stream) -> None:
        """Forget a finished run: its holder, records and readers go, the stream object and
        the consumers waiting for the next run stay."""
        if stream.run is not None:
            _dask_internals.forget_holder(self.scheduler, stream.holder)
        for name, reader in list(stream.readers.items()):
            if (reader.run is not None and reader.run == stream.run) or name == UNCLAIMED:
                del stream.readers[name]
            else:
                reader.queue.clear()
        stream.run = stream.meta = None
        stream.pending.clear()
        stream.deferred.clear()
        stream.closed, stream.published, stream.taken = False, 0, 0
        stream.dropped, stream.lost, stream.last_taken = [], [], None

    def _nthreads(self, holders: list[str]) -> dict[str, int]:
        """Threads of the workers holding a step's blocks (the splitter sizes partitions by it)."""
        workers = self.scheduler.workers
        return {w: workers[w].nthreads for w in set(holders) if w in workers}

    def stats(self) -> dict[str, Any]:
        return {
            "calls": dict(self.calls),
            "totals": {name: dict(counts) for name, counts in self.totals.items()},
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
                    "lost": [list(lost) for lost in s.lost],
                    "consumers": {
                        r.name: {
                            "members": sorted(r.members),
                            "taken": r.taken,
                            "queued": r.queued_steps(),
                        }
                        for r in s.readers.values()
                        if r.name != UNCLAIMED
                    },
                }
                for name, s in self.streams.items()
            },
        }
