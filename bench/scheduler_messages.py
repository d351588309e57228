"""Scheduler messages per step as the number of MPI ranks grows.

    python -m bench.scheduler_messages --out results/        # ~1-2 minutes on 2 cores

For each rank count (2, 4, 8 by default, oversubscribed), runs the Python heat solver under
mpirun, publishing a fixed-size field through the Bridge to a real scheduler and two worker
processes (preloading ``deisa.worker``, as ``deisa-run``'s do), while an Adapter in
this process takes every step. Every RPC and stream message the scheduler handles during the
run is counted by op (the scheduler runs in this process, so its handler tables can be
wrapped: :func:`deisa._dask_internals.count_handler_calls`).

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

``--boxes 1 8 64``: at the largest rank count, each rank publishes its block as that many boxes
(bands of rows, ``deisa_simulation.heat --boxes``): a row per box count with the simulation's
messages per step, the keys registered per step (one per rank: a rank's boxes are one parcel)
and the bytes of each step's layout (what the scheduler keeps with the step until it is taken);
the target then covers the box counts too (issue 56 item 9).

``--nodes 1 2 4`` (root, Slurm): each node count above 1 runs the simulation as a Slurm job on
that many nodes of a cluster of network namespaces built on this machine by the test suite's
``tests/multinode.py`` (torn down by PID at the end), with one Dask worker per node and the
``node_local`` placement; the scheduler and the analytics stay in this process, on the login
node. Every rank count runs at every node count. The printed "register ms" is the thread CPU
of the scheduler registering one step's blocks (the per-block part of ``deisa_publish``).
Finally :func:`extrapolate` fits the measured messages per step and CPU per message and block
and prints the scheduler's cost per step on each side at ``--extrapolate RANKS NODES``
(default 1024 ranks, 64 nodes) against the DEISA paper's 9,116 requests/s saturation.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import ipaddress
import json
import os
import re
import shlex
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

from bench._common import PINS, REPO, worker_preloads

GRIDS = {1: (1, 1), 2: (2, 1), 4: (2, 2), 8: (4, 2), 16: (4, 4)}
SIMULATION_OPS = {"deisa_publish", "deisa_open", "deisa_close", "deisa_workers"}
ANALYTICS_OPS = {"deisa_get", "deisa_meta", "deisa_attach", "deisa_detach", "deisa_step_taken",
                 "client-releases-keys", "client-desires-keys"}  # fmt: skip
HEARTBEAT_OPS = {"heartbeat_worker", "heartbeat-client", "keep-alive"}


def _thread_cpu(native_id: int) -> float:
    """User + system CPU seconds of one thread of this process (Linux: per-thread times)."""
    import psutil

    for thread in psutil.Process().threads():
        if thread.id == native_id:
            return thread.user_time + thread.system_time
    return float("nan")


def _write_config(workdir: Path, ranks: int, size: int, steps: int, tag: str) -> Path:
    config = workdir / f"sim-{tag}.yml"
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
    return config


class _Mpirun:
    """The simulation under ``mpirun`` on this node."""

    def __init__(self, ranks: int, config: Path, scheduler_file: Path, boxes: int = 1) -> None:
        env = {**os.environ, **PINS, "OMPI_ALLOW_RUN_AS_ROOT": "1",
               "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1"}  # fmt: skip
        self.proc = subprocess.Popen(
            ["mpirun", "--oversubscribe", "-np", str(ranks), sys.executable, "-m",
             "deisa_simulation.heat", str(config), "--scheduler-file", str(scheduler_file),
             "--buffer-nb", "2", *(["--boxes", str(boxes)] if boxes > 1 else [])],
            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip

    def finish(self) -> str | None:
        """Wait for the end: ``None`` if it succeeded, else what went wrong."""
        _, err = self.proc.communicate(timeout=300)
        return None if self.proc.returncode == 0 else err

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()


JOB_SCRIPT = """#!/bin/bash
#SBATCH --nodes={nodes}
#SBATCH --exclusive
#SBATCH --time=00:10:00
#SBATCH --chdir={workdir}
#SBATCH --output={workdir}/slurm-%j.out
export {pins} OMPI_MCA_btl_tcp_if_include={iface} OMPI_MCA_oob_tcp_if_include={iface}
srun --overlap --overcommit --nodes={nodes} --ntasks={nodes} --ntasks-per-node=1 \\
    --output={workdir}/worker-%N.log {python} -m dask worker --scheduler-file {scheduler_file} \\
    --nthreads 1 --no-nanny --no-dashboard --interface {iface} {preload} \\
    --local-directory "${{TMPDIR:-/tmp}}" &
workers=$!
srun --overlap --overcommit --nodes={nodes} --ntasks={ranks} --mpi=pmix \\
    --output={workdir}/simulation-%N-%t.log {python} -m deisa_simulation.heat {config} \\
    --scheduler-file {scheduler_file} --buffer-nb 2 --placement node_local --min-workers {nodes}
status=$?
kill $workers 2>/dev/null
wait $workers
exit $status
"""


class _SlurmJob:
    """The simulation as a Slurm job on ``nodes`` namespace nodes: one Dask worker per node
    (``node_local`` placement: every block to its own node's worker), the ranks spread over
    the nodes by ``srun``; the scheduler and the analytics stay on the login node (here)."""

    def __init__(
        self, cluster: Any, nodes: int, ranks: int, config: Path, scheduler_file: Path
    ) -> None:
        self.cluster = cluster
        workdir = config.parent / f"job-{nodes}n-{ranks}r"
        workdir.mkdir()
        script = workdir / "job.sh"
        pins = " ".join(f"{k}={v}" for k, v in PINS.items())
        script.write_text(
            JOB_SCRIPT.format(nodes=nodes, workdir=workdir, pins=pins,
                              iface=cluster.interface, python=sys.executable, ranks=ranks,
                              scheduler_file=scheduler_file, config=config,
                              preload=" ".join(f"--preload {shlex.quote(m)}"
                                               for m in worker_preloads()))
        )  # fmt: skip
        submitted = cluster.run("sbatch", "--parsable", str(script))
        if submitted.returncode != 0:
            raise RuntimeError(f"sbatch: {submitted.stderr}")
        self.job = submitted.stdout.strip().split(";")[0]
        self.workdir = workdir

    def _state(self) -> str:
        out = self.cluster.run("scontrol", "show", "job", self.job, timeout=15).stdout
        match = re.search(r"JobState=(\w+)", out)
        return match.group(1) if match else "UNKNOWN"

    def finish(self) -> str | None:
        deadline = time.monotonic() + 300
        state = self._state()
        while state in ("PENDING", "CONFIGURING", "RUNNING", "COMPLETING", "UNKNOWN"):
            if time.monotonic() > deadline:
                break
            time.sleep(1)
            state = self._state()
        if state == "COMPLETED":
            return None
        logs = "\\n".join(
            f"--- {p.name}\\n{p.read_text(errors='replace')[-2000:]}"
            for p in sorted(self.workdir.glob("*.log")) + sorted(self.workdir.glob("*.out"))
        )
        return f"job {self.job} ended {state}\\n{logs}"

    def kill(self) -> None:
        if self._state() not in ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT"):
            self.cluster.run("scancel", self.job)


def login_address(cluster: Any) -> str:
    """The login node's (this process's) address on the namespace cluster's network: the
    subnet's first host, on the bridge (tests/multinode.py)."""
    network = ipaddress.ip_interface(f"{cluster.addresses['ctl']}/24").network
    return str(next(network.hosts()))


def run_one(
    ranks: int,
    size: int,
    steps: int,
    workdir: Path,
    nodes: int = 1,
    cluster: Any = None,
    consumers: int = 1,
    boxes: int = 1,
) -> dict[str, Any]:
    """Measure one run: ``nodes == 1``: this node, ``mpirun`` and two local workers; else a
    Slurm job on ``nodes`` nodes of ``cluster`` (a ``tests/multinode.py`` cluster).
    ``consumers``: Adapters (each with its own Client) that each receive every step.
    ``boxes``: each rank publishes its block as that many boxes (``deisa_simulation.heat
    --boxes``, this node only): each step then carries its layout in its ``deisa_publish``."""
    from distributed import Client, LocalCluster

    from deisa import Adapter, _dask_internals
    from deisa._dask_internals import count_handler_calls

    os.environ.update(PINS)
    tag = f"{nodes}n-{ranks}r-{boxes}b-{consumers}c"
    config = _write_config(workdir, ranks, size, steps, tag)
    local = nodes == 1
    with (
        LocalCluster(
            n_workers=2 if local else 0,
            threads_per_worker=1,
            processes=True,
            host="127.0.0.1" if local else login_address(cluster),
            dashboard_address=None,
            preload=worker_preloads(),  # as deisa-run's workers
        ) as dask_cluster,
        # by address, not Client(cluster): the client gets its own loop thread, so the CPU time
        # of the scheduler's loop thread is the scheduler's (and the nannies' few messages)
        Client(dask_cluster.scheduler.address) as client,
    ):
        scheduler = dask_cluster.scheduler
        scheduler_file = workdir / f"scheduler-{tag}.json"
        scheduler_file.write_text(json.dumps({"address": scheduler.address}))
        adapter = Adapter(client, timeout=120)
        extra = [Client(scheduler.address) for _ in range(consumers - 1)]
        readers = [Adapter(c, timeout=120)["gtemp"] for c in extra]
        for reader in [adapter["gtemp"], *readers]:
            reader._attach()  # all attached before step 0: each receives every step
        threads = [
            threading.Thread(target=lambda r=r: [f.sum().compute() for f in r], daemon=True)
            for r in readers
        ]
        counter: Counter[str] = Counter()
        restore = count_handler_calls(scheduler, counter)
        published: dict[int, float] = {}
        layouts: list[int] = []  # bytes of each step's layout (JSON), as the scheduler keeps it
        publish_handler = scheduler.handlers["deisa_publish"]

        def stamped(*a: Any, **kw: Any) -> Any:
            published.setdefault(kw.get("step", -1), time.perf_counter())
            layout = kw.get("layout")
            layouts.append(0 if layout is None else len(json.dumps(layout)))
            return publish_handler(*a, **kw)

        scheduler.handlers["deisa_publish"] = functools.wraps(publish_handler)(stamped)
        cpu0 = client.run_on_scheduler(time.thread_time)
        loop_thread = client.run_on_scheduler(threading.get_native_id)
        steady: list[float] = []  # scheduler-thread CPU at each step seen (no extra message)
        t0 = time.perf_counter()
        # the simulation side's per-block cost: the scheduler registering a step's blocks
        # (the synchronous part of deisa_publish, in this process's scheduler)
        register = _dask_internals.register_keys
        registered: list[tuple[int, float]] = []  # (blocks, thread CPU seconds) per call

        def timed_register(sched: Any, who_has: dict[Any, Any], *a: Any, **kw: Any) -> Any:
            c0 = time.thread_time()
            try:
                return register(sched, who_has, *a, **kw)
            finally:
                registered.append((len(who_has), time.thread_time() - c0))

        _dask_internals.register_keys = timed_register  # type: ignore[assignment]
        sim: _Mpirun | _SlurmJob = (
            _Mpirun(ranks, config, scheduler_file, boxes)
            if local
            else _SlurmJob(cluster, nodes, ranks, config, scheduler_file)
        )
        for thread in threads:
            thread.start()
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
            err = sim.finish()
            for thread in threads:
                thread.join(timeout=300)
        except TimeoutError as exc:  # the adapter's: say why the simulation never came
            sim.kill()
            raise RuntimeError(f"{tag}: {exc}\n{sim.finish()}") from exc
        finally:
            _dask_internals.register_keys = register
            sim.kill()
        elapsed = time.perf_counter() - t0
        cpu = client.run_on_scheduler(time.thread_time) - cpu0
        restore()
        for c in extra:
            c.close()
        if err is not None or taken != steps:
            raise RuntimeError(f"{tag}: simulation failed ({taken} steps taken):\n{err}")
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
    steady_cpu = (steady[-1] - steady[0]) / (len(steady) - 1) if len(steady) > 1 else None
    register_s = [cpu_s for _, cpu_s in registered]
    return {
        "ranks": ranks,
        "nodes": nodes,
        "consumers": consumers,
        "boxes": boxes,
        "layout_bytes_per_step": statistics.median(layouts) if layouts else 0,
        "workers": 2 if local else nodes,
        "steps": steps,
        "seconds": elapsed,
        "scheduler_cpu_s": cpu,
        "scheduler_cpu_ms_per_step": 1e3 * cpu / steps,
        # between the first and the last step seen: no start-up, no teardown
        "scheduler_cpu_steady_ms_per_step": 1e3 * steady_cpu if steady_cpu is not None else None,
        # median thread CPU of registering one step's blocks (time.thread_time: its resolution
        # is the kernel's, ns here, unlike the 10 ms ticks of the per-thread counters above)
        "register_ms_per_step": 1e3 * statistics.median(register_s) if register_s else None,
        "register_blocks": registered[0][0] if registered else 0,
        "publish_to_adapter_ms": [1e3 * x for x in latency],
        "publish_to_adapter_ms_median": 1e3 * statistics.median(latency) if latency else None,
        "publish_to_adapter_with_queue_ms": [1e3 * x for x in queued],
        "total": sum(counter.values()),
        "per_step": {group: n / steps for group, n in by_group.items()},
        "by_op": dict(counter),
    }


PAPER_SATURATION = 9116.0  # requests/s at which the DEISA paper's scheduler saturated


def _fit(xs: list[list[float]], ys: list[float]) -> list[float]:
    """Least-squares coefficients of ``y = c0 + c1 x1 + ...``; a regressor that does not vary
    in the data gets 0 (it cannot be told from the constant)."""
    import numpy as np

    x = np.asarray(xs, dtype=float)
    varying = [j for j in range(x.shape[1]) if np.ptp(x[:, j]) > 0]
    design = np.column_stack([np.ones(len(ys)), x[:, varying]])
    solution = np.linalg.lstsq(design, np.asarray(ys, dtype=float), rcond=None)[0]
    coefficients = [float(solution[0])] + [0.0] * x.shape[1]
    for k, j in enumerate(varying):
        coefficients[1 + j] = float(solution[1 + k])
    return coefficients


def extrapolate(
    records: list[dict[str, Any]],
    ranks: int = 1024,
    workers: int = 64,
    saturation: float = PAPER_SATURATION,
) -> dict[str, Any]:
    """The scheduler's cost per step at ``ranks`` ranks (one block each) and ``workers``
    workers, from measured ``records`` (:func:`run_one`'s).

    Model: messages per step on each side are linear in the blocks (= ranks) and the workers,
    fitted over the records (heartbeats left out: they follow wall time, not steps). The
    simulation side's CPU per step is its messages times the CPU per message plus the
    registration of the step's blocks, linear in the blocks (``register_ms_per_step``); the
    analytics side's (its messages and "other", the tasks and releases of its per-block work)
    is its messages times the CPU per message. CPU per message: the median over the records of
    the steady scheduler CPU per step, less the registration, over the messages per step.
    ``saturation_ms``: the time per step that the messages alone take at ``saturation``
    requests/s; ``paper_simulation``: the paper's prototype, two scheduler requests per rank
    per step.
    """
    xs = [[r["ranks"], r["workers"]] for r in records]
    per_step = {
        side: [r["per_step"]["simulation"] if side == "simulation"
               else r["per_step"]["analytics"] + r["per_step"]["other"] for r in records]
        for side in ("simulation", "analytics")
    }  # fmt: skip
    register = _fit([[r["register_blocks"]] for r in records],
                    [r["register_ms_per_step"] for r in records])  # fmt: skip
    per_message = statistics.median(
        (r["scheduler_cpu_steady_ms_per_step"] - r["register_ms_per_step"])
        / (r["total"] / r["steps"] - r["per_step"]["heartbeats"])
        for r in records
    )
    out: dict[str, Any] = {
        "ranks": ranks,
        "workers": workers,
        "cpu_ms_per_message": per_message,
        "register_ms": {"per_step": register[0], "per_block": register[1]},
    }
    for side, ys in per_step.items():
        a, b, c = _fit(xs, ys)
        messages = a + b * ranks + c * workers
        cpu = messages * per_message + (register[0] + register[1] * ranks) * (side == "simulation")
        out[side] = {
            "fit": {"constant": a, "per_rank": b, "per_worker": c},
            "messages_per_step": messages,
            "cpu_ms_per_step": cpu,
            "saturation_ms_per_step": 1e3 * messages / saturation,
        }
    out["paper_simulation"] = {
        "messages_per_step": 2 * ranks,
        "saturation_ms_per_step": 1e3 * 2 * ranks / saturation,
    }
    return out


def plot(records: list[dict[str, Any]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (a, b) = plt.subplots(1, 2, figsize=(9, 3.5))
    node_counts = sorted({r["nodes"] for r in records})
    for i, nodes in enumerate(node_counts):
        style = ("-", "--", ":", "-.")[i % 4]
        rows = [r for r in records if r["nodes"] == nodes]
        ranks = [r["ranks"] for r in rows]
        tag = f" ({nodes} node{'s' * (nodes > 1)})" if len(node_counts) > 1 else ""
        groups = ("simulation", "analytics", "heartbeats", "other")
        for group, colour in zip(groups, ("C0", "C1", "C2", "C3"), strict=True):
            a.plot(ranks, [r["per_step"][group] for r in rows], "o" + style, color=colour,
                   label=group + tag)  # fmt: skip
        b.plot(ranks, [r["scheduler_cpu_ms_per_step"] for r in rows], "o" + style, color="C0",
               label="scheduler CPU (whole run)" + tag)  # fmt: skip
        b.plot(ranks, [r["scheduler_cpu_steady_ms_per_step"] for r in rows], "^" + style,
               color="C1", label="scheduler CPU (steady)" + tag)  # fmt: skip
        b.plot(ranks, [r["publish_to_adapter_ms_median"] for r in rows], "s" + style,
               color="C2", label="publish -> adapter" + tag)  # fmt: skip
    a.set_xlabel("MPI ranks")
    a.set_ylabel("scheduler messages per step")
    a.legend(fontsize=6 if len(node_counts) > 1 else 8)
    b.set_xlabel("MPI ranks")
    b.set_ylabel("ms per step")
    b.legend(fontsize=6 if len(node_counts) > 1 else 8)
    fig.tight_layout()
    fig.savefig(path, dpi=80)
    plt.close(fig)


def print_boxes(rows: list[dict[str, Any]]) -> None:
    """The scheduler's messages and memory per step against the boxes per rank (issue 56
    item 9): the keys registered a step (one per rank: a rank's boxes travel as one parcel),
    the bytes of the step's layout, which the scheduler keeps with the step until taken, and
    the analytics' messages ("other": its tasks, one chunk per box, and their results)."""
    print("Boxes per rank (messages and memory per step on the scheduler)")
    print(f"{'ranks':>5} {'boxes':>5} {'simulation':>10} {'publish':>8} {'keys':>5} "
          f"{'layout B':>8} {'analytics':>9} {'other':>7} {'steady CPU ms':>13} "
          f"{'register ms':>11}")  # fmt: skip
    for rec in rows:
        p = rec["per_step"]
        print(f"{rec['ranks']:>5} {rec['boxes']:>5} {p['simulation']:>10.2f} "
              f"{p['publish']:>8.2f} {rec['register_blocks']:>5} "
              f"{rec['layout_bytes_per_step']:>8.0f} {p['analytics']:>9.2f} {p['other']:>7.1f} "
              f"{rec['scheduler_cpu_steady_ms_per_step'] or float('nan'):>13.2f} "
              f"{rec['register_ms_per_step'] or float('nan'):>11.3f}")  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ranks", type=int, nargs="+", default=[2, 4, 8, 16])
    parser.add_argument("--size", type=int, default=256, help="field is size x size float64")
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--out", type=Path, default=Path("results"))
    parser.add_argument("--quick", action="store_true", help="ranks 2 4 8, 10 steps")
    parser.add_argument(
        "--nodes", type=int, nargs="+", default=[1],
        help="node counts: 1 is this node (mpirun, 2 local workers); more builds a Slurm "
        "cluster of network namespaces (tests/multinode.py, root) with a worker per node",
    )  # fmt: skip
    parser.add_argument("--consumers", type=int, nargs="+", default=[1],
                        help="consumers each receiving every step (fan-out); one row each, "
                        "at the largest rank count")  # fmt: skip
    parser.add_argument("--boxes", type=int, nargs="+", default=[1],
                        help="boxes per rank (each rank's block as that many bands of rows); "
                        "one row each above 1, at the largest rank count")  # fmt: skip
    parser.add_argument("--extrapolate", type=int, nargs=2, default=[1024, 64],
                        metavar=("RANKS", "NODES"), help="a worker per node")  # fmt: skip
    args = parser.parse_args(argv)
    if args.quick:
        args.ranks, args.steps = [2, 4, 8], 10
    args.out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp, contextlib.ExitStack() as stack:
        cluster = None
        if max(args.nodes) > 1:
            sys.path.insert(0, str(REPO / "tests"))
            import multinode  # the test suite's cluster builder

            (Path(tmp) / "cluster").mkdir()
            cluster = multinode.start_cluster(Path(tmp) / "cluster", max(args.nodes))
            stack.callback(cluster.stop)
        records = [
            run_one(r, args.size, args.steps, Path(tmp), nodes=n, cluster=cluster)
            for n in args.nodes
            for r in args.ranks
        ]
        fan_out = [
            run_one(max(args.ranks), args.size, args.steps, Path(tmp), consumers=k)
            for k in args.consumers
            if k > 1
        ]
        by_boxes = [
            run_one(max(args.ranks), args.size, args.steps, Path(tmp), boxes=b)
            for b in args.boxes
            if b > 1
        ]

    print(f"Scheduler messages per step ({args.size}x{args.size} field, {args.steps} steps)")
    header = f"{'nodes':>5} {'ranks':>5} {'simulation':>10} {'publish':>8} {'analytics':>9}"
    header += f" {'heartbeat':>9}"
    print(header + f" {'other':>6} {'all':>6} {'wall s':>7} {'sched CPU ms/step':>17}"
          f" {'steady':>7}"
          f" {'publish->adapter ms':>19} {'register ms':>11}")  # fmt: skip
    for rec in records:
        p = rec["per_step"]
        print(
            f"{rec['nodes']:>5} {rec['ranks']:>5} {p['simulation']:>10.2f} {p['publish']:>8.2f} "
            f"{p['analytics']:>9.2f} {p['heartbeats']:>9.2f} {p['other']:>6.2f} "
            f"{rec['total'] / rec['steps']:>6.2f} {rec['seconds']:>7.1f}"
            f" {rec['scheduler_cpu_ms_per_step']:>17.2f}"
            f" {rec['scheduler_cpu_steady_ms_per_step'] or float('nan'):>7.2f}"
            f" {rec['publish_to_adapter_ms_median'] or float('nan'):>19.2f}"
            f" {rec['register_ms_per_step'] or float('nan'):>11.3f}"
        )
    if fan_out:
        print("Fan-out: every consumer receives every step (messages per step)")
        print(f"{'ranks':>5} {'consumers':>9} {'simulation':>10} {'analytics':>9} "
              f"{'per consumer':>12}")  # fmt: skip
        for rec in [r for r in records if r["ranks"] == max(args.ranks)][:1] + fan_out:
            p = rec["per_step"]
            print(f"{rec['ranks']:>5} {rec['consumers']:>9} {p['simulation']:>10.2f} "
                  f"{p['analytics']:>9.2f} {p['analytics'] / rec['consumers']:>12.2f}")  # fmt: skip
    if by_boxes:
        print_boxes([r for r in records if r["ranks"] == max(args.ranks)][:1] + by_boxes)
    ranks, nodes = args.extrapolate
    model = extrapolate(records, ranks, nodes)
    print(f"Extrapolated to {ranks} ranks, {nodes} workers ({model['cpu_ms_per_message']:.3f} ms "
          f"CPU per message; registration {model['register_ms']['per_block'] * 1e3:.2f} us "
          "per block):")  # fmt: skip
    for side in ("simulation", "analytics", "paper_simulation"):
        m = model[side]
        cpu = f"{m['cpu_ms_per_step']:.1f} ms CPU, " if "cpu_ms_per_step" in m else ""
        print(f"  {side}: {m['messages_per_step']:.1f} messages/step, {cpu}"
              f"{m['saturation_ms_per_step']:.2f} ms at {PAPER_SATURATION:.0f} req/s")  # fmt: skip
    sim = [rec["per_step"]["simulation"] for rec in records + by_boxes]
    flat = max(sim) - min(sim) < 1e-9
    what = "ranks and boxes" if by_boxes else "ranks"
    print(f"target: simulation messages per step constant in {what}: {'PASS' if flat else 'FAIL'}")
    plot(records, args.out / "scheduler_messages.png")
    (args.out / "scheduler_messages.json").write_text(
        json.dumps(
            {
                "records": records,
                "fan_out": fan_out,
                "boxes": by_boxes,
                "target_flat": flat,
                "extrapolated": model,
            },
            indent=1,
        )
    )
    return 0 if flat else 1


if __name__ == "__main__":
    raise SystemExit(main())
