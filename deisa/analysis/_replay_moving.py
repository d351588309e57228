"""Saved arrays whose shape or blocks change from step to step, for :class:`deisa.Replay`.

A particle array whose length changes at every step, a field written as several boxes per
writer, boxes that move between writers, a refined level covering part of the domain: each
step of such an array has its own global shape and blocks, a
:class:`~deisa.wire.layout.StepLayout`, as the live run publishes it (issue 56's model). A
:class:`MovingReplayArray` holds one layout per saved step, read from the file's metadata
(ADIOS2's blocks of the step: :func:`bp_layout`; HDF5's per-step datasets and their
``block_start`` rows: :mod:`deisa.analysis.replay`), and hands out each step as the live
:class:`~deisa.Adapter` does: :func:`deisa.analysis.moving.assemble` of one lazy dask array per
box (read by whichever process computes it, nothing read before), chunked as written and cut
finer where the boxes do not form a grid; a region no box holds is a
:class:`~deisa.analysis.moving.MissingRegionError` naming it unless the step is read with a
``fill`` value; :meth:`MovingReplayArray.blocks` gives the boxes apart.

What a file declares is checked before anything is sized from it: a layout whose boxes do not
fit the step's shape, or a step whose grid of boxes would take more than
``max_metadata_bytes``, is a :class:`ReplayError` naming the file and the step, at
``replay[name]``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import dask.array as da
import numpy as np

from ..wire.layout import Box, LayoutError, StepLayout
from ._parcels import Block
from ._reading import NoFixedShapeError, summary
from ._replay_array import ReplayArray, ReplayError
from .moving import assemble, grid_edges

__all__ = ["MovingReplayArray", "bp_layout", "check_layouts", "layout_error"]

#: reads box ``k`` of the ``i``-th saved step, as a dask array of these chunks (lazily)
BoxReader = Callable[[int, int, tuple[tuple[int, ...], ...]], da.Array]


def bp_layout(
    shape: tuple[int, ...], blocks: Sequence[tuple[tuple[int, ...], tuple[int, ...], int]]
) -> StepLayout:
    """One step's layout from the blocks ADIOS2 lists for it (``(start, count, writer)``):
    the writers' blocks in writer (rank) order, each writer's in the order it put them, one
    parcel per writer holding an element, as the live run's ranks publish them; a writer whose
    blocks hold no element this step has none (the live model's rank that sends no parcel).

    A ``JoinedDim`` array's starts are those ADIOS2 computes on reading, the blocks one after
    another along the joined axis in writer then block order, which is
    :meth:`~deisa.wire.layout.StepLayout.joined`'s placement.

    Raises
    ------
    deisa.wire.layout.LayoutError
        A block with another number of axes than ``shape``, or outside it.
    """
    by_writer: dict[int, list[Box]] = {}
    for start, count, writer in sorted(blocks, key=lambda b: b[2]):  # stable: put order kept
        by_writer.setdefault(writer, []).append(Box(start, count))
    kept = [boxes for _, boxes in sorted(by_writer.items()) if any(b.size for b in boxes)]
    return StepLayout(shape, tuple(b for boxes in kept for b in boxes), tuple(map(len, kept)))


def check_layouts(
    name: str, source: str, steps: Sequence[int], layouts: Sequence[StepLayout], cap: int
) -> None:
    """Refuse a step whose boxes would cut its shape into a grid over ``cap`` bytes (what
    assembling it sizes), naming the step."""
    for step, layout in zip(steps, layouts, strict=True):
        edges = grid_edges(layout)
        cells = math.prod(max(len(e) - 1, 0) for e in edges)
        if cells * 8 > cap:
            raise ReplayError(
                f"the {len(layout.boxes)} blocks of {name!r} at step {step} in {source} cut its "
                f"shape {layout.shape} into {' x '.join(str(len(e) - 1) for e in edges)} pieces: "
                f"assembling it would take {cells * 8} bytes, over max_metadata_bytes={cap} "
                "(raise it for a file you trust)"
            )


def _cells(layout: StepLayout, box: Box) -> tuple[tuple[int, ...], ...]:
    """The chunks of ``box``: the cells of the step's grid that it spans."""
    chunks = []
    for axis, edges in enumerate(grid_edges(layout)):
        lo, hi = box.start[axis], box.stop[axis]
        inside = [e for e in edges if lo <= e <= hi] if box.size else [lo, hi]
        chunks.append(tuple(np.diff(inside).tolist()) or (0,))
    return tuple(chunks)


class MovingReplayArray(ReplayArray):
    """A saved array whose steps each have their own shape and blocks: the reading interface of
    a live moving array (:class:`~deisa.analysis.adapter.ArrayDescriptor`'s), over saved steps.

    Each step is assembled from its boxes (chunked as written); where they do not cover its
    shape, ``array[t]`` raises :class:`~deisa.analysis.moving.MissingRegionError` naming the
    regions: read the boxes (:meth:`blocks`), one step with a fill value (:meth:`step`), or set
    :attr:`fill` for every step. :attr:`shape` is the steps' one shape, if they share one;
    stacking steps of different shapes (``array[0:10]``, windows) raises
    :class:`~deisa.analysis._reading.StepShapesDifferError` naming two.

    Parameters
    ----------
    name, steps, dtype, source, dims
        As :class:`~deisa.analysis._replay_array.ReplayArray`'s.
    layouts
        Each saved step's layout (its shape and boxes), in step order.
    box
        ``box(i, k, chunks)``: box ``k`` of the ``i``-th saved step as a lazy dask array of
        those chunks.
    chunks
        ``Replay(chunks=...)``: each step's array rechunked so (anything
        :func:`dask.array.core.normalize_chunks` takes); default: as written.
    """

    moving = True

    def __init__(
        self,
        name: str,
        steps: Sequence[int],
        layouts: Sequence[StepLayout],
        dtype: np.dtype,
        box: BoxReader,
        source: str,
        dims: tuple[str, ...] | None = None,
        chunks: Any = None,
    ) -> None:
        self._layouts = list(layouts)
        shapes = {layout.shape for layout in self._layouts}
        common = next(iter(shapes)) if len(shapes) == 1 else None
        super().__init__(name, steps, common or (), dtype, (), self._assembled, source, dims)
        self._common = common
        self._ndim = self._layouts[0].ndim if self._layouts else 0
        self._box = box
        self._spec = chunks

    @property
    def shape(self) -> tuple[int, ...]:
        """The spatial shape every step has.

        Raises
        ------
        NoFixedShapeError
            The steps have different shapes (the message names two): ask one step's,
            :meth:`shape_of` or ``array[t].shape``.
        """
        if self._common is None:
            first = self._layouts[0]
            i = next(i for i, lay in enumerate(self._layouts) if lay.shape != first.shape)
            raise NoFixedShapeError(
                f"{self.name!r} changes its shape from step to step ({first.shape} at step "
                f"{self._seen[0]}, {self._layouts[i].shape} at step {self._seen[i]}): ask one "
                "step's, shape_of(step) or array[step].shape"
            )
        return self._common

    @property
    def ndim(self) -> int:
        """Number of spatial axes (the same at every step)."""
        return self._ndim

    @property
    def chunks(self) -> tuple[tuple[int, ...], ...]:
        """The chunks every step has (as written).

        Raises
        ------
        NoFixedShapeError
            The steps' chunks differ: ask one step's, ``array[step].chunks``.
        """
        grids = {
            tuple(tuple(np.diff(e).tolist()) for e in grid_edges(lay)) for lay in self._layouts
        }
        if self._spec is None and len(grids) == 1 and self._common is not None:
            return next(iter(grids))
        if self._spec is not None and self._common is not None:
            return da.core.normalize_chunks(self._spec, self._common, dtype=self._dtype)
        raise NoFixedShapeError(
            f"the chunks of {self.name!r} change from step to step (its blocks do): ask one "
            "step's, array[step].chunks"
        )

    def layout(self, step: int) -> StepLayout:
        """``step``'s global shape and boxes, as the file lists them."""
        return self._layouts[self._index[self._resolve_int(step)]]

    def _step_shape(self, step: int) -> tuple[int, ...]:
        return self._layouts[self._index[step]].shape

    def blocks(self, step: int) -> list[Block]:
        """Every box of ``step`` as written: ``(start, count, array)`` each
        (:class:`~deisa.analysis._parcels.Block`), ``array`` its lazy dask array (one chunk), in
        the layout's order (writer by writer, empty ones of a writer holding elements
        included); works where ``array[step]`` raises
        :class:`~deisa.analysis.moving.MissingRegionError`."""
        i = self._index[self._resolve_int(step)]
        return [
            Block(box.start, box.count, self._box(i, k, tuple((c,) for c in box.count)))
            for k, box in enumerate(self._layouts[i].boxes)
        ]

    def _assembled(self, i: int, fill: Any = None) -> da.Array:
        layout = self._layouts[i]
        arrays = [self._box(i, k, _cells(layout, box)) for k, box in enumerate(layout.boxes)]
        what = f"step {self._seen[i]} of {self.name!r} in {self.source}"
        array = assemble(layout, arrays, fill=fill, dtype=self._dtype, what=what)
        if self._spec is not None:
            array = array.rechunk(da.core.normalize_chunks(self._spec, layout.shape, self._dtype))
        return array

    def _step_array(self, step: int) -> da.Array:
        return self._assembled(self._index[step], self.fill)

    def _filled_step(self, step: int, fill: Any) -> da.Array:
        return self._assembled(self._index[step], fill)

    def __repr__(self) -> str:
        shape = self._common if self._common is not None else "changing from step to step"
        return (
            f"<ReplayArray {self.name!r}: {len(self._seen)} steps saved "
            f"({summary(self._seen)}), shape {shape}, from {self.source}>"
        )


def layout_error(name: str, source: str, step: int, exc: LayoutError) -> ReplayError:
    """``exc`` (a step's blocks that do not hold together) as a replay error naming where."""
    return ReplayError(f"the blocks of {name!r} at step {step} in {source}: {exc}")
