"""The simulation's side of a stream: the routes ``deisa_open``, ``deisa_publish`` and
``deisa_close`` (runs, flow control, repeated, late and lost steps: see :mod:`._streams`).

Runs in the Dask scheduler process, on its event loop. Imports :mod:`._state`, :mod:`._streams`,
:mod:`deisa.wire` and :mod:`deisa._dask_internals`.
"""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from typing import Any

from .. import _dask_internals
from ..wire import PROTOCOL, Reply, Status, error, ok
from ._state import TRIM_EVERY, StreamState
from ._streams import End, Lost, Reader, Step, Stream, insert

logger = logging.getLogger(__name__)

PUBLICATION_FIELDS = frozenset(
    ("name", "run", "step", "blocks", "timeout", "contract", "layout", "attrs")
)
"""The fields of one publication of ``deisa_publish_many``: ``deisa_publish``'s arguments."""


class Publishing(StreamState):
    """A Bridge's rank 0 opens an array, publishes its steps one message each, and closes it."""

    async def open_stream(
        self,
        name: str,
        run: str,
        meta: dict[str, Any],
        buffer_nb: int | None,
        on_full: str = "block",
        consumers: int = 1,
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
        stream.on_full, stream.consumers = on_full, max(1, int(consumers))
        for reader in stream.readers.values():
            reader.run = run  # those waiting for the next run
        stream.expect(run)
        await stream.notify()
        # the array's contract, checked against it, applies from the run's first step
        return ok(protocol=PROTOCOL, **self.contracts.opened(name, meta))

    async def publish_step(
        self,
        name: str,
        run: str,
        step: int,
        blocks: list[tuple[Any, str, int]],
        timeout: float | None = None,
        contract: dict[str, Any] | None = None,
        layout: dict[str, Any] | None = None,
        attrs: dict[str, Any] | None = None,
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
        workers = [worker for _, worker, _ in blocks]
        record = Step(step, keys, workers, run, contract=contract, layout=layout, attrs=attrs)
        malformed = _malformed_layout(layout, len(keys)) or _malformed_attrs(attrs)
        if malformed is not None:  # refused: what the ranks sent is freed
            _dask_internals.release_keys(self.scheduler, keys, stream.holder)
            return error(f"step {step} of {name!r}: {malformed}; the step was not published")
        if departed:  # gone between the ranks' sends and this call: free what the others hold
            return await self._lost_on_arrival(stream, record, departed)
        if stream.last_taken is not None and step <= stream.last_taken:
            return self._drop_late(stream, record)
        if step in stream.pending:
            return await self._replace(stream, stream.pending[step], record)
        refused = await self._make_room(stream, record, timeout)
        if refused is not None:
            return refused
        if stream.attrs_carried:  # those of steps dropped or lost before it
            record.attrs = {**stream.attrs_carried, **(record.attrs or {})}
            stream.attrs_carried = {}
        stream.some_reader(run)
        for reader in stream.readers.values():
            insert(reader.queue, record)  # in place of its lost marker, if it was lost before
        stream.lost = [(lost, worker) for lost, worker in stream.lost if lost != step]
        record.pending = len(stream.readers)
        stream.pending[step] = record
        stream.published += 1
        nbytes = sum(n for *_, n in present)
        self.totals.setdefault(name, Counter()).update(published=1, bytes=nbytes)
        self._trim(spans=self.calls["publish"] % TRIM_EVERY == 0)
        await stream.notify()
        return ok()

    async def publish_many(self, publications: list[dict[str, Any]]) -> Reply:
        """``deisa_publish`` of several steps in one message (a step's arrays, from a rank 0
        that published them together): each publication registered as its own call would be,
        concurrently (they are of distinct arrays), and ``ok(replies=[...])``, one reply each,
        in order. A publication that is not a mapping of ``deisa_publish``'s arguments gets an
        error reply naming what is wrong; the others are registered all the same."""
        self.calls["publish_many"] += 1
        if not isinstance(publications, (list, tuple)):  # msgpack gives a list as a tuple
            return error(f"publications must be a list, not {type(publications).__name__}")

        async def one(publication: Any) -> Reply:
            if not isinstance(publication, dict):
                return error(f"a publication is a mapping, not {type(publication).__name__}")
            unknown = sorted(set(publication) - PUBLICATION_FIELDS, key=str)
            missing = sorted({"name", "run", "step", "blocks"} - set(publication))
            if unknown or missing:
                what = f"unknown fields {unknown}" if unknown else f"missing fields {missing}"
                return error(f"publication of {publication.get('name')!r}: {what}")
            return await self.publish_step(**publication)

        return ok(replies=list(await asyncio.gather(*(one(p) for p in publications))))

    async def _make_room(self, stream: Stream, record: Step, timeout: float | None) -> Reply | None:
        """Flow control: room in ``stream``'s buffer for ``record`` (dropping the oldest step, or
        waiting up to ``timeout``), or the reply that refuses it."""
        limit, step, keys = stream.buffer_nb, record.step, record.keys
        if limit and stream.on_full == "drop_oldest":
            while stream.queued_steps() >= limit:
                self._drop_oldest(stream)
        elif limit:
            has_room = await stream.wait_for(lambda: stream.queued_steps() < limit, timeout)
            if not has_room:
                _dask_internals.release_keys(self.scheduler, keys, stream.holder)
                slowest = max(stream.readers.values(), key=Reader.queued_steps)
                attached = sum(1 for r in stream.readers.values() if not r.waiting)
                if not slowest.waiting:
                    who = f"slowest reader: {slowest.name}"
                elif attached:
                    who = (
                        f"{stream.consumers - attached} of the consumers={stream.consumers} "
                        "expected have not attached"
                    )
                elif stream.taken:  # they took steps, then detached (closed, or their client left)
                    who = "the consumers that took steps have detached: none is attached now"
                else:
                    who = "no consumer is attached"
                pressure = self.pressure()
                why = (
                    "; the analytics' tasks wait for memory: "
                    + "; ".join(pressure)
                    + " (raise the workers' memory limit, deisa-run --memory-limit, or lower "
                    "buffer_nb: docs/reliability.md)"
                    if pressure
                    else ""
                )
                return error(
                    f"the analytics took no step of {stream.name!r} for {timeout} s while "
                    f"buffer_nb={limit} steps were waiting (taken so far: {stream.taken}); "
                    f"step {step} was not delivered ({who}){why}",
                    Status.TIMEOUT,
                    memory=pressure,
                )
            if stream.last_taken is not None and step <= stream.last_taken:
                return self._drop_late(stream, record)  # taken past it while waiting
            departed = sorted({w for w in record.workers if w not in self.scheduler.workers})
            if departed:  # left while it waited for room
                return await self._lost_on_arrival(stream, record, departed)
        return None

    async def _lost_on_arrival(self, stream: Stream, record: Step, departed: list[str]) -> Reply:
        """A step with blocks on workers that left: released, and lost for every reader."""
        _dask_internals.release_keys(self.scheduler, record.keys, stream.holder)
        _carry_attrs(stream, record)
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
        old.contract, old.layout = new.contract, new.layout
        if new.attrs:  # those of the first publication too: the analytics' view misses none
            old.attrs = {**(old.attrs or {}), **new.attrs}
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
        _carry_attrs(stream, record)
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
        if oldest.attrs and stream.pending:  # the next step to take brings them
            following = stream.pending[min(stream.pending)]
            following.attrs = {**oldest.attrs, **(following.attrs or {})}
        else:
            _carry_attrs(stream, oldest)
        stream.dropped.append(oldest.step)
        stream.ndropped += 1
        logger.warning(
            "deisa: dropped step %d of %r: buffer_nb=%d steps were waiting for the "
            "analytics (on_full='drop_oldest'; %d step(s) dropped so far)",
            oldest.step,
            stream.name,
            stream.buffer_nb,
            stream.ndropped,
        )

    async def close_stream(
        self,
        name: str,
        run: str,
        nsteps: int,
        held_s: float = 0.0,
        open_s: float = 0.0,
        transports: dict[str, int] | None = None,
        pool: dict[str, int] | None = None,
    ) -> Reply:
        """End ``name``'s stream after ``nsteps`` steps; ``held_s`` of rank 0's ``open_s``
        seconds with its Bridge went to flow control (totals ``held_ms`` and ``open_ms``);
        ``transports``: how many ranks sent their blocks by each way (``"shared memory"``,
        ``"tcp"``, ...: totals ``ranks by <way>``); ``pool``: the ranks' warm pools of shared
        memory, in MiB and ranks (totals ``pool <figure>``)."""
        self.calls["close"] += 1
        stream = self.streams.get(name)
        if stream is None or stream.run != run:
            return error(f"array {name!r} was not opened by run {run}")
        if stream.closed:  # the same close again (rank 0 repeats a call its relay left unanswered)
            return ok()
        ms = {"held_ms": round(1000 * held_s), "open_ms": round(1000 * open_s)}
        self.totals.setdefault(name, Counter()).update(ms)
        for way, ranks in (transports or {}).items():
            self.totals[name][f"ranks by {way}"] = int(ranks)
        for figure, value in (pool or {}).items():
            self.totals[name][f"pool {figure}"] = int(value)
        stream.some_reader(run)
        for reader in stream.readers.values():
            reader.queue.append(End(nsteps, run))
        stream.closed = True
        await stream.notify()
        return ok()


def _malformed_layout(layout: Any, nkeys: int) -> str | None:
    """What is wrong with a step's ``layout`` (wire form), or None: checked in O(1), the rest
    (boxes inside the shape...) by the analytics, which builds the step from it."""
    if layout is None:
        return None
    if not isinstance(layout, dict) or not {"shape", "boxes", "parcels"} <= set(layout):
        return (
            f"layout {layout!r:.200} is not a step layout (a dict of shape, boxes and parcels: "
            "deisa.wire.layout.StepLayout.to_wire)"
        )
    parcels = layout["parcels"]
    if not isinstance(parcels, (list, tuple)) or len(parcels) != nkeys:
        return f"the layout's parcels {parcels!r:.200} do not name one box count per key ({nkeys})"
    return None


def _carry_attrs(stream: Stream, record: Step) -> None:
    """The attributes of ``record``, a step no reader will take: the next step brings them."""
    if record.attrs:
        stream.attrs_carried.update(record.attrs)


def _malformed_attrs(attrs: Any) -> str | None:
    """What is wrong with a step's ``attrs``, or None: a dict with string keys (its values came
    as the wire decodes them: numbers, strings, lists)."""
    if attrs is None:
        return None
    if not isinstance(attrs, dict) or not all(isinstance(k, str) for k in attrs):
        return f"attrs {attrs!r:.200} are not a dict of attributes by name"
    return None
