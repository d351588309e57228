"""The yardstick of the node-local benchmarks: how long one copy of a rank's block takes.

Imported by the scripts that ``bench.node_local`` runs by path (``_node_local_rank.py`` under
mpirun, ``_ray_peer.py`` in Ray's Python), so it needs numpy alone.
"""

from __future__ import annotations

import mmap
import time

import numpy as np


def memcpy_times(
    block: np.ndarray, repeat: int = 7, small_pages: bool = False, into: np.ndarray | None = None
) -> list[float]:
    """Seconds of ``repeat`` copies of ``block`` into a buffer of its own (touched by the first):
    numpy's, which it asks in transparent huge pages where the node allows them (``madvise``),
    or with ``small_pages`` an anonymous mapping in 4 KiB pages (``MADV_NOHUGEPAGE``), as a
    shared-memory slot's pages are where shared memory has no huge pages; or ``into``, a buffer
    of the caller's, already touched (:func:`scratch`: a yardstick taken beside the publishes,
    whose first copy takes no page fault either)."""
    if into is not None:
        return [_timed_copy(into, block) for _ in range(repeat)]
    region = None
    if small_pages:
        region = mmap.mmap(-1, max(block.nbytes, 1))
        if hasattr(mmap, "MADV_NOHUGEPAGE"):
            region.madvise(mmap.MADV_NOHUGEPAGE)
        buffer = np.frombuffer(region, dtype=block.dtype, count=block.size).reshape(block.shape)
    else:
        buffer = np.empty_like(block)
    times = [_timed_copy(buffer, block) for _ in range(repeat)]
    del buffer
    if region is not None:
        region.close()
    return times


def scratch(block: np.ndarray) -> np.ndarray:
    """A buffer of numpy's for :func:`memcpy_times`' ``into``, its pages touched."""
    buffer = np.empty_like(block)
    np.copyto(buffer, block)
    return buffer


def _timed_copy(into: np.ndarray, block: np.ndarray) -> float:
    t0 = time.perf_counter()
    np.copyto(into, block)
    return time.perf_counter() - t0
