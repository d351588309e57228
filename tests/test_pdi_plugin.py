"""The C heat solver (simulation/heat.c) and the deisa PDI plugin (plugin/), under real mpirun.

Builds the CMake project into ``build/`` once per session; skips when PDI 1.12 is not installed.
The same binary runs with configs/heat_hdf5.yml (decl_hdf5) or configs/heat_deisa.yml (deisa).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
import pytest
import yaml
from conftest import (
    BUILD,
    REPO,
    DaskProcesses,
    exchanges_recorded,
    mpirun,
    test_env,
    write_config,
)

from deisa_simulation.heat import HeatConfig, reference_field

pytestmark = pytest.mark.pdi

HEAT = BUILD / "simulation" / "heat"
PLUGIN_DIR = BUILD / "plugin"
CONFIGS = REPO / "configs"

# A stand-in for the deisa package: records what the plugin hands to the Bridge, no Dask. The
# options and the block positions are checked by the real deisa.bridge.options and .decomposition,
# found through __path__, as the plugin relies on them.
STUB_DEISA = """
import json, os
import numpy as np

__path__.append(DEISA_DIR)
from deisa.bridge.arrays.decomposition import ArraySpec
from deisa.bridge.options import BridgeOptionError, BridgeOptions

class Bridge:
    def __init__(self, scheduler_file, arrays, *, comm, options):
        self.comm, self.rank = comm, comm.Get_rank()
        comm.Barrier()  # collective, as the real one
        arrays = {name: {"dtype": spec.dtype.name, "global_shape": list(spec.global_shape),
                         "start": list(spec.start), "shape": list(spec.shape)}
                  for name, spec in arrays.items()}
        self.log = {"scheduler_file": scheduler_file, "options": options.to_mapping(),
                    "publish": [], "arrays": arrays}
        if os.environ.get("STUB_FAIL") == "init":
            raise RuntimeError("stub failure in Bridge()")

    def publish(self, name, block, step):
        self.log["publish"].append({"name": name, "step": step, "strides": list(block.strides),
                                    "owndata": bool(block.flags.owndata),
                                    "writeable": bool(block.flags.writeable)})
        np.save(f"{name}_{step}_{self.rank}.npy", block)
        if os.environ.get("STUB_FAIL") == "publish" and step == 1:
            raise ValueError("stub failure in publish")

    def get(self, name, default=None):  # steering values (the `read' section): none set
        self.comm.Barrier()
        return default

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
    real = repr(str(REPO / "deisa"))
    (package / "__init__.py").write_text(STUB_DEISA.replace("DEISA_DIR", real, 1))
    env = {"PYTHONPATH": os.pathsep.join([str(package.parent), test_env()["PYTHONPATH"]])}
    env.update(extra)
    return env


def deisa_config(tmp_path: Path, edit: Callable[[dict[str, Any]], None]) -> Path:
    """configs/heat_deisa.yml with ``edit`` applied to its ``plugins.deisa`` section."""
    tree = yaml.safe_load((CONFIGS / "heat_deisa.yml").read_text())
    # one published array, gtemp, as deisa-run does (the YAML's gdtemp: tests/test_streams.py)
    tree["plugins"]["deisa"]["write"].pop("dtemp", None)
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
        assert log["options"] == options(placement="locality", buffer_nb=2, timeout=30.0)
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


def test_plugin_takes_the_scheduler_file_from_the_environment(built: Path, tmp_path: Path) -> None:
    """A YAML without `scheduler_file': the plugin hands $DEISA_SCHEDULER_FILE to the Bridge
    (without either, the CTest case missing_scheduler_file names both)."""
    simulation = write_config(tmp_path / "simulation.yml", process_grid=[1, 1], steps=2)
    pdi = deisa_config(tmp_path, lambda deisa: deisa.pop("scheduler_file"))
    env = stub_env(tmp_path, DEISA_SCHEDULER_FILE=str(tmp_path / "from-env.json"))
    run_c_heat(1, simulation, pdi, tmp_path, env=env)
    log = bridge_log(tmp_path, 0)
    assert log["scheduler_file"] == str(tmp_path / "from-env.json")
    assert [p["step"] for p in log["publish"]] == [0, 1]


def options(**given: Any) -> dict[str, Any]:
    """Every Bridge option, as the stub logs them: ``given`` over the defaults."""
    from deisa import BridgeOptions

    return BridgeOptions(**given).to_mapping()


@pytest.mark.parametrize(
    ("keys", "expected"),
    [
        ({}, {}),  # absent keys keep deisa.BridgeOptions's defaults
        (
            {"connect_timeout": 12.5, "min_workers": 3, "on_full": "block", "timeout": 5},
            {"connect_timeout": 12.5, "min_workers": 3, "on_full": "block", "timeout": 5.0},
        ),
        # YAML nulls are None: unbounded, wait forever
        ({"buffer_nb": None, "timeout": None}, {"buffer_nb": None, "timeout": None}),
        (
            # $-expressions, evaluated at the first publication
            {
                "buffer_nb": "$steps",
                "on_full": "drop_oldest",
                "connect_timeout": "$steps",
                "min_workers": "$process_grid[1] + 1",
            },
            {"buffer_nb": 2, "on_full": "drop_oldest", "connect_timeout": 2.0, "min_workers": 2},
        ),
    ],
    ids=["defaults", "values", "nulls", "expressions"],
)
def test_plugin_passes_bridge_options(
    built: Path, tmp_path: Path, keys: dict[str, Any], expected: dict[str, Any]
) -> None:
    run_c_heat_deisa(tmp_path, lambda d: d.update(keys), process_grid=[1, 1], steps=2)
    log = bridge_log(tmp_path, 0)
    assert log["options"] == options(**expected)
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
    # The connection runs in the background: the first call that needs it fails, naming the
    # file. Here that is PDI_finalize (two steps take less than connect_timeout), where the
    # failure is logged as an error and cannot change the exit status.
    assert f"Python failure while closing the deisa Bridge (scheduler_file: `{missing}')" in (
        run.output
    )
    assert f"scheduler file '{missing}' does not exist (waited 1 s)" in run.output


def test_plugin_configuration_errors_ctest(built: Path) -> None:
    """The plugin's CTest cases (plugin/pdi/tests/): each bad configuration is refused naming its
    YAML key, the key's position and what is wrong; a valid one reaches deisa.Bridge."""
    ctest = shutil.which("ctest")
    if ctest is None:
        pytest.skip("ctest (from CMake) is not on PATH")
    cmd = [ctest, "--test-dir", str(built), "--output-on-failure", "--parallel", "2"]
    proc = subprocess.run(cmd, env=test_env(), capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-6000:] + proc.stderr[-2000:]
    results = re.findall(r"Test +#\d+: plugin_config_\w+ \.+\W*(\w+)", proc.stdout)
    assert len(results) >= 20 and set(results) == {"Passed"}, proc.stdout


def mpi_thread_check(directory: Path) -> Path:
    """tests/mpi_thread_check.c built as a preloadable library (skips without mpicc)."""
    mpicc = shutil.which("mpicc")
    if mpicc is None:
        pytest.skip("mpicc is needed to build the MPI thread check")
    library = directory / "libmpi_thread_check.so"
    source = Path(__file__).with_name("mpi_thread_check.c")
    cmd = [mpicc, "-shared", "-fPIC", "-O1", "-o", str(library), str(source), "-lpthread"]
    subprocess.run(cmd, check=True, capture_output=True, timeout=120)
    return library


def test_c_heat_through_deisa_reaches_dask_bitwise_async_and_sync(
    built: Path, tmp_path: Path, shared_dask: DaskProcesses
) -> None:
    """The C solver (MPI_Init: MPI_THREAD_SINGLE) through the plugin, `mode: async' then
    `mode: sync' (YAML keys): every step reaches Dask bitwise equal to the decl_hdf5 run, and
    no MPI call is made off the main thread (a PMPI interposer counts them)."""
    import h5py

    from deisa import Adapter

    simulation = write_config(tmp_path / "simulation.yml", steps=6)
    config = HeatConfig.from_yaml(simulation)
    run_c_heat(4, simulation, CONFIGS / "heat_hdf5.yml", tmp_path)
    with h5py.File(tmp_path / "heat.h5", "r") as f:
        written = f["gtemp"][...]
    assert len(written) == config.steps
    check = {"LD_PRELOAD": str(mpi_thread_check(tmp_path))}
    for mode in ("async", "sync"):

        def edit(deisa: dict[str, Any], mode: str = mode) -> None:
            deisa.update(mode=mode, max_in_flight=1)  # scheduler.json is in tmp_path

        # the analytics starts after the run: every step waits on the workers (buffer_nb: none)
        run = run_c_heat(4, simulation, deisa_config(tmp_path, edit), tmp_path, env=check)
        lines = re.findall(r"mpi-thread-check: rank \d+ level (\d+): \d+ calls on the main "
                           r"thread, (\d+) off it, (\d+) collectives", run.stderr)  # fmt: skip
        assert len(lines) == 4, run.stderr[-3000:]
        for level, off_main, collectives in lines:
            assert (int(level), int(off_main)) == (0, 0), (mode, run.stderr[-3000:])
            # the solver makes none: these are the Bridge's (mpi4py's calls were seen)
            assert int(collectives) >= config.steps, mode
        assert "deisa.Bridge created" in run.stdout + run.stderr
        with shared_dask.client() as client:  # deisa_config publishes gtemp only
            received = {step: field.compute() for step, field in Adapter(client)["gtemp"].items()}
        assert sorted(received) == list(range(config.steps)), mode
        for step, field in received.items():
            assert np.array_equal(field, written[step]), (mode, step)


def test_dims_of_a_dataset_name_the_axes_of_the_adapters_xarray_arrays(
    built: Path, tmp_path: Path, shared_dask: DaskProcesses
) -> None:
    """`dims: [x, y]' in a `datasets' entry reaches deisa.ArraySpec(dims=...): the Adapter's
    labelled arrays (as_xarray=True) of the C solver's steps have those axes and the step as
    their `step' coordinate; uneven blocks (3 ranks over 10 rows)."""
    from deisa import Adapter

    simulation = write_config(
        tmp_path / "simulation.yml", global_size=[10, 12], process_grid=[3, 1], steps=3
    )
    config = HeatConfig.from_yaml(simulation)

    def edit(deisa: dict[str, Any]) -> None:
        deisa["datasets"]["gtemp"]["dims"] = ["x", "y"]

    # the analytics starts after the run: every step waits on the workers (buffer_nb: none)
    run_c_heat(3, simulation, deisa_config(tmp_path, edit), tmp_path)
    with shared_dask.client() as client:
        gtemp = Adapter(client)["gtemp"]
        received = list(gtemp.items(as_xarray=True))
        assert gtemp.dims == ("x", "y")
        assert [step for step, _ in received] == list(range(config.steps))
        for step, field in received:
            assert field.dims == ("x", "y") and field.shape == (10, 12) and field.name == "gtemp"
            assert int(field.coords["step"]) == step
            assert np.array_equal(field.values, reference_field(config, step)), step


def test_pca_in_situ_equals_post_hoc(
    built: Path, tmp_path: Path, shared_dask: DaskProcesses
) -> None:
    simulation = write_config(tmp_path / "simulation.yml")
    env = test_env()

    def analytics(kind: str) -> list[str]:  # examples/pca.py, live or on heat_hdf5.yml's file
        script = str(REPO / "examples" / "pca.py")
        source = (
            ["--scheduler-file", str(shared_dask.scheduler_file)]
            if kind == "insitu"
            else ["--replay", "heat.h5"]
        )
        return [sys.executable, script, *source, "--out", f"{kind}.json"]

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


# -- decl_hdf5 configurations go in situ by renaming two keys ------------------------------------

# plugins sections of configs/heat_hdf5.yml as users write them for parallel HDF5 files
DECL_HDF5_PLUGINS = {
    # decl_hdf5's keys for files (ignored in situ), on_event, and several writes of one data,
    # one of them on even iterations only into a half-length time axis
    "file-keys-on-event-two-writes": """\
plugins:
  mpi: ~
  decl_hdf5:
    file: heat.h5
    collision_policy: write_into
    on_event: iter
    communicator: $MPI_COMM_WORLD
    datasets:
      gtemp: {type: array, subtype: double, size: [$steps, '$global_size[0]', '$global_size[1]']}
      geven: {type: array, subtype: double, size: [$steps/2, '$global_size[0]', '$global_size[1]']}
    write:
      temp:
      - dataset: gtemp
        mpio: COLLECTIVE
        collision_policy: write_into_and_warn
        attributes: {steps: $steps, period: 2}
        memory_selection: {size: ['$local_size[0]', '$local_size[1]'], start: [1, 1]}
        dataset_selection:
          size: [1, '$local_size[0]', '$local_size[1]']
          start: [$step, '$local_start[0]', '$local_start[1]']
      - dataset: geven
        when: '$step % 2 = 0'
        mpio: INDEPENDENT
        memory_selection: {size: ['$local_size[0]', '$local_size[1]'], start: [1, 1]}
        dataset_selection:
          size: [1, '$local_size[0]', '$local_size[1]']
          start: ['$step / 2', '$local_start[0]', '$local_start[1]']
""",
    # two datasets of one step at each event: in situ, one step scope, one exchange a step
    "on-event-two-datasets-a-step": """\
plugins:
  mpi: ~
  decl_hdf5:
    file: heat.h5
    on_event: iter
    communicator: $MPI_COMM_WORLD
    datasets:
      gtemp: {type: array, subtype: double, size: [$steps, '$global_size[0]', '$global_size[1]']}
      gcopy: {type: array, subtype: double, size: [$steps, '$global_size[0]', '$global_size[1]']}
    write:
      temp:
      - dataset: gtemp
        memory_selection: {size: ['$local_size[0]', '$local_size[1]'], start: [1, 1]}
        dataset_selection:
          size: [1, '$local_size[0]', '$local_size[1]']
          start: [$step, '$local_start[0]', '$local_start[1]']
      - dataset: gcopy
        memory_selection: {size: ['$local_size[0]', '$local_size[1]'], start: [1, 1]}
        dataset_selection:
          size: [1, '$local_size[0]', '$local_size[1]']
          start: [$step, '$local_start[0]', '$local_start[1]']
""",
    # every time index written twice (steps 2k and 2k+1 into slice k): the file keeps the last
    # write; in situ, a step not taken yet by the analytics is replaced by the new data
    "repeated-index": """\
plugins:
  mpi: ~
  decl_hdf5:
    file: heat.h5
    communicator: $MPI_COMM_WORLD
    datasets:
      gtemp: {type: array, subtype: double, size: [$steps/2, '$global_size[0]', '$global_size[1]']}
    write:
      temp:
        dataset: gtemp
        mpio: COLLECTIVE
        memory_selection: {size: ['$local_size[0]', '$local_size[1]'], start: [1, 1]}
        dataset_selection:
          size: [1, '$local_size[0]', '$local_size[1]']
          start: ['$step / 2', '$local_start[0]', '$local_start[1]']
""",
}


def with_plugins(plugins: str) -> str:
    """configs/heat_hdf5.yml with its ``plugins`` section replaced."""
    text = (CONFIGS / "heat_hdf5.yml").read_text()
    return text[: text.index("plugins:")] + plugins


def to_deisa(text: str) -> str:
    """The swap a PDI user makes: the plugin's name and its ``file`` key, nothing else."""
    return text.replace("\n  decl_hdf5:\n", "\n  deisa:\n", 1).replace(
        "\n    file: heat.h5\n", "\n    scheduler_file: scheduler.json\n", 1
    )


def test_to_deisa_changes_exactly_two_lines() -> None:
    import difflib

    for plugins in DECL_HDF5_PLUGINS.values():
        hdf5 = with_plugins(plugins)
        diff = [
            line
            for line in difflib.ndiff(hdf5.splitlines(), to_deisa(hdf5).splitlines())
            if line[:2] in ("- ", "+ ")
        ]
        assert sorted(diff) == sorted(
            [
                "-   decl_hdf5:",
                "-     file: heat.h5",
                "+   deisa:",
                "+     scheduler_file: scheduler.json",
            ]
        )


@pytest.mark.parametrize("case", sorted(DECL_HDF5_PLUGINS))
def test_decl_hdf5_configuration_goes_in_situ_by_renaming_two_keys(
    built: Path,
    tmp_path: Path,
    shared_dask: DaskProcesses,
    case: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import h5py

    from deisa import Adapter

    simulation = write_config(tmp_path / "simulation.yml")
    config = HeatConfig.from_yaml(simulation)
    hdf5 = tmp_path / "hdf5.yml"
    hdf5.write_text(with_plugins(DECL_HDF5_PLUGINS[case]))
    run_c_heat(4, simulation, hdf5, tmp_path)
    with h5py.File(tmp_path / "heat.h5", "r") as f:
        written = {name: f[name][...] for name in f}
    if case == "repeated-index":  # the file keeps the second write of each slice
        assert len(written["gtemp"]) == config.steps // 2
        for k, values in enumerate(written["gtemp"]):
            assert np.array_equal(values, reference_field(config, 2 * k + 1))

    insitu = tmp_path / "deisa.yml"
    insitu.write_text(to_deisa(hdf5.read_text()))
    recorded = exchanges_recorded(tmp_path, monkeypatch)
    run = run_c_heat(4, simulation, insitu, tmp_path)  # the analytics starts after the run
    ignored = {
        "file-keys-on-event-two-writes": "Ignoring decl_hdf5 keys that only matter for HDF5 "
        "files: `collision_policy', `mpio' (write entry of `temp'), `collision_policy' (write "
        "entry of `temp'), `attributes' (write entry of `temp'), `mpio' (write entry of `temp')",
        "repeated-index": "Ignoring decl_hdf5 keys that only matter for HDF5 files: `mpio' "
        "(write entry of `temp')\n",
        "on-event-two-datasets-a-step": "",
    }[case]
    assert ignored in run.stdout + run.stderr
    if case == "on-event-two-datasets-a-step":  # the event's two arrays: one exchange a step
        for rank in range(4):
            lines = (recorded / f"{rank}.txt").read_text().splitlines()
            posted = [json.loads(line) for line in lines]
            assert posted == [[["gtemp", "gcopy"], s] for s in range(config.steps)], posted
    with shared_dask.client() as client:
        adapter = Adapter(client)
        for name, values in written.items():
            received = {step: field.compute() for step, field in adapter[name].items()}
            assert sorted(received) == list(range(len(values))), name
            for step, field in received.items():
                assert np.array_equal(field, values[step]), (name, step)


def test_dataset_expression_names_a_regular_expression_of_datasets(
    built: Path, tmp_path: Path
) -> None:
    def edit(deisa: dict[str, Any]) -> None:  # decl_hdf5's generic dataset names
        deisa["datasets"] = {"gtemp_[0-9]+": deisa["datasets"]["gtemp"]}
        deisa["write"]["temp"]["dataset"] = "gtemp_${steps}"

    run_c_heat_deisa(tmp_path, edit, process_grid=[1, 1], steps=2)
    log = bridge_log(tmp_path, 0)
    assert list(log["arrays"]) == ["gtemp_2"]
    assert [(p["name"], p["step"]) for p in log["publish"]] == [("gtemp_2", 0), ("gtemp_2", 1)]


def test_write_entry_communicator_must_hold_exactly_the_ranks_of_the_array(
    built: Path, tmp_path: Path
) -> None:
    # every rank gives its own MPI_COMM_SELF for one global array (an entry's communicator is
    # for an array of some ranks: tests/test_partial_arrays.py); refused before any connection
    def edit(deisa: dict[str, Any]) -> None:
        deisa["write"]["temp"]["communicator"] = "$MPI_COMM_SELF"

    run = run_c_heat_deisa(tmp_path, edit, 2, stub=False, check=False, process_grid=[1, 2], steps=2)
    assert run.returncode != 0
    assert (
        "array 'gtemp' is held by ranks [0, 1] of comm, but the communicator rank 0 gives for "
        "it (array_comms) holds ranks [0]" in run.output
    )


TLS_CHECKER = """\
import sys
import numpy as np
import yaml
from deisa import Adapter
from deisa_simulation.heat import HeatConfig, reference_field

config = HeatConfig(**yaml.safe_load(open(sys.argv[1])))
with Adapter.from_env() as adapter:
    address = adapter.client.scheduler.address
    assert address.startswith("tls://"), address
    steps = []
    for step, field in adapter["gtemp"].items():
        assert np.array_equal(field.compute(), reference_field(config, step)), step
        steps.append(step)
assert steps == list(range(config.steps)), steps
print(f"tls checker: {len(steps)} steps bitwise over {address.split(':')[0]}", flush=True)
"""


@pytest.mark.timeout(600)
def test_c_heat_under_deisa_run_tls_reaches_dask_bitwise(built: Path, tmp_path: Path) -> None:
    """deisa-run's default, mutual TLS: the C solver's plugin, through the environment alone
    (no TLS key in its YAML), reaches the job's TLS-only scheduler and workers, and every step
    arrives bitwise equal to the reference solution."""
    from conftest import deisa_run

    checker = tmp_path / "tls_checker.py"
    checker.write_text(TLS_CHECKER)
    out = tmp_path / "out"
    proc = deisa_run(
        "--solver", "c", "--ranks", "4", "--workers", "2", "--steps", "4",
        "--output-period", "5", "--timeout", "240", "--output", str(out),
        "--analytics", f"{checker} {out / 'simulation.yml'}", timeout=500,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-4000:] + proc.stdout[-2000:]
    assert "tls checker: 4 steps bitwise over tls" in proc.stdout, proc.stdout[-2000:]
    assert "tls" not in (out / "pdi.yml").read_text().lower()  # credentials: environment only
    assert "tls://" in (out / "logs" / "scheduler.log").read_text()
    assert not (out / "tls").exists()


def test_init_on_creates_the_bridge_before_the_first_step(built: Path, tmp_path: Path) -> None:
    """configs/heat_deisa.yml's ``init_on: init``: every rank creates its Bridge (which
    connects in the background) at `init', before `$step' exists; without the key, only at
    the first publication. A run that publishes nothing shows the difference."""

    def nothing(deisa: dict[str, Any]) -> None:
        deisa["write"]["temp"]["when"] = "$step < 0"

    def nothing_without_init_on(deisa: dict[str, Any]) -> None:
        nothing(deisa)
        del deisa["init_on"]

    (tmp_path / "init_on").mkdir()
    (tmp_path / "without").mkdir()
    config = run_c_heat_deisa(tmp_path / "init_on", nothing, 4).config
    for rank, (start, shape) in enumerate(blocks(config)):
        log = bridge_log(tmp_path / "init_on", rank)
        assert log["arrays"]["gtemp"]["start"] == list(start)
        assert log["arrays"]["gtemp"]["shape"] == list(shape)
        assert log["publish"] == []

    run_c_heat_deisa(tmp_path / "without", nothing_without_init_on, 4)
    assert not list((tmp_path / "without").glob("bridge_*.json"))  # never created
