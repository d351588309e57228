"""A minimal MPI publisher for tests: block values encode (step, global row, global column).

    mpirun -np P python tests/publish_blocks.py SCHEDULER_FILE --shape 8 6 --grid 2 2 --steps 3

Value at (step, x, y) is ``step * 1e6 + x * 1e3 + y``, so any misplaced block is visible.
"""

from __future__ import annotations

import argparse

import numpy as np
from mpi4py import MPI

from deisa import ArraySpec, Bridge
from deisa.decomposition import even_split


def expected(step: int, shape: tuple[int, int]) -> np.ndarray:
    x, y = np.indices(shape)
    return step * 1e6 + x * 1e3 + y


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("scheduler_file")
    parser.add_argument("--shape", type=int, nargs=2, default=[8, 6])
    parser.add_argument("--grid", type=int, nargs=2, default=[2, 2])
    parser.add_argument("--steps", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--name", default="field")
    parser.add_argument("--buffer-nb", type=int, default=None)
    parser.add_argument("--placement", default="round_robin")
    args = parser.parse_args()
    comm = MPI.COMM_WORLD
    cx, cy = divmod(comm.Get_rank(), args.grid[1])
    (x0, h), (y0, w) = even_split(args.shape[0], args.grid[0], cx), even_split(
        args.shape[1], args.grid[1], cy
    )
    spec = ArraySpec("float64", args.shape, (x0, y0), (h, w))
    with Bridge(
        args.scheduler_file,
        {args.name: spec},
        buffer_nb=args.buffer_nb,
        placement=args.placement,
        connect_timeout=10,
    ) as bridge:
        for step in args.steps:
            block = expected(step, tuple(args.shape))[x0 : x0 + h, y0 : y0 + w]
            bridge.publish(args.name, block, step)


if __name__ == "__main__":
    main()
