"""The Bridge's own block buffers (``mode="async"``), where a block goes by TCP or before the
connection is known: a copy per block in flight, reused for the next ones of the same array.

Main thread only (``publish`` takes a buffer, the exchange that says its send finished gives it
back); the loop thread only reads a buffer while it sends it.

Runs in a simulation rank, on its main thread (and read by its event-loop thread). Imports numpy
only.
"""

from __future__ import annotations

import mmap
from typing import Any

import numpy as np


def mapped_empty(shape: tuple[int, ...], dtype: np.dtype[Any]) -> np.ndarray:
    """``np.empty(shape, dtype)`` in pages of its own (an anonymous mapping), unmapped when the
    array is gone: glibc would keep a freed block of this size in its heap (its mmap threshold
    grows to the largest block freed), and a rank whose blocks go to slots after its first
    publishes would carry the buffers of those publishes to the end of the run."""
    count = int(np.prod(shape))
    if count == 0:
        return np.empty(shape, dtype=dtype)
    pages = mmap.mmap(-1, count * dtype.itemsize, flags=mmap.MAP_PRIVATE)
    return np.frombuffer(pages, dtype=dtype, count=count).reshape(shape)


class Buffers:
    """This rank's block copies, per array; main thread only.

    Attributes
    ----------
    peak : dict of str to int
        The most copies held at once, per array.
    """

    def __init__(self) -> None:
        self._free: dict[str, list[np.ndarray]] = {}
        self._allocated: dict[str, int] = {}
        self.peak: dict[str, int] = {}
        # parcels of boxes (their size changes from step to step): the bytes each lies in
        self._free_bytes: dict[str, list[np.ndarray]] = {}
        self._parcels: dict[int, tuple[np.ndarray, np.ndarray]] = {}  # id(view): view, bytes

    def take(self, name: str, shape: tuple[int, ...], dtype: np.dtype[Any]) -> np.ndarray:
        """A free buffer for a block of ``name`` (a new one if none is free)."""
        free = self._free.setdefault(name, [])
        if free:
            return free.pop()
        self._allocated[name] = self._allocated.get(name, 0) + 1
        self.peak[name] = max(self.peak.get(name, 0), self._allocated[name])
        return mapped_empty(shape, dtype)

    def take_parcel(self, name: str, shape: tuple[int, ...], dtype: np.dtype[Any]) -> np.ndarray:
        """A buffer of ``shape`` for a parcel of boxes of ``name``
        (:mod:`deisa.bridge.arrays.boxes`), whose size changes from step to step: the first free one
        large enough, else a new one a quarter larger than asked (counts that grow a little
        from step to step reuse it)."""
        nbytes = int(np.prod(shape)) * dtype.itemsize
        free = self._free_bytes.setdefault(name, [])
        fitting = [i for i, b in enumerate(free) if b.nbytes >= nbytes]
        if fitting:
            whole = free.pop(min(fitting, key=lambda i: free[i].nbytes))
        else:
            self._allocated[name] = self._allocated.get(name, 0) + 1
            self.peak[name] = max(self.peak.get(name, 0), self._allocated[name])
            whole = mapped_empty((nbytes + nbytes // 4,), np.dtype(np.uint8))
        view = whole[:nbytes].view(dtype).reshape(shape)
        self._parcels[id(view)] = (view, whole)
        return view

    def give_back(self, name: str, buffer: np.ndarray) -> None:
        parcel = self._parcels.pop(id(buffer), None)
        if parcel is not None and parcel[0] is buffer:
            self._free_bytes.setdefault(name, []).append(parcel[1])
            return
        self._free.setdefault(name, []).append(buffer)

    def drop(self, name: str, buffer: np.ndarray | None = None) -> None:
        """Forget a buffer of ``name`` taken and not given back (its memory goes with it)."""
        if buffer is not None:
            self._parcels.pop(id(buffer), None)
        self._allocated[name] -= 1
