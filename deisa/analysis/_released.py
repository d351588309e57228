"""The released DEISA client's formats, translated: its configuration files and its selections
(``arrays[name][t, x, y]``) as contracts and dask indices. Used by :mod:`deisa.analysis.compat`.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

import numpy as np
import yaml

GUIDE = "docs/migrating.md"


class NotSupportedError(NotImplementedError):
    """A call of the released DEISA client API that has no one-to-one form here; the message
    names the call and what to write instead (see ``docs/migrating.md``)."""


# -- the configuration file -------------------------------------------------------------------


@dataclass(frozen=True)
class Config:
    workers: int | None  # the workers to wait for
    arrays: dict[str, int | None]  # the deisa_arrays of a PDI YAML: name -> fixed time length


def read_config(path: str | os.PathLike[str]) -> Config:
    """What ``Deisa(scheduler_file, config)`` reads of ``config``.

    Two kinds of files are accepted: the launch configuration of the released examples
    (``config.yml``: ``workers``, the number of Dask workers to wait for), and a PDI YAML in
    the released plugin's grammar (``plugins: deisa: deisa_arrays:``, at the top or under
    ``pdi:``), of which the array names and their fixed time length are read.

    Raises
    ------
    ValueError
        The file is neither, or ``workers`` is not a positive integer.
    NotSupported
        An array's ``+timedim`` is not 0 (the time axis is the first one here).
    """
    with open(path) as f:
        doc = yaml.safe_load(f)
    doc = doc if isinstance(doc, dict) else {}
    workers = doc.get("workers")
    if workers is not None and (not is_int(workers) or workers < 1):
        raise ValueError(f"{path}: workers={workers!r} must be a positive integer")
    pdi = doc["pdi"] if isinstance(doc.get("pdi"), dict) else doc
    plugins = pdi.get("plugins")
    section = plugins.get("deisa") if isinstance(plugins, dict) else None
    if workers is None and not isinstance(section, dict):
        raise ValueError(
            f"{path} is neither a DEISA launch configuration (a `workers:` count, as the "
            "released examples' config.yml) nor a PDI YAML with a `deisa:` plugin section"
        )
    arrays: dict[str, int | None] = {}
    declared = section.get("deisa_arrays") if isinstance(section, dict) else None
    for name, desc in (declared or {}).items():
        desc = desc if isinstance(desc, dict) else {}
        timedim = desc.get("+timedim", 0)
        timedim = timedim[0] if isinstance(timedim, list) and len(timedim) == 1 else timedim
        if timedim != 0:
            raise NotSupportedError(
                f"array {name!r} of {path} has `+timedim: {timedim}'; the time axis is the "
                "first one here (the released plugin supported +timedim: 0 only): move it first"
            )
        size = desc.get("size")
        length = str(size[0]) if isinstance(size, list) and size else ""
        arrays[str(name)] = int(length) if length.isdigit() else None
    return Config(workers, arrays)


# -- selections -------------------------------------------------------------------------------

Axis = int | tuple[int, int, int]  # an index (the axis is dropped) or (start, stop, step)


@dataclass(frozen=True)
class Selection:
    """A released-style selection ``[t, x, y]`` checked against an array.

    ``time`` is an int step (negative: from the end of the stream) or a slice of steps with a
    positive step (bounds resolved when the time length is known); ``space`` one :data:`Axis`
    per spatial axis, resolved against the shape (non-empty).
    """

    time: int | slice
    space: tuple[Axis, ...]

    @classmethod
    def parse(
        cls, index: Any, name: str, shape: tuple[int, ...], time_length: int | None = None
    ) -> Selection:
        """The selection ``index`` of array ``name`` of spatial ``shape``: integers, slices
        with a positive step and one ``...``, as the released library took.

        Raises
        ------
        NotSupportedError
            A list, an array, ``None`` or a boolean index, or a selection of nothing.
        ValueError
            A slice step below 1 (the released library's error too).
        IndexError
            Too many indices, several ``...``, an integer out of the array's bounds.
        """
        items = index if isinstance(index, tuple) else (index,)
        for item in items:
            if not (item is Ellipsis or isinstance(item, slice) or is_int(item)):
                raise NotSupportedError(
                    f"arrays[{name!r}][...] with {item!r}: the released library took integers, "
                    "slices and ... only; select steps with a list through the Adapter: "
                    f"adapter[{name!r}][[0, 5], ...], then index the dask array it returns"
                )
        if sum(item is Ellipsis for item in items) > 1:
            raise IndexError("an index can only have a single ellipsis ('...')")
        ndim = 1 + len(shape)
        if Ellipsis in items:
            at = items.index(Ellipsis)
            items = items[:at] + (slice(None),) * (ndim - len(items) + 1) + items[at + 1 :]
        if len(items) > ndim:
            raise IndexError(f"too many indices for {name!r}: time + {ndim - 1} spatial axes")
        items = items + (slice(None),) * (ndim - len(items))
        sizes = (time_length, *shape)
        resolved: list[Any] = [
            _resolve(item, size, axis, name)
            for axis, (item, size) in enumerate(zip(items, sizes, strict=True))
        ]
        return cls(resolved[0], tuple(resolved[1:]))

    def released(self) -> list[tuple[int | None, int | None, int]]:
        """One ``(start, stop, step)`` per axis, time first, as ``check_contract()`` gave it
        (``None`` bounds: from the end of the stream, not known yet)."""
        t = self.time
        if isinstance(t, int):
            time = (t, t + 1 if t != -1 else None, 1)
        else:
            time = (t.start, t.stop, t.step)
        return [time, *((a, a + 1, 1) if isinstance(a, int) else a for a in self.space)]

    def box(self) -> tuple[tuple[int, int], ...]:
        """The bounding box of the spatial selection, in global indices."""
        return tuple(
            (a, a + 1) if isinstance(a, int) else (a[0], _last(*a) + 1) for a in self.space
        )

    def contract(self, shape: tuple[int, ...]) -> tuple[Any, Any] | None:
        """``(region, steps)`` for :meth:`ArrayDescriptor.require`; ``None``: everything."""
        box = self.box()
        full = all(b == (0, n) for b, n in zip(box, shape, strict=True))
        region = None if full else tuple(slice(lo, hi) for lo, hi in box)
        t = self.time
        steps: Any = None
        if isinstance(t, int):
            steps = range(t, t + 1) if t >= 0 else None
        elif t.start >= 0 and (t.stop is None or t.stop >= 0):
            if t.stop is not None:
                steps = range(t.start, t.stop, t.step)
            elif (t.start, t.step) != (0, 1):
                steps = slice(t.start, None, t.step)
        return None if region is None and steps is None else (region, steps)

    def steps(self) -> int | slice:
        """The time index to read: a slice ends at its last step, so that reading it waits
        for no later step."""
        t = self.time
        if isinstance(t, int) or t.stop is None or t.start < 0 or t.stop < 0:
            return t
        return slice(t.start, _last(t.start, t.stop, t.step) + 1, t.step)

    def local(self) -> tuple[Any, ...]:
        """The spatial index within :meth:`box`: the strides and the dropped axes."""
        return tuple(0 if isinstance(a, int) else slice(None, None, a[2]) for a in self.space)


def is_int(value: Any) -> bool:
    return isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_))


def _last(start: int, stop: int, step: int) -> int:
    return start + (len(range(start, stop, step)) - 1) * step


def _resolve(item: Any, size: int | None, axis: int, name: str) -> Any:
    """One index of a selection: the time axis (0) gives an int or a slice, the others an
    :data:`Axis`."""
    what = "step" if axis == 0 else f"axis {axis}"
    if is_int(item):
        i = int(item)
        if size is None:  # the time axis, of unknown length: negative counts from the end
            return i
        if not -size <= i < size:
            raise IndexError(f"index {i} is out of bounds for {what} of {name!r} (size {size})")
        return i % size
    if item.step is not None and item.step < 1:
        raise ValueError(f"{item}: only positive step values are accepted ({what} of {name!r})")
    if size is None:
        start, stop, step = item.start or 0, item.stop, item.step or 1
        if start < 0 or (stop is not None and stop < 0):
            return slice(start, stop, step)
    else:
        start, stop, step = item.indices(size)
    if stop is not None and not range(start, stop, step):
        raise NotSupportedError(
            f"arrays[{name!r}][...] selects no {'step' if axis == 0 else 'index'} on {what} "
            f"({item}): nothing would be sent; select at least one"
        )
    return slice(start, stop, step) if axis == 0 else (start, stop, step)
