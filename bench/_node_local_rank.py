"""One rank of ``bench.node_local`` (run under mpirun): memcpy, start-up, sustained publishes.

Writes ``<out>/rank-<r>.json``: the rank's memcpy of its block at its start (into numpy's
memory, and into 4 KiB pages: ``memcpy_4k_s``), the CPU time from before
``import deisa`` until its first two publishes are registered, the sustained bandwidth of
``--steps`` publishes (from the first call until every one is registered, less the compute
between them: ``--compute-ms`` of busy work before each, none by default), each
publish's duration, CPU time on the rank's thread and involuntary context switches of that
thread (``publish_preempted``), the resident memory before the Bridge and after the publishes, the
transport the blocks took, and how the sustained publishes placed them in shared memory
(``slots``: into a slot mapped ahead, a slot given back, or a fresh one; the Bridge's debug
lines, :data:`deisa.bridge.shm.transport.SLOT_PATHS`). With ``--bursts N``, the sustained publishes
are repeated N times, once the analytics has taken the last burst (``--taken``: its count of
steps) and ``--pause-s`` after (the worker frees the slots): one
entry of ``bursts`` each; the top-level figures are the first burst's. ``pool``: the Bridge's
warm pool of shared memory (``Bridge.shm_pool``).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import resource
import time
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
from _memcpy import memcpy_times, scratch
from mpi4py import MPI


class SlotPaths(logging.Handler):
    """Counts the Bridge's "a block into a ... slot" debug lines, by how the block was placed."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.counts: Counter[str] = Counter()

    def emit(self, record: logging.LogRecord) -> None:
        path = getattr(record, "deisa_slot", None)
        if path is not None:
            self.counts[path] += 1


def memory() -> dict[str, int]:
    """VmRSS, RssAnon, RssShmem of this process, in bytes."""
    fields: dict[str, int] = {}
    for line in Path("/proc/self/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "RssAnon", "RssShmem"):
            fields[key] = int(value.split()[0]) * 1024
    return fields


YARDSTICK = 3
"""Copies of the block timed right before and right after each burst."""


def compute(seconds: float, block: np.ndarray, into: np.ndarray) -> tuple[float, float]:
    """Keep this rank's core busy for about ``seconds``, as a solver's iterations between two
    outputs would (a stencil-like update of a small array, not the block), with one copy of
    ``block`` into ``into`` half-way, timed: the time it all took, and the copy's."""
    t0 = time.perf_counter()
    field = np.ones(32768)
    copy = None
    while (now := time.perf_counter()) - t0 < seconds:
        if copy is None and now - t0 >= seconds / 2:
            (copy,) = memcpy_times(block, repeat=1, into=into)
        field[1:-1] = 0.5 * field[1:-1] + 0.25 * (field[2:] + field[:-2])
    if copy is None:
        (copy,) = memcpy_times(block, repeat=1, into=into)
    return time.perf_counter() - t0, copy


def preempted() -> int:
    """Involuntary context switches of the calling thread so far (it was made to wait)."""
    return resource.getrusage(resource.RUSAGE_THREAD).ru_nivcsw


def sustain(
    bridge: Any, comm: Any, args: argparse.Namespace, block: np.ndarray, steps: range,
    into: np.ndarray,
) -> dict[str, Any]:  # fmt: skip
    """Publish ``steps`` (``--compute-ms`` of compute before each) until every one is
    registered: the burst's figures; ``into``, the yardstick's buffer (:func:`_memcpy.scratch`,
    made before the memory is measured: it is the benchmark's, not the Bridge's)."""
    slots = SlotPaths()
    placed = logging.getLogger("deisa.bridge.shm.transport")
    placed.addHandler(slots)
    placed.setLevel(logging.DEBUG)
    # the debug lines counted here are the benchmark's, not the Bridge's cost: no caller lookup
    # (a walk of the stack per line), thread or process names (the logging HOWTO's Optimization)
    logging._srcfile = None
    logging.logThreads = logging.logProcesses = logging.logMultiprocessing = False
    yardstick = memcpy_times(block, repeat=YARDSTICK, into=into)
    comm.Barrier()
    durations, cpu, switches, paired = [], [], [], []
    already = len(bridge.timings)
    t0 = time.perf_counter()
    computing = 0.0
    for step in steps:
        if args.compute_ms:
            took, copy = compute(args.compute_ms / 1000, block, into)
            computing += took
            paired.append(copy)
        called, cpu0, switched = time.perf_counter(), time.thread_time(), preempted()
        bridge.publish(args.name, block, step)
        durations.append(time.perf_counter() - called)
        cpu.append(time.thread_time() - cpu0)
        switches.append(preempted() - switched)
    bridge.flush()
    wall = time.perf_counter() - t0
    yardstick += memcpy_times(block, repeat=YARDSTICK, into=into)
    placed.removeHandler(slots)
    timings = bridge.timings[already:]
    return {
        "sustained_s": wall - computing,
        "wall_s": wall,
        "compute_s": computing,
        "publish_s": durations,
        "publish_cpu_s": cpu,
        "publish_preempted": switches,
        "copy_s": [t.copy_s for t in timings],
        "wait_s": [t.wait_s for t in timings],
        "slots": dict(slots.counts),
        "yardstick_s": yardstick,
        "yardstick_paired_s": paired,
    }


def drained(taken: Path | None, steps: int, timeout: float = 300.0) -> None:
    """Wait until the analytics has taken ``steps`` steps (its count in ``taken``)."""
    deadline = time.monotonic() + timeout
    while taken is not None and time.monotonic() < deadline:
        with contextlib.suppress(OSError, ValueError):
            if int(taken.read_text()) >= steps:
                return
        time.sleep(0.05)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("scheduler_file")
    parser.add_argument("--name", required=True)
    parser.add_argument("--mib", type=float, required=True)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--compute-ms", type=float, default=0.0)
    parser.add_argument("--transport", default="auto")
    parser.add_argument("--mode", default="async")
    parser.add_argument("--bursts", type=int, default=1)
    parser.add_argument("--pause-s", type=float, default=5.0)
    parser.add_argument("--pool-mib", default="none", help="shm_pool_mib (none: the default)")
    parser.add_argument("--taken", type=Path, help="the analytics' count of steps taken")
    parser.add_argument("--max-in-flight", type=int, help="max_in_flight (the Bridge's default)")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    comm = MPI.COMM_WORLD
    rank, size = comm.Get_rank(), comm.Get_size()
    cols = 1024
    rows = max(1, int(args.mib * 2**20 / 8 / cols))
    block = np.random.default_rng(rank).random((rows, cols))
    copies = memcpy_times(block)
    small_copies = memcpy_times(block, small_pages=True)
    into = scratch(block)
    before = memory()

    cpu0 = time.process_time()
    from deisa import ArraySpec, Bridge

    spec = ArraySpec(block.dtype, (size * rows, cols), (rank * rows, 0), block.shape)
    pool = None if args.pool_mib == "none" else float(args.pool_mib)
    given = {} if args.max_in_flight is None else {"max_in_flight": args.max_in_flight}
    bridge = Bridge(
        args.scheduler_file, {args.name: spec}, mode=args.mode, transport=args.transport,
        connect_timeout=300, shm_pool_mib=pool, **given,
    )  # fmt: skip
    for step in range(2):
        bridge.publish(args.name, block, step)
    bridge.flush()
    start_cpu = time.process_time() - cpu0

    bursts = []
    for burst in range(args.bursts):
        if burst:  # the analytics drains the last burst
            drained(args.taken, 2 + burst * args.steps)
            time.sleep(args.pause_s)
        first = 2 + burst * args.steps
        steps = range(first, first + args.steps)
        bursts.append(sustain(bridge, comm, args, block, steps, into))
    after = memory()
    transport, pool_summary = bridge.transport, bridge.shm_pool
    max_in_flight = bridge.options.max_in_flight
    bridge.close()
    report = {
        "rank": rank,
        "nbytes": block.nbytes,
        "memcpy_s": float(np.median(copies)),
        "memcpy_4k_s": float(np.median(small_copies)),
        "start_cpu_s": start_cpu,
        **bursts[0],
        "bursts": bursts,
        "memory_before": before,
        "memory_after": after,
        "transport": transport,
        "max_in_flight": max_in_flight,
        "pool": pool_summary,
        "cpus": sorted(os.sched_getaffinity(0)),
    }
    (args.out / f"rank-{rank}.json").write_text(json.dumps(report))


if __name__ == "__main__":
    main()
