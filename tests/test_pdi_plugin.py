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
from typing import Any, NamedTuple

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


class HeatRun(NamedTuple):
    """What a run of the C heat solver left: its exit status, output and configuration."""

    returncode: int
    output: str  # stdout then stderr
    config: HeatConfig


def run_c_heat_deisa(
    tmp_path: Path,
    edit: Callable[[dict[str, Any]], None],
    nranks: int = 1,
    *,
    stub: bool = True,
    fail: str | None = None,
    check: bool = True,
    **settings: Any,
) -> HeatRun:
    """The C heat solver with configs/heat_deisa.yml edited by ``edit``, in ``tmp_path``.

    ``settings`` are simulation.yml's (``process_grid`` must hold ``nranks`` ranks); ``stub``
    puts the stand-in deisa package first, ``fail`` is its STUB_FAIL.
    """
    simulation = write_config(tmp_path / "simulation.yml", **settings)
    env = stub_env(tmp_path, **({"STUB_FAIL": fail} if fail else {})) if stub else None
    proc = run_c_heat(
        nranks, simulation, deisa_config(tmp_path, edit), tmp_path, env=env, check=check
    )
    return HeatRun(proc.returncode, proc.stdout + proc.stderr, HeatConfig.from_yaml(simulation))


def bridge_log(tmp_path: Path, rank: int) -> dict[str, Any]:
    """What the stub Bridge of ``rank`` recorded; written by its close()."""
    log: dict[str, Any] = json.loads((tmp_path / f"bridge_{rank}.json").read_text())
    return log


def assert_reference_steps(config: HeatConfig, field_at: Callable[[int], np.ndarray]) -> None:
    """Every step of the global field equals the reference solution bitwise."""
    for step in range(config.steps):
        assert np.array_equal(field_at(step), reference_field(config, step)), f"step {step}"


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
    assert_reference_steps(config, lambda step: field[step])


def test_plugin_publishes_zero_copy_views_without_ghosts(built: Path, tmp_path: Path) -> None:
    def edit(deisa: dict[str, Any]) -> None:
        deisa.update(placement="locality", buffer_nb=2, timeout=30)

    config = run_c_heat_deisa(tmp_path, edit, 4, global_size=[20, 18]).config
    for rank, (start, shape) in enumerate(blocks(config)):
        log = bridge_log(tmp_path, rank)
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
    run = run_c_heat_deisa(
        tmp_path,
        lambda d: d.update(on_error="abort"),
        2,
        fail="publish",
        check=False,
        process_grid=[1, 2],
    )
    assert run.returncode != 0
    assert "Traceback" in run.output and "stub failure in publish" in run.output
    assert "on_error: abort" in run.output
    assert not list(tmp_path.glob("gtemp_2_*.npy"))  # stopped at step 1


def test_on_error_warn_logs_and_continues(built: Path, tmp_path: Path) -> None:
    run = run_c_heat_deisa(
        tmp_path, lambda d: d.update(on_error="warn"), 2, fail="publish", process_grid=[1, 2]
    )
    assert "Traceback" in run.output and "stub failure in publish" in run.output
    log = bridge_log(tmp_path, 0)  # closed normally
    assert [p["step"] for p in log["publish"]] == [0, 1, 2, 3]


def test_on_error_warn_survives_a_failed_bridge(built: Path, tmp_path: Path) -> None:
    run = run_c_heat_deisa(
        tmp_path, lambda d: d.update(on_error="warn"), fail="init", process_grid=[1, 1]
    )
    assert "stub failure in Bridge()" in run.output
    # the connection happens at the first publication: its failure names the scheduler file
    assert "creating the deisa Bridge (scheduler_file: `scheduler.json')" in run.output
    assert not list(tmp_path.glob("gtemp_*.npy"))


@pytest.mark.parametrize(
    ("keys", "options"),
    [
        ({}, {"placement": "round_robin"}),  # absent keys keep deisa.Bridge's defaults
        (
            {"connect_timeout": 12.5, "min_workers": 3, "on_full": "block"},
            {
                "placement": "round_robin",
                "connect_timeout": 12.5,
                "min_workers": 3,
                "on_full": "block",
            },
        ),
        (
            # $-expressions, evaluated at the first publication
            {
                "buffer_nb": "$steps",
                "on_full": "drop_oldest",
                "connect_timeout": "$steps",
                "min_workers": "$process_grid[1] + 1",
            },
            {
                "placement": "round_robin",
                "buffer_nb": 2,
                "on_full": "drop_oldest",
                "connect_timeout": 2.0,
                "min_workers": 2,
            },
        ),
    ],
    ids=["defaults", "values", "expressions"],
)
def test_plugin_passes_bridge_options(
    built: Path, tmp_path: Path, keys: dict[str, Any], options: dict[str, Any]
) -> None:
    run_c_heat_deisa(tmp_path, lambda d: d.update(keys), process_grid=[1, 1], steps=2)
    log = bridge_log(tmp_path, 0)
    assert log["options"] == options
    assert [p["step"] for p in log["publish"]] == [0, 1]


def test_unreachable_scheduler_names_the_scheduler_file(built: Path, tmp_path: Path) -> None:
    # the real deisa package: the Bridge waits connect_timeout for the file, then fails
    missing = tmp_path / "nosuch" / "scheduler.json"
    run = run_c_heat_deisa(
        tmp_path,
        lambda d: d.update(scheduler_file=str(missing), connect_timeout=1),
        stub=False,
        check=False,
        process_grid=[1, 1],
        steps=2,
    )
    assert run.returncode != 0
    assert f"creating the deisa Bridge (scheduler_file: `{missing}')" in run.output
    assert f"scheduler file '{missing}' does not exist (waited 1 s)" in run.output


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
    "bad-on-full": (
        lambda d: d.update(on_full="wait"),
        "`on_full' in deisa configuration: `wait' (expecting block or drop_oldest)",
    ),
    "drop-oldest-without-buffer-nb": (
        lambda d: d.update(on_full="drop_oldest"),
        "`on_full: drop_oldest' in deisa configuration needs `buffer_nb'",
    ),
    "zero-min-workers": (
        lambda d: d.update(min_workers=0),
        "`min_workers' in deisa configuration: `0' (expecting a positive integer)",
    ),
    "fractional-min-workers": (
        lambda d: d.update(min_workers=1.5),
        "`min_workers' in deisa configuration: `1.5' (expecting a positive integer)",
    ),
    "zero-connect-timeout": (
        lambda d: d.update(connect_timeout=0),
        "`connect_timeout' in deisa configuration: `0' (expecting a positive number of seconds)",
    ),
    "unevaluable-connect-timeout": (
        lambda d: d.update(connect_timeout="$nosuch"),
        "Cannot evaluate `connect_timeout' in deisa configuration",
    ),
    "zero-buffer-nb": (
        lambda d: d.update(buffer_nb=0),
        "`buffer_nb' in deisa configuration: `0' (expecting a positive integer)",
    ),
}


@pytest.mark.parametrize("case", sorted(BAD_CONFIGS))
def test_bad_plugin_configuration_names_the_key(built: Path, tmp_path: Path, case: str) -> None:
    edit, message = BAD_CONFIGS[case]
    run = run_c_heat_deisa(tmp_path, edit, check=False, process_grid=[1, 1], steps=2)
    assert run.returncode != 0
    assert message in run.output


def test_c_heat_through_deisa_reaches_dask_bitwise(
    built: Path, tmp_path: Path, dask_processes: DaskProcesses
) -> None:
    from deisa import Adapter

    simulation = write_config(tmp_path / "simulation.yml")
    config = HeatConfig.from_yaml(simulation)
    run_c_heat(4, simulation, CONFIGS / "heat_deisa.yml", tmp_path)  # scheduler.json is here
    with dask_processes.client() as client:
        gtemp = Adapter(client)["gtemp"]
        assert_reference_steps(config, lambda step: gtemp[step, :, :].compute())


def test_pca_in_situ_equals_post_hoc(
    built: Path, tmp_path: Path, dask_processes: DaskProcesses
) -> None:
    simulation = write_config(tmp_path / "simulation.yml")
    env = test_env()

    def analytics(kind: str) -> list[str]:
        script = str(REPO / "analytics" / f"{kind}_pca.py")
        scheduler = ["--scheduler-file", str(dask_processes.scheduler_file)]
        return [sys.executable, script, str(simulation), *scheduler, "--out", f"{kind}.json"]

    insitu = subprocess.Popen(
        analytics("insitu"),
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
        analytics("posthoc"),
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
