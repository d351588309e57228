"""The 2D grid of MPI ranks of a run: one function, for the launcher, solvers and benchmarks.

:func:`process_grid` is ``MPI.Compute_dims(ranks, 2)`` (``MPI_Dims_create``), rows first and
rows >= columns, as square as the rank count allows. Inside an MPI program (mpi4py imported and
MPI initialized, as in every rank) it calls it. A process that is no MPI rank, the launcher
among them, must not initialize MPI to ask (Open MPI starts a daemon for a singleton, and
aborts on ``MPI_Dims_create`` before ``MPI_Init``): there the same grid is computed here, the
most square one, which is what the MPI standard asks of ``MPI_Dims_create`` ("as close to each
other as possible") and what MPICH returns. Open MPI 4.1's greedy split agrees up to 71 ranks
and not always beyond (72 ranks: 12 x 6 instead of 9 x 8); tests/test_process_grid.py checks the
agreement against the MPI library installed.
"""

from __future__ import annotations

import math
import sys

__all__ = ["process_grid", "squarest"]


def process_grid(ranks: int) -> tuple[int, int]:
    """Rows and columns of ``ranks`` MPI processes, as square as possible, rows >= columns.

    Parameters
    ----------
    ranks : int
        The number of MPI processes, at least 1.

    Returns
    -------
    tuple of int
        ``(rows, columns)``, whose product is ``ranks``: ``MPI.Compute_dims(ranks, 2)`` where
        this process has initialized MPI, else the most square grid (see the module docstring).

    Raises
    ------
    ValueError
        If ``ranks`` is less than 1.

    Examples
    --------
    >>> [process_grid(n) for n in (1, 2, 4, 6, 7, 12)]
    [(1, 1), (2, 1), (2, 2), (3, 2), (7, 1), (4, 3)]
    """
    if ranks < 1:
        raise ValueError(f"a process grid needs at least 1 rank, not {ranks}")
    mpi = sys.modules.get("mpi4py.MPI")
    if mpi is not None and mpi.Is_initialized() and not mpi.Is_finalized():
        rows, cols = mpi.Compute_dims(ranks, 2)
        return int(rows), int(cols)
    return squarest(ranks)


def squarest(ranks: int) -> tuple[int, int]:
    """The most square ``(rows, columns)`` grid of ``ranks``, rows >= columns (no MPI call)."""
    cols = max(c for c in range(1, math.isqrt(ranks) + 1) if ranks % c == 0)
    return ranks // cols, cols
