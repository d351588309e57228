"""A Python code publishing data that moves through the Bridge (issue 56), for tests.

    mpirun -np 3 python tests/publish_moving.py SCHEDULER_FILE --steps 4 --mode async

Three arrays, their values computed by :func:`truth` (what the analytics must read, bitwise):

- ``x``: particles, joined along axis 0 (``ArraySpec.moving("float64", 1, joined_axis=0)``):
  rank ``r`` holds :func:`count` particles at step ``s`` (rank 0 none at step 0), two arrays of
  them on odd steps;
- ``rho``: a 2-D field of 6 x (8, or 10 from step 3) cells, in six boxes of 2 rows x half the
  columns, two boxes a rank; the boxes move to the next rank from step 2;
- ``T``: a fixed array (3 x 4, one row a rank) published plain, except at step 2 where each rank
  gives its row as two boxes: that step carries a layout.
"""

from __future__ import annotations

import argparse

import numpy as np
from mpi4py import MPI

from deisa import ArraySpec, Bridge

NRANKS = 3


def count(rank: int, step: int) -> int:
    """Rank ``rank``'s particles at ``step`` (0 for rank 0 at step 0)."""
    return (3 * rank + 2 * step) % 5


def particles(rank: int, step: int) -> np.ndarray:
    return step * 1e6 + rank * 1e3 + np.arange(count(rank, step), dtype=np.float64)


def rho_shape(step: int) -> tuple[int, int]:
    return (6, 10 if step >= 3 else 8)


def rho_boxes(rank: int, step: int) -> list[tuple[tuple[int, int], tuple[int, int]]]:
    """Rank ``rank``'s boxes of ``rho`` at ``step``: (start, count) of two of the six."""
    ny = rho_shape(step)[1]
    boxes = [((2 * i, j * ny // 2), (2, ny // 2)) for i in range(3) for j in range(2)]
    moved = 1 if step >= 2 else 0
    return [b for k, b in enumerate(boxes) if (k // 2 + moved) % NRANKS == rank]


def field(step: int, shape: tuple[int, int]) -> np.ndarray:
    x, y = np.indices(shape)
    return step * 1e6 + x * 1e3 + y


def truth(name: str, step: int) -> np.ndarray:
    """The step's whole array as the analytics must read it."""
    if name == "x":
        return np.concatenate([particles(r, step) for r in range(NRANKS)])
    if name == "rho":
        return field(step, rho_shape(step))
    return field(step, (NRANKS, 4))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("scheduler_file")
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--mode", default="async")
    parser.add_argument("--connect-timeout", type=float, default=120.0)
    args = parser.parse_args()
    comm = MPI.COMM_WORLD
    rank = comm.Get_rank()
    assert comm.Get_size() == NRANKS
    arrays = {
        "x": ArraySpec.moving("float64", 1, joined_axis=0),
        "rho": ArraySpec.moving("float64", 2, dims=("y", "x")),
        "T": ArraySpec("float64", (NRANKS, 4), (rank, 0), (1, 4)),
    }
    with Bridge(
        args.scheduler_file, arrays, mode=args.mode, connect_timeout=args.connect_timeout,
        timeout=600.0,
    ) as bridge:  # fmt: skip
        for step in range(args.steps):
            mine = particles(rank, step)
            if step % 2:  # as two arrays, the second one may be empty
                bridge.publish("x", [mine[:1], mine[1:]], step)
            else:
                bridge.publish("x", mine, step)
            rho = field(step, rho_shape(step))  # the simulation's own arrays, boxes cut out
            boxes = [
                (s, rho[s[0] : s[0] + c[0], s[1] : s[1] + c[1]]) for s, c in rho_boxes(rank, step)
            ]
            bridge.publish("rho", boxes, step, shape=rho_shape(step) if rank == 1 else None)
            row = field(step, (NRANKS, 4))[rank : rank + 1]
            if step == 2:  # this step of the fixed array moves: two boxes a rank
                bridge.publish("T", [((rank, 0), row[:, :2]), ((rank, 2), row[:, 2:])], step)
            else:
                bridge.publish("T", row, step)


if __name__ == "__main__":
    main()
