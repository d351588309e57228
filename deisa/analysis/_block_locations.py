"""Where the blocks of a streamed step live, carried by the step's array itself.

The Bridge tells the scheduler which worker holds each block it publishes; the scheduler
extension hands that record to the :class:`~deisa.Adapter` with the step's keys, and the
Adapter returns the step as a :class:`LocatedArray`: a dask array that also holds those
locations. :func:`deisa.split` reads them from the array it is given (:func:`of`) instead of
asking the scheduler again (``who_has``, ``nthreads``). The locations live exactly as long as
the array. Dask's full slices (``x[:, :]``, ``x[...]``) return the array itself and keep
them; any other operation builds a plain dask array under new keys, which the splitter locates
by asking the scheduler, as it does for every array that did not come from a stream.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import dask.array as da
from dask.core import flatten


@dataclass(frozen=True)
class Locations:
    """Holder of every block of a step, and the threads of those holders."""

    workers: dict[Hashable, str]
    nthreads: dict[str, int]


class LocatedArray(da.Array):
    """A dask array of one streamed step that knows which worker holds each of its blocks.

    Everything else is :class:`dask.array.Array`; :func:`deisa.split` reads
    :attr:`locations`.
    """

    locations: Locations


def located(
    array: da.Array, keys: Iterable[Hashable], workers: Iterable[str], nthreads: Mapping[str, int]
) -> da.Array:
    """``array`` as a :class:`LocatedArray` whose block ``keys`` are held by ``workers`` (one per
    key, in order); ``array`` itself if its keys are not the step's (a region sliced out of
    the blocks)."""
    holders = dict(zip(keys, workers, strict=True))
    own = list(flatten(array.__dask_keys__()))
    if not set(own) <= holders.keys():
        return array
    step = LocatedArray(array.dask, array.name, array.chunks, meta=array._meta)
    threads = {worker: nthreads.get(worker, 1) for worker in set(holders.values())}
    step.locations = Locations({key: holders[key] for key in own}, threads)
    return step


def of(array: Any) -> Locations | None:
    """The locations ``array`` carries, or ``None`` if it did not come from a stream."""
    known: Locations | None = getattr(array, "locations", None)
    if known is None or not set(flatten(array.__dask_keys__())) <= known.workers.keys():
        return None  # a dask operation that kept the class but not the keys
    return known
