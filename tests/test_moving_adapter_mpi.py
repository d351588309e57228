"""Data that moves, end to end (issue 56): a Python code publishing through ``Bridge.publish``
under ``mpirun`` (tests/publish_moving.py: joined particles whose counts change, a rank with
none; a 2-D field as two boxes a rank that move to the next rank, then grow; a fixed array one of
whose steps is published as boxes), read by the :class:`~deisa.Adapter` with a real Dask
scheduler and workers, every step bitwise against the code's own arrays."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from conftest import STARTUP, DaskProcesses, kill_if_running, mpirun, test_env
from publish_moving import NRANKS, count, rho_shape, truth

from deisa import Adapter
from deisa.analysis import NoFixedShapeError, StepShapesDifferError

HERE = Path(__file__).parent
NSTEPS = 4


def test_the_adapter_reads_moving_arrays_from_mpi_ranks_bitwise(
    dask_processes: DaskProcesses,
) -> None:
    cmd = mpirun(NRANKS, sys.executable, str(HERE / "publish_moving.py"),
                 str(dask_processes.scheduler_file), "--steps", str(NSTEPS),
                 "--connect-timeout", str(STARTUP))  # fmt: skip
    sim = subprocess.Popen(
        cmd, env=test_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        with dask_processes.client() as client, Adapter(client, timeout=STARTUP) as adapter:
            rho, x, fixed = adapter["rho"], adapter["x"], adapter["T"]
            first = rho.to_xarray(slice(0, 3))  # steps 0-2: one shape, stacked
            assert first.dims == ("step", "y", "x") and list(first["step"]) == [0, 1, 2]
            expected = np.stack([truth("rho", t) for t in range(3)])
            assert first.values.tobytes() == expected.tobytes()
            with pytest.raises(StepShapesDifferError, match=r"\(6, 8\) and \(6, 10\)"):
                rho[2:4]
            with pytest.raises(NoFixedShapeError):
                _ = rho.shape
            assert rho.shape_of(3) == rho_shape(3) == (6, 10)
            last = rho[3]  # chunked as written: two rows by half the columns
            assert last.chunks == ((2, 2, 2), (5, 5))
            assert last.compute().tobytes() == truth("rho", 3).tobytes()
            assert fixed.shape == (NRANKS, 4)
            steps = []
            for step, (particles, row) in adapter.zip("x", "T"):
                assert particles.compute().tobytes() == truth("x", step).tobytes()
                assert particles.shape == (sum(count(r, step) for r in range(NRANKS)),)
                assert row.compute().tobytes() == truth("T", step).tobytes()
                histogram, _ = np.histogram(particles.compute() % 1e6, bins=3, range=(0, 3e3))
                assert histogram.tolist() == [count(r, step) for r in range(NRANKS)]
                steps.append(step)
            assert steps == list(range(NSTEPS)) and x.ended
        out, err = sim.communicate(timeout=2 * STARTUP)
    finally:
        kill_if_running(sim)
    assert sim.returncode == 0, (out + err)[-3000:]
