"""The deisa PDI plugin read in its older grammars, with real PDI, MPI and Dask (issue 34).

DEISA's existing users run unchanged: the DEISA paper's YAML (its Listings 4 and 6, with a code
of its Listing 3's shape: tests/grammars/paper_heat.c) and the YAML of the DEISA plugin that PDI
1.8 and 1.9 shipped (the pdidev/deisa example: tests/grammars/released_heat.c and its Fortran
twin, ghosts, a 2x2 process grid, a fixed-length time axis, `init_on', `map_in'). Each run is
checked bitwise against what decl_hdf5 writes from the same code, then again with the scheduler
file that the YAML names, started by ``deisa-run -- ./sim``. The configuration errors of these
grammars are the CTest cases of plugin/pdi/tests/ (run by tests/test_pdi_plugin.py).
"""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml
from conftest import BUILD, REPO, DaskProcesses, deisa_run, mpirun, test_env
from test_pdi_plugin import bridge_log, stub_env

pytestmark = pytest.mark.pdi

SOURCES = REPO / "tests" / "grammars"
PROGRAMS = BUILD / "tests" / "grammars"

# The paper's Listing 6, as printed: the scheduler file is the one of the paper's own runs
LISTING_6 = """\
plugins:
  deisa:
    scheduler_file: "/home/user/xp/sched.json"
    transfer: { gtemp: { when: '$step>0' } }
"""

# The paper's Listing 5 as decl_hdf5 runs it: the data `temp' written into the file's `gtemp' where
# `+map_in' maps it (decl_hdf5 writes exposed data, not the virtual array; the file's time axis
# needs a length)
LISTING_5 = """\
plugins:
  mpi: ~
  decl_hdf5:
    - file: data.h5
      communicator: $MPI_COMM_WORLD
      datasets:
        gtemp:
          type: array
          subtype: double
          size: [$cfg.nb_steps, '$cfg.loc[0] * $cfg.proc[0]', '$cfg.loc[1] * $cfg.proc[1]']
      write:
        temp:
          dataset: gtemp
          when: '$step>0'
          dataset_selection:
            size: [1, '$cfg.loc[0]', '$cfg.loc[1]']
            start:
              - $step
              - '$cfg.loc[0] * ( $rank % $cfg.proc[0] )'
              - '$cfg.loc[1] * ( $rank / $cfg.proc[0] )'
"""

PAPER_SIMULATION: dict[str, Any] = {"loc": [4, 3], "proc": [2, 2], "nb_steps": 5}
# the released example's config.yml, and two steps past its fixed-length time axis
RELEASED_CONFIG: dict[str, Any] = {
    "global_size": {"height": 8, "width": 12},
    "parallelism": {"height": 2, "width": 2},
    "MaxtimeSteps": 4,
    "extra_steps": 2,
}


def program(name: str) -> Path:
    """A program of tests/grammars, built by CMake (released_heat_f90: a skip when it was not)."""
    path = PROGRAMS / name
    if not path.exists():
        if name.endswith("_f90"):
            pytest.skip(
                f"{path} was not built: it needs a Fortran compiler, MPI's Fortran bindings and "
                "PDI's Fortran API (PDI built with -DBUILD_FORTRAN=ON)"
            )
        raise AssertionError(f"{path} was not built")
    return path


def run(binary: Path, args: list[Path], cwd: Path, env: dict[str, str] | None = None) -> str:
    """``mpirun -np 4 binary args`` in ``cwd``, the deisa plugin on the path; its output."""
    run_env = test_env()
    run_env["PDI_PLUGIN_PATH"] = str(BUILD / "plugin")
    run_env.update(env or {})
    cwd.mkdir(parents=True, exist_ok=True)
    cmd = mpirun(4, str(binary), *map(str, args))
    proc = subprocess.run(cmd, cwd=cwd, env=run_env, capture_output=True, text=True, timeout=300)
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0, f"{' '.join(cmd)} failed ({proc.returncode}):\n{output[-5000:]}"
    return output


def paper_yaml(path: Path, plugins: str) -> Path:
    """The paper's Listing 4 (tests/grammars/paper_data.yml) followed by ``plugins``."""
    path.write_text((SOURCES / "paper_data.yml").read_text() + plugins)
    return path


def write_yaml(path: Path, tree: dict[str, Any]) -> Path:
    path.write_text(yaml.safe_dump(tree))
    return path


def paper_reference(tmp_path: Path) -> tuple[Path, np.ndarray]:
    """The simulation settings of paper_heat, and what decl_hdf5 writes from it (Listing 5)."""
    import h5py

    simulation = write_yaml(tmp_path / "simulation.yml", PAPER_SIMULATION)
    hdf5 = paper_yaml(tmp_path / "paper_hdf5.yml", LISTING_5)
    run(program("paper_heat"), [hdf5, simulation], tmp_path / "hdf5")
    with h5py.File(tmp_path / "hdf5" / "data.h5", "r") as f:
        written: np.ndarray = f["gtemp"][...]
    return simulation, written


def released_reference(tmp_path: Path, binary: str) -> tuple[Path, np.ndarray]:
    """The released example's config.yml, and what decl_hdf5 writes from ``binary``."""
    import h5py

    config = write_yaml(tmp_path / "config.yml", RELEASED_CONFIG)
    hdf5 = SOURCES / "released_hdf5.yml"
    run(program(binary), [config, hdf5], tmp_path / f"hdf5-{binary}")
    with h5py.File(tmp_path / f"hdf5-{binary}" / "global_t.h5", "r") as f:
        written: np.ndarray = f["global_t"][...]
    return config, written


def received(dask: DaskProcesses, name: str) -> dict[int, np.ndarray]:
    """Every step of ``name`` the analytics receives, to the end of the stream."""
    from deisa import Adapter

    with dask.client() as client:
        return {step: field.compute() for step, field in Adapter(client)[name].items()}


def test_paper_listings_reach_dask_bitwise(
    built: Path, tmp_path: Path, shared_dask: DaskProcesses
) -> None:
    """Listing 3's code with Listing 4's data and Listing 6's plugin section: the virtual
    global array `gtemp' with an `inf' time axis, `temp' mapped into it by `+map_in', the steps
    `transfer' selects (`$step>0') reach Dask bitwise as decl_hdf5 writes them."""
    simulation, written = paper_reference(tmp_path)
    steps = PAPER_SIMULATION["nb_steps"]
    assert written.shape == (steps, 8, 6)
    assert not np.array_equal(written[1], written[2])  # every step its own values
    listing_6 = LISTING_6.replace("/home/user/xp/sched.json", str(shared_dask.scheduler_file))
    output = run(program("paper_heat"), [paper_yaml(tmp_path / "paper_deisa.yml", listing_6),
                                         simulation], tmp_path)  # fmt: skip
    assert "deisa.Bridge created" in output
    got = received(shared_dask, "gtemp")
    assert sorted(got) == list(range(1, steps)), output[-3000:]  # when: '$step>0'
    for step, field in got.items():
        assert np.array_equal(field, written[step]), step


@pytest.mark.parametrize("binary", ["released_heat", "released_heat_f90"], ids=["c", "fortran"])
def test_released_example_reaches_dask_bitwise(
    built: Path, tmp_path: Path, shared_dask: DaskProcesses, binary: str
) -> None:
    """The released plugin's example YAML, unchanged (its `scheduler_info: scheduler.json' is
    relative: the run's directory holds the scheduler file): the inside of every rank's ghosted
    block (`subsize' and `start' of `local_t') reaches `global_t' at its place in the 2x2 grid,
    bitwise as decl_hdf5 writes it; the time axis holds `$MaxtimeSteps' steps, and the two steps
    the code exposes past it are not published, with one warning line."""
    config, written = released_reference(tmp_path, binary)
    if binary.endswith("_f90"):  # the same bytes as the C code
        assert np.array_equal(written, released_reference(tmp_path, "released_heat")[1])
    maxsteps = RELEASED_CONFIG["MaxtimeSteps"]
    assert written.shape == (maxsteps, 8, 12)
    assert (tmp_path / "scheduler.json").read_text() == shared_dask.scheduler_file.read_text()
    output = run(program(binary), [config, SOURCES / "released_deisa.yml"], tmp_path)
    past = re.findall(r"Step (\d+) of `global_t' is past the end of its time axis \(length "
                      r"(\d+), `deisa_arrays.global_t.size\[0\]'\)", output)  # fmt: skip
    assert past == [(str(maxsteps), str(maxsteps))], output[-3000:]
    got = received(shared_dask, "global_t")
    assert sorted(got) == list(range(maxsteps))
    for step, field in got.items():
        assert np.array_equal(field, written[step]), step
    assert np.unique(got[0]).size == 8 * 12  # each cell its own value: no ghost, no block twice


def test_released_init_on_creates_the_bridge_at_that_event(built: Path, tmp_path: Path) -> None:
    """`init_on' is honoured: the Bridge is created (and connects) at that event, once the
    metadata are shared, before any publication; without the key, only at the first one."""
    config = write_yaml(tmp_path / "config.yml", {**RELEASED_CONFIG, "MaxtimeSteps": 0,
                                                   "extra_steps": 0})  # fmt: skip
    tree = yaml.safe_load((SOURCES / "released_deisa.yml").read_text())
    run(program("released_heat"), [config, SOURCES / "released_deisa.yml"], tmp_path / "init_on",
        stub_env(tmp_path / "init_on"))  # fmt: skip
    for rank, start in enumerate([[0, 0], [0, 6], [4, 0], [4, 6]]):
        log = bridge_log(tmp_path / "init_on", rank)
        assert log["scheduler_file"] == "scheduler.json"
        spec = {"dtype": "float64", "global_shape": [8, 12], "start": start, "shape": [4, 6]}
        assert log["arrays"] == {"global_t": spec}
        assert log["publish"] == []

    del tree["pdi"]["plugins"]["deisa"]["init_on"]
    without = write_yaml(tmp_path / "without_init_on.yml", tree)
    run(program("released_heat"), [config, without], tmp_path / "without", stub_env(tmp_path))
    assert not list((tmp_path / "without").glob("bridge_*.json"))  # never created


def test_older_grammars_carry_deisa_features(built: Path, tmp_path: Path) -> None:
    """The keys of every grammar keep their meaning in the released plugin's: Bridge options
    (placement, flow control, sync mode) and a plugin-level `when'."""
    config = write_yaml(tmp_path / "config.yml", {**RELEASED_CONFIG, "extra_steps": 0})
    tree = yaml.safe_load((SOURCES / "released_deisa.yml").read_text())
    tree["pdi"]["plugins"]["deisa"].update(
        placement="locality", buffer_nb=2, mode="sync", when="$timestep % 2 = 1"
    )
    pdi = write_yaml(tmp_path / "features.yml", tree)
    run(program("released_heat"), [config, pdi], tmp_path / "run", stub_env(tmp_path / "run"))
    log = bridge_log(tmp_path / "run", 0)
    expected = {"placement": "locality", "buffer_nb": 2, "mode": "sync"}
    assert {key: log["options"][key] for key in expected} == expected
    assert [p["step"] for p in log["publish"]] == [1, 3]


CHECKER = """\
import sys
import h5py
import numpy as np
from deisa import Adapter

path, name, first, last = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
with h5py.File(path, "r") as f:
    written = f[name][...]
with Adapter.from_env() as adapter:
    steps = []
    for step, field in adapter[name].items():
        assert np.array_equal(field.compute(), written[step]), step
        steps.append(step)
assert steps == list(range(first, last)), steps
print(f"grammar checker: {name} steps {first} to {last - 1} bitwise", flush=True)
"""


@pytest.mark.timeout(900)
@pytest.mark.parametrize(
    "case", ["paper-c", "released-c", "released-fortran"], ids=lambda case: case
)
def test_older_grammars_under_deisa_run(built: Path, tmp_path: Path, case: str) -> None:
    """``deisa-run -- ./sim``: the scheduler file the YAML names (the paper's
    /home/user/xp/sched.json, the example's scheduler.json, relative to a directory that has
    none) is overridden by deisa-run's, one line saying so, and every step arrives bitwise as
    decl_hdf5 writes it, over deisa-run's mutual TLS."""
    if case == "paper-c":
        simulation, _ = paper_reference(tmp_path)
        pdi = paper_yaml(tmp_path / "paper_deisa.yml", LISTING_6)
        binary, args = program("paper_heat"), [pdi, simulation]
        name, key, first, last = "gtemp", "scheduler_file: /home/user/xp/sched.json", 1, 5
        reference = tmp_path / "hdf5" / "data.h5"
    else:
        binary_name = "released_heat" if case == "released-c" else "released_heat_f90"
        binary = program(binary_name)
        config, _ = released_reference(tmp_path, binary_name)
        args = [config, SOURCES / "released_deisa.yml"]
        name, key, first, last = "global_t", "scheduler_info: scheduler.json", 0, 4
        reference = tmp_path / f"hdf5-{binary_name}" / "global_t.h5"
    assert not (REPO / Path(key.split(": ")[1])).exists()  # deisa-run runs it from REPO
    checker = tmp_path / "checker.py"
    checker.write_text(CHECKER)
    out = tmp_path / "out"
    proc = deisa_run(
        "--ranks", "4", "--workers", "2", "--timeout", "240", "--output", str(out),
        "--analytics", f"{checker} {reference} {name} {first} {last}",
        "--", str(binary), *map(str, args), timeout=800,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-4000:] + proc.stdout[-2000:]
    assert f"grammar checker: {name} steps {first} to {last - 1} bitwise" in proc.stdout
    scheduler_file = (out / "scheduler.json").absolute()
    assert (
        f"deisa-run: the scheduler file is {scheduler_file}: it overrides the one a PDI YAML "
        "names (scheduler_file, scheduler_info) through DEISA_SCHEDULER_FILE_OVERRIDE"
    ) in proc.stderr
    log = (out / "logs" / "simulation.log").read_text()
    overridden = (
        f"`{key}' of the YAML is overridden by DEISA_SCHEDULER_FILE_OVERRIDE=`{scheduler_file}' "
        "(deisa-run's scheduler file)"
    )
    assert log.count(overridden) == 1, log[-3000:]  # rank 0 says it, for every rank
    assert os.environ.get("DEISA_SCHEDULER_FILE_OVERRIDE") is None  # the run's alone
