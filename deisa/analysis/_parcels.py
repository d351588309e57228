"""A live step of a moving array from its parcels: one dask array per box, then the step's.

A step published with a layout (:mod:`deisa.wire.layout`: a moving array's, or a fixed array's
step whose blocks moved) has one key per publishing rank, its *parcel*: the rank's boxes one after
another, each flattened in C order. Each box becomes a one-chunk dask array, a task on the
parcel's key that takes a view of it (``parcel.reshape(-1)[o:o+n].reshape(count)``): it runs on
the worker holding the parcel and copies nothing. :func:`deisa.analysis.moving.assemble` places
the boxes in the step's shape.

Runs in the analytics' process (building graphs; the views run on the workers). Imports
:mod:`deisa.wire.layout` only.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import dask
import dask.array as da
import numpy as np

from ..wire.layout import LayoutError, StepLayout

__all__ = ["Block", "box_arrays", "declared_blocks"]


@dataclass(frozen=True)
class Block:
    """One block of a step: where it starts and its count along each axis, in the step's
    shape, and its lazy dask array (``count`` elements); unpacks as ``start, count, array``."""

    start: tuple[int, ...]
    count: tuple[int, ...]
    array: da.Array

    def __iter__(self) -> Iterator[Any]:
        return iter((self.start, self.count, self.array))


def box_view(parcel: Any, offset: int, count: tuple[int, ...], what: str) -> np.ndarray:
    """The box of ``count`` elements from ``offset`` in ``parcel`` (a view: no copy).

    Raises
    ------
    deisa.wire.layout.LayoutError
        The parcel is shorter than its layout says (``what`` names the box and the step).
    """
    flat = np.asarray(parcel).reshape(-1)
    size = math.prod(count)
    if offset + size > flat.size:
        raise LayoutError(
            f"{what}: its parcel holds {flat.size} elements, the layout puts the box at "
            f"[{offset}:{offset + size}] of it"
        )
    return flat[offset : offset + size].reshape(count)


def box_arrays(
    layout: StepLayout, parcels: Sequence[Any], dtype: np.dtype, what: str
) -> list[da.Array]:
    """One dask array per box of ``layout``, each a view of its parcel (``parcels``: one future
    per key of the step, in the layout's parcel order); ``what`` names the step in errors."""
    if len(parcels) != len(layout.parcels):
        raise LayoutError(
            f"{what}: its layout has {len(layout.parcels)} parcels, the step {len(parcels)} keys"
        )
    view = dask.delayed(box_view, pure=True)
    arrays = []
    for k, (box, offset, parcel) in enumerate(
        zip(layout.boxes, layout.offsets(), layout.parcel_of(), strict=True)
    ):
        task = view(parcels[parcel], offset, box.count, f"box {k} {box} of {what}")
        arrays.append(
            da.from_delayed(task, box.count, dtype=dtype, meta=np.empty((0,) * layout.ndim, dtype))
        )
    return arrays


def declared_blocks(array: da.Array) -> list[Block]:
    """The blocks of a step without layout: its dask array's chunks (the array's declared
    decomposition), each with its start and count in the step's array."""
    starts = [np.cumsum((0, *sizes[:-1])) for sizes in array.chunks]
    return [
        Block(
            tuple(int(starts[a][i]) for a, i in enumerate(index)),
            tuple(array.chunks[a][i] for a, i in enumerate(index)),
            array.blocks[index],
        )
        for index in np.ndindex(*array.numblocks)
    ]
