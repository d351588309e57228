"""Data that moves, end to end (issue 56): a Python code publishing through ``Bridge.publish``
under ``mpirun`` (tests/publish_moving.py: joined particles whose counts change, a rank with
none; a 2-D field as two boxes a rank that move to the next rank, then grow; a fixed array one of
whose steps is published as boxes), read by the :class:`~deisa.Adapter` with a real Dask
scheduler and workers, every step bitwise against the code's own arrays, and against the same
run's HDF5 output and its ``Replay``."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from conftest import STARTUP, DaskProcesses, kill_if_running, mpirun, test_env
from publish_moving import NRANKS, count, rho_shape, truth

from deisa import Adapter, Replay
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


def from_hdf5(directory: Path, name: str, step: int) -> np.ndarray | None:
    """Step ``step`` of ``name`` as the run's HDF5 files hold it, read with h5py alone: the
    ranks' particles in rank order, or the boxes placed at their ``start`` attribute."""
    import h5py

    files = [h5py.File(directory / f"out_{rank}.h5", "r") for rank in range(NRANKS)]
    try:
        if name == "x":
            return np.concatenate([f[f"x_{step}"][...] for f in files])
        boxes = [f[key] for f in files for key in f if key.startswith(f"{name}_{step}_")]
        if not boxes:
            return None
        whole = np.full(tuple(boxes[0].attrs["shape"]), np.nan)
        for box in boxes:
            start = box.attrs["start"]
            whole[tuple(slice(s, s + n) for s, n in zip(start, box.shape, strict=True))] = box[...]
        return whole
    finally:
        for f in files:
            f.close()


def test_each_live_step_is_the_runs_hdf5_output_and_its_replay(
    dask_processes: DaskProcesses, tmp_path: Path
) -> None:
    """Issue 56 item 8 for the Python code: the same run writes its HDF5 output (a file a rank,
    publish_moving.py --h5); every step the analytics reads is bitwise that output, and
    ``Replay`` of it gives the live arrays: the bytes, the chunks, the moving field's layouts."""
    cmd = mpirun(NRANKS, sys.executable, str(HERE / "publish_moving.py"),
                 str(dask_processes.scheduler_file), "--steps", str(NSTEPS),
                 "--connect-timeout", str(STARTUP), "--h5", str(tmp_path))  # fmt: skip
    sim = subprocess.Popen(
        cmd, env=test_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    names = ("x", "rho", "T")
    live: dict[str, dict[int, Any]] = {name: {} for name in (*names, "late")}
    layouts = []
    try:
        with dask_processes.client() as client, Adapter(client, timeout=STARTUP) as adapter:
            for step, arrays in adapter.zip(*names):
                for name, array in zip(names, arrays, strict=True):
                    live[name][step] = (array.compute(), array.chunks)
                layouts.append(adapter["rho"].layout(step))
            for step, array in adapter["late"].items():
                live["late"][step] = (array.compute(), array.chunks)
        out, err = sim.communicate(timeout=2 * STARTUP)
    finally:
        kill_if_running(sim)
    assert sim.returncode == 0, (out + err)[-3000:]
    assert sorted(live["late"]) == [2, 3] and all(sorted(live[n]) == [0, 1, 2, 3] for n in names)
    replay = Replay(str(tmp_path / "out_${rank}.h5"))
    assert replay.names == ["T", "late", "rho", "x"]
    for name, steps in live.items():
        assert replay[name].steps == sorted(steps), name
        for step, (value, chunks) in steps.items():
            saved = from_hdf5(tmp_path, name, step)
            assert saved is not None and value.dtype == saved.dtype, (name, step)
            assert value.tobytes() == saved.tobytes() == truth(name, step).tobytes(), (name, step)
            again = replay[name][step]
            assert again.compute().tobytes() == value.tobytes(), (name, step)
            if name != "x" or step % 2 == 0:  # odd steps: two arrays a rank live, one saved
                assert again.chunks == chunks, (name, step)
    assert [replay["rho"].layout(step) for step in range(NSTEPS)] == layouts
