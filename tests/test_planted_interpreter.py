"""The interpreter that deisa embeds (the PDI plugin's, the ADIOS2 engine's) imports nothing
from where the simulation runs (issue 53, item 1).

pybind11's default start puts the working directory (``''``) first on ``sys.path``; a
simulation started from a shared directory, as the system's temporary directory is, then
imported the ``deisa/``, ``numpy/`` and ``mpi4py/`` that another account left there, as the
user, in every rank. The attacker is a real second account (:func:`attack.stranger`); its
packages write the uid that imported them into a marker.

The positive control runs the same embedded interpreter code with pybind11's default start
(``deisa_embedded_import --pybind11-default``, the plugin's start before): the planted
``numpy`` runs as root. Then deisa's start, the C solver through PDI, and an ADIOS2 code
through the engine, each from that directory: nothing planted runs, and the runs analyse every
step.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from attack import Stranger, stranger
from conftest import test_env
from launcher.test_cli import SMALL, check_report
from test_adios2 import (  # noqa: F401 - fixtures
    STEPS,
    adios2_build,
    checker,
    engine_xml,
    ragged,
    ragged_reference,
)

from deisa.launcher import solver
from deisa.launcher.libraries import library_problem

PACKAGES = ("deisa", "numpy", "mpi4py")


@pytest.fixture
def planted() -> Iterator[tuple[Path, Path, Stranger]]:
    """A 1777 directory (root's, as ``/tmp``) where the stranger planted ``deisa/``,
    ``numpy/`` and ``mpi4py/``; the marker their import writes."""
    account = stranger()
    shared = Path(tempfile.mkdtemp(prefix="deisa-shared-", dir="/tmp"))
    shared.chmod(0o1777)
    marker = shared / "marker"
    for package in PACKAGES:
        account.plant_package(shared, package, marker)
    yield shared, marker, account
    shutil.rmtree(shared, ignore_errors=True)


def embedded_import(built: Path, cwd: Path, *argv: str) -> tuple[str, list[str]]:
    """What ``deisa_embedded_import ARGV`` printed, run in ``cwd``, and its ``sys.path``."""
    probe = built / "plugin" / "core" / "deisa_embedded_import"
    done = subprocess.run([str(probe), *argv], cwd=cwd, env=test_env(), capture_output=True,
                          text=True, timeout=300)  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    line = next(x for x in done.stdout.splitlines() if x.startswith("sys.path "))
    return done.stdout, json.loads(line.removeprefix("sys.path "))


def test_positive_control_pybind11s_default_start_imports_the_planted_packages(
    built: Path, planted: tuple[Path, Path, Stranger]
) -> None:
    """Started from the shared directory, pybind11's default start imports the stranger's
    ``numpy`` as root; deisa's start imports the real one, and its ``sys.path`` holds neither
    ``''`` nor the directory."""
    shared, marker, _ = planted
    out, path = embedded_import(built, shared, "--pybind11-default", "numpy")
    assert path[0] == "" and f"imported numpy from {shared}" in out, out
    assert marker.read_text() == "0"  # run as root
    marker.unlink()
    out, path = embedded_import(built, shared, *PACKAGES)
    assert "" not in path and "." not in path and str(shared) not in path, path
    for package in PACKAGES:
        assert f"imported {package} from {shared}" not in out, out
    assert "imported numpy from " in out
    assert not marker.exists()


def test_the_build_has_no_empty_or_relative_runpath(built: Path) -> None:
    """Every library and program of the build carries its install RPATH: no entry the loader
    would read from the working directory (CMake's build RPATH ended in ``:``)."""
    objects = [built / "simulation" / "heat", built / "plugin" / solver.PLUGIN_FILE,
               built / "plugin" / "core" / "deisa_embedded_import",
               *sorted((built / "plugin" / "adios2").glob("libdeisa_*.so"))]  # fmt: skip
    for path in objects:
        assert library_problem(path) is None, library_problem(path)


def deisa_run_in(cwd: Path, *args: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    """``python -P -m deisa.launcher ARGS`` started in ``cwd`` (``-P``: the launcher's own
    Python imports nothing from there either)."""
    return subprocess.run(
        [sys.executable, "-P", "-m", "deisa.launcher", *args],
        env=test_env(), cwd=cwd, capture_output=True, text=True, timeout=timeout,
    )  # fmt: skip


@pytest.mark.timeout(600)
def test_the_c_solver_from_a_shared_directory_imports_nothing_planted(
    built: Path, planted: tuple[Path, Path, Stranger], tmp_path: Path
) -> None:
    problem = solver.c_solver_problem(
        built, Path(__file__).parents[1] / "configs" / "heat_deisa.yml"
    )
    if problem:
        pytest.skip(problem)
    shared, marker, _ = planted
    out = tmp_path / "out"
    proc = deisa_run_in(shared, "--solver", "c", "--ranks", "2", "--workers", "1", *SMALL,
                        "-o", str(out))  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert "c solver" in proc.stderr
    check_report(out, proc.stdout, steps=4, n_components=3)
    assert not marker.exists()


@pytest.mark.timeout(600)
def test_an_adios2_code_from_a_shared_directory_imports_nothing_planted(
    adios2_build: Path,  # noqa: F811 - the fixture of test_adios2
    ragged_reference: Path,  # noqa: F811
    planted: tuple[Path, Path, Stranger],
    tmp_path: Path,
) -> None:
    shared, marker, _ = planted
    xml = engine_xml(tmp_path / "deisa.xml", Mode="sync", Transport="tcp")
    proc = deisa_run_in(
        shared, "--ranks", "4", "--workers", "1", "--timeout", "240",
        "--output", str(tmp_path / "out"),
        "--analytics", checker(tmp_path, ragged_reference, STEPS, "U,V,step,time"),
        "--", ragged(adios2_build), str(xml), "ignored.bp", str(STEPS),
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-4000:] + proc.stdout[-2000:]
    assert f"adios2 checker: U,V,step,time steps {list(range(STEPS))} bitwise" in proc.stdout
    assert not marker.exists()
