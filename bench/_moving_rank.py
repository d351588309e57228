"""One rank of ``bench.scheduler_memory`` (under mpirun): a field whose shape changes every step.

    mpirun -np 2 python -m bench._moving_rank SCHEDULER_FILE --steps 10000 --boxes 8 --width 16

An array declared moving (``ArraySpec.moving("float64", 2)``): at step ``s`` each rank holds a
band of ``boxes`` boxes of :func:`rows` ``(s)`` rows each and ``width`` columns, so the step's
global shape (``ranks * boxes * rows(s)``, ``width``) changes at every step, and every box's
start with it. Each rank publishes its boxes as one list (one parcel a rank and step), rank 0
gives the step's shape; ``buffer_nb=2`` with ``on_full="block"``, so the simulation keeps pace
with the analytics and what the scheduler holds is never more than two steps' worth.
"""

from __future__ import annotations

import argparse
from typing import Any

import numpy as np
from mpi4py import MPI

PERIOD = 5
"""The rows of a box cycle through 1..PERIOD: the step's shape changes at every step."""


def rows(step: int) -> int:
    """Rows of each box at ``step``."""
    return 1 + step % PERIOD


def boxes(rank: int, nranks: int, nboxes: int, step: int, width: int) -> list[tuple[Any, Any]]:
    """``[(start, block), ...]``: this rank's boxes at ``step``, their values ``step`` + the row."""
    h = rows(step)
    first = rank * nboxes * h
    out = []
    for b in range(nboxes):
        row = first + b * h
        block = np.empty((h, width))
        block[:] = step + np.arange(row, row + h)[:, None]
        out.append(((row, 0), block))
    return out


def main() -> None:
    from deisa import ArraySpec, Bridge

    parser = argparse.ArgumentParser()
    parser.add_argument("scheduler_file")
    parser.add_argument("--steps", type=int, default=1000)
    parser.add_argument("--boxes", type=int, default=1)
    parser.add_argument("--width", type=int, default=16)
    parser.add_argument("--name", default="field")
    args = parser.parse_args()
    comm = MPI.COMM_WORLD
    rank, nranks = comm.Get_rank(), comm.Get_size()
    spec = {args.name: ArraySpec.moving("float64", 2)}
    with Bridge(args.scheduler_file, spec, buffer_nb=2, timeout=600.0, connect_timeout=120.0) as b:
        for step in range(args.steps):
            shape = (nranks * args.boxes * rows(step), args.width) if rank == 0 else None
            b.publish(args.name, boxes(rank, nranks, args.boxes, step, args.width), step,
                      shape=shape)  # fmt: skip


if __name__ == "__main__":
    main()
