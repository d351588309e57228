"""Ray's object store as ``bench.node_local``'s peer (run with a Python that has ``ray``).

A local Ray instance (on loopback, no dashboard, ``--store-mib`` of object store); a driver
``ray.put``s ``--steps`` blocks of ``--mib`` MiB back to back, while an actor ``ray.get``s each
as it comes and sums it (the analytics taking every step); then ``--pause-s`` (the actor drains
the burst and the driver drops its references), and the next burst, ``--bursts`` in all.
Writes ``--out`` (JSON): the driver's memcpy of its block and, per burst, each ``put``'s
duration, the burst's time from the first ``put`` to the last one's return (the block
sealed in the store: what deisa's ``flush`` waits for, the step registered) and the
yardstick beside it (copies of the block right before and right after the burst, as deisa's
ranks take theirs). ``--driver-cores``: the driver moves there once Ray's processes, started
where this process runs, are up (the ranks' cores, Ray's apart).
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

import numpy as np
import ray
from _memcpy import memcpy_times, scratch


@ray.remote
class Taker:
    """The analytics: takes each block as it comes."""

    def take(self, block: np.ndarray) -> float:
        return float(block.sum())


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--mib", type=float, required=True)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--bursts", type=int, default=2)
    parser.add_argument("--pause-s", type=float, default=5.0)
    parser.add_argument("--store-mib", type=int, default=4096)
    parser.add_argument("--driver-cores", type=int, nargs="+")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    rows = max(1, int(args.mib * 2**20 / 8 / 1024))
    block = np.random.default_rng(0).random((rows, 1024))
    copies = memcpy_times(block)
    ray.init(
        num_cpus=1, include_dashboard=False, _node_ip_address="127.0.0.1",
        object_store_memory=args.store_mib * 2**20, log_to_driver=False,
    )  # fmt: skip
    taker = Taker.remote()  # type: ignore[attr-defined]
    ray.get(taker.take.remote(block[:1]))  # the actor is up
    if args.driver_cores:
        os.sched_setaffinity(0, set(args.driver_cores))
    into = scratch(block)
    bursts = []
    for burst in range(args.bursts):
        if burst:
            time.sleep(args.pause_s)
        refs, taken, durations = [], [], []
        yardstick = memcpy_times(block, repeat=3, into=into)
        t0 = time.perf_counter()
        for _ in range(args.steps):
            called = time.perf_counter()
            ref = ray.put(block)
            durations.append(time.perf_counter() - called)
            refs.append(ref)
            taken.append(taker.take.remote(ref))
        sustained = time.perf_counter() - t0
        ray.get(taken)
        yardstick += memcpy_times(block, repeat=3, into=into)
        del refs, taken
        bursts.append({"sustained_s": sustained, "publish_s": durations, "yardstick_s": yardstick})
    ray.shutdown()
    report = {
        "nbytes": block.nbytes,
        "memcpy_s": float(np.median(copies)),
        "bursts": bursts,
        "ray": ray.__version__,
    }
    args.out.write_text(json.dumps(report))


if __name__ == "__main__":
    main()
