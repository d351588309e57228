"""``python -m deisa doctor``: each part found or missing, with its fix, and the exit status.

The checks run in process against a monkeypatched environment: a ``PATH`` holding only the
stand-in executables a test names, canned answers to the commands (``mpirun --version``...;
any other command fails the test, so none starts), modules made unimportable through
``sys.modules``. Two tests run real processes (integration layer): ``import deisa`` leaves the
doctor out, and the doctor run on this machine finds PDI, the plugin built in build/plugin, and
the mpirun's MPI in mpi4py.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from conftest import BUILD, REPO, modules_loaded, pdi_installed, test_env

import deisa.doctor
from deisa.__main__ import main as deisa_main
from deisa.doctor import common, mpi, pdi, python
from deisa.doctor.common import MISSING, OK, WARNING, Finding
from deisa.launcher import solver

OPEN_MPI_LIBRARY = "Open MPI v4.1.4, package: Debian OpenMPI, ident: 4.1.4, repo rev: v4.1.4"


class Commands:
    """Stands for :func:`deisa.doctor.common.run_command`: canned ``(status, output)`` by
    executable name; any other command fails the test."""

    def __init__(self) -> None:
        self.answers: dict[str, tuple[int, str]] = {}
        self.ran: list[list[str]] = []

    def __call__(self, argv: list[str]) -> tuple[int, str]:
        self.ran.append(argv)
        name = Path(argv[0]).name
        assert name in self.answers, f"unexpected command {argv}"
        return self.answers[name]


@pytest.fixture(autouse=True)
def commands(monkeypatch: pytest.MonkeyPatch) -> Commands:
    fake = Commands()
    monkeypatch.setattr(common, "run_command", fake)
    return fake


@pytest.fixture
def path_with(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    """``path_with(*names)``: ``PATH`` is a directory holding only executables ``names``."""

    def make(*names: str) -> Path:
        bin_dir = tmp_path / "bin"
        bin_dir.mkdir(exist_ok=True)
        for name in names:
            (bin_dir / name).write_text("#!/bin/sh\nexit 97\n")
            (bin_dir / name).chmod(0o755)
        monkeypatch.setenv("PATH", str(bin_dir))
        return bin_dir

    return make


def open_mpi_library() -> dict[str, Any]:
    return {"version": "4.1.2", "config": {}, "library": OPEN_MPI_LIBRARY, "libmpi": "/l/libmpi.so"}


# -- MPI and mpi4py ----------------------------------------------------------------------------


def test_doctor_mpi_missing_says_how_to_install_one(path_with: Any) -> None:
    path_with()
    finding = mpi.check_mpi()
    assert (finding.status, finding.required) == (MISSING, True)
    assert "neither mpirun nor mpiexec" in finding.found
    assert "apt-get install openmpi-bin" in finding.fix and "module load" in finding.fix
    assert not deisa.doctor.local_run_ready([finding])


def test_doctor_mpi_names_the_mpirun_and_its_version(path_with: Any, commands: Commands) -> None:
    bin_dir = path_with("mpiexec")
    commands.answers["mpiexec"] = (0, "mpiexec (Open MPI) 4.1.6\n\nReport bugs to ...")
    finding = mpi.check_mpi()
    assert finding.status == OK
    assert finding.found == f"Open MPI 4.1.6 ({bin_dir / 'mpiexec'})"
    assert commands.ran == [[str(bin_dir / "mpiexec"), "--version"]]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("mpirun (Open MPI) 4.1.4\n\nReport bugs to http://www.open-mpi.org", "Open MPI 4.1.4"),
        (OPEN_MPI_LIBRARY, "Open MPI 4.1.4"),
        ("HYDRA build details:\n    Version:                 4.2.0\n", "MPICH 4.2.0"),
        ("MPICH Version:      4.2.0\nMPICH Release date: Fri Feb  9 2024", "MPICH 4.2.0"),
        ("MVAPICH2 Version      :\t2.3.7\nMVAPICH2 Release date:", "MVAPICH 2.3.7"),
        ("Intel(R) MPI Library for Linux* OS, Version 2021.10 Build 20230619", "Intel MPI 2021.10"),
        ("Intel(R) MPI Library 2021.10 for Linux* OS\n", "Intel MPI 2021.10"),
        ("Some MPI 1.0", None),
    ],
)
def test_doctor_mpi_flavour_reads_launchers_and_libraries(text: str, expected: str | None) -> None:
    flavour = mpi.mpi_flavour(text)
    assert (f"{flavour[0]} {flavour[2]}" if flavour else None) == expected
    if flavour:
        assert flavour[1] == ("Open MPI" if flavour[0] == "Open MPI" else "MPICH")


def test_doctor_mpi4py_missing_says_how_to_build_it(
    path_with: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    path_with()
    monkeypatch.setitem(sys.modules, "mpi4py", None)
    finding = mpi.check_mpi4py()
    assert (finding.status, finding.required) == (MISSING, True)
    assert "mpi4py does not import" in finding.found
    assert finding.fix == f"MPICC=mpicc {sys.executable} -m pip install --no-binary mpi4py mpi4py"


def test_doctor_mpi4py_of_another_mpi_than_mpirun_is_missing(
    path_with: Any, commands: Commands, monkeypatch: pytest.MonkeyPatch
) -> None:
    bin_dir = path_with("mpirun", "mpicc")
    commands.answers["mpirun"] = (0, "HYDRA build details:\n    Version:   4.2.0\n")
    monkeypatch.setattr(mpi, "mpi4py_library", open_mpi_library)
    finding = mpi.check_mpi4py()
    assert (finding.status, finding.required) == (MISSING, True)
    assert "loads Open MPI 4.1.4 (/l/libmpi.so)" in finding.found
    assert "the mpirun on PATH is MPICH 4.2.0: each rank would run alone" in finding.found
    assert finding.fix.startswith(f"MPICC={bin_dir / 'mpicc'} {sys.executable} -m pip install")
    assert "--no-binary mpi4py mpi4py --force-reinstall" in finding.fix
    assert finding.details["vendor"] == "Open MPI"


def test_doctor_mpi4py_of_another_version_warns(
    path_with: Any, commands: Commands, monkeypatch: pytest.MonkeyPatch
) -> None:
    path_with("mpirun")
    commands.answers["mpirun"] = (0, "mpirun (Open MPI) 4.1.6")
    monkeypatch.setattr(mpi, "mpi4py_library", open_mpi_library)
    finding = mpi.check_mpi4py()
    assert finding.status == WARNING
    assert "the mpirun on PATH is Open MPI 4.1.6" in finding.found
    assert "rebuild mpi4py" in finding.fix
    assert deisa.doctor.local_run_ready([finding])  # a warning does not fail the run


def test_doctor_mpi4py_of_the_mpiruns_mpi_is_ok(
    path_with: Any, commands: Commands, monkeypatch: pytest.MonkeyPatch
) -> None:
    path_with("mpirun")
    commands.answers["mpirun"] = (0, "mpirun (Open MPI) 4.1.4")
    library = {**open_mpi_library(), "config": {"mpicc": "/usr/bin/mpicc"}}
    monkeypatch.setattr(mpi, "mpi4py_library", lambda: library)
    finding = mpi.check_mpi4py()
    assert (finding.status, finding.fix) == (OK, "")
    assert finding.found.startswith("4.1.2 (built with /usr/bin/mpicc) loads Open MPI 4.1.4")


# -- Python packages ---------------------------------------------------------------------------


def test_doctor_dask_missing_or_too_old_names_the_requirement(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    versions = {"dask": "2024.1.0", "distributed": None}
    real = common.installed_version
    monkeypatch.setattr(
        common, "installed_version", lambda name: versions[name] if name in versions else real(name)
    )
    finding = python.check_dask()
    assert (finding.status, finding.required) == (MISSING, True)
    assert "dask 2024.1.0 is older than dask>=2025.1" in finding.found
    assert "distributed is not installed" in finding.found
    assert finding.fix == f"{sys.executable} -m pip install 'dask>=2025.1' 'distributed>=2025.1'"


def test_doctor_tls_missing_gives_the_package_and_insecure(monkeypatch: pytest.MonkeyPatch) -> None:
    for module in ("cryptography", "cryptography.x509"):  # the submodule may be imported
        monkeypatch.setitem(sys.modules, module, None)
    finding = python.check_tls()
    assert (finding.status, finding.required) == (MISSING, True)
    assert "cryptography.x509 does not import" in finding.found
    assert "--force-reinstall cryptography" in finding.fix and "deisa-run --insecure" in finding.fix


def test_doctor_python_without_deisa_run_on_path(path_with: Any) -> None:
    path_with()
    finding = python.check_python()
    assert finding.status == WARNING
    assert "deisa-insitu 0.1.0" in finding.found and "deisa-run is not on PATH" in finding.found
    assert finding.fix == f"export PATH={Path(sys.executable).parent}:$PATH"


def test_doctor_hdf5_missing_is_optional_and_names_the_extra(
    path_with: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    path_with()
    monkeypatch.setitem(sys.modules, "h5py", None)
    finding = python.check_hdf5()
    assert (finding.status, finding.required) == (MISSING, False)
    assert "h5py>=3.8" in finding.fix and "posthoc" in finding.fix
    assert deisa.doctor.local_run_ready([finding])


def test_doctor_ucx_missing_is_optional_and_names_the_extra(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(sys.modules, "distributed_ucxx", None)
    finding = python.check_ucx()
    assert (finding.part, finding.status, finding.required) == ("UCX", MISSING, False)
    assert "distributed_ucxx does not import" in finding.found
    assert "'deisa-insitu[ucx]' (distributed-ucxx-cu12), for --protocol ucx" in finding.fix
    assert deisa.doctor.local_run_ready([finding])


def test_doctor_ucx_names_the_distribution_and_ucxs_version(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(common, "try_import", lambda module: (object(), ""))
    versions = {"distributed-ucxx-cu12": "0.52.0", "libucx-cu12": "1.21.0"}
    monkeypatch.setattr(common, "installed_version", versions.get)
    finding = python.check_ucx()
    assert (finding.status, finding.required) == (OK, False)
    assert finding.found == (
        "distributed-ucxx-cu12 0.52.0, UCX 1.21.0 (deisa-run --protocol ucx --insecure)"
    )
    assert finding.details == {
        "distributions": {"distributed-ucxx-cu12": "0.52.0"},
        "libucx": "1.21.0",
    }


def test_doctor_hdf5_reads_the_c_librarys_configuration(path_with: Any, commands: Commands) -> None:
    path_with("h5cc")
    commands.answers["h5cc"] = (0, "   HDF5 Version: 1.14.3\n   Parallel HDF5: no\n")
    finding = python.check_hdf5()
    assert finding.status == OK
    assert "HDF5 1.14.3 serial (h5cc -showconfig)" in finding.found
    assert finding.details["library_parallel"] is False


# -- PDI, its Python, the plugin ---------------------------------------------------------------


@pytest.fixture
def no_pdi(path_with: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """No PDI where the doctor looks."""
    path_with()
    for name in ("PDI_DIR", "CMAKE_PREFIX_PATH", "PDI_PLUGIN_PATH", "PYTHONHOME"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(pdi, "SYSTEM_PREFIXES", ())


def test_doctor_pdi_missing_is_optional_and_says_how_to_install(no_pdi: None) -> None:
    finding = pdi.check_pdi()
    assert (finding.status, finding.required) == (MISSING, False)
    assert "no PDIConfig.cmake in PDI_DIR, CMAKE_PREFIX_PATH" in finding.found
    assert "spack install pdi@1.12 +python" in finding.fix and "CMAKE_PREFIX_PATH" in finding.fix


def fake_pdi(prefix: Path, version: str, plugins: list[str]) -> Path:
    """A PDI CMake package under ``prefix``, as PDI installs it, with empty plugin files."""
    cmake = prefix / "share" / "pdi" / "cmake"
    cmake.mkdir(parents=True)
    plugindir = f"lib/pdi/plugins_{version}"
    (cmake / "PDIConfig.cmake").write_text(f'set(PDI_DEFAULT_PLUGINDIR  "{plugindir}" )\n')
    (cmake / "PDIConfigVersion.cmake").write_text(f'set(PACKAGE_VERSION "{version}")\n')
    (prefix / plugindir).mkdir(parents=True)
    for name in plugins:
        (prefix / plugindir / f"libpdi_{name}_plugin.so").touch()
    return prefix / plugindir


def test_doctor_pdi_reads_its_package_and_names_each_problem(
    no_pdi: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    plugindir = fake_pdi(tmp_path / "pdi", "1.11.0", ["decl_hdf5", "pycall"])
    monkeypatch.setenv("CMAKE_PREFIX_PATH", str(tmp_path / "pdi"))
    monkeypatch.setenv("PDI_PLUGIN_PATH", "/a:/b")
    monkeypatch.setattr(pdi, "load_libpdi", lambda: "libpdi.so.1: cannot open shared object")
    finding = pdi.check_pdi()
    assert (finding.status, finding.required) == (WARNING, False)
    assert f"PDI 1.11.0 ({tmp_path / 'pdi/share/pdi/cmake'})" in finding.found
    assert f"plugin directory {plugindir} (decl_hdf5, pycall)" in finding.found
    assert "PDI_PLUGIN_PATH=/a:/b" in finding.found
    assert "built and tested against PDI 1.12" in finding.found
    assert "mpi plugin is missing" in finding.found
    assert "libpdi.so.1 does not load" in finding.found
    assert f"export LD_LIBRARY_PATH={tmp_path / 'pdi/lib'}:$LD_LIBRARY_PATH" in finding.fix
    assert finding.details["pdi_plugin_path"] == ["/a", "/b"]


def test_doctor_pdi_python_follows_pythonhome(
    no_pdi: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PYTHONHOME", str(tmp_path))
    finding = pdi.check_pdi_python()
    assert (finding.status, finding.required) == (WARNING, False)
    assert f"PYTHONHOME={tmp_path}: PDI would embed that Python" in finding.found
    assert finding.fix == "unset PYTHONHOME"


@pytest.mark.parametrize("same", [True, False], ids=["this-python", "another-python"])
def test_doctor_pdi_python_is_the_first_python3_on_path(
    no_pdi: None, path_with: Any, commands: Commands, same: bool
) -> None:
    bin_dir = path_with("python3")
    commands.answers["python3"] = (0, sys.prefix if same else "/opt/other")
    finding = pdi.check_pdi_python()
    assert commands.ran == [[str(bin_dir / "python3"), "-c", "import sys; print(sys.prefix)"]]
    if same:
        assert (finding.status, finding.fix) == (OK, "")
    else:
        assert finding.status == WARNING
        assert f"the first python3 on PATH is {bin_dir / 'python3'} (/opt/other)" in finding.found
        assert f"export PATH={Path(sys.executable).parent}:$PATH" in finding.fix


def test_doctor_plugin_missing_says_how_to_build_and_install(
    no_pdi: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    build = tmp_path / "project" / "build"
    monkeypatch.setattr(pdi, "project_build_dir", lambda: build)
    searched = []

    def find_plugin(build_dir: Path) -> solver.Plugin:  # none installed, whatever this machine has
        searched.append(build_dir)
        return solver.Plugin(None, f"not found ({build_dir / 'plugin'} has no plugin)")

    monkeypatch.setattr(solver, "find_plugin", find_plugin)
    finding = pdi.check_plugin()
    assert searched == [build]
    assert (finding.status, finding.required) == (MISSING, False)
    assert finding.found == f"not found ({build / 'plugin'} has no plugin)"
    assert f"cmake -S {build.parent} -B {build} && cmake --build {build}" in finding.fix
    assert f"cmake --install {build} --component deisa_plugin" in finding.fix


def test_doctor_plugin_for_another_python_or_missing_libraries_warns(
    no_pdi: None,
    path_with: Any,
    commands: Commands,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    path_with("ldd")
    monkeypatch.setattr(solver, "find_plugin", lambda build: solver.Plugin(tmp_path, "built here"))
    commands.answers["ldd"] = (
        0,
        "\tlibpython3.9.so.1.0 => /x/lib/libpython3.9.so.1.0 (0x1)\n\tlibpdi.so.1 => not found",
    )
    finding = pdi.check_plugin()
    assert (finding.status, finding.required) == (WARNING, False)
    assert f"by hand: PDI_PLUGIN_PATH={tmp_path}" in finding.found
    assert "it misses libraries: libpdi.so.1" in finding.found
    assert "it embeds Python 3.9" in finding.found
    assert f"-DPython3_EXECUTABLE={sys.executable}" in finding.fix


def test_doctor_plugin_names_what_deisa_run_would_refuse_of_its_loaders(
    no_pdi: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A ``PDI_PLUGIN_PATH`` entry others may write (1777), and a plugin directory open to
    them: a warning naming each, as ``deisa-run`` refuses them."""
    plugins = tmp_path / "plugins"
    plugins.mkdir(mode=0o755)
    (plugins / solver.PLUGIN_FILE).write_bytes(b"")
    monkeypatch.setattr(solver, "find_plugin", lambda build: solver.Plugin(plugins, "built here"))
    monkeypatch.setattr(pdi.shutil, "which", lambda name: None)  # no ldd
    monkeypatch.delenv("PDI_PLUGIN_PATH", raising=False)
    assert pdi.check_plugin().status == OK
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o1777)
    monkeypatch.setenv("PDI_PLUGIN_PATH", f"{plugins}:{shared}")
    plugins.chmod(0o775)
    finding = pdi.check_plugin()
    assert finding.status == WARNING
    assert f"{plugins} is writable by other accounts (mode 775)" in finding.found
    assert f"PDI_PLUGIN_PATH entry {plugins}: " in finding.found
    plugins.chmod(0o755)
    finding = pdi.check_plugin()
    assert (
        f"PDI_PLUGIN_PATH entry {shared}: {shared} is writable by other accounts (mode 1777)"
        in (finding.found)
    )
    assert "deisa-run refuses it" in finding.fix


# -- Slurm -------------------------------------------------------------------------------------


def test_doctor_slurm_missing_is_optional(path_with: Any) -> None:
    path_with("sbatch")
    finding = mpi.check_slurm()
    assert (finding.status, finding.required) == (MISSING, False)
    assert finding.found.startswith("srun not on PATH")
    assert "login node" in finding.fix


@pytest.mark.parametrize("configured", [True, False])
def test_doctor_slurm_version_or_why_not(
    path_with: Any, commands: Commands, configured: bool
) -> None:
    path_with("sbatch", "srun")
    failure = (
        "sbatch: error: fetch_config: DNS SRV lookup failed\n"
        "sbatch: fatal: Could not establish a configuration source"
    )
    commands.answers["sbatch"] = (0, "slurm 23.11.4") if configured else (1, failure)
    finding = mpi.check_slurm()
    if configured:
        assert (finding.status, finding.details["version"]) == (OK, "slurm 23.11.4")
    else:
        assert finding.status == WARNING
        assert "sbatch --version fails: sbatch: fatal: Could not establish" in finding.found
        assert "no Slurm configuration is reachable" in finding.fix


# -- the command -------------------------------------------------------------------------------


def stub(part: str, status: str, required: bool = True) -> Any:
    fix = "" if status == OK else "do this"
    return lambda: Finding(part, status, f"{part} {status}", fix, required=required)


def test_doctor_exit_status_is_1_only_for_what_a_local_run_needs(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    checks = [stub("MPI", OK), stub("Slurm", MISSING, required=False)]
    monkeypatch.setattr(deisa.doctor, "CHECKS", tuple(checks))
    assert deisa.doctor.main([]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[1:] == [
        "ok       MPI           MPI ok",
        "missing  Slurm         (optional) Slurm missing",
        "                       fix: do this",
        "Everything a local run (deisa-run) needs is here.",
        "To look at (optional, or usable as they are): Slurm.",
    ]
    monkeypatch.setattr(deisa.doctor, "CHECKS", (*checks, stub("mpi4py", MISSING)))
    assert deisa.doctor.main([]) == 1
    assert "Missing for a local run: mpi4py (exit status 1)." in capsys.readouterr().out
    assert deisa.doctor.main(["--json"]) == 1
    document = json.loads(capsys.readouterr().out)
    assert document["local_run_ready"] is False
    assert [(f["part"], f["status"], f["required"]) for f in document["findings"]] == [
        ("MPI", OK, True),
        ("Slurm", MISSING, False),
        ("mpi4py", MISSING, True),
    ]


def test_doctor_a_failing_check_is_a_finding(monkeypatch: pytest.MonkeyPatch) -> None:
    def check_broken() -> Finding:
        raise KeyError("surprise")

    monkeypatch.setattr(deisa.doctor, "CHECKS", (stub("MPI", OK), check_broken))
    findings = deisa.doctor.diagnose()
    assert [f.part for f in findings] == ["MPI", "broken"]
    assert findings[1].status == MISSING and "KeyError: 'surprise'" in findings[1].found


def test_python_m_deisa_dispatches_to_the_doctor(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(deisa.doctor, "CHECKS", (stub("MPI", OK),))
    assert deisa_main(["doctor"]) == 0
    assert "ok       MPI" in capsys.readouterr().out
    assert deisa_main(["--help"]) == 0
    assert "doctor" in capsys.readouterr().out
    assert deisa_main([]) == 2
    assert deisa_main(["docter"]) == 2
    assert "unknown command 'docter'" in capsys.readouterr().err


# -- real processes (integration layer: tests/conftest.py PROCESS_TESTS) -----------------------


def test_importing_deisa_leaves_the_doctor_out() -> None:
    loaded = modules_loaded("import deisa\nfrom deisa import Bridge, Adapter")
    assert "deisa.bridge.bridge" in loaded  # the probe imported the library
    assert [m for m in loaded if m.startswith("deisa.doctor")] == []


@pytest.mark.pdi
def test_doctor_here_finds_pdi_the_built_plugin_and_the_mpiruns_mpi(
    built: Path, tmp_path: Path
) -> None:
    """This machine, from a directory of the user's: PDI 1.12, the plugin built in build/plugin
    (no PDI_PLUGIN_PATH), mpi4py on the mpirun's Open MPI; exit status 0."""
    if pdi_installed() is None:
        pytest.skip("PDI 1.12 is not installed")
    env = test_env()
    env.pop("PDI_PLUGIN_PATH", None)
    command = [sys.executable, "-m", "deisa", "doctor"]
    run = subprocess.run(
        [*command, "--json"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300
    )
    assert run.returncode == 0, run.stdout + run.stderr
    document = json.loads(run.stdout)
    assert document["local_run_ready"] is True
    found = {f["part"]: f for f in document["findings"]}
    assert found["PDI"]["status"] == OK and found["PDI"]["details"]["version"].startswith("1.12")
    assert found["deisa plugin"]["status"] == OK
    assert found["deisa plugin"]["details"]["directory"] == str(BUILD / "plugin")
    this_python = f"{sys.version_info.major}.{sys.version_info.minor}"
    assert found["deisa plugin"]["details"]["libpython"] == this_python
    assert found["MPI"]["details"]["vendor"] == "Open MPI"  # the Quick start's openmpi-bin
    assert found["mpi4py"]["status"] == OK
    assert found["mpi4py"]["details"]["vendor"] == "Open MPI"
    assert found["mpi4py"]["details"]["library_version"] == found["MPI"]["details"]["version"]
    text = subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert text.returncode == 0, text.stdout + text.stderr
    lines = text.stdout.splitlines()
    for part, finding in found.items():  # one line each, as in the JSON
        assert f"{finding['status']:<8} {part:<13} " in [line[:23] for line in lines], part
    assert "Everything a local run (deisa-run) needs is here." in lines


# -- ADIOS2 (deisa.doctor.adios2) ------------------------------------------------------------


def fake_adios2(prefix: Path, version: str = "2.12.1", mpi: str = "ON") -> Path:
    """An ADIOS2 CMake package under ``prefix``, as ADIOS2's install writes it."""
    config = prefix / "lib" / "cmake" / "adios2"
    config.mkdir(parents=True)
    (config / "adios2-config.cmake").write_text("include(adios2-config-common.cmake)\n")
    (config / "adios2-config-version.cmake").write_text(f'set(PACKAGE_VERSION "{version}")\n')
    common_file = config / "adios2-config-common.cmake"
    common_file.write_text(f"set(ADIOS2_HAVE_Fortran OFF)\nset(ADIOS2_HAVE_MPI {mpi})\n")
    return config


@pytest.mark.parametrize(
    ("version", "mpi", "status", "says"),
    [
        ("2.12.1", "ON", WARNING, "ADIOS2 2.12.1 ("),
        ("2.12.1", "OFF", WARNING, "the deisa engine needs ADIOS2 >= 2.12 built with MPI"),
        ("2.10.2", "ON", WARNING, "the deisa engine needs ADIOS2 >= 2.12 built with MPI"),
    ],
)
def test_adios2_version_mpi_and_the_engine(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, version: str, mpi: str, status: str, says: str
) -> None:
    """ADIOS2_DIR's package: its version, MPI or not, Fortran or not, and no engine built in a
    build directory without one (a warning: how to build it)."""
    from deisa.doctor import adios2

    config = fake_adios2(tmp_path / "adios2", version, mpi)
    monkeypatch.setenv("ADIOS2_DIR", str(config))
    monkeypatch.setattr(adios2, "project_build_dir", lambda: tmp_path / "build")
    monkeypatch.setattr("deisa.launcher.adios2_engine.PREFIXES", (str(tmp_path / "none"),))
    finding = adios2.check_adios2()
    assert finding.status == status and says in finding.found, finding
    with_mpi = "with MPI" if mpi == "ON" else "without MPI"
    assert f"{with_mpi}, without Fortran; libdeisa_adios2_engine.so not found" in finding.found
    assert finding.details["mpi"] == (mpi == "ON") and finding.details["version"] == version
    assert "cmake" in finding.fix or "install it" in finding.fix


def test_adios2_absent_is_optional(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from deisa.doctor import adios2

    monkeypatch.delenv("ADIOS2_DIR", raising=False)
    monkeypatch.setenv("CMAKE_PREFIX_PATH", str(tmp_path))
    monkeypatch.setattr(adios2, "SYSTEM_PREFIXES", (str(tmp_path / "none"),))
    finding = adios2.check_adios2()
    assert finding.status == MISSING and not finding.required
    assert "install ADIOS2 >= 2.12 with MPI" in finding.fix


# -- openPMD-api (deisa.doctor.openpmd) ------------------------------------------------------


def fake_openpmd(
    prefix: Path, version: str = "0.17.1", mpi: str = "TRUE", adios2: str = "TRUE"
) -> Path:
    """An openPMD-api CMake package and library under ``prefix``, as its install writes them."""
    config = prefix / "lib" / "cmake" / "openPMD"
    config.mkdir(parents=True)
    (config / "openPMDConfig.cmake").write_text(
        f"set(openPMD_HAVE_MPI {mpi})\nset(openPMD_HAVE_HDF5 FALSE)\n"
        f"set(openPMD_HAVE_ADIOS2 {adios2})\n"
    )
    (config / "openPMDConfigVersion.cmake").write_text(f'set(PACKAGE_VERSION "{version}")\n')
    (prefix / "lib" / "libopenPMD.so").write_bytes(b"\x7fELF")
    return config


@pytest.mark.parametrize(
    ("version", "mpi", "adios2", "status", "says"),
    [
        ("0.17.1", "TRUE", "TRUE", OK, "openPMD-api 0.17.1 ("),
        ("0.17.1", "FALSE", "TRUE", WARNING, "reaches the deisa engine through ADIOS2, with MPI"),
        ("0.17.1", "TRUE", "FALSE", WARNING, "reaches the deisa engine through ADIOS2, with MPI"),
        ("0.16.1", "TRUE", "TRUE", WARNING, "needs openPMD-api >= 0.17"),
    ],
)
def test_openpmd_version_adios2_and_mpi(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    version: str,
    mpi: str,
    adios2: str,
    status: str,
    says: str,
) -> None:
    """openPMD_DIR's package: its version, ADIOS2 and MPI or not, its library; what is not
    usable is a warning whose fix names the CMake options and the README's recipe."""
    from deisa.doctor import openpmd

    config = fake_openpmd(tmp_path / "openpmd", version, mpi, adios2)
    monkeypatch.setenv("openPMD_DIR", str(config))
    finding = openpmd.check_openpmd()
    assert finding.status == status and says in finding.found, finding
    assert not finding.required
    words = f"{'with' if adios2 == 'TRUE' else 'without'} ADIOS2, "
    words += f"{'with' if mpi == 'TRUE' else 'without'} MPI; libopenPMD.so in "
    assert words + str(tmp_path / "openpmd" / "lib") in finding.found
    assert finding.details["version"] == version and finding.details["mpi"] == (mpi == "TRUE")
    if status == OK:
        assert not finding.fix
    else:
        assert "-DopenPMD_USE_MPI=ON -DopenPMD_USE_ADIOS2=ON" in finding.fix
        assert "README.md, 'From an openPMD-api code'" in finding.fix


def test_openpmd_package_without_its_library(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A CMake package whose libopenPMD.so is gone (a partial uninstall): a warning."""
    from deisa.doctor import openpmd

    config = fake_openpmd(tmp_path / "openpmd")
    (tmp_path / "openpmd" / "lib" / "libopenPMD.so").unlink()
    monkeypatch.setenv("openPMD_DIR", str(config))
    finding = openpmd.check_openpmd()
    assert finding.status == WARNING, finding
    assert f"libopenPMD.so is not in {tmp_path / 'openpmd' / 'lib'}" in finding.found
    assert "install it again" in finding.fix


def test_openpmd_found_through_cmake_prefix_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from deisa.doctor import openpmd

    fake_openpmd(tmp_path / "prefix")
    monkeypatch.delenv("openPMD_DIR", raising=False)
    monkeypatch.setenv("CMAKE_PREFIX_PATH", str(tmp_path / "prefix"))
    monkeypatch.setattr(openpmd, "SYSTEM_PREFIXES", (str(tmp_path / "none"),))
    finding = openpmd.check_openpmd()
    assert finding.status == OK, finding
    assert finding.details["config"] == str(
        tmp_path / "prefix" / "lib" / "cmake" / "openPMD" / "openPMDConfig.cmake"
    )


def test_openpmd_absent_is_optional(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from deisa.doctor import openpmd

    monkeypatch.delenv("openPMD_DIR", raising=False)
    monkeypatch.setenv("CMAKE_PREFIX_PATH", str(tmp_path))
    monkeypatch.setattr(openpmd, "SYSTEM_PREFIXES", (str(tmp_path / "none"),))
    finding = openpmd.check_openpmd()
    assert finding.status == MISSING and not finding.required
    assert "build openPMD-api >= 0.17 from its sources" in finding.fix
    assert "-DopenPMD_USE_MPI=ON -DopenPMD_USE_ADIOS2=ON" in finding.fix
    assert openpmd.check_openpmd in deisa.doctor.CHECKS  # in `python -m deisa doctor`


@pytest.mark.openpmd
def test_doctor_reports_the_installed_openpmd(monkeypatch: pytest.MonkeyPatch) -> None:
    """The openPMD-api installed here (README.md's recipe): 0.17 or newer, with ADIOS2 and MPI,
    its library in the package's library directory."""
    from deisa.doctor import openpmd

    monkeypatch.delenv("openPMD_DIR", raising=False)
    config = openpmd.openpmd_config_file()
    if config is None:
        pytest.skip("openPMD-api is not installed (README.md: openPMD-api)")
    finding = openpmd.check_openpmd()
    assert finding.status == OK, finding
    assert finding.details["adios2"] and finding.details["mpi"]
    assert Path(finding.details["library"]).is_file()
