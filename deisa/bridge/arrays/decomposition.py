"""How the blocks of the MPI ranks tile a global array.

Each rank describes its own block with an :class:`ArraySpec`. The :class:`Decomposition`
checks, once at start-up, that the blocks of all ranks tile the global shape on a
rectilinear grid (uneven splits are fine; gaps, overlaps and misaligned blocks are not) and
derives the dask ``chunks`` and each rank's block index from it.

An array declared with :meth:`ArraySpec.moving` has no fixed shape: each step's global shape
and boxes are given at publish (:mod:`deisa.bridge.arrays.boxes`); its :class:`Decomposition` only
carries its dtype, number of axes and joined axis, and places its ranks in rank order.

The time axis is not part of these shapes: every array is implicitly a sequence of steps,
a leading axis, unbounded unless a ``time_length`` declares how many steps it holds.

Runs in a simulation rank: pure geometry, no thread of its own, used on its main thread (and
read from the loop thread).

Imports numpy and :mod:`deisa.wire` (dims, plain attributes) only.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ...wire import check_dims
from ...wire.attributes import plain_attrs


class DecompositionError(ValueError):
    """The ranks' blocks do not tile the global array."""


@dataclass(frozen=True)
class ArraySpec:
    """One rank's view of a distributed array (spatial axes only; time is implicit).

    Parameters
    ----------
    dtype
        Element type, anything :func:`numpy.dtype` accepts.
    global_shape
        Shape of the whole array over all ranks, e.g. ``(NX, NY)``.
    start
        Global index of this rank's first element, one entry per axis.
    shape
        Shape of this rank's block.
    dims
        Optional names of the axes, one per axis (distinct strings; ``"step"`` is the time
        axis's). The analytics' labelled arrays carry them
        (``adapter[name].items(as_xarray=True)``); every rank gives the same.
    time_length
        Optional number of steps the time axis holds (a PDI YAML's fixed time size, as the
        older grammars declare it: ``size: [500, ...]``), sent to the analytics as the length
        of its time axis (:attr:`deisa.analysis.adapter.ArrayDescriptor.time_length`); ``None``
        (default): unbounded. Every rank gives the same.
    attrs
        Optional static attributes of the array (units, spacing...: a dict of numbers,
        strings and lists of them, :mod:`deisa.wire.attributes`), sent once in its open
        metadata: the analytics' ``adapter[name].attrs``. Rank 0's are sent. Attributes that
        change per step: ``Bridge.publish(..., attrs=)`` or :meth:`Bridge.set_attrs`.

    Raises
    ------
    TypeError, ValueError
        Naming the argument: a dtype numpy does not know, shapes that are not integers or do
        not fit, ``dims`` of another length than the shapes, not strings, or repeated,
        ``time_length`` not a positive integer.

    Examples
    --------
    >>> ArraySpec("float64", global_shape=(64, 64), start=(32, 0), shape=(32, 64))
    ... # doctest: +NORMALIZE_WHITESPACE
    ArraySpec(dtype=dtype('float64'), global_shape=(64, 64), start=(32, 0), shape=(32, 64),
              dims=None, time_length=None)
    >>> ArraySpec("float64", (64, 64), (32, 0), (32, 64), dims=("x", "y")).dims
    ('x', 'y')

    An array whose shape and blocks change from step to step (particles, several boxes a
    rank): :meth:`moving`.
    """

    dtype: np.dtype
    global_shape: tuple[int, ...]
    start: tuple[int, ...]
    shape: tuple[int, ...]
    dims: tuple[str, ...] | None = None
    time_length: int | None = None
    is_moving: bool = dataclasses.field(default=False, repr=False)
    joined_axis: int | None = dataclasses.field(default=None, repr=False)
    ndim: int = dataclasses.field(default=0, repr=False)
    attrs: dict[str, Any] | None = dataclasses.field(default=None, repr=False, hash=False)

    def __init__(
        self,
        dtype: object,
        global_shape: Sequence[int],
        start: Sequence[int],
        shape: Sequence[int],
        *,
        dims: Sequence[str] | None = None,
        time_length: int | None = None,
        attrs: Mapping[str, Any] | None = None,
    ) -> None:
        try:
            dt = np.dtype(dtype)  # type: ignore[call-overload]
        except TypeError as exc:
            raise TypeError(f"dtype={dtype!r} is not a numpy dtype") from exc
        fields = {"global_shape": global_shape, "start": start, "shape": shape}
        values: dict[str, tuple[int, ...]] = {}
        for field, value in fields.items():
            try:
                values[field] = tuple(int(v) for v in value)
            except (TypeError, ValueError) as exc:
                raise TypeError(f"{field}={value!r} must be a sequence of integers") from exc
        ndims = {field: len(v) for field, v in values.items()}
        if len(set(ndims.values())) != 1 or not values["global_shape"]:
            raise ValueError(
                f"global_shape, start and shape need the same, non-zero length: {ndims}"
            )
        for axis, (n, s, b) in enumerate(
            zip(values["global_shape"], values["start"], values["shape"], strict=True)
        ):
            if n <= 0 or b <= 0 or s < 0:
                raise ValueError(
                    f"axis {axis}: global size {n}, start {s} and block size {b} must be positive"
                )
            if s + b > n:
                raise ValueError(
                    f"axis {axis}: block [{s}:{s + b}] lies outside the global size {n}"
                )
        names = check_dims(dims, len(values["shape"]))
        if time_length is not None and (
            not isinstance(time_length, (int, np.integer))
            or isinstance(time_length, bool)
            or time_length < 1
        ):
            raise ValueError(f"time_length={time_length!r} must be a positive integer or None")
        object.__setattr__(self, "dtype", dt)
        for field, value in values.items():
            object.__setattr__(self, field, value)
        object.__setattr__(self, "dims", names)
        object.__setattr__(self, "time_length", None if time_length is None else int(time_length))
        object.__setattr__(self, "is_moving", False)
        object.__setattr__(self, "joined_axis", None)
        object.__setattr__(self, "ndim", len(values["shape"]))
        object.__setattr__(self, "attrs", plain_attrs(attrs) or None)

    @classmethod
    def moving(
        cls,
        dtype: object,
        ndim: int,
        *,
        joined_axis: int | None = None,
        dims: Sequence[str] | None = None,
        attrs: Mapping[str, Any] | None = None,
    ) -> ArraySpec:
        """An array with no fixed shape: each step's global shape and this rank's boxes of it
        are given to :meth:`deisa.Bridge.publish` (``start=``, ``shape=``, or a list of
        ``(start, array)`` boxes), and may change at every step, a rank holding any number of
        boxes (none included).

        Parameters
        ----------
        dtype
            Element type, anything :func:`numpy.dtype` accepts.
        ndim
            Number of (spatial) axes, at least 1.
        joined_axis
            For a *joined* array (particles; ADIOS2's ``JoinedDim``): the axis along which the
            ranks' boxes follow one another in rank order, each rank giving only its arrays
            (no ``start``, no ``shape``); every box spans the other axes whole. ``None``
            (default): boxes placed by their ``start`` in the step's ``shape``.
        dims
            Optional names of the axes, as for a fixed array.
        attrs
            Optional static attributes, as for a fixed array.

        Every rank declares the same dtype, ``ndim``, ``joined_axis`` and ``dims``.

        Raises
        ------
        TypeError, ValueError
            Naming the argument: an unknown dtype, ``ndim`` not a positive integer,
            ``joined_axis`` not one of the axes, bad ``dims``.

        Examples
        --------
        >>> x = ArraySpec.moving("float64", 1, joined_axis=0)
        >>> x.is_moving, x.ndim, x.joined_axis
        (True, 1, 0)
        >>> ArraySpec.moving("float32", 2, dims=("y", "x"))
        ArraySpec.moving(dtype=dtype('float32'), ndim=2, joined_axis=None, dims=('y', 'x'))
        """
        try:
            dt = np.dtype(dtype)  # type: ignore[call-overload]
        except TypeError as exc:
            raise TypeError(f"dtype={dtype!r} is not a numpy dtype") from exc
        if not isinstance(ndim, (int, np.integer)) or isinstance(ndim, bool) or ndim < 1:
            raise ValueError(f"ndim={ndim!r} must be a positive integer")
        ndim = int(ndim)
        if joined_axis is not None and (
            not isinstance(joined_axis, (int, np.integer))
            or isinstance(joined_axis, bool)
            or not 0 <= joined_axis < ndim
        ):
            raise ValueError(f"joined_axis={joined_axis!r} must be an axis of the {ndim} axes")
        spec = object.__new__(cls)
        for name, value in {
            "dtype": dt, "global_shape": (), "start": (), "shape": (),
            "dims": check_dims(dims, ndim), "time_length": None, "is_moving": True,
            "joined_axis": None if joined_axis is None else int(joined_axis), "ndim": ndim,
            "attrs": plain_attrs(attrs) or None,
        }.items():  # fmt: skip
            object.__setattr__(spec, name, value)
        return spec

    def with_attrs(self, attrs: Mapping[str, Any] | None) -> ArraySpec:
        """This spec with the static attributes ``attrs`` (checked as ``ArraySpec(attrs=)``).

        >>> ArraySpec("float64", (4,), (0,), (4,)).with_attrs({"units": "K"}).attrs
        {'units': 'K'}
        """
        spec = object.__new__(ArraySpec)
        for f in dataclasses.fields(self):
            object.__setattr__(spec, f.name, getattr(self, f.name))
        object.__setattr__(spec, "attrs", plain_attrs(attrs) or None)
        return spec

    def __repr__(self) -> str:
        if self.is_moving:
            return (
                f"ArraySpec.moving(dtype={self.dtype!r}, ndim={self.ndim}, "
                f"joined_axis={self.joined_axis}, dims={self.dims})"
            )
        return (
            f"ArraySpec(dtype={self.dtype!r}, global_shape={self.global_shape}, "
            f"start={self.start}, shape={self.shape}, dims={self.dims}, "
            f"time_length={self.time_length})"
        )


@dataclass(frozen=True)
class Decomposition:
    """The checked tiling of one array by all ranks' blocks.

    Attributes
    ----------
    name : str
        Array name.
    dtype : numpy.dtype
        Element type, identical on every rank.
    global_shape : tuple of int
        Spatial shape of the whole array.
    chunks : tuple of tuple of int
        Block sizes along each axis, as dask expects them.
    block_index : tuple of tuple of int
        ``block_index[rank]`` is the grid position of that rank's block.
    dims : tuple of str or None
        The axes' names (:class:`ArraySpec`'s ``dims``), identical on every rank.
    time_length : int or None
        The declared length of the time axis (:class:`ArraySpec`'s), identical on every rank.
    is_moving : bool
        Declared with :meth:`ArraySpec.moving`: no global shape (``()``); its "grid" is its
        ranks in rank order (``chunks`` of ones, ``block_index[rank] == (rank,)``), which is what
        the placement policies place.
    joined_axis : int or None
        A moving array's joined axis.
    ndim : int
        Its number of axes.
    attrs : dict or None
        Rank 0's static attributes (:class:`ArraySpec`'s ``attrs``).
    """

    name: str
    dtype: np.dtype
    global_shape: tuple[int, ...]
    chunks: tuple[tuple[int, ...], ...]
    block_index: tuple[tuple[int, ...], ...]
    dims: tuple[str, ...] | None = None
    time_length: int | None = None
    is_moving: bool = False
    joined_axis: int | None = None
    ndim: int = 0
    attrs: dict[str, Any] | None = dataclasses.field(default=None, hash=False)

    @property
    def grid_shape(self) -> tuple[int, ...]:
        """Number of blocks along each axis."""
        return tuple(len(c) for c in self.chunks)

    @property
    def nranks(self) -> int:
        return len(self.block_index)

    @classmethod
    def from_specs(cls, name: str, specs: Sequence[ArraySpec]) -> Decomposition:
        """Check that ``specs[rank]`` tile the global array and build the decomposition.

        Raises
        ------
        DecompositionError
            Naming the array, the rank(s) and the offending block when dtypes, global shapes
            dims or time lengths disagree, blocks overlap, leave a gap, or do not line up on a grid.
        """
        if not specs:
            raise DecompositionError(f"array {name!r}: no rank describes a block")
        ref = specs[0]
        _check_agree(name, specs)
        if ref.is_moving:
            n = len(specs)
            return cls(name, ref.dtype, (), ((1,) * n,), tuple((r,) for r in range(n)),
                       ref.dims, None, True, ref.joined_axis, ref.ndim, ref.attrs)  # fmt: skip
        ndim = len(ref.global_shape)
        boundaries = []
        for axis in range(ndim):
            starts = sorted({s.start[axis] for s in specs})
            edges = [*starts, ref.global_shape[axis]]
            boundaries.append(edges)
        index: list[tuple[int, ...]] = []
        for rank, spec in enumerate(specs):
            pos: list[int] = []
            for axis in range(ndim):
                edges = boundaries[axis]
                i = edges.index(spec.start[axis])
                if spec.start[axis] + spec.shape[axis] != edges[i + 1]:
                    raise DecompositionError(
                        f"array {name!r}: rank {rank}'s block spans "
                        f"[{spec.start[axis]}:{spec.start[axis] + spec.shape[axis]}] along axis "
                        f"{axis}, which overlaps or misses the grid lines {edges} that the "
                        "ranks' starts define"
                    )
                pos.append(i)
            index.append(tuple(pos))
        _check_one_owner_each(name, specs, index, boundaries)
        chunks = tuple(tuple(int(d) for d in np.diff(edges)) for edges in boundaries)
        return cls(
            name,
            ref.dtype,
            ref.global_shape,
            chunks,
            tuple(index),
            ref.dims,
            ref.time_length,
            ndim=ndim,
            attrs=ref.attrs,
        )

    def declared_box(self, rank: int) -> tuple[tuple[int, ...], tuple[int, ...]]:
        """A fixed array's block of ``rank``: its ``(start, count)`` in the global shape."""
        start, count = [], []
        for axis, i in enumerate(self.block_index[rank]):
            start.append(sum(self.chunks[axis][:i]))
            count.append(self.chunks[axis][i])
        return tuple(start), tuple(count)


def _check_agree(name: str, specs: Sequence[ArraySpec]) -> None:
    """Every rank declares ``name`` with rank 0's dtype, global shape, dims and time length."""
    ref = specs[0]
    for rank, spec in enumerate(specs):
        if spec.is_moving != ref.is_moving:
            kinds = {True: "moving (ArraySpec.moving)", False: "fixed"}
            raise DecompositionError(
                f"array {name!r}: rank {rank} declares it {kinds[spec.is_moving]}, rank 0 "
                f"{kinds[ref.is_moving]}"
            )
        for what in ("ndim", "joined_axis"):
            if ref.is_moving and getattr(spec, what) != getattr(ref, what):
                raise DecompositionError(
                    f"array {name!r}: rank {rank} has {what}={getattr(spec, what)}, rank 0 "
                    f"has {what}={getattr(ref, what)}"
                )
        if spec.dtype != ref.dtype:
            raise DecompositionError(
                f"array {name!r}: rank {rank} has dtype {spec.dtype}, rank 0 has {ref.dtype}"
            )
        if spec.global_shape != ref.global_shape:
            raise DecompositionError(
                f"array {name!r}: rank {rank} has global shape {spec.global_shape}, "
                f"rank 0 has {ref.global_shape}"
            )
        if spec.dims != ref.dims:
            raise DecompositionError(
                f"array {name!r}: rank {rank} has dims={spec.dims}, rank 0 has dims={ref.dims}"
            )
        if spec.time_length != ref.time_length:
            raise DecompositionError(
                f"array {name!r}: rank {rank} has time_length={spec.time_length}, rank 0 "
                f"has time_length={ref.time_length}"
            )


def _check_one_owner_each(
    name: str,
    specs: Sequence[ArraySpec],
    index: list[tuple[int, ...]],
    boundaries: list[list[int]],
) -> None:
    """Each block of the grid (``boundaries``: its lines along each axis) is published by one
    rank (``index``: each rank's block), none by two, none by none."""
    ref = specs[0]
    owners: dict[tuple[int, ...], int] = {}
    for rank, block in enumerate(index):
        if block in owners:
            raise DecompositionError(
                f"array {name!r}: ranks {owners[block]} and {rank} publish the same block "
                f"{_block_slices(specs[rank])}"
            )
        owners[block] = rank
    grid = [len(edges) - 1 for edges in boundaries]
    missing = [tuple(p) for p in itertools.product(*map(range, grid)) if tuple(p) not in owners]
    if missing:
        where = ", ".join(
            "[" + ", ".join(f"{b[a][i]}:{b[a][i + 1]}" for a, i in enumerate(p)) + "]"
            for p, b in zip(missing[:4], itertools.repeat(boundaries), strict=False)
        )
        raise DecompositionError(
            f"array {name!r}: {len(missing)} block(s) of the global shape "
            f"{ref.global_shape} are published by no rank: {where}; if only some ranks "
            "hold this array, publish it over a communicator of those ranks (a Bridge "
            "with comm=comm.Split(...), or deisa.BridgeGroup's array_comms)"
        )


def _block_slices(spec: ArraySpec) -> str:
    return (
        "[" + ", ".join(f"{s}:{s + n}" for s, n in zip(spec.start, spec.shape, strict=True)) + "]"
    )


def even_split(size: int, parts: int, index: int) -> tuple[int, int]:
    """``(start, length)`` of part ``index`` when ``size`` cells are split over ``parts``.

    The first ``size % parts`` parts get one extra cell, as the heat solvers do.

    >>> [even_split(10, 4, i) for i in range(4)]
    [(0, 3), (3, 3), (6, 2), (8, 2)]
    """
    base, extra = divmod(size, parts)
    return index * base + min(index, extra), base + (1 if index < extra else 0)
