"""A saved array, read step by step: the :class:`~deisa.analysis._reading.StepArray` of
:class:`deisa.Replay`, whatever the source (HDF5, Zarr, ADIOS2 BP), and the errors of a replay.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence

import dask.array as da
import numpy as np

from ..wire.layout import StepLayout
from ._parcels import Block, declared_blocks
from ._reading import StepArray, summary

__all__ = ["ReplayArray", "ReplayError", "UnknownArrayError"]


class ReplayError(ValueError):
    """Saved output that cannot be replayed: no time axis, files that disagree, bad steps."""


class UnknownArrayError(ReplayError, KeyError):
    """An array name the source does not hold (the message lists those it holds)."""

    def __str__(self) -> str:  # KeyError quotes its message otherwise
        return str(self.args[0])


class ReplayArray(StepArray):
    """One saved array, indexed as ``array[t, x, y]`` with a leading time axis of step numbers.

    The interface of a live :class:`~deisa.analysis.adapter.ArrayDescriptor` (see
    :class:`~deisa.analysis._reading.StepArray`), over saved steps: all of them are known from
    the start, and :meth:`items` (so :meth:`windows` and :meth:`Replay.zip`) yields every one of
    them at each call, where a live stream hands each step out once.

    Attributes
    ----------
    name : str
    source : str
        Where the steps are read from (a file, or the first of the per-step files).
    """

    _missing_word = "saved"
    _steps_word = "saved"
    _sequence_word = "the saved steps of"

    def __init__(
        self,
        name: str,
        steps: Sequence[int],
        shape: tuple[int, ...],
        dtype: np.dtype,
        chunks: tuple[tuple[int, ...], ...],
        build: Callable[[int], da.Array],
        source: str,
        dims: tuple[str, ...] | None = None,
    ) -> None:
        super().__init__(name)
        self._seen = [int(s) for s in steps]
        self._ended = True
        self._index = {step: i for i, step in enumerate(self._seen)}
        self._shape, self._dtype, self._chunks = shape, dtype, chunks
        self._build = build
        self.source = source
        self._dims = dims

    @property
    def shape(self) -> tuple[int, ...]:
        """Spatial shape (the time axis is not included)."""
        return self._shape

    @property
    def dtype(self) -> np.dtype:
        return self._dtype

    @property
    def chunks(self) -> tuple[tuple[int, ...], ...]:
        return self._chunks

    @property
    def dims(self) -> tuple[str, ...] | None:
        """Names of the spatial axes: the file's, else those given to :class:`Replay`, else
        ``None``."""
        return self._dims

    def __repr__(self) -> str:
        return (
            f"<ReplayArray {self.name!r}: {len(self._seen)} steps saved "
            f"({summary(self._seen)}), shape {self._shape}, from {self.source}>"
        )

    def _pull_until(self, step: int | None) -> None:
        pass  # every step is known from the start

    def _has(self, step: int) -> bool:
        return step in self._index

    def _next_steps(self) -> Iterator[int]:
        return iter(list(self._seen))

    def _step_array(self, step: int) -> da.Array:
        return self._build(self._index[step])

    # -- the moving arrays' reading, the same on every saved array (as a live one's) ----------

    moving = False  # a saved array whose steps each have their shape and blocks: True

    def layout(self, step: int) -> StepLayout | None:
        """``step``'s :class:`~deisa.wire.layout.StepLayout` (its shape and blocks) for a moving
        array; ``None`` here, as a live step published plain: the array's chunks say where its
        blocks lie."""
        self._resolve_int(step)
        return None

    def blocks(self, step: int) -> list[Block]:
        """Every block of ``step``: ``(start, count, array)`` each
        (:class:`~deisa.analysis._parcels.Block`); here the step's chunks (a moving array's
        are the boxes as written)."""
        return declared_blocks(self._step_array(self._resolve_int(step)))
