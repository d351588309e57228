"""Asynchronous publish against a memcpy of the same block, with N MPI ranks (issue #24).

    python -m bench.publish --ranks 4 --sizes 16 64 --out results/     # ~2 minutes on 2 cores
    python -m bench.publish --ranks 1 --sizes 16 64 --deisa /tmp/base  # another checkout's deisa

``--ranks`` MPI ranks (``mpirun --oversubscribe``) each hold a block of ``--sizes`` MiB (float64)
and loop ``--steps`` times over: a compute of ``--compute`` passes over the block (``np.add`` in
place, memory-bound like a stencil), a ``np.copyto`` of the block into a preallocated array (the
*memcpy*, timed under the same load), and ``Bridge.publish`` of the block in ``mode="async"``
(timed around the call; ``max_in_flight`` 2, ``buffer_nb`` 2). The analytics is this process:
an :class:`~deisa.Adapter` that takes every step and drops it, on a ``LocalCluster`` of one
worker process. Steps 0 and 1 are left out (the background connection).

Per size: the median publish and memcpy over every rank and step, the median of what the
exchanges took inside publish (``sync_s - wait_s``: the exchange of the previous publish
completed, and this one's posted) and of the flow-control waits (``wait_s``), and the exchanges
made. Target (issue #24): median publish <= 2.5 x memcpy + 2 ms. ``--deisa DIR`` runs the ranks
with ``DIR``'s ``deisa`` package (e.g. ``git worktree add /tmp/base <commit>``), for before and
after figures taken alternately. Writes ``publish.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench._common import PINS, child_env, finish, local_cluster, median, table

os.environ.update(PINS)

RANK = r"""
import json, sys, time
import numpy as np
from mpi4py import MPI
from deisa import ArraySpec, Bridge

scheduler_file, out, mib, steps, passes = sys.argv[1], sys.argv[2], *map(int, sys.argv[3:6])
comm = MPI.COMM_WORLD
rank, size = comm.Get_rank(), comm.Get_size()
cols = 1024
rows = mib * 2**20 // (8 * cols)
spec = ArraySpec("float64", global_shape=(rows * size, cols), start=(rows * rank, 0),
                 shape=(rows, cols))
field = np.random.default_rng(rank).random((rows, cols))
target = np.empty_like(field)
np.copyto(target, field)
publish, memcpy = [], []
bridge = Bridge(scheduler_file, {"field": spec}, mode="async", max_in_flight=2, buffer_nb=2,
                connect_timeout=300)
with bridge:
    for step in range(steps):
        for _ in range(passes):
            np.add(field, 1e-9, out=field)
        t0 = time.perf_counter()
        np.copyto(target, field)
        t1 = time.perf_counter()
        bridge.publish("field", field, step)
        t2 = time.perf_counter()
        memcpy.append(t1 - t0)
        publish.append(t2 - t1)
    t3 = time.perf_counter()
timings = bridge.timings
json.dump({
    "rank": rank, "publish": publish, "memcpy": memcpy, "close_s": time.perf_counter() - t3,
    "exchange": [t.sync_s - t.wait_s for t in timings], "wait": [t.wait_s for t in timings],
    "copy": [t.copy_s for t in timings], "exchanges": bridge.exchanges,
}, open(f"{out}/rank-{rank}.json", "w"))
"""

SKIP = 2  # steps left out: the background connection


def run_size(
    ranks: int, mib: int, steps: int, passes: int, deisa: Path | None, workdir: Path
) -> dict[str, Any]:
    """One run of the ranks at ``mib`` MiB/rank; every rank's per-step lists."""
    from distributed import Client

    from deisa import Adapter

    out = workdir / f"out-{mib}"
    out.mkdir()
    script = workdir / "rank.py"
    script.write_text(RANK)
    env = child_env()
    if deisa is not None:
        env["PYTHONPATH"] = os.pathsep.join((str(deisa), env["PYTHONPATH"]))
    with (
        local_cluster(1) as cluster,
        Client(cluster) as client,
    ):  # fmt: skip
        scheduler_file = workdir / f"scheduler-{mib}.json"
        scheduler_file.write_text(json.dumps({"address": cluster.scheduler.address}))
        cmd = ["mpirun", "--oversubscribe", "-np", str(ranks), sys.executable, str(script),
               str(scheduler_file), str(out), str(mib), str(steps), str(passes)]  # fmt: skip
        t0 = time.perf_counter()
        proc = subprocess.Popen(cmd, env=env, stderr=subprocess.PIPE, text=True)
        taken = sum(1 for _ in Adapter(client, timeout=300)["field"].items())
        _, err = proc.communicate(timeout=900)
        wall = time.perf_counter() - t0
    if proc.returncode != 0:
        raise RuntimeError(f"the ranks failed ({proc.returncode}): {err[-2000:]}")
    per_rank = [json.loads((out / f"rank-{r}.json").read_text()) for r in range(ranks)]
    return {"mib": mib, "wall_s": wall, "steps_taken": taken, "ranks": per_rank}


def summarize(run: dict[str, Any]) -> dict[str, float]:
    def pooled(key: str) -> list[float]:
        return [v for rank in run["ranks"] for v in rank[key][SKIP:]]

    return {
        "publish_ms": 1e3 * median(pooled("publish")),
        "memcpy_ms": 1e3 * median(pooled("memcpy")),
        "exchange_ms": 1e3 * median(pooled("exchange")),
        "wait_ms": 1e3 * median(pooled("wait")),
        "worst_publish_ms": 1e3 * max(pooled("publish")),
        "exchanges_per_publish": median([r["exchanges"] / len(r["publish"]) for r in run["ranks"]]),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ranks", type=int, default=4)
    parser.add_argument("--sizes", type=int, nargs="+", default=[16, 64], help="MiB per rank")
    parser.add_argument("--steps", type=int, default=22)
    parser.add_argument("--compute", type=int, default=40, help="passes over the block per step")
    parser.add_argument("--quick", action="store_true", help="--steps 10 --sizes 16")
    parser.add_argument("--deisa", type=Path, default=None, help="checkout whose deisa to run")
    parser.add_argument("--out", type=Path, default=Path("results"))
    args = parser.parse_args(argv)
    if args.quick:
        args.steps, args.sizes = 10, [16]
    args.out.mkdir(parents=True, exist_ok=True)
    where = str(args.deisa or "this checkout")
    print(f"async publish, {args.ranks} ranks, deisa from {where}, median over ranks and "
          f"steps {SKIP}..{args.steps - 1}", flush=True)  # fmt: skip
    runs, rows, targets = [], [], []
    with tempfile.TemporaryDirectory() as tmp:
        for mib in args.sizes:
            run = run_size(args.ranks, mib, args.steps, args.compute, args.deisa, Path(tmp))
            run["summary"] = s = summarize(run)
            runs.append(run)
            bound = 2.5 * s["memcpy_ms"] + 2
            rows.append([
                mib, f"{s['publish_ms']:.2f}", f"{s['memcpy_ms']:.2f}", f"{bound:.2f}",
                f"{s['exchange_ms']:.2f}", f"{s['wait_ms']:.2f}", f"{s['worst_publish_ms']:.1f}",
                f"{s['exchanges_per_publish']:.2f}",
            ])  # fmt: skip
            targets.append((
                f"median publish <= 2.5x memcpy + 2 ms at {mib} MiB/rank, {args.ranks} ranks",
                s["publish_ms"] <= bound,
                f"{s['publish_ms']:.2f} ms against {bound:.2f} ms",
            ))  # fmt: skip
    print(table(["MiB/rank", "publish ms", "memcpy ms", "2.5x memcpy + 2", "exchange ms",
                 "wait ms", "worst publish ms", "exchanges/publish"], rows))  # fmt: skip
    return finish(
        args.out, "publish", targets, ranks=args.ranks, steps=args.steps,
        compute=args.compute, deisa=where, load=os.getloadavg(), runs=runs,
    )  # fmt: skip


if __name__ == "__main__":
    raise SystemExit(main())
