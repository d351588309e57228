"""Every generation of the released DEISA client, unchanged, on one C code through PDI (issue 45).

The code (tests/grammars/released_mhd.c) has the shape of pdidev/deisa main's published
benchmarks: five variables per cell, ghost cells on three axes, a 2-rank process grid, and a
PDI YAML in the released plugin's grammar (tests/grammars/released_mhd.yml) declaring a 5-D
``global_t`` (time, variables, z, y, x) of a fixed time length, its Bridge created at the code's
own event (``init_on: init_pdi_w_deisa``). Each analytics, written against one generation
(tests/grammars/ekin_*.py), runs as a process in that generation's launch order:

- pdidev/deisa main (its benchmark's ``run_experiment``): scheduler, workers, analytics, ranks;
  and, as its ``Deisa`` waits for the workers, scheduler, analytics, workers, ranks;
- 0.3.x and the ``dask_interface`` adaptor (the released example's Script.sh): scheduler,
  analytics, workers, ranks.

Each computes the kinetic energy of a z-plane of every step; it must equal numpy's on the same
field, and the cluster is shut down by the analytics, as those scripts expect. The same
analytics in process: tests/analysis/test_compat_main.py.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import yaml
from conftest import REPO, STARTUP, DaskProcesses, mpirun, test_env

pytestmark = pytest.mark.pdi

SOURCES = REPO / "tests" / "grammars"
NCELL = (8, 6, 6)  # x, y, z
MPI_DIMS = (2, 1, 1)
GHOST = (2, 1, 1)
NVAR = 5
TIME_LENGTH = 6  # released_mhd.yml's size[0]
WORKERS = 2


def field(nsteps: int) -> np.ndarray:
    """What released_mhd.c publishes: (step, variable, z, y, x), ghosts excluded."""
    t, v, z, y, x = np.indices((nsteps, NVAR, NCELL[2], NCELL[1], NCELL[0]), dtype=float)
    return 1.0 + t + v / 2.0 + z / 4.0 + y / 8.0 + x / 64.0


def ekin(series: np.ndarray) -> np.ndarray:
    """The analytics' kinetic energy, by numpy."""
    mz = series.shape[2]
    s = series[:, :, int(mz / 3)]
    return 0.5 * s[:, 0] * (s[:, 2] ** 2 + s[:, 3] ** 2 + s[:, 4] ** 2) / (mz * mz)


def start_analytics(script: str, cwd: Path) -> subprocess.Popen[str]:
    argv = [sys.executable, str(SOURCES / script)]
    if script == "ekin_main.py":
        argv += [str(WORKERS), "scheduler.json", "."]
    return subprocess.Popen(
        argv, cwd=cwd, env=test_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )


def run_generation(
    built: Path, tmp_path: Path, script: str, nsteps: int, workers_first: bool = False
) -> tuple[int, str, bool]:
    """Launch the run (the workers before the analytics if ``workers_first``); the analytics'
    status and output, and whether the scheduler exited after it without being stopped."""
    settings = {"ncell": list(NCELL), "mpi_dims": list(MPI_DIMS), "ghost": list(GHOST)}
    (tmp_path / "settings.yml").write_text(yaml.safe_dump({**settings, "nsteps": nsteps}))
    (tmp_path / "config.yml").write_text(yaml.safe_dump({"workers": WORKERS}))
    env = test_env()
    env["PDI_PLUGIN_PATH"] = str(built / "plugin")
    cluster = DaskProcesses(tmp_path / "scheduler.json", log_dir=tmp_path, env=env)
    analytics = None
    try:
        cluster.start_scheduler(STARTUP)
        if workers_first:
            cluster.start_workers(WORKERS)
            analytics = start_analytics(script, tmp_path)
        else:
            analytics = start_analytics(script, tmp_path)
            cluster.start_workers(WORKERS)
        cmd = mpirun(2, str(built / "tests" / "grammars" / "released_mhd"), "settings.yml")
        cmd.append(str(SOURCES / "released_mhd.yml"))
        sim = subprocess.run(
            cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=STARTUP * 3
        )
        assert sim.returncode == 0, f"{' '.join(cmd)}:\n{(sim.stdout + sim.stderr)[-5000:]}"
        output, _ = analytics.communicate(timeout=STARTUP * 3)
        scheduler = cluster.procs[0]
        exited = analytics.returncode == 0 and _exits(scheduler)
        return analytics.returncode, output, exited
    finally:
        if analytics is not None and analytics.poll() is None:
            analytics.kill()
            analytics.communicate()
        cluster.stop()


@pytest.mark.parametrize(
    ("script", "workers_first"),
    [
        ("ekin_main.py", True),
        ("ekin_main.py", False),
        ("ekin_v03.py", False),
        ("ekin_initialization.py", False),
    ],
    ids=["main", "main-analytics-first", "0.3", "dask_interface"],
)
def test_each_generations_analytics_runs_unchanged_and_equals_numpy(
    built: Path, tmp_path: Path, script: str, workers_first: bool
) -> None:
    status, output, shut_down = run_generation(built, tmp_path, script, TIME_LENGTH, workers_first)
    assert status == 0, output[-5000:]
    got = np.load(tmp_path / "ekin.npz")
    expected = ekin(field(TIME_LENGTH))
    assert int(got["shape"][0]) == TIME_LENGTH
    np.testing.assert_allclose(got["ekin"], expected, rtol=1e-13)
    if script == "ekin_main.py":
        np.testing.assert_allclose(got["sum_over_xy"], expected.sum(axis=(1, 2)), rtol=1e-13)
        np.testing.assert_allclose(got["fourier"], np.abs(np.fft.fft2(expected)) ** 2, rtol=1e-9)
    assert shut_down  # by the analytics, as its generation's launch scripts expect


def test_main_analytics_of_a_run_that_stops_early_names_the_missing_step(
    built: Path, tmp_path: Path
) -> None:
    """4 steps of the 6 declared: the time axis still has 6 steps, and the computation fails
    naming the first step that never came."""
    status, output, _ = run_generation(built, tmp_path, "ekin_main.py", 4, workers_first=True)
    assert status != 0
    assert "EndOfStreamError" in output
    assert "of 'global_t' never came: the simulation ended the stream after 4 step(s)" in output
    assert "of the 6 its time axis declares" in output


def _exits(proc: subprocess.Popen[bytes]) -> bool:
    """Whether ``proc`` exits within :data:`STARTUP` seconds."""
    try:
        proc.wait(STARTUP)
    except subprocess.TimeoutExpired:
        return False
    return True
