"""An MPI publisher for bench/contracts.py and tests/test_contracts_mpi.py.

    mpirun -np 4 python bench/contract_ranks.py SCHEDULER_FILE OUT_PREFIX --nsteps 30 --mode async

The ranks (2 x N/2, or 1 x N for an odd count) publish blocks of ``--block`` rows x cols of the
array ``field``; values encode (step, global row, global column), so a misplaced or stale block
shows. Each rank writes
``OUT_PREFIX.<rank>.json``: the bytes it sent per step (``Bridge.timings``) and its wall time.
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np

from deisa import ArraySpec, Bridge


def value(step: int, rows: np.ndarray, cols: np.ndarray) -> np.ndarray:
    """The field at ``step`` on global indices ``rows`` x ``cols`` (broadcast)."""
    return step * 1e6 + rows * 1e3 + cols


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("scheduler_file")
    parser.add_argument("out")
    parser.add_argument("--nsteps", type=int, default=30)
    parser.add_argument("--mode", default="async")
    parser.add_argument("--block", type=int, nargs=2, default=(8, 6))
    parser.add_argument("--sleep", type=float, default=0.0, help="seconds of 'compute' per step")
    args = parser.parse_args()
    from mpi4py import MPI  # here: bench/contracts.py and the tests import value() only

    comm = MPI.COMM_WORLD
    rank, size = comm.Get_rank(), comm.Get_size()
    px = 2 if size % 2 == 0 else 1
    py = size // px
    h, w = args.block
    x0, y0 = h * (rank // py), w * (rank % py)
    spec = ArraySpec("float64", global_shape=(px * h, py * w), start=(x0, y0), shape=(h, w))
    rows, cols = np.indices((h, w))
    field = np.empty((h, w))
    with Bridge(
        args.scheduler_file, {"field": spec}, mode=args.mode, buffer_nb=2, connect_timeout=120
    ) as bridge:
        bridge.flush()  # connected: a contract set before the run applies from step 0
        t0 = time.perf_counter()
        for step in range(args.nsteps):
            if args.sleep:
                time.sleep(args.sleep)
            field[...] = value(step, x0 + rows, y0 + cols)
            bridge.publish("field", field, step)
        bridge.flush()
        elapsed = time.perf_counter() - t0
    sent = {t.step: t.nbytes for t in bridge.timings}
    with open(f"{args.out}.{rank}.json", "w") as f:
        json.dump({"sent": sent, "elapsed_s": elapsed}, f)


if __name__ == "__main__":
    main()
