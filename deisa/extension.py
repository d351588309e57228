"""Scheduler side of deisa: one FIFO of steps per array, with flow control.

The :class:`StreamExtension` is a :class:`~distributed.diagnostics.plugin.SchedulerPlugin`
installed (idempotently) by the first Bridge or Adapter that connects, whichever starts first.
It plays the role of the DEISA paper's Queue, but carries a whole step per message: the
Bridge's rank 0 aggregates the keys of all ranks over MPI and makes one ``deisa_publish`` call
per step and array, and the Adapter one ``deisa_get``, whatever the number of ranks.

Until the analytics takes a step, its keys are held by a pseudo-client named after the stream
(as distributed's Queue does), so the data stays alive even if every simulation process has
exited. ``deisa_get`` hands the keys to the analytics client in the same scheduler call,
so they are never unreferenced in between.

Routes (RPC handlers on the scheduler):

- ``deisa_workers()``: worker addresses and thread counts, sorted by address.
- ``deisa_open(name, run, meta, buffer_nb, on_full)``: a Bridge announces an array.
- ``deisa_publish(name, run, step, blocks, timeout)``: register one step's blocks
  (``[key, worker, nbytes]`` triples) and queue it; while ``buffer_nb`` steps are queued it
  waits (``on_full="block"``, up to ``timeout``) or releases the oldest queued step
  (``on_full="drop_oldest"``, with a warning naming the step). A step index published again
  does what a file's slice would (see "Repeated steps" below): ``{"status": "OK", "replaced":
  True}`` or ``{"status": "dropped", "message": ...}``.
- ``deisa_close(name, run, nsteps)``: end of stream.
- ``deisa_meta(name, timeout)``: the array's metadata, once a Bridge has opened it (a *consumed*
  run's metadata is not served: it waits for the next run).
- ``deisa_get(name, client, timeout, run)``: take the next step (or the end of stream) of
  ``run`` for ``client``; ``run=None`` (an Adapter that has taken nothing yet) means the current
  run, or the next one if the current one is consumed. A step's record carries its block keys,
  the worker holding each block (``workers``, as the Bridge reported it) and those workers'
  thread counts (``nthreads``), so the analytics' splitter need not ask again.
- ``deisa_stats()``: message counts per route and per stream.

A run is *finished* when it is closed and no step of it is left to take, even if nobody read
the end-of-stream marker (an analytics loop over a known number of steps never does), and
*consumed* if, on top of that, an Adapter took its steps. A new run of the same array name
replaces a finished one; an Adapter still reading the old run then receives its end of stream.
A fresh Adapter waits for the next run rather than receive a consumed run's end (but it does
receive the end of a run that published no step).

Repeated steps: the queue is kept in step order and the analytics takes steps in increasing
order, as a reader of a file would find its slices. A step index published again, or a step
published after a later one (a time index that goes backwards), is placed as follows:

- the analytics has not taken that step, nor any later one: the step is queued in its place; if
  an earlier publication of it is waiting, the new one replaces it (its keys are released, the
  new ones queued in its place, with no flow-control wait), as a file's slice is overwritten;
- otherwise (the analytics took that step or a later one): the new publication is dropped (its
  keys released) with a warning naming the step; the Bridge does not fail.
"""

from __future__ import annotations

import asyncio
import logging
from collections import Counter, deque
from dataclasses import dataclass, field
from typing import Any

from distributed.diagnostics.plugin import SchedulerPlugin

from . import _dask_internals

logger = logging.getLogger(__name__)

PLUGIN_NAME = "deisa"


@dataclass
class _Stream:
    """State of one array's stream on the scheduler."""

    name: str
    run: str | None = None
    meta: dict[str, Any] | None = None
    buffer_nb: int | None = None
    on_full: str = "block"
    dropped: list[int] = field(default_factory=list)
    queue: deque[dict[str, Any]] = field(default_factory=deque)
    changed: asyncio.Condition = field(default_factory=asyncio.Condition)
    closed: bool = False
    published: int = 0
    taken: int = 0
    last_taken: int | None = None  # the latest step the analytics took: later ones only queue

    @property
    def holder(self) -> str:
        return f"deisa-stream-{self.name}-{self.run}"

    def queued_steps(self) -> int:
        return sum(1 for record in self.queue if record["status"] == "OK")

    @property
    def finished(self) -> bool:
        """Closed with no step left to take (only the end marker may be left)."""
        return self.closed and self.queued_steps() == 0

    @property
    def consumed(self) -> bool:
        """Finished, and its steps went to an Adapter: its end is stale for a new reader."""
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


class StreamExtension(SchedulerPlugin):
    """Holds the steps published by Bridges until Adapters take them. See module docstring."""

    name = PLUGIN_NAME
    idempotent = True

    def __init__(self) -> None:
        self.streams: dict[str, _Stream] = {}
        self.calls: Counter[str] = Counter()
        self.scheduler: Any = None

    async def start(self, scheduler: Any) -> None:
        self.scheduler = scheduler
        handlers = {
            "deisa_workers": self.workers,
            "deisa_open": self.open_stream,
            "deisa_publish": self.publish_step,
            "deisa_close": self.close_stream,
            "deisa_meta": self.array_meta,
            "deisa_get": self.get_step,
            "deisa_stats": self.stats,
        }
        scheduler.handlers.update(handlers)
        logger.info("deisa stream extension installed on %s", scheduler.address)

    def _stream(self, name: str) -> _Stream:
        if name not in self.streams:
            self.streams[name] = _Stream(name)
        return self.streams[name]

    def workers(self) -> list[tuple[str, int]]:
        self.calls["workers"] += 1
        return sorted((ws.address, ws.nthreads) for ws in self.scheduler.workers.values())

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
        await stream.notify()
        return {"status": "OK"}

    async def publish_step(
        self,
        name: str,
        run: str,
        step: int,
        blocks: list[tuple[Any, str, int]],
        timeout: float | None = None,
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
        record = {
            "status": "OK",
            "step": step,
            "keys": keys,
            "workers": [worker for _, worker, _ in blocks],
            "run": run,
        }
        if stream.last_taken is not None and step <= stream.last_taken:
            return self._drop_late(stream, record)
        waiting = [i for i, r in enumerate(stream.queue) if r.get("step") == step]
        if waiting:
            return await self._replace(stream, waiting[0], record)
        limit = stream.buffer_nb
        if limit and stream.on_full == "drop_oldest":
            while stream.queued_steps() >= limit:
                self._drop_oldest(stream)
        elif limit:
            has_room = await stream.wait_for(lambda: stream.queued_steps() < limit, timeout)
            if not has_room:
                _dask_internals.release_keys(self.scheduler, keys, stream.holder)
                return {
                    "status": "timeout",
                    "message": f"the analytics took no step of {name!r} for {timeout} s while "
                    f"buffer_nb={limit} steps were waiting (taken so far: {stream.taken}); "
                    f"step {step} was not delivered",
                }
            if stream.last_taken is not None and step <= stream.last_taken:
                return self._drop_late(stream, record)  # taken past it while waiting
        # in step order (an index that went backwards goes before the later steps still queued)
        later = [i for i, r in enumerate(stream.queue) if r["status"] == "OK" and r["step"] > step]
        stream.queue.insert(later[0] if later else len(stream.queue), record)
        stream.published += 1
        await stream.notify()
        return {"status": "OK"}

    async def _replace(self, stream: _Stream, at: int, record: dict[str, Any]) -> dict[str, Any]:
        """A step published again before the analytics took it: the new data takes its place."""
        old = stream.queue[at]
        stream.queue[at] = record
        released = [key for key in old["keys"] if key not in record["keys"]]
        _dask_internals.release_keys(self.scheduler, released, stream.holder)
        logger.info(
            "deisa: step %d of %r published again before the analytics took it: the new data "
            "replaces it",
            record["step"],
            stream.name,
        )
        await stream.notify()
        return {"status": "OK", "replaced": True}

    def _drop_late(self, stream: _Stream, record: dict[str, Any]) -> dict[str, Any]:
        """A step the analytics has already passed (taken it, or a later one): drop the new one."""
        _dask_internals.release_keys(self.scheduler, record["keys"], stream.holder)
        message = (
            f"step {record['step']} of {stream.name!r} was published after the analytics had "
            f"taken step {stream.last_taken}: this publication was dropped (a step the "
            "analytics has passed cannot be replaced)"
        )
        logger.warning("deisa: %s", message)
        return {"status": "dropped", "message": message}

    def _drop_oldest(self, stream: _Stream) -> None:
        """Release the oldest waiting step so its memory is freed (``on_full="drop_oldest"``)."""
        for i, record in enumerate(stream.queue):
            if record["status"] == "OK":
                del stream.queue[i]
                _dask_internals.release_keys(self.scheduler, record["keys"], stream.holder)
                stream.dropped.append(record["step"])
                logger.warning(
                    "deisa: dropped step %d of %r: buffer_nb=%d steps were waiting for the "
                    "analytics (on_full='drop_oldest'; %d step(s) dropped so far)",
                    record["step"],
                    stream.name,
                    stream.buffer_nb,
                    len(stream.dropped),
                )
                return

    async def close_stream(self, name: str, run: str, nsteps: int) -> dict[str, Any]:
        self.calls["close"] += 1
        stream = self.streams.get(name)
        if stream is None or stream.run != run:
            return {"status": "error", "message": f"array {name!r} was not opened by run {run}"}
        stream.queue.append({"status": "end", "nsteps": nsteps, "run": run})
        stream.closed = True
        await stream.notify()
        return {"status": "OK"}

    async def array_meta(self, name: str, timeout: float | None = None) -> dict[str, Any]:
        self.calls["meta"] += 1
        stream = self._stream(name)
        if not await stream.wait_for(
            lambda: stream.meta is not None and not stream.consumed, timeout
        ):
            return {"status": "timeout"}
        return {"status": "OK", "meta": stream.meta, "run": stream.run}

    async def get_step(
        self, name: str, client: str, timeout: float | None = None, run: str | None = None
    ) -> dict[str, Any]:
        self.calls["get"] += 1
        stream = self._stream(name)

        def replaced() -> bool:
            return run is not None and stream.run != run

        def ready() -> bool:
            if run is None and stream.consumed:
                return False  # a fresh reader waits for the next run, not a stale end marker
            return bool(stream.queue) or replaced()

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
        record = stream.queue.popleft()
        if record["status"] == "end":
            self._retire(stream)  # in place: readers of the next run may already wait on it
        else:
            _dask_internals.transfer_keys(self.scheduler, record["keys"], stream.holder, client)
            stream.taken += 1
            stream.last_taken = record["step"]
            record = {**record, "meta": stream.meta, "nthreads": self._nthreads(record)}
        await stream.notify()
        return record

    def _retire(self, stream: _Stream) -> None:
        """Forget a finished run: its holder and records go, the stream object stays."""
        if stream.run is not None:
            _dask_internals.forget_holder(self.scheduler, stream.holder)
        stream.run = stream.meta = None
        stream.queue.clear()
        stream.closed, stream.published, stream.taken = False, 0, 0
        stream.dropped, stream.last_taken = [], None

    def _nthreads(self, record: dict[str, Any]) -> dict[str, int]:
        """Threads of the workers holding a step's blocks (the splitter sizes partitions by it)."""
        workers = self.scheduler.workers
        return {w: workers[w].nthreads for w in set(record["workers"]) if w in workers}

    def stats(self) -> dict[str, Any]:
        return {
            "calls": dict(self.calls),
            "streams": {
                name: {
                    "run": s.run,
                    "published": s.published,
                    "taken": s.taken,
                    "queued": s.queued_steps(),
                    "closed": s.closed,
                    "dropped": list(s.dropped),
                }
                for name, s in self.streams.items()
            },
        }
