"""Steering values between real processes: mpirun ranks, dask scheduler and workers, a client.

- every rank of an mpirun reads the same steering value at the same step (tests/steered_ranks.py);
- the Python heat solver (deisa_simulation/heat.py) and the C heat solver through PDI (configs/
  heat_deisa.yml's ``read: [stop]``) are stopped by :func:`~deisa.pca_app.pipeline.analyze_stream`
  once
  the PCA has converged: they exit 0, every step they published reaches the analytics, and the
  stream ends normally.

The in-process tests of the scheduler side are in scheduler/test_scheduler_steering.py, the
encoding's in test_wire.py; test_security.py attacks the routes and rank 0 with pickles.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import BUILD, REPO, STARTUP, DaskProcesses, mpirun, start_heat, test_env, write_config

from deisa import Adapter
from deisa.pca_app.pipeline import PCASettings, StepAnalytics, analyze_stream, stop_summary

STEERED = REPO / "tests" / "steered_ranks.py"
# 32x32 heat field, 2 iterations per output: the explained variance ratio changes by less than
# 1 % between outputs 2 and 3, long before the last of 40 outputs
CONVERGED = 0.01
STEPS = 40


@pytest.fixture
def steered_dask(shared_dask: DaskProcesses) -> DaskProcesses:
    """The module's scheduler and workers, with no steering value that an earlier test of the
    module set (``param``, the converged PCA's ``stop``): a run starts as on a fresh cluster."""
    with shared_dask.client() as client:
        adapter = Adapter(client, timeout=STARTUP)
        for name in ("param", "stop"):
            adapter.set(name, None)
    return shared_dask


def test_steering_value_seen_by_every_rank_at_the_same_step(
    tmp_path: Path, steered_dask: DaskProcesses
) -> None:
    out = tmp_path / "seen"
    cmd = mpirun(4, sys.executable, str(STEERED), str(steered_dask.scheduler_file), str(out))
    proc = subprocess.Popen(
        cmd, env=test_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    try:
        with steered_dask.client() as client:
            adapter = Adapter(client, timeout=STARTUP)
            taken = []
            for step, _ in adapter["steered"].items():
                taken.append(step)
                adapter.set("param", step)  # the ranks read it at a later step, all the same
        output, _ = proc.communicate(timeout=STARTUP)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, output
    assert taken == list(range(12))
    seen = [json.loads(Path(f"{out}.{rank}.json").read_text()) for rank in range(4)]
    assert seen[1] == seen[0] and seen[2] == seen[0] and seen[3] == seen[0], seen
    assert seen[0] == sorted(seen[0]), seen[0]  # latest value wins: never an older one
    # buffer_nb=1 keeps the ranks within a few steps of the analytics, whose first set came
    # long before they could publish step 11
    assert seen[0][-1] >= 0, seen[0]


def check_stopped_run(analytics: list[StepAnalytics], last_published: int) -> None:
    """Every published step analysed, in order; a stop asked once, before the last step."""
    assert [a.step for a in analytics] == list(range(last_published + 1))
    asked = [a for a in analytics if a.stop_reason is not None]
    assert len(asked) == 1, analytics
    assert asked[0].relative_change is not None and asked[0].relative_change < CONVERGED
    assert "the PCA converged" in asked[0].stop_reason
    assert all(a.relative_change >= CONVERGED for a in analytics[1 : asked[0].step])  # type: ignore[operator]
    assert asked[0].step <= last_published < STEPS - 1
    summary = stop_summary(analytics, STEPS)
    assert summary is not None and f"after step {asked[0].step} the analytics" in summary
    assert f"it published {last_published + 1} step(s) of {STEPS} planned" in summary


def analyze_until_stopped(
    proc: subprocess.Popen[str], cluster: DaskProcesses, array: str = "gtemp"
) -> tuple[list[StepAnalytics], str, str]:
    """Run the converging PCA on the solver's stream ``array``; its results and the solver's
    output."""
    try:
        with cluster.client() as client:
            settings = PCASettings(
                array=array,
                n_components=2,
                stall_timeout=STARTUP,
                max_in_flight=1,
                stop_when_converged=CONVERGED,
            )
            analytics = analyze_stream(client, settings)
        stdout, stderr = proc.communicate(timeout=STARTUP)
    finally:
        if proc.poll() is None:
            proc.kill()
    return analytics, stdout, stderr


def test_python_heat_stopped_by_the_converged_pca(
    tmp_path: Path, steered_dask: DaskProcesses
) -> None:
    config = write_config(
        tmp_path / "simulation.yml", global_size=[32, 32], steps=STEPS, output_period=2
    )
    timings = tmp_path / "timings.json"
    proc = start_heat(
        4,
        config,
        *("--scheduler-file", str(steered_dask.scheduler_file), "--timings", str(timings)),
        *("--buffer-nb", "1", "--connect-timeout", str(STARTUP)),
        *("--array", "python_heat"),  # the module's cluster is shared: the C solver's is gtemp
    )
    analytics, stdout, stderr = analyze_until_stopped(proc, steered_dask, "python_heat")
    assert proc.returncode == 0, stdout + stderr
    ranks = json.loads(timings.read_text())["ranks"]
    published = [[t["step"] for t in rank] for rank in ranks]
    assert all(steps == published[0] for steps in published), published
    check_stopped_run(analytics, published[0][-1])
    assert f"stopped after step {published[0][-1]} of {STEPS}: 'stop' set by the analytics" in (
        stderr
    )


@pytest.mark.pdi
def test_c_heat_stopped_by_the_converged_pca_through_pdi(
    built: Path, tmp_path: Path, steered_dask: DaskProcesses
) -> None:
    """configs/heat_deisa.yml as shipped: its `read: [stop]` fills the solver's `stop`."""
    simulation = write_config(
        tmp_path / "simulation.yml", global_size=[32, 32], steps=STEPS, output_period=2
    )
    env = test_env()
    env["PDI_PLUGIN_PATH"] = str(BUILD / "plugin")
    pdi = REPO / "configs" / "heat_deisa.yml"  # scheduler_file: scheduler.json, in tmp_path
    cmd = mpirun(4, str(BUILD / "simulation" / "heat"), str(simulation), str(pdi))
    proc = subprocess.Popen(
        cmd, cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    analytics, stdout, stderr = analyze_until_stopped(proc, steered_dask)
    assert proc.returncode == 0, stdout + stderr
    last = analytics[-1].step
    assert f"heat: stopped after step {last} of {STEPS}: `stop' set by the analytics" in stderr
    check_stopped_run(analytics, last)
