"""A lazy dask array of a whole declared time axis, before its steps have arrived.

pdidev/deisa's main client hands its analytics one dask array per simulation array, of the
time length its PDI YAML declares (``size: [500, ...]``), as soon as the simulation has
started: ``len(gt[:, 0, 0])`` is 500 at once, and the data is read when computed.
:func:`time_axis_array` builds that array here from an
:class:`~deisa.analysis.adapter.ArrayDescriptor` whose ``time_length`` is known.

Its graph is a :class:`LiveTimeAxis`: a mapping whose keys, one per step and block, are known
from the start, and whose tasks are made when asked for (:meth:`LiveTimeAxis.materialize`), by
reading the steps from the stream, in order, up to the last one asked for or the end of the
stream. A step's task adds the time axis to the block the simulation published (no copy); a
step that will never come (the simulation stopped before the declared length, or did not
publish it, or its blocks died with a worker) is a task raising
:class:`~deisa.analysis._reading.EndOfStreamError` that says so: computing it fails with that
message, while the steps that came compute.

When the steps are read: a graph sent to the scheduler is materialized whole first, by
:func:`materialize_graphs` (the client of :mod:`deisa.analysis.compat` calls it before each
``compute``, ``persist`` and ``get``, outside distributed's lock on the client's references), or
when it is pickled; a computation then returns once every step of the time axis has arrived,
or the stream has ended. A graph computed by dask's local schedulers reads only the steps its
result needs.
"""

from __future__ import annotations

import itertools
import logging
import threading
import uuid
from collections.abc import Iterator, Mapping
from typing import Any

import dask.array as da
import numpy as np
from distributed import Future

from .. import _dask_internals
from ._reading import EndOfStreamError, StepNotAvailableError
from .adapter import ArrayDescriptor

logger = logging.getLogger(__name__)

Key = tuple[Any, ...]


def with_time_axis(block: np.ndarray) -> np.ndarray:
    """A step's block as one slice of the time axis: a view, with a leading axis of 1."""
    return block[np.newaxis]


def missing_step(message: str) -> None:
    """The task of a step that will never come: raises ``message``."""
    raise EndOfStreamError(message)


class LiveTimeAxis(Mapping[Key, Any]):
    """The graph of a time axis of ``length`` steps of ``descriptor``'s array, its tasks made
    from the stream when first asked for (see the module docstring).

    Parameters
    ----------
    descriptor
        The array's descriptor, which reads its steps.
    name
        The dask name of the array (its keys are ``(name, step, *block)``).
    length
        The declared number of steps.
    """

    def __init__(self, descriptor: ArrayDescriptor, name: str, length: int) -> None:
        self.descriptor = descriptor
        self.name = name
        self.length = length
        self.grid = tuple(len(c) for c in descriptor.chunks)
        self._tasks: dict[int, dict[tuple[int, ...], Any]] = {}
        self._lock = threading.RLock()

    def __iter__(self) -> Iterator[Key]:
        blocks = list(itertools.product(*map(range, self.grid)))
        return ((self.name, step, *block) for step in range(self.length) for block in blocks)

    def __len__(self) -> int:
        return self.length * int(np.prod(self.grid, dtype=np.int64))

    def __contains__(self, key: object) -> bool:
        return (
            isinstance(key, tuple)
            and len(key) == 2 + len(self.grid)
            and key[0] == self.name
            and all(isinstance(i, (int, np.integer)) for i in key[1:])
            and 0 <= key[1] < self.length
            and all(0 <= i < n for i, n in zip(key[2:], self.grid, strict=True))
        )

    def __getitem__(self, key: Key) -> Any:
        if key not in self:
            raise KeyError(key)
        return self._step(int(key[1]))[tuple(int(i) for i in key[2:])]

    def __reduce__(self) -> tuple[Any, tuple[dict[Key, Any]]]:
        """Pickled (sent to the scheduler): every task, the steps read first."""
        return (dict, (self.materialize(),))

    @property
    def materialized(self) -> bool:
        """Whether every step's tasks are made."""
        return len(self._tasks) == self.length

    def materialize(self) -> dict[Key, Any]:
        """Every task of the graph: reads the stream to the last declared step or its end."""
        return {key: self[key] for key in self}

    def _step(self, step: int) -> dict[tuple[int, ...], Any]:
        with self._lock:
            if step not in self._tasks:
                self._tasks[step] = self._tasks_of(step)
            return self._tasks[step]

    def _tasks_of(self, step: int) -> dict[tuple[int, ...], Any]:
        """The task of each block of ``step``: its block with a time axis, or the error."""
        d = self.descriptor
        blocks = list(itertools.product(*map(range, self.grid)))
        try:
            d._resolve_int(step)
            array = d._step_array(step)
        except (EndOfStreamError, StepNotAvailableError) as exc:
            message = self._missing(step, exc)
            logger.debug("deisa compat: %s", message)
            return {block: (missing_step, message) for block in blocks}
        graph = dict(array.__dask_graph__())
        futures = {block: graph.get(_key_at(array.__dask_keys__(), block)) for block in blocks}
        if array.shape != d.shape or not all(isinstance(f, Future) for f in futures.values()):
            message = (
                f"step {step} of {d.name!r} was sent under a contract: it holds the region "
                f"{array.shape} of the array {d.shape}, not the whole step"
            )
            return {block: (missing_step, message) for block in blocks}
        return {block: (with_time_axis, future) for block, future in futures.items()}

    def _missing(self, step: int, exc: Exception) -> str:
        d = self.descriptor
        if d.ended and (not d.steps or step > d.steps[-1]):
            return (
                f"step {step} of {d.name!r} never came: the simulation ended the stream after "
                f"{len(d.steps)} step(s) (last: {d.steps[-1] if d.steps else 'none'}) of the "
                f"{self.length} its time axis declares"
            )
        return f"step {step} of {d.name!r} cannot be read: {exc}"


def _key_at(keys: Any, block: tuple[int, ...]) -> Any:
    """The key of ``block`` in the nested lists of ``array.__dask_keys__()``."""
    for i in block:
        keys = keys[i]
    return keys


def time_axis_array(descriptor: ArrayDescriptor, length: int) -> da.Array:
    """The whole time axis of ``descriptor``'s array, ``length`` steps, as one lazy dask array
    of shape ``(length, *shape)``, one step per chunk along time (see the module docstring)."""
    name = f"deisa-time-axis-{descriptor.name}-{uuid.uuid4().hex[:12]}"
    graph = LiveTimeAxis(descriptor, name, length)
    return da.Array(
        graph,
        name,
        chunks=((1,) * length, *descriptor.chunks),
        dtype=descriptor.dtype,
        shape=(length, *descriptor.shape),
    )


def materialize_graphs(obj: Any) -> None:
    """Make every task of the :class:`LiveTimeAxis` graphs that ``obj`` (a dask collection,
    an expression, or lists, tuples and dicts of them) holds, before it is sent."""
    for mapping in _dask_internals.graph_mappings(obj):
        if isinstance(mapping, LiveTimeAxis) and not mapping.materialized:
            mapping.materialize()
