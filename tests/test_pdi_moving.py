"""Data that moves through the PDI plugin (issue 56): a C particle code under real ``mpirun``.

plugin/pdi/tests/particles.c exposes, at each step, particles whose count changes with the step and
the rank (rank 1 has none at step 1), a 1-D array and a record of three components each, and a field
as two boxes a rank that move to the next rank at step 2 (at step 3 the last rank has none, rank 0
four). One YAML loads both ``decl_hdf5`` (one file per rank, one dataset per step: the sizes change)
and ``deisa`` (``moving``: joined particles, a start per rank, boxes gathered until an event); the
analytics reads every step through real Dask scheduler and worker processes and compares it bitwise
with the same run's HDF5 output, and ``Replay`` of that output gives the live run's arrays (the
particles, and the boxes placed by the ``start`` attribute decl_hdf5 writes with each).
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import numpy as np
import pytest
from conftest import STARTUP, DaskProcesses, kill_if_running, mpirun, test_env

from deisa import Adapter, Replay

pytestmark = pytest.mark.pdi

NRANKS = 3
NSTEPS = 4
NAMES = ("x", "id", "p", "rho")  # the arrays the code publishes

PARTICLES_PDI = """
metadata:
  nsteps: int
  nranks: int
  rank: int
  step: int
  npart: int
  offset: int
  ntotal: int
  bx: int
  by: int
  field_shape: {type: array, subtype: int, size: 2}
  box_start: {type: array, subtype: int, size: 2}
data:
  x: {type: array, subtype: double, size: [$npart]}
  id: {type: array, subtype: int64, size: [$npart]}
  p: {type: array, subtype: double, size: [$npart, 3]}
  rho: {type: array, subtype: double, size: [4, 2]}
plugins:
  mpi: ~
  decl_hdf5:  # one file per rank: decl_hdf5 (PDI 1.12) fails on a zero-size write
    file: 'particles_${rank}.h5'
    communicator: $MPI_COMM_SELF
    datasets:
      'x_[0-9]+': {type: array, subtype: double, size: [$npart]}
      'id_[0-9]+': {type: array, subtype: int64, size: [$npart]}
      'p_[0-9]+': {type: array, subtype: double, size: [$npart, 3]}
      'rho_[0-9]+_[0-9]+': {type: array, subtype: double, size: [4, 2]}
    write:
      x: {dataset: 'x_$step', when: '$npart > 0'}
      id: {dataset: 'id_$step', when: '$npart > 0'}
      p: {dataset: 'p_$step', when: '$npart > 0'}
      rho:  # a dataset a box, with its start and the field's shape, for Replay
        dataset: 'rho_${step}_$by'
        attributes: {start: $box_start, shape: $field_shape}
  deisa:
    scheduler_file: SCHEDULER
    connect_timeout: STARTUP
    mode: MODE
    datasets:
      x: {type: array, subtype: double, size: [$nsteps, $npart]}  # joined: that size is not used
      id: {type: array, subtype: int64, size: [$nsteps, $ntotal]}
      p: {type: array, subtype: double, size: [$nsteps, $npart, 3]}  # joined along the particles
      rho: {type: array, subtype: double, size: [$nsteps, 4, '4 * $nranks'], dims: [y, x]}
    write:
      x:
        moving: {joined: true}
        dataset_selection: {start: [$step, 0]}
      id:
        moving: true
        dataset_selection: {start: [$step, $offset]}
      p:
        moving: {joined: true}
        dataset_selection: {start: [$step, 0, 0]}
      rho:
        moving: {boxes_until: end_step}
        dataset_selection: {start: [$step, $bx, $by]}
"""


def count(rank: int, step: int) -> int:
    """The particles of ``rank`` at ``step``, as plugin/pdi/tests/particles.c counts them."""
    return 0 if (rank, step) == (1, 1) else (3 + 5 * rank + 7 * step) % 9


def from_hdf5(directory: Path, name: str, step: int) -> np.ndarray:
    """Step ``step`` of ``name`` as the run's HDF5 files hold it: the ranks' particles in rank
    order (a rank with none wrote no dataset), or the field from its boxes."""
    import h5py

    files = [h5py.File(directory / f"particles_{rank}.h5", "r") for rank in range(NRANKS)]
    try:
        if name == "rho":
            field = np.full((4, 4 * NRANKS), np.nan)
            for f in files:
                for key in f:
                    if key.startswith(f"rho_{step}_"):
                        by = int(key.rsplit("_", 1)[1])
                        field[:, by : by + 2] = f[key][...]
            return field
        parts = [f[f"{name}_{step}"][...] for f in files if f"{name}_{step}" in f]
        return np.concatenate(parts)  # every step has some rank with particles
    finally:
        for f in files:
            f.close()


@pytest.mark.parametrize("mode", ["async", "sync"])
def test_c_particle_code_reaches_the_adapter_bitwise_as_its_hdf5_output(
    built: Path, dask_processes: DaskProcesses, tmp_path: Path, mode: str
) -> None:
    config = tmp_path / "pdi.yml"
    config.write_text(
        PARTICLES_PDI.replace("SCHEDULER", str(dask_processes.scheduler_file))
        .replace("STARTUP", str(STARTUP))
        .replace("MODE", mode)
    )
    env = test_env()
    env["PDI_PLUGIN_PATH"] = str(built / "plugin")
    code = built / "plugin" / "pdi" / "tests" / "deisa_particles"
    sim = subprocess.Popen(
        mpirun(NRANKS, str(code), str(config), str(NSTEPS)),
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        read: dict[str, list[np.ndarray]] = {name: [] for name in NAMES}
        layouts = []
        live_chunks: dict[str, list[tuple[tuple[int, ...], ...]]] = {name: [] for name in NAMES}
        with dask_processes.client() as client, Adapter(client, timeout=STARTUP) as adapter:
            for step, arrays in adapter.zip(*NAMES):
                assert step == len(read["x"])
                for name, array in zip(NAMES, arrays, strict=True):
                    read[name].append(array.compute())
                    live_chunks[name].append(array.chunks)
                layouts.append(adapter["rho"].layout(step))
        out, err = sim.communicate(timeout=2 * STARTUP)
    finally:
        kill_if_running(sim)
    assert sim.returncode == 0, (out + err)[-3000:]
    assert len(read["x"]) == NSTEPS
    for step in range(NSTEPS):
        counts = [count(rank, step) for rank in range(NRANKS)]
        assert read["x"][step].shape == read["id"][step].shape == (sum(counts),)
        assert read["p"][step].shape == (sum(counts), 3)  # a record: joined along the particles
        # the ranks' counts, the ranks with none left out
        assert live_chunks["p"][step] == (tuple(c for c in counts if c), (3,))
        for name in NAMES:
            expected = from_hdf5(tmp_path, name, step)
            assert read[name][step].dtype == expected.dtype, (name, step)
            assert read[name][step].tobytes() == expected.tobytes(), (name, step)
        # the ids say where each particle is: step * 1e6 + its index in the step's array
        assert read["id"][step].tolist() == [step * 1_000_000 + i for i in range(sum(counts))]
        # every rank's two boxes, chunked as written, whichever rank holds them this step
        assert live_chunks["rho"][step] == ((4,), (2,) * (2 * NRANKS))
    # Replay of the run's HDF5 output (a file a rank, x_$step where the rank has particles,
    # rho_${step}_$by a box with its start): each step the live one, chunked the same, the
    # boxes wherever they moved (issue 56 item 8)
    replay = Replay(str(tmp_path / "particles_${rank}.h5"))
    assert replay.names == sorted(NAMES)
    for name in NAMES:
        assert replay[name].steps == list(range(NSTEPS))
        for step in range(NSTEPS):
            saved = replay[name][step]
            assert saved.chunks == live_chunks[name][step], (name, step)
            assert saved.compute().tobytes() == read[name][step].tobytes(), (name, step)
    assert [replay["rho"].layout(step) for step in range(NSTEPS)] == layouts
    import h5py

    with h5py.File(tmp_path / "particles_1.h5", "r") as f:
        assert "x_0" in f and "x_1" not in f  # rank 1 had no particle at step 1
    with h5py.File(tmp_path / f"particles_{NRANKS - 1}.h5", "r") as f:
        # nor the last rank a box at step 3
        assert not [key for key in f if key.startswith("rho_3_")]


def test_a_fixed_entry_whose_block_changes_shape_names_moving(built: Path, tmp_path: Path) -> None:
    """Without `moving', an entry keeps the fixed path: its block is the first publication's,
    and a block of another shape is an error that says what to write."""
    from test_pdi_plugin import stub_env

    head = PARTICLES_PDI[: PARTICLES_PDI.index("  decl_hdf5:")]
    fixed = head + (
        "  deisa:\n    scheduler_file: nowhere.json\n    mode: async\n"
        "    datasets: {id: {type: array, subtype: int64, size: [$nsteps, $ntotal]}}\n"
        "    write: {id: {dataset_selection: {start: [$step, $offset]}}}\n"
    )
    config = tmp_path / "pdi.yml"
    config.write_text(fixed)
    env = test_env()
    env.update(stub_env(tmp_path))
    env["PDI_PLUGIN_PATH"] = str(built / "plugin")
    code = built / "plugin" / "pdi" / "tests" / "deisa_particles"
    proc = subprocess.run(
        mpirun(NRANKS, str(code), str(config), str(NSTEPS)),
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=2 * STARTUP,
    )
    assert proc.returncode != 0
    assert (
        "the block of `id' changed shape since the bridge was created (from 3 to 1 elements along "
        "each axis): give its `write' entry `moving: true'" in proc.stdout + proc.stderr
    )
