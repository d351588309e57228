"""The analytics side: rebuild global dask arrays from the blocks the Bridges published.

>>> gtemp = Adapter(client)["gtemp"]          # doctest: +SKIP
>>> field = gtemp[3, :, :]                     # dask Array (NX, NY) of step 3  # doctest: +SKIP
>>> for step, field in gtemp.items(): ...      # every step until the end  # doctest: +SKIP

Steps arrive in order, one scheduler message per step (see :mod:`deisa.extension`). Taking a
step out of the scheduler's queue hands its keys to this client and frees room for bridges
blocked by ``buffer_nb``. An array for one step is built straight from the blocks' own keys: it
holds the futures and adds no task, and the data lives as long as the array (or anything
computed from it) does.
"""

from __future__ import annotations

import logging
import weakref
from collections.abc import Iterator
from typing import Any

import dask.array as da
import numpy as np
from distributed import Client, Future

from . import _block_locations, _dask_internals
from .extension import StreamExtension

logger = logging.getLogger(__name__)


class EndOfStreamError(IndexError):
    """A selection asks for steps past the end of a closed stream."""


class StepNotAvailableError(KeyError):
    """A step was never published (filtered out) or was already released."""

    def __str__(self) -> str:  # KeyError quotes its message otherwise
        return str(self.args[0])


class Adapter:
    """Access, from a Dask client, the arrays that simulation Bridges publish.

    Parameters
    ----------
    client
        A connected, synchronous :class:`distributed.Client`.
    timeout
        Seconds to wait for a step (or the array's description) before raising
        :class:`TimeoutError` saying what is missing. ``None``: wait forever.

    Examples
    --------
    >>> client = Client(scheduler_file="scheduler.json")  # doctest: +SKIP
    >>> gtemp = Adapter(client)["gtemp"]  # doctest: +SKIP
    >>> gtemp[0, :, :].mean().compute()  # doctest: +SKIP
    """

    def __init__(self, client: Client, *, timeout: float | None = 60.0) -> None:
        self.client = client
        self.timeout = timeout
        client.register_plugin(StreamExtension())
        self._descriptors: dict[str, ArrayDescriptor] = {}

    def __getitem__(self, name: str) -> ArrayDescriptor:
        """The descriptor of array ``name``; cheap, it contacts nobody until subscripted."""
        if name not in self._descriptors:
            self._descriptors[name] = ArrayDescriptor(self, name)
        return self._descriptors[name]

    def stats(self) -> dict[str, Any]:
        """Scheduler-side counters: calls per route, steps published, taken and queued."""
        return self._request("deisa_stats")

    def _request(self, route: str, **kwargs: Any) -> dict[str, Any]:
        reply: dict[str, Any] = self.client.sync(getattr(self.client.scheduler, route), **kwargs)
        return reply


class ArrayDescriptor:
    """One published array, indexed as ``descriptor[t, x, y]`` with a leading time axis.

    The time index selects published step numbers: an integer, a slice or ``range`` of
    steps (open-ended and negative bounds wait for the end of the stream), a list of steps,
    or ``...``. The remaining indices are ordinary numpy/dask indices on the spatial axes.
    An integer step gives a spatial array with no tasks in its graph; several steps are
    stacked along a new leading axis by :func:`dask.array.stack`.

    Steps are taken out of the scheduler in order. Steps taken to reach a later one but not
    asked for yet stay cached here (holding their data) until asked for.
    """

    def __init__(self, adapter: Adapter, name: str) -> None:
        self.adapter = adapter
        self.name = name
        self._meta: dict[str, Any] | None = None
        self._cached: dict[int, dict[Any, Future]] = {}
        self._handed: dict[int, dict[Any, weakref.ref[Future]]] = {}
        self._seen: list[int] = []
        self._ended = False
        self._run: str | None = None  # the simulation run whose steps this reads

    # -- metadata ----------------------------------------------------------------------------

    @property
    def meta(self) -> dict[str, Any]:
        if self._meta is None:
            reply = self.adapter._request(
                "deisa_meta", name=self.name, timeout=self.adapter.timeout
            )
            if reply["status"] != "OK":
                raise TimeoutError(
                    f"no simulation has opened array {self.name!r} within {self.adapter.timeout} s"
                )
            self._meta = reply["meta"]
        return self._meta

    @property
    def dtype(self) -> np.dtype:
        return np.dtype(self.meta["dtype"])

    @property
    def shape(self) -> tuple[int, ...]:
        """Spatial shape (the time axis is unbounded and not included)."""
        return tuple(self.meta["shape"])

    @property
    def chunks(self) -> tuple[tuple[int, ...], ...]:
        return tuple(tuple(c) for c in self.meta["chunks"])

    @property
    def ended(self) -> bool:
        """Whether the end of the stream has been reached."""
        return self._ended

    def __repr__(self) -> str:
        state = "ended" if self._ended else "open"
        return f"<ArrayDescriptor {self.name!r}: {len(self._seen)} steps received, {state}>"

    # -- pulling steps -----------------------------------------------------------------------

    def _pull(self) -> bool:
        """Take the next record from the scheduler; False at the end of the stream."""
        if self._ended:
            return False
        client = self.adapter.client
        reply = self.adapter._request(
            "deisa_get",
            name=self.name,
            client=client.id,
            timeout=self.adapter.timeout,
            run=self._run,
        )
        status = reply["status"]
        if status == "error":
            raise RuntimeError(f"deisa_get of {self.name!r} refused: {reply['message']}")
        if status == "end":
            self._ended = True
            logger.info("deisa adapter: end of %r after %d steps", self.name, len(self._seen))
            return False
        if status == "timeout":
            last = self._seen[-1] if self._seen else None
            state = (
                f"the simulation has published {reply['published']} step(s) so far, the last "
                f"one received here being {last}"
                if reply["open"]
                else "no simulation has opened it yet"
            )
            raise TimeoutError(
                f"waited {self.adapter.timeout} s for the next step of {self.name!r}: {state}"
            )
        self._meta, self._run = reply["meta"], reply["run"]
        step = int(reply["step"])
        futures = {key: _dask_internals.future_in_memory(key, client) for key in reply["keys"]}
        _block_locations.record(futures, reply["workers"], reply["nthreads"])
        self._cached[step] = futures
        self._seen.append(step)
        return True

    def _pull_until(self, step: int | None) -> None:
        """Pull until ``step`` (or a later one) was received, or to the end if ``None``."""
        while step is None or not self._seen or self._seen[-1] < step:
            if not self._pull():
                return

    # -- selection ---------------------------------------------------------------------------

    def __getitem__(self, index: Any) -> da.Array:
        time_index, spatial = self._split_index(index)
        if isinstance(time_index, (int, np.integer)):
            array = self._step_array(self._resolve_int(int(time_index)))
        else:
            steps = self._resolve_many(time_index)
            if not steps:
                raise EndOfStreamError(
                    f"time selection {time_index!r} of {self.name!r} holds no published step "
                    f"(steps received: {_summary(self._seen)})"
                )
            array = da.stack([self._step_array(s) for s in steps])
            spatial = (slice(None), *spatial)
        if all(s == slice(None) for s in spatial):
            return array
        return array[spatial]

    def _split_index(self, index: Any) -> tuple[Any, tuple[Any, ...]]:
        index = index if isinstance(index, tuple) else (index,)
        ndim = 1 + len(self.shape)
        if sum(i is Ellipsis for i in index) > 1:
            raise IndexError("an index can only have a single ellipsis ('...')")
        if Ellipsis in index:
            at = index.index(Ellipsis)
            fill = (slice(None),) * (ndim - len(index) + 1)
            index = index[:at] + fill + index[at + 1 :]
        if len(index) > ndim:
            raise IndexError(
                f"too many indices for {self.name!r}: it has {ndim} axes (time + {ndim - 1} "
                f"spatial), {len(index)} were given"
            )
        spatial = index[1:] + (slice(None),) * (ndim - len(index))
        for axis, (i, size) in enumerate(zip(spatial, self.shape, strict=True), start=1):
            if isinstance(i, (int, np.integer)) and not -size <= i < size:
                raise IndexError(
                    f"index {i} is out of bounds for axis {axis} of {self.name!r} with size {size}"
                )
        return index[0], spatial

    def _resolve_int(self, step: int) -> int:
        if step < 0:
            self._pull_until(None)
            if -step > len(self._seen):
                raise EndOfStreamError(
                    f"step {step} is before the first of the {len(self._seen)} steps of "
                    f"{self.name!r}"
                )
            return self._seen[step]
        self._pull_until(step)
        if step in self._cached or step in self._handed:
            return step
        if self._ended and (not self._seen or step > self._seen[-1]):
            raise EndOfStreamError(
                f"step {step} is past the end of the stream of {self.name!r} "
                f"(steps received: {_summary(self._seen)})"
            )
        raise StepNotAvailableError(
            f"step {step} of {self.name!r} was not published (steps received: "
            f"{_summary(self._seen)})"
        )

    def _resolve_many(self, selection: Any) -> list[int]:
        if isinstance(selection, range):
            selection = slice(selection.start, selection.stop, selection.step)
        if isinstance(selection, slice):
            start, stop, stride = selection.start, selection.stop, selection.step or 1
            if stride <= 0:
                raise IndexError(f"time slices of {self.name!r} need a positive step")
            if any(v is not None and v < 0 for v in (start, stop)):
                # negative bounds count from the end, over the steps actually published
                self._pull_until(None)
                return self._seen[selection]
            self._pull_until(None if stop is None else stop - 1)
            lo, hi = start or 0, np.inf if stop is None else stop
            return [s for s in self._seen if lo <= s < hi and (s - lo) % stride == 0]
        if isinstance(selection, (list, np.ndarray)):
            return [self._resolve_int(int(s)) for s in selection]
        raise TypeError(
            f"cannot select steps of {self.name!r} with {selection!r}: use an integer, a slice, "
            "a range, a list of integers or ..."
        )

    def _step_array(self, step: int) -> da.Array:
        if step in self._cached:
            futures = self._cached.pop(step)
            self._handed[step] = {key: weakref.ref(f) for key, f in futures.items()}
        else:
            refs = self._handed[step]
            alive = {key: ref() for key, ref in refs.items()}
            if any(f is None for f in alive.values()):
                raise StepNotAvailableError(
                    f"step {step} of {self.name!r} was handed out before and its data has "
                    "been released since; keep the first array to use it again"
                )
            futures = alive  # type: ignore[assignment]
        meta = self.meta
        name = next(iter(futures))[0]
        return da.Array(
            dict(futures),
            name,
            chunks=self.chunks,
            dtype=np.dtype(meta["dtype"]),
            shape=tuple(meta["shape"]),
        )

    # -- iteration ---------------------------------------------------------------------------

    def items(self) -> Iterator[tuple[int, da.Array]]:
        """Yield ``(step, array)`` for every step not handed out yet, until the end."""
        while True:
            if not self._cached and not self._pull():
                return
            step = min(self._cached)
            yield step, self._step_array(step)

    def __iter__(self) -> Iterator[da.Array]:
        """Yield the array of every step not handed out yet, until the end of the stream."""
        for _, array in self.items():
            yield array


def _summary(steps: list[int]) -> str:
    if not steps:
        return "none"
    if len(steps) <= 6:
        return ", ".join(map(str, steps))
    return f"{steps[0]}, {steps[1]}, ..., {steps[-1]} ({len(steps)} in all)"
