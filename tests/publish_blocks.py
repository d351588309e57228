"""A minimal MPI publisher for tests: block values encode (step, global row, global column).

    mpirun -np P python tests/publish_blocks.py SCHEDULER_FILE --shape 8 6 --grid 2 2 --steps 3

Value at (step, x, y) is ``step * 1e6 + x * 1e3 + y``, so any misplaced block is visible.

Fault injection for the reliability tests: ``--die-rank R --die-at-step K`` makes rank R exit
abruptly (``os._exit``) before publishing step K; ``--bad-dtype-rank R`` declares float32 on
rank R; ``--overlap-rank R`` declares rank R's block one row too tall. ``--done DIR``: each rank
writes ``DIR/rank-R.json`` (steps published, when each ``publish`` was called and returned, the
Bridge's ``detached`` reason) once the Bridge is closed, as a simulation writes its own files.
``--hold-at-step K --hold-file PATH``: every rank waits, before publishing step K, until PATH
exists (a test changes the cluster while no rank is inside the Bridge). ``--steer NAME``: every
rank calls ``bridge.get(NAME, "default")`` after each publish, as the heat solver does, and
reports what each returned.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import time

import numpy as np
from mpi4py import MPI

from deisa import ArraySpec, Bridge
from deisa.bridge.arrays.decomposition import even_split


def expected(step: int, shape: tuple[int, int]) -> np.ndarray:
    x, y = np.indices(shape)
    return step * 1e6 + x * 1e3 + y


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("scheduler_file")
    parser.add_argument("--shape", type=int, nargs=2, default=[8, 6])
    parser.add_argument("--grid", type=int, nargs=2, default=[2, 2])
    parser.add_argument("--steps", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--nsteps", type=int, default=None, help="publish steps 0..N-1")
    parser.add_argument("--name", default="field")
    parser.add_argument("--buffer-nb", type=int, default=None)
    parser.add_argument("--placement", default="round_robin")
    parser.add_argument("--on-full", default="block")
    parser.add_argument("--mode", default="async")
    parser.add_argument("--timeout", type=float, default=600.0)
    # start-up on a loaded machine (imports, mpirun, the scheduler's own start) can be slow
    parser.add_argument("--connect-timeout", type=float, default=120.0)
    parser.add_argument("--sleep", type=float, default=0.0, help="seconds between steps")
    parser.add_argument("--die-rank", type=int, default=None)
    parser.add_argument("--die-at-step", type=int, default=None)
    parser.add_argument("--die-by-kill", action="store_true", help="SIGKILL, not os._exit")
    parser.add_argument("--bad-dtype-rank", type=int, default=None)
    parser.add_argument("--overlap-rank", type=int, default=None)
    parser.add_argument("--on-worker-loss", default="continue")
    parser.add_argument("--on-scheduler-loss", default="continue")
    parser.add_argument("--transport", default="auto")
    parser.add_argument("--done", default=None, help="directory of the per-rank reports")
    parser.add_argument("--hold-at-step", type=int, default=None)
    parser.add_argument("--hold-file", default=None)
    parser.add_argument("--steer", default=None, help="bridge.get(STEER) after each publish")
    args = parser.parse_args()
    comm = MPI.COMM_WORLD
    rank = comm.Get_rank()
    cx, cy = divmod(rank, args.grid[1])
    (x0, h), (y0, w) = (
        even_split(args.shape[0], args.grid[0], cx),
        even_split(args.shape[1], args.grid[1], cy),
    )
    dtype = "float32" if rank == args.bad_dtype_rank else "float64"
    declared_h = h + 1 if rank == args.overlap_rank and x0 + h < args.shape[0] else h
    if rank == args.overlap_rank and declared_h == h:
        x0, declared_h = x0 - 1, h + 1
    spec = ArraySpec(dtype, args.shape, (x0, y0), (declared_h, w))
    steps = list(range(args.nsteps)) if args.nsteps is not None else args.steps
    with Bridge(
        args.scheduler_file,
        {args.name: spec},
        buffer_nb=args.buffer_nb,
        placement=args.placement,
        timeout=args.timeout,
        connect_timeout=args.connect_timeout,
        on_full=args.on_full,
        mode=args.mode,
        on_worker_loss=args.on_worker_loss,
        on_scheduler_loss=args.on_scheduler_loss,
        transport=args.transport,
    ) as bridge:
        returned: list[tuple[int, float, float]] = []  # (step, publish called, returned)
        steered: list[object] = []  # what each bridge.get(--steer) returned
        for step in steps:
            if rank == args.die_rank and step == args.die_at_step:
                sys.stderr.write(f"publish_blocks: rank {rank} dies before step {step}\n")
                sys.stderr.flush()
                if args.die_by_kill:
                    os.kill(os.getpid(), signal.SIGKILL)
                os._exit(3)
            if step == args.hold_at_step:
                while not os.path.exists(args.hold_file):
                    time.sleep(0.05)
            block = expected(step, tuple(args.shape))[x0 : x0 + h, y0 : y0 + w]
            called = time.time()
            bridge.publish(args.name, block, step)
            returned.append((step, called, time.time()))
            if args.steer is not None:  # as the heat solver asks after every publish
                steered.append(bridge.get(args.steer, "default"))
            if args.sleep:
                time.sleep(args.sleep)
    if args.done:
        report = {
            "published": len(steps),
            "returned": returned,
            "detached": bridge.detached,
            "steered": steered,
            "transport": bridge.transport,
            "distributed": "distributed" in sys.modules,  # rank 0 without a relay imports it
        }
        with open(os.path.join(args.done, f"rank-{rank}.json"), "w") as f:
            json.dump(report, f)


if __name__ == "__main__":
    main()
