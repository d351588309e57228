"""A Fortran code through the deisa ADIOS2 engine, with real ADIOS2 and real processes
(docs/adios2.md, "Fortran").

The project's own Fortran code (tests/adios2/fortran_writer.f90: ADIOS2's Fortran API, a 2-D
uneven decomposition over 4 ranks, a real(8) array Put sync, an integer(4) array Put deferred
with adios2_perform_puts on odd steps, the real(8) array Put from a buffer with ghost cells
through adios2_set_memory_selection, two single values) is compiled with ``mpif90`` against an
ADIOS2 built with Fortran, run once with its XML (tests/adios2/fortran_writer.xml, BP5) and once
under ``deisa-run`` with that XML's engine swapped for deisa, nothing else changed; the
analytics compares every step with what BP5 wrote (read back with the serial ``adios2`` wheel)
and with ``deisa.Replay`` of that ``.bp``: bitwise, dtypes, shapes and chunks included. ADIOS2
records a Fortran io as column-major: a row-major reader sees a Fortran ``NX x NY`` array as
``NY x NX``, ``T(i, j)`` at ``[j - 1, i - 1]``, and so must the analytics.

The ADIOS2 is ``DEISA_TEST_ADIOS2_DIR`` (its install prefix), else the one the project's CMake
finds. The engine is built against that ADIOS2 (CMake, in a temporary directory): a process
never holds two ADIOS2. Every test skips, saying why, where that ADIOS2 has no Fortran (or no
MPI); where it has, a skipped test here fails the run (tests/conftest.py, ``adios2_fortran``
mark; ``DEISA_ALLOW_ADIOS2_SKIP=1`` allows it).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from pathlib import Path

import pytest
from conftest import REPO, adios2_under_test, deisa_run, mpirun, test_env

from deisa.doctor.adios2 import adios2_features
from deisa.launcher.adios2_engine import ENGINE_FILE

pytestmark = pytest.mark.adios2_fortran

STEPS = 4
SOURCE = REPO / "tests" / "adios2" / "fortran_writer.f90"
XML = REPO / "tests" / "adios2" / "fortran_writer.xml"
NX, NY = 11, 7  # the Fortran code's global array, in Fortran's order

CHECKER = r"""
import contextlib
import os
import sys

import adios2
import numpy as np

from deisa import Adapter, Replay

reference, steps, names = sys.argv[1], int(sys.argv[2]), sys.argv[3].split(",")
nx, ny = int(sys.argv[4]), int(sys.argv[5])  # the Fortran code's NX x NY
expected = {name: [] for name in names}
with adios2.Stream(reference, "r") as stream:
    for _ in stream.steps():
        for name in names:
            expected[name].append(np.atleast_1d(stream.read(name)))
with contextlib.suppress(FileNotFoundError):  # ADIOS2's BP5 reader leaves its profile in /tmp
    os.remove(f"/tmp/{os.path.basename(reference)}_{os.getpid():x}_profiling.json")
assert all(len(values) == steps for values in expected.values()), expected
replay = Replay(reference)
with Adapter.from_env() as adapter:
    for step in range(steps):
        # the Fortran code's N(i, j) = (i - 1) * 1000 + j - 1 + step * 100000, at [j - 1, i - 1]
        columns = np.arange(nx)[np.newaxis, :] * 1000 + np.arange(ny)[:, np.newaxis]
        assert np.array_equal(expected["N"][step], columns + step * 100000), expected["N"][step]
        assert expected["G"][step].tobytes() == expected["T"][step].tobytes()  # no ghost cell
        for name in names:
            live = adapter[name][step]  # each step of each array taken once
            replayed = replay[name][step]
            got, want, again = live.compute(), expected[name][step], replayed.compute()
            for other in (want, again):
                same = got.dtype == other.dtype and got.shape == other.shape
                assert same and got.tobytes() == other.tobytes(), (name, step, got, other)
            assert live.chunks == replayed.chunks, (name, step, live.chunks, replayed.chunks)
            print(f"step {step}: {name} {got.dtype} shape {got.shape} chunks {live.chunks}",
                  flush=True)
print(f"adios2 fortran checker: {','.join(names)} steps {list(range(steps))} bitwise", flush=True)
"""


@dataclass(frozen=True)
class FortranAdios2:
    """The ADIOS2 with Fortran under test: its CMake package and its ``adios2-config``."""

    config: Path
    adios2_config: Path

    @property
    def libdir(self) -> Path:
        return self.config.parents[2]  # <libdir>/cmake/adios2/adios2-config.cmake


@pytest.fixture(scope="module")
def fortran_adios2() -> FortranAdios2:
    """The ADIOS2 under test (tests/conftest.py: adios2_under_test); skips, saying why, where it
    has no MPI or no Fortran."""
    config = adios2_under_test()
    given = os.environ.get("DEISA_TEST_ADIOS2_DIR")
    if config is None and given:
        pytest.fail(f"DEISA_TEST_ADIOS2_DIR={given} holds no adios2-config.cmake")
    if config is None:
        pytest.skip("ADIOS2 >= 2.12 with MPI is not installed (README.md: ADIOS2)")
    features = adios2_features(config)
    if not features["mpi"]:
        pytest.skip(f"ADIOS2 {features['version']} ({config.parent}) is built without MPI")
    if not features["fortran"]:
        pytest.skip(
            f"ADIOS2 {features['version']} ({config.parent}) is built without Fortran "
            "(ADIOS2_HAVE_Fortran off): its Fortran bindings are absent; "
            "DEISA_TEST_ADIOS2_DIR=<prefix> names an ADIOS2 built with -DADIOS2_USE_Fortran=ON"
        )
    for tool in ("mpif90", "cmake"):
        assert shutil.which(tool), f"{tool} is needed to build the Fortran ADIOS2 code"
    prefix = config.parents[3]  # <prefix>/<libdir>/cmake/adios2/adios2-config.cmake
    adios2_config = prefix / "bin" / "adios2-config"
    assert adios2_config.is_file(), f"ADIOS2 with Fortran in {prefix} has no bin/adios2-config"
    return FortranAdios2(config, adios2_config)


def run(cmd: list[str], cwd: Path | None = None) -> str:
    proc = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, f"{cmd}:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    return proc.stdout


def adios2_libraries(binary: Path) -> set[Path]:
    """The directories of the ADIOS2 libraries that ``binary`` loads (``ldd``)."""
    found = set()
    for line in run(["ldd", str(binary)]).splitlines():
        name, _, where = line.strip().partition(" => ")
        if name.startswith("libadios2") and where:
            found.add(Path(where.split(" (")[0]).resolve().parent)
    return found


@pytest.fixture(scope="module")
def fortran_build(
    fortran_adios2: FortranAdios2, tmp_path_factory: pytest.TempPathFactory
) -> tuple[Path, Path]:
    """The deisa engine built against the ADIOS2 under test (the project's CMake, PDI left
    out, in a temporary build directory) and the Fortran code compiled by ``mpif90`` with its
    ``adios2-config --fortran-flags/--fortran-libs``: (build directory, executable)."""
    build = tmp_path_factory.mktemp("build-adios2-fortran")
    run(["cmake", "-S", str(REPO), "-B", str(build), "-DCMAKE_DISABLE_FIND_PACKAGE_PDI=TRUE",
         f"-DADIOS2_DIR={fortran_adios2.config.parent}"])  # fmt: skip
    run(["cmake", "--build", str(build), "-j2", "--target", "deisa_adios2_engine",
         "deisa_adios2_guard"])  # fmt: skip
    engine = build / "plugin" / "adios2" / ENGINE_FILE
    assert engine.exists()
    tool = str(fortran_adios2.adios2_config)
    flags = run([tool, "--fortran-flags", "--mpi"]).split()
    libs = run([tool, "--fortran-libs", "--mpi"]).split()
    assert flags and libs, f"{tool} gives no Fortran flags"
    executable = build / "deisa_adios2_fortran"
    run(["mpif90", "-O2", "-o", str(executable), str(SOURCE), *flags, *libs,
         f"-Wl,-rpath,{fortran_adios2.libdir}"], cwd=build)  # fmt: skip
    # one ADIOS2 in the code's process: the one under test, for the code and for the engine
    for binary in (executable, engine):
        assert adios2_libraries(binary) == {fortran_adios2.libdir.resolve()}, binary
    return build, executable


def swapped_xml(path: Path) -> Path:
    """tests/adios2/fortran_writer.xml with its engine swapped for deisa's, nothing else."""
    tree = ET.parse(XML)
    engine = tree.getroot().find("io[@name='SimulationOutput']/engine")
    assert engine is not None
    engine.clear()  # BP5's parameters go with BP5
    engine.set("type", "plugin")
    for key, value in {"PluginName": "deisa", "PluginLibrary": "deisa_adios2_engine"}.items():
        ET.SubElement(engine, "parameter", key=key, value=value)
    tree.write(path)
    return path


@pytest.fixture(scope="module")
def fortran_reference(
    fortran_build: tuple[Path, Path], tmp_path_factory: pytest.TempPathFactory
) -> Path:
    """What the Fortran code writes with its XML (BP5), on 4 ranks."""
    work = tmp_path_factory.mktemp("fortran-bp5")
    cmd = mpirun(4, str(fortran_build[1]), str(XML), "out.bp", str(STEPS))
    proc = subprocess.run(
        cmd, env=test_env(), cwd=work, capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return work / "out.bp"


@pytest.mark.timeout(900)
def test_fortran_code_under_deisa_run_bitwise(
    fortran_build: tuple[Path, Path], fortran_reference: Path, tmp_path: Path
) -> None:
    """deisa-run --build-dir <the engine built against that ADIOS2> -- ./code deisa.xml: every
    step of T (real(8), sync Put), N (integer(4), deferred Put, overwritten after
    adios2_perform_puts), G (T's values from a buffer with ghost cells: a memory selection,
    through the guard deisa-run preloads), step and time arrives as BP5 wrote it and as Replay
    reads it back, bitwise, in the row-major order a C or Python reader of BP5 sees: NY x NX,
    chunked as the ranks wrote it."""
    build, executable = fortran_build
    xml = swapped_xml(tmp_path / "deisa.xml")
    script = tmp_path / "fortran_checker.py"
    script.write_text(CHECKER)
    names = "T,N,G,step,time"
    analytics = f"{script} {fortran_reference} {STEPS} {names} {NX} {NY}"
    proc = deisa_run(
        "--ranks", "4", "--workers", "2", "--timeout", "240", "--output", str(tmp_path / "out"),
        "--build-dir", str(build), "--analytics", analytics,
        "--", str(executable), str(xml), "ignored.bp", str(STEPS), timeout=900,
    )  # fmt: skip
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0, proc.stderr[-4000:] + proc.stdout[-2000:]
    assert f"adios2 fortran checker: {names} steps [0, 1, 2, 3] bitwise" in proc.stdout
    # Fortran's NX x NY (11 x 7, split 9 + 2 and 6 + 1) is NY x NX to a row-major reader
    assert "step 0: T float64 shape (7, 11) chunks ((6, 1), (9, 2))" in proc.stdout
    assert "step 0: N int32 shape (7, 11) chunks ((6, 1), (9, 2))" in proc.stdout
    assert "step 0: G float64 shape (7, 11) chunks ((6, 1), (9, 2))" in proc.stdout
    assert "step 3: step int32 shape (1,) chunks ((1,),)" in proc.stdout
    assert "T: 4 steps published, 4 taken" in output
    assert "the ADIOS2 memory selection guard: preloaded from" in proc.stderr
    engine_dir = build / "plugin" / "adios2"
    assert f"deisa-run: the deisa ADIOS2 engine: built in {engine_dir}" in proc.stderr
    assert not (REPO / "ignored.bp").exists()  # nothing written to a file
