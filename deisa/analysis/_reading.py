"""The reading interface shared by a live stream and by saved output.

A :class:`StepArray` is one array with a leading time axis of *step numbers*: ``array[t, x, y]``,
:meth:`~StepArray.items`, :meth:`~StepArray.windows`, :attr:`~StepArray.steps`, ``len``,
``dtype``, ``shape``; :func:`~deisa.analysis._zip_steps.zip_steps` pairs the steps of several
arrays. Each hands out dask arrays, or labelled ones (``as_xarray=True``,
:meth:`~StepArray.to_xarray`: an :class:`xarray.DataArray` with the axes' names and the step
numbers, see :mod:`deisa.analysis._labels`). Two kinds implement it, and an analysis written
against this interface runs on either unchanged:

- :class:`deisa.analysis.adapter.ArrayDescriptor`: the steps a simulation publishes, taken from
  the scheduler as they arrive (each step is handed out once);
- :class:`deisa.analysis.replay.ReplayArray`: the steps a run saved to files (HDF5, Zarr), all
  known from the start, read lazily and as often as asked.

A subclass provides the array's ``shape``, ``dtype``, ``chunks`` and ``dims`` and four hooks:
``_pull_until`` (learn the steps up to one, or to the end), ``_has`` (whether a known step can
be read), ``_next_steps`` (the steps :meth:`~StepArray.items` yields) and ``_step_array`` (the
lazy dask array of one step), and may override ``_attach`` (start receiving steps now); the
steps known so far are ``_seen`` (in order) and ``_ended`` says whether there will be no more.

What hands the arrays out by name and zips them is :class:`~deisa.analysis._step_reader.StepReader`.
"""

from __future__ import annotations

import logging
from abc import ABC, abstractmethod
from collections import deque
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any, Literal, overload

import dask.array as da
import numpy as np

from . import _labels
from ._attributes import AttrsView

if TYPE_CHECKING:
    import xarray as xr

logger = logging.getLogger(__name__)


class EndOfStreamError(IndexError):
    """A selection asks for steps past the end of a closed stream (or of the saved steps)."""


class NoFixedShapeError(TypeError):
    """The shape (or chunks) of an array whose shape changes from step to step (a moving array):
    ask one step's, :meth:`StepArray.shape_of` or ``array[t].shape``."""


class StepShapesDifferError(ValueError):
    """Steps of different shapes were to be stacked on a time axis (``array[0:10]``, a window):
    the message names two of them and their shapes."""


class StepNotAvailableError(KeyError):
    """A step was never published (filtered out), never saved, or was already released."""

    def __str__(self) -> str:  # KeyError quotes its message otherwise
        return str(self.args[0])


class StepArray(AttrsView, ABC):
    """One array read step by step, indexed as ``array[t, x, y]`` with a leading time axis.

    The time index selects step numbers: an integer, a slice or ``range`` of steps
    (open-ended and negative bounds wait for the end of a live stream), a list of steps, or
    ``...``. The remaining indices are ordinary numpy/dask indices on the spatial axes. An
    integer step gives a spatial array; several steps are stacked along a new leading axis by
    :func:`dask.array.stack`.
    """

    name: str
    # words of the messages: a step missing from the sequence was not "published" (live) or
    # "saved" (replay); the steps known were "received" or "saved"; a step past the last is
    # past the end of "the stream of" or "the saved steps of" the array
    _missing_word = "published"
    _steps_word = "received"
    _sequence_word = "the stream of"

    def __init__(self, name: str) -> None:
        self.name = name
        self._seen: list[int] = []
        self._ended = False
        self._attr_changes: dict[int, dict[str, Any]] = {}  # AttrsView's

    # -- what a subclass provides ------------------------------------------------------------

    @property
    @abstractmethod
    def shape(self) -> tuple[int, ...]:
        """Spatial shape (the time axis is not included); an array whose shape changes from step
        to step raises :class:`NoFixedShapeError` (see :meth:`shape_of`)."""

    @property
    def ndim(self) -> int:
        """Number of spatial axes (the same at every step, moving arrays included)."""
        return len(self.shape)

    @property
    @abstractmethod
    def dtype(self) -> np.dtype: ...

    @property
    @abstractmethod
    def chunks(self) -> tuple[tuple[int, ...], ...]:
        """Spatial chunks of a step's dask array."""

    @property
    @abstractmethod
    def dims(self) -> tuple[str, ...] | None:
        """Names of the spatial axes, ``None`` if unnamed (labelled arrays then take xarray's
        defaults, ``dim_0``...)."""

    @abstractmethod
    def _pull_until(self, step: int | None) -> None:
        """Learn the steps up to ``step`` (or a later one), or to the end if ``None``."""

    @abstractmethod
    def _has(self, step: int) -> bool:
        """Whether ``step``, already in ``_seen``, can be read."""

    @abstractmethod
    def _next_steps(self) -> Iterator[int]:
        """The steps :meth:`items` yields, in order."""

    @abstractmethod
    def _step_array(self, step: int) -> da.Array:
        """The lazy dask array of ``step`` (one that :meth:`_has`)."""

    def _step_shape(self, step: int) -> tuple[int, ...]:
        """The spatial shape of ``step`` (one that :meth:`_has`); :attr:`shape` by default, a
        moving array's step its own."""
        return self.shape

    def _attach(self) -> None:
        """Start receiving the steps from now on; nothing to do by default (saved steps)."""

    def _filled_step(self, step: int, fill: Any) -> da.Array:
        """``step``'s array (one that :meth:`_has`), the regions no block holds read as ``fill``
        (not None); by default :meth:`_step_array`: only a moving array's steps have such
        regions."""
        return self._step_array(step)

    # -- the regions a moving step's blocks do not cover -------------------------------------

    _fill: Any = None

    @property
    def fill(self) -> Any:
        """The value of the regions of a step that none of its blocks holds (a refined AMR
        level's, of a moving array), for ``array[t]``, :meth:`items`, ``zip`` and windows;
        ``None`` (default): such a step raises
        :class:`~deisa.analysis.moving.MissingRegionError`. :meth:`step` takes its own."""
        return self._fill

    @fill.setter
    def fill(self, value: Any) -> None:
        self._fill = _checked_fill(value, self.name)

    def step(self, step: int, *, fill: Any = None) -> da.Array:
        """``array[step]``, its regions that no block holds set to ``fill`` (``None``: to
        :attr:`fill`, and where that is ``None`` too they raise
        :class:`~deisa.analysis.moving.MissingRegionError`, as ``array[step]`` does).

        Examples
        --------
        >>> adapter["rho_level1"].step(3, fill=np.nan)  # doctest: +SKIP
        """
        fill = _checked_fill(fill, self.name)
        step = self._resolve_int(step)
        return self._step_array(step) if fill is None else self._filled_step(step, fill)

    # -- the shared interface ----------------------------------------------------------------

    @property
    def steps(self) -> list[int]:
        """The step numbers known so far, in order: every saved step of a replay, the steps
        received so far of a live stream (all of them once it :attr:`ended`)."""
        return list(self._seen)

    def __len__(self) -> int:
        """How many steps :attr:`steps` holds."""
        return len(self._seen)

    def shape_of(self, step: int) -> tuple[int, ...]:
        """The spatial shape of ``step`` (a step number; negative: from the end), which a
        moving array's steps each have their own of (:attr:`shape` otherwise); on a live stream,
        waits for the step as ``array[step]`` does, without taking its data out of the cache.

        Raises
        ------
        StepNotAvailableError, EndOfStreamError
            As ``array[step]``.
        """
        return self._step_shape(self._resolve_int(step))

    @property
    def ended(self) -> bool:
        """Whether no more steps will come (always true for a replay)."""
        return self._ended

    def __getitem__(self, index: Any) -> da.Array:
        array: da.Array = self._select(index, as_xarray=False)
        return array

    def to_xarray(self, index: Any) -> xr.DataArray:
        """``self[index]`` as a labelled array: an :class:`xarray.DataArray` around the same
        lazy dask array (nothing is computed).

        Its spatial axes are named by :attr:`dims` (else ``dim_0``...); the step numbers are
        the coordinate ``"step"``: a scalar coordinate for an integer time index, else the
        leading dimension. Spatial indices select as in ``self[index]`` (an integer drops its
        axis).

        Raises
        ------
        deisa.analysis._labels.XarrayMissingError
            An :class:`ImportError`: xarray is not installed (``pip install
            "deisa-insitu[xarray]"``).

        Examples
        --------
        >>> adapter["gtemp"].to_xarray(slice(0, 30))  # doctest: +SKIP
        <xarray.DataArray 'gtemp' (step: 3, x: 64, y: 64)> ...
        """
        _labels.xarray()  # before any step is taken
        labelled: xr.DataArray = self._select(index, as_xarray=True)
        return labelled

    def _select(self, index: Any, as_xarray: bool) -> Any:
        time_index, spatial = self._split_index(index)
        array: Any
        if isinstance(time_index, (int, np.integer)):
            step = self._resolve_int(int(time_index))
            self._check_bounds(spatial, self._step_shape(step))
            array = self._take(step, as_xarray)
        else:
            steps = self._resolve_many(time_index)
            if not steps:
                raise EndOfStreamError(
                    f"time selection {time_index!r} of {self.name!r} holds no "
                    f"{self._missing_word} step (steps {self._steps_word}: {summary(self._seen)})"
                )
            self._same_shapes([(s, self._step_shape(s)) for s in steps])  # before taking any
            self._check_bounds(spatial, self._step_shape(steps[0]))
            array = self._stack([(s, self._take(s, as_xarray)) for s in steps], as_xarray)
            spatial = (slice(None), *spatial)
        if all(s == slice(None) for s in spatial):
            return array
        return array[spatial]

    def _take(self, step: int, as_xarray: bool) -> Any:
        """The array of ``step``, labelled if ``as_xarray``."""
        array = self._step_array(step)
        if not as_xarray:
            return array
        return _labels.step(array, self.name, self.dims, step, self.attrs_of(step))

    def _stack(self, taken: list[tuple[int, Any]], as_xarray: bool) -> Any:
        """Step arrays (labelled if ``as_xarray``), ``(step, array)`` pairs, on a new leading
        time axis."""
        self._same_shapes([(step, tuple(array.shape)) for step, array in taken])
        arrays = [array for _, array in taken]
        return _labels.stack(arrays) if as_xarray else da.stack(arrays)

    def _same_shapes(self, shapes: list[tuple[int, tuple[int, ...]]]) -> None:
        """:class:`StepShapesDifferError` naming two steps of different shapes, if any
        (``shapes``: ``(step, shape)`` pairs)."""
        first, reference = shapes[0]
        for step, shape in shapes[1:]:
            if shape != reference:
                raise StepShapesDifferError(
                    f"steps {first} and {step} of {self.name!r} have different shapes "
                    f"({reference} and {shape}): they cannot be stacked on a time axis; work on "
                    "each step (items(), array[t]) instead"
                )

    def _split_index(self, index: Any) -> tuple[Any, tuple[Any, ...]]:
        index = index if isinstance(index, tuple) else (index,)
        ndim = 1 + self.ndim
        if sum(i is Ellipsis for i in index) > 1:
            raise IndexError("an index can only have a single ellipsis ('...')")
        if Ellipsis in index:
            at = index.index(Ellipsis)
            fill = (slice(None),) * (ndim - len(index) + 1)
            index = index[:at] + fill + index[at + 1 :]
        if len(index) > ndim:
            raise IndexError(
                f"too many indices for {self.name!r}: it has {ndim} axes (time + {ndim - 1} "
                f"spatial), {len(index)} were given"
            )
        return index[0], index[1:] + (slice(None),) * (ndim - len(index))

    def _check_bounds(self, spatial: tuple[Any, ...], shape: tuple[int, ...]) -> None:
        """An :class:`IndexError` naming the axis where an integer of ``spatial`` lies outside
        ``shape`` (a step's)."""
        for axis, (i, size) in enumerate(zip(spatial, shape, strict=True), start=1):
            if isinstance(i, (int, np.integer)) and not -size <= i < size:
                raise IndexError(
                    f"index {i} is out of bounds for axis {axis} of {self.name!r} with size {size}"
                )

    def _resolve_int(self, step: int) -> int:
        if step < 0:
            self._pull_until(None)
            if -step > len(self._seen):
                raise EndOfStreamError(
                    f"step {step} is before the first of the {len(self._seen)} steps of "
                    f"{self.name!r}"
                )
            return self._seen[step]
        self._pull_until(step)
        if self._has(step):
            return step
        if self._ended and (not self._seen or step > self._seen[-1]):
            raise EndOfStreamError(
                f"step {step} is past the end of {self._sequence_word} {self.name!r} "
                f"(steps {self._steps_word}: {summary(self._seen)})"
            )
        raise StepNotAvailableError(
            f"step {step} of {self.name!r} was not {self._missing_word} (steps "
            f"{self._steps_word}: {summary(self._seen)})"
        )

    def _resolve_many(self, selection: Any) -> list[int]:
        if isinstance(selection, range):
            selection = slice(selection.start, selection.stop, selection.step)
        if isinstance(selection, slice):
            start, stop, stride = selection.start, selection.stop, selection.step or 1
            if stride <= 0:
                raise IndexError(f"time slices of {self.name!r} need a positive step")
            if any(v is not None and v < 0 for v in (start, stop)):
                # negative bounds count from the end, over the steps actually there
                self._pull_until(None)
                return self._seen[selection]
            self._pull_until(None if stop is None else stop - 1)
            lo, hi = start or 0, np.inf if stop is None else stop
            return [s for s in self._seen if lo <= s < hi and (s - lo) % stride == 0]
        if isinstance(selection, (list, np.ndarray)):
            return [self._resolve_int(int(s)) for s in selection]
        raise TypeError(
            f"cannot select steps of {self.name!r} with {selection!r}: use an integer, a slice, "
            "a range, a list of integers or ..."
        )

    @overload
    def items(self, *, as_xarray: Literal[False] = ...) -> Iterator[tuple[int, da.Array]]: ...
    @overload
    def items(self, *, as_xarray: Literal[True]) -> Iterator[tuple[int, xr.DataArray]]: ...
    def items(self, *, as_xarray: bool = False) -> Iterator[tuple[int, Any]]:
        """Yield ``(step, array)`` in step order, until the end.

        A live stream yields every step not handed out yet (each step once, whoever asked for
        it); a replay yields every saved step at each call.

        Parameters
        ----------
        as_xarray
            ``False`` (default): each array is a dask array. ``True``: an
            :class:`xarray.DataArray` around it (lazy still), its axes named by :attr:`dims`
            (else ``dim_0``...) and the step number its scalar coordinate ``"step"``. Without
            xarray installed, raises :class:`~deisa.analysis._labels.XarrayMissingError` (an
            :class:`ImportError`) before any step is taken.

        Examples
        --------
        >>> for step, field in adapter["gtemp"].items(as_xarray=True):  # doctest: +SKIP
        ...     profile = field.mean("y")  # a DataArray over x, with its step coordinate
        """
        if as_xarray:
            _labels.xarray()
        yield from self._items(as_xarray)

    def _items(self, as_xarray: bool) -> Iterator[tuple[int, Any]]:
        for step in self._next_steps():
            yield step, self._take(step, as_xarray)

    def __iter__(self) -> Iterator[da.Array]:
        """Yield the array of every step :meth:`items` yields."""
        for _, array in self.items():
            yield array

    @overload
    def windows(
        self, size: int, *, partial: bool = False, as_xarray: Literal[False] = ...
    ) -> Iterator[tuple[list[int], da.Array]]: ...
    @overload
    def windows(
        self, size: int, *, partial: bool = False, as_xarray: Literal[True]
    ) -> Iterator[tuple[list[int], xr.DataArray]]: ...
    def windows(
        self, size: int, *, partial: bool = False, as_xarray: bool = False
    ) -> Iterator[tuple[list[int], Any]]:
        """Iterate sliding windows of ``size`` consecutive steps, until the end.

        Parameters
        ----------
        size
            Steps per window (``>= 1``).
        partial
            ``False`` (default): the first window comes once ``size`` steps have arrived, then
            one per new step; fewer than ``size`` steps yield nothing. ``True``: the windows at
            the start grow from 1 to ``size`` steps, so each step is the newest of exactly one
            window. At the end no shorter window is yielded either way.
        as_xarray
            ``True``: each window is an :class:`xarray.DataArray` (lazy still) with dimensions
            ``("step", *dims)`` and the step numbers as the ``"step"`` coordinate (see
            :meth:`items`).

        Yields
        ------
        steps, window
            The step numbers (oldest first) and a dask array of shape ``(len(steps), *shape)``,
            the steps stacked on a new leading time axis.

        Notes
        -----
        Steps are taken as :meth:`items` takes them; the window holds the last ``size`` step
        arrays, so a live step's data lives while a window yielded with it is alive (at most
        ``size`` steps past ``buffer_nb`` for this consumer, plus what the caller keeps). The
        window is :func:`dask.array.stack` of the step arrays: no copy, but one task per block
        and step (a view adding the time axis, run with whatever computes the window).

        Examples
        --------
        >>> for steps, window in adapter["gtemp"].windows(3):  # doctest: +SKIP
        ...     rate = (window[-1] - window[0]) / (steps[-1] - steps[0])
        """
        if not isinstance(size, int) or isinstance(size, bool) or size < 1:
            raise ValueError(f"size={size!r} must be a positive integer")
        window: deque[tuple[int, Any]] = deque(maxlen=size)
        if as_xarray:
            _labels.xarray()
        for step, array in self._items(as_xarray):
            window.append((step, array))
            del array
            if partial or len(window) == size:
                yield [s for s, _ in window], self._stack(list(window), as_xarray)


def _checked_fill(value: Any, name: str) -> Any:
    """``value`` as a fill value: a scalar or None."""
    if value is not None and np.ndim(value) != 0:
        raise ValueError(f"fill={value!r} of {name!r} must be a scalar or None")
    return value


def summary(steps: list[int]) -> str:
    """A short list of step numbers for messages."""
    if not steps:
        return "none"
    if len(steps) <= 6:
        return ", ".join(map(str, steps))
    return f"{steps[0]}, {steps[1]}, ..., {steps[-1]} ({len(steps)} in all)"
