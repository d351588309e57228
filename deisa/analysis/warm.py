"""A Dask worker preload that warms the PCA's stack up while the simulation starts.

``dask worker --preload deisa.analysis.warm`` (what ``deisa-run`` and its Slurm job put on the
workers' command lines for the built-in PCA) imports, in a background thread of each worker,
what the first fit's tasks need (:mod:`dask.array`, scipy's linear algebra, the kernels of
:mod:`deisa.analysis._pca_kernels`) and runs those kernels once on a few small arrays, through
the exact and the bounded-rank paths: numpy's and BLAS's first calls are made there, not in the
first step's tasks.

The thread starts as the worker starts and does not hold back its registration: the workers
connect, the simulation is launched, and the warm-up overlaps the ranks' own start-up (their
interpreter, their imports, ``PDI_init``), which lasts longer. A task that arrives before the
warm-up is done waits on Python's import locks for the modules still loading, as it would
have imported them itself. A failing warm-up is logged and changes nothing else: the first
task then pays what it would have paid without the preload.

Nothing here is imported at the module's top but the standard library, so that listing the
preload costs a worker nothing before its thread starts.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

logger = logging.getLogger(__name__)

#: rows and columns of the arrays the warm-up reduces: small, yet above the bounded-rank
#: path's ``rank`` so that both the exact and the randomized reductions run
_SHAPE = (64, 48)
_RANK = 14  # n_components 4 + the 10 extra components of the bounded-rank PCA


def warm_up() -> float:
    """Import the PCA's worker-side stack and run its kernels once; the seconds it took.

    Exceptions propagate (:func:`dask_setup`'s thread logs them).
    """
    started = time.perf_counter()
    import dask.array  # noqa: F401  (the splitter's tasks build and slice dask arrays)
    import numpy as np

    from ._pca_kernels import merge, reduce_partition, variance_along

    rng = np.random.default_rng(0)
    rows, cols = _SHAPE
    blocks = [rng.standard_normal((rows, cols // 2)) for _ in range(2)]
    indexes = [(0, 0), (0, 1)]
    exact = reduce_partition(blocks, indexes, None, 0, 1)
    bounded = reduce_partition(blocks, indexes, _RANK, 1, 1)
    root = merge([exact, bounded], _RANK)
    assert root is not None
    variance_along(blocks, indexes, root, 4)
    return time.perf_counter() - started


def _run() -> None:
    try:
        seconds = warm_up()
    except Exception:
        logger.warning(
            "deisa warm-up failed; the first PCA task will import the stack", exc_info=True
        )
        return
    logger.info("deisa warm-up: the PCA's stack imported and run once in %.2f s", seconds)


def dask_setup(worker: Any) -> None:
    """Start :func:`warm_up` in a daemon thread of ``worker`` (the preload protocol's hook)."""
    threading.Thread(target=_run, name="deisa-warm-up", daemon=True).start()
