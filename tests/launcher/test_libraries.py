"""What deisa hands the loaders (deisa.launcher.libraries): the directories they search by
name, private with no sticky-bit excuse; every name ADIOS2 and PDI try there; the RPATH and
RUNPATH of each library; the entries of the plugin paths and LD_PRELOAD, absolute.

Files of another account are ``chown``-ed to uid 65534, as in test_checks.py (those tests need
root); the attacks themselves, by a real second account, are in test_planted_libraries.py.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from launcher.test_elf import needs_cc, shared_library

from deisa.launcher.libraries import (
    adios2_names,
    handed_problem,
    library_problem,
    main,
    search_dir_problem,
)
from deisa.launcher.security import path_problem

NOBODY = 65534
as_root = pytest.mark.skipif(os.geteuid() != 0, reason="chown to another account needs root")


def test_a_sticky_open_directory_is_no_place_for_a_loader_to_search(tmp_path: Path) -> None:
    """A 1777 directory passes as a path's parent (nobody renames what is there), not as a
    directory a loader searches: anybody may add the name it looks for."""
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o1777)
    assert path_problem(shared) is None  # the rule of the parents: sticky, accepted
    problem = search_dir_problem(shared) or ""
    assert f"{shared} is writable by other accounts (mode 1777)" in problem, problem
    assert "the sticky bit does not stop that" in problem
    missing = shared / "plugins"  # not there yet: another account may make it
    problem = search_dir_problem(missing) or ""
    assert (
        f"{shared} is writable by other accounts (mode 1777) (where {missing} would be made)"
        in problem
    )
    mine = shared / "mine"
    mine.mkdir(mode=0o755)
    assert search_dir_problem(mine) is None  # a sticky parent is fine
    assert search_dir_problem(mine / "not-yet") is None
    mine.chmod(0o775)
    assert "(mode 775)" in (search_dir_problem(mine) or "")
    assert "is relative" in (search_dir_problem(Path("plugins")) or "")


@needs_cc
def test_an_empty_or_relative_runpath_entry_is_refused(tmp_path: Path) -> None:
    private = tmp_path / "lib"
    private.mkdir(mode=0o755)
    good = shared_library(tmp_path / "libgood.so", f"-Wl,-rpath,{private}:$ORIGIN/lib")
    assert library_problem(good) is None
    for rpath, said in (
        (f"{private}:", "its RUNPATH has an empty entry, which the loader reads as the working"),
        (f"lib:{private}", "its RUNPATH entry 'lib' is relative"),
    ):
        lib = shared_library(tmp_path / "libbad.so", f"-Wl,-rpath,{rpath}")
        assert f"{lib}: {said}" in (library_problem(lib) or "")
    old = shared_library(tmp_path / "libold.so", "-Wl,-rpath,:/usr/lib", "-Wl,--disable-new-dtags")
    assert "its RPATH has an empty entry" in (library_problem(old) or "")
    open_dir = tmp_path / "open"
    open_dir.mkdir()
    open_dir.chmod(0o1777)
    lib = shared_library(tmp_path / "libopen.so", f"-Wl,-rpath,{open_dir}")
    problem = library_problem(lib) or ""
    assert (
        f"{lib}: its RUNPATH entry {open_dir}: {open_dir} is writable by other accounts" in problem
    )


def test_every_name_adios2_tries_is_checked(tmp_path: Path) -> None:
    """ADIOS2's loader tries ``L``, ``L.so``, ``libL``, ``libL.so`` in each directory of
    ``ADIOS2_PLUGIN_PATH``; deisa looked at the last alone."""
    assert adios2_names("deisa_adios2_engine") == [
        "deisa_adios2_engine", "deisa_adios2_engine.so",
        "libdeisa_adios2_engine", "libdeisa_adios2_engine.so",
    ]  # fmt: skip
    if os.geteuid() != 0:
        pytest.skip("chown to another account needs root")
    plugins = tmp_path / "plugins"
    plugins.mkdir(mode=0o755)
    (plugins / "libdeisa_adios2_engine.so").write_bytes(b"")
    assert handed_problem("ADIOS2_PLUGIN_PATH", str(plugins)) is None
    for name in adios2_names("deisa_adios2_engine"):
        planted = plugins / name
        planted.write_bytes(b"")
        os.chown(planted, NOBODY, NOBODY)
        problem = handed_problem("ADIOS2_PLUGIN_PATH", f"/usr/lib:{plugins}") or ""
        assert problem.startswith(
            f"ADIOS2_PLUGIN_PATH entry {plugins}: {planted} belongs to another account"
        )
        planted.unlink()
    planted = plugins / "libpdi_mpi_plugin.so"  # any plugin a PDI YAML may name
    planted.write_bytes(b"")
    os.chown(planted, NOBODY, NOBODY)
    problem = handed_problem("PDI_PLUGIN_PATH", str(plugins)) or ""
    assert f"{planted} belongs to another account" in problem


def test_relative_entries_are_refused_and_empty_ones_skipped(tmp_path: Path) -> None:
    for variable in ("ADIOS2_PLUGIN_PATH", "PDI_PLUGIN_PATH"):
        problem = handed_problem(variable, f"{tmp_path}:plugins") or ""
        assert problem.startswith(f"{variable} entry plugins: plugins is relative"), problem
        assert handed_problem(variable, f"::{tmp_path}:") is None
    problem = handed_problem("LD_PRELOAD", f"libc.so.6 {tmp_path}/libx.so:build/liby.so") or ""
    assert problem.startswith("LD_PRELOAD entry 'build/liby.so' is relative"), problem
    assert handed_problem("LD_PRELOAD", "libc.so.6") is None  # the loader's own search


def test_the_job_check_exits_1_naming_what_is_at_fault(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    lib = tmp_path / "libx.so"
    lib.write_bytes(b"")
    assert main([str(lib), f"ADIOS2_PLUGIN_PATH={tmp_path}", "LD_PRELOAD="]) == 0
    assert capsys.readouterr().err == ""
    lib.chmod(0o666)
    assert main([f"PDI_PLUGIN_PATH={tmp_path}", str(lib)]) == 1
    assert (
        capsys.readouterr().err
        == f"deisa: {lib} is writable by other accounts (mode 666): they could change it\n"
    )
    assert main(["ADIOS2_PLUGIN_PATH=rel"]) == 1
    assert "ADIOS2_PLUGIN_PATH entry rel: rel is relative" in capsys.readouterr().err
    assert main([str(tmp_path / "none")]) == 1
    assert "none: no such file" in capsys.readouterr().err
