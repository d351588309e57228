"""The local run of ``deisa-run``: the whole pipeline on this machine, on loopback only.

:func:`run_pipeline` starts a Dask scheduler (with a dashboard when bokeh is installed) and
``workers`` workers, all listening on 127.0.0.1 only (dashboards included), then the simulation
under ``mpirun`` with Open MPI kept on shared memory and loopback (``mpi.env`` of the defaults),
analyses every step in this process with a progress bar, writes the report and stops every
process it started, on success, failure or signal.
"""

from __future__ import annotations

import contextlib
import importlib.util
import logging
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

import yaml

from .config import RunSettings
from .pipeline import PipelineError, StepAnalytics, analyze_stream
from .processes import ProcessSet, Signals, child_env, tail, wait_until
from .report import report
from .solver import simulation_command

logger = logging.getLogger(__name__)

LOOPBACK = "127.0.0.1"


def dashboard_available() -> bool:
    """Whether ``dask scheduler`` can serve its dashboard (it needs bokeh)."""
    return importlib.util.find_spec("bokeh") is not None


def scheduler_command(scheduler_file: Path, dashboard: bool) -> list[str]:
    cmd = [sys.executable, "-m", "dask", "scheduler", "--host", LOOPBACK, "--port", "0"]
    cmd += ["--scheduler-file", str(scheduler_file)]
    if dashboard:
        cmd += ["--dashboard", "--dashboard-address", f"{LOOPBACK}:0"]
    else:
        cmd += ["--no-dashboard"]
    return cmd


def worker_command(scheduler_file: Path, index: int, threads: int, local_dir: Path) -> list[str]:
    # --no-dashboard drops the pages, not the HTTP server (health, metrics): keep it local too
    return [
        sys.executable, "-m", "dask", "worker",
        "--scheduler-file", str(scheduler_file),
        "--host", LOOPBACK,
        "--nthreads", str(threads),
        "--no-nanny", "--no-dashboard", "--dashboard-address", f"{LOOPBACK}:0",
        "--name", f"worker-{index}",
        "--local-directory", str(local_dir),
    ]  # fmt: skip


def _workers_connected(client: Any, n: int) -> Callable[[], bool]:
    def ready() -> bool:
        try:
            client.wait_for_workers(n, timeout=1)  # the 1 s wait is the polling interval
        except TimeoutError:
            return False
        return True

    return ready


def run_pipeline(settings: RunSettings, signals: Signals, out: IO[str] = sys.stdout) -> None:
    """Start scheduler, workers and simulation, analyse every step, report, stop everything.

    Parameters
    ----------
    settings
        From :func:`deisa.launcher.solver.resolve_settings`.
    signals
        Installed by the caller; every wait checks it, and its second signal kills the
        children started here.
    out
        Where the table goes.

    Raises
    ------
    PipelineError
        The simulation, a Dask process or the analytics failed.
    Interrupted
        A signal came; every process was stopped.
    """
    from distributed import Client
    from tqdm import tqdm

    output = settings.output
    logs = output / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    scheduler_file = output / "scheduler.json"
    timings = output / "timings.json"
    heat_timings = output / "heat-timings"  # the C solver's HEAT_TIMINGS prefix
    for stale in (scheduler_file, timings, output / "results.json",
                  *output.glob(f"{heat_timings.name}.*.json")):  # fmt: skip
        stale.unlink(missing_ok=True)
    sim_config = output / "simulation.yml"
    sim_config.write_text(yaml.safe_dump(settings.simulation, sort_keys=False))
    pdi_file = output / "pdi.yml"
    sim = simulation_command(
        settings,
        python=sys.executable,
        sim_config=str(sim_config),
        scheduler_file=str(scheduler_file),
        timings=str(timings),
        pdi_file=str(pdi_file),
    )
    extra = {}
    if sim.pdi is not None:
        pdi_file.write_text(yaml.safe_dump(sim.pdi, sort_keys=False))
    if sim.plugin_dir is not None:
        extra["PDI_PLUGIN_PATH"] = os.pathsep.join(
            filter(None, [str(sim.plugin_dir), os.environ.get("PDI_PLUGIN_PATH")])
        )
    if not sim.timings:  # the C solver: per-rank files, read by the report
        extra["HEAT_TIMINGS"] = str(heat_timings)
    sim_cmd = [*settings.mpirun, "-np", str(settings.ranks), *sim.argv]
    sim_env = child_env(extra, keep=settings.mpi_env)
    procs = ProcessSet(logs, child_env(), settings.stop_timeout)
    signals.on_second = procs.kill
    client = None
    print(
        f"deisa-run: {settings.ranks} ranks ({settings.solver} solver: {settings.solver_reason}),"
        f" {settings.workers} workers x {settings.threads} threads, field "
        f"{settings.simulation['global_size']}, {settings.simulation['steps']} steps; "
        f"output in {output}",
        file=sys.stderr,
    )
    try:
        dashboard = dashboard_available()
        procs.start("scheduler", scheduler_command(scheduler_file, dashboard))
        wait_until(
            scheduler_file.exists,
            f"the scheduler file {scheduler_file}",
            procs,
            settings.timeout,
            check=signals.check,
        )
        for i in range(settings.workers):
            procs.start(
                f"worker-{i}",
                worker_command(scheduler_file, i, settings.threads, output / "dask-scratch"),
            )
        client = Client(scheduler_file=str(scheduler_file), timeout=settings.timeout)
        wait_until(
            _workers_connected(client, settings.workers),
            f"{settings.workers} worker(s) to connect",
            procs,
            settings.timeout,
            interval=0,
            check=signals.check,
        )
        if dashboard:
            print(f"Dashboard: {client.dashboard_link}", file=sys.stderr)
        else:
            print(
                "Dashboard: unavailable (bokeh is not installed; pip install bokeh)",
                file=sys.stderr,
            )
        signals.check()
        simulation = procs.start("simulation", sim_cmd, sim_env)
        launched = time.perf_counter()
        first_step_s: list[float] = []  # time to first step, for the report

        def check() -> None:
            signals.check()
            dead = procs.failed()
            if dead is None:
                return
            if dead is simulation and simulation.popen.returncode == 0:
                return  # finished; the end of the stream is on its way
            raise PipelineError(
                f"{dead.name} failed (exit status {dead.popen.returncode}), log "
                f"{dead.log}:\n{tail(dead.log)}"
            )

        steps = settings.simulation["steps"]
        with tqdm(total=steps, desc="in situ PCA", unit="step", file=sys.stderr) as bar:
            analysing: list[int] = []

            def on_start(step: int) -> None:
                if not first_step_s:
                    first_step_s.append(time.perf_counter() - launched)
                analysing.append(step)
                bar.set_postfix_str(f"analysing step {', '.join(map(str, analysing))}")

            def on_step(done: StepAnalytics) -> None:
                analysing.remove(done.step)
                bar.set_postfix_str(
                    f"analysing step {', '.join(map(str, analysing))}" if analysing else ""
                )
                bar.update()
                signals.check()

            analytics = analyze_stream(
                client,
                settings.array,
                n_components=settings.n_components,
                stall_timeout=settings.timeout,
                # as many fits at once as the stream may queue steps: the simulation is held by
                # flow control only when the analytics really is slower
                max_in_flight=settings.buffer_nb or 2,
                check=check,
                on_start=on_start,
                on_step=on_step,
                stop_when_converged=settings.stop_when_converged,
            )
        deadline = time.monotonic() + settings.timeout
        while simulation.popen.poll() is None:
            signals.check()
            if time.monotonic() > deadline:
                raise PipelineError(
                    f"the simulation ended its stream but did not exit within {settings.timeout} s"
                )
            time.sleep(0.1)
        check()
        if len(analytics) != steps and not any(a.stop_reason for a in analytics):
            logger.warning("analysed %d steps of %d", len(analytics), steps)
        report(
            analytics,
            timings if sim.timings else heat_timings,
            output,
            settings.summary(),
            settings.array,
            out,
            first_step_s=first_step_s[0] if first_step_s else None,
        )
    finally:
        if client is not None:
            with contextlib.suppress(Exception):
                client.close(timeout=5)
        procs.stop()
        signals.on_second = None
