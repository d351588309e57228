"""Saved arrays held as one HDF5 dataset per step, for :class:`deisa.Replay`: one file per step
(``data_{step}.h5``), or one file whose datasets are named by step (``x/step_0003``,
``x/0003``, ``x_0003``, ``x_step_0003``: what ``decl_hdf5`` writes with a ``$step`` in a
dataset's name, or h5py code appending a step at a time).

Where every step has one shape, the array is a plain
:class:`~deisa.analysis._replay_array.ReplayArray`, chunked by the ``block_start`` rows (each
rank's start, one row a block) or the file's chunks. Where the shapes differ (particles whose
number changes, a grid that is refined), each step is its own layout
(:class:`~deisa.analysis._replay_moving.MovingReplayArray`): its blocks those of that step's
``block_start`` rows (``block_start`` in each per-step file, ``block_start/step_0003`` beside
per-step datasets; a start at the end of an axis is a rank with nothing this step), else its
dataset's chunks; each box read lazily by whichever process computes it.

One file per rank (``Replay("particles_${rank}.h5")``): :mod:`._replay_per_rank`.
"""

from __future__ import annotations

import itertools
import logging
import os
import re
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import dask.array as da
import numpy as np
from dask.base import tokenize

from ..wire.layout import Box, StepLayout
from . import _labels
from ._blocks import BLOCKS_DATASET, chunks_from_starts
from ._replay_array import ReplayArray, ReplayError
from ._replay_hdf5 import Dataset, HDF5Block
from ._replay_moving import MovingReplayArray, check_layouts

__all__ = ["PER_STEP_NAME", "group_per_step", "per_step_array"]

logger = logging.getLogger(__name__)

#: a dataset of one step: ``<name>/step_<n>``, ``<name>/<n>``, ``<name>_<n>``, ``<name>_step_<n>``
PER_STEP_NAME = re.compile(r"(?P<name>.+?)[/_](?:step_?)?(?P<step>\d+)")

Chunks = tuple[tuple[int, ...], ...]


def group_per_step(datasets: Iterable[Dataset]) -> dict[str, dict[int, Dataset]]:
    """The datasets named by step (:data:`PER_STEP_NAME`), by array name, then step number.
    Two datasets of one array and step (``x_3`` and ``x_03``): the first in name order."""
    groups: dict[str, dict[int, Dataset]] = {}
    for info in sorted(datasets, key=lambda d: d.name):
        match = PER_STEP_NAME.fullmatch(info.name)
        if match is not None:
            groups.setdefault(match["name"], {}).setdefault(int(match["step"]), info)
    return groups


def step_chunks(
    info: Dataset,
    shape: tuple[int, ...],
    starts: Dataset | None,
    *,
    spec: Any,
    read_small: Callable[[Dataset], np.ndarray],
    source: str,
    moving: bool,
) -> Chunks:
    """A step's chunks: ``spec`` (``Replay(chunks=)``), else the blocks its ``block_start``
    rows start, else its dataset's chunks, else dask's ``"auto"``."""
    if spec is None and starts is not None and starts.dtype.kind in "iu":
        rows = read_small(starts)
        if rows.ndim == 1 and len(shape) == 1:  # one start a rank, of a 1-D array
            rows = rows[:, None]
        spec = chunks_from_starts(rows, shape, info.name, source, empty=moving)
    if spec is None:
        file_chunks = info.chunks[-len(shape) :] if info.chunks else None
        spec = file_chunks if file_chunks is not None else "auto"
    return da.core.normalize_chunks(spec, shape, dtype=info.dtype)


def per_step_array(
    name: str,
    infos: Sequence[Dataset],
    steps: Sequence[int],
    *,
    source: str,
    chunks: Callable[[int, Dataset, tuple[int, ...], bool], Chunks],
    dims: Sequence[str] | None,
    max_metadata_bytes: int,
) -> ReplayArray:
    """The array ``name`` whose step ``steps[i]`` is the dataset ``infos[i]``.

    ``chunks(i, info, shape, moving)``: the chunks of the ``i``-th step (:func:`step_chunks`).

    Raises
    ------
    ReplayError
        The datasets differ in dtype or number of axes (naming two), or are scalars.
    """
    first = infos[0]
    for info in infos:
        if info.dtype != first.dtype or len(info.shape) != len(first.shape):
            raise ReplayError(
                f"the per-step datasets of {name!r} disagree: {first.path}:{first.name} holds "
                f"{first.shape} {first.dtype}, {info.path}:{info.name} {info.shape} {info.dtype}"
            )
    leading = all(len(i.shape) > 1 and i.shape[0] == 1 for i in infos)  # a time axis of one
    shapes = [i.shape[1:] if leading else i.shape for i in infos]
    if not shapes[0]:
        raise ReplayError(f"{name!r} in {first.path} is a scalar: it has no spatial axis")
    at = 0 if leading else None
    file_dims = first.dims[len(first.shape) - len(shapes[0]) :] if first.dims else None
    labels = _labels.chosen(name, file_dims, dims, len(shapes[0]), source)
    stamps = sorted({(i.path, os.stat(i.path).st_mtime_ns) for i in infos})
    token = tokenize(name, [(i.path, i.name) for i in infos], stamps)
    meta = np.empty((0,) * len(shapes[0]), first.dtype)
    if len(set(shapes)) == 1:
        shape = shapes[0]
        grid = chunks(0, first, shape, False)

        def build(i: int) -> da.Array:
            return da.from_array(
                HDF5Block(infos[i], at, shape),
                chunks=grid,
                name=f"replay-{name}-{token}-{tokenize(grid)}-{i}",
                meta=meta,
            )

        return ReplayArray(name, steps, shape, first.dtype, grid, build, source, labels)
    layouts = [
        _grid_layout(shape, chunks(i, info, shape, True))
        for i, (info, shape) in enumerate(zip(infos, shapes, strict=True))
    ]
    check_layouts(name, source, steps, layouts, max_metadata_bytes)

    def box(i: int, k: int, grid: Chunks) -> da.Array:
        where = layouts[i].boxes[k]
        return da.from_array(
            HDF5Block(infos[i], at, where.count, origin=where.start),
            chunks=grid,
            name=f"replay-{name}-{token}-{tokenize(grid)}-{i}-{k}",
            meta=meta,
        )

    return MovingReplayArray(name, steps, layouts, first.dtype, box, source, labels)


def _grid_layout(shape: tuple[int, ...], chunks: Chunks) -> StepLayout:
    """The layout whose boxes are the cells of ``chunks`` (one a block, in C order)."""
    bounds = [np.cumsum((0, *c)).tolist() for c in chunks]
    boxes = tuple(
        Box(tuple(b[i] for b, i in zip(bounds, cell, strict=True)), count)
        for cell, count in zip(
            itertools.product(*(range(len(c)) for c in chunks)),
            itertools.product(*chunks),
            strict=True,
        )
    )
    return StepLayout(shape, boxes, (1,) * len(boxes))


def starts_of(groups: dict[str, dict[int, Dataset]], step: int) -> Dataset | None:
    """The ``block_start`` rows of ``step`` beside per-step datasets, if written."""
    return groups.get(BLOCKS_DATASET, {}).get(step)
