"""In situ against post hoc on one machine, asynchronous against synchronous publish (issue #11).

    python -m bench.insitu_vs_posthoc --out results/                # sizes 1 16 64 MiB/rank
    python -m bench.insitu_vs_posthoc --quick --out results/        # sizes 1 4 MiB/rank
    python -m bench.insitu_vs_posthoc --ranks 16 --workers 4 --solver python --timings

For each size per rank, side by side in one run (the modes take turns within each repetition,
so a burst of load from another process hits them alike), ``--ranks`` MPI ranks on a near-square
grid, ``--steps`` outputs of ``--period`` solver iterations:

``no output``       the simulation alone (C: PDI with no output plugin; Python: no Bridge);
``post hoc``        the C solver writing every step with ``decl_hdf5`` (configs/heat_hdf5.yml),
                    then a Dask read of the file (one row band per worker) and the PCA of every
                    step (C solver only), read two ways from the same run, each by a fresh
                    cluster: *warm*, the file as the simulation left it in the page cache (time
                    to analysis = simulation + analytics), and *cold*, what a later job or
                    another node sees: the file is ``fsync``'ed before the simulation counts as
                    done and dropped from the page cache (``posix_fadvise(DONTNEED)``, checked
                    with ``mincore``) before the read (time to analysis = simulation + fsync +
                    analytics); the two reads take turns going first, run after run;
``in situ sync``    the deisa plugin (or the Python solver's Bridge) with ``mode: sync``, while
                    this process takes every step from the Adapter and fits the same PCA;
``in situ async``   the same with ``mode: async`` (the default), ``max_in_flight`` 2.

In situ: locality placement, ``buffer_nb`` 2, a fresh ``LocalCluster`` (``--workers`` x 1
thread) per run, its workers preloading ``deisa.worker`` as ``deisa-run``'s do
(``--no-worker-preload``: without, rank 0 through distributed; the JSON's ``settings`` say
which). The configuration's steering ``read`` section is left out: it is one scheduler
round trip per step, a feature of its own, not part of publishing. PCA:
``deisa.IncrementalPCA(n_components=2, copy=False, svd_solver="randomized")`` per step on both
sides (``--analytics sum`` instead: the sum of every step, one read of every value: the data
path without the PCA's arithmetic; the time-to-analysis targets, the PCA's, are then reported,
not judged); time to analysis is from the launch to the last step's analysis. The JSON's
``result`` per run: the first explained variance (or the sum) of every step.

Timings (always recorded; ``--timings`` prints their table): per step and rank, the solver's
compute and its publish (C: the ``iter`` expose, what the plugin takes; Python: ``publish``),
medians over ranks and steps 1..n (step 0 carries the start-up, reported apart: from
``PDI_init``'s call to the first publish returning, C only); a memcpy of a block of the same
size in this process for reference; the time from the simulation's start (its ranks'
``MPI_Init``, C; the launch, Python) to the first step reaching the analytics.

Cores (``cores_plan``): with at least ``ranks + workers + 1`` cores, the ranks are pinned to the
first ``ranks`` and this process (analytics, scheduler, workers) to the others; with at least
``ranks + 1`` (``--ranks 1 --workers 1`` on 2 cores), the same split, the analytics' processes
sharing their cores; otherwise everything shares every core. The output and the JSON
(``cores_separate``) say which.

Writes ``insitu_vs_posthoc.json`` (every run) and ``insitu_vs_posthoc.png``.
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
    add_worker_preload_option,
    child_env,
    compile_bytecode,
    cores_plan,
    drop_from_page_cache,
    fsync,
    local_cluster,
    machine,
    median,
    page_cache_fraction,
    pinned_to,
    print_targets,
    table,
    targets_json,
)
from bench._memcpy import memcpy_times
from deisa_simulation.grid import process_grid

os.environ.update(PINS)

import numpy as np
import yaml

BUILD = REPO / "build"
MODES = ("no output", "post hoc", "in situ sync", "in situ async")
BUFFER_NB = 2
# the medians kept per mode (NaN where a mode has no such figure)
MEDIANS = (
    "simulation_s", "time_to_analysis_s", "analytics_s", "analytics_graph_s", "fsync_s",
    "analytics_cold_s", "time_to_analysis_cold_s", "page_cache_warm", "page_cache_cold",
)  # fmt: skip


def global_size(mib_per_rank: float, grid: tuple[int, int]) -> tuple[int, int]:
    """A square block of about ``mib_per_rank`` MiB of float64 per rank, on ``grid``."""
    n = max(4, round(math.sqrt(mib_per_rank * 2**20 / 8)))
    return grid[0] * n, grid[1] * n


def c_problem() -> str | None:
    """Why the C solver cannot run here, or None."""
    from deisa.launcher.solver import c_solver_problem

    if shutil.which("mpirun") is None:
        return "mpirun not found"
    return c_solver_problem(BUILD, REPO / "configs" / "heat_deisa.yml")


def pdi_config(mode: str, workdir: Path, scheduler_file: Path) -> Path:
    base = "heat_hdf5.yml" if mode == "post hoc" else "heat_deisa.yml"
    pdi = yaml.safe_load((REPO / "configs" / base).read_text())
    for plugin in pdi["plugins"].values():
        if isinstance(plugin, dict) and isinstance(plugin.get("write"), dict):
            # one array, the one analysed: other write entries would be queued for no reader
            plugin["write"] = {k: v for k, v in plugin["write"].items() if v["dataset"] == "gtemp"}
    if mode == "no output":
        pdi["plugins"] = {"mpi": None}
    elif mode.startswith("in situ"):
        plugin = pdi["plugins"]["deisa"]
        plugin.pop("read", None)  # steering: a scheduler round trip per step, not publishing
        plugin.update(scheduler_file=str(scheduler_file), placement="locality",
                      buffer_nb=BUFFER_NB, mode=mode.split()[-1])  # fmt: skip
    else:
        pdi["plugins"]["decl_hdf5"]["file"] = str(workdir / "heat.h5")
    path = workdir / f"pdi-{mode.replace(' ', '_')}.yml"
    path.write_text(yaml.safe_dump(pdi, sort_keys=False))
    return path


def pca() -> Any:
    from deisa.analysis.pca import IncrementalPCA

    return IncrementalPCA(n_components=2, copy=False, svd_solver="randomized", random_state=0)


#: ``--analytics``: what is computed of every step, on both sides
ANALYTICS = ("pca", "sum")


def analyse(kind: str, x: Any) -> float:
    """``kind`` of one step's dask array ``x``: the PCA's first explained variance, or the sum
    (one read of every value: what the data path costs without the PCA's arithmetic)."""
    if kind == "pca":
        return float(pca().fit(x).explained_variance_[0])
    return float(x.sum().compute())


def memcpy_s(mib: float, repeats: int = 7) -> float:
    """Median time of ``np.copyto`` of a ``mib`` MiB float64 block into a buffer of its own
    (bench/_memcpy.py's yardstick, as the node-local benchmarks take it)."""
    src = np.random.default_rng(0).random(max(1, int(mib * 2**20 / 8)))
    return median(memcpy_times(src, repeats))


class InSituAnalytics(threading.Thread):
    """Take every step from the Adapter and analyse it (:func:`analyse`); record the wait and
    the analysis times."""

    def __init__(self, client: Any, steps: int, kind: str = "pca") -> None:
        super().__init__(daemon=True)
        self.client, self.steps, self.kind = client, steps, kind
        self.records: list[dict[str, float]] = []
        self.error: BaseException | None = None
        self.done_at = math.nan
        self.first_at = math.nan  # perf_counter clock
        self.first_epoch = math.nan  # time.time clock, to compare with the ranks' MPI_Init

    def run(self) -> None:
        from deisa.analysis.adapter import Adapter

        try:
            gtemp = Adapter(self.client, timeout=600)["gtemp"]
            for step in range(self.steps):
                t0 = time.perf_counter()
                x = gtemp[step, :, :]
                t1 = time.perf_counter()
                if step == 0:
                    self.first_at, self.first_epoch = t1, time.time()
                result = analyse(self.kind, x)
                t2 = time.perf_counter()
                del x
                self.records.append(
                    {"step": step, "wait_s": t1 - t0, "graph_s": t2 - t1, "result": result}
                )  # fmt: skip
            self.done_at = time.perf_counter()
        except BaseException as exc:  # reported by the caller
            self.error = exc


def run_mpi(cmd: list[str], env: dict[str, str], cwd: Path, cores: list[int] | None) -> float:
    """Run ``cmd`` (mpirun ...) to completion, pinned to ``cores``; its wall time."""
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, env=env, cwd=cwd, capture_output=True, text=True, timeout=1800,
                          preexec_fn=pinned_to(cores))  # fmt: skip
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd[:6])}... failed:\n{proc.stderr[-3000:]}")
    return time.perf_counter() - t0


@contextlib.contextmanager
def dask_cluster(workers: int, worker_preload: bool = True) -> Iterator[Any]:
    """A fresh cluster per stream, so that one run's leftovers cannot slow the next; its
    workers preload ``deisa.worker`` unless ``worker_preload`` is false."""
    from distributed import Client

    with (
        local_cluster(workers, worker_preload=worker_preload) as cluster,
        Client(cluster) as client,
    ):  # fmt: skip
        client.run(lambda: __import__("deisa.analysis.pca"))  # warm the workers' imports
        yield client


class Runner:
    """The runs of one benchmark invocation: solver, ranks, cores, files."""

    def __init__(self, args: argparse.Namespace, workdir: Path, use_c: bool) -> None:
        self.args, self.workdir, self.use_c = args, workdir, use_c
        self.grid = process_grid(args.ranks)
        self.post_hoc_runs = 0
        self.cores = cores_plan(args.ranks, args.workers)
        plugin_path = os.pathsep.join(
            filter(None, [str(BUILD / "plugin"), os.environ.get("PDI_PLUGIN_PATH")])
        )
        self.env = child_env(PDI_PLUGIN_PATH=plugin_path)

    def mpirun(self) -> list[str]:
        cmd = ["mpirun", "--oversubscribe", "-np", str(self.args.ranks)]
        return cmd + (["--bind-to", "none"] if self.cores["simulation"] else [])

    def command(self, mode: str, sim: Path, scheduler_file: Path, timings: Path) -> list[str]:
        if self.use_c:
            return [*self.mpirun(), str(BUILD / "simulation" / "heat"), str(sim),
                    str(pdi_config(mode, self.workdir, scheduler_file))]  # fmt: skip
        cmd = [*self.mpirun(), sys.executable, "-m", "deisa_simulation.heat", str(sim),
               "--timings", str(timings)]  # fmt: skip
        if mode.startswith("in situ"):
            cmd += ["--scheduler-file", str(scheduler_file), "--placement", "locality",
                    "--buffer-nb", str(BUFFER_NB), "--mode", mode.split()[-1],
                    "--stop-value", ""]  # fmt: skip
        return cmd

    def read_timings(self, timings: Path) -> dict[str, Any]:
        """Per-step compute and publish of every rank, start-up, ``epoch`` of MPI_Init."""
        if self.use_c:
            ranks = [json.loads(p.read_text())
                     for p in sorted(timings.parent.glob(timings.name + ".*.json"))]  # fmt: skip
            for p in timings.parent.glob(timings.name + ".*.json"):
                p.unlink()
            steps = [[{"step": s["step"], "compute_s": s["compute_s"], "publish_s": s["output_s"]}
                      for s in r["steps"]] for r in ranks]  # fmt: skip
            return {
                "steps": steps,
                "epoch": min(r["epoch"] for r in ranks),
                "pdi_init_s": max(r["pdi_init_s"] for r in ranks),
                "first_publish_s": max(r["first_output_s"] for r in ranks),
                "finalize_s": max(r["finalize_s"] for r in ranks),
            }
        per_rank = json.loads(timings.read_text())["ranks"]
        timings.unlink()
        return {"steps": [[{k: t[k] for k in ("step", "compute_s", "publish_s", "send_s")}
                           for t in rank] for rank in per_rank]}  # fmt: skip

    def run(self, mode: str, mib: float) -> dict[str, Any]:
        """One run of ``mode`` at ``mib`` MiB/rank."""
        rows, cols = global_size(mib, self.grid)
        sim = self.workdir / "simulation.yml"
        sim.write_text(yaml.safe_dump({"global_size": [rows, cols], "process_grid": list(self.grid),
                                       "steps": self.args.steps,
                                       "output_period": self.args.period}))  # fmt: skip
        timings = self.workdir / "timings"
        scheduler_file = self.workdir / "scheduler.json"
        env = {**self.env, "HEAT_TIMINGS": str(timings)}
        if not self.use_c:
            timings = self.workdir / "timings.json"
        rec: dict[str, Any] = {"mode": mode}
        if mode == "no output":
            rec["simulation_s"] = run_mpi(self.command(mode, sim, scheduler_file, timings), env,
                                          self.workdir, self.cores["simulation"])  # fmt: skip
            rec["time_to_analysis_s"] = rec["simulation_s"]
        elif mode == "post hoc":
            rec.update(self.post_hoc(sim, scheduler_file, timings, env, rows))
        else:
            rec.update(self.in_situ(mode, sim, scheduler_file, timings, env))
        rec["timings"] = self.read_timings(timings)
        return rec

    def post_hoc(
        self, sim: Path, scheduler_file: Path, timings: Path, env: dict[str, str], rows: int
    ) -> dict[str, Any]:
        import dask.array as da
        import h5py

        h5 = self.workdir / "heat.h5"
        h5.unlink(missing_ok=True)
        sim_s = run_mpi(self.command("post hoc", sim, scheduler_file, timings), env, self.workdir,
                        self.cores["simulation"])  # fmt: skip
        t0 = time.perf_counter()
        fsync(h5)  # a job's output is on the device before the job counts as done
        fsync_s = time.perf_counter() - t0

        def read_and_analyse() -> tuple[float, list[float]]:
            # a fresh cluster: its start is not the analytics' cost (it would be up before the
            # run ends), and the cold read inherits nothing from the warm one
            # the default client of the reads
            with dask_cluster(self.args.workers, self.args.worker_preload):
                t1 = time.perf_counter()
                with h5py.File(h5, "r") as f:
                    chunks = (1, -(-rows // self.args.workers), -1)
                    gtemp = da.from_array(f["gtemp"], chunks=chunks)
                    ev = [analyse(self.args.analytics, gtemp[step, :, :])
                          for step in range(self.args.steps)]  # fmt: skip
                return time.perf_counter() - t1, ev

        # the two reads take turns going first (what the first read of a run pays for, the
        # second does not); a cold read leaves the file in the page cache for a warm one
        self.post_hoc_runs += 1
        if self.post_hoc_runs % 2:
            cached_warm = page_cache_fraction(h5)
            warm_s, ev = read_and_analyse()
        drop_from_page_cache(h5)
        cached_cold = page_cache_fraction(h5)
        cold_s, ev_cold = read_and_analyse()
        if not self.post_hoc_runs % 2:
            cached_warm = page_cache_fraction(h5)
            warm_s, ev = read_and_analyse()
        size = h5.stat().st_size
        h5.unlink()
        if not np.allclose(ev, ev_cold, rtol=1e-6):
            raise RuntimeError(f"post hoc: the cold read's analysis differs: {ev} vs {ev_cold}")
        return {"simulation_s": sim_s, "analytics_s": warm_s,
                "time_to_analysis_s": sim_s + warm_s, "fsync_s": fsync_s,
                "analytics_cold_s": cold_s, "time_to_analysis_cold_s": sim_s + fsync_s + cold_s,
                "page_cache_warm": cached_warm, "page_cache_cold": cached_cold,
                "cold_read_first": not self.post_hoc_runs % 2,
                "file_bytes": size, "result": ev}  # fmt: skip

    def in_situ(
        self, mode: str, sim: Path, scheduler_file: Path, timings: Path, env: dict[str, str]
    ) -> dict[str, Any]:
        with dask_cluster(self.args.workers, self.args.worker_preload) as client:
            scheduler_file.write_text(json.dumps({"address": client.scheduler.address}))
            analytics = InSituAnalytics(client, self.args.steps, self.args.analytics)
            analytics.start()
            launched = time.perf_counter()
            launched_epoch = time.time()
            sim_s = run_mpi(self.command(mode, sim, scheduler_file, timings), env, self.workdir,
                            self.cores["simulation"])  # fmt: skip
            ended = time.perf_counter()
            analytics.join(timeout=1800)
            if analytics.error is not None:
                raise RuntimeError(f"{mode}: the analytics failed: {analytics.error!r}")
        ana = [r for r in analytics.records if r["step"] > 0]
        return {
            "simulation_s": sim_s,
            "time_to_analysis_s": max(analytics.done_at, ended) - launched,
            "analytics_after_simulation_s": max(0.0, analytics.done_at - ended),
            "first_step_after_launch_s": analytics.first_at - launched,
            "first_epoch": analytics.first_epoch,
            "launched_epoch": launched_epoch,
            "analytics_wait_s": median([r["wait_s"] for r in ana]),
            "analytics_graph_s": median([r["graph_s"] for r in ana]),
            "result": [r["result"] for r in analytics.records],
        }


def summarize(rec: dict[str, Any], memcpy: float) -> dict[str, Any]:
    """Medians of one run's per-step timings (steps 1..n), and its start-up figures."""
    t = rec["timings"]
    steps = [s for rank in t["steps"] for s in rank if s["step"] > 0]
    out: dict[str, Any] = {
        "compute_s": median([s["compute_s"] for s in steps]),
        "publish_s": median([s["publish_s"] for s in steps]),
        "publish_share": median(
            [s["publish_s"] / (s["compute_s"] + s["publish_s"]) for s in steps]
        ),
        "memcpy_s": memcpy,
    }
    if "first_publish_s" in t:
        out["pdi_init_s"] = t["pdi_init_s"]
        out["first_publish_s"] = t["first_publish_s"]
        out["finalize_s"] = t["finalize_s"]
    if "first_epoch" in rec:
        out["first_step_s"] = (
            rec["first_epoch"] - t["epoch"] if "epoch" in t else rec["first_step_after_launch_s"]
        )
    return out


def median_of(runs: list[dict[str, Any]], key: str) -> float:
    return median([r[key] for r in runs if isinstance(r.get(key), (int, float))])


def evaluate(
    sizes: list[dict[str, Any]],
    ranks: int,
    use_c: bool,
    separate: bool = False,
    analytics: str = "pca",
) -> list[tuple[str, Any, str]]:
    """The issue's targets, each at the sizes it names when they were run (N/A otherwise); the
    time-to-analysis targets are the PCA's: with another ``analytics``, measured, not judged."""
    cores = "separate cores" if separate else "shared cores"
    targets: list[tuple[str, Any, str]] = []
    by_mib = {round(s["mib_per_rank"]): s for s in sizes}

    def at(mib: int) -> dict[str, Any] | None:
        return by_mib.get(mib)

    for mib, limit in ((64, 0.02), (1, 0.05)):
        s = at(mib)
        share = None if s is None else s["summary"]["in situ async"]["publish_share"]
        keeps = None if s is None else s["analytics_keeps_up"]
        targets.append((
            f"publish <= {limit:.0%} of an iteration at {mib} MiB/rank (async)",
            None if share is None else share <= limit,
            "size not run" if share is None else
            f"{100 * share:.2f}% (analytics {'keeps up' if keeps else 'does NOT keep up'})",
        ))  # fmt: skip
    for s in sizes:
        a = s["summary"]["in situ async"]
        bound = 2.5 * a["memcpy_s"] + 0.002
        targets.append((
            f"median publish <= 2.5x memcpy + 2 ms at {s['mib_per_rank']:.0f} MiB/rank (async)",
            a["publish_s"] <= bound,
            f"{1e3 * a['publish_s']:.2f} ms vs {1e3 * bound:.2f} ms (memcpy "
            f"{1e3 * a['memcpy_s']:.2f} ms)",
        ))  # fmt: skip
    for mib in (16, 64):
        s = at(mib)
        ratio = None if s is None else s["async_over_no_output"]
        targets.append((
            f"simulation wall time with deisa (async) <= 1.10x no output at {mib} MiB/rank",
            None if ratio is None else ratio <= 1.10,
            "size not run" if ratio is None else f"{ratio:.2f}x",
        ))  # fmt: skip
    smallest = sizes[0]
    a, n = smallest["summary"]["in situ async"], smallest["summary"]["no output"]
    extra = a.get("first_publish_s", math.nan) - n.get("first_publish_s", math.nan)
    targets.append((
        f"PDI_init to the first publish returning <= 1 s more than no output ({ranks} ranks, "
        f"{smallest['mib_per_rank']:.0f} MiB/rank)",
        None if not use_c else extra <= 1.0,
        "C solver only" if not use_c else f"+{extra:.2f} s ({a['first_publish_s']:.2f} s vs "
        f"{n['first_publish_s']:.2f} s)",
    ))  # fmt: skip
    first = a.get("first_step_s", math.nan)
    targets.append((
        f"first step at the analytics <= 2 s after the simulation starts ({ranks} ranks, "
        f"{smallest['mib_per_rank']:.0f} MiB/rank, async)",
        first <= 2.0,
        f"{first:.2f} s" + ("" if use_c else " (from the launch: Python solver)"),
    ))  # fmt: skip
    for mib in (16, 64):
        s = at(mib)
        for variant, key in (("cold", "posthoc_cold_over_async"), ("warm", "posthoc_over_async")):
            ratio = None if s is None else s.get(key)
            judged = ratio is not None and analytics == "pca"
            targets.append((
                f"in situ (async) time to analysis >= 1.5x faster than {variant} post hoc at "
                f"{mib} MiB/rank ({ranks} ranks, {cores})",
                ratio >= 1.5 if judged else None,
                "size not run" if s is None else "post hoc skipped" if ratio is None
                else f"{ratio:.2f}x" + ("" if judged else f" (--analytics {analytics}, not the "
                                        "target's PCA)"),
            ))  # fmt: skip
    return targets


def plot(sizes: list[dict[str, Any]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (a, b) = plt.subplots(1, 2, figsize=(11, 4))
    x = np.arange(len(sizes))
    bars = [(m, m, "time_to_analysis_s") for m in MODES]
    bars.insert(2, ("post hoc cold", "post hoc", "time_to_analysis_cold_s"))
    width = 0.8 / len(bars)
    for k, (label, mode, key) in enumerate(bars):
        vals = [s["median"].get(mode, {}).get(key, 0) for s in sizes]
        a.bar(x + (k - (len(bars) - 1) / 2) * width, vals, width, label=label)
    labels = [f"{s['mib_per_rank']:.0f} MiB/rank" for s in sizes]
    a.set_xticks(x, labels)
    a.set_ylabel("time to analysis (s)")
    a.legend()
    for k, mode in enumerate(("in situ sync", "in situ async")):
        vals = [100 * s["summary"][mode]["publish_share"] for s in sizes]
        b.bar(x + (k - 0.5) * 0.4, vals, 0.4, label=mode)
    b.set_xticks(x, labels)
    b.set_ylabel("publish, % of an iteration (median)")
    b.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=80)
    plt.close(fig)


def load() -> list[float]:
    try:
        return [round(v, 2) for v in os.getloadavg()]
    except OSError:
        return []


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", type=float, nargs="+", default=[1, 16, 64], help="MiB/rank")
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--period", type=int, default=5, help="solver iterations per output")
    parser.add_argument("--ranks", type=int, default=4)
    parser.add_argument("--workers", type=int, default=2, help="Dask workers (1 thread each)")
    parser.add_argument("--solver", choices=("c", "python"), default=None,
                        help="default: c when PDI and the built solver are present")  # fmt: skip
    parser.add_argument("--repeats", type=int, default=1, help="median over repetitions")
    parser.add_argument("--timings", action="store_true", help="print the per-publish table")
    parser.add_argument(
        "--analytics",
        choices=ANALYTICS,
        default="pca",
        help="what is computed of every step: the PCA (the targets' analytics), "
        "or the sum (the data path alone)",
    )
    parser.add_argument("--quick", action="store_true", help="sizes 1 4 MiB/rank")
    add_worker_preload_option(parser)
    parser.add_argument("--out", type=Path, default=Path("results"))
    args = parser.parse_args(argv)
    if args.quick:
        args.sizes = [1, 4]
    problem = c_problem()
    if args.solver == "c" and problem is not None:
        print(f"--solver c: the C solver cannot run here: {problem}. Build it with "
              "`cmake -S . -B build && cmake --build build` against PDI 1.12, or use "
              "--solver python.", file=sys.stderr)  # fmt: skip
        return 2
    use_c = args.solver == "c" or (args.solver is None and problem is None)
    if args.solver is None and not use_c:
        print(f"C solver unavailable ({problem}): Python solver, post hoc skipped")
    modes = [m for m in MODES if use_c or m != "post hoc"]
    args.out.mkdir(parents=True, exist_ok=True)
    if use_c:  # imported now, not in the first post hoc read's time
        import dask.array  # noqa: F401
        import h5py  # noqa: F401

        pca()
    bytecode = compile_bytecode()
    load_before = load()
    sizes: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as tmp:
        runner = Runner(args, Path(tmp), use_c)
        print(f"cores: {runner.cores['description']}", flush=True)
        if runner.cores["analytics"]:
            os.sched_setaffinity(0, set(runner.cores["analytics"]))  # inherited by the workers
        for mib in args.sizes:
            runs: dict[str, list[dict[str, Any]]] = {m: [] for m in modes}
            for rep in range(args.repeats):
                for mode in modes:
                    print(f"{mib:g} MiB/rank, repetition {rep + 1}: {mode}", flush=True)
                    runs[mode].append(runner.run(mode, mib))
            rows, cols = global_size(mib, runner.grid)
            memcpy = memcpy_s(rows * cols * 8 / args.ranks / 2**20)
            summary = {m: {k: median_of([summarize(r, memcpy) for r in runs[m]], k)
                           for k in summarize(runs[m][0], memcpy)} for m in modes}  # fmt: skip
            med = {m: {k: median_of(runs[m], k) for k in MEDIANS} for m in modes}
            entry: dict[str, Any] = {
                "mib_per_rank": rows * cols * 8 / args.ranks / 2**20,
                "global_size": [rows, cols],
                "runs": runs,
                "median": med,
                "summary": summary,
            }
            no = med["no output"]["simulation_s"]
            entry["async_over_no_output"] = med["in situ async"]["simulation_s"] / no
            entry["sync_over_no_output"] = med["in situ sync"]["simulation_s"] / no
            # its PCA of a step takes no longer than the ranks' compute of the next one (the
            # publish is left out: it includes the waits of an analytics that falls behind)
            compute = summary["in situ async"]["compute_s"]
            entry["analytics_keeps_up"] = med["in situ async"]["analytics_graph_s"] <= compute
            if use_c:
                post = med["post hoc"]["time_to_analysis_s"]
                cold = med["post hoc"]["time_to_analysis_cold_s"]
                entry["posthoc_over_async"] = post / med["in situ async"]["time_to_analysis_s"]
                entry["posthoc_over_sync"] = post / med["in situ sync"]["time_to_analysis_s"]
                entry["posthoc_cold_over_async"] = cold / med["in situ async"]["time_to_analysis_s"]
                entry["posthoc_cold_over_sync"] = cold / med["in situ sync"]["time_to_analysis_s"]
                evs = [runs[m][0]["result"] for m in ("post hoc", "in situ sync", "in situ async")]
                entry["same_result"] = all(bool(np.allclose(evs[0], e, rtol=1e-6)) for e in evs)
            sizes.append(entry)
    load_after = load()

    solver = "C solver + PDI" if use_c else "Python solver"
    print(f"\n{args.ranks} ranks {runner.grid}, {args.workers} workers x 1 thread, {args.steps} "
          f"steps x {args.period} iterations, {solver}, median of {args.repeats}; "
          f"{runner.cores['description']}; load average {load_before} -> {load_after}")  # fmt: skip
    rows_out = []
    for s in sizes:
        med = s["median"]
        ph = med.get("post hoc", {})
        rows_out.append([
            f"{s['mib_per_rank']:.1f}", f"{med['no output']['simulation_s']:.2f}",
            f"{ph.get('simulation_s', math.nan):.2f}",
            f"{ph.get('time_to_analysis_s', math.nan):.2f}",
            f"{ph.get('time_to_analysis_cold_s', math.nan):.2f}",
            f"{med['in situ sync']['simulation_s']:.2f}",
            f"{med['in situ sync']['time_to_analysis_s']:.2f}",
            f"{med['in situ async']['simulation_s']:.2f}",
            f"{med['in situ async']['time_to_analysis_s']:.2f}",
            f"{s['summary']['in situ async'].get('first_step_s', math.nan):.2f}",
            f"{s['async_over_no_output']:.2f}x",
            f"{s['posthoc_over_async']:.2f}x" if "posthoc_over_async" in s else "-",
            f"{s['posthoc_cold_over_async']:.2f}x" if "posthoc_cold_over_async" in s else "-",
        ])  # fmt: skip
    print(table(["MiB/rank", "no output sim s", "post hoc sim s", "post hoc warm total s",
                 "post hoc cold total s", "sync sim s", "sync total s", "async sim s",
                 "async total s", "async first step s", "async sim / no output",
                 "post hoc warm / async", "post hoc cold / async"], rows_out))  # fmt: skip
    if use_c:
        print("post hoc cold: fsync " + ", ".join(
            f"{s['median']['post hoc']['fsync_s']:.3f} s" for s in sizes) + "; file pages in the "
            "page cache before the warm / cold read: " + ", ".join(
            f"{s['median']['post hoc']['page_cache_warm']:.0%} / "
            f"{s['median']['post hoc']['page_cache_cold']:.0%}" for s in sizes))  # fmt: skip
    if args.timings:
        print("\nPer publish: medians over ranks and steps 1..n; start-up from PDI_init's call")
        rows_out = []
        no_output = {s["mib_per_rank"]: s["median"]["no output"]["simulation_s"] for s in sizes}
        for s in sizes:
            for mode in modes:
                m = s["summary"][mode]
                rows_out.append([
                    f"{s['mib_per_rank']:.1f}", mode, f"{1e3 * m['compute_s']:.1f}",
                    f"{1e3 * m['publish_s']:.2f}", f"{1e3 * m['memcpy_s']:.2f}",
                    f"{100 * m['publish_share']:.2f}%",
                    f"{m.get('pdi_init_s', math.nan):.2f}",
                    f"{m.get('first_publish_s', math.nan):.2f}",
                    f"{m.get('first_step_s', math.nan):.2f}",
                    f"{s['median'][mode]['simulation_s'] / no_output[s['mib_per_rank']]:.2f}x",
                ])  # fmt: skip
        print(table(["MiB/rank", "mode", "compute ms", "publish ms", "memcpy ms",
                     "publish/iteration", "PDI_init s", "init->1st publish s",
                     "1st step at analytics s", "sim / no output"], rows_out))  # fmt: skip
    targets = evaluate(sizes, args.ranks, use_c, runner.cores["separate"], args.analytics)
    print_targets(targets)
    (args.out / "insitu_vs_posthoc.json").write_text(json.dumps(
        {"machine": machine(), "cores": runner.cores["description"],
         "cores_separate": runner.cores["separate"], "bytecode": bytecode,
         "load_before": load_before,
         "load_after": load_after, "solver": "C" if use_c else "Python", "c_problem": problem,
         "settings": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
         "sizes": sizes, "targets": targets_json(targets)}, indent=1,
    ))  # fmt: skip
    plot(sizes, args.out / "insitu_vs_posthoc.png")
    print(f"wrote {args.out / 'insitu_vs_posthoc.json'} and {args.out / 'insitu_vs_posthoc.png'}")
    return 0 if all(p is not False for _, p, _ in targets) else 1


if __name__ == "__main__":
    raise SystemExit(main())
