"""The state the stream routes share, and the key transitions more than one of them makes.

:class:`StreamState` holds the streams by array name (their records: :mod:`._streams`), the
consumers and the clients that own their keys, and the counters of ``deisa_stats``. The route
groups (:mod:`.workers`, :mod:`.consumers`, :mod:`.publishing`, :mod:`.taking`) extend it, and
:class:`~.extension.StreamExtension` joins them into one scheduler extension. The transitions here
(a step lost, a step one reader fewer has to take, a run retired) are the only places, with
the routes themselves, where a stream lets go of keys.

Runs in the Dask scheduler process, on its event loop. Imports :mod:`._streams`, the steering
and contracts stores, :mod:`deisa.wire` and :mod:`deisa._dask_internals`.
"""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from typing import Any

from .. import _dask_internals
from ._streams import Lost, Step, Stream, insert
from .contracts import ContractStore
from .steering import SteeringValues

# this module's own logger (each module of the extension has its own, under deisa.scheduler)
logger = logging.getLogger(__name__)

TRIM_EVERY = 100
"""Every so many steps published, the scheduler forgets what distributed keeps per
computation (:meth:`StreamState._trim`): a long run's memory stays flat."""
SPANS_KEPT = 100
"""The newest computations (spans) whose records the scheduler keeps, whatever their age."""
SPANS_GRACE_S = 15.0
"""How long a finished computation's record is kept (a worker's heartbeat may still report it:
distributed's heartbeats come every 0.5 s on a few workers, 6 s on 1,000); beyond the newest
:data:`SPANS_KEPT` the records held are the steps of this many seconds (60 s before: 240
computations at 4 steps a second, 8 KiB each, with their task groups)."""
MIB = 2**20

KEY_SPLIT_CACHE = 2_000
"""The key prefixes dask may cache (``key_split``: one per key name, so one per key of a step's
analytics) before the extension empties it: about 0.7 MiB (10,000 before issue 56: 3.4 MiB, the
sawtooth a run of a few hundred steps read as growth)."""


def mib(nbytes: float) -> str:
    """``nbytes`` for a person: ``"118 MiB"``."""
    return f"{nbytes / MIB:.0f} MiB"


class StreamState:
    """The streams of one scheduler and what their routes share; see the module docstring.

    Attributes
    ----------
    streams : dict of str to Stream
        One record per array name, kept across runs.
    calls : Counter
        Calls per route, as ``deisa_stats`` reports them.
    totals : dict of str to Counter
        Per array, never reset by a new run: steps published and taken, bytes published,
        flow-control and open milliseconds.
    consumers : dict of str to str
        Consumer id to the client that owns the keys it takes.
    scheduler : distributed.Scheduler
        Set when the extension starts.
    steering, contracts
        The stores of steering values and contracts, installed with the routes.
    """

    steering: SteeringValues
    contracts: ContractStore

    def __init__(self) -> None:
        self.streams: dict[str, Stream] = {}
        self.calls: Counter[str] = Counter()
        # per array, never reset by a new run: steps published and taken, bytes published
        self.totals: dict[str, Counter[str]] = {}
        self.scheduler: Any = None
        self.consumers: dict[str, str] = {}  # consumer id -> the client that owns its keys
        self._tasks: set[asyncio.Future[None]] = set()
        self._workers_changed: asyncio.Condition = asyncio.Condition()

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

    def pressure(self) -> list[str]:
        """One line per worker paused for memory (which worker, its use, its limit), or
        spilling to disk for it; ``[]`` when none is."""
        lines = []
        for ws in self.scheduler.workers.values():
            memory, limit = ws.memory, ws.memory_limit
            of_limit = f"of its memory limit of {mib(limit)}" if limit else "(no memory limit)"
            if ws.status.name == "paused":
                lines.append(
                    f"worker {ws.address} is paused for memory: {mib(memory.process)} in use "
                    f"{of_limit}; its tasks wait until it frees some"
                )
            elif memory.spilled:
                lines.append(
                    f"worker {ws.address} is spilling to disk for memory: {mib(memory.spilled)} "
                    f"spilled, {mib(memory.process)} in use {of_limit}"
                )
        return lines

    def held(self) -> dict[str, int]:
        """How many records the extension holds, summed over its streams: what a long run
        must keep bounded (``buffer_nb`` steps a reader, the readers, the last drops), never
        one per step taken (benchmarks and tests: ``bench.scheduler_memory``)."""
        streams = self.streams.values()
        return {
            "streams": len(self.streams),
            "steps_pending": sum(len(s.pending) for s in streams),
            "layouts_pending": sum(
                s.layout is not None for t in streams for s in t.pending.values()
            ),
            "queued_entries": sum(len(r.queue) for s in streams for r in s.readers.values()),
            "readers": sum(len(s.readers) for s in streams),
            "deferred": sum(len(s.deferred) for s in streams),
            "dropped_listed": sum(len(s.dropped) for s in streams),
            "lost_listed": sum(len(s.lost) for s in streams),
            "consumers": len(self.consumers),
            "tasks": len(self._tasks),
        }

    def _trim(self, spans: bool = True) -> None:
        """Forget what distributed would keep for the life of the scheduler, one record per step:
        dask's cache of key prefixes once it holds :data:`KEY_SPLIT_CACHE` entries (checked at
        every step published: a step's analytics adds one per key, hundreds for a step of many
        boxes, so that checked every :data:`TRIM_EVERY` steps it reached dask's own bound of
        100,000, 30 MiB), and with ``spans`` (every :data:`TRIM_EVERY` steps published) the
        finished computations' spans and their task groups. The extension's own records of a
        run are bounded by ``buffer_nb`` and the readers."""
        forgotten = (
            _dask_internals.forget_finished_spans(self.scheduler, SPANS_KEPT, SPANS_GRACE_S)
            if spans
            else 0
        )
        emptied = _dask_internals.trim_key_split_cache(KEY_SPLIT_CACHE)
        if forgotten or emptied:
            logger.debug(
                "deisa: forgot %d finished span(s), emptied key cache: %s", forgotten, emptied
            )

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

    def _untake(self, stream: Stream, step: Step) -> None:
        """One reader fewer has to take ``step``; the last one lets the stream's keys go."""
        step.pending -= 1
        if step.pending == 0:
            stream.pending.pop(step.step, None)
            _dask_internals.release_keys(self.scheduler, step.keys, stream.holder)

    def _retire(self, stream: Stream) -> None:
        """Forget a finished run: its holder, records and readers go, the stream object and
        the consumers waiting for the next run stay."""
        if stream.run is not None:
            _dask_internals.forget_holder(self.scheduler, stream.holder)
        for name, reader in list(stream.readers.items()):
            if (reader.run is not None and reader.run == stream.run) or reader.waiting:
                del stream.readers[name]
            else:
                reader.queue.clear()
        stream.run = stream.meta = None
        stream.pending.clear()
        stream.deferred.clear()
        stream.closed, stream.published, stream.taken = False, 0, 0
        stream.dropped.clear()
        stream.ndropped, stream.lost, stream.last_taken = 0, [], None
