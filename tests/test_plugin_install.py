"""``cmake --install build --component deisa_plugin`` (README, "From a C code with PDI").

The plugin goes to PDI's own plugin directory, where PDI 1.12 looks after ``PDI_PLUGIN_PATH``
(``<PDI prefix>/lib/pdi/plugins_<version>``, read from PDI's CMake package), whatever
``CMAKE_INSTALL_PREFIX`` is; installed under a ``DESTDIR`` in ``tmp_path``, that copy alone
(``PDI_PLUGIN_PATH`` names only it) runs the C heat solver against real Dask processes.
"""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import numpy as np
import pytest
import yaml
from conftest import (
    BUILD,
    REPO,
    STARTUP,
    DaskProcesses,
    mpirun,
    pdi_installed,
    test_env,
    write_config,
)

from deisa_simulation.heat import HeatConfig, reference_field

pytestmark = pytest.mark.pdi

PLUGIN_FILE = "libpdi_deisa_plugin.so"


def pdi_plugin_directory(config: Path) -> Path:
    """PDI's plugin directory as its CMake package (``<prefix>/share/pdi/cmake``) declares it."""
    declared = re.search(r'set\(PDI_DEFAULT_PLUGINDIR\s+"([^"]+)"', config.read_text())
    assert declared, f"no PDI_DEFAULT_PLUGINDIR in {config}"
    directory = Path(declared.group(1))
    return directory if directory.is_absolute() else config.parents[3] / directory


def test_plugin_installs_into_pdis_plugin_directory_and_runs_from_there(
    built: Path, tmp_path: Path, dask_processes: DaskProcesses
) -> None:
    config = pdi_installed()
    assert config is not None  # `built' skipped without PDI
    destdir, prefix = tmp_path / "destdir", tmp_path / "prefix"
    install = ["cmake", "--install", str(BUILD), "--component", "deisa_plugin"]
    proc = subprocess.run(
        [*install, "--prefix", str(prefix)],
        env={**os.environ, "DESTDIR": str(destdir)},
        capture_output=True,
        text=True,
        timeout=STARTUP,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    installed = destdir / pdi_plugin_directory(config).relative_to("/") / PLUGIN_FILE
    assert [p for p in destdir.rglob("*") if not p.is_dir()] == [installed]
    assert not prefix.exists()  # CMAKE_INSTALL_PREFIX does not move it
    ldd = subprocess.run(["ldd", str(installed)], capture_output=True, text=True, timeout=STARTUP)
    assert "not found" not in ldd.stdout, ldd.stdout  # its RUNPATH keeps libpython's directory

    simulation = write_config(
        tmp_path / "simulation.yml", global_size=[16, 12], process_grid=[2, 1], steps=3
    )
    pdi = yaml.safe_load((REPO / "configs" / "heat_deisa.yml").read_text())
    pdi["plugins"]["deisa"]["write"].pop("dtemp")  # nobody reads gdtemp here
    pdi["plugins"]["deisa"]["scheduler_file"] = str(dask_processes.scheduler_file)
    pdi["logging"] = "trace"  # PDI names the file of each plugin it loads
    (tmp_path / "pdi.yml").write_text(yaml.safe_dump(pdi))
    env = test_env()
    env["PDI_PLUGIN_PATH"] = str(installed.parent)  # the installed copy, nothing else
    heat = mpirun(2, str(BUILD / "simulation" / "heat"), str(simulation), "pdi.yml")
    run = subprocess.run(heat, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=180)
    output = run.stdout + run.stderr
    assert run.returncode == 0, output[-3000:]
    loaded = re.findall(rf"Loaded `([^']*{re.escape(PLUGIN_FILE)})'", output)
    assert loaded == [str(installed)] * 2, output[-3000:]  # one per rank, this copy

    from deisa import Adapter

    heat_config = HeatConfig.from_yaml(simulation)
    with dask_processes.client() as client:
        received = {step: field.compute() for step, field in Adapter(client)["gtemp"].items()}
    assert sorted(received) == list(range(heat_config.steps))
    for step, field in received.items():
        assert np.array_equal(field, reference_field(heat_config, step)), step
