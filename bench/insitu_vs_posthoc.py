"""In situ against post hoc on one machine: the DEISA paper's Experiments 1 and 2 (section V).

    python -m bench.insitu_vs_posthoc --out results/          # sizes 1 16 64 MiB/rank
    python -m bench.insitu_vs_posthoc --quick --out results/  # sizes 1 4 MiB/rank, ~1-2 min

Experiment 1, for each size per rank (4 MPI ranks on a 2x2 grid, ``--steps`` outputs):

``no output``  the C heat solver with PDI and no output plugin (the simulation alone);
``post hoc``   the C solver writing every step with ``decl_hdf5`` (configs/heat_hdf5.yml), then
               a Dask read of the HDF5 file (``da.from_array(h5py ...)``, one row band per
               worker) and the PCA of every step;
``in situ``    the C solver with the deisa plugin (configs/heat_deisa.yml, locality placement,
               ``buffer_nb`` 2) while this process takes every step from the Adapter and fits
               the same PCA.

PCA: ``deisa.IncrementalPCA(n_components=2, copy=False, svd_solver="randomized")`` per step
(randomized so that the largest size fits the run time; both sides use the same).
Time to analysis: from the simulation's launch to the last step's PCA done (post hoc: simulation
then analytics). Dask: ``LocalCluster(n_workers=2, threads_per_worker=1)`` in this process.
Without the C solver (or PDI), post hoc is skipped and said so; in situ then uses the Python
solver.

Experiment 2, at the smallest and largest size: the Python solver (``--timings``) gives per
step compute, transfer (send) and metadata/sync (publish minus send) on the simulation side;
the analytics side records the step wait (Adapter, metadata included) and the PCA's graph
execution. Target: publish <= 10 % of an iteration at the largest size.

Writes ``insitu_vs_posthoc.json`` and ``insitu_vs_posthoc.png``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from bench._common import (
    PINS,
    REPO,
    child_env,
    machine,
    median,
    print_targets,
    table,
    targets_json,
)

os.environ.update(PINS)

import numpy as np
import yaml

RANKS = 4
GRID = (2, 2)
BUILD = REPO / "build"


def global_size(mib_per_rank: float) -> tuple[int, int]:
    """Square per-rank block of about ``mib_per_rank`` MiB of float64, on the 2x2 grid."""
    n = round(math.sqrt(mib_per_rank * 2**20 / 8))
    return GRID[0] * n, GRID[1] * n


def c_problem() -> str | None:
    from deisa.launcher.solver import c_solver_problem

    if shutil.which("mpirun") is None:
        return "mpirun not found"
    return c_solver_problem(BUILD, REPO / "configs" / "heat_deisa.yml")


def pdi_config(mode: str, workdir: Path, scheduler_file: Path, buffer_nb: int) -> Path:
    base = "heat_hdf5.yml" if mode == "post hoc" else "heat_deisa.yml"
    pdi = yaml.safe_load((REPO / "configs" / base).read_text())
    if mode == "no output":
        pdi["plugins"] = {"mpi": None}
    elif mode == "in situ":
        plugin = pdi["plugins"]["deisa"]
        plugin.update(scheduler_file=str(scheduler_file), placement="locality", buffer_nb=buffer_nb)
    else:
        pdi["plugins"]["decl_hdf5"]["file"] = str(workdir / "heat.h5")
    path = workdir / f"pdi-{mode.replace(' ', '_')}.yml"
    path.write_text(yaml.safe_dump(pdi, sort_keys=False))
    return path


def pca() -> Any:
    from deisa import IncrementalPCA

    return IncrementalPCA(n_components=2, copy=False, svd_solver="randomized", random_state=0)


class InSituAnalytics(threading.Thread):
    """Take every step from the Adapter and fit the PCA; record the wait and the fit times."""

    def __init__(self, client: Any, steps: int) -> None:
        super().__init__(daemon=True)
        self.client, self.steps = client, steps
        self.records: list[dict[str, float]] = []
        self.error: BaseException | None = None
        self.done_at = math.nan
        self.first_at = math.nan

    def run(self) -> None:
        from deisa import Adapter

        try:
            gtemp = Adapter(self.client, timeout=600)["gtemp"]
            for step in range(self.steps):
                t0 = time.perf_counter()
                x = gtemp[step, :, :]
                t1 = time.perf_counter()
                if step == 0:
                    self.first_at = t1
                model = pca().fit(x)
                t2 = time.perf_counter()
                del x
                self.records.append(
                    {"step": step, "wait_s": t1 - t0, "graph_s": t2 - t1,
                     "ev0": float(model.explained_variance_[0])}
                )  # fmt: skip
            self.done_at = time.perf_counter()
        except BaseException as exc:  # reported by the caller
            self.error = exc


def run_mpi(cmd: list[str], env: dict[str, str], cwd: Path, timeout: float) -> float:
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, env=env, cwd=cwd, capture_output=True, text=True, timeout=timeout)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd[:6])}... failed:\n{proc.stderr[-3000:]}")
    return time.perf_counter() - t0


def mpirun(n: int) -> list[str]:
    return ["mpirun", "--oversubscribe", "-np", str(n)]


def write_run_files(
    workdir: Path, name: str, rows: int, cols: int, steps: int, period: int, address: str
) -> tuple[Path, Path]:
    """The solver's ``simulation.yml`` (named ``name``) and a scheduler file for ``address``."""
    sim = workdir / name
    sim.write_text(
        yaml.safe_dump(
            {"global_size": [rows, cols], "process_grid": list(GRID), "steps": steps,
             "output_period": period}
        )
    )  # fmt: skip
    scheduler_file = workdir / "scheduler.json"
    scheduler_file.write_text(json.dumps({"address": address}))
    return sim, scheduler_file


def run_with_analytics(
    client: Any, steps: int, cmd: list[str], env: dict[str, str], workdir: Path
) -> tuple[InSituAnalytics, float, float, float]:
    """Run the simulation ``cmd`` while a thread takes and fits every step.

    Returns the analytics thread (its records), the launch time, the simulation's wall time and
    the time it ended (``time.perf_counter`` clock).
    """
    analytics = InSituAnalytics(client, steps)
    analytics.start()
    launched = time.perf_counter()
    simulation_s = run_mpi(cmd, env, workdir, 1200)
    ended = time.perf_counter()
    analytics.join(timeout=1200)
    if analytics.error is not None:
        raise RuntimeError(f"in situ analytics failed: {analytics.error!r}")
    return analytics, launched, simulation_s, ended


@contextlib.contextmanager
def dask_cluster() -> Iterator[tuple[Any, str]]:
    """A fresh 2-worker cluster per experiment, so that one's leftovers cannot slow the next."""
    from distributed import Client, LocalCluster

    with (
        LocalCluster(
            n_workers=2, threads_per_worker=1, processes=True, host="127.0.0.1",
            dashboard_address=None, memory_limit=0,
        ) as cluster,
        Client(cluster) as client,
    ):  # fmt: skip
        client.run(lambda: __import__("deisa.pca"))  # warm the workers' imports
        yield client, cluster.scheduler.address


def experiment1(
    client: Any, address: str, mib: float, steps: int, period: int, workdir: Path, use_c: bool
) -> dict[str, Any]:
    import dask.array as da
    import h5py

    rows, cols = global_size(mib)
    sim, scheduler_file = write_run_files(
        workdir, "simulation.yml", rows, cols, steps, period, address
    )
    plugin_path = os.pathsep.join(filter(None, [str(BUILD / "plugin"),
                                                os.environ.get("PDI_PLUGIN_PATH")]))  # fmt: skip
    env = child_env(PDI_PLUGIN_PATH=plugin_path)
    rec: dict[str, Any] = {"mib_per_rank": rows * cols * 8 / RANKS / 2**20,
                           "global_size": [rows, cols], "steps": steps}  # fmt: skip

    def sim_cmd(mode: str) -> list[str]:
        if use_c:
            return [*mpirun(RANKS), str(BUILD / "simulation" / "heat"), str(sim),
                    str(pdi_config(mode, workdir, scheduler_file, 2))]  # fmt: skip
        cmd = [*mpirun(RANKS), sys.executable, "-m", "deisa_simulation.heat", str(sim)]
        if mode == "in situ":
            cmd += ["--scheduler-file", str(scheduler_file), "--placement", "locality",
                    "--buffer-nb", "2"]  # fmt: skip
        return cmd

    print("  no output", flush=True)
    rec["no output"] = {"simulation_s": run_mpi(sim_cmd("no output"), env, workdir, 1200)}
    rec["no output"]["time_to_analysis_s"] = rec["no output"]["simulation_s"]
    print("  post hoc", flush=True)
    if use_c:
        h5 = workdir / "heat.h5"
        h5.unlink(missing_ok=True)
        t0 = time.perf_counter()
        sim_s = run_mpi(sim_cmd("post hoc"), env, workdir, 1200)
        t1 = time.perf_counter()
        with h5py.File(h5, "r") as f:
            dset = f["gtemp"]
            gtemp = da.from_array(dset, chunks=(1, rows // 2, cols))
            ev = []
            for step in range(steps):
                ev.append(float(pca().fit(gtemp[step, :, :]).explained_variance_[0]))
        t2 = time.perf_counter()
        rec["post hoc"] = {"simulation_s": sim_s, "analytics_s": t2 - t1,
                           "time_to_analysis_s": t2 - t0, "file_bytes": h5.stat().st_size,
                           "ev0": ev}  # fmt: skip
        h5.unlink()
    else:
        rec["post hoc"] = {"skipped": "C solver / PDI not available: " + str(c_problem())}
    print("  in situ", flush=True)
    analytics, t0, sim_s, sim_end = run_with_analytics(
        client, steps, sim_cmd("in situ"), env, workdir
    )
    rec["in situ"] = {
        "simulation_s": sim_s,
        "analytics_after_simulation_s": max(0.0, analytics.done_at - sim_end),
        "analytics_graph_s": sum(r["graph_s"] for r in analytics.records),
        "time_to_analysis_s": max(analytics.done_at, sim_end) - t0,
        # start-up: interpreter in every rank, imports, Bridge connection, first step
        "first_step_s": analytics.first_at - t0,
        "ev0": [r["ev0"] for r in analytics.records],
        "solver": "C" if use_c else "Python",
    }
    if use_c and "ev0" in rec["post hoc"]:
        rec["same_result"] = bool(np.allclose(rec["post hoc"]["ev0"], rec["in situ"]["ev0"],
                                              rtol=1e-6))  # fmt: skip
    return rec


def experiment2(
    client: Any, address: str, mib: float, steps: int, period: int, workdir: Path
) -> dict[str, Any]:
    """Python solver with --timings, analytics in this process: per-step breakdown."""
    rows, cols = global_size(mib)
    sim, scheduler_file = write_run_files(
        workdir, "simulation-py.yml", rows, cols, steps, period, address
    )
    timings = workdir / "timings.json"
    cmd = [*mpirun(RANKS), sys.executable, "-m", "deisa_simulation.heat", str(sim),
           "--scheduler-file", str(scheduler_file), "--placement", "locality",
           "--buffer-nb", "2", "--timings", str(timings)]  # fmt: skip
    analytics, _, wall, _ = run_with_analytics(client, steps, cmd, child_env(), workdir)
    per_rank = json.loads(timings.read_text())["ranks"]
    steps_rec = [t for rank in per_rank for t in rank if t["step"] > 0]  # step 0: warm-up
    compute = median([t["compute_s"] for t in steps_rec])
    publish = median([t["publish_s"] for t in steps_rec])
    send = median([t["send_s"] for t in steps_rec])
    ana = [r for r in analytics.records if r["step"] > 0]
    return {
        "mib_per_rank": rows * cols * 8 / RANKS / 2**20,
        "global_size": [rows, cols],
        "output_period": period,
        "wall_s": wall,
        "compute_s": compute,
        "send_s": send,
        "sync_s": median([t["publish_s"] - t["send_s"] for t in steps_rec]),
        "publish_s": publish,
        "publish_fraction": median(
            [t["publish_s"] / (t["compute_s"] + t["publish_s"]) for t in steps_rec]
        ),
        "analytics_wait_s": median([r["wait_s"] for r in ana]),
        "analytics_graph_s": median([r["graph_s"] for r in ana]),
        "per_rank": per_rank,
        "analytics": analytics.records,
    }


def plot(exp1: list[dict[str, Any]], exp2: list[dict[str, Any]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (a, b) = plt.subplots(1, 2, figsize=(10, 4))
    x = np.arange(len(exp1))
    for k, mode in enumerate(("no output", "in situ", "post hoc")):
        vals = [r[mode].get("time_to_analysis_s", 0) for r in exp1]
        a.bar(x + (k - 1) * 0.27, vals, 0.27, label=mode)
    a.set_xticks(x, [f"{r['mib_per_rank']:.0f} MiB/rank" for r in exp1])
    a.set_ylabel("time to analysis (s)")
    a.set_title("Experiment 1: 4 ranks")
    a.legend()
    labels = [f"{r['mib_per_rank']:.0f} MiB" for r in exp2]
    bottom = np.zeros(len(exp2))
    for key, label in (("compute_s", "compute"), ("send_s", "transfer"),
                       ("sync_s", "metadata/sync")):  # fmt: skip
        vals = np.array([r[key] for r in exp2])
        b.bar(labels, vals, bottom=bottom, label=label)
        bottom += vals
    b.set_ylabel("s per step (median over ranks, steps)")
    b.set_title("Experiment 2: simulation side (Python solver)")
    b.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=80)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", type=float, nargs="+", default=[1, 16, 64], help="MiB/rank")
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--period", type=int, default=5, help="solver iterations per output")
    parser.add_argument("--quick", action="store_true", help="sizes 1 4 MiB/rank")
    parser.add_argument("--out", type=Path, default=Path("results"))
    args = parser.parse_args(argv)
    if args.quick:
        args.sizes = [1, 4]
    args.out.mkdir(parents=True, exist_ok=True)
    problem = c_problem()
    use_c = problem is None
    if not use_c:
        print(f"C solver unavailable ({problem}): post hoc skipped, in situ uses Python")
    exp1: list[dict[str, Any]] = []
    exp2: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as tmp:
        for mib in args.sizes:
            print(f"Experiment 1: {mib:g} MiB/rank ...", flush=True)
            with dask_cluster() as (client, address):
                exp1.append(experiment1(client, address, mib, args.steps, args.period, Path(tmp),
                                        use_c))  # fmt: skip
        for mib in sorted({min(args.sizes), max(args.sizes)}):
            print(f"Experiment 2: {mib:g} MiB/rank ...", flush=True)
            with dask_cluster() as (client, address):
                exp2.append(experiment2(client, address, mib, args.steps, args.period, Path(tmp)))

    print(f"\nExperiment 1: {RANKS} ranks, {args.steps} steps, {args.period} iterations/step, "
          f"{'C solver + PDI' if use_c else 'Python solver'}")  # fmt: skip
    rows = []
    for r in exp1:
        ph = r["post hoc"]
        ins, no = r["in situ"], r["no output"]
        ratio = (
            ph["time_to_analysis_s"] / ins["time_to_analysis_s"] if "skipped" not in ph else None
        )
        r["posthoc_over_insitu"] = ratio
        rows.append([
            f"{r['mib_per_rank']:.1f}", f"{no['simulation_s']:.2f}",
            f"{ph.get('simulation_s', math.nan):.2f}", f"{ph.get('analytics_s', math.nan):.2f}",
            f"{ph.get('time_to_analysis_s', math.nan):.2f}", f"{ins['simulation_s']:.2f}",
            f"{ins['analytics_after_simulation_s']:.2f}", f"{ins['first_step_s']:.2f}",
            f"{ins['time_to_analysis_s']:.2f}",
            f"{ratio:.2f}x" if ratio else "-",
            f"{ins['simulation_s'] / no['simulation_s']:.2f}x",
        ])  # fmt: skip
    print(table(["MiB/rank", "no-output sim s", "posthoc sim s", "posthoc analytics s",
                 "posthoc total s", "insitu sim s", "insitu analytics after sim s",
                 "insitu first step s",
                 "insitu total s", "posthoc/insitu", "insitu sim/no output"], rows))  # fmt: skip
    print("\nExperiment 2: per step, median over ranks and steps 1..n (Python solver)")
    rows = [[f"{r['mib_per_rank']:.1f}", f"{1e3 * r['compute_s']:.1f}", f"{1e3 * r['send_s']:.1f}",
             f"{1e3 * r['sync_s']:.1f}", f"{100 * r['publish_fraction']:.1f}%",
             f"{1e3 * r['analytics_wait_s']:.1f}", f"{1e3 * r['analytics_graph_s']:.1f}"]
            for r in exp2]  # fmt: skip
    print(table(["MiB/rank", "compute ms", "transfer ms", "metadata/sync ms", "publish/iteration",
                 "analytics step wait ms", "analytics graph ms"], rows))  # fmt: skip

    largest = exp1[-1]
    targets: list[tuple[str, Any, str]] = []
    ratio = largest.get("posthoc_over_insitu")
    targets.append((
        f"in situ time to analysis >= 3x lower than post hoc at {largest['mib_per_rank']:.0f} "
        "MiB/rank",
        None if ratio is None else ratio >= 3,
        "post hoc skipped" if ratio is None else f"{ratio:.2f}x",
    ))  # fmt: skip
    big = exp2[-1]
    keeps_up = big["analytics_graph_s"] <= big["compute_s"] + big["publish_s"]
    targets.append((
        f"publish <= 10% of an iteration at {big['mib_per_rank']:.0f} MiB/rank",
        big["publish_fraction"] <= 0.10,
        f"{100 * big['publish_fraction']:.1f}% (compute {1e3 * big['compute_s']:.0f} ms, send "
        f"{1e3 * big['send_s']:.0f} ms, sync {1e3 * big['sync_s']:.0f} ms; analytics "
        f"{'keeps up' if keeps_up else 'does NOT keep up'}: graph "
        f"{1e3 * big['analytics_graph_s']:.0f} ms per step)",
    ))  # fmt: skip
    print_targets(targets)
    (args.out / "insitu_vs_posthoc.json").write_text(json.dumps(
        {"machine": machine(), "solver": "C" if use_c else "Python", "c_problem": problem,
         "experiment1": exp1, "experiment2": exp2, "targets": targets_json(targets)}, indent=1,
    ))  # fmt: skip
    plot(exp1, exp2, args.out / "insitu_vs_posthoc.png")
    print(f"wrote {args.out / 'insitu_vs_posthoc.json'} and {args.out / 'insitu_vs_posthoc.png'}")
    return 0 if all(p is not False for _, p, _ in targets) else 1


if __name__ == "__main__":
    raise SystemExit(main())
