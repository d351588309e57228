"""Locality splitter (SplIter): iterate a distributed dask array by worker-local partitions.

A dask array whose blocks already sit in worker memory (persisted, or built from futures) is
split into *partitions*: groups of blocks held by one worker. A function run on a partition is
pinned to that worker and receives the blocks as local inputs, so the local phase moves no data;
only the (small) partial results travel when they are merged. This is the SplIter mechanism of
Barceló et al., adapted to dask.distributed: one ``who_has`` query for the whole array, then one
task per partition instead of one task per block.

The SplIter paper's Listing 5 reads the same with this API::

    def compute_partition(blocks):
        part_results = [partial_histogram(block) for block in blocks]
        return np.sum(part_results, axis=0)

    partials = []
    for partition in split(experiment):
        partials.append(partition.submit(compute_partition))
    result = client.submit(sum_partials, partials).result()

or, in one line, ``partials = split(experiment).map(compute_partition)``.

How many partitions a worker gets is a :class:`PartitionPolicy`: one per worker thread
(:class:`Static`, the default), ``k`` per thread (:class:`OverDecomposition`), or decreasing
sizes (:class:`Factoring`, the FAC2 rule of dynamic loop self-scheduling), also accepted by name
(``"static"``, ``"overdecomposition"``, ``"factoring"``).

Samples are often rows: with ``keep_rows_whole=True`` every partition holds whole row bands (all
blocks sharing a row-block index). A row band whose blocks are spread over several workers is
assigned to the worker already holding most of its bytes; the other blocks are then fetched by
dask when the partition's task runs, and :attr:`Partition.bytes_to_move` reports how many bytes.
:func:`measure_incoming_transfers` measures what really moved, from the workers' own counters.
"""

from __future__ import annotations

import logging
import math
from collections import defaultdict
from collections.abc import Callable, Hashable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import dask.array as da
import numpy as np
from dask.core import flatten
from distributed import Client, Future, futures_of, get_client, wait

from . import _block_locations
from ._transfers import TransferMeasurement, measure_incoming_transfers

__all__ = [
    "Factoring",
    "OverDecomposition",
    "Partition",
    "PartitionPolicy",
    "Split",
    "Static",
    "TransferMeasurement",
    "measure_incoming_transfers",
    "split",
]

logger = logging.getLogger(__name__)

BlockIndex = tuple[int, ...]


# --------------------------------------------------------------------------- policies


class PartitionPolicy(Protocol):
    """How many partitions a worker gets, and how many units (blocks or row bands) each holds.

    A policy is called once per worker, with the worker's number of units and of threads, and
    returns the partition sizes in order; they must be positive and sum to ``n_units``.
    """

    def sizes(self, n_units: int, n_threads: int) -> list[int]: ...


def _even_sizes(n_units: int, n_parts: int) -> list[int]:
    n_parts = max(1, min(n_units, n_parts))
    base, extra = divmod(n_units, n_parts)
    return [base + (1 if i < extra else 0) for i in range(n_parts)]


@dataclass(frozen=True)
class Static:
    """One partition per worker thread, of near-equal sizes (the SplIter default).

    Examples
    --------
    >>> Static().sizes(10, 2)
    [5, 5]
    """

    def sizes(self, n_units: int, n_threads: int) -> list[int]:
        return _even_sizes(n_units, n_threads)


@dataclass(frozen=True)
class OverDecomposition:
    """``per_thread`` partitions per worker thread, of near-equal sizes.

    Over-decomposition trades a few more tasks for load balance when blocks cost unequal time.

    Parameters
    ----------
    per_thread : int
        Partitions per worker thread (at least 1).

    Examples
    --------
    >>> OverDecomposition(per_thread=2).sizes(10, 2)
    [3, 3, 2, 2]
    """

    per_thread: int = 2

    def __post_init__(self) -> None:
        if self.per_thread < 1:
            raise ValueError(f"per_thread={self.per_thread} must be ≥ 1")

    def sizes(self, n_units: int, n_threads: int) -> list[int]:
        return _even_sizes(n_units, n_threads * self.per_thread)


@dataclass(frozen=True)
class Factoring:
    """Decreasing partition sizes by factoring (FAC2, Flynn Hummel et al. 1992).

    Work is handed out in batches of ``n_threads`` partitions; each batch takes
    ``1/divisor`` of the units still remaining, so early partitions are large (few tasks) and
    late ones small (they fill the gaps left by slow threads).

    Parameters
    ----------
    divisor : float
        Fraction of the remaining work a batch takes is ``1/divisor`` (2 for FAC2).

    Examples
    --------
    >>> Factoring().sizes(16, 2)
    [4, 4, 2, 2, 1, 1, 1, 1]
    """

    divisor: float = 2.0

    def __post_init__(self) -> None:
        if self.divisor < 1:
            raise ValueError(f"divisor={self.divisor} must be ≥ 1")

    def sizes(self, n_units: int, n_threads: int) -> list[int]:
        sizes: list[int] = []
        remaining = n_units
        threads = max(1, n_threads)
        while remaining > 0:
            chunk = max(1, math.ceil(remaining / (self.divisor * threads)))
            for _ in range(threads):
                if remaining == 0:
                    break
                take = min(chunk, remaining)
                sizes.append(take)
                remaining -= take
        return sizes


_POLICY_NAMES: dict[str, Callable[[], PartitionPolicy]] = {
    "static": Static,
    "overdecomposition": OverDecomposition,
    "factoring": Factoring,
}


def _resolve_policy(policy: str | PartitionPolicy) -> PartitionPolicy:
    if isinstance(policy, str):
        try:
            return _POLICY_NAMES[policy]()
        except KeyError:
            raise ValueError(
                f"policy={policy!r} is not one of {sorted(_POLICY_NAMES)} "
                "nor a PartitionPolicy object"
            ) from None
    return policy


# --------------------------------------------------------------------------- partitions


@dataclass
class Partition:
    """A group of blocks of one dask array, processed on one worker.

    Parameters
    ----------
    worker : str
        Address of the worker the partition's task is pinned to.
    block_indexes : list of tuple of int
        Global block index of each block, in the order the task receives them.
    futures : list of Future
        The blocks' futures, same order.
    chunks : tuple of tuple of int
        The whole array's chunks (to translate block indexes into item indexes).
    client : Client
        Client used to submit the partition's task.
    bytes_to_move : int
        Bytes of this partition's blocks that are not yet on ``worker`` (0 when fully local).

    See Also
    --------
    split : builds the partitions of an array.
    """

    worker: str
    block_indexes: list[BlockIndex]
    futures: list[Future]
    chunks: tuple[tuple[int, ...], ...]
    client: Client = field(repr=False)
    bytes_to_move: int = 0

    def __len__(self) -> int:
        return len(self.block_indexes)

    def get_indexes(self) -> list[BlockIndex]:
        """Global block index of each block of the partition.

        Returns
        -------
        list of tuple of int
            One ``(i, j, ...)`` per block, in the order the partition's task receives them.
        """
        return list(self.block_indexes)

    def get_item_indexes(self, axis: int = 0) -> np.ndarray:
        """Global item indices along ``axis`` of every block, concatenated in block order.

        For row bands (one block across the other axes) this is the global row index of each
        row of ``np.concatenate(blocks, axis=axis)``; with several blocks per band, rows repeat
        once per block (use ``np.unique`` for the set of rows).

        Parameters
        ----------
        axis : int
            Array axis along which to index items.

        Returns
        -------
        numpy.ndarray of int64
        """
        starts = np.concatenate([[0], np.cumsum(self.chunks[axis])])
        ranges = [
            np.arange(starts[index[axis]], starts[index[axis] + 1], dtype=np.int64)
            for index in self.block_indexes
        ]
        return np.concatenate(ranges) if ranges else np.empty(0, dtype=np.int64)

    def submit(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Future:
        """Run ``fn(blocks, *args, **kwargs)`` on the partition's worker.

        ``blocks`` is the list of numpy blocks in :meth:`get_indexes` order. The futures
        themselves are the task's inputs and the task is pinned to the worker holding them, so
        dask neither moves the blocks nor loses track of their lifetime.

        Returns
        -------
        Future
            The task's result.
        """
        return self.client.submit(
            fn,
            self.futures,
            *args,
            workers=[self.worker],
            allow_other_workers=False,
            pure=False,
            **kwargs,
        )


@dataclass
class Split:
    """The partitions of one array; iterate over it, or :meth:`map` a function on all of them."""

    partitions: list[Partition]

    def __iter__(self) -> Iterator[Partition]:
        return iter(self.partitions)

    def __len__(self) -> int:
        return len(self.partitions)

    def __getitem__(self, i: int) -> Partition:
        return self.partitions[i]

    @property
    def bytes_to_move(self) -> int:
        """Bytes that must cross workers before the partitions' tasks can run."""
        return sum(p.bytes_to_move for p in self.partitions)

    def map(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> list[Future]:
        """Submit ``fn(blocks, *args, **kwargs)`` once per partition (:meth:`Partition.submit`)."""
        return [p.submit(fn, *args, **kwargs) for p in self.partitions]


def split(
    x: da.Array,
    policy: str | PartitionPolicy = "static",
    *,
    keep_rows_whole: bool = False,
    client: Client | None = None,
    nthreads: dict[str, int] | None = None,
    persist: bool = False,
) -> Split:
    """Split a dask array whose blocks are in worker memory into worker-local partitions.

    Parameters
    ----------
    x : dask.array.Array
        Array whose blocks are held by futures (``client.persist(x)``, or built from futures
        under its own keys). Missing blocks are an error rather than an implicit compute.
    policy : {"static", "overdecomposition", "factoring"} or PartitionPolicy
        Partition sizing per worker; see :class:`Static`, :class:`OverDecomposition`,
        :class:`Factoring`.
    keep_rows_whole : bool
        Keep each row band (blocks sharing their index along axis 0) in one partition. A band
        spread over workers goes to the worker holding most of its bytes.
    client : Client, optional
        Defaults to the current client.
    nthreads : dict, optional
        Threads per worker address; defaults to what the stream reported for a step's array
        from an :class:`~deisa.Adapter` (with the blocks' holders, so that ``split`` asks the
        scheduler nothing), else ``client.nthreads()``.
    persist : bool
        Persist ``x`` first when some of its blocks are not held by futures (a lazy array),
        instead of raising.

    Returns
    -------
    Split
        Iterable of :class:`Partition`. Partitions of a worker hold contiguous units in
        block order.

    Examples
    --------
    >>> x = client.persist(da.random.random((1000, 10), chunks=(100, 10)))  # doctest: +SKIP
    >>> sums = split(x).map(lambda blocks: sum(b.sum() for b in blocks))  # doctest: +SKIP
    >>> sum(client.gather(sums))  # doctest: +SKIP
    """
    client = client if client is not None else get_client()
    sizing = _resolve_policy(policy)
    x, keys, futures_by_key = _held_blocks(x, client, persist)
    holders, threads = _locations(x, keys, futures_by_key, client, nthreads)
    block_nbytes = {k: _block_nbytes(x, _index_of(k)) for k in keys}
    units_by_worker = _assign(_units(keys, keep_rows_whole), holders, block_nbytes)
    partitions = []
    for worker in sorted(units_by_worker):
        worker_units = units_by_worker[worker]
        sizes = sizing.sizes(len(worker_units), threads.get(worker, 1))
        if sum(sizes) != len(worker_units) or min(sizes) < 1:
            raise ValueError(f"policy {sizing!r} returned sizes {sizes} for {len(worker_units)}")
        start = 0
        for size in sizes:
            part_keys = [k for unit in worker_units[start : start + size] for k in unit]
            start += size
            partitions.append(
                Partition(
                    worker=worker,
                    block_indexes=[_index_of(k) for k in part_keys],
                    futures=[futures_by_key[k] for k in part_keys],
                    chunks=x.chunks,
                    client=client,
                    bytes_to_move=sum(
                        block_nbytes[k] for k in part_keys if worker not in holders[k]
                    ),
                )
            )
    return Split(partitions)


def _held_blocks(
    x: da.Array, client: Client, persist: bool
) -> tuple[da.Array, list[Hashable], dict[Hashable, Future]]:
    """``x`` (persisted if ``persist`` and some block is not held), its block keys in order,
    and the future holding each block; a block held by no future is an error otherwise."""
    keys = list(flatten(x.__dask_keys__()))
    futures_by_key = {f.key: f for f in futures_of(x)}
    missing = [k for k in keys if k not in futures_by_key]
    if missing and persist:
        logger.debug(
            "split: persisting %s, %d of its blocks are not in memory", x.name, len(missing)
        )
        x = client.persist(x)
        futures_by_key = {f.key: f for f in futures_of(x)}
    elif missing:
        raise ValueError(
            f"{len(missing)} of {len(keys)} blocks of {x.name!r} are not held by futures "
            f"(first: {missing[0]!r}); persist the array first: x = client.persist(x)"
        )
    return x, keys, futures_by_key


def _locations(
    x: da.Array,
    keys: list[Hashable],
    futures_by_key: dict[Hashable, Future],
    client: Client,
    nthreads: dict[str, int] | None,
) -> tuple[dict[Any, Sequence[str]], dict[str, int]]:
    """The workers holding each block, and the threads per worker (``nthreads`` if given):
    those a streamed step's array carries, else one query for the whole array."""
    known = _block_locations.of(x)  # carried by a streamed step's array: no query needed
    if known is None:
        futures = [futures_by_key[k] for k in keys]
        wait(futures)
        holders = client.who_has(futures)  # the one location query for the whole array
        return holders, nthreads if nthreads is not None else client.nthreads()
    holders = {k: [known.workers[k]] for k in keys}
    return holders, nthreads if nthreads is not None else known.nthreads


def _assign(
    units: list[list[Hashable]],
    holders: dict[Any, Sequence[str]],
    block_nbytes: dict[Hashable, int],
) -> dict[str, list[list[Hashable]]]:
    """Each unit to its owner (:func:`_owner`), in order, the load counted as units come."""
    units_by_worker: dict[str, list[list[Hashable]]] = defaultdict(list)
    load: dict[str, int] = defaultdict(int)
    for unit in units:
        worker = _owner(unit, holders, block_nbytes, load)
        units_by_worker[worker].append(unit)
        load[worker] += sum(block_nbytes[k] for k in unit)
    return units_by_worker


def _index_of(key: Hashable) -> BlockIndex:
    assert isinstance(key, tuple)
    return tuple(int(i) for i in key[1:])


def _block_nbytes(x: da.Array, index: BlockIndex) -> int:
    n_items = math.prod(x.chunks[axis][i] for axis, i in enumerate(index))
    return n_items * x.dtype.itemsize


def _units(keys: Sequence[Hashable], keep_rows_whole: bool) -> list[list[Hashable]]:
    if not keep_rows_whole:
        return [[k] for k in keys]
    bands: dict[int, list[Hashable]] = defaultdict(list)
    for k in keys:  # keys come in C order, so each band lists its blocks by column
        bands[_index_of(k)[0]].append(k)
    return [bands[row] for row in sorted(bands)]


def _owner(
    unit: list[Hashable],
    holders: dict[Any, Sequence[str]],
    block_nbytes: dict[Hashable, int],
    load: dict[str, int],
) -> str:
    held: dict[str, int] = defaultdict(int)
    for k in unit:
        for worker in holders[k]:
            held[worker] += block_nbytes[k]
    if not held:
        raise RuntimeError(f"no worker holds block {unit[0]!r}")
    # Most bytes already there wins (least data to move); ties (e.g. replicas) go to the
    # least-loaded worker so replicated data still spreads over workers.
    return min(held, key=lambda w: (-held[w], load[w], w))
