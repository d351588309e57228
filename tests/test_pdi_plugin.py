"""The C heat solver (simulation/heat.c) and the deisa PDI plugin (plugin/), under real mpirun.

Builds the CMake project into ``build/`` once per session; skips when PDI 1.12 is not installed.
The same binary runs with configs/heat_hdf5.yml (decl_hdf5) or configs/heat_deisa.yml (deisa).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml
from conftest import BUILD, REPO, DaskProcesses, mpirun, test_env, write_config
from deisa_simulation.heat import HeatConfig, reference_field

pytestmark = pytest.mark.pdi

HEAT = BUILD / "simulation" / "heat"
PLUGIN_DIR = BUILD / "plugin"
CONFIGS = REPO / "configs"

# A stand-in for the deisa package: records what the plugin hands to the Bridge, no Dask.
STUB_DEISA = """
import json, os
import numpy as np

class ArraySpec:
    def __init__(self, dtype, global_shape, start, shape):
        self.fields = {"dtype": dtype, "global_shape": list(global_shape),
                       "start": list(start), "shape": list(shape)}

class Bridge:
    def __init__(self, scheduler_file, arrays, *, comm, **options):
        self.comm, self.rank = comm, comm.Get_rank()
        comm.Barrier()  # collective, as the real one
        self.log = {"scheduler_file": scheduler_file, "options": options, "publish": [],
                    "arrays": {name: spec.fields for name, spec in arrays.items()}}
        if os.environ.get("STUB_FAIL") == "init":
            raise RuntimeError("stub failure in Bridge()")

    def publish(self, name, block, step):
        self.log["publish"].append({"name": name, "step": step, "strides": list(block.strides),
                                    "owndata": bool(block.flags.owndata),
                                    "writeable": bool(block.flags.writeable)})
        np.save(f"{name}_{step}_{self.rank}.npy", block)
        if os.environ.get("STUB_FAIL") == "publish" and step == 1:
            raise ValueError("stub failure in publish")

    def close(self):
        self.comm.Barrier()
        with open(f"bridge_{self.rank}.json", "w") as f:
            json.dump(self.log, f)
"""


def run_c_heat(
    nranks: int,
    simulation: Path,
    pdi_config: Path,
    cwd: Path,
    *,
    env: dict[str, str] | None = None,
    check: bool = True,
    timeout: float = 180,
) -> subprocess.CompletedProcess[str]:
    """``mpirun -np N build/simulation/heat simulation.yml pdi.yml`` in ``cwd``."""
    run_env = test_env()
    run_env["PDI_PLUGIN_PATH"] = str(PLUGIN_DIR)
    run_env.update(env or {})
    cmd = mpirun(nranks, str(HEAT), str(simulation), str(pdi_config))
    proc = subprocess.run(
        cmd, cwd=cwd, env=run_env, capture_output=True, text=True, timeout=timeout
    )
    if check and proc.returncode != 0:
        raise AssertionError(
            f"{' '.join(cmd)} failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}"
        )
    return proc


def stub_env(tmp_path: Path, **extra: str) -> dict[str, str]:
    """Puts the stand-in deisa package first on PYTHONPATH."""
    package = tmp_path / "stub" / "deisa"
    package.mkdir(parents=True, exist_ok=True)
    (package / "__init__.py").write_text(STUB_DEISA)
    env = {"PYTHONPATH": os.pathsep.join([str(package.parent), test_env()["PYTHONPATH"]])}
    env.update(extra)
    return env


def deisa_config(tmp_path: Path, edit: Callable[[dict[str, Any]], None]) -> Path:
    """configs/heat_deisa.yml with ``edit`` applied to its ``plugins.deisa`` section."""
    tree = yaml.safe_load((CONFIGS / "heat_deisa.yml").read_text())
    edit(tree["plugins"]["deisa"])
    path = tmp_path / "pdi.yml"
    path.write_text(yaml.safe_dump(tree))
    return path


def blocks(config: HeatConfig) -> list[tuple[tuple[int, int], tuple[int, int]]]:
    """(start, shape) of every rank's block, rank = cx * py + cy, as in simulation/README.md."""

    def split(n: int, p: int, c: int) -> tuple[int, int]:
        return c * (n // p) + min(c, n % p), n // p + (1 if c < n % p else 0)

    (nx, ny), (px, py) = config.global_size, config.process_grid
    result = []
    for cx in range(px):
        for cy in range(py):
            (x0, h), (y0, w) = split(nx, px, cx), split(ny, py, cy)
            result.append(((x0, y0), (h, w)))
    return result


@pytest.mark.parametrize(
    ("nranks", "settings"),
    [
        (4, {"global_size": [32, 32], "process_grid": [2, 2]}),
        (3, {"global_size": [30, 27], "process_grid": [3, 1]}),  # uneven split
    ],
    ids=["even-2x2", "uneven-3x1"],
)
def test_c_heat_hdf5_matches_reference_bitwise(
    built: Path, tmp_path: Path, nranks: int, settings: dict[str, Any]
) -> None:
    import h5py

    simulation = write_config(tmp_path / "simulation.yml", **settings)
    run_c_heat(nranks, simulation, CONFIGS / "heat_hdf5.yml", tmp_path)
    config = HeatConfig.from_yaml(simulation)
    with h5py.File(tmp_path / "heat.h5", "r") as f:
        field = f["gtemp"][...]
    assert field.shape == (config.steps, *config.global_size)
    for step in range(config.steps):
        assert np.array_equal(field[step], reference_field(config, step)), f"step {step}"


def test_plugin_publishes_zero_copy_views_without_ghosts(built: Path, tmp_path: Path) -> None:
    simulation = write_config(tmp_path / "simulation.yml", global_size=[20, 18])
    config = HeatConfig.from_yaml(simulation)

    def edit(deisa: dict[str, Any]) -> None:
        deisa.update(placement="locality", buffer_nb=2, timeout=30)

    run_c_heat(4, simulation, deisa_config(tmp_path, edit), tmp_path, env=stub_env(tmp_path))
    for rank, (start, shape) in enumerate(blocks(config)):
        log = json.loads((tmp_path / f"bridge_{rank}.json").read_text())
        assert log["scheduler_file"] == "scheduler.json"
        assert log["options"] == {"placement": "locality", "buffer_nb": 2, "timeout": 30.0}
        assert log["arrays"] == {
            "gtemp": {
                "dtype": "float64",
                "global_shape": [20, 18],
                "start": list(start),
                "shape": list(shape),
            }
        }
        assert [p["step"] for p in log["publish"]] == list(range(config.steps))
        for publication in log["publish"]:
            # a view into the ghosted (h+2, w+2) buffer, read-only, no copy
            assert publication["strides"] == [(shape[1] + 2) * 8, 8]
            assert not publication["owndata"] and not publication["writeable"]
        for step in range(config.steps):
            block = np.load(tmp_path / f"gtemp_{step}_{rank}.npy")
            expected = reference_field(config, step)[
                start[0] : start[0] + shape[0], start[1] : start[1] + shape[1]
            ]
            assert np.array_equal(block, expected), (rank, step)


def test_on_error_abort_stops_the_simulation(built: Path, tmp_path: Path) -> None:
    simulation = write_config(tmp_path / "simulation.yml", process_grid=[1, 2])
    pdi = deisa_config(tmp_path, lambda d: d.update(on_error="abort"))
    proc = run_c_heat(
        2, simulation, pdi, tmp_path, env=stub_env(tmp_path, STUB_FAIL="publish"), check=False
    )
    output = proc.stdout + proc.stderr
    assert proc.returncode != 0
    assert "Traceback" in output and "stub failure in publish" in output
    assert "on_error: abort" in output
    assert not list(tmp_path.glob("gtemp_2_*.npy"))  # stopped at step 1


def test_on_error_warn_logs_and_continues(built: Path, tmp_path: Path) -> None:
    simulation = write_config(tmp_path / "simulation.yml", process_grid=[1, 2])
    pdi = deisa_config(tmp_path, lambda d: d.update(on_error="warn"))
    proc = run_c_heat(2, simulation, pdi, tmp_path, env=stub_env(tmp_path, STUB_FAIL="publish"))
    output = proc.stdout + proc.stderr
    assert "Traceback" in output and "stub failure in publish" in output
    log = json.loads((tmp_path / "bridge_0.json").read_text())  # closed normally
    assert [p["step"] for p in log["publish"]] == [0, 1, 2, 3]


def test_on_error_warn_survives_a_failed_bridge(built: Path, tmp_path: Path) -> None:
    simulation = write_config(tmp_path / "simulation.yml", process_grid=[1, 1])
    pdi = deisa_config(tmp_path, lambda d: d.update(on_error="warn"))
    proc = run_c_heat(1, simulation, pdi, tmp_path, env=stub_env(tmp_path, STUB_FAIL="init"))
    assert "stub failure in Bridge()" in proc.stdout + proc.stderr
    assert not list(tmp_path.glob("gtemp_*.npy"))


def _set_write(key: str, value: Any) -> Callable[[dict[str, Any]], None]:
    return lambda deisa: deisa["write"]["temp"].__setitem__(key, value)


BAD_CONFIGS: dict[str, tuple[Callable[[dict[str, Any]], None], str]] = {
    "unknown-key": (
        lambda d: d.update(bogus=1),
        "Unknown key in deisa configuration: `bogus'",
    ),
    "missing-scheduler-file": (
        lambda d: d.pop("scheduler_file"),
        "Missing key in deisa configuration: `scheduler_file'",
    ),
    "bad-placement": (
        lambda d: d.update(placement="nearest"),
        "`placement' in deisa configuration: `nearest' (expecting round_robin or locality)",
    ),
    "bad-on-error": (
        lambda d: d.update(on_error="ignore"),
        "`on_error' in deisa configuration: `ignore' (expecting abort or warn)",
    ),
    "non-integer-when": (_set_write("when", "$step <"), "Cannot evaluate `when' of `temp'"),
    "unevaluable-when": (_set_write("when", "$nosuch > 0"), "Cannot evaluate `when' of `temp'"),
    "unknown-write-key": (
        _set_write("file", "x.h5"),
        "Unknown key in deisa `write' entry of `temp': `file'",
    ),
    "unknown-dataset": (
        _set_write("dataset", "nosuch"),
        "Dataset `nosuch' (written from `temp') is not described in deisa `datasets'",
    ),
    "unknown-selection-key": (
        _set_write("memory_selection", {"stride": [1, 1]}),
        "Unknown key in deisa `memory_selection': `stride'",
    ),
    "missing-write": (lambda d: d.pop("write"), "needs a `write' mapping"),
}


@pytest.mark.parametrize("case", sorted(BAD_CONFIGS))
def test_bad_plugin_configuration_names_the_key(built: Path, tmp_path: Path, case: str) -> None:
    edit, message = BAD_CONFIGS[case]
    simulation = write_config(tmp_path / "simulation.yml", process_grid=[1, 1], steps=2)
    proc = run_c_heat(
        1, simulation, deisa_config(tmp_path, edit), tmp_path, env=stub_env(tmp_path), check=False
    )
    assert proc.returncode != 0
    assert message in proc.stdout + proc.stderr


def test_c_heat_through_deisa_reaches_dask_bitwise(
    built: Path, tmp_path: Path, dask_processes: DaskProcesses
) -> None:
    from deisa import Adapter

    simulation = write_config(tmp_path / "simulation.yml")
    config = HeatConfig.from_yaml(simulation)
    run_c_heat(4, simulation, CONFIGS / "heat_deisa.yml", tmp_path)  # scheduler.json is here
    with dask_processes.client() as client:
        gtemp = Adapter(client)["gtemp"]
        for step in range(config.steps):
            field = gtemp[step, :, :].compute()
            assert np.array_equal(field, reference_field(config, step)), f"step {step}"


def test_pca_in_situ_equals_post_hoc(
    built: Path, tmp_path: Path, dask_processes: DaskProcesses
) -> None:
    simulation = write_config(tmp_path / "simulation.yml")
    env = test_env()
    common = [str(simulation), "--scheduler-file", str(dask_processes.scheduler_file)]
    insitu = subprocess.Popen(
        [
            sys.executable,
            str(REPO / "analytics" / "insitu_pca.py"),
            *common,
            "--out",
            "insitu.json",
        ],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        run_c_heat(4, simulation, CONFIGS / "heat_deisa.yml", tmp_path)
        output, _ = insitu.communicate(timeout=180)
    finally:
        if insitu.poll() is None:
            insitu.kill()
    assert insitu.returncode == 0, output
    run_c_heat(4, simulation, CONFIGS / "heat_hdf5.yml", tmp_path)
    posthoc = subprocess.run(
        [
            sys.executable,
            str(REPO / "analytics" / "posthoc_pca.py"),
            *common,
            "--out",
            "posthoc.json",
        ],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert posthoc.returncode == 0, posthoc.stdout + posthoc.stderr
    a = json.loads((tmp_path / "insitu.json").read_text())["explained_variance"]
    b = json.loads((tmp_path / "posthoc.json").read_text())["explained_variance"]
    assert len(a) == len(b) == HeatConfig.from_yaml(simulation).steps
    np.testing.assert_allclose(a, b, rtol=1e-10, atol=1e-12)
