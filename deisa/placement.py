"""Placement policies: which Dask worker receives each rank's block.

A placement is fixed for the whole run, so a rank always sends an array's blocks to the same
worker. Two policies:

``round_robin``
    The DEISA paper's default: rank ``r`` sends to worker ``r % W``. Balances memory; neighbouring
    blocks usually end up on different workers.
``locality``
    Contiguous ranges of blocks, in row-major grid order, go to the same worker, so that the
    blocks of a row band share a worker whenever there are at least as many row bands as
    workers. A local reduction over whole rows (PCA: samples are rows) then moves no data.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from .decomposition import Decomposition

Placement = Callable[[Decomposition, Sequence[str]], list[str]]


def round_robin(decomposition: Decomposition, workers: Sequence[str]) -> list[str]:
    """Worker of each rank: ``workers[rank % len(workers)]``."""
    return [workers[rank % len(workers)] for rank in range(decomposition.nranks)]


def locality(decomposition: Decomposition, workers: Sequence[str]) -> list[str]:
    """Worker of each rank: whole row bands per worker when possible, else contiguous ranges."""
    grid = decomposition.grid_shape
    nworkers = len(workers)
    out = []
    for index in decomposition.block_index:
        if grid[0] >= nworkers:
            slot = index[0] * nworkers // grid[0]
        else:
            linear = int(np.ravel_multi_index(index, grid))
            slot = linear * nworkers // int(np.prod(grid))
        out.append(workers[slot])
    return out


PLACEMENTS: dict[str, Placement] = {"round_robin": round_robin, "locality": locality}


def get_placement(name: str) -> Placement:
    """The placement policy called ``name``.

    Raises
    ------
    ValueError
        Naming the accepted values.
    """
    try:
        return PLACEMENTS[name]
    except (KeyError, TypeError):  # TypeError: not hashable, so not a name
        raise ValueError(
            f"placement={name!r} is not a placement policy; choose one of {sorted(PLACEMENTS)}"
        ) from None
