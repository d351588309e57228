"""The yardstick of the node-local benchmarks: how long one copy of a rank's block takes.

Imported by the scripts that ``bench.node_local`` runs by path (``_node_local_rank.py`` under
mpirun, ``_ray_peer.py`` in Ray's Python), so it needs numpy alone.
"""

from __future__ import annotations

import time

import numpy as np


def memcpy_times(block: np.ndarray, repeat: int = 7) -> list[float]:
    """Seconds of ``repeat`` copies of ``block`` into a buffer of its own (touched by the first)."""
    scratch = np.empty_like(block)
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        np.copyto(scratch, block)
        times.append(time.perf_counter() - t0)
    return times
