"""Libraries planted by another account for the loaders of a run (issue 53): each attack is
first shown to work against the unsafe setting (the positive control: the old check, or the
loader itself), then refused by ``deisa-run`` by default (exit 2, naming what is at fault,
locally and for Slurm) and by the Slurm job on its node.

The attacker is a real second account of the machine (:func:`attack.stranger`, made with
``useradd`` if absent); its library writes the uid that loaded it into a marker, which must
never appear once blocked. The node's shared directory is one of the test's own, mode 1777.

- **A sticky plugin directory** (item 3): root's 1777 directory in ``ADIOS2_PLUGIN_PATH``
  holds the engine's name deisa checked (``libdeisa_adios2_engine.so``); the stranger adds
  ``deisa_adios2_engine``, the first name ADIOS2's loader tries.
- **An empty RUNPATH entry** (item 2): CMake's build RPATH ended in ``:``, which the loader
  reads as the working directory, before its own cache: a library needed from there is the
  stranger's.
- **A relative plugin path** (item 5 of the review): ``ADIOS2_PLUGIN_PATH=plugins`` made the
  guard's ``LD_PRELOAD`` relative, preloaded from wherever a child process goes.

The embedded interpreter's attack (item 1), which needs PDI or ADIOS2, is in
tests/test_planted_interpreter.py.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from attack import stranger
from launcher.test_checks import USER_CODE, library, refused
from launcher.test_elf import needs_cc, shared_library
from launcher.test_job_script import _job, script_of

from deisa.launcher.adios2_engine import ENGINE_FILE, GUARD_FILE
from deisa.launcher.libraries import adios2_names, library_problem
from deisa.launcher.options import RUN
from deisa.launcher.parse import run_settings
from deisa.launcher.plan import make_plan
from deisa.launcher.security import path_problem
from deisa.launcher.solver import PLUGIN_FILE


@pytest.fixture
def shared() -> Iterator[Path]:
    """The node's shared temporary directory: root's, mode 1777, as ``/tmp``."""
    path = Path(tempfile.mkdtemp(prefix="deisa-shared-", dir="/tmp"))
    path.chmod(0o1777)
    yield path
    shutil.rmtree(path, ignore_errors=True)


def loaded_by_the_user(library: Path, cwd: Path | None = None) -> None:
    """``library`` loaded by a process of this account (``dlopen``, as ADIOS2 and PDI do)."""
    code = f"import ctypes; ctypes.CDLL({str(library)!r})"
    subprocess.run([sys.executable, "-c", code], cwd=cwd, check=True, timeout=120)


def test_positive_control_adios2s_first_name_in_a_sticky_plugin_dir_runs_as_the_user(
    shared: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Root's 1777 plugin directory holds the engine and its guard; the stranger adds
    ``deisa_adios2_engine``. The old check (of ``libdeisa_adios2_engine.so``, the sticky bit
    excusing its directory) passed, and the name ADIOS2 tries first runs as the user. deisa-run
    now refuses the directory, then, private again, the planted name in it."""
    account = stranger()
    plugins = shared / "plugins"
    library(plugins / ENGINE_FILE)
    library(plugins / GUARD_FILE)
    plugins.chmod(0o1777)
    marker = shared / "marker"
    account.plant_library(plugins / "deisa_adios2_engine", marker)
    assert path_problem(plugins / ENGINE_FILE) is None  # what deisa-run checked: accepted
    first = next(plugins / n for n in adios2_names("deisa_adios2_engine") if (plugins / n).exists())
    assert first.name == "deisa_adios2_engine"  # what ADIOS2 loads
    loaded_by_the_user(first)
    assert marker.read_text() == "0"  # run as root
    marker.unlink()

    monkeypatch.setenv("ADIOS2_PLUGIN_PATH", str(plugins))
    argv = ["--build-dir", str(tmp_path / "no-build"), "-o", str(tmp_path / "out"), *USER_CODE]
    for command in ([], ["slurm"]):
        err = refused(capsys, *command, *argv)
        assert f"{plugins} is writable by other accounts (mode 1777)" in err, err
        assert "the sticky bit does not stop that" in err
    plugins.chmod(0o755)  # root's alone now; the stranger's file stays
    err = refused(capsys, *argv)
    assert (
        f"{plugins / 'deisa_adios2_engine'} belongs to another account (uid {account.uid})" in err
    )
    assert not marker.exists() and not (tmp_path / "out").exists()


@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")
def test_the_job_checks_its_plugin_directories_again(
    shared: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A plugin directory private when ``deisa-run slurm`` wrote the job, opened (1777) and
    planted before the job runs: the job stops before any step, naming it."""
    account = stranger()
    plugins = shared / "plugins"
    library(plugins / ENGINE_FILE)
    library(plugins / GUARD_FILE)
    monkeypatch.setenv("ADIOS2_PLUGIN_PATH", str(plugins))
    argv = ["--build-dir", str(tmp_path / "no-build"), "-o", str(tmp_path / "out"), *USER_CODE]
    script = script_of(*argv)
    assert "-m deisa.launcher.libraries" in script
    assert _job(script, tmp_path).returncode == 0  # as checked
    (tmp_path / "calls" / "srun").unlink()
    plugins.chmod(0o1777)
    account.plant_library(plugins / "deisa_adios2_engine", shared / "marker")
    done = _job(script, tmp_path)
    assert done.returncode == 1, done.stderr
    assert f"ADIOS2_PLUGIN_PATH entry {plugins}: {plugins} is writable by other" in done.stderr
    assert not (tmp_path / "calls" / "srun").exists()
    assert not (shared / "marker").exists()


PROBE = "int deisa_probe(void) { return 7; }\n"
MAIN = "int deisa_probe(void);\nint main(void) { return deisa_probe() == 7 ? 0 : 1; }\n"


@needs_cc
def test_positive_control_an_empty_runpath_entry_loads_the_strangers_library(
    shared: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A program whose RUNPATH ends in ``:`` (as CMake padded the build tree's), started from
    a 1777 directory where the stranger put the library it needs, runs the stranger's code as
    the user. deisa-run refuses a build whose plugin has such a RUNPATH, naming it."""
    account = stranger()
    lib = tmp_path / "lib"
    lib.mkdir(mode=0o755)
    probe = lib / "libdeisa_probe.so"
    probe.with_suffix(".c").write_text(PROBE)
    subprocess.run(["cc", "-shared", "-fPIC", "-o", str(probe), str(probe.with_suffix(".c"))],
                   check=True, timeout=120)  # fmt: skip
    (tmp_path / "main.c").write_text(MAIN)
    program = tmp_path / "program"
    subprocess.run(["cc", "-o", str(program), str(tmp_path / "main.c"), f"-L{lib}",
                    "-ldeisa_probe", "-Wl,-rpath,/nonexistent-deisa:", "-Wl,--enable-new-dtags"],
                   check=True, timeout=120)  # fmt: skip
    marker = shared / "marker"
    account.plant_library(shared / "libdeisa_probe.so", marker, PROBE)
    subprocess.run([str(program)], cwd=shared, check=True, timeout=120)
    assert marker.read_text() == "0"  # the stranger's library, loaded from the working directory
    marker.unlink()
    assert "its RUNPATH has an empty entry" in (library_problem(program) or "")

    build = tmp_path / "build"
    (build / "plugin").mkdir(parents=True, mode=0o755)
    plugin = shared_library(build / "plugin" / PLUGIN_FILE, "-Wl,-rpath,/usr/lib:")
    plugin.with_suffix(".c").unlink()
    for command in ([], ["slurm"]):
        err = refused(capsys, *command, "--build-dir", str(build), "-o", str(tmp_path / "o"),
                      *USER_CODE)  # fmt: skip
        assert f"--build-dir: {plugin}: its RUNPATH has an empty entry" in err, err
    assert not marker.exists()


def test_positive_control_a_relative_plugin_path_preloads_from_where_a_child_goes(
    shared: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``ADIOS2_PLUGIN_PATH=plugins`` (relative) made the guard's ``LD_PRELOAD`` relative: a
    child that changes directory preloads the stranger's library there. deisa-run refuses the
    relative entry, and hands over an absolute, resolved path for a link."""
    account = stranger()
    marker = shared / "marker"
    (shared / "plugins").mkdir(mode=0o777)
    (shared / "plugins").chmod(0o777)
    account.plant_library(shared / "plugins" / GUARD_FILE, marker)
    preload = f"plugins/{GUARD_FILE}"  # what the old plan handed over
    subprocess.run(["sh", "-c", f"cd {shared} && exec true"], cwd=tmp_path, timeout=120,
                   env={**os.environ, "LD_PRELOAD": preload}, capture_output=True)  # fmt: skip
    assert marker.read_text() == "0"
    marker.unlink()

    mine = tmp_path / "mine"
    library(mine / "plugins" / ENGINE_FILE)
    library(mine / "plugins" / GUARD_FILE)
    monkeypatch.chdir(mine)
    monkeypatch.setenv("ADIOS2_PLUGIN_PATH", "plugins")
    argv = ["--build-dir", str(tmp_path / "no-build"), "-o", str(tmp_path / "o"), *USER_CODE]
    for command in ([], ["slurm"]):
        err = refused(capsys, *command, *argv)
        assert "ADIOS2_PLUGIN_PATH entry plugins: plugins is relative" in err, err
    (tmp_path / "link").symlink_to(mine / "plugins")
    monkeypatch.setenv("ADIOS2_PLUGIN_PATH", str(tmp_path / "link"))
    plan = make_plan(run_settings(RUN, argv))
    env = plan.simulation.environment({})
    assert env["LD_PRELOAD"] == str(mine / "plugins" / GUARD_FILE)  # absolute, resolved
    assert env["ADIOS2_PLUGIN_PATH"] == str(mine / "plugins")
    assert not marker.exists()


def test_a_sticky_plugin_directory_in_the_build_is_refused(
    shared: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The build's ``plugin/`` made 1777 (the plugin itself still the user's): PDI searches it
    first for every plugin a YAML names, and the stranger adds ``libpdi_mpi_plugin.so``,
    which runs as the user once loaded. The old check (every file and parent, sticky
    directories excused) passed; deisa-run refuses the directory."""
    account = stranger()
    build = shared / "build"  # the user's, 0755, under a sticky /tmp: fine as a path
    plugin = library(build / "plugin" / PLUGIN_FILE)
    (build / "plugin").chmod(0o1777)
    marker = shared / "marker"
    planted = account.plant_library(build / "plugin" / "libpdi_mpi_plugin.so", marker)
    assert path_problem(plugin) is None  # what deisa-run checked: accepted
    loaded_by_the_user(planted)
    assert marker.read_text() == "0"
    marker.unlink()
    for command in ([], ["slurm"]):
        err = refused(capsys, *command, "--build-dir", str(build), "-o", str(tmp_path / "o"),
                      *USER_CODE)  # fmt: skip
        assert f"--build-dir: {build / 'plugin'} is writable by other accounts (mode 1777)" in err
    assert not marker.exists()
