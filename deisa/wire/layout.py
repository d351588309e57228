"""The layout of one step of a *moving* array: that step's global shape and its blocks.

An array whose shape, blocks or owners change from step to step (particles, several boxes a
rank, boxes that move between ranks) is published step by step with its layout: a
:class:`StepLayout` is that step's global shape and its :class:`Box` es, each a start and a count
in that step's shape. A step's blocks travel in *parcels*: one key on a worker per publishing
rank, which holds the rank's boxes of the step one after another, each in C order, as one 1-D
array of the array's dtype (:meth:`StepLayout.offsets`). The step's keys are its parcels, in
order; ``parcels[i]`` boxes of :attr:`StepLayout.boxes` are in key ``i``.

Rank 0 builds a step's layout from what each rank reported with its parcel (:meth:`joined`
computes a joined axis's starts from the counts, in rank order, as ADIOS2's ``JoinedDim``
does), sends it with the step's ``deisa_publish`` (:meth:`to_wire`), the scheduler keeps it with
the step and hands it to the analytics with the step's keys (:meth:`from_wire`), which
assembles the step's dask array (:mod:`deisa.analysis.moving`). :class:`deisa.Replay` builds
the same layout from a file's blocks.

An array with one shape and one block per rank for the whole run (the heat solver's) has no
layout: its decomposition, declared once, says where each block lies.

Shared by every process (imports nothing of deisa).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

__all__ = ["Box", "LayoutError", "StepLayout"]


class LayoutError(ValueError):
    """A step's layout that does not hold together (a box outside the shape, counts that do not
    match the axes); the message names the box."""


def _ints(values: Iterable[Any], what: str) -> tuple[int, ...]:
    try:
        out = tuple(int(v) for v in values)
    except (TypeError, ValueError) as exc:
        raise LayoutError(f"{what}={values!r} must be a sequence of integers") from exc
    if any(v < 0 for v in out):
        raise LayoutError(f"{what}={out} must not be negative")
    return out


@dataclass(frozen=True)
class Box:
    """One block of a step: where it starts and how many elements it has along each axis, in
    that step's global shape. A count of 0 along some axis (an empty block) is allowed."""

    start: tuple[int, ...]
    count: tuple[int, ...]

    def __post_init__(self) -> None:
        object.__setattr__(self, "start", _ints(self.start, "start"))
        object.__setattr__(self, "count", _ints(self.count, "count"))
        if len(self.start) != len(self.count):
            raise LayoutError(
                f"start {self.start} and count {self.count} have different numbers of axes"
            )

    @property
    def stop(self) -> tuple[int, ...]:
        """Where the box ends (exclusive), along each axis."""
        return tuple(s + c for s, c in zip(self.start, self.count, strict=True))

    @property
    def size(self) -> int:
        """Its number of elements."""
        return math.prod(self.count)

    @property
    def slices(self) -> tuple[slice, ...]:
        """Its region of the step's global array."""
        return tuple(slice(s, e) for s, e in zip(self.start, self.stop, strict=True))

    def __str__(self) -> str:
        return "[" + ", ".join(f"{s}:{e}" for s, e in zip(self.start, self.stop, strict=True)) + "]"


@dataclass(frozen=True)
class StepLayout:
    """One step of a moving array: its global ``shape``, its ``boxes``, and how many of them
    each parcel (each key of the step, in order) holds.

    Raises
    ------
    LayoutError
        Naming the box: one with another number of axes than ``shape``, or outside it; parcel
        counts that do not add up to the boxes.

    Examples
    --------
    >>> layout = StepLayout((10,), (Box((0,), (4,)), Box((4,), (6,))), (1, 1))
    >>> layout.offsets()
    (0, 0)
    >>> StepLayout.from_wire(layout.to_wire()) == layout
    True
    """

    shape: tuple[int, ...]
    boxes: tuple[Box, ...]
    parcels: tuple[int, ...]

    def __post_init__(self) -> None:
        object.__setattr__(self, "shape", _ints(self.shape, "shape"))
        object.__setattr__(self, "boxes", tuple(self.boxes))
        object.__setattr__(self, "parcels", _ints(self.parcels, "parcels"))
        if sum(self.parcels) != len(self.boxes):
            raise LayoutError(
                f"the parcels hold {sum(self.parcels)} boxes in all, the layout has "
                f"{len(self.boxes)}"
            )
        for i, box in enumerate(self.boxes):
            if len(box.start) != len(self.shape):
                raise LayoutError(
                    f"box {i} {box} has {len(box.start)} axes, the step's shape {self.shape} "
                    f"has {len(self.shape)}"
                )
            if any(e > n for e, n in zip(box.stop, self.shape, strict=True)):
                raise LayoutError(f"box {i} {box} lies outside the step's shape {self.shape}")

    @property
    def ndim(self) -> int:
        return len(self.shape)

    def parcel_of(self) -> tuple[int, ...]:
        """The parcel (key index) that holds each box, in box order."""
        return tuple(p for p, n in enumerate(self.parcels) for _ in range(n))

    def offsets(self) -> tuple[int, ...]:
        """Each box's first element within its parcel (the parcel's boxes lie one after another,
        each flattened in C order)."""
        out: list[int] = []
        i = 0
        for n in self.parcels:
            offset = 0
            for box in self.boxes[i : i + n]:
                out.append(offset)
                offset += box.size
            i += n
        return tuple(out)

    def parcel_sizes(self) -> tuple[int, ...]:
        """Each parcel's number of elements."""
        sizes, i = [], 0
        for n in self.parcels:
            sizes.append(sum(box.size for box in self.boxes[i : i + n]))
            i += n
        return tuple(sizes)

    @classmethod
    def joined(
        cls,
        axis: int,
        counts: Sequence[Sequence[Sequence[int]]],
        shape: Sequence[int] | None = None,
    ) -> StepLayout:
        """The layout of a *joined* array: each parcel's boxes (``counts[p]``: each box's count,
        in the parcel's order) follow one another along ``axis``, in parcel order (the ranks'
        order), as ADIOS2's ``JoinedDim`` places them. The other axes are whole: every box has
        the step's size along them (``shape``'s, or the first box's when ``shape`` is None).

        Raises
        ------
        LayoutError
            Naming the parcel and box whose other axes differ.

        >>> StepLayout.joined(0, [[(3,)], [], [(2,), (0,)]]).boxes[1]
        Box(start=(3,), count=(2,))
        """
        flat = [(p, _ints(c, "count")) for p, boxes in enumerate(counts) for c in boxes]
        if shape is not None:
            ref: tuple[int, ...] | None = _ints(shape, "shape")
        elif flat:
            ref = flat[0][1]
        else:
            ref = None
        if ref is None:  # nobody publishes anything this step: an empty 1-D array along axis 0
            if axis != 0:
                raise LayoutError(f"a joined step with no box needs its shape (joined axis {axis})")
            return cls((0,), (), tuple(len(b) for b in counts))
        if not 0 <= axis < len(ref):
            raise LayoutError(f"joined axis {axis} is not an axis of a {len(ref)}-D array")
        boxes, offset = [], 0
        for p, count in flat:
            others = count[:axis] + count[axis + 1 :]
            if len(count) != len(ref) or others != ref[:axis] + ref[axis + 1 :]:
                raise LayoutError(
                    f"parcel {p}: a box of count {count} does not span the other axes of the "
                    f"joined array ({ref} but along axis {axis})"
                )
            start = tuple(offset if a == axis else 0 for a in range(len(ref)))
            boxes.append(Box(start, count))
            offset += count[axis]
        total = tuple(offset if a == axis else n for a, n in enumerate(ref))
        return cls(total, tuple(boxes), tuple(len(b) for b in counts))

    # -- on the wire (plain lists: msgpack-able, nothing pickled) ------------------------------

    def to_wire(self) -> dict[str, Any]:
        """Plain form: ``{"shape": [...], "boxes": [[*start, *count], ...], "parcels": [...]}``."""
        return {
            "shape": list(self.shape),
            "boxes": [[*b.start, *b.count] for b in self.boxes],
            "parcels": list(self.parcels),
        }

    @classmethod
    def from_wire(cls, data: Any) -> StepLayout:
        """The layout :meth:`to_wire` wrote; :class:`LayoutError` if it is not one."""
        try:
            shape = _ints(data["shape"], "shape")
            ndim = len(shape)
            boxes = []
            for row in data["boxes"]:
                row = _ints(row, "box")
                if len(row) != 2 * ndim:
                    raise LayoutError(f"box {row} is not a start and a count of {ndim} axes")
                boxes.append(Box(row[:ndim], row[ndim:]))
            return cls(shape, tuple(boxes), _ints(data["parcels"], "parcels"))
        except (KeyError, TypeError) as exc:
            raise LayoutError(f"not a step layout: {data!r:.200}") from exc
