"""Scheduler messages per step as the number of MPI ranks grows.

    python -m bench.scheduler_messages --out results/        # ~1-2 minutes on 2 cores

For each rank count (2, 4, 8 by default, oversubscribed), runs the Python heat solver under
mpirun, publishing a fixed-size field through the Bridge to a real scheduler and two worker
processes, while an Adapter in this process takes every step. Every RPC and stream message the
scheduler handles during the run is counted by op (the scheduler runs in this process, so its
handler tables can be wrapped: :func:`deisa._dask_internals.count_handler_calls`).

Printed per rank count: messages per step on the scheduler in all, those the simulation sends
(``deisa_publish``), those the analytics sends, and the rest (heartbeats, which depend on wall
time, not on steps); the scheduler's CPU time per step (``time.thread_time`` of its event-loop
thread, which the client does not share: the whole run, start-up included, divided by the
steps, and "steady": between the first and the last step the adapter sees, from the thread's
own CPU counters, divided by the steps in between); and the latency from a publish reaching
the scheduler (``deisa_publish``, blocks already on the workers) to the adapter holding the
step (median; counted from when the analytics asked for the step if it was busy when the step
came). Writes ``scheduler_messages.json`` and
``scheduler_messages.png``. The target: simulation messages per step constant in the rank count.
``--quick``: ranks 2 4 8 and 10 steps; default ranks 2 4 8 16 (oversubscribed), 20 steps.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import yaml

from bench._common import PINS

GRIDS = {1: (1, 1), 2: (2, 1), 4: (2, 2), 8: (4, 2), 16: (4, 4)}
SIMULATION_OPS = {"deisa_publish", "deisa_open", "deisa_close", "deisa_workers"}
ANALYTICS_OPS = {"deisa_get", "deisa_meta", "client-releases-keys", "client-desires-keys"}
HEARTBEAT_OPS = {"heartbeat_worker", "heartbeat-client", "keep-alive"}


def _thread_cpu(native_id: int) -> float:
    """User + system CPU seconds of one thread of this process (Linux: per-thread times)."""
    import psutil

    for thread in psutil.Process().threads():
        if thread.id == native_id:
            return thread.user_time + thread.system_time
    return float("nan")


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
        # by address, not Client(cluster): the client gets its own loop thread, so the CPU time
        # of the scheduler's loop thread is the scheduler's (and the nannies' few messages)
        Client(cluster.scheduler.address) as client,
    ):
        scheduler_file = workdir / f"scheduler-{ranks}.json"
        scheduler_file.write_text(json.dumps({"address": cluster.scheduler.address}))
        adapter = Adapter(client, timeout=120)
        counter: Counter[str] = Counter()
        restore = count_handler_calls(cluster.scheduler, counter)
        published: dict[int, float] = {}
        publish_handler = cluster.scheduler.handlers["deisa_publish"]

        def stamped(*a: Any, **kw: Any) -> Any:
            published.setdefault(kw.get("step", -1), time.perf_counter())
            return publish_handler(*a, **kw)

        cluster.scheduler.handlers["deisa_publish"] = functools.wraps(publish_handler)(stamped)
        cpu0 = client.run_on_scheduler(time.thread_time)
        loop_thread = client.run_on_scheduler(threading.get_native_id)
        steady: list[float] = []  # scheduler-thread CPU at each step seen (no extra message)
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
            seen: dict[int, float] = {}
            ready: dict[int, float] = {0: t0}  # when the analytics asked for each step
            for step, field in adapter["gtemp"].items():
                seen[step] = time.perf_counter()
                steady.append(_thread_cpu(loop_thread))
                field.sum().compute()
                ready[step + 1] = time.perf_counter()
                taken += 1
            _, err = sim.communicate(timeout=300)
        finally:
            if sim.poll() is None:
                sim.kill()
        elapsed = time.perf_counter() - t0
        cpu = client.run_on_scheduler(time.thread_time) - cpu0
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
    # publish (rank 0's deisa_publish reaching the scheduler, every block already on a worker)
    # to the adapter holding the step; counted from when the analytics asked for it if later,
    # so that a step queued by flow control while the analytics was busy does not count
    latency = [seen[s] - max(published[s], ready[s]) for s in seen if s in published]
    queued = [seen[s] - published[s] for s in seen if s in published]
    return {
        "ranks": ranks,
        "steps": steps,
        "seconds": elapsed,
        "scheduler_cpu_s": cpu,
        "scheduler_cpu_ms_per_step": 1e3 * cpu / steps,
        # between the first and the last step seen: no start-up, no teardown
        "scheduler_cpu_steady_ms_per_step": 1e3 * (steady[-1] - steady[0]) / (len(steady) - 1)
        if len(steady) > 1
        else None,
        "publish_to_adapter_ms": [1e3 * x for x in latency],
        "publish_to_adapter_ms_median": 1e3 * statistics.median(latency) if latency else None,
        "publish_to_adapter_with_queue_ms": [1e3 * x for x in queued],
        "total": sum(counter.values()),
        "per_step": {group: n / steps for group, n in by_group.items()},
        "by_op": dict(counter),
    }


def plot(records: list[dict[str, Any]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ranks = [r["ranks"] for r in records]
    fig, (a, b) = plt.subplots(1, 2, figsize=(9, 3.5))
    for group in ("simulation", "analytics", "heartbeats", "other"):
        a.plot(ranks, [r["per_step"][group] for r in records], "o-", label=group)
    a.set_xlabel("MPI ranks")
    a.set_ylabel("scheduler messages per step")
    a.legend(fontsize=8)
    b.plot(ranks, [r["scheduler_cpu_ms_per_step"] for r in records], "o-",
           label="scheduler CPU (whole run)")  # fmt: skip
    b.plot(ranks, [r["scheduler_cpu_steady_ms_per_step"] for r in records], "^-",
           label="scheduler CPU (steady)")  # fmt: skip
    b.plot(ranks, [r["publish_to_adapter_ms_median"] for r in records], "s-",
           label="publish -> adapter")  # fmt: skip
    b.set_xlabel("MPI ranks")
    b.set_ylabel("ms per step")
    b.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=80)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ranks", type=int, nargs="+", default=[2, 4, 8, 16])
    parser.add_argument("--size", type=int, default=256, help="field is size x size float64")
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--out", type=Path, default=Path("results"))
    parser.add_argument("--quick", action="store_true", help="ranks 2 4 8, 10 steps")
    args = parser.parse_args(argv)
    if args.quick:
        args.ranks, args.steps = [2, 4, 8], 10
    args.out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        records = [run_one(r, args.size, args.steps, Path(tmp)) for r in args.ranks]

    print(f"Scheduler messages per step ({args.size}x{args.size} field, {args.steps} steps)")
    header = f"{'ranks':>5} {'simulation':>10} {'publish':>8} {'analytics':>9} {'heartbeat':>9}"
    print(header + f" {'other':>6} {'all':>6} {'wall s':>7} {'sched CPU ms/step':>17}"
          f" {'steady':>7}"
          f" {'publish->adapter ms':>19}")  # fmt: skip
    for rec in records:
        p = rec["per_step"]
        print(
            f"{rec['ranks']:>5} {p['simulation']:>10.2f} {p['publish']:>8.2f} "
            f"{p['analytics']:>9.2f} {p['heartbeats']:>9.2f} {p['other']:>6.2f} "
            f"{rec['total'] / rec['steps']:>6.2f} {rec['seconds']:>7.1f}"
            f" {rec['scheduler_cpu_ms_per_step']:>17.2f}"
            f" {rec['scheduler_cpu_steady_ms_per_step'] or float('nan'):>7.2f}"
            f" {rec['publish_to_adapter_ms_median'] or float('nan'):>19.2f}"
        )
    sim = [rec["per_step"]["simulation"] for rec in records]
    flat = max(sim) - min(sim) < 1e-9
    print(f"target: simulation messages per step constant in ranks: {'PASS' if flat else 'FAIL'}")
    plot(records, args.out / "scheduler_messages.png")
    (args.out / "scheduler_messages.json").write_text(
        json.dumps({"records": records, "target_flat": flat}, indent=1)
    )
    return 0 if flat else 1


if __name__ == "__main__":
    raise SystemExit(main())
