"""What hands out step arrays by name: :class:`StepReader`, which the live
:class:`~deisa.analysis.adapter.Adapter` and the saved output's
:class:`~deisa.analysis.replay.Replay` both are (:mod:`._reading` is the arrays' side).

Runs in the analytics' process. Imports the analysis side's own modules (:mod:`._reading`,
:mod:`._zip_steps`, :mod:`._labels`).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterator
from types import TracebackType
from typing import TYPE_CHECKING, Any, Literal, TypeVar, overload

from . import _labels
from ._reading import StepArray
from ._zip_steps import check_zip, zip_steps

if TYPE_CHECKING:
    import dask.array as da
    import xarray as xr

_Reader = TypeVar("_Reader", bound="StepReader")


class StepReader(ABC):
    """What hands out :class:`StepArray` objects by name: a live stream's
    :class:`~deisa.analysis.adapter.Adapter` or saved output's
    :class:`~deisa.analysis.replay.Replay`; a context manager that :meth:`close` ends."""

    @abstractmethod
    def __getitem__(self, name: str) -> StepArray:
        """The array ``name``."""

    @abstractmethod
    def close(self) -> None:
        """Release what this reader holds."""

    def __enter__(self: _Reader) -> _Reader:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    @overload
    def zip(
        self, *names: str, how: Literal["all", "any"] = "all", as_xarray: Literal[False] = ...
    ) -> Iterator[tuple[int, tuple[da.Array | None, ...]]]: ...
    @overload
    def zip(
        self, *names: str, how: Literal["all", "any"] = "all", as_xarray: Literal[True]
    ) -> Iterator[tuple[int, tuple[xr.DataArray | None, ...]]]: ...
    def zip(
        self, *names: str, how: Literal["all", "any"] = "all", as_xarray: bool = False
    ) -> Iterator[tuple[int, tuple[Any, ...]]]:
        """Iterate the steps of several arrays together, in step order.

        Parameters
        ----------
        *names
            The arrays, at least two, each once.
        how
            ``"all"`` (AND): yield only the steps that every array published (or saved), as
            ``(step, (array_1, array_2, ...))``; a step published by some of the arrays only is
            skipped (logged at debug level) and its data released as soon as every array has
            passed it; the iteration ends when any of the arrays ends. ``"any"`` (OR): yield
            every step that some array published, with ``None`` for the arrays that did not
            publish it, once every array has passed that step; it ends when all arrays ended.
        as_xarray
            ``True``: each array is an :class:`xarray.DataArray` (lazy still), labelled as
            :meth:`StepArray.items` labels them.

        Yields
        ------
        step, arrays
            The step number and one array per name (see :meth:`StepArray.items`).

        Notes
        -----
        A step is yielded once each array has published it or a later step (or ended), so the
        iteration reads one step ahead on the arrays that are ahead. Each array's steps are
        taken as its :meth:`~StepArray.items` takes them: on a live stream, by this Adapter,
        which attaches to every array before waiting for any (each receives the steps from
        now on) and asks for the next step of all the arrays that advance in one round trip
        (a step of many arrays is one read); a :class:`~deisa.analysis.replay.Replay` zips its
        saved steps the same way.

        Examples
        --------
        >>> for step, (temp, dtemp) in adapter.zip("gtemp", "gdtemp"):  # doctest: +SKIP
        ...     print(step, float((dtemp / temp.max()).max()))
        """
        check_zip(names, how)
        if as_xarray:
            _labels.xarray()
        arrays = [self[name] for name in names]
        for array in arrays:  # before waiting for any
            array._attach()
        yield from zip_steps(arrays, how, as_xarray=as_xarray, together=self._read_together)

    def _read_together(self, arrays: list[StepArray]) -> None:
        """Before ``arrays`` advance together in a :meth:`zip`: fetch what their next steps
        need in one go, if this reader can (saved steps: nothing to fetch)."""
        return None
