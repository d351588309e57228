"""A rank's boxes of one step of a moving array: checked, described, packed; and the step's
layout that rank 0 builds from every rank's description.

:meth:`deisa.Bridge.publish` takes, beside today's one block of a fixed array, one box at a
``start`` in the step's ``shape``, a list of ``(start, array)`` boxes, or (a *joined* array,
:meth:`~deisa.bridge.arrays.decomposition.ArraySpec.moving` with ``joined_axis``) a list of arrays.
:func:`parcel_of` checks them on the rank and makes a :class:`Parcel`: the boxes holding
elements (the empty ones are left out), and their *geometry*, the plain description that
travels to rank 0 with the rank's "sent" report (the exchange, the notices, ``mode="sync"``'s
gather): ``(shape or None, boxes)``, each box ``(*start, *count)``, or ``(*count,)`` for a
joined array. The rank sends its boxes as one *parcel*, one key
``(step key, rank)`` on its worker: one box as it is, several one after another in one 1-D
array, each flattened in C order (:meth:`Parcel.pack`, one copy per box straight from the
simulation's memory); a rank with no element sends none.

Rank 0 builds the step's :class:`~deisa.wire.layout.StepLayout` from every rank's geometry
(:func:`step_layout`; a joined axis's offsets from the counts, in rank order: no collective)
and sends it with the step's one ``deisa_publish``. A fixed array's step published plain by
every rank has no layout (today's path); one where some rank gave boxes or a shape has one, the
plain ranks contributing their declared block.

Runs in a simulation rank, pure: on its main thread (:func:`parcel_of`, :meth:`Parcel.pack`)
and rank 0's loop thread (:func:`step_layout`).

Imports numpy, :mod:`.decomposition` and :mod:`deisa.wire.layout` only.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ...wire.layout import Box, LayoutError, StepLayout
from .decomposition import Decomposition

__all__ = ["Geometry", "Parcel", "check_geometry", "parcel_of", "step_layout"]

Geometry = tuple[tuple[int, ...] | None, tuple[tuple[int, ...], ...]]
"""A rank's boxes of a step, in plain form: ``(shape or None, ((*start, *count), ...))``; a
joined array's boxes are ``(*count,)``. ``None`` in place of a geometry: a fixed array's
block published plain (its declared block)."""

MAX_BOXES = 4096
"""Most boxes one rank gives an array in one step (a geometry from elsewhere is refused past it)."""


@dataclass(frozen=True)
class Parcel:
    """This rank's boxes of one step, checked (:func:`parcel_of`).

    Attributes
    ----------
    arrays : tuple of numpy.ndarray
        The boxes that hold elements, in the order given.
    geometry : Geometry
        Their description for rank 0 (empty boxes left out; a joined array keeps its first
        empty box's count when it has no other, so that rank 0 knows the other axes).
    """

    arrays: tuple[np.ndarray, ...]
    geometry: Geometry

    @property
    def size(self) -> int:
        """Its number of elements (0: the rank sends nothing this step)."""
        return sum(int(a.size) for a in self.arrays)

    @property
    def shape(self) -> tuple[int, ...]:
        """The shape of the parcel's array: its box's for one box, else 1-D."""
        if len(self.arrays) == 1:
            return tuple(self.arrays[0].shape)
        return (self.size,)

    def pack(self, out: np.ndarray) -> None:
        """Copy the boxes into ``out`` (of :attr:`shape`), one after another, each in C order."""
        if len(self.arrays) == 1:
            np.copyto(out, self.arrays[0])
            return
        flat, offset = out.reshape(-1), 0
        for array in self.arrays:
            np.copyto(flat[offset : offset + array.size].reshape(array.shape), array)
            offset += array.size


def _non_negative_ints(value: Any, n: int, what: str) -> tuple[int, ...]:
    """``value`` as ``n`` non-negative integers; ``ValueError`` naming ``what`` otherwise."""
    try:
        out = tuple(int(v) for v in value)
        if any(isinstance(v, (bool, float)) for v in value):
            raise TypeError
    except (TypeError, ValueError):
        raise ValueError(f"{what}={value!r} must be a sequence of {n} integers") from None
    if len(out) != n or any(v < 0 for v in out):
        raise ValueError(f"{what}={value!r} must be {n} non-negative integers")
    return out


def _array(value: Any, dec: Decomposition, what: str) -> np.ndarray:
    if not isinstance(value, np.ndarray):
        raise ValueError(f"{what} of {dec.name!r} is a {type(value).__name__}, not a numpy array")
    if value.ndim != dec.ndim:
        raise ValueError(f"{what} of {dec.name!r} has {value.ndim} axes, declared {dec.ndim}")
    if value.dtype != dec.dtype:
        raise ValueError(f"{what} of {dec.name!r} has dtype {value.dtype}, declared {dec.dtype}")
    return value


def parcel_of(dec: Decomposition, block: Any, start: Any, shape: Any) -> Parcel | None:
    """This rank's boxes of a step of ``dec``'s array as ``publish`` got them: ``None`` for a
    fixed array's block published plain (no ``start``, no ``shape``, one array: today's path).

    Raises
    ------
    ValueError
        Saying what is wrong: not a numpy array, another dtype or number of axes, a ``start``
        or ``shape`` that are not integers of the array's axes, a box outside ``shape``, a
        ``start`` with a list of boxes, a ``start`` or ``shape`` for a joined array, a moving
        array's single box without its ``start``.
    """
    name, ndim = dec.name, dec.ndim
    many = isinstance(block, (list, tuple))
    if not dec.is_moving and not many and start is None and shape is None:
        return None
    joined = dec.joined_axis is not None
    if joined and (start is not None or shape is not None):
        raise ValueError(
            f"{name!r} is joined along axis {dec.joined_axis}: its boxes are placed from the "
            "ranks' counts, in rank order; give no start= or shape="
        )
    step_shape = None if shape is None else _non_negative_ints(shape, ndim, "shape")
    if many and start is not None:
        raise ValueError(f"start={start!r} with a list of boxes of {name!r}: each box has its own")
    if many and len(block) > MAX_BOXES:
        raise ValueError(f"{len(block)} boxes of {name!r}: at most {MAX_BOXES} a rank and step")
    if joined:
        arrays = (
            [_array(a, dec, f"box {i}") for i, a in enumerate(block)]
            if many
            else [_array(block, dec, "block")]
        )
        full = [a for a in arrays if a.size]
        kept = full or arrays[:1]
        return Parcel(tuple(full), (None, tuple(tuple(a.shape) for a in kept)))
    if not many:
        if start is None:
            raise ValueError(
                f"a box of the moving array {name!r} needs its start= (and the step's shape= "
                "on some rank), or give a list of (start, array) boxes"
            )
        block = [(start, block)]
    boxes: list[tuple[tuple[int, ...], np.ndarray]] = []
    for i, pair in enumerate(block):
        if not isinstance(pair, (list, tuple)) or len(pair) != 2:
            raise ValueError(f"box {i} of {name!r} is not a (start, array) pair")
        box_start = _non_negative_ints(pair[0], ndim, f"start of box {i}")
        array = _array(pair[1], dec, f"box {i}")
        if step_shape is not None and any(
            s + c > n for s, c, n in zip(box_start, array.shape, step_shape, strict=True)
        ):
            raise ValueError(
                f"box {i} {Box(box_start, array.shape)} of {name!r} lies outside the step's "
                f"shape {step_shape}"
            )
        if array.size:
            boxes.append((box_start, array))
    geometry = (step_shape, tuple((*s, *a.shape) for s, a in boxes))
    return Parcel(tuple(a for _, a in boxes), geometry)


def check_geometry(value: Any) -> Geometry | None:
    """A geometry received in plain form (JSON lists), as :data:`Geometry`; ``ValueError``
    saying why it is not one (integers only, at most :data:`MAX_BOXES` boxes)."""
    if value is None:
        return None
    if not isinstance(value, (list, tuple)) or len(value) != 2:
        raise ValueError("a geometry is a [shape, boxes] pair")
    shape, boxes = value
    if not isinstance(boxes, (list, tuple)) or len(boxes) > MAX_BOXES:
        raise ValueError(f"a geometry's boxes are a list of at most {MAX_BOXES}")

    def ints(row: Any) -> tuple[int, ...]:
        if not isinstance(row, (list, tuple)) or not all(
            isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in row
        ):
            raise ValueError("a geometry holds lists of non-negative integers")
        return tuple(row)

    return (None if shape is None else ints(shape), tuple(ints(b) for b in boxes))


def step_layout(
    dec: Decomposition, geometries: Sequence[tuple[int, Geometry | None]]
) -> tuple[StepLayout, list[int]] | None:
    """Rank 0: the layout of a step of ``dec``'s array from each sending rank's geometry
    (``(rank, geometry)`` in rank order; ``None``: a fixed array's block published plain), and
    the ranks whose parcels are the step's keys, in order; ``None`` for a fixed array's step
    published plain by every rank (no layout: today's path).

    Raises
    ------
    LayoutError
        Naming the ranks (the caller names the step): shapes that differ, no shape given (a
        moving array that is not joined), a box outside the shape, a joined array's boxes that
        do not span its other axes alike.
    """
    if not dec.is_moving and all(g is None for _, g in geometries):
        return None
    if dec.joined_axis is not None:
        return _joined(dec, geometries)
    given = [(rank, g[0]) for rank, g in geometries if g is not None and g[0] is not None]
    for rank, shape in given[1:]:
        if shape != given[0][1]:
            raise LayoutError(
                f"rank {rank} gives the shape {shape}, rank {given[0][0]} gives {given[0][1]}"
            )
    if given:
        shape = given[0][1]
    elif not dec.is_moving:
        shape = dec.global_shape
    else:
        raise LayoutError("no rank gave the step's shape= (at least one rank gives it)")
    assert shape is not None
    boxes: list[Box] = []
    parcels: list[int] = []
    ranks: list[int] = []
    for rank, geometry in geometries:
        if geometry is None:
            rank_boxes = [Box(*dec.declared_box(rank))]
        else:
            rank_boxes = [Box(b[: dec.ndim], b[dec.ndim :]) for b in geometry[1]]
        for box in rank_boxes:
            if len(box.start) != len(shape) or any(
                e > n for e, n in zip(box.stop, shape, strict=True)
            ):
                raise LayoutError(f"rank {rank}'s box {box} lies outside the step's shape {shape}")
        if rank_boxes:
            boxes += rank_boxes
            parcels.append(len(rank_boxes))
            ranks.append(rank)
    return StepLayout(shape, tuple(boxes), tuple(parcels)), ranks


def _joined(
    dec: Decomposition, geometries: Sequence[tuple[int, Geometry | None]]
) -> tuple[StepLayout, list[int]]:
    axis = dec.joined_axis
    assert axis is not None
    counts = [(rank, g[1]) for rank, g in geometries if g is not None]
    ref: tuple[int, ...] | None = None
    for rank, boxes in counts:
        for count in boxes:
            others = count[:axis] + count[axis + 1 :]
            if ref is None:
                ref, ref_rank = others, rank
            elif others != ref or len(count) != dec.ndim:
                raise LayoutError(
                    f"rank {rank}'s box of count {count} and rank "
                    f"{ref_rank}'s do not span the same other axes of the array joined along "
                    f"axis {axis}"
                )
    full = [(rank, [c for c in boxes if math.prod(c)]) for rank, boxes in counts]
    full = [(rank, boxes) for rank, boxes in full if boxes]
    shape = None if ref is None else (*ref[:axis], 0, *ref[axis:])
    layout = StepLayout.joined(axis, [boxes for _, boxes in full], shape)
    return layout, [rank for rank, _ in full]
