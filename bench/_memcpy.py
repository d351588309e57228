"""The yardstick of the node-local benchmarks: how long one copy of a rank's block takes.

Imported by the scripts that ``bench.node_local`` runs by path (``_node_local_rank.py`` under
mpirun, ``_ray_peer.py`` in Ray's Python), so it needs numpy alone.
"""

from __future__ import annotations

import mmap
import time

import numpy as np


def memcpy_times(block: np.ndarray, repeat: int = 7, small_pages: bool = False) -> list[float]:
    """Seconds of ``repeat`` copies of ``block`` into a buffer of its own (touched by the first):
    numpy's, which it asks in transparent huge pages where the node allows them (``madvise``),
    or with ``small_pages`` an anonymous mapping in 4 KiB pages (``MADV_NOHUGEPAGE``), as a
    shared-memory slot's pages are where shared memory has no huge pages."""
    region = None
    if small_pages:
        region = mmap.mmap(-1, max(block.nbytes, 1))
        if hasattr(mmap, "MADV_NOHUGEPAGE"):
            region.madvise(mmap.MADV_NOHUGEPAGE)
        scratch = np.frombuffer(region, dtype=block.dtype, count=block.size).reshape(block.shape)
    else:
        scratch = np.empty_like(block)
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        np.copyto(scratch, block)
        times.append(time.perf_counter() - t0)
    del scratch
    if region is not None:
        region.close()
    return times
