"""An MPI publisher that reads a steering value after each step, for test_steering_mpi.py.

    mpirun -np 4 python tests/steered_ranks.py SCHEDULER_FILE OUT_PREFIX --nsteps 12

Each rank publishes its row band of a (16, 4) array, then reads ``param`` with
:meth:`deisa.Bridge.get` (default -1) and writes what it read at every step to
``OUT_PREFIX.<rank>.json``.
"""

from __future__ import annotations

import argparse
import json

import numpy as np
from mpi4py import MPI

from deisa import ArraySpec, Bridge
from deisa.bridge.arrays.decomposition import even_split


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("scheduler_file")
    parser.add_argument("out")
    parser.add_argument("--nsteps", type=int, default=12)
    args = parser.parse_args()
    comm = MPI.COMM_WORLD
    rank, size = comm.Get_rank(), comm.Get_size()
    x0, h = even_split(16, size, rank)
    spec = ArraySpec("float64", (16, 4), (x0, 0), (h, 4))
    seen = []
    with Bridge(args.scheduler_file, {"steered": spec}, buffer_nb=1, connect_timeout=120) as bridge:
        for step in range(args.nsteps):
            bridge.publish("steered", np.full((h, 4), float(step)), step)
            seen.append(bridge.get("param", -1))
    with open(f"{args.out}.{rank}.json", "w") as f:
        json.dump(seen, f)


if __name__ == "__main__":
    main()
