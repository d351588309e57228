"""Saved arrays held in one HDF5 file per rank, for :class:`deisa.Replay`
(``Replay("particles_${rank}.h5")``: what decl_hdf5 writes with a ``$rank`` in the file's name,
or h5py code of each rank writing its own file).

Each rank's file holds, for each step, that rank's part of the step, in datasets named by step
(:data:`~deisa.analysis._replay_per_step.PER_STEP_NAME`: ``x_3``, ``x/step_0003``...):

- **joined** (particles): one dataset a rank and step, without a ``start`` attribute; the
  ranks' datasets of a step follow one another along the first axis in rank order (ADIOS2's
  ``JoinedDim``, :meth:`~deisa.wire.layout.StepLayout.joined`), a rank without the dataset at
  a step holding nothing of it;
- **boxes** (a field in several boxes a rank, an AMR level): datasets with an integer ``start``
  attribute (the box's first index in the step's global shape), any number a rank and step,
  named ``<name>_<step>_<box>`` (or ``<name>/step_<step>/<box>``..., :data:`BOX_NAME`; one box a
  rank may keep the per-step name), in box-number order within the rank. The step's global
  shape is the boxes' ``shape`` attribute where they give one (they must agree), else the
  smallest that holds them all. The step's layout is the live run's: one parcel a rank that
  holds an element, its boxes in order.

decl_hdf5 writes a box's start from a PDI data of the box (an ``int[ndim]``) with
``attributes: {start: $box_start}`` in the box's ``write`` entry.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Sequence

import dask.array as da
import numpy as np
from dask.base import tokenize

from ..wire.layout import Box, LayoutError, StepLayout
from . import _labels
from ._replay_array import ReplayArray, ReplayError
from ._replay_hdf5 import Dataset, HDF5Block
from ._replay_moving import MovingReplayArray, check_layouts, layout_error
from ._replay_per_step import PER_STEP_NAME

__all__ = ["BOX_NAME", "group_per_rank", "per_rank_array"]

#: a box of a step: ``<name>_<step>_<box>``, ``<name>/step_<step>/box_<box>``...
BOX_NAME = re.compile(r"(?P<name>.+?)[/_](?:step_?)?(?P<step>\d+)[/_](?:box_?)?(?P<box>\d+)")

Chunks = tuple[tuple[int, ...], ...]


def group_per_rank(datasets: Iterable[Dataset]) -> dict[str, dict[int, list[Dataset]]]:
    """One rank's datasets named by step, by array name, then step number: a list of the
    rank's boxes of the step (those with a ``start`` attribute, in box-number order), or of
    its one dataset (two of one array and step, ``x_3`` and ``x_03``: the first in name
    order)."""
    groups: dict[str, dict[int, list[Dataset]]] = {}
    boxes: dict[tuple[str, int], list[tuple[int, Dataset]]] = {}
    for info in sorted(datasets, key=lambda d: d.name):
        boxed = info.start is not None or info.problem is not None  # the latter: said when read
        match = BOX_NAME.fullmatch(info.name) if boxed else None
        if match is not None:
            key = (match["name"], int(match["step"]))
            boxes.setdefault(key, []).append((int(match["box"]), info))
            continue
        match = PER_STEP_NAME.fullmatch(info.name)
        if match is not None:
            groups.setdefault(match["name"], {}).setdefault(int(match["step"]), [info])
    for (name, step), found in boxes.items():
        held = groups.setdefault(name, {}).setdefault(step, [])
        held.extend(info for _, info in sorted(found, key=lambda b: b[0]))
    return groups


def per_rank_array(
    name: str,
    ranks: Sequence[dict[int, list[Dataset]]],
    *,
    source: str,
    dims: Sequence[str] | None,
    steps: Sequence[int] | None,
    max_metadata_bytes: int,
) -> ReplayArray:
    """The array ``name`` whose step ``s`` is the ranks' datasets ``ranks[r][s]`` (one mapping
    a rank's file, :func:`group_per_rank`): joined along their first axis in rank order, or
    boxes placed at their ``start``; its steps are those some rank wrote (``steps``: their
    numbers, given instead).

    Raises
    ------
    ReplayError
        Naming the file, the dataset and the step: the datasets differ in dtype or number of
        axes, joined ones in their other axes, a step mixes boxes and joined datasets, boxes
        give other shapes or do not fit the step's shape; or ``steps`` of another length.
    """
    numbers = sorted({step for rank in ranks for step in rank})
    if steps is not None and len(steps) != len(numbers):
        raise ReplayError(
            f"steps= gives {len(steps)} step numbers for the {len(numbers)} steps of {name!r}"
        )
    first = next(rank[numbers[0]][0] for rank in ranks if numbers[0] in rank)
    layouts, held = [], []
    for step in numbers:
        per_rank = [rank.get(step, []) for rank in ranks]
        for info in (info for infos in per_rank for info in infos):
            if info.problem is not None:
                raise ReplayError(info.problem)
            if info.dtype != first.dtype or len(info.shape) != len(first.shape) or not info.shape:
                joined = "do not join along their first axis"
                what = "are not boxes of one array" if info.start is not None else joined
                raise ReplayError(
                    f"the ranks' datasets of {name!r} at step {step} {what}: "
                    f"{first.path}:{first.name} holds {first.shape} {first.dtype}, "
                    f"{info.path}:{info.name} {info.shape} {info.dtype}"
                )
        try:
            layout, holding = _step_layout(name, step, per_rank)
        except LayoutError as exc:
            raise layout_error(name, source, step, exc) from None
        layouts.append(layout)
        held.append(holding)
    numbers = list(steps) if steps is not None else numbers
    check_layouts(name, source, numbers, layouts, max_metadata_bytes)
    token = tokenize(name, [[(i.path, i.name, i.shape) for i in h] for h in held])
    meta = np.empty((0,) * len(first.shape), first.dtype)

    def box(i: int, k: int, grid: Chunks) -> da.Array:
        info = held[i][k]
        return da.from_array(
            HDF5Block(info, None, info.shape),
            chunks=grid,
            name=f"replay-{name}-{token}-{tokenize(grid)}-{i}-{k}",
            meta=meta,
        )

    labels = _labels.chosen(name, first.dims, dims, len(first.shape), source)
    return MovingReplayArray(name, numbers, layouts, first.dtype, box, source, labels)


def _step_layout(
    name: str, step: int, per_rank: Sequence[Sequence[Dataset]]
) -> tuple[StepLayout, list[Dataset]]:
    """One step's layout from each rank's datasets of it, and the datasets of its boxes in box
    order (a rank's empty datasets are left out, as the live run leaves them)."""
    every = [info for infos in per_rank for info in infos]
    boxed = [info for info in every if info.start is not None]
    if boxed and len(boxed) != len(every):
        plain = next(info for info in every if info.start is None)
        raise ReplayError(
            f"{name!r} at step {step} mixes boxes and joined datasets: {boxed[0].path}:"
            f"{boxed[0].name} has a 'start' attribute, {plain.path}:{plain.name} has none"
        )
    holding = [[info for info in infos if math.prod(info.shape)] for infos in per_rank]
    kept = [infos for infos in holding if infos]  # a rank that holds no element: no parcel
    if not boxed:
        for infos in per_rank:
            for info in infos:
                if info.shape[1:] != every[0].shape[1:]:
                    raise ReplayError(
                        f"the ranks' datasets of {name!r} at step {step} do not join along "
                        f"their first axis: {every[0].path}:{every[0].name} holds "
                        f"{every[0].shape}, {info.path}:{info.name} {info.shape}"
                    )
        counts = [[info.shape for info in infos] for infos in kept]
        layout = StepLayout.joined(0, counts, shape=every[0].shape)
        return layout, [info for infos in kept for info in infos]
    for info in boxed:
        assert info.start is not None
        if len(info.start) != len(info.shape):
            raise ReplayError(
                f"{info.path}:{info.name}: its 'start' attribute {list(info.start)} does not "
                f"give one index an axis of its {len(info.shape)} axes"
            )
    given = {info.whole for info in boxed if info.whole is not None}
    if len(given) > 1:
        a, b = sorted(given)[:2]
        raise ReplayError(
            f"the boxes of {name!r} at step {step} give two shapes of the step: {a} and {b}"
        )
    if given:
        shape = next(iter(given))
    else:  # the smallest shape that holds every box
        stops = [[s + n for s, n in zip(i.start or (), i.shape, strict=True)] for i in boxed]
        shape = tuple(int(max(axis)) for axis in zip(*stops, strict=True))
    boxes = tuple(Box(info.start or (), info.shape) for infos in kept for info in infos)
    layout = StepLayout(shape, boxes, tuple(len(infos) for infos in kept))
    return layout, [info for infos in kept for info in infos]
