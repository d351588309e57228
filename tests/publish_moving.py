"""A Python code publishing data that moves through the Bridge (issue 56), for tests.

    mpirun -np 3 python tests/publish_moving.py SCHEDULER_FILE --steps 4 --mode async

Three arrays, their values computed by :func:`truth` (what the analytics must read, bitwise):

- ``x``: particles, joined along axis 0 (``ArraySpec.moving("float64", 1, joined_axis=0)``):
  rank ``r`` holds :func:`count` particles at step ``s`` (rank 0 none at step 0), two arrays of
  them on odd steps;
- ``rho``: a 2-D field of 6 x (8, or 10 from step 3) cells, in six boxes of 2 rows x half the
  columns, two boxes a rank; the boxes move to the next rank from step 2;
- ``T``: a fixed array (3 x 4, one row a rank) published plain, except at step 2 where each rank
  gives its row as two boxes: that step carries a layout;
- ``late``: a fixed array (3 x 2) declared after step 1 (``Bridge.declare``), published from
  step 2 on.

``--h5 DIR``: each rank also writes what it publishes to its own HDF5 file (``DIR/out_R.h5``, as
a code writes its output beside going in situ; ``Replay("DIR/out_${rank}.h5")`` reads it): its
particles of step ``s`` in ``x_s`` (joined in rank order), each box of the other arrays in
``<name>_<s>_<box>`` with its ``start`` and the step's ``shape`` as attributes (:func:`save`).

``--bad declare``: rank 1 declares ``late`` under another name; ``--bad shape``: rank 2 gives
``rho``'s step 1 another shape than rank 1; ``--bad outside``: rank 1 gives a box of ``rho``
outside the step's shape at step 1. Each rank then writes the :class:`~deisa.BridgeError` it
raised to ``OUT/rank-R.txt`` (``--out``) and exits normally.
"""

from __future__ import annotations

import argparse
import contextlib
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
from mpi4py import MPI

from deisa import ArraySpec, Bridge, BridgeError

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
    if name == "late":
        return field(step, (NRANKS, 2))
    return field(step, (NRANKS, 4))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("scheduler_file")
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--mode", default="async")
    parser.add_argument("--connect-timeout", type=float, default=120.0)
    parser.add_argument("--bad", choices=["shape", "outside", "declare"], default=None)
    parser.add_argument("--out", default=None)
    parser.add_argument("--tag", default="", help="appended to the arrays' names")
    parser.add_argument("--h5", default=None, help="a directory: each rank's HDF5 output there")
    parser.add_argument("--scoped", action="store_true", help="each step in bridge.step(t)")
    args = parser.parse_args()
    try:
        run(args)
    except BridgeError as exc:
        if args.out is None:
            raise
        rank = MPI.COMM_WORLD.Get_rank()
        Path(args.out, f"rank-{rank}.txt").write_text(f"{exc}")


def run(args: argparse.Namespace) -> None:
    comm = MPI.COMM_WORLD
    rank = comm.Get_rank()
    assert comm.Get_size() == NRANKS
    x, rho_name, t = (f"{name}{args.tag}" for name in ("x", "rho", "T"))
    arrays = {
        x: ArraySpec.moving("float64", 1, joined_axis=0),
        rho_name: ArraySpec.moving("float64", 2, dims=("y", "x")),
        t: ArraySpec("float64", (NRANKS, 4), (rank, 0), (1, 4)),
    }
    output: Any = contextlib.nullcontext()
    if args.h5 is not None:
        import h5py

        output = h5py.File(Path(args.h5, f"out_{rank}.h5"), "w")
    with Bridge(
        args.scheduler_file, arrays, mode=args.mode, connect_timeout=args.connect_timeout,
        timeout=600.0,
    ) as bridge, output:  # fmt: skip
        for step in range(args.steps):
            if args.scoped:  # the step's arrays with one exchange
                with bridge.step(step) as scope:
                    publish_step(scope.publish, rank, step, args, (x, rho_name, t))
            else:
                publish_step(partial(bridge.publish, step=step), rank, step, args, (x, rho_name, t))
            if step == 1:  # an array the code defines once the run goes on
                late = f"late{'-other' if args.bad == 'declare' and rank == 1 else ''}{args.tag}"
                bridge.declare({late: ArraySpec("float64", (NRANKS, 2), (rank, 0), (1, 2))})
            if step >= 2:
                bridge.publish(late, field(step, (NRANKS, 2))[rank : rank + 1], step)
            if args.h5 is not None:
                save(output, rank, step)
    if args.out is not None:
        Path(args.out, f"exchanges-{rank}.txt").write_text(str(bridge.exchanges))


def publish_step(
    publish: Callable[..., None], rank: int, step: int, args: argparse.Namespace, names: tuple
) -> None:
    """This rank's ``x``, ``rho`` and ``T`` of ``step`` (``publish(name, block, **kwargs)``)."""
    x, rho_name, t = names
    mine = particles(rank, step)
    if step % 2:  # as two arrays, the second one may be empty
        publish(x, [mine[:1], mine[1:]])
    else:
        publish(x, mine)
    rho = field(step, rho_shape(step))  # the simulation's own arrays, boxes cut out
    boxes = [(s, rho[s[0] : s[0] + c[0], s[1] : s[1] + c[1]]) for s, c in rho_boxes(rank, step)]
    shape = rho_shape(step) if rank == 1 else None
    if step == 1 and args.bad == "shape" and rank == 2:
        shape = (7, 8)
    if step == 1 and args.bad == "outside" and rank == 1:
        shape = (6, 4)
    publish(rho_name, boxes, shape=shape)
    row = field(step, (NRANKS, 4))[rank : rank + 1]
    if step == 2:  # this step of the fixed array moves: two boxes a rank
        publish(t, [((rank, 0), row[:, :2]), ((rank, 2), row[:, 2:])])
    else:
        publish(t, row)


def save(output: Any, rank: int, step: int) -> None:
    """This rank's arrays of ``step``, as :func:`publish_step` publishes them, in its HDF5 file
    ``output``."""
    output.create_dataset(f"x_{step}", data=particles(rank, step))  # empty: nothing this step

    def boxes(name: str, shape: tuple[int, int], where: list[tuple[int, tuple[int, int]]]) -> None:
        whole = field(step, shape)
        for k, ((r, c), (nr, nc)) in where:
            data = output.create_dataset(f"{name}_{step}_{k}", data=whole[r : r + nr, c : c + nc])
            data.attrs["start"], data.attrs["shape"] = (r, c), shape

    every = [((2 * i, j * rho_shape(step)[1] // 2), (2, rho_shape(step)[1] // 2))
             for i in range(3) for j in range(2)]  # fmt: skip
    mine = rho_boxes(rank, step)
    boxes("rho", rho_shape(step), [(k, b) for k, b in enumerate(every) if b in mine])
    halves = [(0, ((rank, 0), (1, 2))), (1, ((rank, 2), (1, 2)))]
    boxes("T", (NRANKS, 4), halves if step == 2 else [(0, ((rank, 0), (1, 4)))])
    if step >= 2:
        boxes("late", (NRANKS, 2), [(0, ((rank, 0), (1, 2)))])


if __name__ == "__main__":
    main()
