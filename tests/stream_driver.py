"""Drive the scheduler extension in process as the other two sides do: rank 0 of a Bridge
(:class:`Rank0`) and the descriptor of an Adapter (:func:`get`, :func:`take`), on a
``gen_cluster`` (a real scheduler, two real workers, the test's client); and check what is left
(:func:`until_released`)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from distributed import Client
from distributed.utils_test import async_poll_for

from deisa import _dask_internals
from deisa.scheduler._streams import Lost, Step
from deisa.scheduler.extension import EXTENSION_NAME, StreamExtension
from deisa.wire import status, step_key_name

# deadlines for things that must happen: generous, a loaded machine still meets them
WAIT = 30.0
# deadlines that are meant to expire (a reader or a publisher that must be told "timeout")
EXPIRE = 0.3

META = {"dtype": "<f8", "shape": [4, 3], "chunks": [[2, 2], [3]]}


class Rank0:
    """Publishes one array of one run as rank 0 of a two-rank Bridge does: each block is sent
    straight to its worker (rank ``i`` to worker ``i``), then one call per step."""

    def __init__(
        self, c: Client, workers: list[Any], name: str, run: str, revision: int = 0
    ) -> None:
        self.c, self.workers, self.name, self.run = c, workers, name, run
        self.revision = revision  # > 0: a step published again, under new keys

    async def open(
        self, buffer_nb: int | None = None, on_full: str = "block", consumers: int = 1
    ) -> dict[str, Any]:
        return await self.c.scheduler.deisa_open(
            name=self.name,
            run=self.run,
            meta={**META, "run": self.run},
            buffer_nb=buffer_nb,
            on_full=on_full,
            consumers=consumers,
        )

    def keys(self, step: int) -> list[tuple[str, int, int]]:
        name = step_key_name(self.run, self.name, step, self.revision)
        return [(name, i, 0) for i in range(2)]

    async def send(self, step: int) -> list[tuple[Any, str, int]]:
        """Put the step's blocks on the workers; the scheduler does not know them yet."""
        blocks = []
        for i, (key, worker) in enumerate(zip(self.keys(step), self.workers, strict=True)):
            nbytes = await _dask_internals.send_blocks_to_worker(
                self.c.rpc, worker.address, {key: block(step, i)}
            )
            blocks.append((key, worker.address, nbytes[key]))
        return blocks

    async def publish(self, step: int, timeout: float | None = WAIT) -> dict[str, Any]:
        blocks = await self.send(step)
        return await self.c.scheduler.deisa_publish(
            name=self.name, run=self.run, step=step, blocks=blocks, timeout=timeout
        )

    async def close(self, nsteps: int, **kwargs: float) -> dict[str, Any]:
        return await self.c.scheduler.deisa_close(
            name=self.name, run=self.run, nsteps=nsteps, **kwargs
        )


async def opened(
    c: Client, s: Any, workers: list[Any], *, publish: Sequence[int] = (), **open_kwargs: Any
) -> tuple[StreamExtension, Rank0]:
    """The extension installed and array ``"t"`` opened by run ``"r1"`` (``open_kwargs``: those
    of :meth:`Rank0.open`), its steps ``publish`` published; the extension and the publisher."""
    ext = await install(c, s)
    rank0 = Rank0(c, workers, "t", "r1")
    await rank0.open(**open_kwargs)
    for step in publish:
        await rank0.publish(step)
    return ext, rank0


def fields(reply: dict[str, Any], *names: str) -> tuple[Any, ...]:
    """The status of ``reply`` and its fields ``names`` (its message is for a person)."""
    return (status(reply), *(reply[name] for name in names))


def lists(value: Any) -> Any:
    """``value`` with the tuples that msgpack made of its lists turned back into lists."""
    return [lists(v) for v in value] if isinstance(value, (list, tuple)) else value


def block(step: int, i: int) -> np.ndarray:
    return np.full((2, 3), 10.0 * step + i)


async def install(c: Client, s: Any) -> StreamExtension:
    await c.register_plugin(StreamExtension())
    return s.plugins[EXTENSION_NAME]


async def get(
    c: Client,
    name: str,
    run: str | None = None,
    timeout: float | None = WAIT,
    consumer: str | None = None,
    group: str | None = None,
) -> dict[str, Any]:
    """One ``deisa_get``, as the descriptor of an Adapter makes it (the consumer: by default
    one named after the client)."""
    return await c.scheduler.deisa_get(
        name=name, client=c.id, timeout=timeout, run=run, consumer=consumer, group=group
    )


def queue(ext: StreamExtension, name: str, reader: str | None = None) -> list[Any]:
    """What ``reader`` (by default the only one, attached or not) has to take: step numbers,
    ``("lost", step)`` for the lost ones, then ``"end"``."""
    readers = ext.streams[name].readers
    if reader is None:
        if not readers:
            return []
        assert len(readers) == 1, list(readers)
        reader = next(iter(readers))
    return [
        e.step if isinstance(e, Step) else ("lost", e.step) if isinstance(e, Lost) else "end"
        for e in readers[reader].queue
    ]


def holder(name: str, run: str) -> str:
    return f"deisa-stream-{name}-{run}"


def wanted_by(s: Any, key: Any) -> set[str]:
    """The clients (real or pseudo) that keep ``key`` alive on the scheduler."""
    return {cs.client_key for cs in s.tasks[key].who_wants or ()}


def held(s: Any, client: str) -> set[Any]:
    """The keys that ``client`` (real or pseudo) keeps alive."""
    cs = s.clients.get(client)
    return {ts.key for ts in cs.wants_what} if cs is not None else set()


def run_keys(s: Any, workers: list[Any], run: str) -> set[Any]:
    """Every key of ``run`` the scheduler tracks or a worker stores."""
    prefix = f"deisa-{run}-"
    stored = {key for w in workers for key in w.data}
    return {key for key in set(s.tasks) | stored if str(key[0]).startswith(prefix)}


async def take(c: Client, reply: dict[str, Any]) -> list[np.ndarray]:
    """What the Adapter does with a step record: futures on the keys, then the data."""
    futures = [_dask_internals.future_in_memory(key, c) for key in reply["keys"]]
    return await c.gather(futures)


async def until_released(s: Any, workers: list[Any], run: str) -> None:
    """Wait until nothing of ``run`` is left on the scheduler or the workers (the release of
    a dropped future travels on the client's batched stream)."""

    def left() -> None:
        raise AssertionError(run_keys(s, workers, run))

    await async_poll_for(lambda: not run_keys(s, workers, run), WAIT, left, period=0.01)


def moving_meta(ndim: int, joined_axis: int | None = None, dtype: str = "<f8") -> dict[str, Any]:
    """A moving array's metadata, as the Bridge opens it (docs/moving-data.md)."""
    return {"dtype": dtype, "moving": True, "ndim": ndim, "joined_axis": joined_axis}


Boxes = Sequence[tuple[Sequence[int], np.ndarray]]


class MovingRank0:
    """Publishes one moving array as rank 0 of a Bridge does: each rank's boxes of a step go in
    one parcel (the boxes one after another, each in C order; a rank with one box sends its
    block as it is) straight to its worker (rank ``i`` to ``workers[i % len(workers)]``); a rank
    with no element this step sends nothing; then one ``deisa_publish`` with the layout."""

    def __init__(self, c: Client, workers: list[Any], name: str, meta: dict[str, Any]) -> None:
        self.c, self.workers, self.name, self.meta, self.run = c, workers, name, meta, "r1"

    async def open(self, **kwargs: Any) -> dict[str, Any]:
        return await self.c.scheduler.deisa_open(
            name=self.name, run=self.run, meta=self.meta, buffer_nb=None, **kwargs
        )

    async def publish(
        self, step: int, ranks: Sequence[Boxes], shape: Sequence[int] | None = None
    ) -> dict[str, Any]:
        """Publish ``step``: ``ranks[i]``, rank i's boxes (start, block); ``shape`` the step's
        global shape (``None``: a joined array's, from the counts in rank order)."""
        from deisa.wire.layout import Box, StepLayout

        sending = [(i, boxes) for i, boxes in enumerate(ranks) if sum(b.size for _, b in boxes)]
        if shape is None:
            axis = self.meta["joined_axis"]
            layout = StepLayout.joined(axis, [[b.shape for _, b in boxes] for _, boxes in sending])
        else:
            found = tuple(Box(s, b.shape) for _, boxes in sending for s, b in boxes)
            layout = StepLayout(tuple(shape), found, tuple(len(boxes) for _, boxes in sending))
        blocks = []
        for i, boxes in sending:
            key = (step_key_name(self.run, self.name, step, 0), i)
            parcel = (
                boxes[0][1] if len(boxes) == 1 else np.concatenate([b.ravel() for _, b in boxes])
            )
            worker = self.workers[i % len(self.workers)].address
            nbytes = await _dask_internals.send_blocks_to_worker(self.c.rpc, worker, {key: parcel})
            blocks.append((key, worker, nbytes[key]))
        return await self.c.scheduler.deisa_publish(
            name=self.name, run=self.run, step=step, blocks=blocks, timeout=WAIT,
            layout=layout.to_wire(),
        )  # fmt: skip

    async def close(self, nsteps: int) -> dict[str, Any]:
        return await self.c.scheduler.deisa_close(name=self.name, run=self.run, nsteps=nsteps)
