"""One step of a moving array as a dask array: its boxes, assembled on the grid they draw.

A moving array (particles, several boxes a rank, boxes that move: :mod:`deisa.wire.layout`)
has, at each step, a global shape and a set of boxes, each with its own dask array. This module
turns them into that step's dask array, the same for the live :class:`~deisa.Adapter` and for
:class:`~deisa.Replay`:

- chunked as written where the boxes form a grid (the ranks' blocks of a regular
  decomposition, a joined particle array's per-rank pieces), cut finer where they do not: each
  axis is cut at every box's start and end, so that each chunk lies in one box;
- where the boxes do not cover the step's shape (a refined AMR level), :func:`assemble` raises
  :class:`MissingRegionError` naming the regions no box holds, unless ``fill`` is given (the
  value of those regions);
- two boxes over the same region are an error naming both (a step's blocks are its data once).

Runs in the analytics' process (building graphs; the tasks are dask's slicing). Imports
:mod:`deisa.wire.layout` only.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from typing import Any

import dask.array as da
import numpy as np

from ..wire.layout import LayoutError, StepLayout

__all__ = ["MissingRegionError", "assemble", "grid_edges"]

_NAMED = 4  # regions named in an error message, at most


class MissingRegionError(LookupError):
    """Part of a step's shape that no block of the step holds (an AMR level covers part of the
    domain); the message names the regions and how to read the step anyway."""

    def __str__(self) -> str:  # LookupError quotes its message otherwise
        return str(self.args[0]) if self.args else ""


def grid_edges(layout: StepLayout) -> list[list[int]]:
    """Along each axis, where some box starts or ends, with 0 and the step's size."""
    edges = []
    for axis, n in enumerate(layout.shape):
        cuts = {0, n}
        for box in layout.boxes:
            if box.size:
                cuts.update((box.start[axis], box.stop[axis]))
        edges.append(sorted(cuts))
    return edges


def _owners(layout: StepLayout, edges: list[list[int]]) -> np.ndarray:
    """The box holding each cell of the grid ``edges`` draw (-1: none)."""
    grid = tuple(max(len(e) - 1, 0) for e in edges)
    owner = np.full(grid, -1, dtype=np.int64)
    position = [{edge: i for i, edge in enumerate(e)} for e in edges]
    for k, box in enumerate(layout.boxes):
        if not box.size:
            continue
        cells = tuple(
            slice(position[a][s], position[a][e])
            for a, (s, e) in enumerate(zip(box.start, box.stop, strict=True))
        )
        taken = owner[cells]
        if (taken >= 0).any():
            other = int(taken[taken >= 0].flat[0])
            raise LayoutError(
                f"boxes {other} {layout.boxes[other]} and {k} {box} of the step overlap: a step "
                "holds each element once (read the boxes apart with blocks(step))"
            )
        owner[cells] = k
    return owner


def _region(edges: list[list[int]], cell: tuple[int, ...]) -> str:
    return "[" + ", ".join(f"{e[i]}:{e[i + 1]}" for e, i in zip(edges, cell, strict=True)) + "]"


def assemble(
    layout: StepLayout,
    arrays: Sequence[da.Array],
    *,
    fill: Any = None,
    dtype: Any = None,
    what: str = "the step",
) -> da.Array:
    """``layout``'s step as one dask array, from each box's dask array (``arrays[k]`` of
    ``layout.boxes[k].count``).

    Parameters
    ----------
    layout
        The step's global shape and boxes.
    arrays
        One dask array per box, in the layout's order, each of its box's shape.
    fill
        The value of the regions no box holds; ``None`` (default): such regions are an error.
    dtype
        The array's dtype, needed when no box has an element (an empty step); else the boxes'.
    what
        How errors name the step (``"step 3 of 'rho'"``).

    Raises
    ------
    MissingRegionError
        Naming up to four regions of the step that no box holds, when ``fill`` is None.
    deisa.wire.layout.LayoutError
        Two boxes over one region; a box's array of another shape than its count.

    Examples
    --------
    >>> from deisa.wire.layout import Box, StepLayout
    >>> layout = StepLayout((6,), (Box((0,), (4,)), Box((4,), (2,))), (1, 1))
    >>> x = assemble(layout, [da.arange(4), da.arange(4, 6)])
    >>> x.chunks, int(x.sum().compute())
    (((4, 2),), 15)
    """
    if len(arrays) != len(layout.boxes):
        raise LayoutError(f"{what}: {len(layout.boxes)} boxes, {len(arrays)} arrays")
    for k, (box, array) in enumerate(zip(layout.boxes, arrays, strict=True)):
        if tuple(array.shape) != box.count:
            raise LayoutError(
                f"{what}: box {k} {box} holds an array of shape {tuple(array.shape)}, not "
                f"{box.count}"
            )
    if dtype is None:
        dtype = arrays[0].dtype if arrays else np.float64
    dtype = np.dtype(dtype)
    edges = grid_edges(layout)
    owner = _owners(layout, edges)
    if owner.size == 0 or 0 in layout.shape:
        return da.zeros(layout.shape, dtype=dtype)
    missing = np.argwhere(owner < 0)
    if len(missing) and fill is None:
        named = ", ".join(_region(edges, tuple(int(i) for i in c)) for c in missing[:_NAMED])
        more = f" and {len(missing) - _NAMED} more" if len(missing) > _NAMED else ""
        covered = sum(box.size for box in layout.boxes)
        raise MissingRegionError(
            f"{what}: its blocks hold {covered} of the {int(np.prod(layout.shape))} elements of "
            f"its shape {layout.shape}; no block holds {named}{more} (read the blocks with "
            "blocks(step), or assemble the step with a fill value: step(..., fill=np.nan))"
        )
    pieces: dict[tuple[int, ...], da.Array] = {}
    for cell in itertools.product(*(range(n) for n in owner.shape)):
        lo = tuple(e[i] for e, i in zip(edges, cell, strict=True))
        hi = tuple(e[i + 1] for e, i in zip(edges, cell, strict=True))
        shape = tuple(h - low for low, h in zip(lo, hi, strict=True))
        k = int(owner[cell])
        if k < 0:
            pieces[cell] = da.full(shape, fill, dtype=dtype)
            continue
        box = layout.boxes[k]
        piece = arrays[k]
        if box.count != shape:  # the box spans several cells: this one's part of it
            piece = piece[
                tuple(slice(a - s, b - s) for a, b, s in zip(lo, hi, box.start, strict=True))
            ]
        pieces[cell] = piece
    return da.block(_nested(pieces, owner.shape, ())).astype(dtype, copy=False)


def _nested(
    pieces: dict[tuple[int, ...], da.Array], grid: tuple[int, ...], at: tuple[int, ...]
) -> Any:
    """``pieces`` as the nested lists :func:`dask.array.block` takes."""
    if len(at) == len(grid):
        return pieces[at]
    return [_nested(pieces, grid, (*at, i)) for i in range(grid[len(at)])]
