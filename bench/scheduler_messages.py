"""Scheduler messages per step as the number of MPI ranks grows.

    python -m bench.scheduler_messages --out results/        # ~1-2 minutes on 2 cores

For each rank count (2, 4, 8 by default, oversubscribed), runs the Python heat solver under
mpirun, publishing a fixed-size field through the Bridge to a real scheduler and two worker
processes, while an Adapter in this process takes every step. Every RPC and stream message the
scheduler handles during the run is counted by op (the scheduler runs in this process, so its
handler tables can be wrapped: :func:`deisa._dask_internals.count_handler_calls`).

Printed per rank count: messages per step on the scheduler in all, those the simulation sends
(``deisa_publish``), those the analytics sends, and the rest (heartbeats, which depend on wall
time, not on steps). Writes ``scheduler_messages.json``. The target: simulation messages per
step and array constant in the rank count.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

import yaml

PINS = {"OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
GRIDS = {1: (1, 1), 2: (2, 1), 4: (2, 2), 8: (4, 2), 16: (4, 4)}
SIMULATION_OPS = {"deisa_publish", "deisa_open", "deisa_close", "deisa_workers"}
ANALYTICS_OPS = {"deisa_get", "deisa_meta", "client-releases-keys", "client-desires-keys"}
HEARTBEAT_OPS = {"heartbeat_worker", "heartbeat-client", "keep-alive"}


def run_one(ranks: int, size: int, steps: int, workdir: Path) -> dict[str, Any]:
    from distributed import Client, LocalCluster

    from deisa import Adapter
    from deisa._dask_internals import count_handler_calls

    os.environ.update(PINS)
    config = workdir / f"sim-{ranks}.yml"
    config.write_text(
        yaml.safe_dump(
            {
                "global_size": [size, size],
                "process_grid": list(GRIDS[ranks]),
                "steps": steps,
                "output_period": 1,
            }
        )
    )
    with (
        LocalCluster(
            n_workers=2,
            threads_per_worker=1,
            processes=True,
            host="127.0.0.1",
            dashboard_address=None,
        ) as cluster,
        Client(cluster) as client,
    ):
        scheduler_file = workdir / f"scheduler-{ranks}.json"
        scheduler_file.write_text(json.dumps({"address": cluster.scheduler.address}))
        adapter = Adapter(client, timeout=120)
        counter: Counter[str] = Counter()
        restore = count_handler_calls(cluster.scheduler, counter)
        t0 = time.perf_counter()
        env = {**os.environ, **PINS, "OMPI_ALLOW_RUN_AS_ROOT": "1",
               "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1"}  # fmt: skip
        sim = subprocess.Popen(
            ["mpirun", "--oversubscribe", "-np", str(ranks), sys.executable, "-m",
             "deisa_simulation.heat", str(config), "--scheduler-file", str(scheduler_file),
             "--buffer-nb", "2"],
            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        try:
            taken = 0
            for _, field in adapter["gtemp"].items():
                field.sum().compute()
                taken += 1
            _, err = sim.communicate(timeout=300)
        finally:
            if sim.poll() is None:
                sim.kill()
        elapsed = time.perf_counter() - t0
        restore()
        if sim.returncode != 0 or taken != steps:
            raise RuntimeError(f"{ranks} ranks: simulation failed ({taken} steps taken):\n{err}")
    by_group = {
        "simulation": sum(n for op, n in counter.items() if op in SIMULATION_OPS),
        "publish": counter["deisa_publish"],
        "analytics": sum(n for op, n in counter.items() if op in ANALYTICS_OPS),
        "heartbeats": sum(n for op, n in counter.items() if op in HEARTBEAT_OPS),
    }
    by_group["other"] = sum(counter.values()) - sum(
        by_group[g] for g in ("simulation", "analytics", "heartbeats")
    )
    return {
        "ranks": ranks,
        "steps": steps,
        "seconds": elapsed,
        "total": sum(counter.values()),
        "per_step": {group: n / steps for group, n in by_group.items()},
        "by_op": dict(counter),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ranks", type=int, nargs="+", default=[2, 4, 8])
    parser.add_argument("--size", type=int, default=256, help="field is size x size float64")
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--out", type=Path, default=Path("results"))
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        records = [run_one(r, args.size, args.steps, Path(tmp)) for r in args.ranks]

    print(f"Scheduler messages per step ({args.size}x{args.size} field, {args.steps} steps)")
    header = f"{'ranks':>5} {'simulation':>10} {'publish':>8} {'analytics':>9} {'heartbeat':>9}"
    print(header + f" {'other':>6} {'all':>6} {'wall s':>7}")
    for rec in records:
        p = rec["per_step"]
        print(
            f"{rec['ranks']:>5} {p['simulation']:>10.2f} {p['publish']:>8.2f} "
            f"{p['analytics']:>9.2f} {p['heartbeats']:>9.2f} {p['other']:>6.2f} "
            f"{rec['total'] / rec['steps']:>6.2f} {rec['seconds']:>7.1f}"
        )
    sim = [rec["per_step"]["simulation"] for rec in records]
    flat = max(sim) - min(sim) < 1e-9
    print(f"target: simulation messages per step constant in ranks: {'PASS' if flat else 'FAIL'}")
    (args.out / "scheduler_messages.json").write_text(
        json.dumps({"records": records, "target_flat": flat}, indent=1)
    )
    return 0 if flat else 1


if __name__ == "__main__":
    raise SystemExit(main())
