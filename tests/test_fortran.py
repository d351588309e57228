"""The Fortran heat solver (simulation/heat.f90) through PDI and the deisa plugin, under mpirun.

heat.f90 exposes the same data as heat.c under the same names, with the same bytes (it stores
its blocks column index first), so configs/heat_hdf5.yml and configs/heat_deisa.yml serve it
unchanged. Skips, saying why, when CMake did not build it (no Fortran compiler, or a PDI built
without -DBUILD_FORTRAN=ON).
"""

from __future__ import annotations

import json
import re
import subprocess
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml
from conftest import BUILD, REPO, STARTUP, DaskProcesses, mpirun, test_env, write_config

from deisa_simulation.heat import HeatConfig, reference_field

pytestmark = pytest.mark.pdi

HEAT_F90 = BUILD / "simulation" / "heat_f90"
HEAT_C = BUILD / "simulation" / "heat"
CONFIGS = REPO / "configs"


@pytest.fixture(scope="module")
def heat_f90(built: Path) -> Path:
    """build/simulation/heat_f90, or a skip naming what CMake lacked."""
    if not HEAT_F90.exists():
        cache = (BUILD / "CMakeCache.txt").read_text(errors="replace")
        compiler = re.search(r"^CMAKE_Fortran_COMPILER:\w+=(.*)$", cache, re.MULTILINE)
        pytest.skip(
            "build/simulation/heat_f90 was not built: it needs a Fortran compiler (CMake found "
            f"{compiler.group(1) if compiler else 'none'!r}), MPI's Fortran bindings and PDI's "
            "Fortran API (PDI built with -DBUILD_FORTRAN=ON; `cmake -S . -B build` says which "
            "is missing)"
        )
    return HEAT_F90


def run(binary: Path, nranks: int, simulation: Path, pdi: Path, cwd: Path, **extra_env: str) -> str:
    """``mpirun -np N binary simulation.yml pdi.yml`` in ``cwd``, the deisa plugin on the path
    (and ``extra_env`` in the environment); its stdout and stderr."""
    env = test_env()
    env["PDI_PLUGIN_PATH"] = str(BUILD / "plugin")
    env.update(extra_env)
    cmd = mpirun(nranks, str(binary), str(simulation), str(pdi))
    proc = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, f"{' '.join(cmd)} failed ({proc.returncode}):\n{proc.stderr}"
    return proc.stdout + proc.stderr


def written(binary: Path, nranks: int, simulation: Path, cwd: Path) -> dict[str, np.ndarray]:
    """Every dataset ``binary`` writes with configs/heat_hdf5.yml."""
    import h5py

    cwd.mkdir(exist_ok=True)
    run(binary, nranks, simulation, CONFIGS / "heat_hdf5.yml", cwd)
    with h5py.File(cwd / "heat.h5", "r") as f:
        return {name: f[name][...] for name in ("gtemp", "gdtemp")}


def deisa_config(tmp_path: Path, *, steering: bool) -> Path:
    """configs/heat_deisa.yml as it is (scheduler.json in the run's directory), ``read: [stop]``
    kept only with ``steering``."""
    tree: dict[str, Any] = yaml.safe_load((CONFIGS / "heat_deisa.yml").read_text())
    if not steering:
        tree["plugins"]["deisa"].pop("read")
    path = tmp_path / "pdi.yml"
    path.write_text(yaml.safe_dump(tree))
    return path


@pytest.mark.parametrize(
    ("nranks", "settings"),
    [
        (4, {"global_size": [32, 32], "process_grid": [2, 2]}),
        (3, {"global_size": [30, 27], "process_grid": [3, 1]}),  # uneven split, not square
        (2, {"global_size": [17, 40], "process_grid": [1, 2]}),  # split along the columns
    ],
    ids=["even-2x2", "uneven-3x1", "uneven-1x2"],
)
def test_fortran_heat_hdf5_equals_c_and_reference_bitwise(
    heat_f90: Path, tmp_path: Path, nranks: int, settings: dict[str, Any]
) -> None:
    simulation = write_config(tmp_path / "simulation.yml", **settings)
    config = HeatConfig.from_yaml(simulation)
    fortran = written(heat_f90, nranks, simulation, tmp_path / "f90")
    c = written(HEAT_C, nranks, simulation, tmp_path / "c")
    assert fortran["gtemp"].shape == (config.steps, *config.global_size)
    for name in ("gtemp", "gdtemp"):  # same decomposition, same steps: the same bytes as C
        assert np.array_equal(fortran[name], c[name]), name
    for step in range(config.steps):
        assert np.array_equal(fortran["gtemp"][step], reference_field(config, step)), step
    assert fortran["gtemp"][-1].sum() > 0  # not trivially equal


def test_fortran_heat_through_deisa_reaches_dask_bitwise(
    heat_f90: Path, tmp_path: Path, shared_dask: DaskProcesses
) -> None:
    """Both arrays of configs/heat_deisa.yml reach real Dask workers through the plugin, equal
    bitwise to the Fortran solver's own decl_hdf5 file and to the C solver's."""
    from deisa import Adapter

    simulation = write_config(tmp_path / "simulation.yml", global_size=[30, 27],
                              process_grid=[3, 1], steps=5)  # fmt: skip
    config = HeatConfig.from_yaml(simulation)
    own = written(heat_f90, 3, simulation, tmp_path / "f90")
    c = written(HEAT_C, 3, simulation, tmp_path / "c")
    # the analytics connects after the run: every step waits on the workers (buffer_nb: none)
    output = run(heat_f90, 3, simulation, deisa_config(tmp_path, steering=False), tmp_path)
    assert "deisa.Bridge created" in output
    with shared_dask.client() as client:
        adapter = Adapter(client)
        for name in ("gtemp", "gdtemp"):
            received = {step: field.compute() for step, field in adapter[name].items()}
            assert sorted(received) == list(range(config.steps)), name
            for step, field in received.items():
                assert field.dtype == np.float64
                assert np.array_equal(field, own[name][step]), (name, step)
                assert np.array_equal(field, c[name][step]), (name, step)


def test_fortran_heat_reads_the_steering_stop(
    heat_f90: Path, tmp_path: Path, shared_dask: DaskProcesses
) -> None:
    """`stop', exposed PDI_INOUT inside a PDI transaction, is filled by the plugin's `read'
    section from the analytics' steering value: every rank leaves after the same early step
    (the first reads may come before the Bridge's background connection knows the value)."""
    from deisa import Adapter

    steps = 20
    simulation = write_config(tmp_path / "simulation.yml", steps=steps)
    with shared_dask.client() as client:
        adapter = Adapter(client)
        adapter.set("stop", 1)  # set before the run
        output = run(heat_f90, 4, simulation, deisa_config(tmp_path, steering=True), tmp_path)
        adapter.set("stop", None)  # the module's cluster is shared: later runs read no stop
        stopped = re.findall(rf"heat_f90: stopped after step (\d+) of {steps}", output)
        assert len(stopped) == 1, output[-3000:]  # rank 0 says it, for every rank
        last = int(stopped[0])
        assert last < steps - 1
        assert [step for step, _ in adapter["gtemp"].items()] == list(range(last + 1))


def test_fortran_heat_writes_heat_timings_as_the_c_solver(heat_f90: Path, tmp_path: Path) -> None:
    """With HEAT_TIMINGS=PREFIX, each rank of heat.f90 writes PREFIX.<rank>.json in heat.c's
    format (the same keys, in the same order, per step too), which deisa-run's report reads."""
    from deisa.pca_app.report import read_timings

    steps = 4
    simulation = write_config(tmp_path / "simulation.yml", global_size=[30, 27],
                              process_grid=[3, 1], steps=steps)  # fmt: skip
    before = time.time()
    files: dict[str, list[dict[str, Any]]] = {}
    for name, binary in (("f90", heat_f90), ("c", HEAT_C)):
        cwd = tmp_path / name
        cwd.mkdir()
        prefix = cwd / "timings"
        run(binary, 3, simulation, CONFIGS / "heat_hdf5.yml", cwd, HEAT_TIMINGS=str(prefix))
        written = sorted(p.name for p in cwd.glob("timings*"))
        assert written == [f"timings.{rank}.json" for rank in range(3)], written  # no .partial
        files[name] = [json.loads((cwd / f).read_text()) for f in written]
        assert len(read_timings(prefix)) == 3
        for rank in read_timings(prefix):  # what deisa-run's table and results.json take
            assert [s["step"] for s in rank] == list(range(steps))
            assert all(s["compute_s"] >= 0 and s["publish_s"] >= 0 for s in rank)
    for fortran, c in zip(files["f90"], files["c"], strict=True):
        assert list(fortran) == list(c)  # the same keys in the same order
        assert [list(s) for s in fortran["steps"]] == [list(s) for s in c["steps"]]
        assert fortran["rank"] == c["rank"]
        assert before - 1 <= fortran["epoch"] <= time.time() + 1  # seconds since 1970
        durations = ["pdi_init_s", "first_output_s", "finalize_s", "wall_s"]
        assert all(0 <= fortran[key] < STARTUP for key in durations), fortran
        assert fortran["first_output_s"] <= fortran["wall_s"]
        assert [s["step"] for s in fortran["steps"]] == list(range(steps))
        for step in fortran["steps"]:
            assert 0 <= step["compute_s"] < STARTUP and 0 <= step["output_s"] < STARTUP
